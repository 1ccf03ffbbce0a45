"""FP8 GEMM with scales: ``scaled_mm(a, b, scale_a, scale_b)`` and ``quantize_fp8``.

An fp8 number has 3 (e4m3) or 2 (e5m2) mantissa bits and a narrow range, so a tensor is stored
as fp8 values times fp32 *scales*: ``x ~ q * scale``.  The contract is ``torch._scaled_mm``'s:
``out = (a * scale_a) @ (b * scale_b) (+ bias)`` in ``out_dtype``, with ``a [M, K]`` row-major
and ``b [K, N]`` column-major (``W.t()`` of an nn.Linear weight ``W [N, K]``): fp8 wgmma reads
both operands K-major from shared memory, which that layout gives without a transpose.

Three granularities, told apart by the scales' shapes (``SCALINGS``):
``tensor``  one scale each (numel 1): applied once, in the epilogue;
``row``     ``scale_a [M, 1]`` per token, ``scale_b [1, N]`` per channel: the epilogue too;
``block``   ``scale_a [M, K/128]`` (1x128 groups) and ``scale_b [K/128, ceil(N/128)]`` (128x128
            blocks), DeepSeek-V3's recipe: the scale changes every 128 values of K, so each K
            block's partial product is scaled and added to the fp32 accumulator *in the K loop*.

Accumulation.  Hopper's fp8 wgmma adds its products in a narrower accumulator than fp32 (the
error grows with K; notebook 10 measures it).  Triton's ``max_num_imprecise_acc`` bounds how many
K elements are summed there before the partial sum is added to a true fp32 accumulator: the
"promotion" DeepGEMM does every 128.  ``promote_every`` sets it (32, 64 or 128);
``use_fast_accum=True`` never promotes, as torch's flag of that name.  Block scaling promotes
every block by construction.

Two kernels.  On Hopper, with TMA-readable inputs, promoting every 128 or never, ``scaled_mm``
runs ``matmul_ws``'s warp-specialized kernel: one consumer warpgroup adds while the other's wgmmas
run (PERF_NOTES 34).  Otherwise (Ada, the interpreter, ``promote_every`` 32 or 64) it runs
``_scaled_mm_kernel`` below, one program per tile, TMA or pointer loads.  ``scaled_mm_ref`` is
the float64 reference (scales multiply the product, as the kernels apply them); ``quantize_fp8``
saturates (no inf, no NaN from a finite input) and gives an all-zero block the scale 1; a NaN or
inf affects its own element only.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from . import checks, configs, launches, matmul_ws
from .epilogue import bias_and_activation, dot_promoted, load_bias, store_tile_masked
from .tiles import tile_coords
from .tma import tma_strides

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
REF_OUT_DTYPES = (*OUT_DTYPES, torch.float64)  # the references' (float64 for error measurements)
#: the block edge of block-wise scaling (1x128 on a, 128x128 on b)
SCALE_BLOCK = 128
SCALINGS = ("tensor", "row", "block")
#: K elements summed on the tensor cores before an fp32 add, by default (DeepGEMM's choice)
PROMOTE_EVERY = 128
PROMOTE_CHOICES = (32, 64, 128)  # multiples of wgmma's K step (32 for fp8), at most BLOCK_K
_SCALING_CODE = {name: i for i, name in enumerate(SCALINGS)}
_SCALE_BLOCK = tl.constexpr(SCALE_BLOCK)


# ----------------------------------------------------------------------------- device side
@triton.jit
def _load_tiles(a_src, b_src, off_m, off_n, off_k, offs_m, offs_n, K, stride_am, stride_bn,
                USE_TMA: tl.constexpr, BLOCK_K: tl.constexpr):
    """The K block at ``off_k`` of this tile's A rows and B columns.  B is read as the [N, K]
    array it is and transposed as a view: its K-major order is what fp8 wgmma wants."""
    if USE_TMA:
        a = a_src.load([off_m, off_k])
        b = b_src.load([off_n, off_k]).T
    else:
        offs_k = off_k + tl.arange(0, BLOCK_K)
        a = tl.load(a_src + offs_m[:, None] * stride_am + offs_k[None, :], mask=offs_k[None, :] < K, other=0.0)
        b = tl.load(b_src + offs_n[None, :] * stride_bn + offs_k[:, None], mask=offs_k[:, None] < K, other=0.0)
    return a, b


@triton.jit
def _tile_amax(acc, amax_ptr, off_m, off_n, M, N, OUT_DTYPE: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """atomic max of this tile's largest finite |out| (as stored in OUT_DTYPE) into ``amax_ptr``
    (fp8_training.scaled_mm_amax): the next quantization's amax, with no second pass over C."""
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    mags = tl.abs(acc.to(OUT_DTYPE).to(tl.float32))
    keep = (rows[:, None] < M) & (cols[None, :] < N) & (mags < float("inf"))  # NaN and inf are skipped
    tl.atomic_max(amax_ptr, tl.max(tl.where(keep, mags, 0.0)))  # all >= 0: float max as int max


@triton.jit
def _scaled_mm_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, bias_ptr,
    M, N, K,
    stride_am, stride_bn, stride_cm, stride_sam, stride_sak, stride_sbk, stride_sbn,
    SCALING: tl.constexpr,  # 0 tensor, 1 row, 2 block (SCALINGS)
    PROMOTE: tl.constexpr,  # K elements per tensor-core partial sum (None: all of K, fast accumulation)
    USE_TMA: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    amax_ptr=None, HAS_AMAX: tl.constexpr = False,  # fp8_training.scaled_mm_amax's epilogue
):
    pid_m, pid_n = tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), True, GROUP_SIZE_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = (off_m + tl.arange(0, BLOCK_M)) % M  # wrapped rows/columns are never stored
    offs_n = (off_n + tl.arange(0, BLOCK_N)) % N
    if USE_TMA:
        a_src = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_src = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        a_src = a_ptr
        b_src = b_ptr
    bias = load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(0, tl.cdiv(K, BLOCK_K)):
        a, b = _load_tiles(a_src, b_src, off_m, off_n, ki * BLOCK_K, offs_m, offs_n, K, stride_am, stride_bn,
                           USE_TMA, BLOCK_K)
        if SCALING == 2:
            # this K block's scales: one per row of A, one per 128 columns of B.  The block's
            # partial product starts from zero, is scaled, then added in fp32: a promotion per block.
            kb = ki * BLOCK_K // _SCALE_BLOCK
            sa = tl.load(sa_ptr + offs_m * stride_sam + kb * stride_sak)
            sb = tl.load(sb_ptr + kb * stride_sbk + (offs_n // _SCALE_BLOCK) * stride_sbn)
            acc += tl.dot(a, b) * sa[:, None] * sb[None, :]  # one scale, then the other, as below
        else:
            acc = dot_promoted(a, b, acc, PROMOTE)

    # One scale, then the other: their product can overflow float32 where the result does not
    # (two scales of 2e19 and a sum of 0.5: 2e38, not inf; a zero sum stays 0, not NaN).
    if SCALING == 0:
        acc = acc * tl.load(sa_ptr) * tl.load(sb_ptr)
    elif SCALING == 1:
        sa = tl.load(sa_ptr + offs_m * stride_sam)
        sb = tl.load(sb_ptr + offs_n * stride_sbn)
        acc = acc * sa[:, None] * sb[None, :]
    acc = bias_and_activation(acc, bias, HAS_BIAS, None)
    if HAS_AMAX:
        _tile_amax(acc, amax_ptr, off_m, off_n, M, N, c_ptr.dtype.element_ty, BLOCK_M, BLOCK_N)
    store_tile_masked(acc, c_ptr, off_m, off_n, M, N, stride_cm, 1, BLOCK_M, BLOCK_N)


_scaled_mm_tuned = configs.TunedKernel(_scaled_mm_kernel, configs.fp8_configs(),
                                       key=["M", "N", "K", "SCALING", "PROMOTE", "USE_TMA", "HAS_BIAS"])
#: ``scaled_mm(..., batch_invariant=True)`` off Hopper: one config for every M
_scaled_mm_fixed = configs.TunedKernel(_scaled_mm_kernel, configs.fp8_batch_invariant_configs(),
                                       key=["M", "N", "K", "SCALING", "PROMOTE", "USE_TMA", "HAS_BIAS"],
                                       variant="-batch-invariant")
#: the warp-specialized kernel's tile in the batch-invariant mode (block scales always run 128x128)
BATCH_INVARIANT_WS_TILE = "128x256"


# ----------------------------------------------------------------------------- host side: checks
def _name(dtype) -> str:
    return checks.dtype_name(dtype)


def require_fp8(what: str) -> None:
    """RuntimeError unless this GPU multiplies fp8 (sm_89+) or the interpreter runs."""
    if not runtime.supports_fp8():
        raise RuntimeError(runtime.missing_feature(what, "fp8 tensor cores (Ada sm_89, Hopper sm_90 or newer)",
                                                   "Or read the committed GPU results in notebook 10.",
                                                   interpreter_has_it=True))


def _check_fp8(x, name: str) -> None:
    checks.check_tensor(x, name, 2, dtypes=FP8_DTYPES)


def _check_accumulation(use_fast_accum, promote_every) -> None:
    """``use_fast_accum`` a bool and ``promote_every`` an int of PROMOTE_CHOICES (128.0 compares
    equal to 128 but would reach the kernel as a float constexpr)."""
    if not isinstance(use_fast_accum, bool):
        raise TypeError(f"use_fast_accum must be True or False, got {use_fast_accum!r}")
    if checks.require_int(promote_every, "promote_every") not in PROMOTE_CHOICES:
        raise ValueError(f"promote_every must be one of {PROMOTE_CHOICES} (K elements per tensor-core partial sum), "
                         f"got {promote_every!r}")


def _check_dtype(value, name: str, choices) -> None:
    """TypeError unless ``value`` is one of the torch dtypes ``choices`` (a spelling such as
    ``"e4m3"`` is named, not looked up: every fp8 entry point takes torch dtypes only)."""
    if not isinstance(value, torch.dtype) or value not in choices:
        raise TypeError(f"{name} must be one of {', '.join(map(_name, choices))} (a torch.dtype), got {value!r}")


def check_scaled_mm_operands(a, b, scale_a, scale_b, out_dtype, bias, out_dtypes=OUT_DTYPES) -> str:
    """What ``scaled_mm``'s arguments must be whoever computes the product (its kernels or
    :func:`scaled_mm_ref`): fp8 ``a [M, K]``, ``b [K, N]`` with K a multiple of 16, scales of one
    scaling, ``bias [N]``, all on the kernels' device; returns the scaling.  Not the layouts."""
    _check_fp8(a, "a")
    _check_fp8(b, "b")
    M, K = a.shape
    if b.shape[0] != K:
        raise ValueError(f"a is {M}x{K} but b is {b.shape[0]}x{b.shape[1]}: the inner dimensions must match "
                         f"({K} != {b.shape[0]})")
    N = b.shape[1]
    checks.check_same({"a": a, "b": b}, "device")
    if K % 16:
        raise ValueError(f"K = {K} must be a multiple of 16 (16-byte rows of fp8, as torch._scaled_mm requires)")
    _check_dtype(out_dtype, "out_dtype", out_dtypes)
    scaling = _scaling_of(scale_a, scale_b, M, N, K)
    checks.check_same({"a": a, "scale_a": scale_a, "scale_b": scale_b}, "device")
    if bias is not None:
        checks.check_tensor(bias, "bias", 1)
        if bias.shape[0] != N:
            raise ValueError(f"bias must have shape [N] = [{N}], got {list(bias.shape)}")
        checks.check_same({"a": a, "bias": bias}, "device")
    return scaling


def check_scaled_mm_inputs(a, b, scale_a, scale_b, out_dtype, bias, promote_every, use_fast_accum=False) -> str:
    """Every check of ``scaled_mm``; returns the scaling its scales' shapes ask for."""
    scaling = check_scaled_mm_operands(a, b, scale_a, scale_b, out_dtype, bias)
    M, K = a.shape
    N = b.shape[1]
    if a.stride(1) != 1 and K > 1:
        raise ValueError(f"a must be row-major (a.stride(1) == 1), got strides {tuple(a.stride())}: pass a.contiguous()")
    if b.stride(0) != 1 and K > 1:
        raise ValueError(
            f"b must be column-major (b.stride(0) == 1, i.e. b.t() contiguous), got strides {tuple(b.stride())}: "
            "fp8 tensor cores read B K-major. For an nn.Linear weight W [N, K] pass W.t(); otherwise "
            "b.t().contiguous().t()")
    _check_accumulation(use_fast_accum, promote_every)
    checks.check_no_grad({"a": a, "b": b, "scale_a": scale_a, "scale_b": scale_b, "bias": bias})
    for name, t in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        checks.check_span(t, name)
    if M * N - 1 > checks.MAX_INDEX or max(M, N) * K - 1 > checks.MAX_INDEX:
        raise ValueError(f"{M}x{N}x{K} needs offsets past 32 bits; split the product")
    return scaling


def _scaling_of(scale_a, scale_b, M, N, K) -> str:
    """The granularity the scales' shapes name, or a ValueError listing the accepted pairs."""
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of float32 scales, got {type(s).__name__}")
        checks.check_strided(s, name)
        if s.dtype != torch.float32:
            raise TypeError(f"{name} must be float32 (the dequantization scale: x = q * scale), got {_name(s.dtype)}")
    kb, nb = triton.cdiv(K, SCALE_BLOCK), triton.cdiv(N, SCALE_BLOCK)
    sa, sb = tuple(scale_a.shape), tuple(scale_b.shape)
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return "tensor"
    if sa == (M, 1) and sb == (1, N):
        return "row"
    if scale_a.dim() == 2 and scale_b.dim() == 2 and sa[0] == M and sb[1] == nb:
        if K % SCALE_BLOCK:
            raise ValueError(f"block-wise scales need K to be a multiple of {SCALE_BLOCK} (one scale per "
                             f"{SCALE_BLOCK} values of K), got K = {K}")
        if sa == (M, kb) and sb == (kb, nb):
            return "block"
    raise ValueError(
        f"scale_a {list(sa)} and scale_b {list(sb)} name no scaling of a [{M}, {K}] @ b [{K}, {N}]; accepted: "
        f"tensor-wise (one element each), row-wise (scale_a [{M}, 1], scale_b [1, {N}]) or block-wise "
        f"(scale_a [{M}, {kb}]: 1x{SCALE_BLOCK} groups of a; scale_b [{kb}, {nb}]: {SCALE_BLOCK}x{SCALE_BLOCK} "
        f"blocks of b; K a multiple of {SCALE_BLOCK})")


# ----------------------------------------------------------------------------- host side: the launcher
def kernel_args(a, b, c, scale_a, scale_b, bias, scaling: str, promote, use_tma: bool) -> dict:
    """The kernel's arguments for checked inputs (the launcher's and the compile view's)."""
    M, K = a.shape
    two_d = lambda s: s.reshape(1, 1) if scaling == "tensor" else s  # noqa: E731
    sa, sb = two_d(scale_a), two_d(scale_b)
    return dict(a_ptr=a, b_ptr=b, c_ptr=c, sa_ptr=sa, sb_ptr=sb, bias_ptr=bias if bias is not None else c,
                M=M, N=b.shape[1], K=K, stride_am=a.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0),
                stride_sam=sa.stride(0), stride_sak=sa.stride(1), stride_sbk=sb.stride(0), stride_sbn=sb.stride(1),
                SCALING=_SCALING_CODE[scaling], PROMOTE=promote, USE_TMA=use_tma, HAS_BIAS=bias is not None)


def scaled_mm(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None, use_fast_accum=False,
              promote_every=PROMOTE_EVERY, batch_invariant=False):
    """``(a * scale_a) @ (b * scale_b) + bias`` in ``out_dtype``, from fp8 ``a`` and ``b``.

    a: [M, K] row-major, b: [K, N] column-major (``W.t()``), e4m3 or e5m2; K a multiple of 16.
    Scales are float32 dequantization factors (``x = q * scale``, as :func:`quantize_fp8`
    returns them), tensor-, row- or block-wise (module docstring).  ``use_fast_accum``: never
    promote the tensor cores' partial sums to fp32 (faster, less accurate at long K);
    ``promote_every``: the interval otherwise.  ``batch_invariant``: one tile and one K loop for
    every M, so a row's bits do not depend on the rows beside it (as ``matmul_auto``'s mode; the
    tile is otherwise picked from M).  Forward only (no autograd)."""
    checks.require_flag(batch_invariant, "batch_invariant")
    key = None
    if launches.keeping():
        key = launches.call_key((a, b, scale_a, scale_b, bias),
                                (out_dtype, use_fast_accum, promote_every, batch_invariant))
        out = _KEPT.run(key, a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias)  # checked before
        if out is None and key is not None:
            out = matmul_ws.run_kept_scaled_mm(key, a, b, scale_a, scale_b, bias)
        if out is not None:
            return out
    require_fp8("scaled_mm")
    # the kernels read memory, not torch's lazy negation (z.conj().imag): every tensor argument
    a, b, scale_a, scale_b, bias = checks.resolve_lazy_views(a, b, scale_a, scale_b, bias)
    scaling = check_scaled_mm_inputs(a, b, scale_a, scale_b, out_dtype, bias, promote_every, use_fast_accum)
    strided_bias = bias is not None and bias.stride(0) != 1
    if strided_bias:  # the kernel reads bias_ptr + n
        bias = bias.contiguous()
    M, K = a.shape
    N = b.shape[1]
    use_tma = runtime.supports_tma() and tma_strides(a, (0, 1)) is not None and tma_strides(b, (1, 0)) is not None
    if (M and N and K and use_tma and runtime.supports_wgmma() and (use_fast_accum or promote_every == PROMOTE_EVERY)
            and matmul_ws.tma_readable(a, b)):
        tile = BATCH_INVARIANT_WS_TILE if batch_invariant and scaling != "block" else None
        return matmul_ws.scaled_mm_ws(a, b, scale_a, scale_b, scaling, out_dtype=out_dtype, bias=bias,
                                      use_fast_accum=use_fast_accum, key=key, strided_bias=strided_bias, tile=tile,
                                      split_k=1 if batch_invariant else None)  # one K loop: a row's bits, any M
    c = torch.empty((M, N), device=a.device, dtype=out_dtype)
    if M == 0 or N == 0:
        return c
    if K == 0:  # an empty sum, then the bias
        return c.copy_(bias.expand(M, N) if bias is not None else torch.zeros_like(c))
    if use_tma:
        runtime.ensure_tma_allocator()
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    args = kernel_args(a, b, c, scale_a, scale_b, bias, scaling, None if use_fast_accum else promote_every, use_tma)
    tuned = _scaled_mm_fixed if batch_invariant else _scaled_mm_tuned
    launches.launch_and_keep(_KEPT, key, tuned, grid, args, c, _SOURCES, uses_tma=use_tma)
    return c


_KEPT = launches.LaunchCache()
_SOURCES = {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out", "sa_ptr": "scale_a", "sb_ptr": "scale_b", "bias_ptr": "bias"}


# ----------------------------------------------------------------------------- quantization and the reference
def _check_any_device(x, name: str, ndim: int) -> None:
    """Quantization is plain torch: any device, any float dtype (the kernels' device rule does not
    apply), but values in strided memory: not a sparse tensor, nor a meta one (a shape only)."""
    checks.check_strided(x, name)
    check_has_values(x, name)
    if x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)} ({x.dim()}-D)")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise TypeError(f"{name} has dtype {_name(x.dtype)}; quantize_fp8 takes float16, bfloat16, float32 or float64")


_SAME_WIDTH_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def nan_bits(x: torch.Tensor) -> torch.Tensor:
    """uint8 of x's shape: the fp8 NaN S.1111111 (e4m3fn and e5m2 alike, as torch's cast stores it)
    with the sign bit of x's element, read from x's bits: torch's casts may drop a NaN's sign
    (float16 -> float32 in its scalar path, anything -> bfloat16)."""
    return torch.where(x.view(_SAME_WIDTH_INTS[x.element_size()]) < 0, 0xFF, 0x7F).to(torch.uint8)


def check_has_values(x, name: str) -> None:
    """ValueError for a tensor on the meta device: quantization reads values, not a shape."""
    if x.is_meta:
        raise ValueError(f"{name} is on the meta device (a shape without values): quantization reads the values; "
                         f"pass {name} on a real device")


def fp8_max(dtype) -> float:
    """The largest finite value of an fp8 dtype (448 for e4m3, 57344 for e5m2)."""
    return float(torch.finfo(dtype).max)


def _block_shape(granularity, shape) -> tuple[int, int]:
    rows, cols = shape
    named = {"tensor": (rows, cols), "row": (1, cols), "column": (rows, 1)}
    if isinstance(granularity, str):
        if granularity not in named:
            raise ValueError(f"granularity must be 'tensor', 'row', 'column' or a block (rows, cols), got {granularity!r}")
        return tuple(max(1, n) for n in named[granularity])
    if (not isinstance(granularity, (tuple, list)) or len(granularity) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in granularity)):
        raise ValueError(f"a block granularity must be two positive ints (rows, cols), e.g. (1, 128), got {granularity!r}")
    # a block longer than x along a side is one block covering that side (ceil(rows / bm) = 1 scale):
    # clamped, so nothing is padded past x (2**40 rows padded to 2**40 asked for terabytes)
    return min(granularity[0], max(rows, 1)), min(granularity[1], max(cols, 1))


def _scale_grid(granularity, shape) -> tuple[int, int]:
    """The scales' 2-D shape: one per block, and for a named granularity the shape it promises
    even when ``shape`` is empty ([1, 1] tensor-wise, [M, 1] row-wise, [1, N] column-wise)."""
    bm, bk = _block_shape(granularity, shape)
    rows, cols = shape
    named = {"tensor": (1, 1), "row": (rows, 1), "column": (1, cols)}
    return named[granularity] if isinstance(granularity, str) else (triton.cdiv(rows, bm), triton.cdiv(cols, bk))


def expand_scale(scale: torch.Tensor, shape, granularity) -> torch.Tensor:
    """The per-element scale of a ``shape`` tensor quantized with ``granularity``."""
    bm, bk = _block_shape(granularity, shape)
    full = scale.reshape(_scale_grid(granularity, shape))
    return full.repeat_interleave(bm, 0).repeat_interleave(bk, 1)[: shape[0], : shape[1]]


def quantize_fp8(x, granularity="tensor", *, dtype=torch.float8_e4m3fn):
    """``(q, scale)`` with ``x ~ q * scale``: q in fp8 (x's layout kept), scale float32.

    granularity: ``"tensor"`` (scale of shape [1]... a 0-d tensor), ``"row"`` ([M, 1]),
    ``"column"`` ([1, N]: per output channel of a [K, N] b), or a block ``(rows, cols)``:
    ``(1, 128)`` for activations, ``(128, 128)`` for weights (scale [ceil(M/rows), ceil(N/cols)]; a
    block larger than x is one block covering it).
    Each block's largest finite magnitude maps to the format's maximum; values are clamped there
    (saturation: a finite value never becomes inf or NaN) and rounded to nearest even.  An
    all-zero (or empty) block gets the scale 1; a scale never underflows to 0 (it is at least
    float32's smallest normal number).  A NaN or inf changes only its own element: NaN stays NaN
    with its sign bit (:func:`nan_bits`), inf stays inf in e5m2 and becomes +NaN in e4m3fn, which
    has no inf (torch's cast saturates it).
    Plain torch ops (quantization is memory-bound and not this course's subject)."""
    _check_any_device(x, "x", 2)
    _check_dtype(dtype, "dtype", FP8_DTYPES)
    (x,) = checks.resolve_lazy_views(x)  # its bits are read below (nan_bits)
    bm, bk = _block_shape(granularity, x.shape)
    grid = _scale_grid(granularity, x.shape)
    rows, cols = x.shape
    xf = x.double() if x.dtype == torch.float64 else x.float()  # float64 values past float32's range: refused below
    padded = torch.nn.functional.pad(xf, (0, grid[1] * bk - cols, 0, grid[0] * bm - rows))
    blocks = padded.reshape(grid[0], bm, grid[1], bk)
    finite = torch.where(torch.isfinite(blocks), blocks.abs(), torch.zeros_like(blocks))
    amax = finite.amax(dim=(1, 3))
    fmax = fp8_max(dtype)
    f32 = torch.finfo(torch.float32)
    if amax.numel() and amax.max() > f32.max * fmax:  # float64 only: no float32 scale reaches it
        raise ValueError(f"x holds {amax.max().item():.3g}, past what an fp8 value times a float32 scale "
                         f"represents ({f32.max * fmax:.3g} for {_name(dtype)}): rescale x first")
    # a tensor divisor: torch's CUDA division by a Python number multiplies by its reciprocal, an ulp
    # off amax / fmax at times (the CPU divides): the scale would depend on the device
    scale = torch.where(amax > 0, (amax / amax.new_tensor(fmax)).clamp(f32.tiny, f32.max), torch.ones_like(amax)).float()
    q = xf / expand_scale(scale.to(xf.dtype), x.shape, granularity)
    q = torch.where(torch.isfinite(xf), q.clamp(-fmax, fmax), xf)  # saturate finite values only
    if dtype == torch.float8_e4m3fn:  # no inf: torch's cast would saturate it to 448, hiding it
        q = torch.where(torch.isinf(xf), torch.full_like(q, float("nan")), q)
    out = torch.empty_like(x, dtype=dtype)  # keeps x's layout (a column-major b stays column-major)
    out.copy_(q)
    bits = out.view(torch.uint8)
    bits.copy_(torch.where(torch.isnan(x), nan_bits(x), bits))  # a NaN keeps its sign
    if granularity == "tensor":
        scale = scale.reshape(())
    return out, scale


def dequantize(q, scale, granularity) -> torch.Tensor:
    """``q * scale`` in float64 (the values an fp8 GEMM multiplies)."""
    return q.double() * expand_scale(scale.double(), q.shape, granularity)


def granularities(scaling: str) -> tuple:
    """The ``quantize_fp8`` granularities of a and of b (as ``W.t()``) for one of ``SCALINGS``."""
    return {"tensor": ("tensor", "tensor"), "row": ("row", "column"),
            "block": ((1, SCALE_BLOCK), (SCALE_BLOCK, SCALE_BLOCK))}[scaling]


def scaled_mm_ref(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, bias=None):
    """Plain-torch reference in float64: each scale block's product of the fp8 values, times its
    scales (``scale_a * scale_b``), summed, plus the bias; ``out_dtype`` (``torch.float64`` keeps
    full precision for error measurements).  Scales multiply the *product*, as the kernels and
    cuBLASLt's ``D = scale_a * scale_b * (A @ B)`` (torch._scaled_mm on CUDA) apply them: equal to
    dequantizing first for finite scales; an inf scale gives inf where that product is nonzero
    (dequantizing first, as torch's CPU _scaled_mm does, gives NaN wherever a value is 0).  K = 0
    gives 0 (and the bias) whatever the scales: no product to scale (torch._scaled_mm's CPU too)."""
    scaling = check_scaled_mm_operands(a, b, scale_a, scale_b, out_dtype, bias, REF_OUT_DTYPES)
    a, b, scale_a, scale_b, bias = checks.resolve_lazy_views(a, b, scale_a, scale_b, bias)  # torch cannot negate fp8
    sa, sb = scale_a.double(), scale_b.double()
    if scaling == "block":  # one product per 128 values of K, scaled by its block's scales
        M, K = a.shape
        N = b.shape[1]
        acc = torch.zeros((M, N), dtype=torch.float64, device=a.device)
        for kb in range(K // SCALE_BLOCK):
            ks = slice(kb * SCALE_BLOCK, (kb + 1) * SCALE_BLOCK)
            sb_n = sb[kb].repeat_interleave(SCALE_BLOCK)[:N]
            acc += (a[:, ks].double() @ b[ks].double()) * (sa[:, kb, None] * sb_n[None, :])
    else:  # tensor ([1, 1] each) or row (scale_a [M, 1], scale_b [1, N])
        two_d = (lambda s: s.reshape(1, 1)) if scaling == "tensor" else (lambda s: s)  # noqa: E731
        acc = a.double() @ b.double()
        if a.shape[1]:  # K = 0: an empty sum has no term to scale (0 for a NaN scale, as the kernels give)
            acc = acc * (two_d(sa) * two_d(sb))
    if bias is not None:
        acc = acc + bias.double()
    return acc.to(out_dtype)


# ----------------------------------------------------------------------------- MoE: the grouped product in fp8
def scaled_grouped_mm(x, w, scale_x, scale_w, offs, *, out_dtype=torch.bfloat16, use_fast_accum=False,
                      promote_every=PROMOTE_EVERY, tma=None, check_offs=None):
    """``out[rows of e] = (x * scale_x)[rows of e] @ (w[e] * scale_w[e])``: ``grouped_mm`` in fp8
    with row-wise scales, ``torch._scaled_grouped_mm``'s 2-D x 3-D case.

    x: [T, K] row-major e4m3/e5m2, tokens sorted by expert; w: [E, K, N] column-major per expert
    (``w_nk.transpose(1, 2)`` of [E, N, K] weights); scale_x: float32 [T] (per token); scale_w:
    float32 [E, N] (per expert and output channel); offs: int32 [E], as :func:`grouped_mm`'s (no
    host sync; rows past ``offs[-1]`` are zeros).  The same kernel as ``grouped_mm``, its K loop
    promoting every ``promote_every`` and the scales applied in its epilogue.  Forward only."""
    from . import moe

    # before the kept-launch look-up: its key holds promote, not use_fast_accum ("no" would pass as
    # True, promote_every="bad" under fast accumulation would not be read at all)
    _check_accumulation(use_fast_accum, promote_every)
    promote = None if use_fast_accum else promote_every
    fp8 = (scale_x, scale_w, out_dtype, promote)
    # only tensors a key can stand for (moe._launch_key reads them; scales that need grad are refused below)
    if check_offs is not True and launches.keeping() and launches.call_key((x, w, offs, scale_x, scale_w),
                                                                           (tma, check_offs)) is not None:
        if moe._errors.raised():  # an earlier call's kernel found a bad offs
            moe.raise_pending_offs_error()
        out = moe.kept_forward(x, w, offs, tma, check_offs, fp8)  # checked before with this key
        if out is not None:
            return out
    require_fp8("scaled_grouped_mm")
    if tma is not None and not isinstance(tma, bool):
        raise TypeError(f"tma must be None, True or False, got {tma!r}")
    if check_offs is not None and not isinstance(check_offs, bool):
        raise TypeError(f"check_offs must be None, True or False, got {check_offs!r}")
    check_scaled_grouped_mm_operands(x, w, scale_x, scale_w, offs, out_dtype)
    x, w, scale_x, scale_w, offs = checks.resolve_lazy_views(x, w, scale_x, scale_w, offs)  # as scaled_mm
    fp8 = (scale_x, scale_w, out_dtype, promote)
    K = x.shape[1]
    if x.stride(1) != 1 and K > 1:
        raise ValueError(f"x must be row-major (x.stride(1) == 1), got strides {tuple(x.stride())}: pass x.contiguous()")
    if w.stride(1) != 1 and K > 1:
        raise ValueError(
            f"w must be column-major per expert (w.stride(1) == 1: w = w_nk.transpose(1, 2) of [E, N, K] weights), "
            f"got strides {tuple(w.stride())}: fp8 tensor cores read B K-major")
    for name, s in (("scale_x", scale_x), ("scale_w", scale_w)):
        if s.numel() and s.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension, got strides {tuple(s.stride())}")
    checks.check_no_grad({"x": x, "w": w, "scale_x": scale_x, "scale_w": scale_w})
    return moe._forward(x, w, offs, tma, check_offs, fp8=fp8)


def check_scaled_grouped_mm_operands(x, w, scale_x, scale_w, offs, out_dtype, out_dtypes=OUT_DTYPES) -> None:
    """What ``scaled_grouped_mm``'s arguments must be whoever computes the product (its kernel or
    :func:`scaled_grouped_mm_ref`): ``grouped_mm``'s x, w and offs in fp8 with K a multiple of 16,
    float32 scales [T] and [E, N] on their device, ``out_dtype``.  Not the layouts, nor offs' values."""
    from . import moe

    moe._check_shapes(x, w, offs, dtypes=FP8_DTYPES)
    T, K = x.shape
    E, _, N = w.shape
    if K % 16:
        raise ValueError(f"K = {K} must be a multiple of 16 (16-byte rows of fp8, as torch._scaled_grouped_mm requires)")
    _check_dtype(out_dtype, "out_dtype", out_dtypes)
    for name, s, shape in (("scale_x", scale_x, [T]), ("scale_w", scale_w, [E, N])):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of float32 scales, got {type(s).__name__}")
        checks.check_strided(s, name)
        if s.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {_name(s.dtype)}")
        if list(s.shape) != shape:
            raise ValueError(f"{name} must have shape {shape} (row-wise scales: "
                             f"{'one per token' if name == 'scale_x' else 'one per expert and output channel'}), "
                             f"got {list(s.shape)}")
    checks.check_same({"x": x, "scale_x": scale_x, "scale_w": scale_w}, "device")


def scaled_grouped_mm_ref(x, w, scale_x, scale_w, offs, *, out_dtype=torch.bfloat16):
    """Plain-torch reference in float64: one product per expert, times its rows' and columns'
    scales (the scales multiply the product, as in :func:`scaled_mm_ref`); rows past offs[-1],
    and every row when K = 0, are zeros whatever their scale.  Refuses what ``scaled_grouped_mm``
    refuses, offs' values too."""
    from . import moe

    check_scaled_grouped_mm_operands(x, w, scale_x, scale_w, offs, out_dtype, REF_OUT_DTYPES)
    x, w, scale_x, scale_w, offs = checks.resolve_lazy_views(x, w, scale_x, scale_w, offs)  # torch cannot negate fp8
    moe.check_offs_values(offs.tolist(), x.shape[0])
    out = torch.zeros((x.shape[0], w.shape[2]), dtype=torch.float64, device=x.device)
    sx = scale_x.double()
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].double() @ w[e].double()
        if x.shape[1]:  # K = 0: an empty sum, no term to scale (as in scaled_mm_ref)
            out[start:end] *= sx[start:end, None] * scale_w[e].double()[None, :]
        start = end
    return out.to(out_dtype)


def quantize_experts(w, *, dtype=torch.float8_e4m3fn):
    """MoE weights ``w [E, K, N]`` (as :func:`scaled_grouped_mm` takes them) -> ``(q, scale)``:
    q the same shape, column-major per expert (fp8 wgmma reads it K-major), scale float32
    [E, N], one per expert and output channel."""
    _check_any_device(w, "w", 3)
    _check_dtype(dtype, "dtype", FP8_DTYPES)
    E, K, N = w.shape
    q = torch.empty((E, N, K), dtype=dtype, device=w.device)
    scale = torch.empty((E, N), dtype=torch.float32, device=w.device)
    for e in range(E):  # one expert at a time: a large model's fp32 copy never exists whole
        qe, se = quantize_fp8(w[e], "column", dtype=dtype)
        q[e] = qe.t()
        scale[e] = se.reshape(N)
    return q.transpose(1, 2), scale
