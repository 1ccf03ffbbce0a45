"""A grouped GEMM that is wrong on purpose, and the tools to watch it fail safely (notebook 06).

**Do not use this kernel for real work: use** :func:`gemm_kernels.grouped_matmul`.

``pointer_array_matmul`` follows the design of Triton's tutorial 08 (Group GEMM): the host packs
per-problem arrays of data pointers (int64), sizes ``(M, N, K)`` and row strides (int32); a fixed
number of programs walks the tiles of all problems laid end to end, program ``p`` taking global
tiles ``p, p + NUM_PROGRAMS, ...`` (``tiles.multi_problem_schedule(order="row_major")`` is the
mirror; ``trace=True`` records the real walk).

By default it keeps the tutorial's "assume full tiles": **no load or store is masked**, right
only when every M, N and K is a multiple of the blocks.  On a GPU a ragged tile's stray accesses
land in whatever memory follows; here they are made visible safely: :func:`sentinel_group` puts
every matrix in the corner of a buffer padded by at least one block (NaN around A and B, so a
stray read poisons its sums; :data:`C_SENTINEL` around C, so a stray write shows), and
:func:`damage_report` says which elements of C are wrong and which around it were overwritten.
``contiguous=True`` keeps the matrices contiguous (stray stores then land in C's next row);
:meth:`SentinelGroup.lend_outputs` lends the C views to ``grouped_matmul``.

``masks=fn`` takes a ``@triton.jit`` ``fn(rows, cols, ks, M, N, K) -> (a_mask, b_mask, c_mask)``
over the absolute indices of the blocks (broadcasting to ``[BLOCK_M, BLOCK_K]``,
``[BLOCK_K, BLOCK_N]``, ``[BLOCK_M, BLOCK_N]``): notebook 06's exercise writes it;
:func:`record_masks` evaluates one on its own, for checks.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from .. import runtime
from ..kernels import checks
from ..kernels.epilogue import mma_operand, widen_for_dot
from ..kernels.grouped import TL_DTYPES
from ..kernels.tiles import tile_row_major

#: block sizes of the teaching kernel, everywhere (speed is not its point)
BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
#: what fills C's buffer around C: a stray store shows as a changed sentinel
C_SENTINEL = 4444.0
#: what fills A's and B's buffers around A and B: a stray load pulls NaN into the sums
AB_SENTINEL = math.nan
#: columns of the ``trace=True`` result, one row per global tile
TRACE_FIELDS = ("program", "problem", "pid_m", "pid_n")


# ----------------------------------------------------------------------------- device side
@triton.jit
def _no_masks(rows, cols, ks, M, N, K):
    """Placeholder for FULL_TILES=True (never called)."""
    return rows >= 0, cols >= 0, ks >= 0


@triton.jit
def _pointer_array_kernel(
    a_ptrs, b_ptrs, c_ptrs,  # int64 [G]: where each problem's A, B, C start
    sizes,                   # int32 [G, 3]: M, N, K of each problem
    lds,                     # int32 [G, 3]: leading dimensions (row strides) of A, B, C
    num_problems, trace_ptr,
    DTYPE: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FULL_TILES: tl.constexpr, MASK_FN: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
):
    pid = tl.program_id(0)
    tile = pid                   # the next global tile this program computes
    problem_first_tile = pid * 0  # global index of the current problem's first tile
    for g in range(num_problems):
        M = tl.load(sizes + 3 * g)
        N = tl.load(sizes + 3 * g + 1)
        K = tl.load(sizes + 3 * g + 2)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        problem_end = problem_first_tile + tl.cdiv(M, BLOCK_M) * num_pid_n
        a_ptr = tl.load(a_ptrs + g).to(tl.pointer_type(DTYPE))
        b_ptr = tl.load(b_ptrs + g).to(tl.pointer_type(DTYPE))
        c_ptr = tl.load(c_ptrs + g).to(tl.pointer_type(DTYPE))
        lda = tl.load(lds + 3 * g)
        ldb = tl.load(lds + 3 * g + 1)
        ldc = tl.load(lds + 3 * g + 2)
        while tile < problem_end:  # this program's tiles of problem g, NUM_PROGRAMS apart
            pid_m, pid_n = tile_row_major(tile - problem_first_tile, num_pid_n)
            if TRACE:
                tl.store(trace_ptr + 4 * tile, pid)
                tl.store(trace_ptr + 4 * tile + 1, g)
                tl.store(trace_ptr + 4 * tile + 2, pid_m)
                tl.store(trace_ptr + 4 * tile + 3, pid_n)
            rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                ks = k0 + tl.arange(0, BLOCK_K)
                a_block = a_ptr + rows[:, None] * lda + ks[None, :]
                b_block = b_ptr + ks[:, None] * ldb + cols[None, :]
                if FULL_TILES:  # the tutorial's shortcut: every block is assumed whole
                    a = tl.load(a_block)
                    b = tl.load(b_block)
                else:
                    a_mask, b_mask, _ = MASK_FN(rows, cols, ks, M, N, K)
                    a = tl.load(a_block, mask=a_mask, other=0.0)
                    b = tl.load(b_block, mask=b_mask, other=0.0)
                acc = tl.dot(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc)
            c_block = c_ptr + rows[:, None] * ldc + cols[None, :]
            if FULL_TILES:
                tl.store(c_block, acc.to(DTYPE))
            else:
                _, _, c_mask = MASK_FN(rows, cols, tl.arange(0, BLOCK_K), M, N, K)
                tl.store(c_block, acc.to(DTYPE), mask=c_mask)
            tile += NUM_PROGRAMS
        problem_first_tile = problem_end


@triton.jit
def _record_masks_kernel(a_out, b_out, c_out, row0, col0, k0, M, N, K, MASK_FN: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Evaluate MASK_FN once and store its three masks, broadcast to their block shapes, as int8."""
    i = tl.arange(0, BLOCK_M)
    j = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    a_mask, b_mask, c_mask = MASK_FN(row0 + i, col0 + j, k0 + kk, M, N, K)
    a_full = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.int32) + tl.where(a_mask, 1, 0)
    b_full = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.int32) + tl.where(b_mask, 1, 0)
    c_full = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32) + tl.where(c_mask, 1, 0)
    tl.store(a_out + i[:, None] * BLOCK_K + kk[None, :], a_full.to(tl.int8))
    tl.store(b_out + kk[:, None] * BLOCK_N + j[None, :], b_full.to(tl.int8))
    tl.store(c_out + i[:, None] * BLOCK_N + j[None, :], c_full.to(tl.int8))


# ----------------------------------------------------------------------------- host side
def pointer_arrays(group_a, group_b, group_c) -> dict:
    """The three metadata arrays the kernel reads, on ``gemm_kernels.DEVICE``.

    ``{"a_ptrs", "b_ptrs", "c_ptrs"}``: int64 ``[G]`` data pointers; ``"sizes"``: int32 ``[G, 3]``
    (M, N, K); ``"lds"``: int32 ``[G, 3]``, the row strides of A, B and C.  Every matrix must have
    contiguous rows (unit column stride): leading dimensions are all this design knows."""
    if len(group_a) != len(group_b) or len(group_a) != len(group_c) or not group_a:
        raise ValueError(f"need as many A, B and C matrices (at least one), got {len(group_a)}, "
                         f"{len(group_b)}, {len(group_c)}")
    sizes, lds = [], []
    for g, (a, b, c) in enumerate(zip(group_a, group_b, group_c)):
        for name, t in ((f"group_a[{g}]", a), (f"group_b[{g}]", b), (f"group_c[{g}]", c)):
            checks.check_tensor(t, name, 2)
            if t.dtype != group_a[0].dtype:
                raise TypeError(f"{name} is {t.dtype} but group_a[0] is {group_a[0].dtype}: one dtype for all")
            if t.stride(1) != 1 and t.shape[1] > 1:
                raise ValueError(f"{name} has strides {tuple(t.stride())}: this kernel only knows leading "
                                 "dimensions, so every row must be contiguous (column stride 1)")
        M, K = a.shape
        if b.shape[0] != K or c.shape != (M, b.shape[1]):
            raise ValueError(f"problem {g}: A is {M}x{K}, B is {b.shape[0]}x{b.shape[1]}, C is "
                             f"{c.shape[0]}x{c.shape[1]}: expected B {K}xN and C {M}xN")
        sizes.append([M, b.shape[1], K])
        lds.append([a.stride(0), b.stride(0), c.stride(0)])

    def as_device(values, dtype):
        return torch.tensor(values, dtype=dtype).to(runtime.DEVICE)

    return {
        "a_ptrs": as_device([a.data_ptr() for a in group_a], torch.int64),
        "b_ptrs": as_device([b.data_ptr() for b in group_b], torch.int64),
        "c_ptrs": as_device([c.data_ptr() for c in group_c], torch.int64),
        "sizes": as_device(sizes, torch.int32),
        "lds": as_device(lds, torch.int32),
    }


def pointer_array_matmul(group_a, group_b, group_c=None, *, masks=None, num_programs=None, trace=False):
    """``C_i = A_i @ B_i`` with the tutorial-08-style kernel; **assumes full tiles** unless ``masks``.

    ``group_c``: the outputs to write (e.g. :class:`SentinelGroup` views); ``None`` allocates them.
    ``masks``: a ``@triton.jit`` mask function (see the module docstring); ``None`` keeps the
    deliberate defect (no load or store masked).  ``num_programs`` defaults to ``num_sms()``.
    Returns ``group_c``, or ``(group_c, trace)`` with ``trace=True``: an int32 ``[total_tiles, 4]``
    CPU tensor with columns :data:`TRACE_FIELDS` (-1 where no program wrote).

    Only call it on inputs whose every edge is a multiple of :data:`BLOCKS`, or on views made by
    :func:`sentinel_group`: without masks it reads and writes up to one block past every edge.
    """
    if group_c is None:
        group_c = [torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
                   for a, b in zip(group_a, group_b)]
    arrays = pointer_arrays(group_a, group_b, group_c)
    bm, bn = BLOCKS["BLOCK_M"], BLOCKS["BLOCK_N"]
    total = sum(triton.cdiv(c.shape[0], bm) * triton.cdiv(c.shape[1], bn) for c in group_c)
    programs = num_programs or runtime.num_sms()
    trace_t = torch.full((max(total, 1), len(TRACE_FIELDS)), -1, dtype=torch.int32, device=runtime.DEVICE)
    if total:
        dtype = group_a[0].dtype
        _pointer_array_kernel[(programs,)](
            arrays["a_ptrs"], arrays["b_ptrs"], arrays["c_ptrs"], arrays["sizes"], arrays["lds"],
            len(group_a), trace_t,
            DTYPE=TL_DTYPES[dtype], NUM_PROGRAMS=programs, **BLOCKS,
            FULL_TILES=masks is None, MASK_FN=masks if masks is not None else _no_masks,
            WIDEN=widen_for_dot(dtype), TRACE=trace,
        )
    if trace:
        return group_c, trace_t[:total].cpu()
    return group_c


def record_masks(mask_fn, row0: int, col0: int, k0: int, M: int, N: int, K: int):
    """Run ``mask_fn`` once on the blocks starting at row ``row0``, column ``col0`` and K index
    ``k0`` (sizes :data:`BLOCKS`); returns the three masks broadcast to their block shapes, as
    numpy bool arrays ``(a_mask [BM, BK], b_mask [BK, BN], c_mask [BM, BN])``."""
    bm, bn, bk = BLOCKS["BLOCK_M"], BLOCKS["BLOCK_N"], BLOCKS["BLOCK_K"]
    outs = [torch.zeros(shape, dtype=torch.int8, device=runtime.DEVICE) for shape in ((bm, bk), (bk, bn), (bm, bn))]
    _record_masks_kernel[(1,)](*outs, row0, col0, k0, M, N, K, MASK_FN=mask_fn, **BLOCKS)
    return tuple(o.cpu().numpy().astype(bool) for o in outs)


def expected_masks(row0: int, col0: int, k0: int, M: int, N: int, K: int):
    """The masks a correct kernel uses for those blocks: every lane inside its matrix, no other."""
    rows = row0 + np.arange(BLOCKS["BLOCK_M"])
    cols = col0 + np.arange(BLOCKS["BLOCK_N"])
    ks = k0 + np.arange(BLOCKS["BLOCK_K"])
    return ((rows[:, None] < M) & (ks[None, :] < K), (ks[:, None] < K) & (cols[None, :] < N),
            (rows[:, None] < M) & (cols[None, :] < N))


# ----------------------------------------------------------------------------- sentinel buffers
@dataclass
class SentinelGroup:
    """Problems whose A, B, C are views into larger sentinel-filled buffers (see module docstring).

    ``group_a/b/c`` are the views to hand a kernel; ``*_buffers`` the whole buffers; each view
    starts at its buffer's element (0, 0)."""

    shapes: list
    group_a: list
    group_b: list
    group_c: list
    a_buffers: list
    b_buffers: list
    c_buffers: list

    def reset_c(self) -> None:
        """Refill every C buffer with the sentinel (to run another kernel on the same inputs)."""
        for buf in self.c_buffers:
            buf.fill_(C_SENTINEL)

    @contextlib.contextmanager
    def lend_outputs(self):
        """Make a launcher that allocates its own outputs write into this group's C views.

        While the block runs, ``torch.empty`` hands out the C views, in order, to calls asking
        for exactly their shape and dtype (every other call allocates as usual).  So the stores
        of e.g. ``gemm_kernels.grouped_matmul(group.group_a, group.group_b)`` land in the
        sentinel buffers, where :func:`damage_report` sees any that strays outside C.  Yields the
        list of views not handed out yet (empty after a launcher took them all)."""
        pending = list(self.group_c)
        real_empty = torch.empty

        def empty(*size, **kwargs):
            shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
            if (pending and shape == tuple(pending[0].shape) and kwargs.get("dtype") == pending[0].dtype
                    and kwargs.get("out") is None):
                return pending.pop(0)
            return real_empty(*size, **kwargs)

        torch.empty = empty
        try:
            yield pending
        finally:
            torch.empty = real_empty


def sentinel_group(shapes, *, dtype=torch.float16, pad: int | None = None, seed: int = 0,
                   contiguous: bool = False) -> SentinelGroup:
    """Random A_i [M, K], B_i [K, N] (values in [-1, 1)) for each ``(M, N, K)`` of ``shapes``, each
    a view in the top-left corner of a buffer with ``pad`` extra rows and columns (default: one
    block, the most any unmasked access of :func:`pointer_array_matmul` can stray), filled with
    NaN; C_i likewise, filled with :data:`C_SENTINEL`.

    ``contiguous=True`` builds the other case, the one of ordinary tensors (and of tutorial 08,
    whose leading dimension is the row length): every matrix is contiguous, its rows back to back
    (``ldc = N``), and only rows are added below it (enough to catch every stray access past its
    last element).  Then a column past the right edge of row ``i`` *is* the start of row ``i + 1``:
    stray reads of A and B pick up real values of the next row, not NaN, and stray stores land
    inside C itself, so ragged N makes the values of C wrong."""
    block = max(BLOCKS.values())
    pad = block if pad is None else pad
    if pad < block:
        raise ValueError(f"pad must be at least one block ({block}), got {pad}")
    gen = torch.Generator().manual_seed(seed)
    group = SentinelGroup(list(shapes), [], [], [], [], [], [])
    for M, N, K in shapes:
        for rows, cols, fill, views, buffers, random in (
            (M, K, AB_SENTINEL, group.group_a, group.a_buffers, True),
            (K, N, AB_SENTINEL, group.group_b, group.b_buffers, True),
            (M, N, C_SENTINEL, group.group_c, group.c_buffers, False),
        ):
            if contiguous:  # rows of exactly `cols`; below: a block of rows plus a block of elements
                shape = (rows + pad + triton.cdiv(block, max(cols, 1)), cols)
            else:
                shape = (rows + pad, cols + pad)
            buf = torch.full(shape, fill, dtype=dtype)
            if random:
                buf[:rows, :cols] = torch.rand((rows, cols), generator=gen, dtype=torch.float32) * 2 - 1
            buf = buf.to(runtime.DEVICE)
            buffers.append(buf)
            views.append(buf[:rows, :cols])
    return group


@dataclass
class ProblemDamage:
    """What a kernel did to one problem of a :class:`SentinelGroup`."""

    problem: int
    shape: tuple
    wrong: np.ndarray       # bool [M, N]: elements of C that differ from the reference
    clobbered: np.ndarray   # bool, C's buffer shape: sentinels outside C that were overwritten
    c_buffer: np.ndarray    # float64 copy of C's whole buffer, for pictures
    reads_changed: bool     # A's or B's buffer changed (loads must never write)

    @property
    def ok(self) -> bool:
        return not self.wrong.any() and not self.clobbered.any() and not self.reads_changed

    def describe(self) -> str:
        M, N, K = self.shape
        head = f"problem {self.problem} (M={M}, N={N}, K={K})"
        if self.ok:
            return f"{head}: C correct, nothing outside C touched"
        parts = []
        if self.wrong.any():
            rows, cols = np.nonzero(self.wrong)
            nan = np.isnan(self.c_buffer[:M, :N][self.wrong]).sum()
            parts.append(f"{int(self.wrong.sum())} of {M * N} elements of C wrong (rows {rows.min()}..{rows.max()}, "
                         f"cols {cols.min()}..{cols.max()}"
                         + (f"; {nan} of them NaN: a sentinel was read" if nan else "") + ")")
        else:
            parts.append("C correct")
        if self.clobbered.any():
            below = self.clobbered[M:, :].sum()
            right = self.clobbered[:M, N:].sum()
            where = []
            if below:
                where.append(f"{int(below)} below C (rows {M}..{M + np.nonzero(self.clobbered[M:].any(1))[0].max()})")
            if right:
                where.append(f"{int(right)} right of C (cols {N}..{N + np.nonzero(self.clobbered[:, N:].any(0))[0].max()})")
            parts.append(f"{int(self.clobbered.sum())} elements outside C overwritten: " + ", ".join(where))
        if self.reads_changed:
            parts.append("A's or B's buffer was changed")
        return f"{head}: " + "; ".join(parts)


def damage_report(group: SentinelGroup, *, atol: float = 1e-2, rtol: float = 1e-2) -> list[ProblemDamage]:
    """Compare every C view with ``A @ B`` (float64) and every sentinel with its fill value.

    The tolerance suits fp16 outputs of sums of products of values in [-1, 1)."""
    report = []
    for g, (M, N, K) in enumerate(group.shapes):
        a, b = group.group_a[g], group.group_b[g]
        ref = (a.double() @ b.double()).cpu().numpy()
        buf = group.c_buffers[g].double().cpu().numpy()
        got = buf[:M, :N]
        wrong = ~np.isclose(got, ref, atol=atol, rtol=rtol)  # NaN counts as wrong
        outside = np.ones(buf.shape, dtype=bool)
        outside[:M, :N] = False
        clobbered = outside & (buf != group.c_buffers[g].new_tensor(C_SENTINEL).double().item())
        reads_changed = False
        for view, fill_buf in ((a, group.a_buffers[g]), (b, group.b_buffers[g])):
            rest = fill_buf.double().cpu().numpy().copy()
            rest[: view.shape[0], : view.shape[1]] = np.nan
            reads_changed |= bool((~np.isnan(rest)).any())
        report.append(ProblemDamage(g, (M, N, K), wrong, clobbered, buf, reads_changed))
    return report
