"""nbgrader's checksum warning for check cells (their hidden tests put back at autograde, nbgrader
#1961) is dropped by the course's logging filter; every other warning stays.  The judge's scores in
nbgrader's gradebook are tested under nbgrader itself (tests/test_teach.py)."""

from __future__ import annotations

import logging

import pytest

from gemm_kernels.lab.nbgrader_judge import HiddenTestsRestored

MESSAGE = "Attribute '%s' for cell %s has changed! (should be: %s, got: %s)"


@pytest.mark.parametrize("args, kept", [
    (("checksum", "check_axpy", "ab12", "cd34"), False),   # a check cell: its hidden tests, every time
    (("checksum", "answer-3f2a", "ab12", "cd34"), True),   # a locked cell edited: a teacher must read it
    (("points", "check_axpy", 1.0, 5.0), True),            # a check cell's points changed
    (("locked", "check_axpy", True, False), True),
])
def test_only_the_hidden_tests_checksum_warning_is_dropped(args, kept):
    record = logging.LogRecord("Autograde", logging.WARNING, __file__, 1, MESSAGE, args, None)
    assert HiddenTestsRestored().filter(record) is kept
    other = logging.LogRecord("Autograde", logging.WARNING, __file__, 1, "Missing grade cell %s", ("x",), None)
    assert HiddenTestsRestored().filter(other)
