"""Exam mode: ``GEMM_KERNELS_EXAM=1`` makes the checks say what is wrong, never how to fix it.

In exam mode

* hints stop at level 1, the *nudge* (where to look): the *approach* already says how to go about
  the fix and the *solution* is the fix, so ``check_xxx.hint(level=2)`` and ``hint(level=3)`` say
  that hints beyond level 1 are off, and a wrong answer's feedback has no "stuck? ... shows a
  solution" line and no "show a solution" expander;
* a kernel check's diagnoses (the mistake behind a failure, which often names its fix) are left out:
  the failing cases still say what is wrong;
* the checks' ``*_ref`` reference answers cannot be taken from ``gemm_kernels.lab.exercises``
  (``from ...start_here import launch_stats_ref`` raises :class:`ExamModeError`), nor called from a
  learner's code; the checks still use them internally.

The mode is read once, when the package is imported, so a cell that sets the variable later
changes nothing.  It hides the solutions from the package's interface; it is no lock (the
package's source is on the learner's disk): ``python -m gemm_kernels.lab.grade`` is where grades
come from.  A class build (:mod:`.class_build`) is always in exam mode and holds no reference
answer at all.  Light: no torch, no triton.
"""

from __future__ import annotations

from pathlib import Path

from .. import _env

ENV = "GEMM_KERNELS_EXAM"
#: the most detailed hint exam mode shows (1: the nudge)
HINT_LEVEL = 1
OFF = f"hints beyond level {HINT_LEVEL} are off in exam mode ({ENV}=1)"


def enabled(value: str | None) -> bool:
    """Whether a value of ``GEMM_KERNELS_EXAM`` turns exam mode on (``_env.parse_flag``: an
    unknown spelling is a ValueError naming the variable, never quietly off)."""
    return _env.parse_flag(value, ENV, False)


def _class_build() -> bool:
    # the marker module exists only in a class build's wheel (lab.class_build); looked for, not
    # imported: importing the package here would load torch
    return (Path(__file__).resolve().parents[1] / "_class_build.py").is_file()


#: a class build (:mod:`.class_build`): no reference answer and no hint past the nudge in the install
CLASS_BUILD = _class_build()
#: exam mode, decided when the package is imported (always on in a class build)
ON = CLASS_BUILD or _env.flag(ENV, False)


class ExamModeError(RuntimeError):
    """A solution (a check's ``*_ref`` reference answer) asked for in exam mode."""


def refuse(name: str) -> ExamModeError:
    """The error for a reference answer ``name`` asked for in exam mode."""
    return ExamModeError(f"{name} is unavailable in exam mode ({ENV}=1): the checks' reference answers are "
                         "solutions; write the answer yourself")
