"""Checks for notebook 09 (MoE training): the work of the weight-gradient kernel per expert, and
its tile lookup written as a ``@triton.jit`` helper (run in a real kernel on offsets from real
routings and on corrupt ones, where the clamp into ``[0, T]`` the exercise asks for matters;
compared with what ``moe_wgrad.wgrad_tile`` returns; compiled for sm_90 too, see ``_kernel_checks``)."""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ... import runtime
from ...models.tiles import cdiv, tile_coords_np
from ...kernels.moe_wgrad import wgrad_tile as _package_wgrad_tile
from ...kernels.tiles import tile_coords
from . import _kernel_checks as kc
from ._core import Hints, call, read_items, shown, unseen_cases, whole

#: (rows per expert, T, num_pid_m, num_pid_n, GROUP_SIZE_M): idle experts first, in the middle
#: and last, rows past offs[-1], one expert, more row tiles than a group
LOOKUP_CASES = [
    ([3, 0, 37, 1], 45, 3, 5, 2),
    ([0, 0, 9], 9, 2, 2, 1),
    ([16], 20, 4, 3, 4),
    ([5, 6, 0, 0, 7, 1, 0], 19, 1, 2, 8),
]
#: (offs, T, num_pid_m, num_pid_n, GROUP_SIZE_M): corrupt offsets, where the clamp into [0, T] counts:
#: ends past T, a decreasing pair, a negative end
CLAMP_CASES = [
    ([3, 3, 40, 41], 30, 1, 2, 1),
    ([10, 4, 12], 12, 1, 1, 1),
    ([-5, 6, 6], 8, 1, 1, 1),
]


# ----------------------------------------------------------------------------- exercise 1
@kc.reference
def wgrad_work_ref(counts, K, N, block_m, block_n, block_k):
    """Tiles of dw[e] per expert (the same for all) and K-loop steps of each of its tiles."""
    tiles = cdiv(K, block_m) * cdiv(N, block_n)
    return [tiles] * len(counts), [cdiv(c, block_k) for c in counts]


WORK_CASES = [([50, 0, 12, 3], 256, 128, 64, 64, 32), ([1000], 64, 64, 64, 64, 64), ([0, 7, 129], 100, 40, 32, 16, 16)]


@kc.plain_exercise("wgrad_work", hints=Hints(
    nudge="dw[e] has the shape of w[e] whatever the routing: which dimension do the expert's rows become?",
    approach="the tiles cover dw[e]'s K x N; the expert's token rows are the sum's range, so they set the "
             "number of K-loop steps of each tile (an idle expert: none)",
    solution="tiles = cdiv(K, block_m) * cdiv(N, block_n) for every expert; steps = cdiv(rows_e, block_k)"))
def check_wgrad_work(wgrad_work):
    problems = _work_problems(wgrad_work, WORK_CASES)
    return problems or _work_problems(wgrad_work, unseen_cases(lambda rng: (
        [0 if rng.random() < 0.25 else rng.randint(1, 1000) for _ in range(rng.randint(1, 6))],
        rng.randint(1, 512), rng.randint(1, 512), *(rng.choice([16, 32, 64, 128]) for _ in range(3)))))


def _work_problems(wgrad_work, cases) -> list[str]:
    problems = []
    for counts, K, N, bm, bn, bk in cases:
        case = f"counts {counts}, K={K}, N={N}, blocks {bm}x{bn}x{bk}"
        got = call(wgrad_work, list(counts), K, N, bm, bn, bk)
        tiles, steps = wgrad_work_ref(counts, K, N, bm, bn, bk)
        try:
            pair = read_items(got, 2)  # never more of an answer than one item past what is expected
            got_tiles = [whole(v) for v in read_items(pair[0], len(counts))]
            got_steps = [whole(v) for v in read_items(pair[1], len(counts))]
        except (TypeError, ValueError, IndexError, OverflowError):
            problems.append(f"{case}: expected (tiles per expert, steps per tile), two lists of whole numbers, got {shown(got)}")
            continue
        if got_tiles != tiles:
            why = " (that follows the routing, as in the forward pass: here the tokens are the reduction)" \
                if got_tiles == [cdiv(c, bm) * cdiv(N, bn) for c in counts] else ""
            problems.append(f"{case}: tiles per expert: expected {tiles}, got {got_tiles}{why}")
        if got_steps != steps:
            problems.append(f"{case}: K-loop steps per tile: expected {steps}, got {got_steps}")
    return problems


# ----------------------------------------------------------------------------- exercise 2
@triton.jit
def _lookup_kernel(out_ptr, offs_ptr, T, num_pid_m, num_pid_n, LOOKUP: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """Program ``tile`` stores what the learner's LOOKUP says of tile ``tile``."""
    tile = tl.program_id(0)
    expert, pid_m, pid_n, first_row, rows = LOOKUP(tile, offs_ptr, T, num_pid_m, num_pid_n, GROUP_SIZE_M)
    base = out_ptr + 5 * tile
    tl.store(base, expert)
    tl.store(base + 1, pid_m)
    tl.store(base + 2, pid_n)
    tl.store(base + 3, first_row)
    tl.store(base + 4, rows)


def run_wgrad_tile_lookup(lookup, offs: torch.Tensor, T: int, num_pid_m: int, num_pid_n: int,
                          group_size_m: int) -> torch.Tensor:
    """Launch one program per tile of every expert, each calling ``lookup(tile, offs_ptr, T,
    num_pid_m, num_pid_n, GROUP_SIZE_M)``; returns the int32 ``[tiles, 5]`` table of
    ``(expert, pid_m, pid_n, first_row, rows)`` they stored (-1: nothing stored)."""
    tiles = offs.shape[0] * num_pid_m * num_pid_n
    out = torch.full((tiles, 5), -1, dtype=torch.int32, device=runtime.DEVICE)
    _lookup_kernel[(tiles,)](out, offs.to(runtime.DEVICE), T, num_pid_m, num_pid_n, LOOKUP=lookup,
                             GROUP_SIZE_M=group_size_m)
    return out.cpu()


def wgrad_tile_table_ref(counts, T, num_pid_m, num_pid_n, group_size_m) -> list[tuple]:
    """What ``moe_wgrad.wgrad_tile`` returns for every tile, in plain Python."""
    return wgrad_tile_table_from_offs(np.cumsum(counts).tolist(), T, num_pid_m, num_pid_n, group_size_m)


def wgrad_tile_table_from_offs(offs, T, num_pid_m, num_pid_n, group_size_m, *, clamp: bool = True) -> list[tuple]:
    """The same from the offsets themselves: expert e's rows are offs[e-1]:offs[e] (0 before expert
    0), clamped into [0, T] (a decreasing pair gives none); ``clamp=False``: as they are."""
    table = []
    for tile in range(len(offs) * num_pid_m * num_pid_n):
        expert, local = divmod(tile, num_pid_m * num_pid_n)
        pid_m, pid_n = (int(v) for v in tile_coords_np(local, num_pid_m, num_pid_n, "grouped", group_size_m))
        first, end = (offs[expert - 1] if expert else 0), offs[expert]
        if clamp:
            first = min(max(first, 0), T)
            end = min(max(end, first), T)
        table.append((expert, pid_m, pid_n, int(first), int(end - first)))
    return table


def _wgrad_case(wgrad_tile, offs, T, num_pid_m, num_pid_n, group, case) -> list[str]:
    got = call(run_wgrad_tile_lookup, wgrad_tile, torch.tensor(offs, dtype=torch.int32), T, num_pid_m, num_pid_n,
               group, what=f"a kernel calling wgrad_tile ({case})").tolist()
    expected = wgrad_tile_table_from_offs(offs, T, num_pid_m, num_pid_n, group)
    unclamped = wgrad_tile_table_from_offs(offs, T, num_pid_m, num_pid_n, group, clamp=False)
    for tile, (want, have, raw) in enumerate(zip(expected, got, unclamped)):
        have = tuple(have)
        if have == want:
            continue
        names = ("expert", "pid_m", "pid_n", "first_row", "rows")
        wrong = [f"{n} {h} (expected {w})" for n, w, h in zip(names, want, have) if w != h]
        line = [f"{case}: tile {tile}: " + ", ".join(wrong)]  # the first wrong tile of a case says enough
        if have == raw:
            e = want[0]
            start = f"offs[{e - 1}]" if e else "0"
            line.append(f"diagnosis: expert {e}'s rows are {start}:offs[{e}] = {raw[3]}:{raw[3] + raw[4]} "
                        f"as stored, but T = {T}: the exercise asks to clamp them into [0, T] (first_row = "
                        "min(max(first_row, 0), T), the end = min(max(end, first_row), T)), so that corrupt offsets "
                        "never send the kernel outside x")
        return line
    return []


def _wgrad_gpu_cases(wgrad_tile) -> list[str]:
    """On a GPU: a grouped order that differs from row-major (3 x 5 tiles in groups of 2), then corrupt offsets."""
    counts, T, num_pid_m, num_pid_n, group = LOOKUP_CASES[0]
    return (_wgrad_case(wgrad_tile, np.cumsum(counts).tolist(), T, num_pid_m, num_pid_n, group,
                        f"rows per expert {counts}, {num_pid_m}x{num_pid_n} tiles each, GROUP_SIZE_M={group}")
            or _wgrad_case(wgrad_tile, *CLAMP_CASES[0], "corrupt offs"))


@kc.kernel_exercise("wgrad_tile", kind="jit", forbid=(_package_wgrad_tile,), hands=(tile_coords,),
                    gpu_case=lambda answer: _wgrad_gpu_cases(answer), hints=Hints(
    nudge="every expert owns the same number of tiles here (dw[e] is K x N): a tile index splits into "
          "(expert, tile inside the expert) without a search",
    approach="divide by the tiles per expert; map the remainder to (pid_m, pid_n) with the package's grouped "
             "order; the expert's rows run from the previous expert's end in offs to its own, both clamped into "
             "[0, T] (the end never below the start)",
    solution="expert = tile // (num_pid_m * num_pid_n); pid_m, pid_n = tile_coords(tile % (num_pid_m * "
             "num_pid_n), num_pid_m, num_pid_n, True, GROUP_SIZE_M); first_row = tl.load(offs_ptr + expert - 1, "
             "mask=expert > 0, other=0); row_end = tl.load(offs_ptr + expert); first_row = "
             "tl.minimum(tl.maximum(first_row, 0), T); row_end = tl.minimum(tl.maximum(row_end, first_row), T); "
             "return expert, pid_m, pid_n, first_row, row_end - first_row"))
def check_wgrad_tile(wgrad_tile):
    problems = []
    for counts, T, num_pid_m, num_pid_n, group in LOOKUP_CASES:
        case = f"rows per expert {counts}, {num_pid_m}x{num_pid_n} tiles each, GROUP_SIZE_M={group}"
        problems += _wgrad_case(wgrad_tile, np.cumsum(counts).tolist(), T, num_pid_m, num_pid_n, group, case)
    if problems:
        return problems
    for offs, T, num_pid_m, num_pid_n, group in CLAMP_CASES:
        case = f"corrupt offs {offs} with T={T}"
        problems += _wgrad_case(wgrad_tile, offs, T, num_pid_m, num_pid_n, group, case)
    return problems
