"""Submissions written to forge a grade or take the solution (tests/_hostile.py) score 0 on the
exercise they attack, graded by the grade command's judge; the honest ones beside them are graded
right.  Notebooks trimmed to their first cell and their Exercises section (what a forgery needs):
00 for most, 01 and 02 for the kernel forgeries of a teacher's review."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

import gemm_kernels
from gemm_kernels.lab import _grade_judge, grade
from gemm_kernels.lab.student import exercise_cells

from _hostile import AXPY_AUTOTUNED, HOSTILE, NBGRADER_HOSTILE, PLANTED, RIGHT, WRONG

#: minutes of end-to-end grading: `make test-hostile` (a CI extra), not `make test`
pytestmark = pytest.mark.hostile

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
#: needs the sandbox (the package's files out of reach): without it these are known gaps (TEACHING.md)
NEEDS_SANDBOX = {"ref_from_source", "write_the_package", "solutions_on_disk"}
#: whether this machine builds the sandbox (no sandbox, no grading: the tests without one ask for none)
SANDBOX = _grade_judge.sandbox_available()
#: exercise -> (its notebook, a line of the solved answer cell a forgery replaces)
EXERCISES = {"launch_stats": ("00_start_here", "def launch_stats("), "axpy": ("00_start_here", "def axpy_kernel("),
             "transpose": ("01_pointer_arithmetic", "def transpose_kernel("),
             "my_matmul": ("02_naive_tiling", "def my_matmul_kernel(")}


def lean_notebook(notebook: str = "00_start_here"):
    """A notebook, solved, with only its first code cell and its Exercises section."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    keep = set(exercise_cells(nb))
    nb.cells = [c for i, c in enumerate(nb.cells) if c.cell_type == "markdown" or i in keep]
    return nb


def with_answer(nb, exercise: str, source: str):
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    marker = EXERCISES[exercise][1]
    cell = next(c for c in nb.cells if c.cell_type == "code" and marker in c.source)
    cell.source = source
    return nb


def submissions(root: Path, notebooks=("00_start_here",)) -> dict:
    """name -> exercise it attacks; writes each submission of ``notebooks`` (and the solved notebooks,
    with 00's honest ones) under ``root``."""
    lean = {notebook: lean_notebook(notebook) for notebook in notebooks}
    attacked = {}
    for name, (exercise, source) in HOSTILE.items():
        notebook = EXERCISES[exercise][0]
        if notebook in lean:
            nbformat.write(with_answer(lean[notebook], exercise, source), root / f"{name}_{notebook}.ipynb")
            attacked[name] = exercise
    for notebook, nb in lean.items():
        nbformat.write(nb, root / f"solved_{notebook}.ipynb")
    if "00_start_here" not in lean:
        return attacked
    nb = lean["00_start_here"]
    nbformat.write(with_answer(nb, "launch_stats", RIGHT), root / "right_00_start_here.ipynb")
    nbformat.write(with_answer(nb, "launch_stats", WRONG), root / "wrong_00_start_here.ipynb")
    nbformat.write(with_answer(nb, "axpy", AXPY_AUTOTUNED), root / "autotuned_00_start_here.ipynb")
    return attacked


def test_forgeries_score_zero_and_honest_work_is_graded_right(tmp_path):
    """One test (one process under xdist: the 24 notebooks are graded once): every forgery scores 0 on
    the exercise it attacks; nothing is planted in the package; the honest notebooks beside them, and
    the forged notebooks' other exercise, are graded on their merits."""
    attacked = submissions(tmp_path)
    rows = grade.grade(tmp_path, jobs=2, timeout=60, cell_timeout=5, hide=[tmp_path], sandbox=SANDBOX)
    by_key = {(r.student, r.exercise): r for r in rows}
    planted = Path(gemm_kernels.__file__).parent / PLANTED
    found = planted.exists()
    planted.unlink(missing_ok=True)
    sandbox = SANDBOX
    forged = [(name, by_key[(name, ex)].status, by_key[(name, ex)].message) for name, ex in attacked.items()
              if by_key[(name, ex)].points != 0 and (sandbox or name not in NEEDS_SANDBOX)]
    assert not forged, forged
    # no forgery brings a judge down (one judge takes a share of the notebooks in turn)
    assert not [(r.student, r.message) for r in rows if "judge's process" in r.message]
    assert not found or not sandbox, "a submission wrote into the package"
    honest = {("solved", "launch_stats"): "correct", ("solved", "axpy"): "correct",
              ("right", "launch_stats"): "correct", ("wrong", "launch_stats"): "wrong",
              ("autotuned", "axpy"): "correct",
              # the other exercise of a forged notebook is still graded on its merits
              ("allclose_and_equal", "axpy"): "correct", ("axpy_with_torch", "launch_stats"): "correct",
              ("endless_loop_no_alarm", "launch_stats"): "timeout", ("exit_at_top", "launch_stats"): "crashed"}
    assert {key: by_key[key].status for key in honest} == honest, {key: by_key[key].message for key in honest}
    assert "launched no @triton.jit kernel" in by_key[("axpy_with_torch", "axpy")].message
    assert "refuses this" in by_key[("axpy_kernel_imports_os", "axpy")].message
    assert "assigning to an attribute" in by_key[("axpy_patches_torch", "axpy")].message


#: the forgeries of notebooks 01 and 02 (a teacher's review): what the judge says of each
LATER = {"matmul_by_package_helpers": "tt.tile_row_major: your code uses gemm_kernels.kernels.tiles.tile_row_major, "
                                      "which this exercise does not hand you",
         "matmul_by_aliased_package_kernel": "lib_kernel: your code calls gemm_kernels.kernels.matmul._matmul_kernel, "
                                             "the package's own answer to this exercise",
         "transpose_by_torch_copy": "your launcher computes with torch (contiguous, which copied)"}


def test_forgeries_of_notebooks_01_and_02_score_zero(tmp_path):
    """A teacher's review (issue 48): 02's matmul done by the package's @triton.jit helpers, or by its
    own kernel imported under another name and launched by the launcher, and 01's transpose done by
    torch (.t().contiguous()) in the launcher: each scores 0 and the message names what was refused;
    the solved notebooks beside them, and the forged notebooks' other exercises, are correct."""
    attacked = submissions(tmp_path, ("01_pointer_arithmetic", "02_naive_tiling"))
    assert set(attacked) == set(LATER)
    rows = grade.grade(tmp_path, jobs=2, timeout=120, cell_timeout=20, hide=[tmp_path], sandbox=SANDBOX)
    by_key = {(r.student, r.exercise): r for r in rows}
    got = {name: (by_key[(name, ex)].points, by_key[(name, ex)].message) for name, ex in attacked.items()}
    assert all(points == 0 and LATER[name] in message for name, (points, message) in got.items()), got
    honest = [r for r in rows if (r.student, r.exercise) not in attacked.items()]
    assert len(honest) == 6 + 2 * 2 + 2, [(r.student, r.exercise) for r in honest]  # solved 01, 02; the others
    assert all(r.status == "correct" for r in honest), [(r.student, r.exercise, r.message) for r in honest
                                                        if r.status != "correct"]


def test_the_sandbox_is_there_where_the_machine_allows_it():
    """On Linux with unprivileged user namespaces (this test machine, most hubs) the notebook's process
    runs sandboxed: where ``unshare`` can make them, the sandbox is built (without it nothing is graded
    unless the grader asks for no sandbox)."""
    import shutil
    import subprocess

    unshare = shutil.which("unshare")
    namespaces = unshare is not None and subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net", "true"],
        capture_output=True, timeout=60).returncode == 0
    assert SANDBOX or not namespaces, _grade_judge.sandbox_problem()


def test_an_autotuned_kernel_is_checked_on_a_cpu():
    """Issue 48: @triton.autotune, as in Triton's tutorial 03, failed on a CPU with "0 active drivers";
    in the check its first config is launched checked (so a wrong one is found), the tuner runs them all."""
    autotuned_axpy_verdicts()


@pytest.mark.gpu
def test_an_autotuned_kernel_is_checked_on_a_gpu():
    """On a GPU the tuner's own launches (``fn.run``) bypassed the check: a right autotuned axpy read
    "it launched no @triton.jit kernel you wrote".  Its first config now runs checked, then it runs
    (tuned) on the GPU."""
    right = autotuned_axpy_verdicts()
    assert "It ran on this GPU too" in right.message, right.message


def autotuned_axpy_verdicts():
    """The right autotuned axpy's result (asserted correct); a wrong one asserted wrong."""
    import torch
    import triton
    import triton.language as tl

    from gemm_kernels.lab.exercises.start_here import check_axpy

    import linecache

    namespace = {"triton": triton, "tl": tl, "torch": torch}
    # as IPython does: the cell's lines are in linecache before it runs (a compiled @triton.jit reads them)
    linecache.cache["<submission cell 1>"] = (len(AXPY_AUTOTUNED), None, AXPY_AUTOTUNED.splitlines(True),
                                             "<submission cell 1>")
    exec(compile(AXPY_AUTOTUNED, "<submission cell 1>", "exec"), namespace)  # noqa: S102
    right = namespace["axpy"]
    verdict = check_axpy(right)
    assert verdict.status == "correct", (verdict.message, verdict.details)
    wrong = AXPY_AUTOTUNED.replace("alpha * tl.load", "alpha - tl.load")
    linecache.cache["<submission cell 2>"] = (len(wrong), None, wrong.splitlines(True), "<submission cell 2>")
    other = {"triton": triton, "tl": tl, "torch": torch}
    exec(compile(wrong, "<submission cell 2>", "exec"), other)  # noqa: S102
    assert check_axpy(other["axpy"]).status == "wrong"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = right(2.0, torch.ones(300, device=device), torch.ones(300, device=device))  # outside a check: it tunes
    assert torch.equal(out.cpu(), torch.full((300,), 3.0))
    return verdict


@pytest.mark.gpu
def test_gpu_the_judge_runs_kernels_on_the_gpu(tmp_path):
    """On a GPU the notebook's process (sandboxed where possible) and the judge both have it: the solved
    notebook and the autotuned axpy are correct and their kernel ran on the GPU too; a forgery is 0."""
    nb = lean_notebook()
    nbformat.write(nb, tmp_path / "solved_00_start_here.ipynb")
    nbformat.write(with_answer(nb, "axpy", AXPY_AUTOTUNED), tmp_path / "autotuned_00_start_here.ipynb")
    nbformat.write(with_answer(nb, *HOSTILE["patch_core"]), tmp_path / "patch_core_00_start_here.ipynb")
    rows = {(r.student, r.exercise): r for r in grade.grade(tmp_path, timeout=120, cell_timeout=30, sandbox=SANDBOX)}
    for student in ("solved", "autotuned"):
        row = rows[(student, "axpy")]
        assert row.status == "correct" and "It ran on this GPU too" in row.message, (student, row.message)
    assert rows[("solved", "launch_stats")].status == "correct"
    assert rows[("patch_core", "launch_stats")].points == 0


def test_a_package_model_as_the_answer_is_refused(tmp_path):
    """02's launch order through the package's own model (tiles.launch_order_grid, as the issue found):
    right numbers, refused as the check in the notebook refuses it (the notebook's process reports the
    package functions an answer calls: a courtesy for the honest, no lock; TEACHING.md)."""
    nb = nbformat.read(NOTEBOOKS / "02_naive_tiling.ipynb", as_version=4)
    keep = set(exercise_cells(nb))
    nb.cells = [c for i, c in enumerate(nb.cells) if c.cell_type == "markdown" or i in keep]
    cell = next(c for c in nb.cells if c.cell_type == "code" and "def row_major_launch_order(" in c.source)
    cell.source = ("from gemm_kernels.models import tiles\n\ndef row_major_launch_order(num_pid_m, num_pid_n):\n"
                   "    return tiles.launch_order_grid(num_pid_m, num_pid_n, 1, 1, order='row_major')\n")
    nbformat.write(nb, tmp_path / "lazy_02_naive_tiling.ipynb")
    verdicts = grade.grade_notebook(tmp_path / "lazy_02_naive_tiling.ipynb", "02_naive_tiling", cell_timeout=10,
                                    hide=[tmp_path], sandbox=SANDBOX)
    status, message = verdicts["row_major_launch_order"]
    assert status == "wrong" and "launch_order_grid" in message
    assert verdicts["one_program"][0] == "correct"


def test_a_judge_that_runs_out_of_time_is_replaced(tmp_path):
    """Two notebooks in one judge's turn, with no time for any check: each exercise says so, a new judge
    takes what is left each time, and grading ends (no exercise graded twice, none left out)."""
    nb = lean_notebook()
    for name in ("a", "b"):
        nbformat.write(nb, tmp_path / f"{name}_00_start_here.ipynb")
    items = [(tmp_path / f"{name}_00_start_here.ipynb", "00_start_here") for name in ("a", "b")]
    verdicts = grade.grade_notebooks(items, timeout=0.5, cell_timeout=5, hide=[tmp_path], sandbox=SANDBOX)
    assert [list(v) for v in verdicts] == [["launch_stats", "axpy"]] * 2
    assert all(status == "timeout" and "0.5 s" in message for v in verdicts for status, message in v.values())


def test_the_interpreters_tuner_keeps_a_callers_own_timer():
    """The CPU tuner (interpreted_autotune) replaces Triton's GPU timer only: an autotuner given its own
    do_bench (the package's tests time candidates that way) still picks by it, in any process order."""
    import torch
    import triton
    import triton.language as tl

    import gemm_kernels.lab.exercises._core  # noqa: F401  (installs the CPU tuner, as a check module does)

    def prefer_the_second(kernel_call, quantiles=None):
        kernel_call()
        prefer_the_second.calls += 1
        return [2.0 if prefer_the_second.calls == 1 else 1.0] * len(quantiles or (0,))
    prefer_the_second.calls = 0

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"],
                     do_bench=prefer_the_second)
    @triton.jit
    def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)

    x = torch.arange(40, dtype=torch.float32)
    out = torch.empty_like(x)
    copy_kernel[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, out, 40)
    assert torch.equal(out, x) and copy_kernel.best_config.kwargs["BLOCK"] == 32


def test_teaching_md_counts_the_forgeries():
    text = (NOTEBOOKS / "TEACHING.md").read_text(encoding="utf-8")
    assert f"{len(HOSTILE)} such submissions" in text
    assert f"the {len(NBGRADER_HOSTILE)} that nbgrader's kernel survives" in text
    assert set(NBGRADER_HOSTILE) <= set(HOSTILE)
    # and the limits it quotes are the grader's
    assert f"each cell stopped after {grade.CELL_TIMEOUT_S:g} s" in text
    assert f"costs {grade.CELL_TIMEOUT_S:g} s once,\nor {grade.CELL_TIMEOUT_S + _grade_judge.GRACE_S:g} s" in text
    assert f"does not return in {_grade_judge.CALL_TIMEOUT_S:g} s" in text
