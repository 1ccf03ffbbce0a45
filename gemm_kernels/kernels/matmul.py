"""One GEMM, one program per output tile: ``C = act(A @ B + bias)``.

Three layers: the ``@triton.jit`` kernel (the math, its K loop a helper every pointer kernel
shares), ``matmul`` (the contract: checks in ``checks.py``, output allocation, grid, launch)
and ``configs.matmul_configs`` (the tuning).
``matmul_ref`` is the plain-torch reference the tests and notebooks compare against.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from . import checks, configs, launches
from .epilogue import (activation_ref, bias_and_activation, dot_promoted, load_bias, mma_operand, store_tile_masked,
                       widen_for_dot)
from .autograd import grad_enabled_for, matmul_grads
from .tiles import record_tile, tile_coords


@triton.jit
def k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    WIDEN: tl.constexpr, PROMOTE: tl.constexpr = None):
    """fp32 ``A[offs_m, :K] @ B[:K, offs_n]`` with plain pointer loads: the K loop of every
    pointer kernel (this one, persistent, grouped, MoE).  ``PROMOTE``: fp8 only (``fp8.py``).

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
        acc = dot_promoted(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc, PROMOTE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit(do_not_specialize=configs.ROWS)  # column-major A: _matmul_tuned_rows_specialised
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
        record_tile(trace_ptr, pid, pid, 0, pid_m, pid_n)

    # Rows/columns past the edge wrap around (% M, % N) so A and B loads need no M/N mask;
    # the wrapped results are never stored.  Only K, summed over, must be masked to zero.
    # No tl.multiple_of / tl.max_contiguous hints here: after the wrap a block is *not*
    # contiguous, and a false hint makes 16-byte loads start mid-vector ("misaligned address"
    # when N % 8 != 0 and B's rows are 16-byte aligned).  Triton proves the contiguity itself
    # when M and N are multiples of 16, which is where vectorized loads pay.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    acc = k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                          BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)

    # epilogue: still fp32, still in registers
    bias = load_bias(bias_ptr, pid_n * BLOCK_N, N, BLOCK_N, HAS_BIAS)
    acc = bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
    store_tile_masked(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


_matmul_tuned = configs.TunedKernel(_matmul_kernel, configs.matmul_configs(), key=configs.SINGLE_GEMM_KEY)
_matmul_tuned_rows_specialised = configs.TunedKernel(configs.rows_specialised(_matmul_kernel),
                                                configs.matmul_configs(), key=configs.SINGLE_GEMM_KEY,
                                                variant="-rows")
#: the batch-invariant launches (``_matmul_forward(..., batch_invariant=True)``): one config for every M
_matmul_fixed = configs.TunedKernel(_matmul_kernel, configs.batch_invariant_configs(), key=configs.SINGLE_GEMM_KEY,
                                    variant="-batch-invariant")
_matmul_fixed_rows_specialised = configs.TunedKernel(configs.rows_specialised(_matmul_kernel),
                                                     configs.batch_invariant_configs(), key=configs.SINGLE_GEMM_KEY,
                                                     variant="-batch-invariant-rows")


def matmul(a, b, *, order="grouped", group_size_m=8, activation=None, bias=None):
    """``activation(a @ b + bias)`` in a's dtype, one Triton program per output tile.

    a: [M, K], b: [K, N], any strides (transposed and sliced views are fine), fp16/bf16/fp32
    (fp32 uses TF32 tensor cores on a GPU).  ``order`` is the program order over C tiles:
    ``"row_major"`` (naive) or ``"grouped"`` (GROUP_SIZE_M super-grouping, L2 friendly).
    ``activation``: None, "relu", "leaky_relu" (slope 0.01) or "gelu"; ``bias``: shape [N].
    Both are applied to the fp32 accumulator before the single store.

    Differentiable in a, b and bias (``dA = dZ Bᵀ``, ``dB = Aᵀ dZ`` through this kernel,
    ``kernels.autograd``), and a PyTorch custom op (``torch.ops.gemm_kernels.matmul``) that
    ``torch.compile`` traces without a graph break.
    """
    if grad_enabled_for(a, b, bias):
        # before the op's schema, which would coerce the options and name no argument for a list
        group_size_m = checks.check_options(order, group_size_m, activation)
        for x, name in ((a, "a"), (b, "b"), (bias, "bias")):
            if x is not None or name != "bias":
                checks.check_strided(x, name)
        # a taller group is the same order; an int64 holds it (the schema's type; the op names a bad a)
        group_size_m = min(group_size_m, max(a.shape[0], 1) if a.dim() == 2 else 2**31)
        return torch.ops.gemm_kernels.matmul(a, b, order, group_size_m, activation, bias)
    return _matmul_forward(a, b, order, group_size_m, activation, bias)


_KEPT = launches.LaunchCache()
#: the kernel's tensor parameters and the call's tensors they take (``launches.KeptLaunch``)
POINTER_SOURCES = {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out", "bias_ptr": "bias", "trace_ptr": "out"}


def _matmul_forward(a, b, order, group_size_m, activation, bias, batch_invariant=False):
    """The forward launch.  ``batch_invariant``: the single config of
    :func:`configs.batch_invariant_configs` instead of the tuned list, so a row of C has the same
    bits whatever M (``matmul_auto(..., batch_invariant=True)``)."""
    key = launches.call_key((a, b, bias), (order, group_size_m, activation, batch_invariant)) \
        if launches.keeping() else None
    out = _KEPT.run(key, a=a, b=b, bias=bias)  # checked before with this key: launch
    if out is not None:
        return out
    a, b, bias = checks.resolve_lazy_views(a, b, bias)  # the kernel reads memory, not torch's lazy negation
    bias, group_size_m = checks.check_matmul_inputs(a, b, order, group_size_m, activation, bias)
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
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    args = dict(
        a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, trace_ptr=c,
        M=M, N=N, K=K,
        stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_cm=c.stride(0), stride_cn=c.stride(1),
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m,
        HAS_BIAS=bias is not None, ACTIVATION=activation,
        WIDEN=widen_for_dot(a.dtype), TRACE=False,
    )
    if batch_invariant:
        tuned = _matmul_fixed_rows_specialised if configs.column_major_rows(a) else _matmul_fixed
    else:
        tuned = _matmul_tuned_rows_specialised if configs.column_major_rows(a) else _matmul_tuned
    launches.launch_and_keep(_KEPT, key, tuned, grid, args, c, POINTER_SOURCES)
    return c


@torch.library.custom_op("gemm_kernels::matmul", mutates_args=())
def _matmul_op(a: torch.Tensor, b: torch.Tensor, order: str, group_size_m: int, activation: str | None,
               bias: torch.Tensor | None) -> torch.Tensor:
    return _matmul_forward(a, b, order, group_size_m, activation, bias)


@_matmul_op.register_fake
def _(a, b, order, group_size_m, activation, bias):
    with torch.no_grad():  # the op's own inputs may require grad: autograd is above this layer
        checks.check_matmul_inputs(a, b, order, group_size_m, activation, bias)
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_backward(ctx, inputs, output):
    a, b, order, group_size_m, activation, bias = inputs
    ctx.save_for_backward(a, b, bias)
    ctx.options = order, group_size_m, activation


def _backward(ctx, dc):
    a, b, bias = ctx.saved_tensors
    order, group_size_m, activation = ctx.options
    product = lambda x, y, bias: torch.ops.gemm_kernels.matmul(x, y, order, group_size_m, None, bias)  # noqa: E731
    da, db, dbias = matmul_grads(product, a, b, bias, activation, dc,
                                 (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[5]))
    return da, db, None, None, None, dbias


_matmul_op.register_autograd(_backward, setup_context=_setup_backward)


def matmul_ref(a, b, *, activation=None, bias=None, out_dtype=None):
    """Plain-torch reference: computed in float64 on the CPU-side math, returned in a's dtype.

    Pass ``out_dtype=torch.float64`` to keep full precision for error measurements."""
    acc = a.double() @ b.double()
    if bias is not None:
        acc = acc + bias.double()
    acc = activation_ref(acc, activation)
    return acc.to(out_dtype or a.dtype)
