"""The judge of one submitted notebook (started by :mod:`gemm_kernels.lab.grade`): it decides the
verdicts, and never runs the learner's code in its own process.

``python -m gemm_kernels.lab._grade_judge FD SPEC`` (notebooks one after another: :func:`main`).
The judge imports the teacher's checks, then starts the notebook's own process (:mod:`._grade_worker`:
stdin and stdout pipes, nothing else; in the sandbox of :mod:`._sandbox`, or, where the spec says
``"sandbox": false``, none; where no sandbox can be built it grades nothing), which runs every code
cell in order, each stopped after ``cell_timeout`` seconds (a cell that outlives that by far, or kills the
process, is left out and the notebook run again).  Then, per exercise:

* an answer in plain Python is called through :class:`AnswerProxy`: the judge sends the inputs
  its check chose, the notebook's process sends back the value (plain data: :mod:`._grade_wire`),
  and the check, here, compares it with its reference;
* a ``@triton.jit`` answer (and a launcher) is rebuilt here from its source (:mod:`._rebuild`:
  only what Triton code and an allocating launcher need) and the check runs it itself,
  interpreted on a CPU, compiled for sm_90 in its worker.

So nothing the notebook patches, replaces or writes in its process reaches a verdict: no check,
reference or report lives there.  A call that does not return, a process that dies, a reply that
is no plain value: that exercise gets 0 (``timeout``, ``crashed``, ``wrong``).  Events go to FD,
one JSON object per line: ``{"start": title}``, ``{"result": title, "status", "message"}``,
``{"done": true, "sandbox": bool, "cell_errors": [...]}``.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import importlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import _grade_wire as wire
from ._sandbox import (WRITABLE_MB, child_environment, process_limit, sandbox_available,  # noqa: F401
                       sandbox_prefix, sandbox_problem)
from ._grade_worker import CELL_FILES, FILE_MB, HIDDEN_MODULES, cap_memory, start_cuda, trimmed
from .gradebook import read_notebook

#: seconds a notebook's process may take to start (imports) before its first cell
START_S = 120
#: seconds past a cell's own limit before its process is stopped from outside
GRACE_S = 5
#: seconds one call of the learner's function may take
CALL_TIMEOUT_S = 20
#: runs of the notebook's cells at most (each run leaves out the cells that stopped the last one)
MAX_RUNS = 6
#: seconds all of a notebook's cells may take, over all its runs (the grade command's --notebook-timeout):
#: many cells each under its own limit, or cells that outlive it again and again, cost no more
NOTEBOOK_TIMEOUT_S = 120

STATUS_TIMEOUT, STATUS_CRASHED = "timeout", "crashed"


class ChildGone(Exception):
    """The notebook's process stopped answering (the message says how)."""


# ----------------------------------------------------------------------------- the sandbox
# (an allow list: :mod:`._sandbox`; its functions are this module's too, as the grade command knows them)
class NoSandbox(Exception):
    """A notebook that must run sandboxed, on a machine where no sandbox can be built (the message says why)."""


# ----------------------------------------------------------------------------- the notebook's process
#: every notebook's process this judge started and has not yet stopped: it runs in a session of its
#: own, out of reach of a signal to the judge's process group, so the judge stops them as it ends
_STARTED: set = set()
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _dies_with(judge: int) -> None:
    """In the notebook's process before it starts (``preexec_fn``): the kernel kills it when the
    judge ends, however (the grade command's SIGKILL too; in the sandbox ``unshare --kill-child``
    and its own process ids take what it started along)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != judge:  # the judge ended before the line above
        os._exit(1)


@atexit.register
def stop_every_child() -> None:
    """Stop every notebook's process this judge started and has not stopped (as the judge exits)."""
    for proc in list(_STARTED):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        _STARTED.discard(proc)


class Child:
    """The notebook's process: its cells run, then it answers requests (:mod:`._grade_worker`)."""

    def __init__(self, notebook: dict, skip: set, spec: dict, workdir: str, cells_budget: float | None = None):
        command = [sys.executable, "-m", "gemm_kernels.lab._grade_worker"]
        prefix = sandbox_prefix(spec.get("hide", []), spec.get("writable_mb", WRITABLE_MB)) \
            if spec.get("sandbox", True) else None
        if spec.get("sandbox", True) and prefix is None:
            raise NoSandbox(sandbox_problem())
        # in the sandbox only its own /tmp is there to write in
        cache = "/tmp/triton-cache" if prefix is not None else os.path.join(workdir, "triton-cache")
        env = child_environment({"TRITON_CACHE_DIR": cache})
        self.sandboxed = prefix is not None
        self.log = open(os.path.join(workdir, "output.txt"), "ab")
        self.proc = subprocess.Popen([*(prefix or []), *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, cwd=workdir, env=env, start_new_session=True,
                                     preexec_fn=functools.partial(_dies_with, os.getpid()))
        _STARTED.add(self.proc)
        self.buffer = bytearray()
        self.errors: list[str] = []
        self.failure: tuple[str, str] | None = None  # (status, message) once it stopped answering
        # a file it writes (its log here too) is capped, and, sandboxed, the tasks it runs at once
        processes = spec.get("processes", process_limit()) if prefix is not None else None
        os.set_blocking(self.proc.stdin.fileno(), False)  # every write has a deadline (:meth:`_send`)
        self._send({"notebook": notebook, "skip": sorted(skip), "memory_mb": spec["memory_mb"],
                    "file_mb": spec.get("file_mb", FILE_MB), "processes": processes,
                    "cell_timeout": spec["cell_timeout"],
                    "notebook_timeout": spec.get("notebook_timeout", NOTEBOOK_TIMEOUT_S),
                    **({} if cells_budget is None else {"cells_budget": cells_budget})},
                   START_S)  # JSON has no inf

    def _send(self, message: dict, timeout: float) -> None:
        """Write ``message`` (the pipe is non-blocking); a process that has not read it all within
        ``timeout`` seconds (an answer that never reads a callback's reply) is stopped, and its next
        read says so."""
        data = memoryview(wire.dumps(message))
        fd, deadline = self.proc.stdin.fileno(), time.monotonic() + timeout
        try:
            while data:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([], [fd], [], left)[1]:
                    self.stop()
                    self.failure = (STATUS_TIMEOUT, f"the notebook's process did not read what the judge sent it "
                                                    f"within {timeout:g} s: stopped")
                    return
                try:
                    data = data[os.write(fd, data[:1 << 20]):]
                except BlockingIOError:
                    continue
        except OSError:
            pass  # its end is closed: the next read says how it ended

    def read(self, timeout: float) -> dict:
        """The next message (``{"error": ...}`` for a line that is none); ChildGone when it ends or
        says nothing for ``timeout`` seconds."""
        if self.failure is not None:
            raise ChildGone(self.failure[1])
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        # a pipe hands over 64 KiB a read: a bytearray grows in place and each chunk is searched once, so
        # a reply of tens of MB (05b's 4096-square tensors on a GPU) costs its size, not its size squared
        searched = 0
        while (end := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                self.stop()
                self.failure = (STATUS_TIMEOUT, f"still running after {timeout:g} s: stopped")
                raise ChildGone(self.failure[1])
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                self.stop()
                self.failure = (STATUS_CRASHED, f"the notebook's process {self.ended()}")
                raise ChildGone(self.failure[1])
            self.buffer += chunk
            if len(self.buffer) > 2 * wire.BYTES_LIMIT:
                self.stop()
                self.failure = (STATUS_CRASHED, "the notebook's process sent more than a reply")
                raise ChildGone(self.failure[1])
        line, self.buffer = bytes(self.buffer[:end]), self.buffer[end + 1:]
        try:
            return wire.loads(line)
        except Exception:  # noqa: BLE001  (no JSON object: nested too deep, RecursionError, included)
            return {"error": "a reply that is not a message"}

    def request(self, message: dict, timeout: float) -> dict:
        if self.failure is not None:
            raise ChildGone(self.failure[1])
        self._send(message, timeout)
        return self.read(timeout)

    def ended(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if self.sandboxed and code > 128:  # the sandbox's shell says a signal as 128 + its number
            code = 128 - code
        if code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
            return how + (" (by itself, or by the system when memory ran out)" if code == -signal.SIGKILL else "")
        return f"exited with code {code}"

    def alive(self) -> bool:
        return self.failure is None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        _STARTED.discard(self.proc)


def cells_limit_s(budget_s: float) -> float:
    """The most seconds :func:`start_child` takes for a notebook whose cells have ``budget_s`` in all:
    that budget, one start-up and the grace past it.  Nothing the notebook's process says moves it (its
    cells can write to the judge's pipe), so the grade command bounds the judge by it too."""
    return budget_s + START_S + GRACE_S


def start_child(notebook: dict, skip: dict, spec: dict, workdir: str, emit) -> Child:
    """A notebook's process with every cell run: cells that outlive their limit from outside, or
    end the process, are left out (``skip``: cell -> (status, message)) and the cells run again (at
    most :data:`MAX_RUNS` times), all of them within the notebook's budget (``notebook_timeout``: the
    cells' seconds over every run of this start; what is left when it is spent is left out; a later
    start, after an answer ended the process, gets a budget of its own).

    Its deadlines are its own: a process's start-up (no cell of the notebook has run yet) gets
    :data:`START_S`; from its first message on, the cells end with the budget (and :data:`GRACE_S`),
    and every run ends within :func:`cells_limit_s`, whatever the cells write to the pipe (a forged
    ``{"cell": i, "start": true}`` names no cell, or one out of order, and is ignored)."""
    budget_s = float(spec.get("notebook_timeout", NOTEBOOK_TIMEOUT_S))
    started = time.monotonic()
    budget_end, whole_end = started + budget_s, started + cells_limit_s(budget_s)
    left = lambda: max(0.0, budget_end - time.monotonic())  # noqa: E731
    code_cells = {i for i, c in enumerate(notebook.get("cells", [])) if c.get("cell_type") == "code"}
    out_of_time = f"stopped when the notebook's cells had used up their {budget_s:g} s (--notebook-timeout)"
    child = None
    try:
        for _ in range(MAX_RUNS):
            if child is not None and time.monotonic() >= whole_end:
                return child  # stopped by the budget: the next exercise starts the notebook again, its hang left out
            child = Child(notebook, skip, spec, workdir, cells_budget=left())
            current, last, timeout, end, fixed, begun = None, -1, START_S, whole_end, False, False
            try:
                while True:
                    wait = end - time.monotonic()
                    fixed = wait <= timeout  # this read ends at the fixed deadline, not the phase's own limit
                    message = child.read(max(0.0, min(timeout, wait)))
                    if not begun:  # its first message, sent before any cell runs: the cells' time starts
                        begun, end = True, min(whole_end, max(budget_end, time.monotonic()) + GRACE_S)
                    if message.get("ready") is True:
                        errors = message.get("errors")
                        child.errors = [trimmed(e) for e in errors[:20] if isinstance(e, str)] \
                            if isinstance(errors, list) else []
                        return child
                    cell = message.get("cell")
                    if message.get("start") is True:
                        if type(cell) is int and cell in code_cells and cell > last and cell not in skip:
                            current = last = cell
                            timeout = min(spec["cell_timeout"], left()) + GRACE_S
                            emit(cell=current)
                    elif type(cell) is int and cell == current:
                        current, timeout = None, GRACE_S + min(spec["cell_timeout"], left())
            except ChildGone:
                status, message = child.failure
                if status == STATUS_TIMEOUT and (fixed or left() <= 0):  # the notebook's budget, not a cell's limit
                    child.failure = (status, out_of_time)
                    message = out_of_time
                if current is None or current in skip:
                    return child  # the set-up failed: every exercise reports it
                skip[current] = (status, f"cell {current}: {message}; left out")
        return child
    except BaseException:  # whatever went wrong here, the notebook's process does not outlive it
        if child is not None:
            child.stop()
        raise


#: callbacks one call may ask for (the worker stops at its own, smaller, limit)
CALLBACKS_LIMIT = 256


def _run_callback(functions: list, request: dict, device) -> dict:
    """One call of a function the check handed the answer, on the plain values it sent (tensors on
    the check's device): what it returned, or what it raised."""
    import torch

    try:
        index = request["callback"]
        if type(index) is not int or not 0 <= index < len(functions):
            raise ValueError("no such function")
        place = lambda v: v.to(device) if isinstance(v, torch.Tensor) and device is not None else v  # noqa: E731
        args = [place(wire.decode(a)) for a in request["args"]]
        kwargs = {str(k): place(wire.decode(v)) for k, v in dict(request["kwargs"]).items()}
        return {"value": wire.encode(functions[index](*args, **kwargs))}
    except Exception as exc:  # noqa: BLE001  (told to the answer as what it raised)
        return {"raised": type(exc).__name__, "message": trimmed(str(exc), 300)}


class AnswerProxy:
    """The learner's function as the check sees it: each call goes to the notebook's process,
    with the check's inputs, and what comes back is plain data (or the error it raised)."""

    def __init__(self, judge: Judge, name: str, info: dict):
        self._judge, self._name = judge, name
        self.__name__ = str(info.get("name") or name)
        self.__qualname__ = self.__name__
        # the package's own function handed in as the answer: the check refuses it by its module
        self.__module__ = "gemm_kernels.lab.submitted" if info.get("package") else "__main__"

    def __call__(self, *args, **kwargs):
        import torch

        reply = self._judge.call(self._name, args, kwargs)
        calls = reply.get("package_calls")
        if isinstance(calls, list):
            self._judge.package_calls.update(str(c)[:200] for c in calls[:50])
        for given, after in zip(args, reply.get("args") or []):
            if isinstance(given, torch.Tensor) and after is not None:
                try:
                    new = wire.decode(after)
                except (wire.WireError, ValueError, TypeError):
                    continue
                if isinstance(new, torch.Tensor) and new.shape == given.shape and new.dtype == given.dtype:
                    given.copy_(new)
        if "raised" in reply:
            if reply.get("stub"):
                raise NotImplementedError("your turn")
            kind = str(reply["raised"])
            kind = kind if kind.isidentifier() else "Error"
            where = f" ({reply['where']})" if reply.get("where") else ""
            message = f"{trimmed(reply.get('message', ''), 600)}{where}"
            if reply.get("timeout"):
                self._judge.answer_timed_out = message
            if reply.get("memory") is True:  # the notebook's process says what it raised was a MemoryError
                self._judge.answer_out_of_memory = True
            # raised in the answer's process: the message says where, the check's frames here are not the place
            raise type(kind, (Exception,), {"from_answer_process": True})(message)
        if "value" not in reply:  # (told to the check as the answer's error, in plain words)
            raise type("ValueNotSent", (Exception,), {"from_answer_process": True})(
                f"what your answer returned could not be sent to the grader: "
                f"{trimmed(reply.get('error', 'no value came back'))}")
        return wire.decode(reply["value"])

    def __repr__(self) -> str:
        return f"<your {self.__name__}>"


class Judge:
    def __init__(self, spec: dict, emit):
        import nbformat

        self.spec, self.emit = spec, emit
        self.notebook = json.loads(nbformat.writes(read_notebook(spec["path"])))  # a FIFO: refused, not waited on
        self.skip: dict = {}
        self.workdir = tempfile.mkdtemp(prefix="gk-notebook-")
        self.child: Child | None = None
        self.sandboxed = False
        self.package_calls: set = set()  # what the notebook's process says the answer called of the package
        self.answer_timed_out: str | None = None  # a call of the answer stopped at its time limit, during a check
        self.answer_out_of_memory = False  # a call of the answer raised MemoryError, during a check

    def ensure_child(self) -> Child:
        if self.child is None or not self.child.alive():
            if self.child is not None:
                self.child.stop()
            self.child = start_child(self.notebook, self.skip, self.spec, self.workdir, self.emit)
            self.sandboxed = self.child.sandboxed
        return self.child

    def call(self, name: str, args, kwargs) -> dict:
        """The reply to a call of the answer; a function among the arguments stays here and is run
        for the answer (``{"callback": i}``: :class:`._grade_worker.Callback`)."""
        import torch

        functions = []

        def encoded(value):
            if callable(value) and not isinstance(value, (type, torch.Tensor)):
                functions.append(value)
                return {"callback": len(functions) - 1}
            return wire.encode(value)

        message = {"op": "call", "name": name, "args": [encoded(a) for a in args],
                   "kwargs": {k: encoded(v) for k, v in kwargs.items()}, "timeout": CALL_TIMEOUT_S}
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        reply = self.child.request(message, CALL_TIMEOUT_S + GRACE_S)
        for _ in range(CALLBACKS_LIMIT):
            if set(reply) != {"callback", "args", "kwargs"}:
                return reply
            self.child._send(_run_callback(functions, reply, device), CALL_TIMEOUT_S + GRACE_S)
            reply = self.child.read(CALL_TIMEOUT_S + GRACE_S)
        self.child.stop()  # (the notebook's process stops at a smaller limit of its own: it was told otherwise)
        self.child.failure = ("wrong", f"your answer called the function its check handed it more than "
                                       f"{CALLBACKS_LIMIT} times in one call: stopped")
        raise ChildGone(self.child.failure[1])

    def answer(self, name: str, kind: str, title: str = "", check=None):
        """The answer to hand the check, or (status, message) when there is none to check; a kernel
        answer may use only the package code ``check`` allows (its ``hands``)."""
        from ._rebuild import NotRebuilt, rebuild
        from .exercises._kernel_checks import handed, package_answers

        child = self.ensure_child()
        info = child.request({"op": "describe", "name": name}, 60)
        if "error" in info:
            return "error", trimmed(f"the answer could not be read: {info['error']}")
        if not info.get("defined"):
            if self.skip:  # a cell that hung or ended the process, left out: the last before the answer's check
                cells = self.notebook["cells"]
                check = next((i for i, c in enumerate(cells) if c.get("cell_type") == "code"
                              and f"check_{title}(" in "".join(c.get("source", ""))), len(cells))
                before = [i for i in self.skip if i < check]
                status, message = self.skip[max(before) if before else min(self.skip)]
                return status, trimmed(f"no {name} is defined ({message})")
            if child.errors:
                return "error", trimmed(f"no {name} is defined ({child.errors[0]})")
            return "not attempted", f"no {name} is defined"
        if not info.get("callable"):
            return wire.decode(info.get("value"))
        if kind == "plain" or info.get("package"):
            return AnswerProxy(self, name, info)
        reply = child.request({"op": "code", "name": name}, 60)
        if "code" not in reply:
            return "wrong", trimmed(f"the source of {name} could not be read: {reply.get('error', 'missing')}")
        try:
            return rebuild(reply["code"], name, handed(check), package_answers(check))
        except NotRebuilt as exc:
            return "wrong", trimmed(f"the grader runs your code from its source, and refuses this: {exc}")
        except Exception as exc:  # noqa: BLE001  (its own error at definition: a decorator's arguments, ...)
            return "wrong", trimmed(f"your code could not be defined from its source: {type(exc).__name__}: {exc}")

    def verdict(self, check, name: str, kind: str, title: str = "") -> tuple[str, str]:
        try:
            answer = self.answer(name, kind, title, check)
        except ChildGone as exc:
            return self.child.failure or (STATUS_CRASHED, str(exc))
        except Exception as exc:  # noqa: BLE001  (a reply that is no answer: its process is not trusted further)
            if self.child is not None:
                self.child.stop()
                self.child.failure = ("error", "it sent a reply that is no answer")
            return "error", trimmed(f"the notebook's process sent a reply that is no answer ({type(exc).__name__}: "
                                    f"{exc})")
        if isinstance(answer, tuple) and len(answer) == 2 and answer[0] in (
                "error", "not attempted", "wrong", STATUS_TIMEOUT, STATUS_CRASHED) and isinstance(answer[1], str):
            return answer
        self.package_calls, self.answer_timed_out, self.answer_out_of_memory = set(), None, False
        ooms = _cuda_ooms()
        try:
            result = check(answer)
        except BaseException as exc:  # noqa: BLE001  (a check never raises; said, not hidden)
            return "error", trimmed(f"the check could not run: {type(exc).__name__}: {exc}")
        helper = forbidden_call(check, self.package_calls) if result.status == "correct" else None
        if helper is not None:  # as the check in the notebook says it (the process reports it: a courtesy, no lock)
            return "wrong", trimmed(f"your answer calls {helper}, which computes this exercise's answer for you: "
                                    "the check cannot see your own reasoning in it")
        if self.child is not None and self.child.failure is not None:
            return self.child.failure  # the answer hung or ended its process on the way
        text = "; ".join([result.message, *result.details[:3]])
        status = result.status
        if status == "correct" and "(Not compiled for" in text:  # the compile worker could not build it here
            status, text = "not verified", "right in the interpreter, not compiled for sm_90 on this machine: " + text
        # out of memory as the judge knows it, never from a message's words (the answer writes those)
        if status == "wrong" and (self.answer_out_of_memory or _cuda_ooms() > ooms):
            status = "out of memory"
        if status == "wrong" and self.answer_timed_out is not None:  # a hang in the answer, as TEACHING.md says
            status = STATUS_TIMEOUT
        return status, trimmed(text)


def _cuda_ooms() -> int:
    """The CUDA allocations that failed in this process so far (a rebuilt kernel's, run here)."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.cuda.memory_stats().get("num_ooms", 0)) if torch and torch.cuda.is_initialized() else 0
    except Exception:  # noqa: BLE001  (no CUDA, no count)
        return 0


def forbidden_call(check, called: set) -> str | None:
    """The first package function the check forbids (its ``forbid``, or a reference) among ``called``."""
    from .exercises._kernel_checks import helper_computes, package_answers, qualified_name

    try:
        names = {qualified_name(f).replace("gemm_kernels.", "", 1) for f in package_answers(check)}
    except Exception:  # noqa: BLE001  (a forbid list that cannot be read: none)
        names = set()
    short = sorted(c.replace("gemm_kernels.", "", 1) for c in called)
    # (only plain answers, run in the notebook's process, report calls): as the check in the notebook
    found = [c for c in short if c.endswith("_ref") or helper_computes(c, names)]
    return found[0] if found else None


def judge_notebook(spec: dict, emit) -> None:
    """Every exercise of one notebook (``spec``: its path, check module, exercises, those to check)."""
    from .progress import EXERCISES_PACKAGE

    module = importlib.import_module(f"{EXERCISES_PACKAGE}.{spec['module']}")
    checks = {title: getattr(module, f"check_{title}") for title, _, _ in spec["exercises"]}
    from .exercises._core import reset_hints

    reset_hints()  # hints step up with wrong tries: each notebook starts from the first
    if spec.get("sandbox", True) and sandbox_prefix(spec.get("hide", [])) is None:  # fails closed
        for title, _, _ in spec["exercises"]:
            if title in spec["check"]:
                emit(result=title, status="error", message=trimmed(
                    f"not graded: no sandbox here ({sandbox_problem()}); the grader's --no-sandbox runs it without"))
        emit(done=True, sandbox=False, cell_errors=[])
        return
    try:
        judge = Judge(spec, emit)
    except Exception as exc:  # noqa: BLE001  (a file that is no notebook: every exercise says so)
        for title, _, _ in spec["exercises"]:
            if title in spec["check"]:
                emit(result=title, status="error", message=trimmed(f"the notebook cannot be read: "
                                                                   f"{type(exc).__name__}: {exc}"))
        emit(done=True, sandbox=False, cell_errors=[])
        return
    try:
        for title, answer_name, kind in spec["exercises"]:
            if title not in spec["check"]:
                continue
            emit(start=title)
            status, message = judge.verdict(checks[title], answer_name, kind, title)
            emit(result=title, status=status, message=message)
    finally:
        if judge.child is not None:
            judge.child.stop()
        shutil.rmtree(judge.workdir, ignore_errors=True)
    emit(done=True, sandbox=judge.sandboxed, cell_errors=judge.child.errors if judge.child else [])


#: audit events a rebuilt answer may not cause itself (``sys.addaudithook``'s names, by prefix)
GUARDED_EVENTS = ("exec", "compile", "open", "import", "os.", "subprocess.", "socket.", "ctypes.", "sys._getframe",
                  "sys._current_frames", "sys.settrace", "sys.setprofile", "sys.addaudithook", "gc.get_", "marshal.",
                  "pickle.", "shutil.", "code.__new__", "function.__new__", "object.__setattr__", "object.__delattr__",
                  "builtins.input", "builtins.breakpoint", "_posixsubprocess", "signal.", "resource.", "mmap.",
                  "cpython.")


def guard_answers() -> None:
    """A second wall behind :mod:`._rebuild`'s checks: refuse every audited action (``exec``, ``open``,
    ``os.system``, an import, ``ctypes`` ...) whose nearest caller outside the standard library is a
    rebuilt answer (its code's file is a notebook cell).  Triton's own compiling and interpreting,
    called by an answer, are Triton's frames and go on.  An audit hook cannot be removed."""
    import sysconfig
    import threading

    stdlib = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})

    busy = threading.local()

    def hook(event, args):
        if not event.startswith(GUARDED_EVENTS) or getattr(busy, "on", False):
            return
        busy.on = True  # sys._getframe below is an audited event too
        try:
            frame = sys._getframe(1)
        finally:
            busy.on = False
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(CELL_FILES):
                raise RuntimeError(f"the grader does not let an answer do this ({event})")
            if not (name.startswith(stdlib) or name.startswith("<frozen")) or name == __file__:
                return
            frame = frame.f_back

    sys.addaudithook(hook)


def main(argv: list[str]) -> int:
    """SPEC: the limits, and ``"notebooks"``: one notebook's spec after another, judged in turn by this
    one process (its imports and its compile worker serve them all; each notebook has processes of
    its own).  Each event names its notebook (``"notebook": index``)."""
    report = os.fdopen(int(argv[0]), "w", buffering=1)
    spec = json.loads(argv[1])
    memory_mb = int(spec.get("judge_memory_mb", 0))
    if memory_mb > 0:
        start_cuda()  # the cap counts from after CUDA's start-up (see cap_memory)
    cap_memory(memory_mb, soft_only=True)
    guard_answers()
    notebooks = spec.pop("notebooks", None) or [spec]
    try:
        for index, one in enumerate(notebooks):
            def emit(**event):
                report.write(json.dumps({"notebook": index, **event}) + "\n")

            emit(start=None)
            judge_notebook({**spec, **one}, emit)
            assert not any(type(sys.modules.get(name)).__name__ == "_Standin" for name in HIDDEN_MODULES)
    finally:
        stop_every_child()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
