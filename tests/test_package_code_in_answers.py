"""A kernel answer does its exercise's work itself (issue 48, a teacher's review), in the notebook's
check and in the grader's rebuild alike:

* it may use only the package's ``@triton.jit`` helpers its exercise hands the learner (a check's
  ``hands``, none by default): 02's matmul made of ``k_loop_pointers``, ``tile_row_major`` and
  ``store_tile_masked`` is refused, by name, however the helper was imported;
* a launcher may launch only the notebook's own kernels: the package's ``_matmul_kernel`` under
  an alias is refused, and so is ``gk.matmul`` called from a launcher;
* a launcher's torch calls may not copy: ``.t().contiguous()`` did 01's transpose.

The rebuild is tested on the report the notebook's process sends (``_grade_worker.answer_code``),
with the check modules' helpers as the stand-ins they are there."""

from __future__ import annotations

import ast
import importlib
import itertools
import linecache
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels.lab import student
from gemm_kernels.lab._grade_worker import answer_code, without_check_calls
from gemm_kernels.lab._rebuild import NotRebuilt, rebuild
from gemm_kernels.lab.exercises import CORRECT, WRONG
from gemm_kernels.lab.exercises import _kernel_checks as kc
from gemm_kernels.lab.exercises import grouped_l2_ordering, moe_training, naive_tiling, persistent_tma
from gemm_kernels.lab.exercises import pointer_arithmetic
from gemm_kernels.lab.grade import ANSWERS, KERNEL_KINDS
from gemm_kernels.lab.progress import EXERCISES_PACKAGE, _module_of

from _hostile import HOSTILE

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
_CELLS = itertools.count(9000)


def learner(source: str, namespace: dict | None = None) -> dict:
    """``source`` run as a notebook cell (its lines in linecache, as IPython keeps them)."""
    filename = f"<submission cell {next(_CELLS)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = namespace if namespace is not None else {"triton": triton, "tl": tl, "torch": torch, "np": np,
                                                         "__name__": "__main__"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace


def report_of(fn) -> dict:
    """What the notebook's process reports of ``fn``; a check module's helper as its stand-in there."""
    report = answer_code(fn)
    for spec in report["globals"].values():
        module, _, name = spec.get("object", "").partition(":")
        if module.startswith(EXERCISES_PACKAGE + "."):
            spec.pop("object")
            spec["standin"] = [module, name]
    return report


def rebuilt(fn, check):
    return rebuild(report_of(fn), fn.__name__, kc.handed(check), kc.package_answers(check))


def hostile(name: str) -> str:
    return HOSTILE[name][1]


# ----------------------------------------------------------------------------- the allow list
def test_only_the_exercises_that_hand_helpers_name_them():
    """The helpers each exercise hands (its text names them, its solution uses them); every other
    check hands none."""
    from gemm_kernels.kernels.matmul_ws import _acc_layout
    from gemm_kernels.kernels.tiles import streamk_range, tile_coords, tile_grouped
    from gemm_kernels.lab.exercises import stream_k, warp_specialization

    handed = {"persistent_loop": (tile_grouped, persistent_tma.matmul_tile),
              "streamk_loop": (streamk_range, stream_k.run_segment),
              "consumer_mainloop": (_acc_layout,), "wgrad_tile": (tile_coords,)}
    for notebook in ANSWERS:
        module = importlib.import_module(f"{EXERCISES_PACKAGE}.{_module_of(notebook)}")
        for title, _ in ANSWERS[notebook]:
            assert kc.handed(getattr(module, f"check_{title}")) == handed.get(title, ()), title
    assert warp_specialization.check_consumer_mainloop.hands == handed["consumer_mainloop"]


def test_the_judge_refuses_the_package_helpers_doing_02s_matmul():
    """H1: tt.tile_row_major, mm.k_loop_pointers, ep.store_tile_masked (module chains)."""
    fn = learner(hostile("matmul_by_package_helpers"))["my_matmul"]
    with pytest.raises(NotRebuilt, match=r"tt\.tile_row_major: your code uses gemm_kernels\.kernels\.tiles\."
                                         r"tile_row_major, which this exercise does not hand you.*\(here: none\)"):
        rebuilt(fn, naive_tiling.check_my_matmul)


def test_the_judge_refuses_a_helper_imported_by_name_or_alias():
    """The same helper imported by name, and under another, is refused by its own name."""
    for line in ("from gemm_kernels.kernels.tiles import tile_row_major as row_of\n",
                 "from gemm_kernels.kernels.tiles import tile_row_major\n"):
        name = line.split()[-1]
        source = (line + "from gemm_kernels.kernels import matmul as mm, epilogue as ep\n"
                  + hostile("matmul_by_package_helpers").split("\n", 2)[2].replace("tt.tile_row_major", name))
        fn = learner(source)["my_matmul"]
        with pytest.raises(NotRebuilt, match=rf"{name}: your code uses gemm_kernels\.kernels\.tiles\.tile_row_major"):
            rebuilt(fn, naive_tiling.check_my_matmul)


def test_the_judge_refuses_a_package_kernel_under_an_alias():
    """H2: _matmul_kernel imported as lib_kernel (the package's answer to 02: named as such); another
    package kernel under an alias: not handed."""
    fn = learner(hostile("matmul_by_aliased_package_kernel"))["my_matmul"]
    with pytest.raises(NotRebuilt, match=r"lib_kernel: your code calls gemm_kernels\.kernels\.matmul\._matmul_kernel"
                                         r", the package's own answer to this exercise"):
        rebuilt(fn, naive_tiling.check_my_matmul)
    source = hostile("matmul_by_aliased_package_kernel").replace(
        "from gemm_kernels.kernels.matmul import _matmul_kernel as lib_kernel",
        "from gemm_kernels.kernels.persistent import _matmul_persistent_kernel as lib_kernel")
    fn = learner(source)["my_matmul"]
    with pytest.raises(NotRebuilt, match=r"lib_kernel: your code uses gemm_kernels\.kernels\.persistent\."
                                         r"_matmul_persistent_kernel, which this exercise does not hand you"):
        rebuilt(fn, naive_tiling.check_my_matmul)


TILE_COORDS_HELPER = """
from gemm_kernels.kernels.tiles import tile_coords

@triton.jit
def helper(pid, num_pid_m, num_pid_n, GROUP_SIZE_N: tl.constexpr):
    return tile_coords(pid, num_pid_m, num_pid_n, True, GROUP_SIZE_N)
"""


def test_a_helper_is_allowed_only_where_its_exercise_hands_it():
    """09's wgrad_tile hands tile_coords: it rebuilds there, and is refused in 03's exercise."""
    fn = learner(TILE_COORDS_HELPER)["helper"]
    assert kc.python_function(rebuilt(fn, moe_training.check_wgrad_tile)) is not None
    with pytest.raises(NotRebuilt, match=r"tile_coords: your code uses gemm_kernels\.kernels\.tiles\.tile_coords, "
                                         r"which this exercise does not hand you"):
        rebuilt(fn, grouped_l2_ordering.check_column_grouped_triton)


def _solution_namespace(notebook: str) -> dict:
    """The notebook's first code cell, its Exercises section's imports and its solution cells, run
    (no check called)."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    namespace = {"__name__": "__main__"}
    for index in student.exercise_cells(nb):
        tree = without_check_calls(ast.parse(student.strip_hidden_tests(nb.cells[index].source)))
        learner(ast.unparse(tree), namespace)
    return namespace


@pytest.mark.parametrize("title", sorted(KERNEL_KINDS))
def test_every_kernel_solution_rebuilds_with_its_checks_helpers(title):
    """The course's solutions use only the helpers their exercise hands: the judge rebuilds each."""
    notebook = next(nb for nb, answers in ANSWERS.items() if title in dict(answers))
    namespace = _solution_namespace(notebook)
    module = importlib.import_module(f"{EXERCISES_PACKAGE}.{_module_of(notebook)}")
    rebuilt(namespace[dict(ANSWERS[notebook])[title]], getattr(module, f"check_{title}"))


# ----------------------------------------------------------------------------- the notebook's check
def assert_refused(result, *fragments):
    assert result.status == WRONG, str(result)
    for fragment in fragments:
        assert fragment in str(result), f"{fragment!r} not in:\n{result}"


def test_the_check_refuses_the_package_helpers_doing_02s_matmul():
    """H1 in the notebook: the package's answer (k_loop_pointers) named first; without it, the helpers
    the exercise does not hand."""
    assert_refused(naive_tiling.check_my_matmul(learner(hostile("matmul_by_package_helpers"))["my_matmul"]),
                   "your code calls gemm_kernels.kernels.matmul.k_loop_pointers, the package's own answer")
    own_loop = hostile("matmul_by_package_helpers").replace(
        """    acc = mm.k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                             BLOCK_M, BLOCK_N, BLOCK_K, False)""",
        """    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak, mask=ks[None, :] < K, other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=ks[:, None] < K, other=0.0)
        acc = tl.dot(a, b, acc)""")
    assert "k_loop_pointers" not in own_loop
    assert_refused(naive_tiling.check_my_matmul(learner(own_loop)["my_matmul"]),
                   "your code uses gemm_kernels.kernels.", "which this exercise does not hand you", "(here: none)")


def test_the_check_refuses_a_launcher_launching_a_package_kernel():
    """H2 in the notebook: the launch of the aliased _matmul_kernel, refused by its name."""
    assert_refused(naive_tiling.check_my_matmul(learner(hostile("matmul_by_aliased_package_kernel"))["my_matmul"]),
                   "your launcher launches gemm_kernels.kernels.matmul._matmul_kernel, a kernel your notebook does "
                   "not define")


GK_MATMUL_LAUNCHER = """
import gemm_kernels as gk

@triton.jit
def flag_kernel(flag_ptr):
    tl.store(flag_ptr, 1)

def my_matmul(a, b):
    flag = torch.zeros(1, dtype=torch.int32, device=a.device)
    flag_kernel[(1,)](flag)
    return gk.matmul(a, b, order="row_major")
"""


def test_the_check_refuses_a_launcher_calling_the_packages_matmul():
    """The package's kernel launched through gk.matmul, beside a flag kernel of the learner's."""
    assert_refused(naive_tiling.check_my_matmul(learner(GK_MATMUL_LAUNCHER)["my_matmul"]),
                   "your launcher launches gemm_kernels.kernels.matmul._matmul_kernel")


@pytest.mark.parametrize("copy", ["tmp.t().contiguous()", "tmp.T.reshape(N * M).view(N, M)",
                                  "torch.cat([tmp.t()])", "tmp.t()[list(range(N))]",
                                  "tmp.mT.clone(memory_format=torch.contiguous_format)",
                                  "tmp.t().flatten().view(N, M)"])
def test_a_launcher_whose_torch_copies_the_answer_is_refused(copy):
    """H3: the kernel copies x as it is, and torch's copy of its transposed view is the answer."""
    source = hostile("transpose_by_torch_copy").replace("return tmp.t().contiguous()", f"return {copy}")
    assert_refused(pointer_arithmetic.check_transpose(learner(source)["transpose"]),
                   "your launcher computes with torch (")


def test_views_that_do_not_copy_stay_allowed():
    """.contiguous() of a contiguous tensor, .reshape to a view, x[...] of a block: no copy."""
    x = torch.zeros(4, 6)
    assert not kc._copied((x,), x.contiguous())
    assert not kc._copied((x,), x.reshape(6, 4))
    assert not kc._copied((x,), x[1:, ::2])
    assert kc._copied((x.t(),), x.t().contiguous())
    assert kc._copied((x,), x[[0, 2]])
    right = hostile("transpose_by_torch_copy").replace(
        "tmp.stride(0), tmp.stride(1)", "tmp.stride(1), tmp.stride(0)").replace(
        "tmp = torch.empty((M, N)", "tmp = torch.empty((N, M)").replace("return tmp.t().contiguous()",
                                                                          "return tmp.contiguous().view(N, M)")
    result = pointer_arithmetic.check_transpose(learner(right)["transpose"])
    assert result.status == CORRECT, str(result)


def test_no_launch_is_kept_while_a_check_records_launches(monkeypatch):
    """On a GPU a kept launch skips ``kernel[grid]``: gk.matmul in a learner's launcher went unseen by the
    check (a GPU run: "right numbers without your kernel" instead of naming the package's kernel)."""
    from gemm_kernels import _triton_compat as compat, runtime
    from gemm_kernels.kernels import launches

    import dataclasses

    monkeypatch.setattr(runtime, "RUNTIME", dataclasses.replace(runtime.RUNTIME, interpreted=False))  # as on a GPU
    monkeypatch.setattr(launches, "_keep", True)
    assert launches.keeping()
    with compat.redirect_launches(lambda *args, **kwargs: None):
        assert not launches.keeping()
    assert launches.keeping()
