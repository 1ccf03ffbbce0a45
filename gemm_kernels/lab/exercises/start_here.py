"""Checks for notebook 00 (start here): the launch grid of a 1-D kernel, and a first kernel."""

from __future__ import annotations

import torch

from ... import runtime
from ...models.tiles import cdiv
from ._core import Hints, call, compare_arrays, exercise, read_items, shown

#: (n, BLOCK) pairs: exact multiples, one element over, a single element, and big blocks
LAUNCH_CASES = [(1000, 256), (1024, 256), (1025, 256), (1, 128), (5000, 1024), (4096, 4096)]


def launch_stats_ref(n: int, block: int) -> tuple[int, int]:
    """(programs launched, lanes of the last program masked off) for n elements in blocks of BLOCK."""
    programs = cdiv(n, block)
    return programs, programs * block - n


@exercise("launch_stats", hints=Hints(
    nudge="how many blocks of BLOCK elements does it take to cover n elements when the last block may be partial?",
    approach="round the division up (n // BLOCK alone drops the partial block); the last program's idle lanes are "
             "the lanes of all programs minus the n elements",
    solution="programs = (n + block - 1) // block; idle = programs * block - n; return programs, idle"))
def check_launch_stats(launch_stats):
    problems = []
    for n, block in LAUNCH_CASES:
        got = call(launch_stats, n, block)
        programs, idle = launch_stats_ref(n, block)
        try:
            got_programs, got_idle = (int(v) for v in read_items(got, 2))
        except (TypeError, ValueError, OverflowError):
            problems.append(f"n={n}, BLOCK={block}: expected a pair (programs, idle_lanes), got {shown(got)}")
            continue
        if (got_programs, got_idle) != (programs, idle):
            problems.append(f"n={n}, BLOCK={block}: expected {programs} programs with {idle} idle lanes, "
                            f"got {got_programs} programs with {got_idle} idle lanes")
    return problems


#: vector lengths for axpy: one element, fewer than a block, ragged, several blocks
AXPY_SIZES = [1, 7, 1000, 4099]
AXPY_ALPHAS = [2.5, -1.0]


@exercise("axpy", hints=Hints(
    nudge="start from add_kernel: what changes when the output is alpha * x + y instead of x + y?",
    approach="the kernel computes offsets and mask exactly as add_kernel does, loads x and y with that mask and "
             "stores alpha * x + y with it too; the launcher makes a new output and launches cdiv(n, BLOCK) programs",
    solution="offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK); mask = offsets < n; "
             "x = tl.load(x_ptr + offsets, mask=mask); y = tl.load(y_ptr + offsets, mask=mask); "
             "tl.store(out_ptr + offsets, alpha * x + y, mask=mask)  -- launcher: out = torch.empty_like(x); "
             "axpy_kernel[(triton.cdiv(n, 1024),)](x, y, out, alpha, n, BLOCK=1024); return out"))
def check_axpy(axpy):
    problems = []
    gen = torch.Generator().manual_seed(4)
    for n in AXPY_SIZES:
        for alpha in AXPY_ALPHAS:
            x = torch.randn(n, generator=gen).to(runtime.DEVICE)
            y = torch.randn(n, generator=gen).to(runtime.DEVICE)
            x_before, y_before = x.clone(), y.clone()
            out = call(axpy, alpha, x, y)
            case = f"n={n}, alpha={alpha}"
            if not isinstance(out, torch.Tensor):
                problems.append(f"{case}: expected a tensor, got {type(out).__name__}")
                continue
            if not (torch.equal(x, x_before) and torch.equal(y, y_before)):
                problems.append(f"{case}: your axpy changed its inputs x or y; write into a new output tensor")
                continue
            problems += compare_arrays(alpha * x_before.double() + y_before.double(), out.double(), case,
                                       index_names=("i",))
        if problems:  # one failing size is enough to explain; later sizes would repeat it
            break
    return problems
