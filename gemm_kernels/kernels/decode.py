"""Decode: ``C = act(A @ B + bias)`` for a few rows of A (M <= 64), the weight read once at full speed.

One token (or a few) through a linear layer multiplies an ``M x K`` activation by a ``K x N``
weight: ``2 M N K`` flops on ``2 N K`` bytes of weight, about M flops per byte where an H100
does ~300 per byte.  Memory bound: the time is the weight's bytes over HBM's bandwidth, and a
kernel wins by keeping enough loads in flight on every SM, not by its arithmetic.  A GEMM tile
of 128 rows would multiply 127 rows of padding.  So each program here owns ``BLOCK_N`` columns
of C for *all* M rows (``ROWS``, M rounded up to a power of two) and one slice of K, by

* ``tl.dot`` on a tile of at least 16 rows (the tensor cores' smallest; padding rows masked, never
  read), the default: its loads are software-pipelined (``num_stages``), so one program per SM
  keeps enough of the weight in flight.  Its first configs compute ``C^T = B^T A^T`` (``SWAP_AB``):
  the weight's columns take the MMA's 64-row side and the few rows its narrow side, as cuBLAS does;
  the tuner keeps whichever is faster;
* or plain FMAs (``method="fma"``, up to ``FMA_MAX_ROWS`` rows: a ``ROWS x BLOCK_K x BLOCK_N``
  product summed over K), which multiply no padding but whose loads Triton does not pipeline.
  Measured on an H100 (PERF_NOTES 44): no faster at M = 1 (within 2% from 4096^2 up), 23% slower
  at 2048^2; the multiply is not what costs.

B is read along its contiguous dimension either way: ``b = W.t()`` (nn.Linear's weight, strides
``(1, K)``) along K, a contiguous ``b`` along N; Triton sees the unit stride (it specialises an
argument equal to 1) and issues 16-byte loads.  With few column blocks (``N / BLOCK_N`` under
half the SMs' count) K is split too (``decode_splits``): program ``(n, s)`` sums its K slice, leaves
an fp32 partial, and the last slice to arrive adds them *in split order* and runs the epilogue
(deterministic, one launch: ``splitk.py``'s scheme).

``matmul_auto`` runs this kernel for at most ``DECODE_MAX_ROWS`` rows against a large weight
(``dispatch.decode_launcher``); measured in PERF_NOTES entry 44 (``tests/gpu_decode.py``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from ..models.tiles import cdiv
from . import checks, configs, launches
from .epilogue import activation_ref, bias_and_activation, load_bias, mma_operand, store_tile_masked, widen_for_dot
from .splitk import _workspace as splitk_workspace

#: the most rows ``matmul_decode`` takes: above, a GEMM tile of 64 rows wastes nothing
DECODE_MAX_ROWS = 64
#: the most rows ``method="fma"`` takes (its ``ROWS x BLOCK_K x BLOCK_N`` product lives in registers)
FMA_MAX_ROWS = 4
#: the rows of tl.dot's smallest tile (the tensor cores' m16n8k16)
DOT_MIN_ROWS = 16
#: fewest K blocks per split piece (each piece's partial is a round trip through L2)
MIN_K_BLOCKS_PER_SPLIT = 2
METHODS = ("fma", "dot")


def decode_rows(M: int, method: str) -> int:
    """``ROWS``, the kernel's row tile for ``M`` rows: M rounded up to a power of two, at least 16
    for ``tl.dot``."""
    rows = triton.next_power_of_2(max(M, 1))
    return max(rows, DOT_MIN_ROWS) if method == "dot" else rows


def decode_method(M: int) -> str:
    """The default method: ``tl.dot`` at every M (the FMAs were no faster: PERF_NOTES 44)."""
    return "dot"


def decode_splits(n_blocks: int, k_blocks: int, num_sms: int) -> int:
    """K pieces per column block: as many as keep the programs within one per SM (a pipelined
    program streams as fast as the SM takes bytes, and a second wave would run at a fraction of
    the GPU), each piece at least ``MIN_K_BLOCKS_PER_SPLIT`` K blocks; so 1 (no split, no partial
    sums) once the column blocks fill half the SMs.  Measured against fixed splits in PERF_NOTES 44."""
    return max(1, min(num_sms // max(n_blocks, 1), k_blocks // MIN_K_BLOCKS_PER_SPLIT))


@triton.jit
def _accumulate(acc, a, b, SWAP_AB: tl.constexpr, USE_DOT: tl.constexpr, WIDEN: tl.constexpr):
    """One K block's products added to ``acc``: C^T's tile when ``SWAP_AB``, else C's."""
    if SWAP_AB:
        return tl.dot(tl.trans(mma_operand(b, WIDEN)), tl.trans(mma_operand(a, WIDEN)), acc)
    elif USE_DOT:
        return tl.dot(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc)
    else:  # each row's products with the weight block, summed over K in fp32
        return acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)


@triton.jit(do_not_specialize=[*configs.ROWS, "split_request"])  # M only masks rows: one compile per ROWS
def _decode_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    partial_ptr,  # fp32 [n_blocks * S * ROWS * BLOCK_N]: one slot per piece
    count_ptr,  # int32 [n_blocks]: pieces arrived per column block; zero, and left zero
    M, N, K,
    split_request,  # the caller's split_k (-1: the default rule): only a key of the tuning cache
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr,  # ROWS: M rounded up (named as the other kernels' rows, for the configs' checks)
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SWAP_AB: tl.constexpr,  # tl.dot as C^T's tile (a config's choice; only with USE_DOT)
    USE_DOT: tl.constexpr, WIDEN: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
):
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    num_splits = tl.num_programs(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N  # wrapped: always a real column, never stored
    offs_k = tl.arange(0, BLOCK_K)
    row_ok = offs_m < M

    # this piece's K range (the last may be shorter, or empty: its sum is then zero)
    per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), num_splits) * BLOCK_K
    k_start = split * per_split
    k_end = tl.minimum(k_start + per_split, K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    # SWAP_AB: C^T = B^T A^T, the weight's columns on the MMA's wide side (wgmma's 64 rows on Hopper)
    acc = tl.zeros((BLOCK_N, BLOCK_M) if SWAP_AB else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_end, BLOCK_K):
        k_ok = offs_k < k_end - k
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)  # padding rows read nothing
        b = tl.load(b_ptrs, mask=k_ok[:, None], other=0.0)
        acc = _accumulate(acc, a, b, SWAP_AB, USE_DOT, WIDEN)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if SWAP_AB:
        acc = tl.trans(acc)  # back to C's tile, once, before the epilogue

    if num_splits > 1:
        tile = offs_m[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        slots = partial_ptr + pid_n.to(tl.int64) * num_splits * (BLOCK_M * BLOCK_N)
        tl.store(slots + split * (BLOCK_M * BLOCK_N) + tile, acc, mask=row_ok[:, None])
        tl.debug_barrier()  # every thread's stores are issued before the count goes up...
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")  # ...and visible with it
        last = arrived == num_splits - 1
        if last:
            tl.atomic_xchg(count_ptr + pid_n, 0, sem="relaxed", scope="gpu")  # left zero for the next launch
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(0, num_splits):  # split order, whichever piece came last: deterministic
                acc += tl.load(slots + s * (BLOCK_M * BLOCK_N) + tile, mask=row_ok[:, None], other=0.0,
                               cache_modifier=".cg")
    else:
        last = True
    if last:
        bias = load_bias(bias_ptr, pid_n * BLOCK_N, N, BLOCK_N, HAS_BIAS)
        acc = bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
        store_tile_masked(acc, c_ptr, 0, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


def _cfg(rows, bn, bk, stages, warps, swap=False):
    return triton.Config({"BLOCK_M": rows, "BLOCK_N": bn, "BLOCK_K": bk, "SWAP_AB": swap}, num_stages=stages,
                         num_warps=warps)


def decode_configs(rows: int, method: str, gpu: bool | None = None):
    """The configs a ``ROWS``-row launch tunes over.  FMA: the product ``ROWS x BLOCK_K x BLOCK_N``
    is in registers, so its blocks shrink as rows grow (about 8K products per program); tl.dot: a
    few column/K shapes, pipelined (``num_stages``) so each SM keeps tens of KB of weight in flight,
    first the swapped ones (``SWAP_AB``: 64 weight columns fill the MMA's 64-row side, where ``ROWS``
    of 16 or 32 tokens would run Hopper's older ``mma.sync``; measured in PERF_NOTES 57)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return [_cfg(rows, 32, 32, 1, 4, swap=method == "dot")]
    if method == "fma":
        k_block = max(16, 128 // rows)
        return [_cfg(rows, 64, k_block, 3, 4), _cfg(rows, 32, 2 * k_block, 3, 4), _cfg(rows, 128, k_block, 3, 8),
                _cfg(rows, 16, 4 * k_block, 3, 2)]
    return [_cfg(rows, 64, 128, 4, 4, swap=True), _cfg(rows, 64, 256, 3, 4, swap=True),
            _cfg(rows, 64, 128, 4, 4), _cfg(rows, 32, 256, 3, 4), _cfg(rows, 128, 128, 3, 4),
            _cfg(rows, 64, 256, 3, 4), _cfg(rows, 16, 256, 4, 4)]


#: the tuning key: the exact weight shape and layout (a model has a few), the rows by their TunedKernel
DECODE_KEY = ["N", "K", "split_request", "stride_bk", "stride_bn", "HAS_BIAS", "ACTIVATION"]
_TUNED: dict = {}


def _tuned(rows: int, method: str) -> configs.TunedKernel:
    """The TunedKernel of ``rows`` rows by ``method`` (one per row count: M is bucketed by ROWS)."""
    tuned = _TUNED.get((rows, method))
    if tuned is None:
        tuned = _TUNED[rows, method] = configs.TunedKernel(_decode_kernel, decode_configs(rows, method),
                                                          key=DECODE_KEY, variant=f"-{method}{rows}")
    return tuned


_KEPT = launches.LaunchCache()
POINTER_SOURCES = {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out", "bias_ptr": "bias"}


def matmul_decode(a, b, *, activation=None, bias=None, method=None, split_k=None):
    """``activation(a @ b + bias)`` for ``M <= 64`` rows of ``a``: each program reads ``BLOCK_N``
    columns of ``b`` once for every row.  Same contract as :func:`gemm_kernels.matmul` otherwise
    (any strides, fp16/bf16/fp32), forward only.  ``method``: ``"fma"`` or ``"dot"`` (default
    :func:`decode_method`); ``split_k``: K pieces per column block (default :func:`decode_splits`; at
    most one per K block: more ask for that).
    Deterministic: split pieces are added in split order."""
    key = None
    if launches.keeping():
        key = launches.call_key((a, b, bias), (activation, method, split_k))
        out = _KEPT.run(key, a=a, b=b, bias=bias)
        if out is not None:
            return out
    a, b, bias = checks.resolve_lazy_views(a, b, bias)
    bias, _ = checks.check_matmul_inputs(a, b, "grouped", 1, activation, bias)
    M, K = a.shape
    N = b.shape[1]
    if M > DECODE_MAX_ROWS:
        raise ValueError(f"matmul_decode takes at most {DECODE_MAX_ROWS} rows of a, got {M}: call matmul_auto "
                         "(or matmul), whose tiles waste nothing at that height")
    if method is None:
        method = decode_method(M)
    elif method not in METHODS:
        raise ValueError(f"method must be one of {METHODS} (or None for the default), got {method!r}")
    if method == "fma" and M > FMA_MAX_ROWS:
        raise ValueError(f"method='fma' takes at most {FMA_MAX_ROWS} rows (its product lives in registers), "
                         f"got {M}: use method='dot' (the default)")
    if split_k is not None:  # past K (more than the K blocks) it asks for one piece per K block: so many
        split_k = min(checks.check_int(split_k, "split_k"), max(a.shape[1], 1))  # (int32 for the kernel)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return c
    if K == 0:  # like torch: an empty sum is zero (then bias and activation)
        acc = torch.zeros((M, N), device=a.device, dtype=torch.float32)
        return activation_ref(acc if bias is None else acc + bias.float(), activation).to(a.dtype)
    rows = decode_rows(M, method)
    tuned = _tuned(rows, method)

    def splits(block_n, block_k):
        if split_k is not None:
            return min(split_k, cdiv(K, block_k))  # more pieces than K blocks would only add empty ones
        return decode_splits(cdiv(N, block_n), cdiv(K, block_k), runtime.num_sms())

    def grid(meta):
        return cdiv(N, meta["BLOCK_N"]), splits(meta["BLOCK_N"], meta["BLOCK_K"])

    shapes = [(cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_K"]) for cfg in tuned.configs]
    slots = max(cdiv(N, bn) * splits(bn, bk) * rows * bn for bn, bk in shapes)
    blocks = max(cdiv(N, bn) for bn, _ in shapes)
    device = a.device

    def workspace():  # per call: the buffers are kept per stream
        partials, counts = _workspace(slots, blocks, device)
        return {"partial_ptr": partials, "count_ptr": counts}

    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, **workspace(),
                M=M, N=N, K=K, split_request=-1 if split_k is None else split_k,
                stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
                stride_cm=c.stride(0), stride_cn=c.stride(1),
                USE_DOT=method == "dot", WIDEN=widen_for_dot(a.dtype), HAS_BIAS=bias is not None,
                ACTIVATION=activation)
    if key is not None:  # the tuned config's split: unsplit, a kept launch needs no per-call workspace
        config = tuned.config_for(grid, **args)  # tunes a new key (launching the kernel) first
        if config is not None and splits(config.kwargs["BLOCK_N"], config.kwargs["BLOCK_K"]) == 1:
            workspace = None  # (under a CUDA graph, each call's fresh counts would be a zero-fill node)
    launches.launch_and_keep(_KEPT, key, tuned, grid, args, c, POINTER_SOURCES, workspace=workspace)
    return c


def _workspace(slots: int, blocks: int, device: torch.device):
    """split-K's partial-sum slots and arrival counts, in buffers of decode's own."""
    return splitk_workspace(slots, blocks, device, owner="decode")
