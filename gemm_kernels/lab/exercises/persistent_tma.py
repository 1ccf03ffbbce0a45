"""Checks for notebook 05 (persistent kernels and TMA): waves and the idle programs of the last
one, the tiles one persistent program walks, and which tensors a TMA descriptor can read."""

from __future__ import annotations

import numpy as np
import torch

from ... import runtime
from ...kernels.tma import tma_aligned, tma_layout
from ...models.tiles import cdiv, persistent_schedule
from ._core import call, exercise

# ----------------------------------------------------------------------------- exercise 1
# (M, N, BLOCK_M, BLOCK_N, number of SMs): H100-sized squares, a single partial wave, an exact
# fit, one tile on a tiny GPU, a ragged grid on an H100 PCIe (114 SMs)
WAVE_CASES = [
    (8192, 8192, 128, 128, 132),
    (4096, 4096, 128, 128, 132),
    (1000, 1000, 128, 128, 132),
    (12 * 128, 11 * 128, 128, 128, 132),
    (1, 1, 128, 128, 4),
    (5000, 3000, 128, 256, 114),
]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def waves_ref(M: int, N: int, block_m: int, block_n: int, num_sms: int) -> tuple[int, int]:
    """(waves, idle programs in the last wave) of a one-program-per-tile launch, one program per SM."""
    tiles = cdiv(M, block_m) * cdiv(N, block_n)
    waves = cdiv(tiles, num_sms)
    return waves, waves * num_sms - tiles


@exercise("waves_and_tail",
          hint="tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N); the GPU runs them num_sms at a time, so "
               "waves = cdiv(tiles, num_sms), and the last wave leaves waves * num_sms - tiles SMs idle")
def check_waves_and_tail(waves_and_tail):
    problems = []
    for M, N, bm, bn, sms in WAVE_CASES:
        case = f"M={M}, N={N}, tiles {bm}x{bn}, {sms} SMs"
        got = call(waves_and_tail, M, N, bm, bn, sms)
        try:
            got_waves, got_idle = (int(v) for v in got)
        except (TypeError, ValueError):
            problems.append(f"{case}: expected a pair (waves, idle programs in the last wave), got {got!r}")
            continue
        waves, idle = waves_ref(M, N, bm, bn, sms)
        if (got_waves, got_idle) == (waves, idle):
            continue
        tiles = cdiv(M, bm) * cdiv(N, bn)
        why = []
        if got_waves == tiles // sms and tiles % sms:
            why.append("waves rounded down: the last, partial wave counts too")
        if got_idle == sms - idle and idle:
            why.append("that idle count is the number of *busy* programs of the last wave")
        if got_waves == (M // bm) * (N // bn) // sms or got_idle == sms - (M // bm) * (N // bn) % sms:
            if M % bm or N % bn:
                why.append("ragged edges need tiles too: cdiv, not //")
        problems.append(f"{case} ({_plural(tiles, 'tile')}): expected {_plural(waves, 'wave')} with {idle} idle "
                        f"programs in the last, got {_plural(got_waves, 'wave')} with {got_idle} idle"
                        + (f" ({'; '.join(why)})" if why else ""))
    return problems


# ----------------------------------------------------------------------------- exercise 2
# (num_pid_m, num_pid_n, NUM_PROGRAMS, GROUP_SIZE_M): small grids with a short last group, more
# programs than tiles, groups of one row (= row-major), and an H100-sized launch
WALK_CASES = [(5, 7, 4, 2), (9, 9, 12, 3), (3, 2, 16, 8), (4, 6, 5, 1), (64, 64, 132, 8)]


def persistent_tiles_ref(pid: int, num_pid_m: int, num_pid_n: int, num_programs: int, group_size_m: int):
    """The (pid_m, pid_n) program ``pid`` of a persistent launch computes, in order."""
    table = persistent_schedule(num_pid_m, num_pid_n, 1, 1, num_programs, "grouped", group_size_m)
    mine = table[table[:, 1] == pid]
    return [(int(m), int(n)) for m, n in mine[:, 4:6]]


def _as_tiles(value, case):
    try:
        return [tuple(int(v) for v in pair) for pair in value]
    except (TypeError, ValueError):
        return f"{case}: expected a list of (pid_m, pid_n) pairs, got {value!r}"


@exercise("persistent_tiles",
          hint="program pid takes tile indices pid, pid + NUM_PROGRAMS, ... below num_pid_m * num_pid_n, and "
               "maps each with the grouped order: tiles.tile_coords_np(t, num_pid_m, num_pid_n, 'grouped', "
               "GROUP_SIZE_M) (the same mapping the kernel calls)")
def check_persistent_tiles(persistent_tiles):
    problems = []
    for num_pid_m, num_pid_n, programs, group in WALK_CASES:
        launched = min(programs, num_pid_m * num_pid_n)
        case = f"{num_pid_m}x{num_pid_n} tiles, {programs} programs, GROUP_SIZE_M={group}"
        wrong_programs = 0
        for pid in range(launched):
            got = _as_tiles(call(persistent_tiles, pid, num_pid_m, num_pid_n, programs, group), case)
            if isinstance(got, str):
                return [got]
            expected = persistent_tiles_ref(pid, num_pid_m, num_pid_n, programs, group)
            if got == expected:
                continue
            wrong_programs += 1
            if wrong_programs > 2:
                continue
            if len(got) != len(expected):
                problems.append(f"{case}: program {pid}: expected {len(expected)} tiles, got {len(got)} "
                                f"(tile indices {pid}, {pid + programs}, ... below {num_pid_m * num_pid_n})")
                continue
            step = next(i for i, (e, g) in enumerate(zip(expected, got)) if e != g)
            index = pid + step * programs
            problems.append(f"{case}: program {pid}, step {step} (tile index {index}): expected tile "
                            f"{expected[step]}, got {got[step]}")
        if wrong_programs > 2:
            problems.append(f"{case}: {wrong_programs - 2} more programs walk the wrong tiles")
    return problems


# ----------------------------------------------------------------------------- exercise 3
def _fp16(*shape):
    return torch.zeros(shape, dtype=torch.float16, device=runtime.DEVICE)


#: (description, tensor maker): what TMA accepts and what it refuses, and why
TMA_CASES = [
    ("a contiguous 64x64 fp16 matrix", lambda: _fp16(64, 64)),
    ("a contiguous 64x63 fp16 matrix", lambda: _fp16(64, 63)),
    ("b.t() of a contiguous 63x64 fp16 matrix b", lambda: _fp16(63, 64).t()),
    ("x[:, 1:] of a contiguous 64x64 fp16 matrix", lambda: _fp16(64, 64)[:, 1:]),
    ("x[:, 8:] of a contiguous 64x64 fp16 matrix", lambda: _fp16(64, 64)[:, 8:]),
    ("x[::2] (every other row) of a contiguous 64x64 fp16 matrix", lambda: _fp16(64, 64)[::2]),
    ("x[:, ::2] (every other column) of a contiguous 64x64 fp16 matrix", lambda: _fp16(64, 64)[:, ::2]),
    ("a contiguous 10x4 fp32 matrix", lambda: torch.zeros(10, 4, device=runtime.DEVICE)),
    ("a contiguous 10x3 fp32 matrix", lambda: torch.zeros(10, 3, device=runtime.DEVICE)),
    ("tma_aligned(x) of a 64x63 fp16 matrix", lambda: tma_aligned(_fp16(64, 63))),
]


def tma_view_ref(x: torch.Tensor):
    """``(tma_layout(x), None)``: ``((col_major, outer_stride), None)``, or ``(None, reason)`` when
    TMA cannot read x."""
    try:
        return tma_layout(x, "x"), None
    except ValueError as err:
        reason = str(err).split(": ", 1)[1].split(" [x has", 1)[0]
        return None, reason


def _is_false(value) -> bool:
    return isinstance(value, (bool, np.bool_)) and not value


def _describe(x: torch.Tensor) -> str:
    return (f"strides {tuple(x.stride())}, {x.element_size()}-byte elements, "
            f"address % 16 = {x.data_ptr() % 16}")


@exercise("tma_view",
          hint="TMA reads rows: one stride must be 1 (row-major: stride(1) == 1, described as [rows, cols]; "
               "column-major: stride(0) == 1, described as [cols, rows]); the other stride times the element "
               "size, and the address of the first element, must be multiples of 16 bytes")
def check_tma_view(tma_view):
    problems = []
    for text, make in TMA_CASES:
        x = make()
        (expected, reason) = tma_view_ref(x)
        got = call(tma_view, x)
        if expected is None:
            if not _is_false(got):
                problems.append(f"{text} ({_describe(x)}): TMA cannot read it ({reason}), but you returned {got!r} "
                                "instead of False")
            continue
        if _is_false(got):
            problems.append(f"{text} ({_describe(x)}): TMA can read it, as {expected} (col_major, outer stride), "
                            "but you returned False")
            continue
        try:
            got_pair = (bool(got[0]), int(got[1]))
        except (TypeError, ValueError, IndexError):
            problems.append(f"{text} ({_describe(x)}): expected {expected} (col_major, outer stride), got {got!r}")
            continue
        if got_pair != tuple(expected):
            col_major, outer = expected
            how = (f"column-major: a descriptor over the [{x.shape[1]}, {x.shape[0]}] array it is stored as"
                   if col_major else f"row-major: a descriptor over [{x.shape[0]}, {x.shape[1]}]")
            problems.append(f"{text} ({_describe(x)}): expected {expected} ({how}, outer stride {outer} elements), "
                            f"got {got_pair}")
    return problems
