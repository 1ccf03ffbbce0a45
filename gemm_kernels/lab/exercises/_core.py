"""The contract every exercise check follows.

``check_xxx(answer)`` never raises into the notebook.  It returns a :class:`CheckResult`
(shown as a coloured box in Jupyter, as text elsewhere) whose ``status`` is one of

* ``"not attempted"`` -- the answer is still the stub: it raises ``NotImplementedError``
  (what ``make student`` puts in), returns ``None``/``...``, or *is* ``None``/``...``;
* ``"wrong"`` -- with the cases that failed, expected vs got (``tile (2, 1): expected
  program 5, got 7``), and a hint;
* ``"correct"``.

A check body is an ordinary function that calls the learner's code through :func:`call`
(which turns a stub into "not attempted" and an exception into a readable "wrong") and
returns the list of problems it found (empty when everything matched).

While a check runs, every ``kernel[grid](...)`` is a checked run
(:func:`gemm_kernels.lab.checked.run_checked`): a missing or wrong mask gets the precise
report of :class:`~gemm_kernels.lab.checked.OutOfBounds` and its picture, never a crash.
Whatever the learner's code returns or raises, the check returns a result: answers of the
wrong type (a dict, a meta tensor, ``10**400``, ...) get "wrong" with what was expected.

Hints come in three steps (:class:`Hints`): the first wrong answer shows a *nudge*, the next
ones the *approach*; the *solution* only on request, ``check_xxx.hint(level=3)`` or, once both
hints were shown, the "show a solution" button.  In exam mode (:mod:`gemm_kernels.lab.exam`) only the
nudge is left, and the check modules refuse their ``*_ref`` references to the learner.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import html
import itertools
import math
import re
import sys
import traceback
import types
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from ..._triton_compat import ThreadLocalPatch
from .. import exam
from ..interpreted_autotune import install as _interpreted_autotune

_interpreted_autotune()  # an @triton.autotune kernel launches on a CPU too (issue 48)

NOT_ATTEMPTED = "not attempted"
WRONG = "wrong"
CORRECT = "correct"
#: what a CPU could check holds, but not all that "correct" needs (notebook 08's Gluon loop)
STRUCTURE_ONLY = "structure only"
#: a class build (lab.class_build) has no reference answer to compare with: the teacher's grader decides
HANDED_IN = "handed in"

#: how many failing cases a wrong answer lists before "... and N more"
MAX_DETAILS = 8

_ICONS = {NOT_ATTEMPTED: "[ ]", WRONG: "[x]", CORRECT: "[ok]", STRUCTURE_ONLY: "[~]", HANDED_IN: "[?]"}
_COLOURS = {NOT_ATTEMPTED: "#6c757d", WRONG: "#b02a37", CORRECT: "#146c43", STRUCTURE_ONLY: "#997404",
            HANDED_IN: "#0a58ca"}


@dataclass(frozen=True)
class Hints:
    """Three steps of help for one exercise: a nudge (where to look), the approach (how to go
    about it, not the formula), and a solution (shown only on request)."""

    nudge: str
    approach: str
    solution: str

    def level(self, level: int) -> str:
        return (self.nudge, self.approach, self.solution)[_hint_index(level)]

    def for_exam(self) -> Hints:
        """These hints with every level beyond :data:`exam.HINT_LEVEL` replaced by a note that it is off."""
        kept = (self.nudge, self.approach, self.solution)[:exam.HINT_LEVEL]
        return Hints(*kept, *[exam.OFF] * (3 - len(kept)))


def _hint_index(level) -> int:
    try:
        return min(max(int(level), 1), 3) - 1
    except (TypeError, ValueError, OverflowError):
        return 0


_HINT_NAMES = ("nudge", "approach", "solution")

#: wrong answers so far, per exercise title, in this process (how much of the hints to show)
_wrong_attempts: dict[str, int] = {}


def reset_hints() -> None:
    """Forget the wrong attempts: the next wrong answer of every exercise shows the nudge again."""
    _wrong_attempts.clear()


@dataclass
class Hint:
    """One hint, shown as text or as a small box in Jupyter (``check_xxx.hint(level=2)``)."""

    exercise: str
    level: int
    text: str

    def __str__(self) -> str:
        return f"hint {self.level} ({_HINT_NAMES[self.level - 1]}) for {self.exercise}: {self.text}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return (f'<div style="border-left: 4px solid #0d6efd; padding: 4px 8px; font-family: monospace; '
                f'white-space: pre-wrap">{html.escape(str(self))}</div>')


@dataclass
class CheckResult:
    exercise: str
    status: str
    message: str
    details: list[str] = field(default_factory=list)
    hints: Hints | None = None
    #: how many hint steps this result shows (1: the nudge, 2: nudge and approach)
    hint_level: int = 0
    #: a PNG picture of what went wrong (the block of lanes of an out-of-bounds access)
    picture: bytes | None = None
    #: shown in the notebook already (the check shows its verdict itself: see :func:`_show`)
    _shown: bool = field(default=False, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status == CORRECT

    @property
    def attempted(self) -> bool:
        return self.status != NOT_ATTEMPTED

    @property
    def hint(self) -> str | None:
        """The most detailed hint this result shows (None when it shows none)."""
        if self.hints is None or self.status != WRONG or self.hint_level < 1:
            return None
        return self.hints.level(self.hint_level)

    def show_hint(self, level: int = 3) -> Hint | None:
        """Hint ``level`` (1 nudge, 2 approach, 3 solution) of this exercise."""
        return None if self.hints is None else Hint(self.exercise, _hint_index(level) + 1, self.hints.level(level))

    def lines(self) -> list[str]:
        shown = self.details[:MAX_DETAILS]
        out = [f"{_ICONS[self.status]} {self.exercise}: {self.message}"]
        out += [f"    {d}" for d in shown]
        if len(self.details) > len(shown):
            out.append(f"    ... and {len(self.details) - len(shown)} more")
        if self.picture is not None and self.status == WRONG:
            out.append("    (the picture of the failing block is shown below in Jupyter: result.picture holds the PNG)")
        if self.hints is not None and self.status == WRONG:
            for level in range(1, self.hint_level + 1):
                out.append(f"    hint {level} ({_HINT_NAMES[level - 1]}): {self.hints.level(level)}")
            if not exam.ON:
                more = "the next hint after another try, or " if self.hint_level < 2 else ""
                out.append(f"    stuck? {more}check_{self.exercise}.hint(level=3) shows a solution")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    __repr__ = __str__

    def _ipython_display_(self) -> None:
        """Jupyter shows a verdict once: when the check ran (whatever follows it in the cell), not
        again as the cell's last expression."""
        if self._shown:
            return
        self._shown = True
        from IPython.display import display

        display({"text/plain": str(self), "text/html": self._repr_html_()}, raw=True)

    def _repr_html_(self) -> str:
        colour = _COLOURS[self.status]
        body = "<br>".join(html.escape(line).replace("    ", "&nbsp;" * 4) for line in self.lines())
        extra = ""
        if self.picture is not None and self.status == WRONG:
            data = base64.b64encode(self.picture).decode("ascii")
            extra += f'<br><img alt="the failing block" style="max-width: 100%" src="data:image/png;base64,{data}">'
        if self.hints is not None and self.status == WRONG and not exam.ON and self.hint_level >= 2:
            # as the text says: the solution only once both hints were shown (after two wrong tries)
            extra += ('<details style="margin-top: 4px"><summary style="cursor: pointer">show a solution '
                      f'(hint 3)</summary>{html.escape(self.hints.solution)}</details>')
        return (f'<div style="border-left: 4px solid {colour}; padding: 4px 8px; '
                f'font-family: monospace; white-space: pre-wrap">{body}{extra}</div>')


class _NotAttempted(Exception):
    pass


class AnswerRaised(Exception):
    """The learner's code raised something other than NotImplementedError.  The message names
    the learner's own line (:func:`learner_location`), never a line of the check's."""

    def __init__(self, what: str, exc: BaseException):
        self.what, self.exc = what, exc
        super().__init__(f"{what} raised {type(exc).__name__}: {_short(exc, 600)}{learner_location(exc)}")


class ReturnedNone(AnswerRaised):
    """The learner's function ran and returned None: a missing ``return``, not an untouched stub
    (a student copy's stub raises NotImplementedError)."""

    def __init__(self, what: str):
        Exception.__init__(self, f"{what} returned None: your function has no `return` (or reaches its end "
                                 "without one on this path); end it with `return ...`, as the exercise asks")
        self.what, self.exc = what, self


class ChangedInput(AnswerRaised):
    """The learner's function wrote into a tensor it was given to read: the check's reference would
    then be computed from what the answer left there (an answer zeroing ``a`` matched ``0 @ b``)."""

    def __init__(self, what: str, name: str):
        Exception.__init__(self, f"{what} changed its input {name}: an answer reads its inputs and returns a new "
                                 "tensor; check the stores (and their pointers) in your kernel")
        self.what, self.exc = what, self


def _snapshots(answer, args, kwargs) -> list:
    """(name, tensor, copy) of every tensor argument, to tell afterwards whether the answer wrote into it."""
    import inspect

    try:
        params = [p.name for p in inspect.signature(answer).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    named = [(params[i] if i < len(params) else f"argument {i + 1}", a) for i, a in enumerate(args)]
    named += list(kwargs.items())
    return [(name, t, t.detach().clone()) for name, t in named if isinstance(t, torch.Tensor) and t.numel()]


def _changed(snapshots) -> str | None:
    """The first argument whose bytes differ from its copy (bytes: a NaN left alone is no change)."""
    def raw(t):
        return t.detach().contiguous().reshape(-1).view(torch.uint8)

    for name, tensor, before in snapshots:
        if tensor.shape != before.shape or tensor.dtype != before.dtype or not torch.equal(raw(tensor), raw(before)):
            return name
    return None


def learner_location(exc: BaseException) -> str:
    """Where ``exc`` came from, in the learner's terms: `` (line 4 of f: code)``, their innermost
    line in its traceback.  When a library's function that line called raised it (the package's
    ``tile_coords_np`` refusing a tile index), also which of its parameters the message names and
    the learner's argument for each.  With no line of theirs in it (the check's kernel unpacking
    what their function returned), the check's code that used their function, no line number."""
    from ..watchdog import frame_where, learner_file, machinery_file, triton_file

    if getattr(exc, "from_answer_process", False):  # the grader's judge: its message already says where
        return ""
    try:
        entries = [(f, n) for f, n in traceback.walk_tb(exc.__traceback__)
                   if not triton_file(f.f_code.co_filename) and not machinery_file(f.f_code.co_filename)]
        mine = [i for i, (f, _) in enumerate(entries) if learner_file(f.f_code.co_filename)]
        if mine:
            f, line = entries[mine[-1]]
            text = frame_where(f, line)
            if mine[-1] + 1 < len(entries):
                text += _callee_text(f, line, entries[mine[-1] + 1][0], exc)
            return f" ({text})"
        if entries:
            return _check_code_text(*entries[-1])
    except Exception:  # noqa: BLE001  (the message stands without a place)
        pass
    return ""


def _callee_text(frame, line: int, callee, exc) -> str:
    """``; raised inside the package's tile_coords_np, which this line calls: its pid is your t = 35``."""
    from ..watchdog import package_file

    name = callee.f_code.co_name
    owner = "the package's " if package_file(callee.f_code.co_filename) else ""
    text = f"; raised inside {owner}{name}, which this line calls"
    message = str(exc)
    named = []
    for param, (expr, value) in _call_arguments(frame, line, callee).items():
        if re.search(rf"(?<![\w.]){re.escape(param)}(?!\w)", message):
            value_text = "" if value is _UNKNOWN else f" = {shown(value, 40)}"
            named.append(f"its {param} is your {expr}{value_text}")
    return text + (": " + "; ".join(named) if named else "")


_UNKNOWN = object()


def _call_arguments(frame, line: int, callee) -> dict:
    """The learner's arguments of the call of ``callee`` on ``line`` of ``frame``, by the callee's
    parameter names: ``{param: (source of the argument, its value or _UNKNOWN)}``."""
    import ast
    import builtins
    import linecache

    code = callee.f_code
    try:
        tree = ast.parse("".join(linecache.getlines(frame.f_code.co_filename, frame.f_globals)))
    except (SyntaxError, ValueError):
        return {}
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and node.lineno <= line <= (node.end_lineno or node.lineno)
             and getattr(node.func, "id", getattr(node.func, "attr", None)) == code.co_name]
    if not calls:
        return {}
    call_node = min(calls, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)
    positional = list(code.co_varnames[:code.co_argcount])
    if isinstance(call_node.func, ast.Attribute) and positional[:1] in (["self"], ["cls"]):
        positional = positional[1:]
    keyword_only = set(code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount])
    pairs = []
    for param, arg in zip(positional, call_node.args):
        if isinstance(arg, ast.Starred):
            break
        pairs.append((param, arg))
    pairs += [(kw.arg, kw.value) for kw in call_node.keywords if kw.arg in positional or kw.arg in keyword_only]
    out = {}
    for param, arg in pairs:
        value = callee.f_locals.get(param, _UNKNOWN)  # as the callee got it (an expression's value)
        if isinstance(arg, ast.Constant):
            value = arg.value
        elif isinstance(arg, ast.Name):
            for space in (frame.f_locals, frame.f_globals, vars(builtins)):
                if arg.id in space:
                    value = space[arg.id]
                    break
        out[param] = (ast.get_source_segment("".join(linecache.getlines(frame.f_code.co_filename)), arg)
                      or ast.dump(arg), value)
    return out


def _check_code_text(frame, line: int) -> str:
    """The check's code where something of the learner's came out wrong, told by the learner's
    function it used (``pid_m, pid_n = column_grouped_triton(...)``), never by its line number."""
    from ..watchdog import learner_file, source_line

    code = source_line(frame.f_code.co_filename, line, frame.f_globals)
    yours = {}
    for name in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", code)):
        value = frame.f_locals.get(name, frame.f_globals.get(name))
        fn = value
        for _ in range(3):  # a @triton.jit function, its interpreted twin: the Python function inside
            fn = getattr(fn, "fn", fn)
        inner = getattr(fn, "__code__", None)
        if inner is not None and learner_file(inner.co_filename):
            yours[name] = fn.__name__
    if not yours:
        return " (in the check's code, on what your code gave it)"
    for name, real in yours.items():
        code = re.sub(rf"\b{re.escape(name)}\b", real, code)
    return (f" (in the check's code right after your {' and '.join(dict.fromkeys(yours.values()))} returned: "
            f"`{code}`: does it return what this line expects?)")


#: what the stub of a student copy raises (``raise NotImplementedError("your turn")``), as Triton
#: quotes it when it wraps the error (InterpreterError repr, CompilationError source line)
_STUB_QUOTES = ('NotImplementedError("your turn")', "NotImplementedError('your turn')", "NotImplementedError()")


def is_stub_value(value) -> bool:
    return value is None or value is Ellipsis


def is_stub_error(exc: BaseException) -> bool:
    """A ``raise NotImplementedError`` stub, also when Triton wraps it: the interpreter re-raises
    it as ``InterpreterError``, the compiler as a ``CompilationError`` quoting the line."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if isinstance(exc, NotImplementedError) and text.strip() in ("", "your turn"):
            return True
        if any(quote in text for quote in _STUB_QUOTES) or text.rstrip().endswith("raise NotImplementedError"):
            return True
        # into what Triton wrapped (its errors chain the learner's), never past a learner's own error
        # raised while handling a stub's (``except NotImplementedError: raise ValueError(...)``)
        wrapper = type(exc).__module__.split(".")[0] == "triton"
        exc = exc.__cause__ or (exc.__context__ if wrapper else None)
    return False


def call(answer, *args, what: str | None = None, none_ok: bool = False, inputs_checked: bool = False, **kwargs):
    """Call the learner's ``answer``: a stub -> not attempted, an exception -> AnswerRaised, None
    -> :class:`ReturnedNone` (``none_ok``: returned, for a check that explains None itself), a
    tensor argument it wrote into -> :class:`ChangedInput` (``inputs_checked``: the check compares its
    inputs itself, case by case)."""
    what = what or f"{getattr(answer, '__name__', 'your answer')}{_fmt_args(args)}"
    if not callable(answer):
        raise AnswerRaised(what, TypeError(f"expected a function, got {type(answer).__name__} {answer!r}"))
    snapshots = [] if inputs_checked else _snapshots(answer, args, kwargs)
    try:
        value = answer(*args, **kwargs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (anything the learner's code does is reported, not raised)
        if is_stub_error(exc):
            raise _NotAttempted from None
        raise AnswerRaised(what, exc) from None
    changed = _changed(snapshots)
    if changed is not None:
        raise ChangedInput(what, changed)
    if value is None and not none_ok:
        raise ReturnedNone(what)
    if value is Ellipsis:  # a stub left as `...`
        raise _NotAttempted
    return value


def _fmt_args(args) -> str:
    def one(a):
        if isinstance(a, torch.Tensor):
            return f"<tensor {list(a.shape)} {str(a.dtype).replace('torch.', '')}>"
        text = repr(a)
        return text if len(text) <= 40 else text[:37] + "..."
    return "(" + ", ".join(one(a) for a in args) + ")"


def exercise(title: str, *, hints: Hints, praise: str = "correct, well done.", budget: dict | None = None,
             hands=()):
    """Turn a check body ``body(answer, ...) -> list[str]`` into a check that never raises.

    The body runs with ``torch.empty`` NaN-poisoned, every kernel launch checked
    (:func:`gemm_kernels.lab.checked.checked_launches`) and the learner's code under a watchdog
    (:class:`gemm_kernels.lab.watchdog.Watchdog`; ``budget``: its keyword arguments, for a check
    that needs other limits than the defaults).  The check gets ``check.hint(level)``.  In exam
    mode the hints stop at the nudge and the check's module refuses its ``*_ref`` (:func:`_guard_module`).
    ``hands``: the package's ``@triton.jit`` helpers the exercise hands the learner (or a function
    returning them), the only package code a kernel answer may use (``_kernel_checks.handed``)."""
    if exam.ON:
        hints = hints.for_exam()

    def decorate(body):
        if exam.ON:
            _guard_module(sys.modules.get(body.__module__))

        @functools.wraps(body)
        def check(answer=None, *args, **kwargs) -> CheckResult:
            if is_stub_value(answer):
                return _not_attempted(title)
            if not callable(answer):
                return CheckResult(title, WRONG, f"expected a function (the one the exercise asks you to write), got "
                                   f"{type(answer).__name__}: {_short(_safe_repr(answer), 80)}",
                                   hints=hints, hint_level=0)
            try:
                result = _run_body(body, title, praise, answer, args, kwargs, budget)
            except Exception as exc:  # noqa: BLE001  (a check never raises into the notebook)
                result = CheckResult(title, WRONG, "your answer could not be checked: "
                                     f"{type(exc).__name__}: {_short(exc)}")
            if result.status == WRONG:
                _wrong_attempts[title] = _wrong_attempts.get(title, 0) + 1
                result.hints, result.hint_level = hints, min(_wrong_attempts[title], exam.HINT_LEVEL if exam.ON else 2)
            elif result.status == CORRECT:
                result.hints = hints
            from ..progress import record  # the latest verdict, kept on disk for gk.lab.progress() (never raises)
            record(body.__module__, title, result.status)
            _show(result)
            return result

        def hint(level: int = 1) -> Hint:
            """Hint ``level`` for this exercise: 1 a nudge, 2 the approach, 3 a solution."""
            index = _hint_index(level)
            return Hint(title, index + 1, hints.level(index + 1))

        check.title = title
        check.hints = hints
        check.hint = hint
        check.gpu_branch = None  # answer -> problems: what only a GPU runs, where the check has such a part
        check.hands = hands
        return check

    return decorate


def _show(result: CheckResult) -> None:
    """In IPython (Jupyter, Colab), show the verdict now: a check followed by a ``print`` in its
    cell is not the cell's value, and would otherwise show nothing."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell:
        try:
            result._ipython_display_()
        except Exception:  # noqa: BLE001  (showing is a courtesy: the returned result still says it)
            pass


class _ExamModule(types.ModuleType):
    """A check module in exam mode: its ``*_ref`` references and its :class:`Hints` are the
    package's own; code outside the package asking for one gets :class:`~gemm_kernels.lab.exam.ExamModeError`."""

    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        if name.endswith("_ref") or isinstance(value, Hints):
            from ..watchdog import package_file

            if not package_file(sys._getframe(1).f_code.co_filename):
                raise exam.refuse(f"{super().__getattribute__('__name__')}.{name}")
        return value


def _guard_module(module) -> None:
    """Make a check module of this package an :class:`_ExamModule` (its globals stay as they are:
    the checks read their references from them)."""
    if module is not None and module.__name__.startswith(__package__ + ".") and type(module) is types.ModuleType:
        module.__class__ = _ExamModule


def _run_body(body, title, praise, answer, args, kwargs, budget=None) -> CheckResult:
    from ..checked import OutOfBounds, checked_launches
    from ..watchdog import NeverEnded, Watchdog

    dog = Watchdog(**(budget or {}))
    try:
        with poisoned_empty(), checked_launches(), dog:
            problems = body(answer, *args, **kwargs)
    except NeverEnded as exc:
        return CheckResult(title, WRONG, exc.message, exc.details)
    except exam.ExamModeError:
        if not exam.CLASS_BUILD:
            raise
        return CheckResult(title, HANDED_IN, "handed in: this class build holds no reference answer to compare yours "
                           "with; your teacher's grader checks it")
    except _NotAttempted:
        return _not_attempted(title)
    except AnswerRaised as exc:
        if isinstance(exc.exc, OutOfBounds):
            return out_of_bounds_result(title, exc.exc, exc.what)
        return CheckResult(title, WRONG, str(exc))
    except OutOfBounds as exc:
        return out_of_bounds_result(title, exc, None)
    finally:
        dog.close()  # again: the watch ends whatever happened on the way out
    if isinstance(problems, CheckResult):
        return problems
    problems = list(problems or [])
    if problems:
        return CheckResult(title, WRONG, f"not yet: {_count(problems)}", problems)
    return CheckResult(title, CORRECT, praise)


def out_of_bounds_result(title: str, err, what: str | None) -> CheckResult:
    """The feedback for a kernel stopped by a checked run: the report, line by line, and its picture."""
    try:
        from ..checked import picture_png

        picture = picture_png(err, dpi=80)
    except Exception:  # noqa: BLE001  (no matplotlib: the words still say it all)
        picture = None
    head = "a load or store of your kernel left its tensor (stopped before it touched memory)"
    if what:
        head += f", in {what}"
    return CheckResult(title, WRONG, head, [line.strip() for line in str(err).splitlines()], picture=picture)


def _short(exc, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _safe_repr(value) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001  (a repr that fails, or an int too long to print)
        return f"<{type(value).__name__}>"


def _not_attempted(title: str) -> CheckResult:
    return CheckResult(title, NOT_ATTEMPTED, "not attempted yet (replace the `raise NotImplementedError` with your code)")


def _count(problems) -> str:
    return "1 problem found" if len(problems) == 1 else f"{len(problems)} problems found"


# ----------------------------------------------------------------------------- helpers for check bodies
def unseen_cases(draw, count: int = 3) -> list:
    """``count`` cases drawn afresh on every check from the system's random source (``draw(rng)``),
    tried once the listed ones pass: an answer that only knows the listed cases (a lookup table of
    them) meets inputs no one has seen, in the notebook and in the grader alike."""
    import random

    rng = random.SystemRandom()
    return [draw(rng) for _ in range(count)]



def _poison(t):
    if t.dtype.is_floating_point:
        t.fill_(math.nan)
    return t


def _poisoning(original):
    def poisoned(*args, **kwargs):
        out = original(*args, **kwargs)
        return _poison(out) if _POISONED_EMPTY.current() is not None else out
    poisoned.__name__ = getattr(original, "__name__", "empty")
    poisoned.__doc__ = getattr(original, "__doc__", None)
    return poisoned


#: torch.empty/empty_like, NaN-filling in the threads running a check only (other threads, and the
#: learner's code after the check, get plain ones; overlapping checks may end in any order)
_POISONED_EMPTY = ThreadLocalPatch(lambda: torch, {"empty": _poisoning, "empty_like": _poisoning})


@contextlib.contextmanager
def poisoned_empty():
    """While a check runs, ``torch.empty``/``empty_like`` called in its thread return NaN-filled
    tensors, so an element the learner's kernel never wrote shows up as NaN instead of as stale
    memory.  Other threads are not affected."""
    with _POISONED_EMPTY.active(True):
        yield


# ----------------------------------------------------------------------------- reading a learner's answer
# A learner's function may return anything where a list or an array is expected: itertools.count(),
# a generator that never stops, range(10**12).  A check never reads more of an answer than it
# expects plus one item (one more is enough to know the answer is wrong): list(answer),
# tuple(answer), np.asarray(answer), a comprehension over it would fill memory until the OOM killer
# ended the process.  Every check reads a returned iterable through read_items or answer_array.


class AnswerItems(list):
    """The items :func:`read_items` read from an answer: at most ``limit + 1`` of them.
    ``more``: the answer had more than ``limit`` items; ``length``: its own ``len()``, when it has
    one (a list, a range), else None."""

    more: bool = False
    length: int | None = None

    def count_text(self) -> str:
        """How many items the answer has, as far as it is known: ``5``, or ``more than 4``."""
        if self.length is not None:
            return f"{self.length:,}"
        return f"more than {len(self) - 1}" if self.more else str(len(self))

    def unread_text(self) -> str:
        """``", ... (N more)"`` after the items shown, when the answer has items that were not read
        (``", ... (perhaps more)"`` when its length is unknown); empty when every item was read."""
        if self.length is not None:
            return f", ... ({self.length - len(self):,} more)" if self.length > len(self) else ""
        return ", ... (perhaps more)" if self.more else ""

    def mapped(self, fn) -> AnswerItems:
        """``fn`` of every item, keeping what is known of the answer's length."""
        out = AnswerItems(fn(item) for item in self)
        out.more, out.length = self.more, self.length
        return out


def _known_length(value) -> int | None:
    try:
        length = len(value)
    except Exception:  # noqa: BLE001  (no len(), or one that fails)
        return None
    return length if isinstance(length, int) and length >= 0 else None


def read_items(value, limit: int, *, inner: int | None = None) -> AnswerItems:
    """The items of the learner's answer ``value`` (any iterable), reading at most ``limit + 1`` of
    them, so an endless or huge one (``itertools.count()``, ``range(10**12)``) costs nothing and
    comes out as ``more`` than ``limit`` (the caller says "wrong").  ``inner``: each item is itself
    read with that limit (a list of pairs: ``inner=2``).  TypeError when ``value`` (or an item, with
    ``inner``) is not iterable, as ``list(value)`` would raise."""
    items = AnswerItems(itertools.islice(iter(value), limit + 1))
    items.more, items.length = len(items) > limit, _known_length(value)
    if inner is not None:
        return items.mapped(lambda item: read_items(item, inner))
    return items


class AnswerShapeError(ValueError):
    """An answer with more items along some dimension than the expected shape (raised by
    :func:`answer_array`); its message says which, e.g. ``more than 3 items along dimension 0``."""


def _expands(value) -> bool:
    """Whether numpy would read ``value`` item by item when building an array (a sequence)."""
    if isinstance(value, (str, bytes, bytearray, Mapping, np.ndarray, np.generic, torch.Tensor)):
        return False
    if hasattr(value, "__array__") or hasattr(value, "__array_interface__"):
        return False  # numpy takes its array whole: in memory already
    kind = type(value)
    return hasattr(kind, "__len__") and hasattr(kind, "__getitem__")


def _bounded_nested(value, shape: tuple, dim: int, total: int):
    if not _expands(value):
        return value  # a number, an array, or an iterator numpy keeps as one object: nothing to read
    limit = shape[dim] if dim < len(shape) else total  # deeper than expected: never more than all of it
    items = list(itertools.islice(iter(value), limit + 1))
    if len(items) > limit:
        length = _known_length(value)
        count = f"{length:,}" if length is not None else f"more than {limit:,}"
        raise AnswerShapeError(f"{count} items along dimension {dim}" + (
            f" (expected {limit})" if dim < len(shape) else f" (more than the {total} values expected in all)"))
    return [_bounded_nested(item, shape, dim + 1, total) for item in items]


def answer_array(value, shape, dtype=None) -> np.ndarray:
    """The learner's answer ``value`` as a numpy array (what ``np.asarray(value, dtype)`` gives),
    reading no more of it than an array of the expected ``shape`` needs plus one item along each
    dimension: AnswerShapeError, naming the dimension, for an answer with more.  Arrays and
    tensors are taken as they are (their shape is known; a tensor is detached and moved to the CPU)."""
    if isinstance(value, torch.Tensor):
        return np.asarray(value.detach().cpu(), dtype=dtype)
    if isinstance(value, np.ndarray):
        return np.asarray(value, dtype=dtype)
    shape = tuple(int(n) for n in shape)
    total = max(1, math.prod(shape))
    return np.asarray(_bounded_nested(value, shape, 0, total), dtype=dtype)


def whole(value) -> int:
    """A count or an index from the learner's answer, as an int: a Python or numpy integer, a
    one-element tensor or numpy array, or a float with no fraction (``np.ceil``'s 5.0).  ValueError for
    anything else: ``int()`` would truncate 4.9 (the float division the exercises warn of) to 4 and
    read the string "5" as 5."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "biuf":
        value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int):  # a bool too: a phase of 0 or 1
        return int(value)
    if type(value) is float and value.is_integer():
        return int(value)
    raise ValueError(f"{shown(value, 40)} is not a whole number")


def shown(value, limit: int = 80) -> str:
    """A learner's value for a message: its repr, cut to ``limit`` characters (never failing)."""
    return _short(_safe_repr(value), limit)


def fmt(x) -> str:
    """A number as a learner would write it (no trailing zeros, nan spelled out)."""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return f"{x:.4g}"
    return str(x)


def plural(count: int, word: str) -> str:
    """``"1 program"``, ``"3 programs"``: how messages count things."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def compare_arrays(expected, got, case: str, *, what: str = "element", atol=1e-5, rtol=1e-5,
                   index_names=None, max_items: int = 3) -> list[str]:
    """Element-wise comparison that names the wrong positions.

    ``expected``/``got`` are numpy arrays or tensors.  Returns [] when they match, else lines
    like ``case: 3 of 12 elements wrong; [1, 2]: expected 7, got 9``."""
    exp = np.asarray(expected.detach().cpu() if isinstance(expected, torch.Tensor) else expected)
    try:
        g = answer_array(got, exp.shape)  # the learner's: never read past the expected shape
    except AnswerShapeError as exc:
        return [f"{case}: expected shape {list(exp.shape)}, got {exc}"]
    except Exception:  # noqa: BLE001
        return [f"{case}: expected an array of shape {list(exp.shape)}, got {type(got).__name__}"]
    if g.shape != exp.shape:
        if g.ndim == 0 and g.dtype == object:  # not an array at all: a generator, a dict, ...
            return [f"{case}: expected an array of shape {list(exp.shape)}, got {type(got).__name__} {shown(got)}"]
        return [f"{case}: expected shape {list(exp.shape)}, got {list(g.shape)}"]
    if exp.dtype == bool or g.dtype == bool or np.issubdtype(exp.dtype, np.integer):
        bad = exp != g
    else:
        e64, g64 = exp.astype(np.float64), g.astype(np.float64)
        bad = ~np.isclose(g64, e64, atol=atol, rtol=rtol, equal_nan=True)
    if not bad.any():
        return []
    positions = np.argwhere(bad)
    items = []
    for pos in positions[:max_items]:
        idx = tuple(int(p) for p in pos)
        label = ", ".join(f"{n}={i}" for n, i in zip(index_names, idx)) if index_names else str(list(idx))
        got_v, exp_v = g[idx].item(), exp[idx].item()
        never = " (never written?)" if isinstance(got_v, float) and math.isnan(got_v) else ""
        items.append(f"{label}: expected {fmt(exp_v)}, got {fmt(got_v)}{never}")
    head = f"{case}: {int(bad.sum())} of {plural(bad.size, what)} wrong"
    if bad.ndim == 2:
        rows, cols = np.nonzero(bad)
        head += f" (rows {rows.min()}..{rows.max()}, cols {cols.min()}..{cols.max()})"
    return [head + "; " + "; ".join(items)]
