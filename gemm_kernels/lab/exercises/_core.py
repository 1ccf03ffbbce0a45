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
"""

from __future__ import annotations

import contextlib
import functools
import html
import math
import traceback
from dataclasses import dataclass, field

import torch

NOT_ATTEMPTED = "not attempted"
WRONG = "wrong"
CORRECT = "correct"

#: how many failing cases a wrong answer lists before "... and N more"
MAX_DETAILS = 8

_ICONS = {NOT_ATTEMPTED: "[ ]", WRONG: "[x]", CORRECT: "[ok]"}
_COLOURS = {NOT_ATTEMPTED: "#6c757d", WRONG: "#b02a37", CORRECT: "#146c43"}


@dataclass
class CheckResult:
    exercise: str
    status: str
    message: str
    details: list[str] = field(default_factory=list)
    hint: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == CORRECT

    @property
    def attempted(self) -> bool:
        return self.status != NOT_ATTEMPTED

    def lines(self) -> list[str]:
        shown = self.details[:MAX_DETAILS]
        out = [f"{_ICONS[self.status]} {self.exercise}: {self.message}"]
        out += [f"    {d}" for d in shown]
        if len(self.details) > len(shown):
            out.append(f"    ... and {len(self.details) - len(shown)} more")
        if self.hint and self.status == WRONG:
            out.append(f"    hint: {self.hint}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = _COLOURS[self.status]
        body = "<br>".join(html.escape(line).replace("    ", "&nbsp;" * 4) for line in self.lines())
        return (f'<div style="border-left: 4px solid {colour}; padding: 4px 8px; '
                f'font-family: monospace; white-space: pre-wrap">{body}</div>')


class _NotAttempted(Exception):
    pass


class AnswerRaised(Exception):
    """The learner's code raised something other than NotImplementedError."""

    def __init__(self, what: str, exc: BaseException):
        self.what, self.exc = what, exc
        frames = traceback.extract_tb(exc.__traceback__)
        # the innermost frame is usually the learner's own line: name it
        where = f" (line {frames[-1].lineno}: {frames[-1].line.strip()})" if frames and frames[-1].line else ""
        super().__init__(f"{what} raised {type(exc).__name__}: {exc}{where}")


def is_stub_value(value) -> bool:
    return value is None or value is Ellipsis


def is_stub_error(exc: BaseException) -> bool:
    """A ``raise NotImplementedError`` stub, also when Triton wraps it: the interpreter re-raises
    it as ``InterpreterError``, the compiler as a ``CompilationError`` quoting the line."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def call(answer, *args, what: str | None = None, **kwargs):
    """Call the learner's ``answer``: a stub -> not attempted, an exception -> AnswerRaised."""
    what = what or f"{getattr(answer, '__name__', 'your answer')}{_fmt_args(args)}"
    if not callable(answer):
        raise AnswerRaised(what, TypeError(f"expected a function, got {type(answer).__name__} {answer!r}"))
    try:
        value = answer(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001  (anything the learner's code does is reported, not raised)
        if is_stub_error(exc):
            raise _NotAttempted from None
        raise AnswerRaised(what, exc) from None
    if is_stub_value(value):
        raise _NotAttempted
    return value


def _fmt_args(args) -> str:
    def one(a):
        if isinstance(a, torch.Tensor):
            return f"<tensor {list(a.shape)} {str(a.dtype).replace('torch.', '')}>"
        text = repr(a)
        return text if len(text) <= 40 else text[:37] + "..."
    return "(" + ", ".join(one(a) for a in args) + ")"


def exercise(title: str, *, hint: str | None = None, praise: str = "correct, well done."):
    """Turn a check body ``body(answer, ...) -> list[str]`` into a check that never raises."""

    def decorate(body):
        @functools.wraps(body)
        def check(answer=None, *args, **kwargs) -> CheckResult:
            if is_stub_value(answer):
                return _not_attempted(title)
            try:
                with poisoned_empty():
                    problems = body(answer, *args, **kwargs)
            except _NotAttempted:
                return _not_attempted(title)
            except AnswerRaised as exc:
                return CheckResult(title, WRONG, str(exc), hint=hint)
            if problems:
                return CheckResult(title, WRONG, f"not yet: {_count(problems)}", list(problems), hint)
            return CheckResult(title, CORRECT, praise)

        check.title = title
        return check

    return decorate


def _not_attempted(title: str) -> CheckResult:
    return CheckResult(title, NOT_ATTEMPTED, "not attempted yet (replace the `raise NotImplementedError` with your code)")


def _count(problems) -> str:
    return "1 problem found" if len(problems) == 1 else f"{len(problems)} problems found"


# ----------------------------------------------------------------------------- helpers for check bodies
def _poison(t):
    if t.dtype.is_floating_point:
        t.fill_(math.nan)
    return t


@contextlib.contextmanager
def poisoned_empty():
    """While a check runs, ``torch.empty``/``empty_like`` return NaN-filled tensors, so an
    element the learner's kernel never wrote shows up as NaN instead of as stale memory."""
    empty, empty_like = torch.empty, torch.empty_like
    torch.empty = lambda *a, **k: _poison(empty(*a, **k))
    torch.empty_like = lambda *a, **k: _poison(empty_like(*a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def fmt(x) -> str:
    """A number as a learner would write it (no trailing zeros, nan spelled out)."""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return f"{x:.4g}"
    return str(x)


def compare_arrays(expected, got, case: str, *, what: str = "element", atol=1e-5, rtol=1e-5,
                   index_names=None, max_items: int = 3) -> list[str]:
    """Element-wise comparison that names the wrong positions.

    ``expected``/``got`` are numpy arrays or tensors.  Returns [] when they match, else lines
    like ``case: 3 of 12 elements wrong; [1, 2]: expected 7, got 9``."""
    import numpy as np

    exp = np.asarray(expected.detach().cpu() if isinstance(expected, torch.Tensor) else expected)
    try:
        g = np.asarray(got.detach().cpu() if isinstance(got, torch.Tensor) else got)
    except Exception:  # noqa: BLE001
        return [f"{case}: expected an array of shape {list(exp.shape)}, got {type(got).__name__}"]
    if g.shape != exp.shape:
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
    head = f"{case}: {int(bad.sum())} of {bad.size} {what}s wrong"
    if bad.ndim == 2:
        rows, cols = np.nonzero(bad)
        head += f" (rows {rows.min()}..{rows.max()}, cols {cols.min()}..{cols.max()})"
    return [head + "; " + "; ".join(items)]
