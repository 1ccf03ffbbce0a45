"""Hopper's Tensor Memory Accelerator (TMA), the pieces every TMA kernel shares.

A tensor descriptor names a 2-D (or 3-D) array in global memory (base, shape, strides) and the
block one load moves; the copy engine bounds-checks every block (zero fill on reads past the
shape, clipped writes), so ragged edges need no masks.  In exchange TMA wants one unit-stride
dimension, and the base and every other stride 16-byte aligned.

Device side: the descriptors of A, B and C, one block load (row- or column-major, optionally one
matrix of a batch), the one TMA K loop, and the tile's store.  Host side: the layout rules, as
checks that say what is wrong and how to fix it (``tma_layout``, ``tma_strides``,
``common_layout``), and ``tma_aligned``, a copy TMA can read.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .. import runtime
from ..runtime import TMA_ALIGN_BYTES
from . import checks
from .epilogue import bias_and_activation, dot_promoted, load_bias, mma_operand, output_values, store_tile_masked


# ----------------------------------------------------------------------------- device side
@triton.jit
def input_descriptors(a_ptr, b_ptr, M, N, K, stride_a, stride_b,
                          A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Descriptors for A and B.  A descriptor names a 2-D array in global memory (base, shape,
    strides) and the block a load moves.  Its last dimension must be the unit-stride one: a
    column-major A (A^T contiguous) is described as the [K, M] array it really is, and each
    loaded block is transposed back (``load_block``)."""
    if A_COL_MAJOR:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_a, 1],
                                           block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    if B_COL_MAJOR:  # B^T contiguous, e.g. an nn.Linear weight [N, K]
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    return a_desc, b_desc


@triton.jit
def output_descriptor(c_ptr, M, N, stride_c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          EPILOGUE_SUBTILE: tl.constexpr):
    """Descriptor for C; with EPILOGUE_SUBTILE its block is half a tile wide (two stores per tile)."""
    if EPILOGUE_SUBTILE:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_c, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_c, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    return c_desc


@triton.jit
def output_target(c_ptr, M, N, stride_c, C_TMA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  EPILOGUE_SUBTILE: tl.constexpr):
    """Where ``finish_tile`` writes C: its descriptor when C's rows are 16-byte aligned (C_TMA),
    else C's pointer (masked pointer stores)."""
    if C_TMA:
        c_out = output_descriptor(c_ptr, M, N, stride_c, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    else:
        c_out = c_ptr
    return c_out


@triton.jit
def load_block(desc, off_0, off_1, COL_MAJOR: tl.constexpr, batch=0, BATCHED: tl.constexpr = False):
    """Block ``[off_0:, off_1:]`` of a matrix read through ``desc``.  A column-major matrix (a
    transposed view) is described as the array it really is, so its block is loaded at
    ``[off_1, off_0]`` and transposed back; for 16-bit types that transpose is a free
    shared-memory view for wgmma (the TTGIR shows one ``ttg.memdesc_trans``, no data moved,
    no ``tt.trans``), because 16-bit wgmma reads either major-ness from shared memory; fp8 and
    tf32 wgmma want K-major operands, so there the same view would cost a real transpose.
    ``BATCHED``: ``desc`` is 3-D, one matrix per ``batch`` index (MoE weights)."""
    if BATCHED:
        if COL_MAJOR:
            block = desc.load([batch, off_1, off_0])
            block = block.reshape(block.shape[1], block.shape[2]).T
        else:
            block = desc.load([batch, off_0, off_1])
            block = block.reshape(block.shape[1], block.shape[2])
    elif COL_MAJOR:
        block = desc.load([off_1, off_0]).T
    else:
        block = desc.load([off_0, off_1])
    return block


@triton.jit
def k_loop(a_desc, b_desc, off_m, off_n, k_first, k_end, A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr,
           WIDEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           b_batch=0, B_BATCHED: tl.constexpr = False, PROMOTE: tl.constexpr = None):
    """fp32 sum over K blocks ``k_first <= ki < k_end`` of one C tile's products, read through TMA:
    the one TMA K loop of the package.  No masks: the TMA unit zero-fills whatever lies past M, N
    or K.  ``PROMOTE``: fp8 only, the K elements summed on the tensor cores before an fp32 add
    (``fp8.py``)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_first, k_end):
        off_k = ki * BLOCK_K
        a = load_block(a_desc, off_m, off_k, A_COL_MAJOR)
        b = load_block(b_desc, off_k, off_n, B_COL_MAJOR, b_batch, B_BATCHED)
        acc = dot_promoted(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc, PROMOTE)
    return acc


@triton.jit
def store_tile(acc, c_desc, off_m, off_n, BLOCK_N: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    """TMA store of one C tile (clipped at M and N by the hardware), in two halves with
    EPILOGUE_SUBTILE: each half needs half the registers and shared memory of the whole."""
    if EPILOGUE_SUBTILE:
        halves = tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([off_m, off_n], output_values(left, c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], output_values(right, c_desc.dtype))
    else:
        c_desc.store([off_m, off_n], output_values(acc, c_desc.dtype))


@triton.jit
def finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn,
                    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, C_TMA: tl.constexpr,
                    EPILOGUE_SUBTILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Epilogue (bias, activation) and store of one C tile.  ``c_out`` is C's descriptor when
    C_TMA (the TMA store clips the rows/columns past M and N), else C's pointer: C's rows are
    not 16-byte aligned (N * itemsize % 16 != 0) and a masked pointer store writes the tile."""
    acc = bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
    if C_TMA:
        store_tile(acc, c_out, off_m, off_n, BLOCK_N, EPILOGUE_SUBTILE)
    else:
        store_tile_masked(acc, c_out, off_m, off_n, M, N, stride_c, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def whole_tile(a_desc, b_desc, c_out, bias_ptr, pid_m, pid_n, M, N, k_tiles, stride_c, stride_cn,
               A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr, C_TMA: tl.constexpr,
               HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr,
               EPILOGUE_SUBTILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """One C tile from start to store: the bias load (issued first, so it lands during the K
    loop), the whole K loop, the epilogue and the store.  ``matmul_tma``'s tiles and Stream-K's
    data-parallel ones."""
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    bias = load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)
    acc = k_loop(a_desc, b_desc, off_m, off_n, 0, k_tiles, A_COL_MAJOR, B_COL_MAJOR, WIDEN, BLOCK_M, BLOCK_N, BLOCK_K)
    finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn, HAS_BIAS, ACTIVATION, C_TMA,
                EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)


# ----------------------------------------------------------------------------- host side: the layout rules
def _describe_strides(x: torch.Tensor) -> str:
    return f"shape {tuple(x.shape)}, strides {tuple(x.stride())} (elements of {x.element_size()} bytes)"


def tma_layout(x: torch.Tensor, name: str, launcher: str = "matmul_tma",
               otherwise: str = "use matmul_persistent (pointer loads, any strides)") -> tuple[bool, int]:
    """How a TMA descriptor sees the 2-D tensor ``x``: ``(col_major, outer_stride)``.

    Row-major (unit column stride) is described as ``[rows, cols]``; column-major (unit row
    stride, e.g. a ``.t()`` view) as ``[cols, rows]``.  ``outer_stride`` is the other stride in
    elements.  Raises ValueError naming ``name``, the rule broken and a fix, when neither works
    (``launcher``: the call that needs TMA; ``otherwise``: its way without TMA).
    """
    rows, cols = x.shape
    itemsize = x.element_size()
    # (col_major, outer stride, length of the unit-stride dimension, what a "line" is called).
    # A dimension of size 1 is never stepped over, so its stride is free: use an aligned one.
    layouts = []
    if x.stride(1) == 1 or cols == 1:
        layouts.append((False, x.stride(0) if rows > 1 else runtime.tma_row_length(cols, itemsize), cols, "row"))
    if x.stride(0) == 1 or rows == 1:
        layouts.append((True, x.stride(1) if cols > 1 else runtime.tma_row_length(rows, itemsize), rows, "column"))
    problems = [] if layouts else ["neither of its strides is 1 (TMA moves contiguous rows)"]
    for col_major, outer, line_len, line in layouts:
        if outer * itemsize % TMA_ALIGN_BYTES:
            problems.append(f"its {line} stride is {outer * itemsize} bytes, not a multiple of {TMA_ALIGN_BYTES}")
        elif outer < line_len:
            problems.append(f"its {line}s overlap ({line} stride {outer} < {line} length {line_len})")
        elif x.data_ptr() % TMA_ALIGN_BYTES:
            problems = [f"its first element's address is not {TMA_ALIGN_BYTES}-byte aligned "
                        f"(address % {TMA_ALIGN_BYTES} = {x.data_ptr() % TMA_ALIGN_BYTES}, storage offset "
                        f"{x.storage_offset()} elements)"]
            break
        else:
            return col_major, outer
    raise ValueError(f"{name} cannot be read by TMA: {'; '.join(problems)} [{name} has {_describe_strides(x)}]. "
                     f"{_tma_fix_hint(x, name, launcher, otherwise)}")


def _tma_fix_hint(x: torch.Tensor, name: str, launcher: str, otherwise: str) -> str:
    rule = (f"{launcher} needs one unit stride and 16-byte aligned base address and other stride: "
            f"copy {name} into such storage with gemm_kernels.kernels.tma.tma_aligned({name}), "
            f"or {otherwise}.")
    # A fresh row-major copy is aligned when one row fills whole 16-byte units.
    if x.shape[1] * x.element_size() % TMA_ALIGN_BYTES == 0 or x.shape[0] == 1:
        copy = f"{name}.clone()" if x.is_contiguous() else f"{name}.contiguous()"
        return f"{copy} would fix it. Otherwise: {rule}"
    return rule


def tma_aligned(x: torch.Tensor) -> torch.Tensor:
    """A copy of 2-D ``x`` that TMA can read: row-major, with each row padded to 16 bytes.

    The result has ``x``'s shape and values; its row stride is rounded up (the padding is
    never read: TMA clips every block at the logical shape)."""
    checks.check_tensor(x, "x", 2)
    rows, cols = x.shape
    storage = torch.zeros((rows, runtime.tma_row_length(cols, x.element_size())), dtype=x.dtype, device=x.device)
    out = storage[:, :cols]
    out.copy_(x)
    return out


def tma_strides(t: torch.Tensor, order) -> list | None:
    """Strides of ``t``'s dimensions taken in ``order`` (the last one must be the unit-stride
    dimension), as a tensor descriptor over that view needs them; None if TMA cannot read it.

    TMA needs a 16-byte-aligned base, a unit last stride and every other stride a nonzero multiple of
    16 bytes.  A dimension of size 1 never moves, so its stride is replaced by an aligned one."""
    if t.data_ptr() % TMA_ALIGN_BYTES:
        return None
    shape, strides, elem = [t.shape[d] for d in order], [t.stride(d) for d in order], t.element_size()
    if shape[-1] != 1 and strides[-1] != 1:
        return None
    out = []
    for i, (size, stride) in enumerate(zip(shape[:-1], strides[:-1])):
        if size == 1:
            stride = runtime.tma_row_length(math.prod(shape[i + 1:]), elem)
        elif stride == 0 or (stride * elem) % TMA_ALIGN_BYTES:  # 0: an expanded view, rows repeat
            return None
        out.append(stride)
    return out + [1]


def descriptor_layouts(t: torch.Tensor) -> dict:
    """How a 2-D tensor can be read through a TMA tensor descriptor (or vectorized pointer loads).

    Returns ``{"row": (s0, s1), "col": (s0, s1)}`` restricted to the feasible layouts: ``"row"``
    reads it as stored row-major (unit stride along dim 1), ``"col"`` reads its transpose
    row-major (unit stride along dim 0).  The strides are the ones to hand the kernel
    (see :func:`tma_strides`).  An empty dict: neither works."""
    layouts = {}
    row = tma_strides(t, (0, 1))
    if row is not None:
        layouts["row"] = (row[0], 1)
    col = tma_strides(t, (1, 0))
    if col is not None:
        layouts["col"] = (1, col[0])
    return layouts


def common_layout(tensors: dict, role: str, required: bool = False) -> tuple[str, dict]:
    """One layout for every matrix of a role: it is a compile-time choice of the kernel.

    ``tensors`` maps problem index -> tensor (only the problems whose matrix is touched).
    Returns ``("row" | "col" | "any", {problem: strides to hand the kernel})``; ``"row"`` is
    preferred.  ``required`` (TMA): ``"any"`` is not an option, so the first matrix that breaks
    the common layout raises a ValueError saying why."""
    feasible = {i: descriptor_layouts(t) for i, t in tensors.items()}
    common = {"row", "col"}
    for i, t in tensors.items():
        if required and not feasible[i]:
            elem = t.element_size()
            raise ValueError(
                f"tma=True: {role}[{i}] (shape {tuple(t.shape)}, strides {tuple(t.stride())}, "
                f"data_ptr % 16 = {t.data_ptr() % 16}) cannot be read through a tensor descriptor: TMA "
                f"needs a unit stride along one dimension, the other stride a nonzero multiple of 16 bytes "
                f"({runtime.tma_row_length(1, elem)} {checks.dtype_name(t.dtype)} elements) and a 16-byte-aligned base. "
                f"Use tma=False, or store it with padded rows (e.g. slice a [{t.shape[0]}, "
                f"{runtime.tma_row_length(t.shape[1], elem)}] buffer)."
            )
        if required and not common & feasible[i].keys():
            raise ValueError(
                f"tma=True: {role}[{i}] can only be read {'/'.join(feasible[i])}-major but the {role} "
                f"matrices before it only {'/'.join(sorted(common))}-major: with TMA all {role} matrices "
                "must share one layout. Pass .contiguous() copies or use tma=False."
            )
        common &= feasible[i].keys()
    if not common:
        return "any", {i: tuple(t.stride()) for i, t in tensors.items()}
    layout = "row" if "row" in common else "col"
    return layout, {i: feasible[i][layout] for i in tensors}
