"""Checks for notebook 05 (persistent kernels and TMA): waves and the idle programs of the last
one, the tiles one persistent program walks, which tensors a TMA descriptor can read, and the
persistent tile loop of a real kernel (with :func:`matmul_tile`, the one-tile helper it calls;
compiled for sm_90 too: see ``_kernel_checks``)."""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ... import runtime
from ...kernels.matmul import matmul_ref
from ...kernels.persistent import _matmul_persistent_kernel
from ...kernels.tiles import record_tile, tile_grouped
from ...kernels.tma import tma_aligned, tma_layout
from ...models.tiles import cdiv, persistent_schedule
from ...testing import TOLERANCES, rel_err
from . import _kernel_checks as kc
from ._core import Hints, call, compare_arrays, plural, read_items, shown, unseen_cases, whole

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


@kc.reference
def waves_ref(M: int, N: int, block_m: int, block_n: int, num_sms: int) -> tuple[int, int]:
    """(waves, idle programs in the last wave) of a one-program-per-tile launch, one program per SM."""
    tiles = cdiv(M, block_m) * cdiv(N, block_n)
    waves = cdiv(tiles, num_sms)
    return waves, waves * num_sms - tiles


def _schedule():
    from ...models import schedule

    return schedule


def _persistent_models():
    """The package's functions that compute a persistent walk: an answer calling one is refused."""
    from .. import traces
    from ...models import tiles

    return persistent_schedule, tiles.persistent_tile_ids, _schedule().tile_schedule, traces.trace_persistent_tiles


@kc.plain_exercise("waves_and_tail", forbid=lambda: (_schedule().tile_schedule,), hints=Hints(
    nudge="first count the tiles (ragged edges need tiles too), then think of the GPU running num_sms of them at "
          "a time",
    approach="tiles from cdiv in each dimension; waves is the tile count divided by num_sms, rounded up; the idle "
             "SMs of the last wave are the slots of all waves minus the tiles",
    solution="tiles = cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N); waves = cdiv(tiles, num_sms); "
             "return waves, waves * num_sms - tiles"))
def check_waves_and_tail(waves_and_tail):
    problems = _waves_problems(waves_and_tail, WAVE_CASES)
    return problems or _waves_problems(waves_and_tail, unseen_cases(lambda rng: (
        rng.randint(1, 16384), rng.randint(1, 16384), rng.choice([64, 128, 256]), rng.choice([64, 128, 256]),
        rng.choice([4, 8, 16, 78, 114, 132, 144]))))


def _waves_problems(waves_and_tail, cases) -> list[str]:
    problems = []
    for M, N, bm, bn, sms in cases:
        case = f"M={M}, N={N}, tiles {bm}x{bn}, {sms} SMs"
        got = call(waves_and_tail, M, N, bm, bn, sms)
        try:
            got_waves, got_idle = (whole(v) for v in read_items(got, 2))
        except (TypeError, ValueError, OverflowError):
            problems.append(f"{case}: expected a pair of whole numbers (waves, idle programs in the last wave), got "
                            f"{shown(got)}")
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
        problems.append(f"{case} ({plural(tiles, 'tile')}): expected {plural(waves, 'wave')} with {idle} idle "
                        f"programs in the last, got {plural(got_waves, 'wave')} with {got_idle} idle"
                        + (f" ({'; '.join(why)})" if why else ""))
    return problems


# ----------------------------------------------------------------------------- exercise 2
# (num_pid_m, num_pid_n, NUM_PROGRAMS, GROUP_SIZE_M): small grids with a short last group, more
# programs than tiles, groups of one row (= row-major), and an H100-sized launch
WALK_CASES = [(5, 7, 4, 2), (9, 9, 12, 3), (3, 2, 16, 8), (4, 6, 5, 1), (64, 64, 132, 8)]


@kc.reference
def persistent_tiles_ref(pid: int, num_pid_m: int, num_pid_n: int, num_programs: int, group_size_m: int):
    """The (pid_m, pid_n) program ``pid`` of a persistent launch computes, in order."""
    table = persistent_schedule(num_pid_m, num_pid_n, 1, 1, num_programs, "grouped", group_size_m)
    mine = table[table[:, 1] == pid]
    return [(int(m), int(n)) for m, n in mine[:, 4:6]]


def _as_tiles(value, case, expected_tiles: int):
    """The learner's tiles as (pid_m, pid_n) tuples, at most ``expected_tiles + 1`` of them read (an
    endless answer is never read to its end); a line saying what is wrong when they are not pairs."""
    try:
        return read_items(value, expected_tiles, inner=2).mapped(lambda pair: tuple(whole(v) for v in pair))
    except (TypeError, ValueError, OverflowError):
        return f"{case}: expected a list of (pid_m, pid_n) pairs of whole numbers, got {shown(value)}"


@kc.plain_exercise("persistent_tiles", forbid=lambda: _persistent_models(), hints=Hints(
    nudge="a persistent program does not compute one tile: which tile indices does program pid take, and in which "
          "order do tile indices become (pid_m, pid_n)?",
    approach="walk the tile indices from pid in steps of NUM_PROGRAMS while they are below the tile count, and map "
             "each one with the grouped order (the same mapping the kernel calls)",
    solution="return [tuple(int(v) for v in tiles.tile_coords_np(t, num_pid_m, num_pid_n, 'grouped', GROUP_SIZE_M)) "
             "for t in range(pid, num_pid_m * num_pid_n, NUM_PROGRAMS)]"))
def check_persistent_tiles(persistent_tiles):
    problems = _walk_problems(persistent_tiles, WALK_CASES)
    return problems or _walk_problems(persistent_tiles, unseen_cases(lambda rng: (
        rng.randint(1, 12), rng.randint(1, 12), rng.randint(1, 20), rng.randint(1, 8))))


def _walk_problems(persistent_tiles, cases) -> list[str]:
    problems = []
    for num_pid_m, num_pid_n, programs, group in cases:
        launched = min(programs, num_pid_m * num_pid_n)
        case = f"{num_pid_m}x{num_pid_n} tiles, {programs} programs, GROUP_SIZE_M={group}"
        wrong_programs = 0
        for pid in range(launched):
            expected = persistent_tiles_ref(pid, num_pid_m, num_pid_n, programs, group)
            got = _as_tiles(call(persistent_tiles, pid, num_pid_m, num_pid_n, programs, group), case, len(expected))
            if isinstance(got, str):
                return [got]
            if got == expected:
                continue
            wrong_programs += 1
            if wrong_programs > 2:
                continue
            if len(got) != len(expected):
                problems.append(f"{case}: program {pid}: expected {len(expected)} tiles, got {got.count_text()} "
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


@kc.reference
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


@kc.plain_exercise("tma_view", hints=Hints(
    nudge="TMA copies whole rows of memory: which stride must be 1, and what does it ask of the other stride and of "
          "the first address?",
    approach="decide the layout from which stride is 1 (row-major or column-major); then the other stride in bytes "
             "and the data pointer must both be multiples of 16; anything else cannot be described",
    solution="if x.stride(1) == 1: col_major, outer = False, x.stride(0) elif x.stride(0) == 1: col_major, outer = "
             "True, x.stride(1) else: return False; if (outer * x.element_size()) % 16 or x.data_ptr() % 16: return "
             "False; return col_major, outer"))
def check_tma_view(tma_view):
    problems = _tma_problems(tma_view, TMA_CASES)
    return problems or _tma_problems(tma_view, unseen_cases(_draw_tma_case))


def _draw_tma_case(rng) -> tuple:
    """(description, tensor maker) as TMA_CASES lists them: a contiguous fp16, bf16 or fp32 matrix of 3 to
    80 rows and columns, or a transpose, slice, strided view or padded copy of one."""
    dtype = rng.choice([torch.float16, torch.bfloat16, torch.float32])
    rows, cols = rng.randint(3, 80), rng.randint(3, 80)
    first = rng.randint(1, cols - 2)
    views = [("x", lambda x: x), ("x.t()", lambda x: x.t()), (f"x[:, {first}:]", lambda x: x[:, first:]),
             ("x[::2]", lambda x: x[::2]), ("x[:, ::2]", lambda x: x[:, ::2]), ("tma_aligned(x)", tma_aligned)]
    name, view = rng.choice(views)
    text = f"{name}, x a contiguous {rows}x{cols} {str(dtype).replace('torch.', '')} matrix"
    return text, lambda: view(torch.zeros(rows, cols, dtype=dtype, device=runtime.DEVICE))


def _tma_problems(tma_view, cases) -> list[str]:
    problems = []
    for text, make in cases:
        x = make()
        (expected, reason) = tma_view_ref(x)
        got = call(tma_view, x)
        if expected is None:
            if not _is_false(got):
                problems.append(f"{text} ({_describe(x)}): TMA cannot read it ({reason}), but you returned {shown(got)} "
                                "instead of False")
            continue
        if _is_false(got):
            problems.append(f"{text} ({_describe(x)}): TMA can read it, as {expected} (col_major, outer stride), "
                            "but you returned False")
            continue
        try:
            got_pair = (bool(got[0]), whole(got[1]))
        except (TypeError, ValueError, IndexError):
            problems.append(f"{text} ({_describe(x)}): expected {expected} (col_major, outer stride), got {shown(got)}")
            continue
        if got_pair != tuple(expected):
            col_major, outer = expected
            how = (f"column-major: a descriptor over the [{x.shape[1]}, {x.shape[0]}] array it is stored as"
                   if col_major else f"row-major: a descriptor over [{x.shape[0]}, {x.shape[1]}]")
            problems.append(f"{text} ({_describe(x)}): expected {expected} ({how}, outer stride {outer} elements), "
                            f"got {got_pair}")
    return problems


# ----------------------------------------------------------------------------- exercise 4: the persistent loop
#: the trace a persistent kernel records per tile it computes: (program, problem, pid_m, pid_n)
TRACE_FIELDS = ("program", "problem", "pid_m", "pid_n")


@triton.jit
def matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Compute and store C's tile (pid_m, pid_n) (every load and the store masked), and record
    (program, 0, pid_m, pid_n) in row ``tile`` of the int32 [tiles, 4] trace."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))
    record_tile(trace_ptr, tile, tl.program_id(0), 0, pid_m, pid_n)


#: the block sizes the check launches the learner's persistent kernel with
PERSISTENT_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}


def run_persistent(kernel, a: torch.Tensor, b: torch.Tensor, num_programs: int, group_size_m: int):
    """Launch ``kernel`` (the notebook's ``my_persistent_kernel`` signature) on ``min(num_programs,
    tiles)`` programs; returns ``(c, trace)``, trace an int32 [tiles, 4] CPU tensor (-1: not recorded)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    tiles = cdiv(M, PERSISTENT_BLOCKS["BLOCK_M"]) * cdiv(N, PERSISTENT_BLOCKS["BLOCK_N"])
    trace = torch.full((tiles, len(TRACE_FIELDS)), -1, dtype=torch.int32, device=a.device)
    programs = min(num_programs, tiles)
    kernel[(programs,)](a, b, c, trace, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), NUM_PROGRAMS=programs, GROUP_SIZE_M=group_size_m,
                        **PERSISTENT_BLOCKS)
    return c, trace.cpu()


#: (M, N, K, programs, GROUP_SIZE_M): ragged everywhere, more programs than tiles, one tile, a
#: short last group, groups of one row; the third and fourth give programs unequal shares (6 tiles
#: on 4 programs, 10 on 3), where a loop with no bound on the tile index runs past the last tile
PERSISTENT_CASES = [(40, 56, 24, 4, 2), (16, 16, 16, 4, 2), (33, 17, 40, 4, 2), (70, 20, 16, 3, 4), (50, 50, 8, 4, 1)]


def compare_schedule(trace: np.ndarray, expected: np.ndarray, case: str, problem_names: bool = False) -> list[str]:
    """Lines naming the tiles a traced run computed differently from the mirror's schedule
    (``expected``: rows of ``models.tiles`` SCHEDULE_FIELDS; ``trace``: rows of TRACE_FIELDS,
    indexed by tile; -1 where nothing was recorded)."""
    lines = []

    def tile_name(problem, m, n):
        return f"problem {problem} tile ({m}, {n})" if problem_names else f"tile ({m}, {n})"

    for row, (tile, program, step, problem, pm, pn) in enumerate(expected.tolist()):
        got = trace[row].tolist()
        if got == [program, problem, pm, pn]:
            continue
        if got[0] < 0:
            lines.append(f"{case}: tile index {tile} ({tile_name(problem, pm, pn)}) was never computed; "
                         f"program {program} should take it at step {step}")
        elif got[0] != program:
            lines.append(f"{case}: tile index {tile} was computed by program {got[0]}, expected program {program} "
                         f"(tile index {tile} = program + step * NUM_PROGRAMS)")
        else:
            lines.append(f"{case}: program {program}, step {step} (tile index {tile}) computed "
                         f"{tile_name(*got[1:])}, expected {tile_name(problem, pm, pn)}")
        if len(lines) >= 4:
            lines.append(f"{case}: ... (stopping after 4 wrong tiles)")
            break
    return lines


def _never_computed_diagnosis(trace: np.ndarray, expected: np.ndarray, M: int, N: int) -> list[str]:
    """The tiles never computed are exactly the last tile row or column: a tile count rounded down."""
    bm, bn = PERSISTENT_BLOCKS["BLOCK_M"], PERSISTENT_BLOCKS["BLOCK_N"]
    missing = {(int(r[4]), int(r[5])) for r, t in zip(expected.tolist(), trace.tolist()) if t[0] < 0}
    nm, nn = cdiv(M, bm), cdiv(N, bn)
    last_row = {(nm - 1, j) for j in range(nn)} if M % bm else set()
    last_col = {(i, nn - 1) for i in range(nm)} if N % bn else set()
    for edge, dim, which in ((last_row, "M", "row"), (last_col, "N", "column"),
                             (last_row | last_col, "M and N", "row and column")):
        if edge and missing == edge:
            return [f"the tiles never computed are the last (partial) tile {which}: {dim} // BLOCK counts whole "
                    "tiles only; the tile count is tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)"]
    return []


def _persistent_case(kernel, M, N, K, programs, group, seed) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.float16
    a = torch.randn(M, K, generator=gen).to(runtime.DEVICE, dtype)
    b = torch.randn(K, N, generator=gen).to(runtime.DEVICE, dtype)
    tiles = cdiv(M, PERSISTENT_BLOCKS["BLOCK_M"]) * cdiv(N, PERSISTENT_BLOCKS["BLOCK_N"])
    case = (f"M={M}, N={N}, K={K}, {tiles} tiles of 16x16, {min(programs, tiles)} programs, "
            f"GROUP_SIZE_M={group}")
    c, trace = call(run_persistent, kernel, a, b, programs, group, what=f"your kernel ({case})")
    expected = persistent_schedule(M, N, 16, 16, min(programs, tiles), "grouped", group)
    problems = compare_schedule(trace.numpy(), expected, case)
    if problems:
        problems += [f"diagnosis: {d}" for d in _never_computed_diagnosis(trace.numpy(), expected, M, N)]
    ref = matmul_ref(a, b, out_dtype=torch.float64)
    if not rel_err(c, ref) <= TOLERANCES[dtype]:
        problems += compare_arrays(ref.cpu(), c.double().cpu(), case, atol=1e-2, rtol=1e-2,
                                   index_names=("row", "col"))
    return problems


@kc.kernel_exercise("persistent_loop", kind="kernel", gpu_case=lambda k: _persistent_case(k, 40, 56, 24, 4, 2, 5),
                    forbid=(_matmul_persistent_kernel,), hands=(tile_grouped, matmul_tile), hints=Hints(
    nudge="a persistent program keeps taking tiles until none are left: which tile indices belong to program pid?",
    approach="from tl.program_id(0), step by NUM_PROGRAMS up to the number of tiles (cdiv(M, BLOCK_M) * "
             "cdiv(N, BLOCK_N)); map each tile index to (pid_m, pid_n) with the grouped order and hand it to "
             "matmul_tile",
    solution="pid = tl.program_id(0); num_pid_m = tl.cdiv(M, BLOCK_M); num_pid_n = tl.cdiv(N, BLOCK_N); "
             "for tile in range(pid, num_pid_m * num_pid_n, NUM_PROGRAMS): pid_m, pid_n = tile_grouped(tile, "
             "num_pid_m, num_pid_n, GROUP_SIZE_M); matmul_tile(a_ptr, b_ptr, c_ptr, trace_ptr, tile, pid_m, pid_n, "
             "M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K)"))
def check_persistent_loop(kernel):
    problems = []
    for n, (M, N, K, programs, group) in enumerate(PERSISTENT_CASES):
        problems += _persistent_case(kernel, M, N, K, programs, group, seed=5 + n)
        if problems:
            break
    return problems
