"""Whose code is this line, and a watchdog that stops a learner's code that never ends.

**The learner's code** is every file that is not a library's (this package, Triton, torch,
numpy, the standard library, site-packages): a notebook cell, or their kernel run by Triton's
interpreter.  :func:`learner_file` decides; messages point at those lines, never a checker's.

**The watchdog** (:class:`Watchdog`) runs around every check, in the checking thread only, and
stops the learner's code past a budget with :class:`NeverEnded`: a ``BaseException``, so that
neither the learner's ``except Exception`` nor Triton's interpreter wraps it, and every ``with``
and ``finally`` on the way out (the interpreter lock, the patched builtins) runs as for any error.
Tracing costs too much in the interpreter (it doubles a kernel's time), so there are two meters:

* **Python** (plain answers, launchers): ``sys.settrace`` counts steps, a line of the learner's
  code or a call of a library's Python function from it, per call of the learner's code from a
  library's (:data:`CALL_STEPS`) and per check (:data:`CHECK_STEPS`), nested calls of one
  learner function (:data:`RECURSION_LIMIT`) and the time of a call (:data:`TIME_BUDGET`); it
  stops the code at a line of the learner's.
* **Kernels** (a checked run, :mod:`gemm_kernels.lab.checked`): tracing is off while the
  interpreter runs; the checked run counts the interpreter's operations instead, per program
  (:data:`KERNEL_OPS`) and per launch (:data:`LAUNCH_OPS`), the depth of a ``@triton.jit``
  function calling itself, and the time; it samples which lines of the learner's kernel run
  (:class:`LineSampler`) and stops the kernel at an operation.

A last resort (:class:`_Backstop`) stops a kernel's loop that runs no operation at all, by the
clock.  The message names the loop that never ended: of the learner's frames, the outermost one
still running lines in the last quarter of the budget, and in it the innermost loop that holds
all of those lines (:func:`never_ended`).

A debugger's trace function is left alone (the Python meter and the clock are then off).  Loops
in C code (``list(itertools.count())``) cannot be stopped: checks read iterables with a limit.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import math
import os
import site
import sys
import sysconfig
import threading
import time

#: operations of Triton's interpreter one program of a kernel may run (the notebooks' solutions:
#: at most 2,400, notebook 05b's Stream-K programs; a loop that never ends gets here in about 2 s)
KERNEL_OPS = 50_000
#: operations one launch may run in all (the solutions: at most 15,000): a grid of very many programs
LAUNCH_OPS = 500_000
#: steps (a line of the learner's code, or a call of a library's Python function from it) one
#: call of the learner's code from a library's (the check's) may take, kernels it launches not
#: counted (the solutions: at most about 1,000; a step costs well under a microsecond)
CALL_STEPS = 2_000_000
#: steps of the learner's code in one check, all calls together (the solutions: at most 64,000)
CHECK_STEPS = 20_000_000
#: seconds one call of the learner's code (kernels it launches included) may take (the solutions:
#: at most about 1 s on a 2-core CPU)
TIME_BUDGET = 60.0
#: calls of one learner function nested in itself (a recursion without an end)
RECURSION_LIMIT = 100

#: look at the clock every this many steps
_STEPS_PER_CLOCK = 4096

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gemm_kernels/
#: the package's files that run checks and launches (never a place to point at: a message names
#: the learner's line that called into them, as if the launch itself had raised)
_MACHINERY = {os.path.join(_PACKAGE_DIR, *parts) for parts in (
    ("lab", "watchdog.py"), ("lab", "checked.py"), ("_triton_compat.py",), ("lab", "exercises", "_core.py"),
    ("lab", "exercises", "_kernel_checks.py"), ("lab", "exercises", "_compile_answer.py"))}


# ----------------------------------------------------------------------------- whose code
def _library_dirs() -> tuple[str, ...]:
    dirs = {_PACKAGE_DIR}
    for scheme_vars in (None, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        try:
            paths = sysconfig.get_paths() if scheme_vars is None else sysconfig.get_paths(vars=scheme_vars)
        except Exception:  # noqa: BLE001  (an odd install: the modules' own folders below still count)
            paths = {}
        dirs.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    with contextlib.suppress(Exception):
        dirs.add(site.getusersitepackages())
    for name in ("triton", "torch", "numpy", "IPython", "ipykernel"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            dirs.add(os.path.dirname(module.__file__))
    return tuple(sorted(os.path.join(os.path.abspath(d), "") for d in dirs if d))


_LIBRARY_DIRS: tuple[str, ...] | None = None
_FILE_KINDS: dict[str, bool] = {}


def learner_file(filename: str) -> bool:
    """Whether code from ``filename`` is the learner's (a notebook cell, their own module)
    rather than a library's (this package, Triton, torch, numpy, the standard library)."""
    kind = _FILE_KINDS.get(filename)
    if kind is None:
        kind = _classify(filename)
        if _LIBRARY_DIRS is not None:
            _FILE_KINDS[filename] = kind
    return kind


def _classify(filename: str) -> bool:
    global _LIBRARY_DIRS

    if not filename or filename.startswith("<frozen") or filename in ("<string>", "<stdin>"):
        return False
    if filename.startswith("<"):  # a notebook cell run by name, <ipython-input-...>
        return True
    if _LIBRARY_DIRS is None and "triton" in sys.modules and "torch" in sys.modules:
        _LIBRARY_DIRS = _library_dirs()  # once both are imported: their folders are known then
    dirs = _LIBRARY_DIRS or _library_dirs()
    path = os.path.abspath(filename)
    return not path.startswith(dirs)


def machinery_file(filename: str) -> bool:
    """The checking machinery's own files (this module, the checked run, the check contract)."""
    return os.path.abspath(filename) in _MACHINERY


def package_file(filename: str) -> bool:
    """A file of this package (a checker's kernel or helper, a model)."""
    return os.path.abspath(filename).startswith(os.path.join(_PACKAGE_DIR, ""))


_TRITON_DIR: str | None = None


def triton_file(filename: str) -> bool:
    global _TRITON_DIR

    if _TRITON_DIR is None:
        triton = sys.modules.get("triton")
        if triton is None:
            return False
        _TRITON_DIR = os.path.join(os.path.dirname(os.path.abspath(triton.__file__)), "")
    return filename.startswith(_TRITON_DIR)


# ----------------------------------------------------------------------------- the source around a line
def source_line(filename: str, lineno: int, frame_globals=None) -> str:
    return linecache.getline(filename, lineno, frame_globals).strip()


def where(filename: str, lineno: int, function: str | None, frame_globals=None) -> str:
    """``line 14 of my_matmul_kernel: acc += tl.dot(a, b)`` (no function at a cell's top level)."""
    code = source_line(filename, lineno, frame_globals)
    of = "" if function in ("<module>", None) else f" of {function}"
    return f"line {lineno}{of}" + (f": {code}" if code else "")


def function_name(code) -> str:
    """The function a code object belongs to, as the learner wrote it: a comprehension's or a
    lambda's enclosing function (``pt2``, not ``<listcomp>``)."""
    name = code.co_name
    if name.startswith("<") and name != "<module>":
        parts = [p for p in getattr(code, "co_qualname", name).split(".") if p != "<locals>"]
        outer = [p for p in parts if not p.startswith("<")]
        return outer[-1] if outer else "<module>"
    return name


def frame_where(frame, lineno: int | None = None) -> str:
    return where(frame.f_code.co_filename, frame.f_lineno if lineno is None else lineno,
                 function_name(frame.f_code), frame.f_globals)


def enclosing_loops(filename: str, lineno: int, frame_globals=None) -> list:
    """The loops (``for``, ``while``, comprehensions) of the source whose lines hold ``lineno``,
    outermost first (none when the source is not at hand or does not parse)."""
    lines = linecache.getlines(filename, frame_globals)
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return []
    kinds = (ast.For, ast.While, ast.AsyncFor, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    loops = [node for node in ast.walk(tree) if isinstance(node, kinds)
             and node.lineno <= lineno <= (node.end_lineno or node.lineno)]
    return sorted(loops, key=lambda node: (node.lineno, -(node.end_lineno or node.lineno)))


# ----------------------------------------------------------------------------- what never ended
class NeverEnded(BaseException):
    """The learner's code ran past a check's budget (raised in their code, caught by the check).
    ``message``: what never ended, at which line of theirs; ``details``: more lines."""

    def __init__(self, message: str, details: list[str] | None = None):
        super().__init__(message)
        self.message, self.details = message, list(details or [])


def never_ended(frames: list, recent_from: int, spent: str, where_else: str = "") -> NeverEnded:
    """The report on code stopped for good.  ``frames``: ``(frame, {line: when it last ran})`` for
    the learner's frames now running, innermost first; a line that ran after ``recent_from`` ran
    in the last part of the budget.  The loop that never ended is in the outermost frame with
    such lines: the innermost loop of its source holding all of them.  ``spent``: what the budget
    was, for the message; ``where_else``: ``, program_id (3,)``."""
    running = [(f, seen) for f, seen in frames if any(when > recent_from for when in seen.values())]
    if running:
        f, seen = running[-1]
        recent = [line for line, when in seen.items() if when > recent_from] + [f.f_lineno]
        loops = [loop for loop in enclosing_loops(f.f_code.co_filename, f.f_lineno, f.f_globals)
                 if all(loop.lineno <= line <= (loop.end_lineno or loop.lineno) for line in recent)]
        if loops:
            return NeverEnded(f"your loop never ended: {_quoted(f, loops[-1].lineno, where_else)} was still "
                              f"going {spent}",
                              [f"it was at {_quoted(f, f.f_lineno)}",
                               "does every pass through the loop move it towards its end (the variable its "
                               "condition tests, the step of its range)?"])
    if frames:
        return NeverEnded(f"your code never ended: it was still running {_quoted(frames[0][0], None, where_else)} "
                          f"{spent}", ["a loop that never moves on, or far more work than the exercise needs "
                                       "(a grid of very many programs, blocks of size 1)?"])
    return NeverEnded(f"your code never ended: it was still running {spent}")


def _quoted(frame, lineno: int | None, where_else: str = "") -> str:
    """```while k < K:` (line 14 of my_kernel, program_id (0))``."""
    lineno = frame.f_lineno if lineno is None else lineno
    code = source_line(frame.f_code.co_filename, lineno, frame.f_globals)
    name = function_name(frame.f_code)
    place = f"line {lineno}" + ("" if name == "<module>" else f" of {name}") + where_else
    return f"`{code}` ({place})" if code else place


class LineSampler:
    """Which lines of the learner's frames ran lately, from samples of the stack (where tracing
    would cost too much): for :func:`never_ended`.  A frame counts as running at a sample when it
    is the innermost one of the learner's, or its line or the frame it is calling changed since
    the last sample: a frame waiting on one long call (a helper of theirs that never returns) does
    not, one whose loop calls a helper again and again does."""

    def __init__(self):
        self.seen: dict = {}   # frame -> {line: when it last ran there}
        self._last: dict = {}  # frame -> (its line, the learner's frame it was calling) at the last sample

    def sample(self, stack: list, when: int) -> None:
        """``stack``: the learner's frames now, innermost first; ``when``: a growing count."""
        if len(self.seen) > len(stack) + 16:  # forget frames that returned (their locals may be large)
            self.seen = {f: self.seen[f] for f in stack if f in self.seen}
            self._last = {f: self._last[f] for f in stack if f in self._last}
        child = None
        for f in stack:
            state = (f.f_lineno, child)
            if child is None or self._last.get(f) != state:
                lines = self.seen.get(f)
                if lines is None:
                    lines = self.seen[f] = {}
                lines[f.f_lineno] = when
                self._last[f] = state
            child = f

    def frames(self, stack: list) -> list:
        return [(f, self.seen.get(f, {})) for f in stack]


def recursion_report(name: str, call, limit: int) -> NeverEnded:
    """``name`` called itself more than ``limit`` deep; ``call``: the frame of the learner's that
    made the call (None when not known)."""
    at = f", at {frame_where(call)}" if call is not None else ""
    return NeverEnded(f"your code never ended: {name} called itself more than {limit} times deep{at}",
                      ["a recursion needs a case that returns without calling itself again; a loop is usually "
                       "simpler (and a @triton.jit function cannot call itself on a GPU)"])


# ----------------------------------------------------------------------------- the watchdog
_local = threading.local()


def current() -> Watchdog | None:
    """The innermost watchdog of this thread (None outside a check)."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def suspended():
    """No Python meter in here (a checked run meters its kernel by operations instead)."""
    dog = next((d for d in reversed(getattr(_local, "stack", [])) if d.tracing), None)  # (an inner one may not trace)
    if dog is None or sys.gettrace() != dog._call:
        yield
        return
    sys.settrace(None)
    try:
        yield
    finally:
        if dog.tracing:
            sys.settrace(dog._call)


class Watchdog:
    """Stop the learner's code run in this thread when it spends a budget (see the module
    docstring): ``call_steps`` steps in one call of the learner's code from a library's, ``steps``
    in the whole check, ``seconds`` seconds (:attr:`deadline`), ``recursion`` nested calls of one
    of their functions; a checked run reads ``kernel_ops`` and ``launch_ops``.  A context
    manager; :func:`current` finds it.  ``tracing`` is False when a trace function is set
    already (a debugger, coverage, an outer watchdog): then only the clock and kernels are metered."""

    def __init__(self, *, call_steps: int | None = None, steps: int | None = None, seconds: float | None = None,
                 recursion: int | None = None, kernel_ops: int | None = None, launch_ops: int | None = None):
        self.call_steps = CALL_STEPS if call_steps is None else int(call_steps)
        self.step_budget = CHECK_STEPS if steps is None else int(steps)
        self.time_budget = TIME_BUDGET if seconds is None else float(seconds)
        self.recursion = RECURSION_LIMIT if recursion is None else int(recursion)
        self.kernel_ops = KERNEL_OPS if kernel_ops is None else int(kernel_ops)
        self.launch_ops = LAUNCH_OPS if launch_ops is None else int(launch_ops)
        self.lines = 0   # lines of the learner's code run (outside kernels)
        self.work = 0    # steps: those lines and the library calls
        self.tracing = False
        self._depth: dict = {}
        #: the calls into the learner's code now running, innermost last: (self.lines then, the
        #: step limit before it, its own step limit)
        self._entries: list[tuple[int, int, int]] = []
        self.start = time.monotonic()
        #: when the learner's code now running has to end (inf: none is running), and when the
        #: kernel a checked run is running has to (set by the checked run)
        self.deadline = self.kernel_deadline = math.inf
        self._backstop = None
        self._stop_reason: str | None = None

    # -- on and off
    def __enter__(self):
        self.start = time.monotonic()
        _local.__dict__.setdefault("stack", []).append(self)
        tracer = sys.gettrace()
        if tracer is None:
            self.tracing = True
            self._limit = self.step_budget
            self._next_check = min(self._limit, _STEPS_PER_CLOCK)
            sys.settrace(self._call)
        elif not isinstance(getattr(tracer, "__self__", None), Watchdog):
            self.time_budget = math.inf  # a debugger: stepping through the code takes the time it takes
        self._backstop = _Backstop(self, sys._getframe(1)) if math.isfinite(self.time_budget) else None
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """End the watch (``__exit__``; again by the check in a ``finally``: idempotent)."""
        if self._backstop is not None:
            self._backstop.stop()
            self._backstop = None
        if self.tracing:
            self.tracing = False
            sys.settrace(None)
        stack = getattr(_local, "stack", [])
        if self in stack:
            stack.remove(self)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.start

    # -- the trace functions
    def _call(self, frame, event, arg):
        code = frame.f_code
        mine = _FILE_KINDS.get(code.co_filename)
        if mine is None:
            mine = learner_file(code.co_filename)
        if not mine:
            if self._entries:  # a library's code called from the learner's: counted (not the check's own)
                self.work = work = self.work + 1
                if work >= self._next_check:
                    self._check_in_library()
            return None
        depth = self._depth.get(code, 0) + 1
        self._depth[code] = depth
        if depth > self.recursion:
            caller = frame.f_back
            mine = caller is not None and learner_file(caller.f_code.co_filename)
            raise recursion_report(function_name(code), caller if mine else None, self.recursion)
        caller = frame.f_back
        if caller is not None and learner_file(caller.f_code.co_filename):
            return self._frame_tracer(False)
        # a call into the learner's code from a library's (the check's): its own budget
        own = self.work + self.call_steps
        if not self._entries:
            self.deadline = time.monotonic() + self.time_budget
        self._entries.append((self.lines, self._limit, own))
        self._limit = min(self._limit, own)
        self._next_check = min(self._next_check, self._limit)
        return self._frame_tracer(True)

    def _frame_tracer(self, entry: bool):
        seen: dict[int, int] = {}  # line -> when it last ran in this frame (self.lines then)
        dog = self

        def local(frame, event, arg):
            if event == "line":
                dog.lines = line = dog.lines + 1
                dog.work = work = dog.work + 1
                seen[frame.f_lineno] = line
                if work >= dog._next_check:
                    dog._check(frame)
            elif event == "return":
                dog._depth[frame.f_code] -= 1
                if entry and dog._entries:
                    dog._limit = dog._entries.pop()[1]
                    dog._next_check = min(dog._limit, dog.work + 1)
                    if not dog._entries:
                        dog.deadline = math.inf
            return local

        local.gemm_kernels_seen = seen
        return local

    def _over(self) -> str | None:
        """Which budget is spent, in words (None: none)."""
        if self._stop_reason is not None:
            return self._stop_reason
        if self.work >= self._limit:
            if any(own == self._limit for _, _, own in self._entries):
                return "the limit for one call of your code"
            return "the limit for the whole check"
        if time.monotonic() > self.deadline:
            return f"the limit of {self.time_budget:g} s for one call of your code"
        return None

    def _check(self, frame):
        """In a line of the learner's code: stop here when a budget is spent."""
        reason = self._over()
        if reason is not None:
            raise self._report(frame, reason)
        self._next_check = min(self._limit, self.work + _STEPS_PER_CLOCK)

    def _check_in_library(self):
        """In a library's call (never a place to stop): when a budget is spent, stop at the next
        line of the learner's code."""
        reason = self._over()
        if reason is None:
            self._next_check = min(self._limit, self.work + _STEPS_PER_CLOCK)
        else:
            self._stop_reason, self._next_check = reason, 0

    def _report(self, frame, reason: str) -> NeverEnded:
        frames = []
        while frame is not None:
            seen = getattr(frame.f_trace, "gemm_kernels_seen", None)
            if seen is not None:
                frames.append((frame, seen))
            frame = frame.f_back
        first = self._entries[-1][0] if self._entries else 0
        recent_from = self.lines - max((self.lines - first) // 4, 8)
        spent = (f"when the check stopped it, after {self.lines:,} lines of your code and {self.seconds:.1f} s "
                 f"({reason}: far more than a correct answer needs)")
        return never_ended(frames, recent_from, spent)


# ----------------------------------------------------------------------------- the last resort
#: how often the backstop looks at the checking thread (seconds)
_BACKSTOP_EVERY = 0.25


class _AsyncNeverEnded(NeverEnded):
    """A :class:`NeverEnded` raised in the checking thread by :class:`_Backstop` (an asynchronous
    exception is raised from its class: the report rides on a subclass made for it)."""

    report: tuple = ("your code never ended", [])

    def __init__(self, *args):
        super().__init__(*(args or type(self).report))


class _Backstop:
    """The last resort, for code that neither meter sees: a loop of the learner's kernel that runs
    no operation of the interpreter (``while True: pass``), a plain Python helper the kernel calls.
    A thread that, while the check runs, looks at the checking thread's stack four times a second;
    past the deadline of a kernel's launch (and a grace period that lets the meters speak first),
    when the thread is in a line of the learner's, it raises :class:`NeverEnded` there,
    asynchronously (``PyThreadState_SetAsyncExc``: delivered at that line, the way
    KeyboardInterrupt is; never while library code runs, which may hold a lock or be half way
    through an update).  Stopped when the check ends.  (A sent exception is never taken back:
    ``PyThreadState_SetAsyncExc(id, NULL)`` leaves the interpreter's "pending" flag set, and with a
    trace function on, CPython 3.11 then spins when a thread starts.)"""

    def __init__(self, dog: Watchdog, outer):
        self.dog, self.thread_id, self.outer = dog, threading.get_ident(), outer  # outer: the check's frame
        self.grace = min(5.0, dog.time_budget / 4)
        self.fired = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gemm_kernels check watchdog", daemon=True)
        self._thread.start()

    def stop(self):
        self._done.set()
        self._thread.join()

    def _watch(self):
        sampler = LineSampler()
        samples = 0
        while not self._done.wait(_BACKSTOP_EVERY):
            frame = sys._current_frames().get(self.thread_id)
            if frame is None:
                return
            stack = []
            f = frame
            while f is not None and f is not self.outer:
                if learner_file(f.f_code.co_filename):
                    stack.append(f)
                f = f.f_back
            samples += 1
            sampler.sample(stack, samples)
            del f, frame
            late = time.monotonic() - min(self.dog.deadline, self.dog.kernel_deadline)
            if late < self.grace or not stack or math.isinf(self.dog.kernel_deadline):
                continue  # (outside a kernel the trace meter stops the learner's code itself)
            spent = (f"when the check stopped it, after {self.dog.time_budget + late:.1f} s (the limit of "
                     f"{self.dog.time_budget:g} s for one call of your code)")
            report = never_ended(sampler.frames(stack), samples - max(samples // 4, 2), spent)
            exc_type = type("NeverEnded", (_AsyncNeverEnded,), {"report": (report.message, report.details)})
            if sys._current_frames().get(self.thread_id) is not stack[0]:
                continue  # in a library's code now: not a safe place, look again
            self.fired = True
            _set_async_exc(self.thread_id, exc_type)
            return


def _set_async_exc(thread_id: int, exc_type) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))
