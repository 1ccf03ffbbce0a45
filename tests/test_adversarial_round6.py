"""Adversarial review of the FP8 and dense kernels (issue 50, second pass), each defect at its mechanism.

1. Two scales were multiplied together before they met the accumulator: scales of 2e19 each
   (product 4e38, past float32) turned a result of 2e38 into inf, and a zero sum into NaN.
   Every kernel now applies them one after the other (``acc * sa * sb``).
2. Triton's interpreter read subnormals wrongly where source and target share the exponent width
   (bf16 -> fp32, e5m2 -> fp16): its converter is replaced, for every exact widening, by torch's.
3. ``quantize_fp8_transposed`` stored every NaN as +NaN (0x7F); ``quantize_fp8`` keeps the sign.
4. ``quantize_fp8_transposed_ref`` took float64 past float32's range, complex and sparse inputs the
   kernel refuses: both run one check now.
5. ``quantize_fp8`` with a block larger than the tensor padded to the block (26 TB for 2**40 rows).
6. ``split_k`` past int32 reached Triton as an argument (OverflowError naming no argument).
7. ``pick_launcher(batch_invariant=1)`` was taken as True where ``matmul_auto`` refused it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import DEVICE, matmul_ref, runtime
from gemm_kernels.kernels import decode, fp8
from gemm_kernels.kernels import fp8_training as ft

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
needs_fp8 = pytest.mark.skipif(not runtime.supports_fp8(), reason="needs fp8 tensor cores (sm_89+)")
interpreter_only = pytest.mark.skipif(not runtime.interpreted(), reason="a patch of Triton's CPU interpreter")


def _error(fn, *args, **kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


def _bits(t: torch.Tensor) -> list:
    return t.cpu().view(torch.uint8).tolist()


# ----------------------------------------------------------------------------- 1. scale products
BIG = 2e19  # a float32 scale; two of them multiply to 4e38 > float32's max, but 0.5 * BIG * BIG fits


def _scales(scaling, M, N, K, value):
    shapes = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "block": ((M, K // 128), (K // 128, -(-N // 128)))}
    return tuple(torch.full(s, value, device=DEVICE) for s in shapes[scaling])


def _one_term(M, N, K, a_value, b_value):
    """fp8 a [M, K] and column-major b [K, N] whose product is a_value * b_value everywhere."""
    a, b = torch.zeros(M, K), torch.zeros(N, K)
    a[:, 1], b[:, 1] = a_value, b_value
    return a.to(DEVICE, E4M3), b.to(DEVICE, E4M3).t()


def _amax_out(*args, **kwargs):
    return ft.scaled_mm_amax(*args, **kwargs)[0]


@needs_fp8
@pytest.mark.parametrize("scaling", fp8.SCALINGS)
def test_two_scales_whose_product_overflows_apply_one_after_the_other(scaling):
    M, N, K = 3, 5, 128
    sa, sb = _scales(scaling, M, N, K, BIG)
    a, b = _one_term(M, N, K, 1.0, 0.5)
    expected = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float32)
    assert torch.isfinite(expected).all() and expected.max() > 1e38
    zeros = torch.zeros(M, K, device=DEVICE).to(E4M3)
    for fn in (gk.scaled_mm, _amax_out):
        assert torch.equal(fn(a, b, sa, sb, out_dtype=torch.float32).cpu(), expected.cpu()), (fn.__name__, scaling)
        # a zero sum times two large scales is 0 (their product, inf, made it NaN)
        assert torch.equal(fn(zeros, b, sa, sb, out_dtype=torch.float32).cpu(), torch.zeros(M, N)), fn.__name__
    assert ft.scaled_mm_amax(a, b, sa, sb, out_dtype=torch.float32)[1].item() == expected.max().item()
    # random small values: every result finite and within float32's rounding of the float64 reference
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(M, K, generator=g) * 0.02).to(DEVICE, E4M3)
    b = (torch.randn(N, K, generator=g) * 0.02).to(DEVICE, E4M3).t()
    exact = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    for fn in (gk.scaled_mm, _amax_out):
        got = fn(a, b, sa, sb, out_dtype=torch.float32).double()
        assert torch.isfinite(got).all(), (fn.__name__, got)
        torch.testing.assert_close(got, exact, rtol=1e-5, atol=0)


@needs_fp8
def test_grouped_fp8_scales_apply_one_after_the_other():
    T, K, N = 3, 16, 4
    x = torch.zeros(T, K)
    x[:, 2] = torch.tensor([1.0, 0.5, 0.0])
    w = torch.zeros(2, N, K)
    w[:, :, 2] = 0.5
    x, w = x.to(DEVICE, E4M3), w.to(DEVICE, E4M3).transpose(1, 2)
    sx, sw = torch.full((T,), BIG, device=DEVICE), torch.full((2, N), BIG, device=DEVICE)
    offs = torch.tensor([1, 3], dtype=torch.int32, device=DEVICE)
    expected = fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float32)
    assert torch.isfinite(expected).all() and expected.max() > 1e38 and (expected[2] == 0).all()
    got = gk.scaled_grouped_mm(x, w, sx, sw, offs, out_dtype=torch.float32)
    assert torch.equal(got.cpu(), expected.cpu()), got


# ----------------------------------------------------------------------------- 2. subnormals in the interpreter
#: (source, target) Triton types of every exact widening the kernels use, by their names in triton.language
WIDENINGS = [("bfloat16", "float32"), ("float16", "float32"), ("float8e5", "float16"), ("float8e5", "float32"),
             ("float8e5", "bfloat16"), ("float8e4nv", "float16"), ("float8e4nv", "float32"), ("float8e4nv", "bfloat16")]


@interpreter_only
@pytest.mark.parametrize("src_name, dst_name", WIDENINGS)
def test_the_interpreter_widens_every_bit_pattern_exactly(src_name, dst_name):
    """Every bit pattern of the narrow format, subnormals, infinities and NaNs included, against torch."""
    import triton.language as tl
    from triton.runtime import interpreter

    src, dst = getattr(tl, src_name), getattr(tl, dst_name)
    torch_of = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8e5": E5M2, "fp8e4nv": E4M3}
    width = src.primitive_bitwidth
    bits = np.arange(2**width, dtype=f"uint{width}")
    out = interpreter._convert_float(bits, src, dst, None)
    got = torch.from_numpy(np.asarray(out).view(f"int{dst.primitive_bitwidth}").copy()).view(torch_of[dst.name])
    expected = torch.from_numpy(bits.view(f"int{width}").copy()).view(torch_of[src.name]).to(torch_of[dst.name])
    assert torch.equal(got.isnan(), expected.isnan()), (src, dst)
    number = ~expected.isnan()
    assert torch.equal(got[number], expected[number]) and torch.equal(got[number].signbit(), expected[number].signbit())
    negative = torch.from_numpy(bits >> (width - 1) == 1)  # every sign kept, a NaN's too (torch's casts drop some)
    assert torch.equal(torch.from_numpy(np.asarray(out) >> (dst.primitive_bitwidth - 1) == 1), negative)


def test_bf16_subnormals_are_read_as_themselves():
    v = 1.1020259538958945e-39  # a bf16 subnormal (0x000C)
    a = torch.zeros(2, 16, dtype=torch.bfloat16)
    a[:, 0] = v
    b = torch.zeros(16, 3, dtype=torch.bfloat16)
    b[0] = 1
    a, b = a.to(DEVICE), b.to(DEVICE)
    assert gk.matmul(a, b)[:, 0].float().cpu().tolist() == [v, v]
    bias = torch.full((3,), v, dtype=torch.bfloat16, device=DEVICE)
    assert gk.matmul(torch.zeros_like(a), b, bias=bias)[0].float().cpu().tolist() == [v] * 3


@needs_fp8
def test_subnormal_inputs_quantize_and_multiply_as_their_values():
    x = torch.tensor([[1.1020259538958945e-39, 5e-39, -3e-40, 1e-45]], dtype=torch.bfloat16, device=DEVICE)
    for q, ref in zip(ft.quantize_fp8_transposed(x), ft.quantize_fp8_transposed_ref(x)):
        assert torch.equal(q.cpu().view(torch.uint8) if q.dtype == E4M3 else q.cpu(),
                           ref.cpu().view(torch.uint8) if ref.dtype == E4M3 else ref.cpu())
    qa = torch.zeros(1, 16, dtype=E5M2)
    qa[0, 0], qa[0, 1] = 2**-16, -(2**-15) * 1.5  # e5m2 subnormals
    qb = torch.zeros(2, 16, dtype=E5M2)
    qb[:, :2] = 1.0
    one = torch.tensor(1.0, device=DEVICE)
    got = gk.scaled_mm(qa.to(DEVICE), qb.to(DEVICE).t(), one, one, out_dtype=torch.float32)
    assert got.cpu().tolist() == [[2**-16 - 1.5 * 2**-15] * 2]


# ----------------------------------------------------------------------------- 3. the sign of NaN
def _with_nans(dtype):
    """A row of x with -NaN, +NaN, +-inf and finite values, built from bits (torch's casts may drop a NaN's sign)."""
    width = torch.finfo(dtype).bits
    neg, pos = {16: (0xFE00, 0x7E00), 32: (0xFFC00000, 0x7FC00000)}[width]
    if dtype == torch.bfloat16:
        neg, pos = 0xFFC0, 0x7FC0
    int_dtype = {16: torch.int16, 32: torch.int32}[width]
    nans = torch.tensor([neg - 2**width, pos], dtype=torch.int64).to(int_dtype).view(dtype)
    rest = torch.tensor([float("-inf"), float("inf"), -3.0, 2.0, -0.0], dtype=dtype)
    return torch.cat([nans, rest, nans.flip(0), rest.flip(0)]).reshape(2, 7).to(DEVICE)


@needs_fp8
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_negative_nan_keeps_its_sign_as_quantize_fp8_keeps_it(dtype, fp8_dtype):
    x = _with_nans(dtype)
    assert (x.cpu().view({2: torch.int16, 4: torch.int32}[x.element_size()]) < 0)[:, :2].any()
    out = ft.quantize_fp8_transposed(x, dtype=fp8_dtype)
    ref = ft.quantize_fp8_transposed_ref(x, dtype=fp8_dtype)
    rows = fp8.quantize_fp8(x, (1, 128), dtype=fp8_dtype)[0]
    cols = fp8.quantize_fp8(x.t().contiguous(), (1, 128), dtype=fp8_dtype)[0]
    assert _bits(out.q) == _bits(rows) == _bits(ref.q), (_bits(out.q), _bits(rows))
    assert _bits(out.q_t) == _bits(cols) == _bits(ref.q_t), (_bits(out.q_t), _bits(cols))
    assert 0xFF in sum(_bits(out.q), [])


# ----------------------------------------------------------------------------- 4. the reference's checks
BAD_X = {
    "float64 past float32": lambda: (torch.tensor([[1e300, 1.0]], dtype=torch.float64), {}),
    "float64": lambda: (torch.ones(2, 2, dtype=torch.float64), {}),
    "complex": lambda: (torch.tensor([[1 + 100j, 2 + 0j]]), {}),
    "sparse": lambda: (torch.randn(3, 4).to_sparse(), {}),
    "int": lambda: (torch.ones(2, 2, dtype=torch.int32), {}),
    "3-D": lambda: (torch.ones(1, 2, 2), {}),
    "list": lambda: ([[1.0]], {}),
    "meta": lambda: (torch.ones(2, 2, device="meta"), {}),
    "dtype float16": lambda: (torch.ones(2, 2), {"dtype": torch.float16}),
    "dtype a string": lambda: (torch.ones(2, 2), {"dtype": "e4m3"}),
    "scale_format": lambda: (torch.ones(2, 2), {"scale_format": "e8m0"}),
}


@needs_fp8
@pytest.mark.parametrize("case", sorted(BAD_X))
def test_the_cast_transpose_reference_refuses_what_its_kernel_refuses(case):
    x, kwargs = BAD_X[case]()
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and not x.is_sparse:
        x = x.to(DEVICE)
    kernel = _error(ft.quantize_fp8_transposed, x, **kwargs)
    ref = _error(ft.quantize_fp8_transposed_ref, x, **kwargs)
    assert isinstance(kernel, (TypeError, ValueError)), kernel
    assert type(ref) is type(kernel) and str(ref) == str(kernel), (ref, kernel)


def test_the_cast_transpose_reference_takes_any_device():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    assert ft.quantize_fp8_transposed_ref(x).q.shape == (3, 5)


# ----------------------------------------------------------------------------- 5. blocks larger than the tensor
@pytest.mark.parametrize("block", [(2**40, 1), (1, 2**40), (2**40, 2**40), (5, 7), (4, 10**30), (3, 2**62)])
def test_a_block_larger_than_the_tensor_is_one_block_covering_it(block):
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    q, scale = gk.quantize_fp8(x, block)
    within = (min(block[0], 4), min(block[1], 6))
    q_within, scale_within = gk.quantize_fp8(x, within)
    assert _bits(q) == _bits(q_within) and torch.equal(scale, scale_within)
    assert list(scale.shape) == [-(-4 // within[0]), -(-6 // within[1])]
    assert torch.equal(fp8.dequantize(q, scale, block), fp8.dequantize(q_within, scale_within, within))
    empty_q, empty_scale = gk.quantize_fp8(torch.zeros(0, 6), block)
    assert empty_q.shape == (0, 6) and list(empty_scale.shape) == [0, -(-6 // within[1])]


# ----------------------------------------------------------------------------- 6. split_k past int32
@pytest.mark.parametrize("launcher", ["matmul_splitk", "matmul_decode"])
def test_a_split_k_past_int32_is_one_piece_per_k_block(launcher):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(4, 64, generator=g).to(DEVICE, torch.float16)
    b = torch.randn(64, 8, generator=g).to(DEVICE, torch.float16)
    fn = {"matmul_splitk": gk.matmul_splitk, "matmul_decode": decode.matmul_decode}[launcher]
    every_block = fn(a, b, split_k=64)  # at most one piece per K block: as many as there are
    for split_k in (2**31, 10**30):
        assert torch.equal(fn(a, b, split_k=split_k), every_block), split_k
    torch.testing.assert_close(every_block.double(), matmul_ref(a, b, out_dtype=torch.float64), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="split_k must be >= 1, got 0"):
        fn(a, b, split_k=0)


# ----------------------------------------------------------------------------- 7. batch_invariant's spelling
@pytest.mark.parametrize("value", [1, 0, 1.0, "yes", None, np.bool_(True)])
def test_pick_launcher_refuses_a_batch_invariant_matmul_auto_refuses(value):
    a = torch.ones(2, 16, dtype=torch.float16, device=DEVICE)
    picked = _error(gk.pick_launcher, a, a.t(), batch_invariant=value)
    auto = _error(gk.matmul_auto, a, a.t(), batch_invariant=value)
    assert type(picked) is type(auto) is TypeError and str(picked) == str(auto), (picked, auto)
    assert "batch_invariant must be True or False" in str(auto)
