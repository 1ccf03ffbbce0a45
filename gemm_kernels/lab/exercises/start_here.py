"""Checks for notebook 00 (start here): the launch grid of a 1-D kernel, and a first kernel (which
must be the learner's own, and compile for sm_90: see ``_kernel_checks``)."""

from __future__ import annotations

import torch

from ... import runtime
from ...models.tiles import cdiv
from . import _kernel_checks as kc
from ._core import Hints, call, compare_arrays, plural, read_items, shown, unseen_cases, whole

#: (n, BLOCK) pairs: exact multiples, one element over, a single element, and big blocks
LAUNCH_CASES = [(1000, 256), (1024, 256), (1025, 256), (1, 128), (5000, 1024), (4096, 4096)]


@kc.reference
def launch_stats_ref(n: int, block: int) -> tuple[int, int]:
    """(programs launched, lanes of the last program masked off) for n elements in blocks of BLOCK."""
    programs = cdiv(n, block)
    return programs, programs * block - n


@kc.plain_exercise("launch_stats", hints=Hints(
    nudge="how many blocks of BLOCK elements does it take to cover n elements when the last block may be partial?",
    approach="round the division up (n // BLOCK alone drops the partial block); the last program's idle lanes are "
             "the lanes of all programs minus the n elements",
    solution="programs = (n + block - 1) // block; idle = programs * block - n; return programs, idle"))
def check_launch_stats(launch_stats):
    problems = _launch_stats_problems(launch_stats, LAUNCH_CASES)
    return problems or _launch_stats_problems(launch_stats, unseen_cases(
        lambda rng: (rng.randint(1, 10**7), rng.choice([16, 32, 64, 128, 256, 512, 1024, 4096]))))


def _launch_stats_problems(launch_stats, cases) -> list[str]:
    problems = []
    for n, block in cases:
        got = call(launch_stats, n, block)
        programs, idle = launch_stats_ref(n, block)
        try:
            got_programs, got_idle = (whole(v) for v in read_items(got, 2))
        except (TypeError, ValueError, OverflowError):
            problems.append(f"n={n}, BLOCK={block}: expected a pair of whole numbers (programs, idle_lanes), got "
                            f"{shown(got)}")
            continue
        if (got_programs, got_idle) != (programs, idle):
            problems.append(f"n={n}, BLOCK={block}: expected {plural(programs, 'program')} with "
                            f"{plural(idle, 'idle lane')}, got {plural(got_programs, 'program')} with "
                            f"{plural(got_idle, 'idle lane')}")
    return problems


#: vector lengths for axpy: one element, fewer than a block, ragged, several blocks
AXPY_SIZES = [1, 7, 1000, 4099]
AXPY_ALPHAS = [2.5, -1.0]


def _axpy_case(axpy, n: int, alpha: float, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=gen).to(runtime.DEVICE)
    y = torch.randn(n, generator=gen).to(runtime.DEVICE)
    x_before, y_before = x.clone(), y.clone()
    out = call(axpy, alpha, x, y, inputs_checked=True)
    case = f"n={n}, alpha={alpha}"
    if not isinstance(out, torch.Tensor):
        return [f"{case}: expected a tensor, got {type(out).__name__}"]
    if not (torch.equal(x, x_before) and torch.equal(y, y_before)):
        return [f"{case}: your axpy changed its inputs x or y; write into a new output tensor"]
    return compare_arrays(alpha * x_before.double() + y_before.double(), out.double(), case, index_names=("i",))


def grid_1d_diagnosis(log, failure=None) -> list[str]:
    """A 1-D launch whose programs x BLOCK cover fewer elements than its tensors hold (a grid of
    n // BLOCK programs: the partial last block gets none)."""
    launch = log.last_learner() if log is not None else None
    if launch is None or launch.grid is None:
        return []
    block = launch.constexpr("BLOCK", "BLOCK_SIZE", "BLOCK_N")
    sizes = [t.numel() for t in launch.tensor_names().values()]
    if not isinstance(block, int) or not sizes:
        return []
    n, programs = max(sizes), launch.grid[0]
    if programs * block >= n:
        return []
    return [f"the grid has {plural(programs, 'program')} of BLOCK = {block} for n = {plural(n, 'element')}: "
            f"n // BLOCK rounds down, and the partial last block needs a program too: triton.cdiv(n, BLOCK) programs"]


@kc.kernel_exercise("axpy", kind="launcher", gpu_case=lambda answer: _axpy_case(answer, 4099, 2.5, 4),
                    diagnose=grid_1d_diagnosis, hints=Hints(
    nudge="start from add_kernel: what changes when the output is alpha * x + y instead of x + y?",
    approach="the kernel computes offsets and mask exactly as add_kernel does, loads x and y with that mask and "
             "stores alpha * x + y with it too; the launcher makes a new output and launches cdiv(n, BLOCK) programs",
    solution="offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK); mask = offsets < n; "
             "x = tl.load(x_ptr + offsets, mask=mask); y = tl.load(y_ptr + offsets, mask=mask); "
             "tl.store(out_ptr + offsets, alpha * x + y, mask=mask)  -- launcher: out = torch.empty_like(x); "
             "axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, alpha, n, BLOCK=1024); return out"))
def check_axpy(axpy):
    problems = []
    for n in AXPY_SIZES:
        for alpha in AXPY_ALPHAS:
            problems += _axpy_case(axpy, n, alpha, seed=n)
        if problems:  # one failing size is enough to explain; later sizes would repeat it
            break
    if not problems:
        gen = torch.Generator().manual_seed(0)
        x, y = torch.randn(1000, generator=gen).to(runtime.DEVICE), torch.randn(1000, generator=gen).to(runtime.DEVICE)
        kc.without_your_kernels(axpy, (2.5, x, y), 2.5 * x.double() + y.double(), what="axpy(2.5, x, y)",
                                close=lambda got, want: isinstance(got, torch.Tensor) and got.shape == want.shape
                                and bool(torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)))
    return problems
