"""Checks for notebook 05b (Stream-K): the K iterations one program runs, cut at tile edges
(:func:`check_streamk_share`), the same walk as the segment loop of a real kernel
(:func:`check_streamk_loop`, with :func:`run_segment`, the one-segment helper it calls), and a
test of batch invariance: whether a row has the same bits in two batches (:func:`check_rows_match`,
on made-up matmuls with one known difference, then on ``torch.matmul`` and ``matmul_auto``).

The first two are compared with ``models.tiles.streamk_segments``, the numpy mirror the package's
``matmul_streamk`` is traced against.  The kernel of the second exercise runs checked, in the
interpreter, where programs run one after another in pid order; so :func:`run_segment` never
spins on a flag: a partial sum that is not there yet is left out (and the check says which
segments went wrong), where a GPU would wait for it forever.  So the learner's loop is compiled
for sm_90 (``_kernel_checks``) but never run on a GPU by the check: there a partial sum another
program has not finished would be left out for real."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import triton
import triton.language as tl

from ... import runtime
from ...kernels.matmul import matmul_ref
from ...kernels.tiles import record_tile, streamk_range
from ...models.tiles import cdiv, streamk_segments
from ...testing import TOLERANCES, rel_err
from . import _kernel_checks as kc
from ._core import Hints, call, compare_arrays, fmt, read_items, shown, unseen_cases


def _segments_text(segments) -> str:
    """[(tile, k_first, k_end), ...] as '(4, 0, 3), (5, 0, 8)': the triples the learner returns
    (k_end one past the last iteration), so an off-by-one shows as it was written."""
    if not segments:
        return "none"
    return ", ".join(f"({t}, {k0}, {k1})" for t, k0, k1 in segments)


@kc.reference
def share_ref(pid: int, num_tiles: int, k_tiles: int, num_programs: int, sk_tiles: int) -> list[tuple[int, int, int]]:
    """Program ``pid``'s Stream-K segments ``(tile, k_first, k_end)``, in the order it runs them
    (the mirror's rows for ``pid`` after the data-parallel tiles)."""
    table = streamk_segments(num_tiles, k_tiles, num_programs, sk_tiles)
    dp_tiles = num_tiles - sk_tiles
    mine = table[dp_tiles:][table[dp_tiles:, 0] == pid]
    return [(int(t), int(k0), int(k1)) for _, t, k0, k1 in mine]


# ----------------------------------------------------------------------------- exercise 1
#: (num_tiles, k_tiles, num_programs, sk_tiles): the notebook's picture, the two H100 cases of the
#: measurements (1024 x 1024 x 8192 and 4096^3 in 128 x 256 tiles), shares that cross a tile edge,
#: programs with empty shares (fewer iterations than programs), as many split tiles as programs
SHARE_CASES = [
    (6, 8, 4, 2),
    (32, 128, 132, 32),
    (512, 64, 132, 116),
    (5, 3, 4, 4),
    (3, 1, 4, 1),
    (7, 10, 3, 3),
    (2, 5, 8, 1),  # 5 iterations on 8 programs: empty shares in the middle of the order, not only at its end
]


def _as_segments(value, case, expected_segments: int):
    """The learner's segments as (tile, k_first, k_end) tuples, at most ``expected_segments + 1`` of
    them read (an endless answer is never read to its end); a line saying what is wrong when they
    are not triples."""
    try:
        segments = read_items(value, expected_segments, inner=3).mapped(lambda seg: tuple(int(v) for v in seg))
    except (TypeError, ValueError, OverflowError):
        return f"{case}: expected a list of (tile, k_first, k_end) triples, got {shown(value)}"
    if any(len(seg) != 3 for seg in segments):
        return f"{case}: expected a list of (tile, k_first, k_end) triples, got {shown(value)}"
    return segments


def _why_share(got, expected, pid, num_tiles, k_tiles, num_programs, sk_tiles) -> str:
    """A reason for a wrong share, when the mistake is a common one."""
    dp_tiles = num_tiles - sk_tiles
    if got == share_ref(num_programs - 1 - pid, num_tiles, k_tiles, num_programs, sk_tiles) and got:
        return (" (that is the share of program NUM_PROGRAMS - 1 - pid: the shares are handed out from the *last* "
                "program down, so the program holding a tile's first iterations, which finishes the tile, has a "
                "higher pid than the ones it waits for)")
    if dp_tiles and got == [(t - dp_tiles, k0, k1) for t, k0, k1 in expected]:
        return f" (the split tiles come after the {dp_tiles} data-parallel ones: tile numbers start at {dp_tiles})"
    if len(got) == len(expected) and got == [(t, k0, k1 - 1) for t, k0, k1 in expected]:
        return (" (each k_end is one short: k_end is one past the segment's last iteration, as in "
                "range(k_first, k_end), so a whole tile is (tile, 0, k_tiles))")
    if any(k1 > k_tiles or k0 < 0 or k1 <= k0 for _, k0, k1 in got):
        return f" (every segment lies inside one tile: 0 <= k_first < k_end <= k_tiles = {k_tiles})"
    total = sum(k1 - k0 for _, k0, k1 in expected)
    if sum(k1 - k0 for _, k0, k1 in got) != total:
        return f" (program {pid} runs {total} iterations: iterations share * total // NUM_PROGRAMS up to " \
               f"(share + 1) * total // NUM_PROGRAMS, with total = sk_tiles * k_tiles)"
    return ""


def _traces():
    from .. import traces

    return traces


@kc.plain_exercise("streamk_share", forbid=lambda: (streamk_segments, _traces().trace_streamk_segments), hints=Hints(
    nudge="number the split tiles' K iterations one after another (tile after tile); which stretch of those numbers "
          "belongs to program pid, and where do tile edges cut it?",
    approach="the stretch is an even split of sk_tiles * k_tiles iterations handed out from the last program down "
             "(share = num_programs - 1 - pid, from share * total // num_programs to (share + 1) * total // "
             "num_programs); walk it, cutting at multiples of k_tiles; tile numbers start after the "
             "num_tiles - sk_tiles data-parallel tiles",
    solution="total = sk_tiles * k_tiles; share = num_programs - 1 - pid; it, end = share * total // num_programs, "
             "(share + 1) * total // num_programs; segments = []; while it < end: t, k_first = divmod(it, k_tiles); "
             "k_end = min(k_tiles, k_first + end - it); segments.append((num_tiles - sk_tiles + t, k_first, k_end)); "
             "it += k_end - k_first; return segments"))
def check_streamk_share(streamk_share):
    problems = _share_problems(streamk_share, SHARE_CASES)
    return problems or _share_problems(streamk_share, unseen_cases(_draw_share_case))


def _draw_share_case(rng) -> tuple:
    """(num_tiles, k_tiles, num_programs, sk_tiles) as SHARE_CASES lists them: up to 40 tiles of up to 16
    K iterations on up to 20 programs, 1 to min(num_tiles, num_programs) of the tiles split."""
    num_tiles, k_tiles, num_programs = rng.randint(1, 40), rng.randint(1, 16), rng.randint(1, 20)
    return num_tiles, k_tiles, num_programs, rng.randint(1, min(num_tiles, num_programs))


def _share_problems(streamk_share, cases) -> list[str]:
    problems = []
    for num_tiles, k_tiles, num_programs, sk_tiles in cases:
        case = f"{num_tiles} tiles of {k_tiles} K iterations, {num_programs} programs, sk_tiles={sk_tiles}"
        wrong = 0
        for pid in range(num_programs):
            expected = share_ref(pid, num_tiles, k_tiles, num_programs, sk_tiles)
            got = _as_segments(call(streamk_share, pid, num_tiles, k_tiles, num_programs, sk_tiles), case,
                               len(expected))
            if isinstance(got, str):
                return [got]
            if got == expected:
                continue
            wrong += 1
            if wrong <= 2:
                why = _why_share(got, expected, pid, num_tiles, k_tiles, num_programs, sk_tiles)
                problems.append(f"{case}: program {pid}: expected {_segments_text(expected)}; "
                                f"got {_segments_text(got)}{got.unread_text()}{why}")
        if wrong > 2:
            problems.append(f"{case}: {wrong - 2} more programs with the wrong share")
        if problems:
            break
    return problems


# ----------------------------------------------------------------------------- exercise 2: the segment loop
@triton.jit
def _partial_slot(slot, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    return slot * (BLOCK_M * BLOCK_N) + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]


@triton.jit
def run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles,
                tile, k_first, k_end,
                NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Run K blocks ``[k_first, k_end)`` of ``tile`` (row-major tile order; A, B, C contiguous)
    for this program, and hand the result over as ``matmul_streamk`` does:

    * ``k_first > 0``: the tile's first iterations belong to another program; leave the fp32
      partial sum in this program's workspace slot and raise its flag;
    * ``k_first == 0``: add the partial sums of the programs holding the rest of the tile (lower
      pids, ``streamk_range``), then store the tile of C (masked).

    Records ``(program, tile, k_first, k_end)`` in the trace: row ``tile`` for a data-parallel
    tile, row ``dp_tiles + 2 * program + n`` for the program's ``n``-th Stream-K piece (0 or 1).
    ``flag_ptr`` holds ``2 * NUM_PROGRAMS`` int32: the flags, then each program's piece count."""
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    dp_tiles = num_tiles - sk_tiles
    # flag_ptr[NUM_PROGRAMS + pid] counts this program's Stream-K pieces: the n-th is recorded in
    # row dp_tiles + 2 * pid + n, so a program running more than its two pieces (a loop that never
    # moves on, say) writes past its rows and, at the end of the trace, is stopped by the checked run
    is_split = tile >= dp_tiles
    piece = tl.atomic_add(flag_ptr + NUM_PROGRAMS + pid, is_split.to(tl.int32))
    row = tl.where(is_split, dp_tiles + 2 * pid + piece, tile)
    record_tile(trace_ptr, row, pid, tile, k_first, k_end)

    rows = (tile // num_pid_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % num_pid_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(k_first, k_end):
        k = kb * BLOCK_K + ks
        a = tl.load(a_ptr + rows[:, None] * K + k[None, :], mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * N + cols[None, :], mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)

    if k_first > 0:
        tl.store(partial_ptr + _partial_slot(pid, BLOCK_M, BLOCK_N), acc)
        tl.atomic_xchg(flag_ptr + pid, 1)
    else:
        total_iters = sk_tiles * k_tiles
        t = tile - dp_tiles  # negative for a data-parallel tile, whose loop below does nothing
        done = t * k_tiles + k_end
        other = pid - 1
        while (done < (t + 1) * k_tiles) & (other >= 0):
            first, end = streamk_range(other, total_iters, NUM_PROGRAMS)
            if end > first:
                # a GPU spins here until the flag is up; the interpreter runs programs in turn, so a
                # flag that is not up now never will be: leave that partial out (C comes out wrong)
                if tl.atomic_cas(flag_ptr + other, 1, 0) == 1:
                    acc += tl.load(partial_ptr + _partial_slot(other, BLOCK_M, BLOCK_N))
            done = end
            other -= 1
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


#: the block sizes the check launches the learner's Stream-K kernel with
STREAMK_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}


def run_streamk(kernel, a: torch.Tensor, b: torch.Tensor, num_programs: int, sk_tiles: int):
    """Launch ``kernel`` (the notebook's ``my_streamk_kernel`` signature) on ``num_programs``
    programs; returns ``(c, trace, flags)``, trace an int32 CPU tensor of ``streamk_segments``'
    shape (-1: not recorded), flags each program's hand-over flag after the launch (0: consumed)."""
    M, K = a.shape
    N = b.shape[1]
    bm, bn = STREAMK_BLOCKS["BLOCK_M"], STREAMK_BLOCKS["BLOCK_N"]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    dp_tiles = cdiv(M, bm) * cdiv(N, bn) - sk_tiles
    trace = torch.full((dp_tiles + 2 * num_programs, 4), -1, dtype=torch.int32, device=a.device)
    partials = torch.zeros((num_programs, bm * bn), dtype=torch.float32, device=a.device)
    flags = torch.zeros(2 * num_programs, dtype=torch.int32, device=a.device)  # flags, then call counts
    kernel[(num_programs,)](a, b, c, partials, flags, trace, M, N, K, sk_tiles, NUM_PROGRAMS=num_programs,
                            **STREAMK_BLOCKS)
    return c, trace.cpu(), flags[:num_programs].cpu()


#: (M, N, K, programs, sk_tiles) in 16 x 16 x 16 blocks: shares crossing tile edges with a ragged
#: K, one split tile for more programs than its iterations (empty shares), nothing split, every
#: tile split, one data-parallel tile before the split ones, empty shares between busy ones
LOOP_CASES = [(40, 20, 72, 4, 2), (16, 16, 48, 4, 1), (33, 17, 40, 2, 0), (48, 16, 160, 5, 3), (32, 32, 128, 3, 3),
              (32, 16, 80, 8, 1)]


def compare_segments(trace: np.ndarray, expected: np.ndarray, num_programs: int, dp_tiles: int,
                     case: str) -> list[str]:
    """Lines naming the programs whose traced segments differ from the mirror's (both tables of
    ``streamk_segments``' layout: data-parallel rows first, then two rows per program)."""
    def pieces(table, p, split_only=False):
        rows = table[dp_tiles:] if split_only else table
        return [tuple(r[1:]) for r in rows.tolist() if r[0] == p]

    lines = [f"{case}: program {p} ran (tile, k_first, k_end) {_segments_text(pieces(trace, p))}; expected "
             f"{_segments_text(pieces(expected, p))}"
             for p in range(num_programs) if pieces(trace, p) != pieces(expected, p)]
    k_tiles = max((int(r[3]) for r in expected.tolist()), default=0)
    split_as_dp = [r for r in trace[:dp_tiles].tolist() if r[0] >= 0 and (r[2] > 0 or r[3] < k_tiles)]
    if lines and split_as_dp:  # a Stream-K segment recorded in a data-parallel tile's row: its tile number is low
        lines = [f"{case}: a Stream-K segment ran on tile {split_as_dp[0][1]} (K iterations {split_as_dp[0][2]} "
                 f"to {split_as_dp[0][3] - 1}), one of the {dp_tiles} data-parallel tiles: the split tiles come "
                 "after them, so the t-th split tile is tile dp_tiles + t (the programs' own records are mixed up "
                 "by it: a split piece took a data-parallel tile's row)"]
    reversed_shares = num_programs > 1 and all(
        pieces(trace, p, True) == pieces(expected, num_programs - 1 - p, True) for p in range(num_programs))
    if lines and reversed_shares:
        lines = lines[:3] + [f"{case}: each program ran the Stream-K share of program NUM_PROGRAMS - 1 - pid: "
                             "streamk_range(pid, ...) already hands the shares out from the last program down; "
                             "give it this program's own pid"]
    return lines[:4]


def _loop_diagnosis(log, failure) -> list[str]:
    """A store past the trace's rows: a program ran a third Stream-K segment (run_segment records a
    program's n-th piece in its own two rows)."""
    if getattr(failure, "pointer", None) != "trace_ptr":
        return []
    return ["a program ran more Stream-K segments than its share holds (a share of at most one tile's K "
            "iterations meets at most two tiles): the loop went on past the share's end (while it < end, "
            "not <=) or did not move it on by the iterations it ran"]


@kc.kernel_exercise("streamk_loop", kind="kernel", diagnose=_loop_diagnosis, hands=(streamk_range, run_segment),
                    hints=Hints(
    nudge="this is Exercise 1 inside the kernel: which iterations does streamk_range give this program, and where "
          "do tile edges cut them?",
    approach="get [it, end) from streamk_range(pid, sk_tiles * k_tiles, NUM_PROGRAMS); while it < end, find the "
             "tile t = it // k_tiles and the K range inside it (stop at the tile's end or at end), run it with "
             "run_segment on tile dp_tiles + t, and move it on by the iterations you ran",
    solution="it, end = streamk_range(pid, sk_tiles * k_tiles, NUM_PROGRAMS); while it < end: "
             "t = it // k_tiles; k_first = it - t * k_tiles; k_end = tl.minimum(k_tiles, k_first + (end - it)); "
             "run_segment(a_ptr, b_ptr, c_ptr, partial_ptr, flag_ptr, trace_ptr, M, N, K, sk_tiles, dp_tiles + t, "
             "k_first, k_end, NUM_PROGRAMS, BLOCK_M, BLOCK_N, BLOCK_K); it += k_end - k_first"))
def check_streamk_loop(kernel):
    problems = []
    gen = torch.Generator().manual_seed(14)
    dtype = torch.float16
    bm, bn, bk = (STREAMK_BLOCKS[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    for M, N, K, programs, sk_tiles in LOOP_CASES:
        a = torch.randn(M, K, generator=gen).to(runtime.DEVICE, dtype)
        b = torch.randn(K, N, generator=gen).to(runtime.DEVICE, dtype)
        num_tiles, k_tiles = cdiv(M, bm) * cdiv(N, bn), cdiv(K, bk)
        case = (f"M={M}, N={N}, K={K}: {num_tiles} tiles of {k_tiles} K iterations, {programs} programs, "
                f"sk_tiles={sk_tiles}")
        c, trace, flags = call(run_streamk, kernel, a, b, programs, sk_tiles, what=f"your kernel ({case})")
        expected = streamk_segments(num_tiles, k_tiles, programs, sk_tiles)
        problems += compare_segments(trace.numpy(), expected, programs, num_tiles - sk_tiles, case)
        raised = [p for p in range(programs) if int(flags[p]) != 0]
        if raised and not problems:  # the output may be right, but the next launch would read a stale flag
            problems.append(f"{case}: program {raised[0]} left its flag raised after the launch: it handed over a "
                            "partial sum that no program added (a segment with no iterations, k_first == k_end, or "
                            "one past its share); run_segment only for k_first < k_end")
        ref = matmul_ref(a, b, out_dtype=torch.float64)
        if not problems and not rel_err(c, ref) <= TOLERANCES[dtype]:
            problems += compare_arrays(ref.cpu(), c.double().cpu(), case, atol=1e-2, rtol=1e-2,
                                       index_names=("row", "col"))
        if problems:
            break
    return problems


# ----------------------------------------------------------------------------- exercise 3: a row's bits in two batches
_SAME_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s memory read as integers of its width: a NaN equals the same NaN, -0.0 differs from 0.0."""
    return t.view(_SAME_WIDTH[t.element_size()])


@kc.reference
def rows_match_ref(matmul, a: torch.Tensor, b: torch.Tensor, m1: int, m2: int) -> bool:
    """Whether the rows both batches share (``a[:min(m1, m2)]``) come out of ``matmul(a[:m1], b)``
    and ``matmul(a[:m2], b)`` with the same bits."""
    rows = min(m1, m2)
    return torch.equal(_bits(matmul(a[:m1], b)[:rows]), _bits(matmul(a[:m2], b)[:rows]))


class _Batches:
    """A case's matmul: each batch computed once (the same rows again get the same output, so the
    check and the learner see one result per batch), and the row counts it was called with.  It
    runs in a thread of its own: the check's patches (checked launches, NaN-poisoned ``torch.empty``,
    the watchdog) hold in the checking thread only, and the package's kernels are no learner's code
    to check (a checked run would interpret them on the CPU, on a GPU too)."""

    def __init__(self, fn):
        self.fn, self.done, self.rows_called = fn, [], []

    def __call__(self, x, w):
        self.rows_called.append(int(x.shape[0]))
        for known, out in self.done:
            if known.shape == x.shape and torch.equal(known, x):
                return out.clone()
        with ThreadPoolExecutor(max_workers=1) as plain:
            out = plain.submit(_quietly, self.fn, x, w).result()
        self.done.append((x.clone(), out))
        return out.clone()


def _quietly(fn, *args):
    """``fn(*args)`` in a fresh thread, its tensors' CUDA device current there first (a TMA kernel's
    descriptor is made through the driver, which needs a context current in the thread: "invalid
    device context" otherwise; cuBLAS makes one current itself, with a note we silence)."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
    if device is not None:
        torch.cuda.set_device(device)  # CUDA 12: makes the device's primary context current in this thread
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Attempting to run cuBLAS, but there was no current CUDA context")
        return fn(*args)


def _exact(x, w):
    """The product of integer-valued inputs: exact in any order of the sums, so every batch has the same bits."""
    return (x.double() @ w.double()).to(x.dtype)


def _changed(rows: int, row: int, col: int, change):
    """``_exact``, with ``change(out, row, col)`` applied to the batch of ``rows`` rows only."""
    def matmul(x, w):
        out = _exact(x, w)
        if x.shape[0] == rows:
            change(out, row, col)
        return out
    return matmul


def _one_ulp_up(out, row, col):
    _bits(out)[row, col] += 1


def _plus_one(out, row, col):
    out[row, col] += 1


def _nan(out, row, col):
    out[row, col] = float("nan")


def _both(rows_a: int, rows_b: int, change):
    """``_exact`` with ``change`` applied alike to the batches of ``rows_a`` and ``rows_b`` rows."""
    def matmul(x, w):
        out = _exact(x, w)
        if x.shape[0] in (rows_a, rows_b):
            change(out, 1, 3)
        return out
    return matmul


def _signed_zero(rows_negative: int):
    """Element (0, 2) is 0.0, and -0.0 in the batch of ``rows_negative`` rows."""
    def matmul(x, w):
        out = _exact(x, w)
        out[0, 2] = -0.0 if x.shape[0] == rows_negative else 0.0
        return out
    return matmul


def _rows_cases():
    """(what, matmul, a, b, m1, m2): made-up matmuls with one known change (integer inputs, so
    nothing else differs), then cuBLAS or torch and ``matmul_auto`` by default and batch-invariant."""
    from ...kernels.dispatch import matmul_auto

    gen = torch.Generator().manual_seed(49)

    def ints(m, k, dtype):
        return torch.randint(-3, 4, (m, k), generator=gen).to(runtime.DEVICE, dtype)

    f16, f32 = torch.float16, torch.float32
    made_up = [
        ("the same bits in every batch", _exact, f32, 40, 3, 40),
        ("row 0 one bit higher in the batch of 40 rows", _changed(40, 0, 1, _one_ulp_up), f32, 40, 3, 40),
        ("row 4 changed by 1 in the batch of 5 rows", _changed(5, 4, 2, _plus_one), f16, 24, 5, 24),
        ("row 10 changed in the batch of 16 rows (the batch of 6 has no row 10)", _changed(16, 10, 0, _plus_one),
         f32, 16, 16, 6),
        ("NaN at row 1, column 3 in both batches", _both(2, 9, _nan), f16, 9, 2, 9),
        ("0.0 at row 0, column 2, -0.0 in the batch of 12 rows", _signed_zero(12), f32, 12, 4, 12),
    ]
    cases = [(what, fn, ints(m, 16, dtype), ints(16, 7, dtype), m1, m2) for what, fn, dtype, m, m1, m2 in made_up]
    few, m, n, k, dtype = (8, 4096, 4096, 4096, f16) if runtime.on_gpu() else (5, 300, 32, 512, f32)
    a = torch.randn(m, k, generator=gen).to(runtime.DEVICE, dtype)
    b = torch.randn(k, n, generator=gen).to(runtime.DEVICE, dtype)
    with torch.no_grad():
        cases += [("torch.matmul", torch.matmul, a, b, few, m),
                  ("matmul_auto by default", matmul_auto, a, b, few, m),
                  ("matmul_auto(..., batch_invariant=True)",
                   lambda x, w: matmul_auto(x, w, batch_invariant=True), a, b, m, few)]
    return cases


def _as_bool(value):
    """The learner's verdict as a bool (a Python or numpy bool, or a one-element bool tensor), else None."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.numel() == 1:
        return bool(value.item())
    return None


def _first_difference(first, second):
    """(row, col) of the first element whose bits differ, or None."""
    found = (_bits(first) != _bits(second)).nonzero()
    return None if found.numel() == 0 else tuple(int(i) for i in found[0])


def _why_rows(got: bool, matmul: _Batches, a, b, m1: int, m2: int) -> str:
    """A reason for a wrong verdict, when the mistake is a common one."""
    called = sorted(set(matmul.rows_called))
    if not called:
        return f" (your function never called matmul: multiply the batches a[:m1] and a[:m2], here {m1} and {m2} rows)"
    if m1 not in called or m2 not in called:
        return (f" (your function multiplied batches of {', '.join(map(str, called))} rows: the question is "
                f"about the batches a[:m1] and a[:m2], here {m1} and {m2} rows)")
    rows = min(m1, m2)
    first, second = matmul(a[:m1], b), matmul(a[:m2], b)
    where = _first_difference(first[:rows], second[:rows])
    if got and where is not None:
        r, c = where
        x, y = first[r, c].item(), second[r, c].item()
        if x == y:
            return (f" (row {r}, column {c}: {fmt(x)} against {fmt(y)} are equal as values, but their sign bits differ: "
                    "compare the bits, not the values)")
        if r > 0 and _first_difference(first[:1], second[:1]) is None:
            return (f" (row {r} differs, column {c}: {fmt(x)} against {fmt(y)}; compare every row the two batches share, "
                    f"the first min(m1, m2) = {rows}, not row 0 alone)")
        if abs(x - y) <= 1e-3 * max(abs(x), abs(y)):
            return (f" (row {r}, column {c}: {fmt(x)} against {fmt(y)} differ in the last bit: a tolerance (allclose, "
                    "isclose) calls them the same; bit-identical means the same bits)")
        return f" (row {r}, column {c}: {fmt(x)} against {fmt(y)})"
    if not got and where is None:
        shared = first[:rows]
        if shared.is_floating_point() and bool(torch.isnan(shared).any()):
            r, c = (int(i) for i in torch.isnan(shared).nonzero()[0])
            return (f" (row {r}, column {c} is NaN in both, with the same bits: NaN != NaN as a value, so compare "
                    "the bits: view both as integers of the same width, torch.int16 for fp16, torch.int32 for fp32)")
        if first.shape[0] != second.shape[0]:
            return (f" (only the first min(m1, m2) = {rows} rows are in both batches: the batch of "
                    f"{max(m1, m2)} rows has more, and they are not part of the question)")
    return ""


@kc.plain_exercise("rows_match", hints=Hints(
    nudge="which rows are in both batches, and what does 'the same bits' ask that 'the same values' does not "
          "(think of NaN, of -0.0, of one bit in the last place)?",
    approach="multiply a[:m1] and a[:m2], keep the first min(m1, m2) rows of each, and compare their memory as "
             "integers of the same width (tensor.view(torch.int16) for fp16, torch.int32 for fp32), every element",
    solution="rows = min(m1, m2); first = matmul(a[:m1], b)[:rows]; second = matmul(a[:m2], b)[:rows]; "
             "as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[first.element_size()]; "
             "return torch.equal(first.view(as_int), second.view(as_int))"))
def check_rows_match(rows_match):
    problems = []
    for what, fn, a, b, m1, m2 in _rows_cases():
        matmul = _Batches(fn)
        expected = rows_match_ref(matmul, a, b, m1, m2)
        matmul.rows_called.clear()
        value = call(rows_match, matmul, a, b, m1, m2, what=f"rows_match(<{what}>, a, b, {m1}, {m2})")
        got = _as_bool(value)
        if got is None:
            return [f"{what}, m1={m1}, m2={m2}: expected True or False, got {shown(value)}"]
        if got != expected:
            problems.append(f"{what}, m1={m1}, m2={m2}: expected {expected}, got {got}"
                            + _why_rows(got, matmul, a, b, m1, m2))
    return problems
