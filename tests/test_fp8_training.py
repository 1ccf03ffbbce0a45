"""FP8 for training (``kernels.fp8_training``): the fused cast-transpose against its float64
reference and against ``quantize_fp8`` called twice, bit for bit; power-of-two (UE8M0) scales and
their exact dequantization; ``scaled_mm_amax``'s epilogue amax against ``out``; bad inputs.  GPU-marked
tests run the same checks compiled, with autotuning on and off."""

import pytest
import torch

from gemm_kernels import DEVICE, runtime
from gemm_kernels.kernels import fp8
from gemm_kernels.kernels import fp8_training as ft
from gemm_kernels.testing import assert_close

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
needs_fp8 = pytest.mark.skipif(not runtime.supports_fp8(), reason="needs fp8 (sm_89+) or the interpreter")
pytestmark = needs_fp8


def random_input(M, K, dtype=torch.bfloat16, *, seed=0, specials=True):
    """Random values over several magnitudes (rows and columns scaled apart, so row and column
    blocks get different scales), with a NaN, +inf and -inf when ``specials``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen) * torch.exp2(torch.randint(-6, 7, (M, 1), generator=gen).float())
    x = x * torch.exp2(torch.randint(-3, 4, (1, K), generator=gen).float())
    if specials and M * K >= 3:
        flat = x.view(-1)
        picks = torch.randperm(M * K, generator=gen)[:3]
        flat[picks] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    return x.to(dtype).to(DEVICE)


def same_fp8(a, b) -> bool:
    """Equal bits, NaN matching NaN (its sign and payload are not part of the contract)."""
    a, b = a.contiguous(), b.contiguous()
    nan_a, nan_b = a.float().isnan(), b.float().isnan()
    return torch.equal(nan_a, nan_b) and torch.equal(a.view(torch.uint8)[~nan_a], b.view(torch.uint8)[~nan_b])


def assert_same(out, ref):
    assert out.q.shape == ref.q.shape and out.q_t.shape == ref.q_t.shape
    assert out.q.is_contiguous() and out.q_t.is_contiguous()
    assert same_fp8(out.q, ref.q), "q differs from the reference"
    assert same_fp8(out.q_t, ref.q_t), "q_t differs from the reference"
    assert torch.equal(out.scale, ref.scale) and torch.equal(out.scale_t, ref.scale_t), "scales differ"


# ---------------------------------------------------------------- the cast-transpose
@pytest.mark.parametrize("M, K", [(128, 128), (130, 260), (5, 300), (257, 129), (1, 1)])
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2], ids=str)
@pytest.mark.parametrize("scale_format", ft.SCALE_FORMATS)
def test_matches_reference_bit_for_bit(M, K, fp8_dtype, scale_format):
    x = random_input(M, K, torch.bfloat16, seed=M * 1000 + K)
    out = ft.quantize_fp8_transposed(x, dtype=fp8_dtype, scale_format=scale_format)
    assert_same(out, ft.quantize_fp8_transposed_ref(x.cpu(), dtype=fp8_dtype, scale_format=scale_format))


@pytest.mark.parametrize("in_dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2], ids=str)
def test_equals_quantize_fp8_called_twice(in_dtype, fp8_dtype):
    """The fused kernel is a faster ``quantize_fp8(x, (1, 128))`` plus ``quantize_fp8(x.t(), (1, 128))``."""
    x = random_input(200, 300, in_dtype, seed=7)
    out = ft.quantize_fp8_transposed(x, dtype=fp8_dtype)
    q, s = fp8.quantize_fp8(x, (1, fp8.SCALE_BLOCK), dtype=fp8_dtype)
    q_t, s_t = fp8.quantize_fp8(x.t(), (1, fp8.SCALE_BLOCK), dtype=fp8_dtype)
    assert same_fp8(out.q, q) and torch.equal(out.scale, s)
    assert same_fp8(out.q_t, q_t) and torch.equal(out.scale_t, s_t)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(M=st.integers(1, 300), K=st.integers(1, 300), seed=st.integers(0, 2**16),
       in_dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32]),
       fp8_dtype=st.sampled_from([E4M3, E5M2]), scale_format=st.sampled_from(ft.SCALE_FORMATS))
def test_random_shapes_match_reference(M, K, seed, in_dtype, fp8_dtype, scale_format):
    x = random_input(M, K, in_dtype, seed=seed)
    out = ft.quantize_fp8_transposed(x, dtype=fp8_dtype, scale_format=scale_format)
    assert_same(out, ft.quantize_fp8_transposed_ref(x.cpu(), dtype=fp8_dtype, scale_format=scale_format))


def test_extremes_saturate_underflow_and_keep_zero_blocks_finite():
    """float32 values past e4m3's range, tiny ones (the scale's floor, float32's smallest normal),
    an all-zero block (scale 1) and -0.0."""
    x = torch.zeros(130, 140)
    x[0, :5] = torch.tensor([3e38, -3e38, 1.0, 1e-30, -0.0])
    x[1, :3] = torch.tensor([1e-39, -2e-40, 5e-45])  # float32 subnormals: amax / 448 under tiny
    x[129, 139] = -7.0
    x = x.to(DEVICE)
    for scale_format in ft.SCALE_FORMATS:
        out = ft.quantize_fp8_transposed(x, scale_format=scale_format)
        assert_same(out, ft.quantize_fp8_transposed_ref(x.cpu(), scale_format=scale_format))
        assert torch.isfinite(out.q.float()).all() and torch.isfinite(out.q_t.float()).all()
        assert out.scale[2:129, 0].eq(1).all()  # all-zero row blocks
        assert out.q[0, 4].view(torch.uint8).item() == 0x80  # -0.0 keeps its sign, as torch's cast


def test_nan_and_inf_change_only_their_element():
    x = random_input(128, 256, torch.float32, seed=3, specials=False)
    x[5, 7], x[6, 130], x[100, 8] = float("nan"), float("inf"), -float("inf")
    for fp8_dtype in (E4M3, E5M2):
        clean = ft.quantize_fp8_transposed(x.nan_to_num(0.0, 0.0, 0.0), dtype=fp8_dtype)
        dirty = ft.quantize_fp8_transposed(x, dtype=fp8_dtype)
        special = ~torch.isfinite(x)
        assert torch.equal(clean.scale, dirty.scale) and torch.equal(clean.scale_t, dirty.scale_t)
        assert torch.equal(clean.q.view(torch.uint8)[~special], dirty.q.view(torch.uint8)[~special])
        assert torch.equal(clean.q_t.view(torch.uint8)[~special.t()], dirty.q_t.view(torch.uint8)[~special.t()])
        got = dirty.q.float()
        assert got[5, 7].isnan()
        if fp8_dtype == E5M2:  # e5m2 has inf; e4m3fn has none, so an inf becomes NaN (never a finite 448)
            assert got[6, 130] == float("inf") and got[100, 8] == -float("inf")
        else:
            assert got[6, 130].isnan() and got[100, 8].isnan()


@pytest.mark.parametrize("view", ["transposed", "sliced", "negated", "negated_transposed"])
def test_views_are_read_as_their_values(view):
    base = random_input(150, 260, torch.bfloat16, seed=11, specials=False)
    x = {"transposed": lambda: base.t(), "sliced": lambda: base[3:140, ::2],
         "negated": lambda: torch._neg_view(-base),
         "negated_transposed": lambda: torch._neg_view(-base).t()}[view]()
    expected = ft.quantize_fp8_transposed_ref(x.cpu().resolve_neg())
    assert_same(ft.quantize_fp8_transposed(x), expected)


def test_empty_inputs_give_empty_outputs_of_the_promised_shapes():
    for M, K in [(0, 5), (5, 0), (0, 0)]:
        out = ft.quantize_fp8_transposed(torch.zeros(M, K, device=DEVICE))
        ref_q, ref_s = fp8.quantize_fp8(torch.zeros(M, K), (1, 128))
        ref_qt, ref_st = fp8.quantize_fp8(torch.zeros(K, M), (1, 128))
        assert out.q.shape == ref_q.shape and out.scale.shape == ref_s.shape
        assert out.q_t.shape == ref_qt.shape and out.scale_t.shape == ref_st.shape


@pytest.mark.parametrize("bad, kwargs, error, words", [
    ("int", {}, TypeError, "x has dtype int32"),
    ("float64", {}, TypeError, "x has dtype float64"),
    ("3d", {}, ValueError, "x must be 2-D"),
    ("list", {}, TypeError, "x must be a torch.Tensor"),
    ("ok", {"dtype": torch.float16}, TypeError, "dtype must be torch.float8_e4m3fn"),
    ("ok", {"scale_format": "e8m0"}, ValueError, "scale_format must be one of"),
    ("sparse", {}, TypeError, "x is a sparse_coo tensor"),
])
def test_bad_inputs_are_refused_clearly(bad, kwargs, error, words):
    x = {"int": lambda: torch.ones(4, 4, dtype=torch.int32, device=DEVICE),
         "float64": lambda: torch.ones(4, 4, dtype=torch.float64, device=DEVICE),
         "3d": lambda: torch.ones(2, 4, 4, device=DEVICE), "list": lambda: [[1.0]],
         "ok": lambda: torch.ones(4, 4, device=DEVICE),
         "sparse": lambda: torch.ones(4, 4).to_sparse()}[bad]()
    with pytest.raises(error, match=words):
        ft.quantize_fp8_transposed(x, **kwargs)


def test_quantize_fp8_divides_amax_by_fmax_on_every_device():
    """quantize_fp8's scale is amax / fmax correctly rounded, as the kernel's.  On CUDA, torch
    divides by a Python number as a multiplication by its reciprocal, an ulp off for these amax
    (found on an H100: the kernel's bits differed from quantize_fp8 twice, not from float64)."""
    candidates = torch.rand(20000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 100 + 1
    amax = candidates.float()
    fmax = fp8.fp8_max(E4M3)
    by_reciprocal = (amax.double() * torch.tensor(1 / fmax, dtype=torch.float32).double()).float()
    exact = (amax.double() / fmax).float()
    picked = amax[by_reciprocal != exact][:64]  # amax where the two roundings differ
    assert picked.numel() == 64
    x = torch.zeros(64, 128)
    x[:, 0] = picked
    _, scale = fp8.quantize_fp8(x.to(DEVICE), "row")
    assert torch.equal(scale.cpu().flatten(), exact[by_reciprocal != exact][:64])
    assert torch.equal(ft.quantize_fp8_transposed(x.to(DEVICE)).scale.cpu().flatten(), scale.cpu().flatten())


# ---------------------------------------------------------------- UE8M0: power-of-two scales
def test_ue8m0_scales_are_powers_of_two_at_most_twice_the_fp32_scale():
    x = random_input(256, 384, torch.float32, seed=5, specials=False)
    exact = ft.quantize_fp8_transposed(x)
    pow2 = ft.quantize_fp8_transposed(x, scale_format="ue8m0")
    for s, s32 in ((pow2.scale, exact.scale), (pow2.scale_t, exact.scale_t)):
        mantissa, _ = torch.frexp(s)
        assert mantissa.eq(0.5).all(), "a UE8M0 scale has no mantissa bits"
        assert (s >= s32).all() and (s < 2 * s32).all(), "rounded up, by less than a factor 2"


def test_ue8m0_dequantization_is_exact_and_requantization_is_not_what_it_adds():
    """q * 2^e only moves q's exponent: float32 holds the product exactly; an arbitrary float32
    scale rounds it.  Dividing the product by the same scale gives q's bits back in both formats."""
    x = random_input(128, 256, torch.float32, seed=9, specials=False)
    for scale_format in ft.SCALE_FORMATS:
        out = ft.quantize_fp8_transposed(x, scale_format=scale_format)
        per_element = fp8.expand_scale(out.scale, out.q.shape, (1, 128))
        dequantized = out.q.float() * per_element  # in float32, as a kernel's epilogue would
        exact = out.q.double() * per_element.double()
        assert torch.equal(dequantized.double(), exact) == (scale_format == "ue8m0")
        requantized = (dequantized / per_element).to(E4M3)
        assert torch.equal(requantized.view(torch.uint8), out.q.view(torch.uint8))


def test_notebook_10_ue8m0_prose_holds():
    """Notebook 10's UE8M0 section: of every finite e4m3 value times 20,000 random float32 scales,
    29% of the float32 products are exact and every one requantizes to its own bits; a power-of-two
    scale makes every product exact; q / 8 keeps 81% of the finite e4m3 values exact."""
    finite = torch.arange(256, dtype=torch.uint8).view(E4M3)
    finite = finite[finite.float().isfinite()]
    q = finite.float()
    gen = torch.Generator().manual_seed(0)
    scales = torch.exp(torch.empty(20000).uniform_(-20, 20, generator=gen))  # float32, 24 significant bits
    products = q[None, :] * scales[:, None]
    exact = products.double() == q.double()[None, :] * scales.double()[:, None]
    requantized = (products / scales[:, None]).to(E4M3)
    assert torch.equal(requantized.view(torch.uint8), finite.view(torch.uint8).expand_as(requantized))
    pow2 = 2.0 ** torch.arange(-40, 40).float()
    assert (( q[None, :] * pow2[:, None]).double() == q.double()[None, :] * pow2.double()[:, None]).all()
    eighth = q / 8
    kept = (eighth.to(E4M3).float() == eighth).float().mean().item()
    assert fp8.fp8_max(E4M3) == 448.0 and torch.finfo(E4M3).smallest_normal * 2.0 ** -3 == 2.0 ** -9
    text = _notebook_markdown()
    assert (f"of every finite e4m3 value times 20,000 random float32 scales, {exact.float().mean().item():.0%} of "
            f"the products were exact") in text
    assert f"`q / 8` keeps {kept:.0%} of the finite e4m3 values exact" in text
    assert "requantizing `q * scale` with the same scale gives `q`'s bits back for a float32 scale too" in text


# ---------------------------------------------------------------- the amax in scaled_mm's epilogue
def amax_operands(M, N, K, scaling, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ga, gb = fp8.granularities(scaling)
    a, sa = fp8.quantize_fp8((torch.randn(M, K, generator=gen) * 4).to(DEVICE), ga)
    b, sb = fp8.quantize_fp8(torch.randn(N, K, generator=gen).to(DEVICE).t(), gb)
    return a, b, sa, sb


@pytest.mark.parametrize("scaling", fp8.SCALINGS)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("M, N, K", [(37, 53, 256), (130, 258, 128)])
def test_amax_equals_the_outputs_largest_magnitude(scaling, out_dtype, M, N, K):
    a, b, sa, sb = amax_operands(M, N, K, scaling, seed=M + N)
    bias = torch.randn(N, device=DEVICE)
    out, amax = ft.scaled_mm_amax(a, b, sa, sb, out_dtype=out_dtype, bias=bias)
    assert_close(out, fp8.scaled_mm_ref(a, b, sa, sb, bias=bias, out_dtype=torch.float64), out_dtype)
    assert amax.dtype == torch.float32 and amax.shape == ()
    assert amax.item() == out.float().abs().max().item()
    _, scale = fp8.quantize_fp8(out, "tensor")  # the next layer's per-tensor scale, from the amax
    assert scale.item() == (amax / fp8.fp8_max(E4M3)).item()


def test_amax_off_gives_the_same_product():
    a, b, sa, sb = amax_operands(70, 90, 128, "row")
    with_amax, _ = ft.scaled_mm_amax(a, b, sa, sb)
    without, none = ft._scaled_mm_pointer_kernel(a, b, sa, sb, amax=False)
    assert none is None and torch.equal(with_amax, without)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # the interpreter's fp16 inf
def test_amax_skips_nan_and_inf():
    """A NaN in a row of a makes that output row NaN; an fp16 output past 65504 is inf.  The amax
    is the largest finite |out| (what quantize_fp8's scale uses); out.isfinite() reports the rest."""
    a, b, sa, sb = amax_operands(64, 96, 128, "row", seed=2)
    a.view(torch.uint8)[3, 5] = 0x7F  # e4m3fn NaN
    out, amax = ft.scaled_mm_amax(a, b, sa, sb)
    assert out[3].isnan().all() and amax.item() == ft.largest_finite_magnitude(out).item() > 0
    sa_big = sa.clone()
    sa_big[10] = 1e6  # row 10 overflows fp16
    out, amax = ft.scaled_mm_amax(a, b, sa_big, sb, out_dtype=torch.float16)
    assert out[10].isinf().any() and torch.isfinite(amax)
    assert amax.item() == ft.largest_finite_magnitude(out).item()


def test_amax_of_empty_and_k0_products():
    a, b, sa, sb = amax_operands(0, 32, 64, "tensor")
    out, amax = ft.scaled_mm_amax(a, b, sa, sb)
    assert out.shape == (0, 32) and amax.item() == 0
    a = torch.empty(8, 0, dtype=E4M3, device=DEVICE)
    b = torch.empty(16, 0, dtype=E4M3, device=DEVICE).t()
    one = torch.ones((), device=DEVICE)
    bias = torch.linspace(-3, 2, 16, device=DEVICE)
    out, amax = ft.scaled_mm_amax(a, b, one, one, bias=bias)
    assert amax.item() == 3.0 and torch.equal(out.float(), bias.expand(8, 16).to(out.dtype).float())


def test_amax_refuses_what_scaled_mm_refuses():
    a, b, sa, sb = amax_operands(16, 16, 64, "row")
    with pytest.raises(ValueError, match="b must be column-major"):
        ft.scaled_mm_amax(a, b.contiguous(), sa, sb)
    with pytest.raises(TypeError, match="out_dtype"):
        ft.scaled_mm_amax(a, b, sa, sb, out_dtype=torch.int32)


# ---------------------------------------------------------------- on a GPU, autotuning on and off
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["full", "off"])
def test_gpu_cast_transpose_and_amax(mode):
    runtime.set_autotune(mode)
    for M, K in [(4096, 4096), (1000, 4100), (257, 129)]:
        for scale_format in ft.SCALE_FORMATS:
            x = random_input(M, K, torch.bfloat16, seed=M + K)
            out = ft.quantize_fp8_transposed(x, scale_format=scale_format)
            assert_same(out, ft.quantize_fp8_transposed_ref(x, scale_format=scale_format))
    for scaling in ["row"] if mode == "full" else fp8.SCALINGS:  # full: every config compiled and timed
        a, b, sa, sb = amax_operands(1000, 1003, 1024, scaling)
        out, amax = ft.scaled_mm_amax(a, b, sa, sb)
        assert_close(out, fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64), torch.bfloat16)
        assert amax.item() == out.float().abs().max().item()


# ---------------------------------------------------------------- notebook 10's prose, tied to the committed data
def _committed(name):
    from gemm_kernels.results import BENCH_DIR, read_csv

    return read_csv(BENCH_DIR / "entry43" / name)


def _notebook_markdown():
    import json
    import re
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "10_fp8.ipynb").read_text())["cells"]
    return re.sub(r"\s+", " ", " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"))


def test_notebook_10_cast_transpose_prose_matches_entry43():
    text = _notebook_markdown()
    rows = _committed("cast_transpose.csv")
    fused = [r for r in rows if r["provider"] == "quantize_fp8_transposed"]
    copies = [r for r in rows if r["provider"] == "x.t().contiguous()"]
    assert "faster than the transpose copy, and more than 20 times faster than `quantize_fp8` twice" in text
    for f, c in zip(fused, copies):
        assert float(f["ms"]) < float(c["ms"]) and float(f["speedup_vs_twice"]) > 20
    assert "the transpose copy reaches about a sixth of it, the fused kernel about a fifth" in text
    assert all(1 / 7 < float(c["pct_datasheet"]) / 100 < 1 / 5.5 for c in copies)
    assert all(1 / 5.5 < float(f["pct_datasheet"]) / 100 < 1 / 4.5 for f in fused)
    assert all(r["same_bits_as_twice"] == "True" for r in rows)


def test_notebook_10_cast_transpose_memory_arithmetic_matches_entry43():
    """The Predict's anchor (the 1 GiB copy) and the reveal's arithmetic per round of tiles: the
    numbers that argue against 'too few bytes in flight' (a hypothesis, labelled so)."""
    import math

    from gemm_kernels.results import BENCH_DIR, read_json

    text = _notebook_markdown()
    copy = read_json(BENCH_DIR / "entry43" / "meta.json")["copy_1GiB_tb_s"] * 1e12  # bytes/s
    fused = {(int(r["M"]), int(r["K"])): r for r in _committed("cast_transpose.csv")
             if r["provider"] == "quantize_fp8_transposed"}
    square = fused[4096, 4096]
    floor_us = int(square["bytes"]) / copy * 1e6
    assert (f"for a 4096 × 4096 `x`, {int(square['bytes']) / 1e6:.1f} MB, which the 1 GiB copy's "
            f"{copy / 1e12:.1f} TB/s on the H100 (printed below) would move in {floor_us:.1f} µs") in text
    assert f"with the {floor_us:.1f} µs the memory allows" in text
    assert f"the fused kernel runs at {float(square['ms']) * 1e3 / floor_us:.1f} times the {floor_us:.1f} µs" in text
    rounds = {shape: math.ceil(shape[0] * shape[1] // 128 ** 2 / 132) for shape in fused}
    per_round = {shape: float(fused[shape]["ms"]) * 1e3 / rounds[shape] for shape in fused}
    assert (f"4096 × 4096 is {4096 * 4096 // 128 ** 2} tiles in {rounds[4096, 4096]} rounds, "
            f"{per_round[4096, 4096]:.1f} µs a round; 8192 × 5120 is {rounds[8192, 5120]} rounds, "
            f"{per_round[8192, 5120]:.1f} µs; 16384 × 2048 is {rounds[16384, 2048]} rounds, "
            f"{per_round[16384, 2048]:.1f} µs") in text
    tile_in, tile_out = 128 * 128 * 2, 128 * 128 * 2 + 2 * 128 * 4  # bf16 in; q, q_t and two fp32 scales out
    tile_us = 132 * (tile_in + tile_out) / copy * 1e6
    assert (f"A tile moves {tile_in // 1024} KiB in and {tile_out // 1024} KiB out, {tile_us:.1f} µs at a 132nd "
            f"of the copy's {copy / 1e12:.1f} TB/s: under a quarter of a round") in text
    assert all(tile_us < v / 4 for v in per_round.values())
    in_flight = 132 * tile_in
    picks = read_json(BENCH_DIR / "entry46" / "cast_transpose_configs.json")["rows"]
    assert {(p["M"], p["K"]) for p in picks} == set(fused) and {p["autotuner_pick"] for p in picks} == {"8 warps"}
    assert all(1.8 < p["do_bench_ms"]["4 warps"] / p["do_bench_ms"]["8 warps"] < 2.1 for p in picks)
    assert ("at 8 warps, the config the autotuner picked at every shape (recorded in a later run, entry 46; "
            "4 warps took about twice as long)") in text
    assert (f"one tile in flight per SM is {in_flight / 1e6:.1f} MB over the GPU, what the copy moves in "
            f"{in_flight / copy * 1e6:.1f} µs") in text


def test_notebook_10_amax_prose_matches_entry43():
    text = _notebook_markdown()
    assert "The epilogue's amax is not free: a few percent of the kernel's time" in text
    assert "`scaled_mm` followed by a separate reduction still wins" in text
    assert "A separate pass costs more than that" in text
    by_case = {}
    for r in _committed("amax.csv"):
        by_case.setdefault((r["scaling"], r["M"], r["N"], r["K"]), {})[r["provider"]] = float(r["ms"])
    for case in by_case.values():
        plain, fused = case["pointer kernel, no amax"], case["scaled_mm_amax (epilogue amax)"]
        ws, ws_then_pass = case["scaled_mm"], case["scaled_mm + torch amax"]
        assert 0.01 < fused / plain - 1 < 0.1  # a few percent
        assert ws_then_pass - ws > fused - plain  # the separate pass costs more than the epilogue's
        assert ws_then_pass < fused


def test_one_cast_transpose_program_fills_an_sms_registers():
    """Notebook 10 and PERF_NOTES 43: at 8 warps (the first config) a program's registers leave
    no room for a second one on an SM (64 K registers): one tile in flight per SM."""
    import triton.language as tl

    from gemm_kernels.lab.compile_view import compile_for

    x = torch.empty(4096, 4096, dtype=torch.bfloat16)
    cells = torch.empty(4096, 4096, dtype=torch.uint8)
    scales = torch.empty(4096, 32)
    view = compile_for(ft._cast_transpose_kernel, dict(x_ptr=x, q_ptr=cells, s_ptr=scales, qt_ptr=cells, st_ptr=scales,
                                                       M=4096, K=4096, stride_xm=4096, stride_xk=1, stride_sm=32,
                                                       stride_stk=32),
                       num_warps=ft.CAST_TRANSPOSE_CONFIGS[0].num_warps, FP8=tl.float8e4nv, FMAX=448.0,
                       TINY=torch.finfo(torch.float32).tiny, IS_E5M2=False, POW2=False, BLOCK=128)
    if view.num_regs is None:
        pytest.skip("no cuobjdump here to read the register count")
    assert view.num_regs * 32 * view.num_warps > 65536 // 2


def test_perf_notes_43_holds_the_reveal_arithmetic_and_the_atomic_split():
    """PERF_NOTES 43: the per-round arithmetic (as in notebook 10), the transpose copy's 16%, and
    Triton's float atomic_max as two masked integer atomics (int max, uint min), which is why the
    compile view shows two atomics per program."""
    import inspect
    import math
    import re
    from pathlib import Path

    from triton.language import semantic

    from gemm_kernels.results import BENCH_DIR, read_json

    notes = (Path(__file__).resolve().parents[1] / "gemm_kernels" / "bench" / "PERF_NOTES.md").read_text()
    start = notes.index("## 43. ")
    entry = re.sub(r"\s+", " ", notes[start:notes.index("\n## ", start)])
    copy = read_json(BENCH_DIR / "entry43" / "meta.json")["copy_1GiB_tb_s"] * 1e12
    rows = _committed("cast_transpose.csv")
    fused = {(int(r["M"]), int(r["K"])): float(r["ms"]) * 1e3 for r in rows if r["provider"] == "quantize_fp8_transposed"}
    rounds = {s: math.ceil(s[0] * s[1] // 128 ** 2 / 132) for s in fused}
    per_round = {s: fused[s] / rounds[s] for s in fused}
    assert (f"(4096 x 4096: 1024 tiles in {rounds[4096, 4096]} rounds, {per_round[4096, 4096]:.1f} µs a round; "
            f"8192 x 5120: {rounds[8192, 5120]} rounds, {per_round[8192, 5120]:.1f} µs; 16384 x 2048: "
            f"{rounds[16384, 2048]} rounds, {per_round[16384, 2048]:.1f} µs)") in entry
    tile_us = 132 * (2 * 128 * 128 * 2 + 2 * 128 * 4) / copy * 1e6
    assert f"a tile moves 32 KiB in and 33 KiB out, {tile_us:.1f} µs at a 132nd of the copy's {copy / 1e12:.1f} TB/s" in entry
    assert f"one tile in flight per SM is {132 * 32768 / 1e6:.1f} MB over the GPU, what the copy moves in " \
           f"{132 * 32768 / copy * 1e6:.1f} µs" in entry
    copies = {round(float(r["pct_datasheet"])) for r in rows if r["provider"] == "x.t().contiguous()"}
    assert copies == {16} and "torch's transpose copy reached 16% of the datasheet" in entry
    source = inspect.getsource(semantic.TritonSemantic.atomic_max)
    assert "atomic_umin" in source and "_signbit" in source
    assert "an int `atomic_max` on the bits where the value is non-negative and a uint `atomic_umin`" in entry
