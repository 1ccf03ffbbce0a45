"""How many A and B block loads of a schedule hit in L2, and how many go to DRAM.

The model: a program computing C tile ``(pid_m, pid_n)`` walks K in ``cdiv(K, BLOCK_K)`` steps,
loading block ``k`` of A's row-block and of B's column-block at step ``k``.  The programs of one
wave (:mod:`gemm_kernels.models.schedule`) start together and step in lockstep; L2 is one LRU
cache of ``l2_bytes``; a load misses (goes to DRAM) when its block is not in L2.  So:

* loads of one block by several programs of a wave are one DRAM fetch: the seed notes' 9x9-block
  example fetches **90** blocks in row-major order and **54** in grouped order (3x3 tiles);
* a block from an earlier wave hits iff the bytes touched since its last use fit in ``l2_bytes``
  (``(1 - k/k_blocks) * a + (k/k_blocks) * b``, with ``a``, ``b`` the blocks of the waves between),
  so more cache never means more misses.

Where it is optimistic: real waves drift and blur; a real L2 is set-associative, hashed, and holds
C and everything else too; an H100's 50 MiB L2 is two partitions, and NVIDIA does not document
whether a line read from both sides is held once in each (a hypothesis the model can test:
:func:`effective_l2_bytes` with ``duplicated=True`` halves the capacity, ``False`` keeps all of
it); bytes are counted, not 128-byte lines.  ``programs_in_flight`` is SMs x programs per SM
(:data:`H100_PROGRAMS_IN_FLIGHT` for notebook 03's kernel).  Notebook 03 checks the model against
Nsight Compute's counters: treat its numbers as a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ._ints import check_int
from .schedule import Schedule
from .tiles import cdiv

#: L2 of an H100 SXM (``cudaDeviceProp.l2CacheSize`` = 50 MiB).
H100_L2_BYTES = 50 * 2**20
#: Streaming multiprocessors of an H100 SXM.
H100_NUM_SMS = 132
#: Programs of ``_matmul_kernel`` with 128x128x64 fp16 blocks and 3 stages resident at once on an
#: H100: 96 KiB of shared memory each, two per SM (the compiled kernel's occupancy, the same number
#: ``python -m gemm_kernels.bench.l2`` derives from registers and shared memory for its ncu table).
H100_PROGRAMS_IN_FLIGHT = 2 * H100_NUM_SMS
#: The share of the L2 that holds distinct data when every line is held in both partitions.
PARTITION_DUPLICATED_FRACTION = 0.5


def effective_l2_bytes(l2_bytes: float = H100_L2_BYTES, *, duplicated: bool = False) -> float:
    """The capacity the model should assume for A and B.

    ``duplicated=False``: all of ``l2_bytes`` (one cache, the model's optimistic default).
    ``duplicated=True``: :data:`PARTITION_DUPLICATED_FRACTION` of it, for a partitioned L2 (the
    H100's two halves) where every block is read by SMs of both halves and so held twice."""
    if not 0 <= l2_bytes < float("inf"):
        raise ValueError(f"l2_bytes must be finite and >= 0, got {l2_bytes}")
    return l2_bytes * (PARTITION_DUPLICATED_FRACTION if duplicated else 1.0)

_A, _B = 0, 1
# cap on the (accesses x row/column-blocks) boolean matrices built per chunk
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True, eq=False)
class ReuseProfile:
    """Everything about a schedule's A/B reuse that does not depend on the L2 size.

    Build it once with :func:`reuse_profile`, then ask :meth:`traffic` for any number of
    cache sizes (the widgets do this on every slider move).  One entry per
    (wave, row/column-block) pair: the wave touches that A row-block or B column-block.
    """

    schedule: Schedule
    block_k: int
    element_bytes: int
    wave: np.ndarray         # wave of the access
    operand: np.ndarray      # 0 = A row-block, 1 = B column-block
    problem: np.ndarray      # problem the block belongs to
    index: np.ndarray        # pid_m of the A row-block / pid_n of the B column-block
    requests: np.ndarray     # block loads issued: programs of the wave using it x k_blocks
    k_blocks: np.ndarray     # K steps of the problem it belongs to
    panel_bytes: np.ndarray  # bytes of the whole row/column-block (all of K)
    first_use: np.ndarray    # True: never touched before (every K block misses)
    bytes_from_prev_start: np.ndarray  # ``a``: bytes used in waves w'..w-1
    bytes_to_this_end: np.ndarray      # ``b``: bytes used in waves w'+1..w
    c_writes: np.ndarray     # per wave: C tiles written

    @property
    def num_waves(self) -> int:
        return self.schedule.num_waves

    def hits(self, l2_bytes: float | None) -> np.ndarray:
        """K blocks of each access that hit in an LRU L2 of ``l2_bytes`` (``None``: unlimited).

        This counts the *first* load of each block in its wave; the other programs of the
        wave that load the same block always hit (see the module docstring)."""
        K = self.k_blocks
        if l2_bytes is None:
            return np.where(self.first_use, 0, K)
        if isinstance(l2_bytes, bool) or not isinstance(l2_bytes, (int, float, np.integer, np.floating)):
            raise TypeError(f"l2_bytes must be a number of bytes (or None: unlimited), got {type(l2_bytes).__name__}")
        if not 0 <= l2_bytes < float("inf"):
            raise ValueError(f"l2_bytes must be finite and >= 0 (None: unlimited), got {l2_bytes}")
        a, b = self.bytes_from_prev_start, self.bytes_to_this_end
        # more than the most bytes between two uses of a block is as good as unlimited; capping there
        # keeps C * K in int64 for any capacity (10**30 bytes overflowed)
        most = int(max(a.max(), b.max())) if a.size else 0
        C = min(int(l2_bytes), most)
        # block k hits iff (K - k) * a + k * b <= C * K, a straight line in k
        rhs = C * K - K * a
        diff = b - a
        hits = np.where(rhs >= 0, K, 0)  # diff == 0: all or nothing
        up = diff > 0
        kmax = np.floor_divide(rhs, np.where(up, diff, 1))
        hits = np.where(up, np.clip(kmax + 1, 0, K), hits)
        down = diff < 0
        kmin = -np.floor_divide(rhs, np.where(down, -diff, 1))  # ceil((K*a - C*K) / (a - b))
        hits = np.where(down, np.clip(K - np.maximum(kmin, 0), 0, K), hits)
        return np.where(self.first_use, 0, hits)

    def traffic(self, l2_bytes: float | None) -> L2Traffic:
        """Per-wave loads, hits and misses of A and B for an L2 of ``l2_bytes`` (``None``: unlimited)."""
        misses = self.k_blocks - self.hits(l2_bytes)
        W = self.num_waves

        def per_wave(values, operand):
            sel = self.operand == operand
            return np.bincount(self.wave[sel], weights=values[sel], minlength=W).round().astype(np.int64)

        dram = misses * self.panel_bytes / self.k_blocks
        return L2Traffic(
            profile=self, l2_bytes=l2_bytes,
            a_loads=per_wave(self.requests, _A), b_loads=per_wave(self.requests, _B),
            a_misses=per_wave(misses, _A), b_misses=per_wave(misses, _B),
            c_writes=self.c_writes,
            dram_read_bytes=np.bincount(self.wave, weights=dram, minlength=W),
        )


@dataclass(frozen=True, eq=False)
class L2Traffic:
    """Block loads of one schedule under one L2 size, per wave (arrays of length ``num_waves``).

    ``*_loads``: blocks the programs ask for; ``*_misses``: of those, fetched from DRAM;
    ``*_hits = loads - misses``; ``c_writes``: C blocks written; ``dram_read_bytes``:
    bytes of A and B read from DRAM.  :meth:`totals` and :meth:`upto` sum them up.
    """

    profile: ReuseProfile
    l2_bytes: float | None
    a_loads: np.ndarray
    b_loads: np.ndarray
    a_misses: np.ndarray
    b_misses: np.ndarray
    c_writes: np.ndarray
    dram_read_bytes: np.ndarray

    @property
    def a_hits(self) -> np.ndarray:
        return self.a_loads - self.a_misses

    @property
    def b_hits(self) -> np.ndarray:
        return self.b_loads - self.b_misses

    @property
    def loads(self) -> np.ndarray:
        return self.a_loads + self.b_loads

    @property
    def misses(self) -> np.ndarray:
        return self.a_misses + self.b_misses

    @property
    def hits(self) -> np.ndarray:
        return self.loads - self.misses

    @property
    def num_waves(self) -> int:
        return len(self.a_loads)

    def upto(self, wave: int) -> dict:
        """Totals over waves ``0..wave`` (inclusive): loads, hits, misses (A, B, both), C writes, DRAM bytes."""
        check_int(wave, "wave", minimum=0)
        if wave >= self.num_waves:
            raise ValueError(f"wave must be in [0, {self.num_waves}) (this schedule has {self.num_waves} waves), "
                             f"got {wave}")
        return self._sums(wave + 1)

    def _sums(self, end: int) -> dict:
        out = {name: int(getattr(self, name)[:end].sum()) for name in (
            "a_loads", "b_loads", "a_misses", "b_misses", "a_hits", "b_hits", "loads", "hits", "misses", "c_writes")}
        out["dram_read_bytes"] = float(self.dram_read_bytes[:end].sum())
        return out

    def totals(self) -> dict:
        """:meth:`upto` the last wave, plus the two bounds: ``compulsory_misses`` (each block
        fetched once: an infinite L2) and ``no_reuse_misses`` (every load from DRAM)."""
        out = self._sums(self.num_waves)
        p = self.profile
        out["compulsory_misses"] = int(p.k_blocks[p.first_use].sum())
        out["no_reuse_misses"] = out["loads"]
        return out

    @cached_property
    def hit_rate(self) -> float:
        t = self.totals()
        return t["hits"] / t["loads"] if t["loads"] else 0.0

    def summary(self) -> str:
        """A few readable lines for notebooks."""
        t = self.totals()
        s = self.profile.schedule
        cap = "unlimited L2" if self.l2_bytes is None else f"L2 {self.l2_bytes / 2**20:.1f} MiB"
        return "\n".join([
            s.describe() + f", BLOCK_K={self.profile.block_k}, {cap}",
            f"block loads {t['loads']:,}: hits {t['hits']:,} ({self.hit_rate:.1%}), misses {t['misses']:,} "
            f"(A {t['a_misses']:,}, B {t['b_misses']:,}); C blocks written {t['c_writes']:,}",
            f"DRAM reads {t['dram_read_bytes'] / 2**20:,.1f} MiB; bounds: compulsory {t['compulsory_misses']:,} "
            f"misses, no reuse {t['no_reuse_misses']:,}",
        ])


def _problem_ks(schedule: Schedule, K: int | None) -> list[int]:
    ks = []
    for g, (M, N, Kg) in enumerate(schedule.problem_shapes):
        if Kg is None:
            if K is None:
                raise ValueError(f"problem {g} ({M}x{N}) has no K: pass K= or give (M, N, K) shapes")
            Kg = K
        ks.append(check_int(Kg, f"problem {g}: K (>= 1 to load anything)"))
    return ks


def reuse_profile(schedule: Schedule, block_k: int, K: int | None = None, element_bytes: int = 2) -> ReuseProfile:
    """Work out, for every wave and every A row-block / B column-block it reads, how far back
    (in bytes of other data) its previous use was.  See the module docstring for the model.

    ``K``: the inner dimension for problems whose shape in ``schedule.problem_shapes`` has
    none.  ``element_bytes``: 2 for fp16/bf16, 4 for fp32.  Cost: about
    (waves x touched blocks) numpy work; milliseconds for 64x64 tiles.
    """
    block_k = check_int(block_k, "block_k")
    element_bytes = check_int(element_bytes, "element_bytes")
    s = schedule
    ks = _problem_ks(s, K)

    # Number every A row-block and B column-block of every problem: A blocks of problem g
    # are a_base[g] + pid_m, B blocks b_base[g] + pid_n.
    grids = [s.tile_grid(g) for g in range(s.num_problems)]
    rows = np.array([g[0] for g in grids], dtype=np.int64)
    cols = np.array([g[1] for g in grids], dtype=np.int64)
    a_base = np.concatenate([[0], np.cumsum(rows)])[:-1]
    b_base = rows.sum() + np.concatenate([[0], np.cumsum(cols)])[:-1]
    num_blocks = int(rows.sum() + cols.sum())

    panel_bytes = np.empty(num_blocks, dtype=np.int64)
    panel_k = np.empty(num_blocks, dtype=np.int64)
    for g, (M, N, _) in enumerate(s.problem_shapes):
        m_rows = np.minimum(s.block_m, M - s.block_m * np.arange(rows[g]))  # ragged last row-block
        n_cols = np.minimum(s.block_n, N - s.block_n * np.arange(cols[g]))
        panel_bytes[a_base[g]:a_base[g] + rows[g]] = m_rows * ks[g] * element_bytes
        panel_bytes[b_base[g]:b_base[g] + cols[g]] = n_cols * ks[g] * element_bytes
        panel_k[a_base[g]:a_base[g] + rows[g]] = cdiv(ks[g], block_k)
        panel_k[b_base[g]:b_base[g] + cols[g]] = cdiv(ks[g], block_k)

    problem = s.problem
    a_ids = a_base[problem] + s.pid_m
    b_ids = b_base[problem] + s.pid_n
    waves = np.concatenate([s.wave, s.wave])
    ids = np.concatenate([a_ids, b_ids])
    # one access per distinct (wave, block); `count` = programs of the wave that read it
    keys, count = np.unique(waves * num_blocks + ids, return_counts=True)
    acc_wave, acc_id = keys // num_blocks, keys % num_blocks

    # previous wave that read the same block (-1: first use)
    by_block = np.lexsort((acc_wave, acc_id))
    prev = np.full(len(keys), -1, dtype=np.int64)
    same = acc_id[by_block][1:] == acc_id[by_block][:-1]
    prev[by_block[1:][same]] = acc_wave[by_block][:-1][same]

    operand = np.where(acc_id < rows.sum(), _A, _B)
    acc_problem = np.where(operand == _A, np.searchsorted(a_base, acc_id, side="right"),
                           np.searchsorted(b_base, acc_id, side="right")) - 1
    acc_index = acc_id - np.where(operand == _A, a_base[acc_problem], b_base[acc_problem])
    a_span, b_span = _reuse_spans(acc_wave, acc_id, prev, panel_bytes, s.num_waves)
    k_blocks = panel_k[acc_id]
    return ReuseProfile(
        schedule=s, block_k=int(block_k), element_bytes=element_bytes,
        wave=acc_wave, operand=operand, problem=acc_problem, index=acc_index,
        requests=count * k_blocks, k_blocks=k_blocks, panel_bytes=panel_bytes[acc_id],
        first_use=prev < 0, bytes_from_prev_start=a_span, bytes_to_this_end=b_span,
        c_writes=np.bincount(s.wave, minlength=s.num_waves).astype(np.int64),
    )


def _reuse_spans(acc_wave, acc_id, prev, panel_bytes, num_waves):
    """For each access (wave w, block X, previous wave w'), the bytes of every block read in
    waves ``w'..w-1`` (``a``) and in waves ``w'+1..w`` (``b``).

    ``last[w, Y]`` = the latest wave ``<= w`` that read block ``Y``; then
    ``a = sum(bytes[Y] for last[w-1, Y] >= w')`` and ``b = sum(bytes[Y] for last[w, Y] > w')``.
    ``last`` is built a chunk of waves at a time to bound memory."""
    num_blocks = len(panel_bytes)
    a = np.zeros(len(acc_wave), dtype=np.int64)
    b = np.zeros(len(acc_wave), dtype=np.int64)
    weights = panel_bytes.astype(np.float64)  # exact: sums stay far below 2**53
    wave_start = np.searchsorted(acc_wave, np.arange(num_waves + 1))
    last = np.full(num_blocks, -1, dtype=np.int32)  # last[w0 - 1]
    per_chunk = max(1, _CHUNK_ELEMENTS // max(num_blocks, 1))
    w0 = 0
    while w0 < num_waves:
        # waves w0..w1-1, whole waves, about per_chunk accesses
        w1 = int(np.searchsorted(wave_start, wave_start[w0] + per_chunk, side="right")) - 1
        w1 = min(max(w1, w0 + 1), num_waves)
        lo, hi = wave_start[w0], wave_start[w1]
        stamp = np.full((w1 - w0 + 1, num_blocks), -1, dtype=np.int32)
        stamp[0] = last
        stamp[acc_wave[lo:hi] - w0 + 1, acc_id[lo:hi]] = acc_wave[lo:hi]
        stamp = np.maximum.accumulate(stamp, axis=0)  # row r = last[w0 - 1 + r]
        reused = np.nonzero(prev[lo:hi] >= 0)[0] + lo
        if len(reused):
            row = acc_wave[reused] - w0
            p = prev[reused][:, None].astype(np.int32)
            a[reused] = np.rint((stamp[row] >= p) @ weights).astype(np.int64)
            b[reused] = np.rint((stamp[row + 1] > p) @ weights).astype(np.int64)
        last = stamp[-1]
        w0 = w1
    return a, b


def l2_traffic(schedule: Schedule, block_k: int, K: int | None = None, l2_bytes: float | None = None,
               element_bytes: int = 2, effective_fraction: float = 1.0) -> L2Traffic:
    """A and B block loads, L2 hits and DRAM misses per wave of ``schedule``.

    Parameters
    ----------
    schedule : from :func:`schedule.tile_schedule` or :func:`schedule.grouped_gemm_schedule`.
    block_k : BLOCK_K of the kernel's K loop (blocks are ``BLOCK_M x BLOCK_K`` of A and
        ``BLOCK_K x BLOCK_N`` of B).
    K : inner dimension, for problems whose shape carries none.
    l2_bytes : LRU capacity in bytes; ``None`` = unlimited (only first uses miss).
        :data:`H100_L2_BYTES` for an H100.  To think in blocks, pass
        ``n_blocks * BLOCK_M * BLOCK_K * element_bytes``.
    element_bytes : bytes per element of A and B (2 for fp16/bf16).
    effective_fraction : the share of ``l2_bytes`` that holds distinct A and B data, in (0, 1]:
        1 (default) for one ideal cache, :data:`PARTITION_DUPLICATED_FRACTION` (0.5) for an H100
        whose two partitions each hold a copy (see :func:`effective_l2_bytes`).

    Example (the seed notes' 9x9 blocks, 9 programs in flight, K loop of 9 blocks)::

        s = tile_schedule(9 * 64, 9 * 64, 64, 64, "row_major", programs_in_flight=9)
        l2_traffic(s, block_k=64, K=9 * 64).upto(0)["misses"]   # 90 (grouped, GROUP_SIZE_M=3: 54)
    """
    if isinstance(effective_fraction, bool) or not isinstance(effective_fraction, (int, float, np.integer, np.floating)):
        raise TypeError(f"effective_fraction must be a number in (0, 1], got {type(effective_fraction).__name__}")
    if not 0 < effective_fraction <= 1:
        raise ValueError(f"effective_fraction must be in (0, 1], got {effective_fraction}")
    if l2_bytes is None or effective_fraction == 1:
        capacity = l2_bytes  # checked (type, range) by ReuseProfile.hits
    elif isinstance(l2_bytes, bool) or not isinstance(l2_bytes, (int, float, np.integer, np.floating)):
        raise TypeError(f"l2_bytes must be a number of bytes (or None: unlimited), got {type(l2_bytes).__name__}")
    else:
        capacity = l2_bytes * effective_fraction
    return reuse_profile(schedule, block_k, K, element_bytes).traffic(capacity)


def l2_to_sm_bytes(M: int, N: int, K: int, tile_m: int, tile_n: int, *, cluster_m: int = 1,
                   element_bytes: int = 2) -> int:
    """Bytes L2 reads for the SMs when each program loads its C tile's whole A row-block and B
    column-block (full boxes): every tile reads ``K x tile_m`` of A; every cluster of ``cluster_m``
    tiles stacked along M (the last one may hold fewer) reads ``K x tile_n`` of B once and
    multicasts it to all of them (notebook 08).  Every SM still *receives* its whole B block; the
    multicast saves L2 reads, not deliveries."""
    for name, v in dict(M=M, N=N, K=K, tile_m=tile_m, tile_n=tile_n, cluster_m=cluster_m,
                        element_bytes=element_bytes).items():
        check_int(v, name, minimum=0 if name in ("M", "N", "K") else 1)
    tiles_m, tiles_n = cdiv(M, tile_m), cdiv(N, tile_n)
    return tiles_n * K * (tiles_m * tile_m + cdiv(tiles_m, cluster_m) * tile_n) * element_bytes
