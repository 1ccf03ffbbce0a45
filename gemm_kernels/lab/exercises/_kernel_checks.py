"""A check of a learner's ``@triton.jit`` code: "correct" means it would run on a GPU.

:func:`kernel_exercise` wraps a check body (the ``_core`` contract) whose answer is, or launches,
the learner's kernel code.  After the body's cases pass in the interpreter:

* **their kernel ran.**  Every launch of the check is recorded (:class:`recording`); an answer
  that launched no kernel of the learner's (``lambda a, b: a @ b``, the package's ``gk.matmul``,
  a ``*_ref`` function) is refused: "this returns the right numbers without your kernel".  A
  launcher that launched one but would be right without it (it returns ``a @ b`` anyway) is
  refused too (:func:`without_your_kernels`), and so is one that launches another's kernel.  The
  package's code is no answer: a kernel may use only the helpers its exercise hands (``hands``).
* **it compiles for sm_90.**  Every kernel that ran the learner's code (their kernel, or the
  check's kernel calling their ``@triton.jit`` helper) is compiled with ``triton.compile`` for
  Hopper, with the arguments the check launched it with, in a worker process that stays up
  (:mod:`._compile_answer`; the learner's functions, and what they use, are written to a module
  of their own first).  A compile error comes back at the learner's line, with what to change
  (an fp16 accumulator re-assigned an fp32 ``tl.dot``, a plain Python helper, a global that is
  not a ``tl.constexpr``, a ``tl.dot`` on blocks under 16, ...).  ``fp32_dot``: a ``tl.dot``
  that accumulates in fp16 (``out_dtype=tl.float16``) is refused too, read from the TTIR.
  Results are cached per (source, specialisation).
* **on a GPU it runs there.**  With ``gemm_kernels.runtime.on_gpu()``, ``gpu_case(answer)`` runs
  once more with plain launches (compiled, on the GPU) and is compared like the rest.

On failure the common mistakes are named (``diagnose``, :func:`access_diagnosis`,
:func:`tile_mapping_diagnosis`).  Machine trouble (no worker, no ptxas) is never the learner's:
the verdict then says what was not compiled.

:func:`plain_exercise` does the part that applies to answers in plain Python: the package's own
functions (the checks' ``*_ref`` references, marked with :func:`reference`) are no answer, and
neither is a right result that came from calling one.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import hashlib
import inspect
import json
import math
import os
import queue
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ... import _triton_compat as compat
from ... import runtime
from .. import exam
from ._core import CORRECT, WRONG, AnswerRaised, CheckResult, _count, exercise, plural

_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "")
_TRITON_DIR = os.path.join(os.path.dirname(os.path.abspath(__import__("triton").__file__)), "")

#: launch options a ``kernel[grid](...)`` may pass (not kernel parameters)
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
#: seconds one compile job may take in the worker (a kernel that unrolls without end: stopped)
COMPILE_TIME_LIMIT_S = 180
#: seconds the compile worker waits for the next job before it is stopped (its memory given back)
COMPILE_WORKER_IDLE_S = 600
#: distinct specialisations of one kernel compiled per check (most general first)
MAX_SPECIALISATIONS = 2
#: compute capability the learner's kernels are compiled for
TARGET = 90


# ----------------------------------------------------------------------------- whose code
def python_function(obj):
    """The Python function behind a jit function, an interpreted twin, a partial or a method (or None)."""
    for _ in range(8):
        if isinstance(obj, types.FunctionType):
            return obj
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        elif isinstance(obj, functools.partial):
            obj = obj.func
        elif hasattr(obj, "fn"):
            obj = obj.fn
        else:
            return None
    return None


def is_jit(obj) -> bool:
    """A ``@triton.jit`` function (compiled or interpreted)."""
    return compat.jit_source_function(obj) is not None


def _file_of(fn) -> str:
    name = getattr(getattr(fn, "__code__", None), "co_filename", "") or ""
    return name if name.startswith("<") else os.path.abspath(name)


def is_package_object(obj) -> bool:
    """Whether ``obj`` (a function, kernel, partial) is this package's own code."""
    fn = python_function(obj)
    if fn is None:
        module = getattr(obj, "__module__", None) or ""
        return module == "gemm_kernels" or module.startswith("gemm_kernels.")
    return _file_of(fn).startswith(_PACKAGE_DIR)


def _library_function(fn) -> bool:
    """Code that is not the learner's: this package's or Triton's."""
    path = _file_of(fn)
    return path.startswith(_PACKAGE_DIR) or path.startswith(_TRITON_DIR)


def learner_jit(obj) -> bool:
    """A ``@triton.jit`` function of the learner's (defined outside this package and Triton)."""
    fn = compat.jit_source_function(obj)
    return fn is not None and not _library_function(fn)


def qualified_name(obj) -> str:
    fn = python_function(obj) or obj
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


def _resolved(listed) -> tuple:
    return tuple((listed() if callable(listed) else listed) or ())


def handed(check) -> tuple:
    """The package's ``@triton.jit`` helpers an exercise hands the learner (its check's ``hands``,
    none unless it names them): the only package code its kernel answer may use."""
    return _resolved(getattr(check, "hands", ()))


def package_answers(check) -> tuple:
    """The package's own answers to an exercise (its check's ``forbid``)."""
    return _resolved(getattr(check, "forbid", ()))


def _same_function(a, b) -> bool:
    fn = python_function(a)
    return a is b or (fn is not None and fn is python_function(b))


def refused_package_code(value, hands=(), forbid=()) -> Refused | None:
    """Why a learner's Triton code may not use ``value``: the package's answer to the exercise
    (``forbid``), or any other package code the exercise does not hand it (``hands``); None when
    it may.  The one rule of the notebook's check and of the grader's rebuild (``_rebuild``)."""
    if not is_package_object(value) or any(_same_function(value, h) for h in hands):
        return None
    name = qualified_name(value)
    if any(_same_function(value, f) for f in forbid):
        return Refused(f"your code calls {name}, the package's own answer to this exercise: the check compares "
                       "with it, so it would say correct whatever you wrote",
                       [f"write the {python_function(value).__name__.strip('_')} logic yourself (the notebook's "
                        "text says what it has to return)"])
    offered = ", ".join(qualified_name(h).replace("gemm_kernels.", "", 1) for h in hands) or "none"
    return Refused(f"your code uses {name}, which this exercise does not hand you: a kernel answer may use only "
                   f"the package helpers its exercise names (here: {offered})",
                   ["write that part yourself, with tl operations (the notebook's text says what it computes)"])


class Refused(Exception):
    """An answer a check refuses (its numbers may be right): becomes a "wrong" result."""

    def __init__(self, message: str, details: list[str] | None = None):
        super().__init__(message)
        self.message, self.details = message, list(details or [])


# ----------------------------------------------------------------------------- the launches of a check
@dataclass
class Launch:
    """One ``kernel[grid](...)`` of a check: the kernel, its grid (3 ints), its arguments by
    parameter name (defaults filled in) and its launch options."""

    kernel: object
    fn: types.FunctionType
    grid: tuple
    named: dict
    options: dict
    #: (program id, tensor name, element offset) of each store's first lane, as the checked run saw it
    stores: list = field(default_factory=list)
    #: the learner's lines whose masked load has no ``other=`` and masked-off lanes (undefined on a GPU)
    undefined: list = field(default_factory=list)

    @property
    def learner_kernel(self) -> bool:
        return not _library_function(self.fn)

    @property
    def learner_functions(self) -> list:
        """The learner's ``@triton.jit`` functions passed as arguments (a helper the check's kernel calls)."""
        return [v for v in self.named.values() if learner_jit(v)]

    @property
    def involves_learner(self) -> bool:
        return self.learner_kernel or bool(self.learner_functions)

    def constexpr(self, *names, default=None):
        """The first of ``names`` that is an argument of this launch (None if none is)."""
        for name in names:
            if name in self.named:
                return self.named[name]
        return default

    def tensor_names(self) -> dict:
        return {name: v for name, v in self.named.items() if isinstance(v, torch.Tensor)}


class LaunchLog:
    """The launches of one check, in order; ``skip_learner``: the learner's are recorded, not run."""

    def __init__(self):
        self.launches: list[Launch] = []
        self.skip_learner = False
        self.skipped = 0
        #: kernels a learner's launcher launched that are not the learner's (the package's, by any name)
        self.foreign: list[str] = []

    def learner_launches(self) -> list[Launch]:
        return [launch for launch in self.launches if launch.involves_learner]

    def last_learner(self) -> Launch | None:
        found = self.learner_launches()
        return found[-1] if found else None

    def record(self, kernel, grid, args, kwargs) -> Launch | None:
        fn = compat.jit_source_function(kernel)
        if fn is None:
            return None
        options = {k: kwargs[k] for k in _OPTIONS if k in kwargs}
        params = {k: v for k, v in kwargs.items() if k not in _OPTIONS and k not in (
            "launch_cooperative_grid", "launch_pdl", "debug", "sanitize_overflow", "enable_fp_fusion")}
        try:
            bound = inspect.signature(fn).bind(*args, **params)
            bound.apply_defaults()
        except TypeError:
            return None  # the checked run says what does not fit
        named = dict(bound.arguments)
        try:
            g = grid(named) if callable(grid) else grid
            g = (g,) if isinstance(g, int) else tuple(g)
            g = tuple(int(x) for x in g) + (1,) * (3 - len(g))
        except Exception:  # noqa: BLE001  (a bad grid: the checked run explains it)
            g = None
        launch = Launch(kernel, fn, g, named, options)
        self.launches.append(launch)
        return launch


_LOGS = threading.local()


def current_log() -> LaunchLog | None:
    """The launch log of the check running in this thread (None outside :class:`recording`)."""
    stack = getattr(_LOGS, "stack", None)
    return stack[-1] if stack else None


class recording:
    """While active, every ``kernel[grid](...)`` in this thread is recorded in a :class:`LaunchLog`
    (the enclosing one, if any) and run checked (``reachable`` as for ``checked_launches``)."""

    def __init__(self, reachable=(), log: LaunchLog | None = None):
        self.reachable = reachable
        self.log = log

    def _launch(self, kernel, grid, *args, **kwargs):
        from ..checked import run_checked

        if getattr(_LOGS, "launcher", 0) and not learner_jit(kernel):
            name = qualified_name(kernel)
            if name not in self.log.foreign:
                self.log.foreign.append(name)
            # stopped here, not run: the verdict is already "wrong", and a package kernel's autotuning
            # in the interpreter would outlast the time limit and read "never ended" (seen on a GPU)
            raise _foreign_message(self.log)
        launch = self.log.record(kernel, grid, args, kwargs)
        if launch is not None and self.log.skip_learner and launch.involves_learner:
            self.log.skipped += 1
            return None
        with np.errstate(all="ignore"):  # numpy's overflow warnings from the interpreter: the check says what is wrong
            return run_checked(kernel, grid, *args, reachable=self.reachable,
                               store_log=launch.stores if launch is not None else None,
                               undefined_log=launch.undefined if launch is not None else None, **kwargs)

    def __enter__(self) -> LaunchLog:
        if self.log is None:
            self.log = current_log() or LaunchLog()
        # inside plain_launches (a check's GPU run) launches stay plain, whatever the check's harness asks
        self._redirect = None if getattr(_LOGS, "plain", 0) else compat.redirect_launches(self._launch)
        if self._redirect is not None:
            self._redirect.__enter__()
        _LOGS.__dict__.setdefault("stack", []).append(self.log)
        return self.log

    def __exit__(self, *exc):
        _LOGS.stack.pop()
        return self._redirect.__exit__(*exc) if self._redirect is not None else False


@contextlib.contextmanager
def skipping_learner_launches():
    """Within: the learner's launches are recorded but not run (what would the answer return without them?)."""
    log = current_log()
    if log is None:
        yield None
        return
    before = log.skip_learner
    log.skip_learner = True
    try:
        yield log
    finally:
        log.skip_learner = before


def _plain_launch(kernel, grid, *args, **kwargs):
    return kernel.run(*args, grid=grid, warmup=False, **kwargs)


@contextlib.contextmanager
def plain_launches():
    """Within: ``kernel[grid](...)`` in this thread is a plain launch (compiled, on the GPU), also
    inside a :class:`recording` the check's own harness opens."""
    _LOGS.plain = getattr(_LOGS, "plain", 0) + 1
    try:
        with compat.redirect_launches(_plain_launch):
            yield
    finally:
        _LOGS.plain -= 1


#: torch calls that view a tensor, or describe it, and may copy it instead (``.contiguous()`` of a
#: transposed view, ``.reshape``, ``.to``, ``x[index_list]``): a launcher's is refused when it copies
LAUNCHER_VIEWS = frozenset({
    "__get__", "__getitem__", "t", "transpose", "permute", "view", "reshape", "expand", "unsqueeze", "squeeze",
    "flatten", "contiguous", "to", "float", "half", "bfloat16", "cuda", "cpu"})
#: what a launcher may ask of torch: allocate, describe and view tensors (its kernel computes the answer)
LAUNCHER_TORCH = LAUNCHER_VIEWS | frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "new_empty", "new_zeros", "new_ones", "new_full", "zero_", "fill_", "__len__", "size", "stride", "dim", "numel",
    "element_size", "data_ptr", "storage_offset", "is_contiguous"})
#: a launcher's tensor turned into text (``print(x)``, an f-string): shown by its shape and dtype, never its
#: values (a student's review: ``float(f"{x[i]:.17g}")`` read x into Python floats, the launcher computed
#: axpy with them and wrote each element with ``out[i].fill_(...)`` beside a kernel that only set a flag)
LAUNCHER_SHOWN = frozenset({"__repr__", "__str__", "__format__"})


_LAUNCHER_FIX = ("allocate with torch.empty/empty_like/zeros, read shapes and strides, and let your @triton.jit "
                 "kernel do the arithmetic and the copying (no torch math, .copy_, .contiguous() of a view, .clone, "
                 ".sum or .item in the launcher)")


def _copied(args, result) -> bool:
    """Whether a view-or-copy call (:data:`LAUNCHER_VIEWS`) on ``args[0]`` gave a tensor of storage of its own."""
    source = args[0] if args else None
    if not isinstance(source, torch.Tensor) or not isinstance(result, torch.Tensor) or result.numel() == 0:
        return False
    return result.untyped_storage().data_ptr() != source.untyped_storage().data_ptr()


class _LauncherTorch(torch.overrides.TorchFunctionMode):
    """While a launcher runs: the torch calls made by the learner's own lines that are not in
    :data:`LAUNCHER_TORCH`, or that copy (:data:`LAUNCHER_VIEWS`), are noted (calls from Triton,
    torch or this package pass: a launch, a tuner)."""

    def __init__(self):
        super().__init__()
        self.computed: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        mine = self._from_learner()
        if mine and name in LAUNCHER_SHOWN and args and isinstance(args[0], torch.Tensor):
            return (f"<tensor {list(args[0].shape)} {str(args[0].dtype).replace('torch.', '')}: a launcher under "
                    "check sees no values>")
        if mine and name not in LAUNCHER_TORCH:
            self.computed.append(name)  # noted, not raised: the check still says what else is wrong
        elif mine and (name == "__getitem__" or name not in LAUNCHER_VIEWS) and _tensor_among(args[1:], kwargs):
            # out[i].fill_(x[i]), torch.full(size, x[0]), x[t]: x's or t's values (x.to(y) takes y's dtype only)
            self.computed.append(f"{name} with a tensor's values")
        result = func(*args, **(kwargs or {}))
        if name in LAUNCHER_VIEWS and mine and _copied(args, result):  # torch moved the data, not the kernel
            self.computed.append(f"{name}, which copied")
        return result

    @staticmethod
    def _from_learner() -> bool:
        frame = sys._getframe(2)
        # torch's own Python (torch.functional, overrides) and Triton's outside its runtime (tl.constexpr's
        # operators compute on what they wrap: a judge's review; triton.cdiv) act for whoever called them;
        # Triton's runtime (a launch, a tuner) and this package act for themselves
        while frame is not None and (_on_behalf(frame.f_code.co_filename) or frame.f_code in _CALLERS_CODE):
            frame = frame.f_back
        return frame is not None and _learner_caller(frame.f_code.co_filename)


def _tensor_among(args, kwargs) -> bool:
    """Whether a tensor is among ``args`` or ``kwargs`` (but ``input``, the subject), or in a list or tuple there."""
    values = [*args, *(v for k, v in (kwargs or {}).items() if k != "input")]
    return any(isinstance(v, torch.Tensor) or (isinstance(v, (list, tuple))
                                                and any(isinstance(i, torch.Tensor) for i in v)) for v in values)


def _triton_dirs() -> tuple[str, tuple[str, ...]]:
    import triton

    root = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
    return root, tuple(root + part + os.sep for part in ("runtime", "backends"))


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TRITON_DIR, _TRITON_LAUNCHING = _triton_dirs()


def _on_behalf(filename: str) -> bool:
    """Code that computes for whoever called it: torch's own Python, and Triton's but its runtime and
    backends (a launch, a tuner: they act for themselves); ``triton.cdiv(x, y)`` on tensors is the
    caller's arithmetic (``(x + y - 1) // y`` in triton/__init__.py: a student's review)."""
    path = os.path.abspath(filename)
    return path.startswith(_TORCH_DIR) or (path.startswith(_TRITON_DIR) and not path.startswith(_TRITON_LAUNCHING))


def _callers_code() -> frozenset:
    """The code of Triton's runtime that only calls a function for its caller (``triton.cdiv`` is a
    ConstexprFunction, called through its ``__call__``)."""
    from triton.runtime import jit

    kinds = [getattr(jit, name, None) for name in ("ConstexprFunction", "BoundConstexprFunction")]
    return frozenset(kind.__call__.__code__ for kind in kinds if kind is not None and hasattr(kind.__call__, "__code__"))


_CALLERS_CODE = _callers_code()


def allocating_only(answer):
    """``answer`` (a launcher), its own torch calls noted (:class:`_LauncherTorch`) in
    ``wrapper.computed``: a launcher that computes with torch is refused, with or without a kernel
    launch (a flag kernel that launches, then returns torch's result).  While it runs, a launch of a
    kernel that is not the learner's is noted in the check's ``LaunchLog.foreign`` (:class:`recording`)."""

    @functools.wraps(answer)
    def launcher(*args, **kwargs):
        mode = _LauncherTorch()
        _LOGS.launcher = getattr(_LOGS, "launcher", 0) + 1  # its launches: the learner's own kernels only
        try:
            with mode:
                return answer(*args, **kwargs)
        finally:
            _LOGS.launcher -= 1
            launcher.computed += mode.computed

    launcher.computed = []
    return launcher


def without_your_kernels(answer, args: tuple, expected, *, what: str, close) -> None:
    """Run ``answer(*args)`` with the learner's launches skipped; :class:`Refused` when it still
    returns ``expected`` (``close(got, expected)``): the numbers do not come from their kernel."""
    from ._core import _NotAttempted, call

    with skipping_learner_launches() as log:
        if log is None or not log.learner_launches():
            return  # no kernel of theirs at all: the check says so itself
        try:
            got = call(answer, *args, what=what)
        except (AnswerRaised, _NotAttempted):
            return  # it needs its kernel's output (or fails without it): fine
    try:
        same = bool(close(got, expected))
    except Exception:  # noqa: BLE001
        same = False
    if same:
        raise Refused(f"this returns the right numbers without your kernel: with its launch{'es' * (log.skipped > 1)} "
                      f"skipped, {what} still returned the right result",
                      ["the result must come from what your kernel stores: return the output tensor it wrote, "
                       "not one computed with torch"])


# ----------------------------------------------------------------------------- the learner's module
@dataclass
class _Function:
    """One learner function written to the module: where it came from."""

    name: str
    filename: str
    def_line: int         # line of its ``def`` in the learner's file (cell)
    lines: list           # its source, from the ``def`` on (dedented)
    tree: ast.AST | None  # its FunctionDef
    module_line: int = 0  # line of its ``def`` in the written module

    def original(self, line_in_function: int) -> tuple[int, str]:
        """(line in the learner's file, its code) of line ``line_in_function`` (1 = the ``def``)."""
        index = line_in_function - 1
        code = self.lines[index].strip() if 0 <= index < len(self.lines) else ""
        return self.def_line + index, code

    def where(self, line_in_function: int) -> str:
        line, code = self.original(line_in_function)
        return f"line {line} of {self.name}" + (f": {code}" if code else "")


class SourceUnavailable(Exception):
    pass


class AnswerModule:
    """The learner's ``@triton.jit`` functions, and every global they read, as the text of a module
    the compile worker imports: library objects by import, the learner's own functions by
    source, plain values by value (so the compiler meets what it would meet on a GPU)."""

    def __init__(self):
        self.header: list[str] = []
        self.blocks: list[tuple[_Function, str]] = []
        self.trailer: list[str] = []
        self.emitted: dict[str, object] = {}       # global name -> the value it stands for
        self.functions: dict[str, _Function] = {}  # learner function name -> where it came from
        self._by_fn: dict[int, str] = {}           # id(python function) -> its name here
        self.referenced: list = []                 # every library object the learner's code refers to
        self.uncertain: set[str] = set()           # names whose value could not be written faithfully

    # -- adding
    def add_jit(self, obj) -> str:
        """Write the learner's jit function ``obj`` (and what it uses); returns its name in the module."""
        fn = compat.jit_source_function(obj) or python_function(obj)
        if id(fn) in self._by_fn:
            return self._by_fn[id(fn)]
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as exc:
            raise SourceUnavailable(f"the source of {fn.__name__} cannot be read ({exc})") from None
        text = textwrap.dedent("".join(lines))
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            raise SourceUnavailable(f"the source of {fn.__name__} does not parse on its own ({exc.msg})") from None
        node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == fn.__name__), None)
        if node is None:
            raise SourceUnavailable(f"the source of {fn.__name__} does not define it")
        body = text.splitlines()[node.lineno - 1:(node.end_lineno or len(text.splitlines()))]
        name = fn.__name__
        if name in self.emitted and self.emitted[name] is not obj:
            self.uncertain.add(name)
        self.emitted[name] = obj
        self._by_fn[id(fn)] = name
        info = _Function(name, fn.__code__.co_filename, start + node.lineno - 1, body, node)
        self.functions[name] = info
        decorator = "@_gk_triton.jit"
        options = getattr(obj, "kwargs", None) or {}
        if options.get("noinline"):
            decorator += "(noinline=True)"
        self.blocks.append((info, decorator + "\n" + "\n".join(body) + "\n"))
        scope = dict(fn.__globals__)
        if fn.__closure__:
            scope.update({n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)
                          if _cell_full(c)})
        params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        for ref in sorted(_names_read(node) - params):
            if ref in scope:
                self._add_global(ref, scope[ref])
        for value in _attributes_read(node, scope):
            self._note_reference(value)
        return name

    def _note_reference(self, value) -> None:
        fn = python_function(value)
        if fn is not None and _library_function(fn):
            self.referenced.append(value)

    def _add_global(self, name: str, value) -> None:
        if name in self.emitted:
            if self.emitted[name] is not value:
                self.uncertain.add(name)
            return
        self.emitted[name] = value
        if isinstance(value, types.ModuleType):
            self.header.append(f"import {value.__name__} as {name}" if "." in value.__name__ or value.__name__ != name
                               else f"import {name}")
            return
        if is_jit(value):
            fn = compat.jit_source_function(value)
            if _library_function(fn):
                self.referenced.append(value)
                if not self._import(name, fn, value):
                    self._opaque(name, value, uncertain=True)
            else:
                del self.emitted[name]
                own = self.add_jit(value)
                if own != name:
                    self.trailer.append(f"{name} = {own}")
                    self.emitted[name] = value
            return
        import triton.language as tl

        if isinstance(value, tl.constexpr):
            literal = (f"_gk_tl.dtype({value.value.name!r})" if isinstance(value.value, tl.dtype)
                       else _literal(value.value))
            if literal is None:
                self._opaque(name, value, uncertain=True)
            else:
                self.header.append(f"{name} = _gk_tl.constexpr({literal})")
            return
        if isinstance(value, tl.dtype):
            self.header.append(f"{name} = _gk_tl.dtype({value.name!r})")
            return
        literal = _literal(value)
        if literal is not None:
            self.header.append(f"{name} = {literal}")
            return
        if callable(value) and not isinstance(value, type):
            fn = python_function(value)
            if fn is not None and _library_function(fn):
                self.referenced.append(value)
            if (fn is None or not _learner_caller(_file_of(fn))) and self._import(name, fn or value, value):
                return
            # the learner's own plain function: the compiler refuses it as it would on a GPU
            self.header.append(f"def {name}(*args, **kwargs):\n    pass")
            return
        self._opaque(name, value, uncertain=getattr(value, "__triton_aggregate__", False)
                     or (isinstance(value, tuple) and hasattr(value, "_fields")))

    def _import(self, name: str, fn, value) -> bool:
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        if not module or not qualname or "<" in qualname or module.startswith("__"):
            return False
        try:
            obj = sys.modules.get(module) or __import__(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except Exception:  # noqa: BLE001
            return False
        if obj is not value and python_function(obj) is not python_function(value):
            return False
        if getattr(sys.modules.get(module), "__file__", None) is None:
            return False
        head, _, rest = qualname.partition(".")
        self.header.append(f"from {module} import {head} as {name}" if not rest else
                           f"from {module} import {head} as _gk_{name}\n{name} = _gk_{name}.{rest}")
        return True

    def _opaque(self, name, value, uncertain=False) -> None:
        self.header.append(f"{name} = _GkValue({type(value).__name__!r})")
        if uncertain:
            self.uncertain.add(name)

    # -- writing
    def text(self) -> str:
        out = ["# a learner's @triton.jit code, written by gemm_kernels.lab.exercises._kernel_checks",
               "import triton as _gk_triton", "import triton.language as _gk_tl", "",
               "class _GkValue:", "    def __init__(self, kind):", "        self.kind = kind", ""]
        out += self.header + [""]
        for info, block in self.blocks:
            out.append("")
            info.module_line = len(out) + 2  # the decorator is the next line, the def the one after
            out += block.rstrip("\n").split("\n")
        out += [""] + self.trailer + [""]
        return "\n".join(out)

    def write(self) -> tuple[str, str]:
        """(folder, module name) of the module, written once per content."""
        text = self.text()
        module = "gk_answer_" + hashlib.sha1(text.encode()).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / "gemm_kernels_exercises"
        folder.mkdir(exist_ok=True)
        path = folder / f"{module}.py"
        if not path.exists():
            tmp = folder / f".{module}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(text)
            os.replace(tmp, path)
        return str(folder), module

    def function_at_module_line(self, line: int) -> tuple[_Function, int] | None:
        """(function, line inside it, 1 = its def) of line ``line`` of the written module."""
        for info, _ in self.blocks:
            if info.module_line and info.module_line <= line < info.module_line + len(info.lines):
                return info, line - info.module_line + 1
        return None


def _cell_full(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _literal(value) -> str | None:
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, int):
        return repr(int(value))
    if isinstance(value, float):
        return f"float({str(value)!r})" if not math.isfinite(value) else repr(value)
    return None


def _names_read(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _attributes_read(node, scope) -> list:
    """The objects ``a.b.c`` chains of the function resolve to (from a global module or object)."""
    found = []
    for n in ast.walk(node):
        if not isinstance(n, ast.Attribute):
            continue
        chain, base = [], n
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in scope:
            continue
        obj = scope[base.id]
        try:
            for attr in reversed(chain):
                obj = getattr(obj, attr)
        except Exception:  # noqa: BLE001
            continue
        found.append(obj)
    return found


# ----------------------------------------------------------------------------- the compile worker
class _CompileServer:
    """One worker process (``_compile_answer``) for this process, started when first needed and
    kept while checks use it: its imports (torch, Triton, the package) cost seconds, a compile
    much less.  Stopped after :data:`COMPILE_WORKER_IDLE_S` idle seconds, and at exit."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc = None
        self.pid = None
        self.lines: queue.Queue | None = None
        self.stderr = None
        self.last_used = 0.0

    def _touch(self) -> None:
        self.last_used = time.monotonic()

    def _watch_idle(self, proc) -> None:
        """Stop ``proc`` once it has been idle for COMPILE_WORKER_IDLE_S (one thread per worker)."""
        while proc.poll() is None:
            time.sleep(min(30.0, COMPILE_WORKER_IDLE_S / 4))
            with self.lock:
                if self.proc is not proc:
                    return
                if time.monotonic() - self.last_used >= COMPILE_WORKER_IDLE_S:
                    self.stop()
                    return

    def _start(self) -> None:
        from ..compile_view import _worker_env

        env = _worker_env()
        root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "gemm_kernels.lab.exercises._compile_answer"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                     text=True, bufsize=1)
        self.pid = os.getpid()
        self.lines = queue.Queue()
        proc, lines = self.proc, self.lines

        def read():
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, name="gemm_kernels compile worker", daemon=True).start()
        self._touch()
        threading.Thread(target=self._watch_idle, args=(proc,), name="gemm_kernels compile worker idle",
                         daemon=True).start()

    def _alive(self) -> bool:
        return self.proc is not None and self.pid == os.getpid() and self.proc.poll() is None

    def start(self) -> None:
        """Start the worker now, in the background (its imports overlap the interpreted run)."""
        with self.lock:
            if not self._alive():
                self._start()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and self.pid == os.getpid():
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait(timeout=5)

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read().decode(errors="replace")[-2000:]
        except Exception:  # noqa: BLE001
            return ""

    def _next_line(self, deadline_s: float):
        line = self.lines.get(timeout=deadline_s)
        if line is None:
            raise RuntimeError(f"the compile worker stopped:\n{self._stderr_tail()}")
        return json.loads(line)

    def run(self, requests: list[dict], timeout: float = COMPILE_TIME_LIMIT_S) -> list[dict]:
        with self.lock:
            if not self._alive():
                self._start()
            try:
                self.proc.stdin.write(json.dumps({"requests": requests}) + "\n")
                self.proc.stdin.flush()
                while True:
                    answer = self._next_line(timeout)
                    if not (isinstance(answer, dict) and answer.get("ready")):
                        break
            except queue.Empty:
                self.stop()
                raise TimeoutError(f"compiling took more than {timeout:.0f} s") from None
            except (OSError, ValueError, RuntimeError):
                self.stop()
                raise
            self._touch()
        if isinstance(answer, dict):
            raise RuntimeError(f"the compile worker refused the job: {answer.get('job_error')}")
        return answer


_SERVER = _CompileServer()
atexit.register(_SERVER.stop)
#: (request as JSON, module text) -> the worker's answer for it
_COMPILED: dict[str, dict] = {}


def prestart_compiler() -> None:
    """Start the compile worker in the background (a check whose kernels will need it)."""
    with contextlib.suppress(Exception):
        _SERVER.start()


# ----------------------------------------------------------------------------- what to compile
def _spec_key(value):
    """What of an argument a compile depends on (a launch with the same keys gets the same code)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return ("int", value == 1, value % 16 == 0, -2**31 <= value < 2**31, value < 0)
    if isinstance(value, float):
        return ("float",)
    return ("object", id(value))


class _Unencodable(Exception):
    pass


def _encode(value, module: AnswerModule):
    """A launch argument as the compile worker takes it (see ``compile_view._encode``)."""
    import triton.language as tl

    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).replace("torch.", ""), "aligned": value.data_ptr() % 16 == 0}
    if is_jit(value):
        fn = compat.jit_source_function(value)
        if _library_function(fn):
            return {"jit_function": {"module": fn.__module__, "name": fn.__qualname__}}
        name = module.add_jit(value)
        return {"jit_function": {"path": None, "module": None, "name": name, "_learner": True}}
    if isinstance(value, tl.constexpr):
        value = value.value
    if isinstance(value, tl.dtype):
        return {"tl_dtype": value.name}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise _Unencodable(f"a {type(value).__name__} argument")


def _fill_module(encoded, folder: str, name: str):
    if isinstance(encoded, dict) and "jit_function" in encoded and encoded["jit_function"].get("_learner"):
        ref = encoded["jit_function"]
        return {"jit_function": {"path": folder, "module": name, "name": ref["name"]}}
    return encoded


@dataclass
class CompileFailure:
    """A learner's code that does not compile for sm_90: where, what the compiler said, what to change."""

    where: str
    said: str
    fix: str
    kernel: str
    frames: list = field(default_factory=list)
    learners: bool = True  # the error points at the learner's code (a line of theirs, or a name they use)


def _generality(launch: Launch) -> int:
    """Fewer specialised ints (== 1) first: the code most launches get."""
    return sum(1 for v in launch.named.values() if isinstance(v, int) and not isinstance(v, bool) and v == 1)


def compile_launches(launches: list[Launch], *, forbid=(), hands=(), stages=()) -> tuple[list, AnswerModule | None,
                                                                                         str | None]:
    """Compile, for sm_90, each kernel of ``launches`` that runs learner code (a few
    specialisations each).  Returns ``(results, module, skipped)``: per compiled launch its
    outcome (``{"ttir": ...}``, plus the compiler ``stages`` asked for, e.g. ``("ptx",)``, or a
    :class:`CompileFailure`), the learner's module, and why nothing could be compiled (None when it was)."""
    module = AnswerModule()
    chosen: dict = {}
    for launch in sorted(launches, key=_generality):
        key = (id(launch.fn), tuple(sorted((k, _spec_key(v)) for k, v in launch.named.items())))
        per_kernel = [k for k in chosen if k[0] == id(launch.fn)]
        if key in chosen or len(per_kernel) >= MAX_SPECIALISATIONS:
            continue
        chosen[key] = launch
    requests, compiled = [], []
    try:
        for launch in chosen.values():
            if launch.learner_kernel:
                main = {"module": None, "qualname": module.add_jit(launch.kernel), "_learner": True}
            else:
                main = {"module": launch.fn.__module__, "qualname": launch.fn.__qualname__}
            args = {k: _encode(v, module) for k, v in launch.named.items()}
            requests.append((launch, main, args))
    except SourceUnavailable as exc:
        return [], None, str(exc)
    except _Unencodable as exc:
        return [], None, f"the check cannot pass {exc} to the compiler"
    _refuse_package_code(module, forbid, hands)
    folder, name = module.write()
    jobs = []
    for launch, main, args in requests:
        job = {"module": name if main.get("_learner") else main["module"], "qualname": main["qualname"],
               "capability": TARGET, "args": {k: _fill_module(v, folder, name) for k, v in args.items()},
               "num_warps": int(launch.options.get("num_warps") or 4),
               "num_stages": int(launch.options.get("num_stages") or 3), "name": launch.fn.__name__,
               "path": folder, "paths": [d for d in sys.path if d and os.path.isdir(d)]}
        if stages:
            job["stages"] = list(stages)
        jobs.append(job)
    keys = [json.dumps(j, sort_keys=True) for j in jobs]
    todo = [(k, j) for k, j in zip(keys, jobs) if k not in _COMPILED]
    if todo:
        try:
            answers = _SERVER.run([j for _, j in todo])
        except TimeoutError as exc:
            name = requests[0][0].fn.__name__
            failure = CompileFailure(f"compiling {name}", str(exc), "a loop the compiler unrolls (tl.static_range) or "
                                     "a block far too large makes the compile run away: keep static loops and blocks "
                                     "small", name)
            return [failure], module, None
        except Exception as exc:  # noqa: BLE001  (the machine cannot compile: not the learner's fault)
            return [], module, f"the compile worker failed ({type(exc).__name__}: {str(exc)[:200]})"
        for (k, _), answer in zip(todo, answers):
            _COMPILED[k] = answer
    for (launch, _, _), k in zip(requests, keys):
        answer = _COMPILED[k]
        if "error" in answer:
            frames = answer["error"]["frames"]
            failure = _failure(frames, module, launch)
            if "No module named" in failure.said or frames[0]["type"] in (
                    "SyntaxError", "IndentationError", "ImportError", "ModuleNotFoundError"):
                # the worker could not rebuild the learner's code: not their error
                return [], module, f"the compile worker could not rebuild your code ({failure.said[:200]})"
            if not failure.learners and not _compiler_works():
                return [], module, f"this machine cannot compile for sm_90 ({failure.said[:200]})"
            compiled.append(failure)
        else:
            compiled.append(answer)
    return compiled, module, None


_CANARY: list = []


def _compiler_works() -> bool:
    """Whether the worker compiles one of the package's own kernels (asked once, after a compile
    error that points at no line of the learner's: the machine, not their code, may be at fault)."""
    if not _CANARY:
        job = {"module": "gemm_kernels.lab.exercises.kernel_fusion", "qualname": "_elementwise_kernel",
               "capability": TARGET, "num_warps": 4, "num_stages": 3, "name": "_elementwise_kernel",
               "args": {"x_ptr": {"tensor": "float32", "aligned": True},
                        "y_ptr": {"tensor": "float32", "aligned": True}, "n": 100,
                        "FN": {"jit_function": {"module": "gemm_kernels.kernels.epilogue", "name": "gelu_erf"}},
                        "BLOCK": 1024}}
        try:
            _CANARY.append("ttir" in _SERVER.run([job])[0])
        except Exception:  # noqa: BLE001
            _CANARY.append(False)
    return _CANARY[0]


def _refuse_package_code(module: AnswerModule, forbid, hands) -> None:
    """:class:`Refused` when the learner's code uses package code it may not
    (:func:`refused_package_code`: one of the package's answers, or a helper not handed)."""
    forbid, hands = _resolved(forbid), _resolved(hands)
    # the package's answer first: its refusal says more
    for value in sorted(module.referenced, key=lambda v: not any(_same_function(v, f) for f in forbid)):
        refused = refused_package_code(value, hands, forbid)
        if refused is not None:
            raise refused


# ----------------------------------------------------------------------------- compile errors, explained
_TYPE = r"<[^<>]*?(\w+)>"

_FIXES = [
    (re.compile(r"Loop-carried variable (\w+) has initial type " + _TYPE + r" but is re-assigned to " + _TYPE),
     lambda m: (f"`{m.group(1)}` enters the loop as {m.group(2)} but the loop makes it {m.group(3)} (a compiled "
                "loop keeps one type): "
                + ("start it as fp32, `tl.zeros(..., dtype=tl.float32)` (tl.dot returns fp32, and the accumulator "
                   "must be fp32 anyway), and convert once after the loop (`.to(tl.float16)` at the store)"
                   if m.group(3) == "fp32" else f"give it {m.group(3)} from the start, or convert inside the loop"))),
    (re.compile(r"Unsupported function referenced: <(?:function|built-in function|ufunc) '?([\w.<>]+)'?"),
     lambda m: (f"`{m.group(1).split('.')[-1]}` is a plain Python function: code inside @triton.jit can call only "
                "@triton.jit functions and Triton's own (tl.*, min, max): put @triton.jit above its def, or write "
                "it with tl operations (tl.minimum, tl.where, ...)")),
    (re.compile(r"Cannot access global variable (\w+)"),
     lambda m: (f"the kernel reads the global `{m.group(1)}`: a compiled kernel reads only globals that are "
                f"tl.constexpr: define it as `{m.group(1)} = tl.constexpr(...)`, or pass it to the kernel as an "
                "argument")),
    (re.compile(r"arange's range must be a power of 2"),
     lambda m: "tl.arange's length must be a power of 2 (16, 32, 64, ...): choose block sizes that are"),
    (re.compile(r"arange's arguments must be of type tl.constexpr|must be a constexpr|is not a constexpr",
                re.IGNORECASE),
     lambda m: "block sizes must be known when the kernel compiles: declare them `BLOCK: tl.constexpr` and pass "
               "them as keywords (BLOCK=32)"),
    (re.compile(r"Input shapes should have M >= \d+, N >= \d+ and K >= (\d+)"),
     lambda m: f"tl.dot on a GPU needs blocks of at least 16 in each dimension (here K >= {m.group(1)}): use "
               "BLOCK_M, BLOCK_N and BLOCK_K of 16 or more"),
    (re.compile(r"(\w+) is not defined"),
     lambda m: f"`{m.group(1)}` is not defined where the kernel is compiled: import it in your notebook, or pass "
               "it as an argument"),
    (re.compile(r"unsupported AST node type: (\w+)|UnsupportedLanguageConstruct", re.IGNORECASE),
     lambda m: "this Python construct cannot be compiled inside @triton.jit: write it with plain assignments, "
               "loops over range(), if/else and tl operations"),
]


def _advice(text: str) -> str:
    for pattern, make in _FIXES:
        match = pattern.search(text)
        if match:
            return make(match)
    return "change that line so the kernel compiles: only code Triton can compile runs on a GPU"


def _failure(frames: list[dict], module: AnswerModule, launch: Launch) -> CompileFailure:
    """The learner's line of a compile error (the innermost frame in their code), and what to change."""
    said = next((f["message"] for f in reversed(frames) if f.get("message")), "") or frames[-1]["type"]
    said = said.strip().splitlines()[-1] if said.strip() else frames[-1]["type"]
    located = [f for f in frames if f.get("function") in module.functions]
    where, calls = None, []
    known = any(pattern.search(said) for pattern, _ in _FIXES)
    if located:
        inner = located[-1]
        where = module.functions[inner["function"]].where(inner["line"])
        calls = [module.functions[f["function"]].where(f["line"]) for f in located[:-1]]
        calls += _loop_variable_start(said, module.functions[inner["function"]], inner["line"])
    else:
        name = _unsupported_name(said)
        if name:
            where = _find_use(module, name)
        if where is None:
            outer = next((f for f in frames if f.get("function")), None)
            if launch.learner_kernel:
                where = f"your kernel {launch.fn.__name__}"
            else:
                where = (f"the check's kernel {launch.fn.__name__}, calling your code" if outer is None else
                         f"line {outer['line']} of the check's {outer['function']}, which calls your code")
    if module.uncertain and any(n in said for n in module.uncertain):
        said += " (a value the check could not pass on exactly: compare with a run on a GPU)"
    return CompileFailure(where, _short(said, 400), _advice(said), launch.fn.__name__,
                          [c if c.startswith("`") else f"called from {c}" for c in calls],
                          learners=bool(located) or known)


def _loop_variable_start(said: str, info: _Function, line: int) -> list[str]:
    """For a loop-carried type change: the line where the variable got its first type."""
    match = re.search(r"Loop-carried variable (\w+) has initial type " + _TYPE, said)
    if match is None or info.tree is None:
        return []
    var, kind = match.group(1), match.group(2)

    def targets(node):
        found = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t for t in found if isinstance(t, ast.Name) and t.id == var]

    starts = [n for n in ast.walk(info.tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and targets(n)
              and n.lineno - info.tree.lineno + 1 < line]
    if not starts:
        return []
    spelled = {"fp16": ("float16", "fp16"), "bf16": ("bfloat16", "bf16"),
               "fp32": ("float32", "fp32")}.get(kind, (kind,))
    typed = [n for n in starts if any(w in info.original(n.lineno - info.tree.lineno + 1)[1] for w in spelled)]
    node = max(typed or starts, key=lambda n: n.lineno)
    return [f"`{var}` gets its type ({kind}) at {info.where(node.lineno - info.tree.lineno + 1)}"]


def _unsupported_name(text: str) -> str | None:
    match = re.search(r"Unsupported function referenced: <(?:function|built-in function|ufunc) '?([\w.<>]+)'?", text)
    return match.group(1).split(".")[-1] if match else None


def _find_use(module: AnswerModule, name: str) -> str | None:
    """Where the learner's code refers to ``name`` (a plain function the compiler refuses)."""
    for info in module.functions.values():
        for node in ast.walk(info.tree):
            hit = ((isinstance(node, ast.Name) and node.id == name)
                   or (isinstance(node, ast.Attribute) and node.attr == name))
            if hit and hasattr(node, "lineno"):
                return info.where(node.lineno - info.tree.lineno + 1)
    return None


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


_DOT = re.compile(r"tt\.dot\b.*->\s*tensor<[0-9x]*x(f16|bf16)>.*?loc\((#loc\d+)\)")


def fp16_dots(ttir: str, module: AnswerModule) -> list[str]:
    """The learner's lines whose ``tl.dot`` accumulates in fp16 or bf16 (from the TTIR)."""
    locs = dict(re.findall(r"^(#loc\d+) = (loc\(.*\))$", ttir, flags=re.MULTILINE))
    found = []
    for match in _DOT.finditer(ttir):
        line = _resolve_loc(match.group(2), locs, module)
        found.append((match.group(1), line))
    names = {"f16": "fp16", "bf16": "bf16"}
    return list(dict.fromkeys(f"{line or 'a tl.dot'} accumulates in {names[kind]}" for kind, line in found))


def _resolve_loc(ref: str, locs: dict, module: AnswerModule, depth: int = 0) -> str | None:
    if depth > 20 or ref not in locs:
        return None
    text = locs[ref]
    match = re.match(r'loc\("([^"]*)":(\d+):(\d+)\)', text)
    if match:
        if Path(match.group(1)).stem.startswith("gk_answer_"):
            hit = module.function_at_module_line(int(match.group(2)))
            if hit is not None:
                return hit[0].where(hit[1])
        return None
    inner = re.findall(r"#loc\d+", text)
    for r in inner:
        found = _resolve_loc(r, locs, module, depth + 1)
        if found:
            return found
    return None


# ----------------------------------------------------------------------------- answers that are not the learner's
_REFERENCE_CALLS = threading.local()


def _learner_caller(filename: str) -> bool:
    try:
        from ..watchdog import learner_file
    except ImportError:  # pragma: no cover  (the watchdog ships with the package)
        return not os.path.abspath(filename).startswith(_PACKAGE_DIR)
    return learner_file(filename)


def reference(fn):
    """Mark a check's ``*_ref`` function: a call of it from the learner's code (a lambda around it)
    is noted, and the check refuses the answer (:func:`plain_exercise`); in exam mode that call
    raises :class:`~gemm_kernels.lab.exam.ExamModeError`."""

    @functools.wraps(fn)
    def ref(*args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if _learner_caller(caller):
            if exam.ON:
                raise exam.refuse(fn.__name__)
            _REFERENCE_CALLS.__dict__.setdefault("names", []).append(fn.__name__)
        return fn(*args, **kwargs)

    return ref


def _package_answer(title: str, answer) -> CheckResult | None:
    if not is_package_object(answer):
        return None
    return CheckResult(title, WRONG, f"this is the package's own {qualified_name(answer)}, not your code: the check "
                       "compares your answer with the package, so this says nothing about what you wrote",
                       ["pass the function you wrote in the notebook"])


@contextlib.contextmanager
def learner_calls(functions=None):
    """Within: the list this yields gets the name of each of ``functions`` (package functions) that
    the learner's code calls, by whatever name or module it reached it (a profile hook on their
    code objects, in this thread); ``functions=None``: every function of the package the
    learner's code calls (named ``lab.exercises.fp8.quantize_ref``, say)."""
    codes = {}
    for fn in functions or ():
        py = python_function(fn)
        if py is not None:
            codes[py.__code__] = qualified_name(py).replace("gemm_kernels.", "", 1)
    seen: list = []
    if functions is not None and not codes:
        yield seen
        return

    def hook(frame, event, arg):
        if event != "call" or frame.f_back is None or not _learner_caller(frame.f_back.f_code.co_filename):
            return
        code = frame.f_code
        if code in codes:
            seen.append(codes[code])
        elif functions is None and os.path.abspath(code.co_filename).startswith(_PACKAGE_DIR):
            module = os.path.splitext(os.path.relpath(os.path.abspath(code.co_filename), _PACKAGE_DIR))[0]
            seen.append(f"{module.replace(os.sep, '.')}.{getattr(code, 'co_qualname', code.co_name)}")

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield seen
    finally:
        sys.setprofile(previous)


def helper_computes(name: str, forbid=()) -> bool:
    """Whether a package function an answer calls (``models.tiles.launch_order_grid``) computes the
    answer for it: one the check names, or any of the drawings' (``viz.drawings.block_pointers``
    computes 01's offsets and masks; the models stay, as notebooks hand some to the learner)."""
    return name in forbid or name.startswith("viz.")


def plain_exercise(title: str, *, hints, praise: str = "correct, well done.", forbid=()):
    """:func:`_core.exercise` for an answer in plain Python, refusing the package's own functions
    (the checks' ``*_ref`` references) passed as answers, a right answer that got there by
    calling one (a lambda around it), and one that calls a package function computing the
    exercise's answer (``forbid``: those functions, or a function returning them)."""

    def decorate(body):
        @functools.wraps(body)
        def checked(answer, *args, **kwargs):
            _REFERENCE_CALLS.names = []
            with learner_calls(None) as called:  # every package function the answer's own lines call
                problems = body(answer, *args, **kwargs)
            named = {qualified_name(f).replace("gemm_kernels.", "", 1) for f in (forbid() if callable(forbid)
                                                                                 else forbid) or ()}
            helpers = [name for name in dict.fromkeys(called) if helper_computes(name, named)]
            used = list(dict.fromkeys(getattr(_REFERENCE_CALLS, "names", [])))
            _REFERENCE_CALLS.names = []
            if problems:  # wrong whoever wrote it
                return problems
            refused = _package_answer(title, answer)
            if refused is not None:
                return refused
            if used:  # right, but only through the check's own answer
                return CheckResult(title, WRONG, f"your answer calls {used[0]}, the check's own reference: the check "
                                   "compares your answer with it, so this says nothing about what you wrote",
                                   ["write the computation yourself (the notebook's text says what it has to "
                                    "return)"])
            if helpers:  # right, through the package's own computation of it
                return CheckResult(title, WRONG, f"your answer calls {helpers[0]}, which computes this exercise's "
                                   "answer for you: the check cannot see your own reasoning in it",
                                   ["write the computation yourself, with plain Python and numpy (the notebook's "
                                    "text says what it has to return)"])
            return problems

        check = exercise(title, hints=hints, praise=praise)(checked)
        check.forbid = forbid
        return check

    return decorate


# ----------------------------------------------------------------------------- the check
_GPU_WHAT = "a GPU (sm_90, Hopper)"


def _refusal(answer, kind: str, title: str) -> Refused | None:
    """Answers refused before anything runs: the package's own code, a plain function where a
    @triton.jit one is asked for."""
    if kind != "launcher" and is_package_object(answer):
        found = _package_answer(title, answer)
        return Refused(found.message, found.details)
    if (kind == "jit" and not is_jit(answer)) or (kind == "kernel" and not is_jit(answer)
                                                  and not hasattr(answer, "__getitem__")):  # not launchable: kernel[grid]
        name = getattr(answer, "__name__", "your function")
        role = "calls it inside a kernel" if kind == "jit" else "launches it as kernel[grid](...)"
        fix = (f"put @triton.jit on the line above `def {name}`" if name.isidentifier() else
               "write it with def, with @triton.jit on the line above")
        return Refused(f"expected a @triton.jit {'function' if kind == 'jit' else 'kernel'}, got a plain Python "
                       f"function ({name}): the check {role}, where only @triton.jit code runs",
                       [f"{fix} (and use tl operations inside it)"])
    return None


def kernel_exercise(title: str, *, hints, kind: str, praise: str = "correct, well done.", forbid=(), hands=(),
                    gpu_case=None, fp32_dot: bool = False, diagnose=None, compiled=None, stages=("ptx",)):
    """:func:`_core.exercise` for an answer that is (``kind="kernel"``), launches (``"launcher"``)
    or is called inside (``"jit"``) a ``@triton.jit`` kernel; see the module docstring.

    ``forbid``: the package's answers the learner's code may not call; ``hands``: the package's
    helpers the exercise hands the learner, the only other package code it may use (none by
    default; :func:`refused_package_code`).  A launcher may launch only the learner's own kernels.
    ``gpu_case(answer) -> problems``: one case, run with plain launches on a GPU.  ``fp32_dot``: refuse a ``tl.dot``
    accumulating in fp16.  ``diagnose(log, failure) -> lines``: the common mistakes behind a
    failure (``failure``: the body's problems, or the exception it raised).  ``compiled(outcomes)
    -> problems``: a rule the compiled code must keep (notebook 10: an fp8 wgmma in the PTX), read
    from each compiled launch's ``{"ttir": ..., <stage>: ...}`` with the ``stages`` it names."""

    def decorate(body):
        @functools.wraps(body)
        def checked(answer, *args, **kwargs):
            refused = _refusal(answer, kind, title)
            if refused is not None:
                return CheckResult(title, WRONG, refused.message, refused.details)
            prestart_compiler()
            if kind == "launcher":
                answer = allocating_only(answer)
            log = None
            try:
                with recording() as log:
                    problems = body(answer, *args, **kwargs)
            except Refused as exc:
                return _foreign_launch(title, log) or CheckResult(title, WRONG, exc.message, exc.details)
            except AnswerRaised as exc:
                return _foreign_launch(title, log) or _right_only_with_zeros(
                    title, _raised(title, exc, exc.exc, log, diagnose), log, body, answer, args, kwargs)
            except Exception as exc:
                from ..checked import OutOfBounds

                if isinstance(exc, OutOfBounds):
                    return _right_only_with_zeros(title, _raised(title, None, exc, log, diagnose), log, body, answer,
                                                  args, kwargs)
                raise
            foreign = _foreign_launch(title, log)
            if foreign is not None:
                return foreign
            if isinstance(problems, CheckResult):
                return problems
            problems = list(problems or [])
            mine = log.learner_launches()
            if kind in ("launcher", "kernel") and not mine:
                head = ("this returns the right numbers without your kernel: " if not problems else
                        "this launches no kernel of yours: ")
                return CheckResult(title, WRONG, head + "it launched no @triton.jit kernel you wrote (it ran torch, "
                                   "or the package's own kernels)",
                                   [_YOUR_OWN_KERNEL, *problems])
            if problems:
                extra = [line for line in _diagnoses(diagnose, log, problems) if line not in problems]
                return _right_only_with_zeros(title, CheckResult(title, WRONG, f"not yet: {_count(problems)}",
                                                                 problems + extra), log, body, answer, args, kwargs)
            computed = getattr(answer, "computed", None)
            if computed:  # right numbers, but torch's (the kernel may only set a flag)
                return CheckResult(title, WRONG, f"your launcher computes with torch ({computed[0]}): a launcher may "
                                   "only allocate its output and launch the kernel, which computes the answer",
                                   [_LAUNCHER_FIX])
            try:
                verdict = _compile_verdict(title, mine, forbid, hands, fp32_dot, compiled, stages)
            except Refused as exc:
                return CheckResult(title, WRONG, exc.message, exc.details)
            if isinstance(verdict, CheckResult):
                return verdict
            if gpu_case is not None and _gpu_run_possible(mine):
                gpu_problems = _run_on_gpu(gpu_case, answer)
                if gpu_problems:
                    return CheckResult(title, WRONG, "it passes in the interpreter, but not on this GPU: "
                                       + gpu_problems[0], gpu_problems[1:])
                verdict += " It ran on this GPU too."
            return CheckResult(title, CORRECT, f"{praise} {verdict}".strip())

        check = exercise(title, hints=hints, praise=praise, hands=hands)(checked)
        check.forbid = forbid
        # the part of the check only a GPU runs, on its own (tests hold it to the solution and a mistake)
        check.gpu_branch = None if gpu_case is None else functools.partial(_run_on_gpu, gpu_case)
        return check

    return decorate


_YOUR_OWN_KERNEL = "the exercise asks for your own kernel: write it with @triton.jit and launch it with kernel[grid](...)"


def _foreign_message(log: LaunchLog) -> Refused:
    return Refused(f"your launcher launches {log.foreign[0]}, a kernel your notebook does not define: a launcher "
                   "may launch only the kernels you wrote",
                   ["write the kernel that computes the answer yourself, with @triton.jit, and launch that one"])


def _foreign_launch(title: str, log: LaunchLog | None) -> CheckResult | None:
    """"wrong" for a launcher that launched a kernel not the learner's (the package's, by any name):
    it did the work, whatever theirs did.  The launch itself raised (:class:`recording`), so this
    also holds where the launcher caught that or the answer's call reported it as raised."""
    if log is None or not log.foreign:
        return None
    if not log.learner_launches():
        return CheckResult(title, WRONG, f"this launches no kernel of yours: it launched {log.foreign[0]}, the "
                           "package's, and no @triton.jit kernel you wrote", [_YOUR_OWN_KERNEL])
    refused = _foreign_message(log)
    return CheckResult(title, WRONG, refused.message, refused.details)


def _compile_verdict(title: str, launches: list[Launch], forbid, hands, fp32_dot: bool, compiled=None, stages=()):
    """A sentence for the praise, or a "wrong" result for code that does not compile for sm_90
    (or breaks the ``compiled`` rule)."""
    results, module, skipped = compile_launches(launches, forbid=forbid, hands=hands,
                                                stages=stages if compiled else ())
    if skipped is not None:  # the grader says "not verified" (0 points) for this: say so where it counts
        graded = " In a class this earns no point until it compiles: the grader's machine tries again." \
            if exam.ON else ""
        return f"(Not compiled for {_GPU_WHAT} here: {skipped}.){graded}"
    for outcome in results:
        if isinstance(outcome, CompileFailure):
            return CheckResult(title, WRONG, f"it runs in the interpreter, but it does not compile for {_GPU_WHAT}: "
                               f"{outcome.where}",
                               [f"the compiler says: {outcome.said}", *outcome.frames, f"to fix: {outcome.fix}"])
    if fp32_dot:
        dots = list(dict.fromkeys(line for outcome in results for line in fp16_dots(outcome.get("ttir", ""), module)))
        if dots:
            return CheckResult(title, WRONG, f"{dots[0]}: the exercise asks for an fp32 accumulator",
                               dots[1:3] + ["an fp16 accumulator loses the small products of a long K loop (its "
                                            "spacing at 2048 is 2): start it with tl.zeros(..., dtype=tl.float32), "
                                            "let tl.dot accumulate into it (no out_dtype), and convert once at the "
                                            "store"])
    if compiled is not None:
        problems = list(compiled([outcome for outcome in results if isinstance(outcome, dict)]) or [])
        if problems:
            return CheckResult(title, WRONG, f"it compiles for {_GPU_WHAT}, but {problems[0]}", problems[1:])
    return f"It compiles for {_GPU_WHAT}."


def _gpu_run_possible(launches) -> bool:
    if not runtime.on_gpu():
        return False
    from triton.runtime.jit import JITFunction

    return all(isinstance(launch.kernel, JITFunction) for launch in launches)


def _run_on_gpu(gpu_case, answer) -> list[str]:
    """``gpu_case(answer)`` with plain (compiled) launches: its problems, or the error it raised."""
    try:
        with plain_launches():
            problems = list(gpu_case(answer) or [])
        torch.cuda.synchronize()
    except AnswerRaised as exc:
        return [f"on the GPU: {exc}"]
    except Exception as exc:  # noqa: BLE001  (the compiled kernel failed where the interpreted one ran)
        return [f"on the GPU it raised {type(exc).__name__}: {_short(str(exc), 400)}"]
    return problems


def _diagnoses(diagnose, log, failure) -> list[str]:
    if diagnose is None or exam.ON:  # a diagnosis names the fix ("address out with ..."): not in exam mode
        return []
    try:
        return [f"diagnosis: {line}" for line in diagnose(log, failure) or []]
    except Exception:  # noqa: BLE001  (a diagnosis is a bonus: never the reason a check fails)
        return []


def _undefined_sites(log) -> list[str]:
    return list(dict.fromkeys(site for launch in (log.learner_launches() if log is not None else [])
                              for site in launch.undefined))


def _right_only_with_zeros(title, result, log, body, answer, args, kwargs):
    """``result`` (wrong), or, when the answer's masked loads with no ``other=`` read undefined
    lanes and the answer passes once those lanes read 0 (as the interpreter gives them), a verdict
    that names those loads: on a GPU the lanes hold whatever the registers held."""
    from ..checked import undefined_as_zero

    sites = _undefined_sites(log)
    if not sites:
        return result
    try:
        with undefined_as_zero(), recording():
            again = body(answer, *args, **kwargs)
    except Exception:  # noqa: BLE001  (wrong either way: the first verdict stands)
        return result
    if isinstance(again, CheckResult) or list(again or []):
        return result
    return CheckResult(title, WRONG, f"right only if masked-off lanes read 0: {sites[0]} loads with a mask and no "
                       "other=, and uses lanes the mask switched off",
                       [f"on a GPU a masked load leaves its masked-off lanes undefined (whatever the registers held); "
                        "the interpreter happens to give 0, so the check gave them NaN (0x5A bytes for integers) "
                        "and your answer went wrong", "give the load other=0 (or the value those lanes should "
                        "have)", *(f"also {site}" for site in sites[1:])])


def _raised(title, raised: AnswerRaised | None, err, log, diagnose):
    """The result for an answer that raised (``raised``) or a kernel stopped out of bounds (``err``)."""
    from ..checked import OutOfBounds
    from ._core import out_of_bounds_result

    lines = _diagnoses(diagnose, log, err)
    if isinstance(err, OutOfBounds):
        # the check's own diagnosis knows the exercise (an expert's end row, not the tensor's last
        # row): when it explains the access, the generic one, which knows only tensors, stays out
        if not lines and not exam.ON:  # the check's diagnosis said nothing (or there is none): ask once
            lines += [f"diagnosis: {line}" for line in _safe(access_diagnosis, err, log)]
        result = out_of_bounds_result(title, err, raised.what if raised is not None else None)
        if lines:
            result.details = lines + [d for d in result.details if "check the offsets and loop bounds" not in d]
        return result
    if raised is None:
        raise err
    if not exam.ON:
        lines += [f"diagnosis: {line}" for line in _safe(api_confusions, err, log)]
    return CheckResult(title, WRONG, _raised_text(raised), lines)


#: tl functions a learner takes for another: (name, what the error says, the line that explains it)
_CONFUSED = (
    ("min", "axis", "tl.min(x, axis) is a reduction over an axis of one block; the smaller of two values is "
                    "tl.minimum(a, b)"),
    ("max", "axis", "tl.max(x, axis) is a reduction over an axis of one block; the larger of two values is "
                    "tl.maximum(a, b)"),
)


def api_confusions(err, log) -> list[str]:
    """Lines for a ``tl`` call in the learner's @triton.jit code that the error points at: two
    values given to a reduction (``tl.min(a, b)`` for ``tl.minimum``)."""
    text = str(err) + "".join(str(getattr(e, "args", "")) for e in (err.__cause__, err.__context__) if e)
    found = []
    for launch in (log.learner_launches() if log is not None else []):
        for fn in [launch.kernel] * launch.learner_kernel + launch.learner_functions:
            py = compat.jit_source_function(fn)
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(py)))
            except (OSError, TypeError, SyntaxError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "tl" \
                        and len(node.args) == 2 and not node.keywords:
                    for name, word, line in _CONFUSED:
                        if node.func.attr == name and word in text:
                            found.append(f"line {py.__code__.co_firstlineno + node.lineno - 1} of {py.__name__}: "
                                         f"{line}")
    return list(dict.fromkeys(found))


def _raised_text(raised: AnswerRaised) -> str:
    """``what raised X: message (line N of f: code)``: AnswerRaised's own message, which names the
    learner's innermost line (never a checker's), or the check's code that used their function."""
    return str(raised)


def _safe(fn, *args) -> list[str]:
    try:
        return list(fn(*args) or [])
    except Exception:  # noqa: BLE001
        return []


# ----------------------------------------------------------------------------- common mistakes
def _launch_of(log: LaunchLog | None, err) -> Launch | None:
    """The learner launch a checked-run error came from (the last one of that kernel)."""
    if log is None:
        return None
    for launch in reversed(log.launches):
        if launch.fn.__name__ == getattr(err, "kernel", None):
            return launch
    return None


def _affine(offsets: np.ndarray):
    """(base, step along rows, step along columns) of a 2-D block of offsets that is affine, else None."""
    if offsets.ndim != 2 or offsets.size == 0:
        return None
    base = int(offsets[0, 0])
    di = int(offsets[1, 0] - base) if offsets.shape[0] > 1 else 0
    dj = int(offsets[0, 1] - base) if offsets.shape[1] > 1 else 0
    i = np.arange(offsets.shape[0])[:, None]
    j = np.arange(offsets.shape[1])[None, :]
    if not np.array_equal(offsets, base + i * di + j * dj):
        return None
    return base, di, dj


def _origin(base: int, strides: tuple, shape: tuple):
    """(row, col) of element offset ``base`` in a 2-D view, when it decodes (columns may run past)."""
    s0, s1 = strides
    if s1 == 1 and s0 >= 1:
        return base // s0, base % s0
    if s0 == 1 and s1 >= 1:
        return base % s1, base // s1
    return None


def _stride_params(launch: Launch | None, tensor_param: str) -> list[str]:
    """The stride parameters that go with tensor parameter ``x_ptr`` (``stride_xm``, ``stride_xn``...)."""
    if launch is None:
        return []
    letter = tensor_param.split("_")[0].lower()
    return [p for p in launch.named if p.lower().startswith(f"stride_{letter}") and isinstance(launch.named[p], int)]


def access_diagnosis(err, log: LaunchLog | None = None) -> list[str]:
    """What is wrong with a 2-D load or store a checked run stopped, from its lanes: the block's
    offsets against the tensor's strides (swapped, or assumed contiguous), the mask against the
    tensor's rows and columns (a limit missing, or the mask transposed)."""
    a = getattr(err, "access", None)
    if a is None or a.region is None or a.offsets.ndim != 2:
        return []
    t = a.region.tensor
    if t.dim() != 2:
        return []
    name = a.region.name
    shape, strides = tuple(t.shape), tuple(t.stride())
    fit = _affine(np.asarray(a.offsets))
    if fit is None:
        return []
    base, di, dj = fit
    R, C = a.offsets.shape
    launch = _launch_of(log, err)
    params = _stride_params(launch, name)
    lines = []
    if (di, dj) != strides and (di, dj) == (strides[1], strides[0]) and di != dj:
        which = f" ({params[0]} and {params[1]})" if len(params) >= 2 else ""
        lines.append(f"the offsets of this {a.kind} step {di} per row of the block and {dj} per column, but "
                     f"{name}'s rows are {strides[0]} elements apart and its columns {strides[1]}: the two strides are "
                     f"swapped{which}: rows[:, None] * the row stride + cols[None, :] * the column stride")
        return lines
    contiguous = (shape[1], 1)
    if (di, dj) != strides and (di, dj) == contiguous and strides != contiguous:
        label = name[:-4] if name.endswith("_ptr") else name
        use = (f"multiply by {params[0]} and {params[1]}" if len(params) >= 2 else
               f"pass {label}.stride(0) and {label}.stride(1) to the kernel and multiply by them")
        lines.append(f"the offsets of this {a.kind} assume a contiguous {label} (rows {shape[1]} apart, columns 1), "
                     f"but {label} here is a view with strides {strides}: {use}")
        return lines
    if (di, dj) != strides:
        return lines
    origin = _origin(base, strides, shape)
    if origin is None:
        return lines
    r0, c0 = origin
    rows, cols = r0 + np.arange(R), c0 + np.arange(C)
    inside = (rows[:, None] >= 0) & (rows[:, None] < shape[0]) & (cols[None, :] >= 0) & (cols[None, :] < shape[1])
    active = np.broadcast_to(np.asarray(a.active, dtype=bool), (R, C))
    if R == C and not np.array_equal(active, inside) and np.array_equal(active, inside.T):
        lines.append(f"the mask of this {a.kind} is transposed: it switches lane (i, j) on by column j's row limit and "
                     f"row i's column limit; rows go down the block (rows[:, None] < {shape[0]}), columns across "
                     f"(cols[None, :] < {shape[1]})")
        return lines
    past_rows = active & (rows[:, None] >= shape[0])
    past_cols = active & (cols[None, :] >= shape[1])
    dims = _dim_names(name)
    label = name[:-4] if name.endswith("_ptr") else name
    for axis, past, index in ((1, past_cols, cols), (0, past_rows, rows)):
        if not past.any():
            continue
        what = ("column", "columns", "cols[None, :]") if axis else ("row", "rows", "rows[:, None]")
        limit = dims[axis] if dims else _size_param(launch, shape[axis])
        last = int(index[past.any(1 - axis)].max())
        head = (f"lanes of {what[1]} {shape[axis]}..{last} (past {label}'s last {what[0]}: "
                f"{f'{limit} = ' if limit else ''}{plural(shape[axis], what[0])}) are active: the mask of this {a.kind} ")
        if limit == "K":
            lines.append(head + "has no K limit: the last K block runs past K, so the mask needs `k < K` too")
        else:
            lines.append(head + f"needs the {what[0]} limit too (`{what[2]} < {limit or shape[axis]}`)")
    return lines


def _size_param(launch, size: int) -> str | None:
    """The one integer parameter of the launch whose value is ``size`` (``N``), so a limit is named
    as the learner's kernel names it; None when none or several are."""
    if launch is None:
        return None
    names = [name for name, v in launch.named.items()
             if isinstance(v, int) and not isinstance(v, bool) and v == size and "stride" not in name.lower()
             and not name.upper().startswith(("BLOCK", "GROUP", "NUM_"))]
    return names[0] if len(names) == 1 else None


#: the dimension names of the matmul's tensors, by the first letter of their parameter
_MATMUL_DIMS = {"a": ("M", "K"), "b": ("K", "N"), "c": ("M", "N")}


def _dim_names(param: str):
    letter = param.split("_")[0].lower()
    return _MATMUL_DIMS.get(letter) if param.lower().endswith("_ptr") or len(param) == 1 else None


def stride_diagnosis(launch: Launch | None, tensors: dict) -> list[str]:
    """A launcher that passes strides that are not its tensors': ``tensors`` maps a label (``a``)
    to the tensor; the launch's ``stride_a*`` arguments are compared with its strides."""
    if launch is None:
        return []
    lines = []
    for label, tensor in tensors.items():
        param = next((p for p, v in launch.named.items() if v is tensor), None)
        if param is None:
            continue
        params = _stride_params(launch, param)
        if len(params) != 2:
            continue
        passed = tuple(launch.named[p] for p in params)
        real = tuple(tensor.stride())
        if passed == real:
            continue
        if passed == real[::-1]:
            lines.append(f"the launch passes {label}.stride(1) = {real[1]} as {params[0]} and {label}.stride(0) = "
                         f"{real[0]} as {params[1]}: swapped ({params[0]} is the step between rows of {label})")
        elif passed == (tensor.shape[1], 1):
            lines.append(f"the launch passes ({tensor.shape[1]}, 1) as {label}'s strides, as if it were contiguous, "
                         f"but {label} here has strides {real}: pass {label}.stride(0), {label}.stride(1)")
        else:
            lines.append(f"the launch passes {passed} as {label}'s strides ({', '.join(params)}), but {label} has "
                         f"strides {real}")
    return lines


def grid_tiles(launch: Launch | None, M: int, N: int):
    """(BLOCK_M, BLOCK_N, programs) of a one-program-per-tile launch (None if the blocks are not named)."""
    if launch is None or launch.grid is None:
        return None
    bm = launch.constexpr("BLOCK_M", "BM", "BLOCK_SIZE_M")
    bn = launch.constexpr("BLOCK_N", "BN", "BLOCK_SIZE_N")
    if not isinstance(bm, int) or not isinstance(bn, int) or bm <= 0 or bn <= 0:
        return None
    return bm, bn, launch.grid[0] * launch.grid[1] * launch.grid[2]


def tile_mapping_diagnosis(out: torch.Tensor, ref: torch.Tensor, launch: Launch | None) -> list[str]:
    """For a one-program-per-tile matmul whose C is partly wrong: which common pid -> tile mistake
    gives exactly the tiles that came out right (a grid rounded down, pid_m and pid_n swapped,
    num_pid_n rounded down)."""
    M, N = ref.shape
    found = grid_tiles(launch, M, N)
    if found is None:
        return []
    bm, bn, programs = found
    nm, nn = -(-M // bm), -(-N // bn)
    got, want = out.double().cpu(), ref.double().cpu()
    ok = torch.isclose(got, want, atol=1e-2, rtol=1e-2)
    right = {(i, j) for i in range(nm) for j in range(nn)
             if bool(ok[i * bm:(i + 1) * bm, j * bn:(j + 1) * bn].all())}

    def covered(mapping):
        tiles = set()
        for pid in range(programs):
            m, n = mapping(pid)
            if 0 <= m < nm and 0 <= n < nn:
                tiles.add((m, n))
        return tiles

    lines = []
    if programs < nm * nn:
        floor = {(M // bm) * (N // bn), (M // bm) * nn, nm * (N // bn)}
        why = (f": M // BLOCK_M or N // BLOCK_N rounds the ragged last row or column of tiles away; use "
               f"triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)" if programs in floor else "")
        lines.append(f"the grid launches {programs} program{'s' * (programs != 1)} for {nm} x {nn} = {nm * nn} "
                     f"tiles of C "
                     f"({bm} x {bn}){why}")
        return lines
    if right == covered(lambda p: (p // nn, p % nn)):
        return lines
    candidates = []
    if nn != nm and right == covered(lambda p: (p % nn, p // nn)):
        candidates.append(f"pid_m and pid_n swapped (pid // num_pid_n is the tile row, pid_m, and pid % num_pid_n "
                          f"the tile column, pid_n)")
    floor_n = N // bn
    # num_pid_n = 0 divides by zero: the interpreter gives 0, every program takes tile (0, 0)
    floor = (lambda p: (p // floor_n, p % floor_n)) if floor_n else (lambda p: (0, 0))
    if N % bn and right == covered(floor):
        candidates.append(f"num_pid_n rounded down (N // BLOCK_N = {floor_n}, but {nn} tile column{'s' * (nn != 1)} "
                          f"cover{'s' * (nn == 1)} N = {N}: "
                          "tl.cdiv(N, BLOCK_N))")
    if len(candidates) == 1:
        lines.append(f"only the tiles your pid -> (pid_m, pid_n) mapping reaches came out right: {candidates[0]}")
    elif candidates:
        lines.append("only the tiles your pid -> (pid_m, pid_n) mapping reaches came out right; two mistakes give "
                     "exactly these tiles: " + "; or ".join(candidates))
    return lines
    if nn != nm and right == covered(lambda p: (p % nn, p // nn)):
        lines.append(f"pid_m and pid_n are swapped: with {nn} tile columns, pid // num_pid_n is the tile row (pid_m) "
                     "and pid % num_pid_n the tile column (pid_n)")
    elif N % bn and N // bn and right == covered(lambda p: (p // (N // bn), p % (N // bn))):
        lines.append(f"num_pid_n is rounded down (N // BLOCK_N = {N // bn}, but {nn} tile columns cover N = {N}): "
                     "use tl.cdiv(N, BLOCK_N)")
    elif M % bm and M // bm and right == covered(lambda p: (p // nn, p % nn)) - {(nm - 1, j) for j in range(nn)}:
        lines.append(f"the last row of tiles (rows {(nm - 1) * bm}..{M - 1}) came out wrong: M // BLOCK_M rounds it "
                     "away; use tl.cdiv")
    return lines
