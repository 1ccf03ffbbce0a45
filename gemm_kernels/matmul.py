"""One GEMM, one program per output tile: ``C = act(A @ B + bias)``.

Three layers: the ``@triton.jit`` kernel (the math), ``matmul`` (the contract: checks,
output allocation, grid, launch) and ``configs.matmul_configs`` (the tuning).
``matmul_ref`` is the plain-torch reference the tests and notebooks compare against.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _validate, configs, runtime
from .epilogue import activation_ref, apply_activation, check_activation, mma_operand, widen_for_dot
from .tiles import ORDERS, tile_coords

# Offsets are 32-bit in the kernels (as in Triton's tutorials): refuse tensors they cannot address.
MAX_INDEX = 2**31 - 1


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
    WIDEN: tl.constexpr, TRACE: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_coords(pid, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
    if TRACE:  # record which tile this program computed (tests and notebooks read it back)
        tl.store(trace_ptr + 2 * pid, pid_m)
        tl.store(trace_ptr + 2 * pid + 1, pid_n)

    # Rows/columns past the edge wrap around (% M, % N) so A and B loads need no M/N mask;
    # the wrapped results are never stored.  Only K, summed over, must be masked to zero.
    # No tl.multiple_of / tl.max_contiguous hints here: after the wrap a block is *not*
    # contiguous, and a false hint makes 16-byte loads start mid-vector ("misaligned address"
    # when N % 8 != 0 and B's rows are 16-byte aligned).  Triton proves the contiguity itself
    # when M and N are multiples of 16, which is where vectorized loads pay.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # epilogue: still fp32, still in registers
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)[None, :]
    acc = apply_activation(acc, ACTIVATION)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    WIDEN: tl.constexpr):
    """fp32 ``A[offs_m, :K] @ B[:K, offs_n]`` with plain pointer loads: ``_matmul_kernel``'s K loop
    as a function, for the kernels built on it (persistent, grouped, MoE).

    ``offs_m`` / ``offs_n`` must already be valid rows/columns (callers wrap them); only the
    K edge is masked, to zero, because it is summed over."""
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


_matmul_tuned = configs.TunedKernel(_matmul_kernel, configs.matmul_configs(), key=configs.SINGLE_GEMM_KEY)


def _check_matmul_inputs(a, b, order, group_size_m, activation, bias):
    """Every single-GEMM launcher's checks; returns ``(bias, group_size_m)`` as the kernels take
    them: the bias contiguous (the kernels read ``bias_ptr + n``) and the group no taller than M
    (a group taller than C's rows of tiles is the same order, and keeps ``GROUP_SIZE_M *
    num_pid_n`` within 32 bits)."""
    _validate.check_tensor(a, "a", 2)
    _validate.check_tensor(b, "b", 2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a is {a.shape[0]}x{a.shape[1]} but b is {b.shape[0]}x{b.shape[1]}: "
            f"the inner dimensions must match ({a.shape[1]} != {b.shape[0]})"
        )
    _validate.check_same({"a": a, "b": b}, "dtype")
    _validate.check_same({"a": a, "b": b}, "device")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    group_size_m = _validate.check_int(group_size_m, "group_size_m")
    check_activation(activation)
    if bias is not None:
        _validate.check_tensor(bias, "bias", 1)
        if bias.shape[0] != b.shape[1]:
            raise ValueError(f"bias must have shape [N] = [{b.shape[1]}], got {list(bias.shape)}")
        _validate.check_same({"a": a, "bias": bias}, "device")
    for name, t in (("a", a), ("b", b)):
        (rows, cols), (row_stride, col_stride) = t.shape, t.stride()
        span = (rows - 1) * abs(row_stride) + (cols - 1) * abs(col_stride) if rows and cols else 0
        if span > MAX_INDEX:
            raise ValueError(f"{name} spans {span + 1} elements: more than 32-bit kernel offsets address")
    _validate.check_no_grad({"a": a, "b": b, "bias": bias})
    M, N = a.shape[0], b.shape[1]
    if M * N - 1 > MAX_INDEX:
        raise ValueError(f"C would be {M}x{N} = {M * N} elements: more than 32-bit kernel offsets address "
                         f"(at most {MAX_INDEX + 1}); split the product into row blocks")
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    return bias, min(group_size_m, max(M, 1))


def matmul(a, b, *, order="grouped", group_size_m=8, activation=None, bias=None):
    """``activation(a @ b + bias)`` in a's dtype, one Triton program per output tile.

    a: [M, K], b: [K, N], any strides (transposed and sliced views are fine), fp16/bf16/fp32
    (fp32 uses TF32 tensor cores on a GPU).  ``order`` is the program order over C tiles:
    ``"row_major"`` (naive) or ``"grouped"`` (GROUP_SIZE_M super-grouping, L2 friendly).
    ``activation``: None, "relu", "leaky_relu" (slope 0.01) or "gelu"; ``bias``: shape [N].
    Both are applied to the fp32 accumulator before the single store.
    """
    bias, group_size_m = _check_matmul_inputs(a, b, order, group_size_m, activation, bias)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return c
    if K == 0:  # like torch: an empty sum is zero (then bias and activation)
        acc = torch.zeros((M, N), device=a.device, dtype=torch.float32)
        if bias is not None:
            acc += bias.float()
        return activation_ref(acc, activation).to(a.dtype)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    _matmul_tuned[grid](
        a, b, c, bias if bias is not None else c, c,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m,
        HAS_BIAS=bias is not None, ACTIVATION=activation,
        WIDEN=widen_for_dot(a.dtype), TRACE=False,
    )
    return c


def trace_program_tiles(M, N, K=16, *, block_m=None, block_n=None, block_k=None, order="grouped",
                        group_size_m=8, dtype=torch.float16):
    """Run the real ``_matmul_kernel`` with tracing on and return what it did.

    Returns a ``[num_programs, 2]`` int tensor: row ``pid`` is the ``(pid_m, pid_n)`` tile that
    program ``pid`` computed (poisoned with -1 first, so a program that wrote nothing shows).
    Block sizes default to the interpreter's fixed config.
    """
    blocks = configs.INTERPRETER_BLOCKS
    bm, bn, bk = configs.blocks_or_defaults(blocks, block_m, block_n, block_k)
    M, N, K = (_validate.check_int(v, name, minimum=0) for v, name in ((M, "M"), (N, "N"), (K, "K")))
    a = torch.randn(M, K, device=runtime.DEVICE).to(dtype)
    b = torch.randn(K, N, device=runtime.DEVICE).to(dtype)
    _, group_size_m = _check_matmul_inputs(a, b, order, group_size_m, None, None)
    c = torch.empty((M, N), device=a.device, dtype=dtype)
    num_programs = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    trace = torch.full((num_programs, 2), -1, dtype=torch.int32, device=a.device)
    _matmul_kernel[(num_programs,)](
        a, b, c, c, trace,
        M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m,
        HAS_BIAS=False, ACTIVATION=None, WIDEN=widen_for_dot(dtype), TRACE=True,
    )
    return trace.cpu()


def matmul_ref(a, b, *, activation=None, bias=None, out_dtype=None):
    """Plain-torch reference: computed in float64 on the CPU-side math, returned in a's dtype.

    Pass ``out_dtype=torch.float64`` to keep full precision for error measurements."""
    acc = a.double() @ b.double()
    if bias is not None:
        acc = acc + bias.double()
    acc = activation_ref(acc, activation)
    return acc.to(out_dtype or a.dtype)
