"""A submitted notebook's own process, as its judge runs it (:mod:`gemm_kernels.lab._grade_judge`).

``python -m gemm_kernels.lab._grade_worker``: reads requests on stdin and answers on stdout, one
JSON object per line (:mod:`._grade_wire`); the notebook's printing goes to stderr.  This process
runs the learner's code, so nothing it says is a verdict: it hands the judge values and source.

1. The first request carries the notebook, the cells to skip (those that hung or crashed an
   earlier run) and the limits.  Every code cell runs in order, IPython's magics and shell lines
   left out and the learner's ``check_*(...)`` calls taken out, each stopped after
   ``cell_timeout`` seconds; it says ``{"cell": i, "start": true}`` before and ``{"cell": i,
   "error": ...}`` after each one, then ``{"ready": true, "errors": [...]}``.
2. Then it answers: ``{"op": "describe", "name"}`` (whether the answer is defined, a function,
   a ``@triton.jit`` function, the package's own code), ``{"op": "call", "name", "args",
   "kwargs"}`` (the answer called on the judge's inputs: its value, or what it raised, the tensors
   it was given as they are after the call, and the package functions its own lines called) and
   ``{"op": "code", "name"}`` (the source of a kernel exercise's answer and of what it reads:
   :func:`answer_code`).

The check modules (and their ``*_ref`` references) are never imported here: stand-ins whose
``check_*`` do nothing take their place before the first cell runs.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import resource
import signal
import sys
import time
import types

from . import _grade_wire as wire

#: characters of an error kept for the judge
MESSAGE_LIMIT = 300
#: modules of the package the learner's cells never get (stand-ins take their place)
HIDDEN_MODULES = ("gemm_kernels.lab.exercises", "gemm_kernels.lab.nbgrader_markup")
#: the file name a notebook cell's code runs under (as IPython registers it with linecache), less the index
CELL_FILES = "<submission cell "


def data_mb() -> int:
    """MiB of this process's data segment now (``VmData``; 0 where ``/proc`` does not say)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) >> 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


def start_cuda() -> None:
    """Where a CUDA GPU is visible: its context, cuBLAS and Triton's launcher helpers, made now,
    before :func:`cap_memory`, so the cap counts what the notebook takes and not what torch's CUDA
    build and the context hold (on an H100, 1350 MiB of data segment after importing torch and triton,
    1472 with the context: ``images/bench/gpu_checks/``; a 1 GiB cap counted from the start let no
    shared library load).  Anything that fails here is left for the cells to meet."""
    try:
        import torch

        if not torch.cuda.is_available():
            return
        x = torch.ones(8, 8, device="cuda")
        (x @ x).sum().item()
        import triton

        triton.runtime.driver.active.utils  # noqa: B018  (compiles and loads Triton's CUDA helpers)
    except Exception:  # noqa: BLE001
        pass


def cap_memory(megabytes: int, *, base_mb: int | None = None, soft_only: bool = False) -> None:
    """Cap this process's data segment (RLIMIT_DATA: its private memory; a CUDA context reserves far
    more address space than it uses, so not RLIMIT_AS) at ``megabytes`` (0: none) beyond ``base_mb``
    (default: what it holds now: Python, torch, a CUDA context made by :func:`start_cuda`), never
    above the hard limit it inherited; write no core files.  ``soft_only``: leave the hard limit as
    it is (the judge's, so a notebook's process it starts, whose start-up may be larger, can set its
    own: in a user namespace no process may raise a hard limit)."""
    if megabytes > 0:
        limit = ((data_mb() if base_mb is None else base_mb) + megabytes) << 20
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard if soft_only else limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


#: MiB one file the notebook's process writes may reach (RLIMIT_FSIZE): its log (the judge's file) too
FILE_MB = 256


def _lower(kind: int, value: int) -> None:
    hard = resource.getrlimit(kind)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def cap_resources(memory_mb: int, file_mb: int = FILE_MB, processes: int | None = None, *,
                  base_mb: int | None = None) -> None:
    """:func:`cap_memory`, every file written at most ``file_mb`` MiB (0: no cap; the write past it
    raises OSError "File too large", SIGXFSZ being ignored) and at most ``processes`` tasks of this
    user at once, threads included (RLIMIT_NPROC, which the kernel does not apply to root)."""
    cap_memory(memory_mb, base_mb=base_mb)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if file_mb > 0:
        _lower(resource.RLIMIT_FSIZE, file_mb << 20)
    if processes:
        _lower(resource.RLIMIT_NPROC, processes)


def trimmed(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----------------------------------------------------------------------------- the learner's cells
def plain_python(source: str) -> str:
    """A cell's source without IPython's magics and shell lines (``%time``, ``!pip ...``); a cell
    magic (``%%time``) leaves the whole cell out."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def without_check_calls(tree: ast.Module) -> ast.Module:
    """``tree`` without its top-level expressions that call a ``check_*`` name (they would only
    run the stand-ins)."""
    def calls_check(statement):
        return isinstance(statement, ast.Expr) and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith("check_")
            for n in ast.walk(statement))

    tree.body = [s for s in tree.body if not calls_check(s)]
    return tree


class _Standin(types.ModuleType):
    """A check module as the learner's cells see it while graded: its ``check_*`` do nothing, its
    other public names are callables that say they are unavailable, ``*_ref`` is not there."""

    def __getattr__(self, name):
        if name.startswith("_") or name.endswith("_ref"):
            raise AttributeError(f"{self.__name__}.{name} is not available while a notebook is graded")

        def standin(*args, **kwargs):
            if name.startswith("check_") or name == "graded":
                return standin if name == "graded" else None
            raise RuntimeError(f"{self.__name__}.{name} is not available while a notebook is graded")

        standin.__name__ = name
        standin._gk_standin = (self.__name__, name)
        return standin


def install_standins() -> None:
    from .progress import EXERCISES_PACKAGE, NOTEBOOKS, _module_of

    names = [*HIDDEN_MODULES, *(f"{EXERCISES_PACKAGE}.{_module_of(nb)}" for nb in NOTEBOOKS)]
    names += [f"{EXERCISES_PACKAGE}.{m}" for m in ("_core", "_kernel_checks", "_compile_answer")]
    for name in names:
        module = _Standin(name)
        module.__path__ = []  # a package: its submodules are stand-ins too
        sys.modules[name] = module


class CellTimeout(BaseException):
    """A cell ran past its time (raised by the alarm: a BaseException, so ``except Exception`` in
    the learner's loop does not swallow it)."""


def _on_alarm(signum, frame):
    raise CellTimeout


def run_cell(index: int, source: str, namespace: dict, timeout: float) -> str | None:
    """Run one cell (as ``<submission cell N>``, registered with linecache as IPython does, so
    ``@triton.jit`` and the judge read its source); None, or what went wrong (a line)."""
    filename = f"{CELL_FILES}{index}>"
    source = plain_python(source)
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        tree = without_check_calls(ast.parse(source, filename))
    except SyntaxError as exc:
        return f"cell {index} has a syntax error: {exc.msg} (line {exc.lineno})"
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (the learner's code, in its own process)
    except CellTimeout:
        return f"cell {index} was stopped after {timeout:.3g} s"
    except BaseException as exc:  # noqa: BLE001  (SystemExit too: the learner's cell, reported)
        return f"cell {index} raised {type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return None


# ----------------------------------------------------------------------------- what the judge asks
def _function(obj):
    for _ in range(8):
        if isinstance(obj, types.FunctionType):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def _is_jit(obj) -> bool:
    return type(obj).__name__ in ("JITFunction", "InterpretedFunction", "Autotuner", "Heuristics") \
        and _function(obj) is not None


def _package_dir() -> str:
    """gemm_kernels' own folder (not the folder above it: in a checkout that holds the venv too)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def describe(namespace: dict, name: str) -> dict:
    if name not in namespace:
        return {"defined": False}
    obj = namespace[name]
    fn = _function(obj)
    package = bool(fn and os.path.abspath(fn.__code__.co_filename).startswith(_package_dir())) or (
        fn is None and str(getattr(obj, "__module__", "") or "").startswith("gemm_kernels"))
    out = {"defined": True, "callable": callable(obj), "jit": _is_jit(obj), "package": package,
           "name": str(getattr(fn or obj, "__name__", name))[:80], "type": type(obj).__name__}
    if not callable(obj):
        out["value"] = wire.encode(obj)
    return out


def _module_alias(value) -> str | None:
    return value.__name__ if isinstance(value, types.ModuleType) else None


def answer_code(obj) -> dict:
    """The source of the learner's function ``obj`` and of every function of theirs it reads, with
    the other globals they read: ``{"files": {filename: source}, "functions": [[name, filename,
    first line, last line], ...], "globals": {name: {"module": ...} | {"literal": repr} |
    {"constexpr": repr} | {"dtype": name} | {"other": type}}}``."""
    files, functions, globals_, seen = {}, [], {}, set()

    def add(fn):
        if id(fn) in seen:
            return
        seen.add(id(fn))
        filename = fn.__code__.co_filename
        lines = linecache.getlines(filename)
        if not lines:
            raise ValueError(f"the source of {fn.__name__} cannot be read")
        files[filename] = "".join(lines)
        tree = ast.parse(files[filename])
        node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda))
                     and min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))])
                     <= fn.__code__.co_firstlineno <= (n.end_lineno or n.lineno)
                     and (getattr(n, "name", "<lambda>") == fn.__name__)), None)
        if node is None:
            raise ValueError(f"the source of {fn.__name__} does not define it")
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        functions.append([fn.__name__, filename, first, node.end_lineno or node.lineno])
        scope = dict(fn.__globals__)
        params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} if hasattr(node, "args") else set()
        params |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for ref in sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - params):
            if ref not in scope or ref in globals_:
                continue
            value = scope[ref]
            inner = _function(value)
            if inner is not None and not os.path.abspath(inner.__code__.co_filename).startswith(_package_dir()) \
                    and inner.__code__.co_filename.startswith(CELL_FILES):
                globals_[ref] = {"function": inner.__name__}
                add(inner)
            else:
                globals_[ref] = _global(value)

    add(_function(obj) if _function(obj) is not None else obj)
    return {"files": files, "functions": functions, "globals": globals_}


def _global(value) -> dict:
    owner = getattr(value, "_gk_standin", None)
    if owner is not None:  # a helper the notebook imports from a check module: the judge has the real one
        return {"standin": list(owner)}
    module = _module_alias(value)
    if module is not None:
        return {"module": module}
    kind = type(value)
    if kind.__name__ == "constexpr" and kind.__module__.startswith("triton"):
        inner = getattr(value, "value", None)
        plain = type(inner) in (int, float, bool, str, type(None))
        return {"constexpr": repr(inner)} if plain else {"other": "constexpr"}
    if kind.__name__ == "dtype" and kind.__module__.startswith("triton"):
        return {"dtype": str(getattr(value, "name", ""))}
    if type(value) in (int, float, bool, str, type(None)) or (
            type(value) is tuple and all(type(v) in (int, float, bool, str) for v in value)):
        return {"literal": repr(value)}
    fn = _function(value)
    if fn is not None:  # a library's function (the package's, Triton's): by where it lives
        return {"object": f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}"}
    return {"other": kind.__name__}


def _tensors_after(args) -> list:
    """The tensors among the call's arguments, as they are now (an answer that wrote into its inputs)."""
    import torch

    return [wire.encode(a) if isinstance(a, torch.Tensor) else None for a in args]


def _stub(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) and str(exc).strip() in ("", "your turn"):
            return True
        if re.search(r"NotImplementedError\((\"your turn\"|'your turn')?\)", str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class Callback:
    """A function the check hands the answer (05b's ``rows_match(matmul, ...)``): it stays in the judge,
    which runs it on what this sends and sends back what it returned (plain values both ways).
    The call's time limit is paused meanwhile; at most :data:`CALLBACK_LIMIT` calls per answer call."""

    def __init__(self, index: int, channel):
        self._index, self._channel, self._calls = int(index), channel, 0

    def __call__(self, *args, **kwargs):
        self._calls += 1
        if self._calls > CALLBACK_LIMIT:
            raise RuntimeError(f"the function the check handed you was called more than {CALLBACK_LIMIT} times")
        send, receive = self._channel
        left = signal.setitimer(signal.ITIMER_REAL, 0)[0]  # the judge's time is not the answer's
        try:
            send(callback=self._index, args=[wire.encode(a) for a in args],
                 kwargs={str(k): wire.encode(v) for k, v in kwargs.items()})
            reply = receive()
        finally:
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, left)
        if "raised" in reply:
            kind = str(reply["raised"])
            raise type(kind if kind.isidentifier() else "Error", (Exception,), {})(str(reply.get("message", "")))
        return wire.decode(reply.get("value"))

    def __repr__(self) -> str:
        return "<the check's function>"


#: calls of a check's function (:class:`Callback`) one answer call may make
CALLBACK_LIMIT = 64


def _argument(data, channel):
    return Callback(data["callback"], channel) if type(data) is dict and set(data) == {"callback"} \
        else wire.decode(data)


def serve_call(namespace: dict, request: dict, channel=None) -> dict:
    """The answer called on the request's inputs (``channel``: (send, receive) for :class:`Callback`)."""
    name = str(request["name"])
    if name not in namespace:
        return {"missing": True}
    args = [_argument(a, channel) for a in request.get("args", [])]
    kwargs = {str(k): _argument(v, channel) for k, v in request.get("kwargs", {}).items()}
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, float(request.get("timeout", 30)))
    package, called = _package_dir(), set()

    def note(frame, event, arg):  # the package's functions the answer's own lines call
        if event == "call" and frame.f_back is not None and frame.f_back.f_code.co_filename.startswith("<submission") \
                and frame.f_code.co_filename.startswith(package):
            code = frame.f_code
            called.add(f"{frame.f_globals.get('__name__', '?')}.{getattr(code, 'co_qualname', code.co_name)}")

    sys.setprofile(note)
    try:
        value = namespace[name](*args, **kwargs)
        reply = {"value": wire.encode(value)}
    except CellTimeout as exc:  # told as a timeout, at the line it was stopped in
        reply = {"raised": "TimeoutError", "message": f"did not return within {request.get('timeout', 30)} s",
                 "stub": False, "timeout": True, "where": _where(exc)}
    except BaseException as exc:  # noqa: BLE001  (SystemExit too: told to the judge as what it raised)
        reply = {"raised": type(exc).__name__, "message": trimmed(str(exc), 600), "stub": _stub(exc),
                 "where": _where(exc), "memory": isinstance(exc, MemoryError)}
    finally:
        sys.setprofile(None)
        signal.setitimer(signal.ITIMER_REAL, 0)
    reply["args"] = _tensors_after(args)
    reply["package_calls"] = sorted(called)[:50]
    return reply


def _where(exc: BaseException) -> str:
    """The learner's innermost line in the traceback: ``cell 7, line 3: return n // block``."""
    tb, found = exc.__traceback__, ""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(CELL_FILES):
            line = linecache.getline(filename, tb.tb_lineno).strip()
            found = f"{filename[12:-1]}, line {tb.tb_lineno}: {line}"[:200]
        tb = tb.tb_next
    return found


def _room_in_the_log(file_mb: int) -> None:
    """The log (stderr: the judge's file, capped at ``file_mb`` MiB) emptied once past half of it, so
    a cell that printed up to the cap leaves the cells after it room to print."""
    try:
        sys.stderr.flush()
        if file_mb > 0 and os.fstat(2).st_size > (file_mb << 20) // 2:
            os.ftruncate(2, 0)
    except (OSError, ValueError):
        pass


def main() -> int:
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # the notebook's printing goes to the log, never to the judge

    def send(**message):
        replies.write(wire.dumps(message))

    started = time.monotonic()  # the cells' budget counts the start-up, as the judge's does
    start_cuda()
    start_up_mb = data_mb()  # before the notebook is read: a cell freeing that copy gains no room
    setup = wire.loads(requests.readline())
    file_mb = int(setup.get("file_mb", FILE_MB))
    cap_resources(int(setup.get("memory_mb", 0)), file_mb, setup.get("processes"), base_mb=start_up_mb)
    install_standins()
    namespace = {"__name__": "__main__"}
    errors = []
    skip = set(setup.get("skip", []))
    # all cells together: what the judge has left of the notebook's budget (its runs before this one spent the rest)
    budget_end = started + float(setup.get("cells_budget", float("inf")))
    for index, cell in enumerate(setup["notebook"]["cells"]):
        if cell.get("cell_type") != "code":
            continue
        if str(index) in skip or index in skip:
            errors.append(f"cell {index} was left out: it hung or ended the process in an earlier run")
            continue
        left = budget_end - time.monotonic()
        if left <= 0:
            errors.append(f"cell {index} and those after it were left out: the notebook's cells used up their "
                          f"{setup.get('notebook_timeout', '')} s")
            break
        _room_in_the_log(file_mb)
        send(cell=index, start=True)
        source = cell.get("source", "")
        limit = float(setup.get("cell_timeout", 30))
        error = run_cell(index, "".join(source) if isinstance(source, list) else str(source), namespace,
                         min(limit, left))
        if error and left < limit and error.startswith(f"cell {index} was stopped after"):  # the budget, not the cell
            error = (f"cell {index} was stopped: the notebook's cells had used up their "
                     f"{setup.get('notebook_timeout', '')} s (--notebook-timeout); it and those after it were left out")
        if error:
            errors.append(trimmed(error))
        send(cell=index, error=error and trimmed(error))
    send(ready=True, errors=errors[:20])
    for line in requests:
        request = wire.loads(line)
        op = request.get("op")
        try:
            if op == "describe":
                send(**describe(namespace, str(request["name"])))
            elif op == "call":
                send(**serve_call(namespace, request, (send, lambda: wire.loads(requests.readline()))))
            elif op == "code":
                name = str(request["name"])
                send(**({"missing": True} if name not in namespace else {"code": answer_code(namespace[name])}))
            else:
                send(error=f"unknown request {op!r}")
        except Exception as exc:  # noqa: BLE001  (an answer that cannot be described or sent: the judge says so)
            send(error=trimmed(f"{type(exc).__name__}: {exc}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
