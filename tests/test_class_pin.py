"""A semester pins its version (issue 48): the student copies' set-up cell installs the tag, branch or
commit the teacher names (``GEMM_KERNELS_PIN`` or ``pin=``), and a malformed one is refused by name."""

from __future__ import annotations

import pytest

from gemm_kernels.lab import student


def test_the_set_up_cell_installs_the_pinned_version(monkeypatch):
    monkeypatch.delenv(student.PIN_ENV, raising=False)
    assert "git+https://github.com/gemm-kernels/gemm-kernels\"" in student.setup_source("gemm-kernels/gemm-kernels")
    pinned = student.setup_source("gemm-kernels/gemm-kernels", pin="v2026.1")
    assert "git+https://github.com/gemm-kernels/gemm-kernels@v2026.1\"" in pinned
    compile(pinned, "setup", "exec")  # still Python
    monkeypatch.setenv(student.PIN_ENV, "3f2c1a9")
    assert "gemm-kernels@3f2c1a9\"" in student.setup_source("gemm-kernels/gemm-kernels")
    nb = student.student_notebook(student.nbformat.read(student.notebook_paths(student.REPO_ROOT / "notebooks")[0],
                                                         as_version=4), "00_start_here.ipynb")
    assert "@3f2c1a9\"" in nb.cells[1].source


@pytest.mark.parametrize("pin", ["v1\nv2", "-e", "v1 && rm -rf /", "a\"b", "x" * 101])
def test_a_malformed_pin_is_refused_by_name(monkeypatch, pin):
    monkeypatch.setenv(student.PIN_ENV, pin)
    with pytest.raises(ValueError, match=student.PIN_ENV):
        student.setup_source("gemm-kernels/gemm-kernels")
