"""FP8: ``quantize_fp8``, ``scaled_mm`` (tensor-, row-, block-wise) and ``scaled_grouped_mm``
against float64 references of the same quantized inputs, their bad inputs, and (on a GPU) the
vendor's ``torch._scaled_mm`` / ``torch._scaled_grouped_mm`` on the same inputs."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from gemm_kernels import DEVICE, runtime
from gemm_kernels.kernels import fp8, moe
from gemm_kernels.testing import assert_close, rel_err

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
#: the kernels' tests; on a GPU without fp8 tensor cores (GEMM_KERNELS_ARCH=sm_86) they refuse instead
needs_fp8 = pytest.mark.skipif(not runtime.supports_fp8(), reason="needs fp8 tensor cores (sm_89+): the refusal is "
                                                                  "test_older_gpu_is_refused_clearly")
SCALINGS = {scaling: fp8.granularities(scaling) for scaling in fp8.SCALINGS}


def operands(M, N, K, scaling, dtype=E4M3, *, seed=0, outliers=False):
    """Quantized a [M, K] (row-major) and b = W.t() [K, N] (column-major), with their scales."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen)
    if outliers:  # a few large channels, as in real activations
        x[:, :: max(1, K // 4)] *= 50
    w = torch.randn(N, K, generator=gen) / K**0.5
    ga, gb = SCALINGS[scaling]
    a, sa = fp8.quantize_fp8(x.to(DEVICE), ga, dtype=dtype)
    b, sb = fp8.quantize_fp8(w.to(DEVICE).t(), gb, dtype=dtype)
    return a, b, sa, sb


def check(a, b, sa, sb, out_dtype=torch.bfloat16, bias=None, **kwargs):
    out = fp8.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, bias=bias, **kwargs)
    assert out.shape == (a.shape[0], b.shape[1]) and out.dtype == out_dtype
    ref = fp8.scaled_mm_ref(a, b, sa, sb, bias=bias, out_dtype=torch.float64)
    if out.numel():
        assert_close(out, ref, out_dtype)
    return out


# ---------------------------------------------------------------- quantize_fp8
@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=str)
def test_quantize_saturates_and_keeps_zero_blocks_finite(dtype):
    fmax = fp8.fp8_max(dtype)
    x = torch.zeros(4, 256)
    x[1, :128] = torch.linspace(-3, 3, 128)
    x[2, 5] = 1e30  # one huge value: it becomes the block's maximum, the rest flush toward 0
    q, s = fp8.quantize_fp8(x, (1, 128), dtype=dtype)
    assert q.dtype == dtype and s.shape == (4, 2) and s.dtype == torch.float32
    assert torch.isfinite(q.float()).all() and torch.isfinite(s).all()
    assert (s[0] == 1).all() and (q[0].float() == 0).all()  # all-zero rows: scale 1, no NaN
    assert q[2, 5].float() == fmax and q.float().abs().max() <= fmax
    deq = fp8.dequantize(q, s, (1, 128))
    assert rel_err(deq[1], x[1].double()) < 0.07  # 3 (e4m3) or 2 (e5m2) mantissa bits


def test_quantize_granularities_shapes_and_layout():
    x = torch.randn(70, 300)
    assert fp8.quantize_fp8(x)[1].shape == ()
    assert fp8.quantize_fp8(x, "row")[1].shape == (70, 1)
    assert fp8.quantize_fp8(x, "column")[1].shape == (1, 300)
    assert fp8.quantize_fp8(x, (128, 128))[1].shape == (1, 3)
    q, _ = fp8.quantize_fp8(x.t(), "column")  # a column-major input stays column-major
    assert q.stride() == (1, 300)
    for bad in ["rows", (0, 128), (1, 128, 1), 128, (1.0, 128)]:
        with pytest.raises(ValueError, match="granularity"):
            fp8.quantize_fp8(x, bad)
    with pytest.raises(TypeError, match="dtype"):
        fp8.quantize_fp8(x, dtype=torch.float16)
    with pytest.raises(TypeError, match="int32"):
        fp8.quantize_fp8(x.int())


def test_outliers_cost_per_tensor_scaling_the_most():
    """A few channels 50x larger: one scale for the tensor flushes the small values, per-row
    scales cannot help (every row holds an outlier), 1x128 groups isolate them best."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1024, generator=gen)
    x[:, ::256] *= 50
    errs = {g: rel_err(fp8.dequantize(*fp8.quantize_fp8(x, g), g), x.double())
            for g in ["tensor", "row", (1, 128)]}
    assert errs[(1, 128)] < errs["row"] <= errs["tensor"] * 1.01


# ---------------------------------------------------------------- scaled_mm: correctness
@needs_fp8
@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("M,N,K", [(37, 50, 256), (128, 96, 384), (1, 16, 128), (200, 130, 128)])
def test_scaled_mm_ragged(scaling, M, N, K):
    check(*operands(M, N, K, scaling))


@needs_fp8
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_scaled_mm_k_tail_and_repeated_shapes(scaling):
    """K not a multiple of the 128-wide K block (the loads zero-fill the tail), then new tensors of
    the same shapes (on a GPU, a kept launch re-pointed at them, not the first call's data)."""
    for seed in (0, 1, 2):
        check(*operands(72, 40, 208, scaling, seed=seed))


@needs_fp8
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("dtypes", [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)], ids=["e4m3", "e5m2", "mixed"])
def test_scaled_mm_dtypes_and_bias(dtypes, out_dtype):
    a, _, sa, _ = operands(40, 48, 256, "row", dtypes[0])
    _, b, _, sb = operands(40, 48, 256, "row", dtypes[1], seed=1)
    bias = torch.randn(48, device=DEVICE).to(out_dtype)
    check(a, b, sa, sb, out_dtype, bias)


@needs_fp8
def test_scaled_mm_reads_a_strided_bias_by_its_stride():
    """The kernel reads bias_ptr + n: a strided bias (every other element) is copied first (it
    read the neighbours before)."""
    a, b, sa, sb = operands(40, 48, 256, "row")
    check(a, b, sa, sb, torch.bfloat16, torch.randn(96, device=DEVICE).to(torch.bfloat16)[::2])


@needs_fp8
@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("promote", fp8.PROMOTE_CHOICES)
def test_scaled_mm_promotion_settings(promote, fast):
    check(*operands(64, 64, 512, "tensor", outliers=True), promote_every=promote, use_fast_accum=fast)


@needs_fp8
def test_scaled_mm_strided_inputs_and_scales():
    """a with padded rows, b a column-major slice, block scales in torch's M-major layout."""
    a, b, sa, sb = operands(33, 40, 256, "block")
    a_pad = torch.zeros(33, 272, dtype=a.dtype, device=DEVICE)
    a_pad[:, :256] = a
    b_pad = torch.zeros(48, 256, dtype=b.dtype, device=DEVICE)
    b_pad[:40] = b.t()
    sa_mmajor = sa.t().contiguous().t()
    out = check(a_pad[:, :256], b_pad[:40].t(), sa_mmajor, sb)
    assert torch.equal(out, fp8.scaled_mm(a, b, sa, sb))


@needs_fp8
def test_scaled_mm_empty():
    a, b, sa, sb = operands(16, 32, 128, "tensor")
    assert fp8.scaled_mm(a[:0], b, sa, sb).shape == (0, 32)
    out = fp8.scaled_mm(a[:, :0], b[:0], sa, sb, bias=torch.ones(32, device=DEVICE), out_dtype=torch.float32)
    assert (out == 1).all()


# ---------------------------------------------------------------- scaled_mm: bad inputs
@needs_fp8
def test_scaled_mm_bad_inputs_are_named():
    a, b, sa, sb = operands(32, 32, 256, "row")
    cases = [
        (TypeError, "a has dtype float16", dict(a=a.to(torch.float16))),
        (ValueError, "b must be column-major", dict(b=b.contiguous())),
        (ValueError, "a must be row-major", dict(a=a.t().contiguous().t())),
        (ValueError, "inner dimensions", dict(b=b[:128])),
        (TypeError, "scale_a must be float32", dict(sa=sa.double())),
        (ValueError, r"scale_a \[32, 2\] and scale_b \[1, 32\] name no scaling", dict(sa=torch.ones(32, 2, device=DEVICE))),
        (TypeError, "out_dtype", dict(out_dtype=torch.int8)),
        (ValueError, "promote_every", dict(promote_every=48)),
        (ValueError, r"bias must have shape \[N\]", dict(bias=torch.zeros(31, device=DEVICE))),
    ]
    for err, match, change in cases:
        args = dict(a=a, b=b, sa=sa, sb=sb, out_dtype=torch.bfloat16, bias=None, promote_every=128) | change
        with pytest.raises(err, match=match):
            fp8.scaled_mm(args["a"], args["b"], args["sa"], args["sb"], out_dtype=args["out_dtype"],
                          bias=args["bias"], promote_every=args["promote_every"])


@needs_fp8
def test_block_scales_need_k_multiple_of_128():
    a, b, _, _ = operands(32, 32, 144, "tensor")
    sa, sb = torch.ones(32, 2, device=DEVICE), torch.ones(2, 1, device=DEVICE)
    with pytest.raises(ValueError, match="multiple of 128"):
        fp8.scaled_mm(a, b, sa, sb)
    a, b, _, _ = operands(16, 16, 16, "tensor")
    with pytest.raises(ValueError, match="K = 8 must be a multiple of 16"):
        fp8.scaled_mm(a[:, :8], b[:8], torch.ones(1, device=DEVICE), torch.ones(1, device=DEVICE))


def test_older_gpu_is_refused_clearly():
    code = ("import torch; from gemm_kernels.kernels import fp8\n"
            "a = torch.zeros(16, 16).to(torch.float8_e4m3fn)\n"
            "try:\n    fp8.scaled_mm(a, a.t(), torch.ones(1), torch.ones(1))\n"
            "except RuntimeError as e:\n    print(e)\n")
    env = {**os.environ, "GEMM_KERNELS_ARCH": "sm_86", "GEMM_KERNELS_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "needs fp8 tensor cores (Ada sm_89, Hopper sm_90" in out.stdout, out.stderr[-2000:]


# ---------------------------------------------------------------- scaled_grouped_mm
def moe_operands(counts, K, N, *, tail=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    T, E = sum(counts) + tail, len(counts)
    x, sx = fp8.quantize_fp8(torch.randn(T, K, generator=gen).to(DEVICE), "row")
    w_nk = torch.randn(E, N, K, generator=gen).to(DEVICE)
    wq = torch.empty(E, N, K, dtype=E4M3, device=DEVICE)
    sw = torch.empty(E, N, device=DEVICE)
    for e in range(E):
        wq[e], s = fp8.quantize_fp8(w_nk[e], "row")
        sw[e] = s.reshape(N)
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=DEVICE)
    return x, wq.transpose(1, 2), sx.reshape(T), sw, offs


@needs_fp8
@pytest.mark.parametrize("tma", [None, False])
@pytest.mark.parametrize("counts", [[5, 0, 33, 1], [0, 0, 70], [16, 16]], ids=["skewed", "empty_first", "even"])
def test_scaled_grouped_mm_ragged(counts, tma):
    x, w, sx, sw, offs = moe_operands(counts, 256, 80, tail=3)
    out = fp8.scaled_grouped_mm(x, w, sx, sw, offs, tma=tma)
    assert out.dtype == torch.bfloat16 and out.shape == (x.shape[0], 80)
    assert_close(out, fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64), torch.bfloat16)
    assert (out[-3:] == 0).all()  # rows past offs[-1]: zeros


@needs_fp8
def test_scaled_grouped_mm_reads_a_strided_offs():
    """offs as a view with a stride: the kernel reads offs_ptr + e, so the launcher makes it contiguous."""
    x, w, sx, sw, offs = moe_operands([5, 0, 33, 1], 128, 48)
    spread = torch.zeros(8, dtype=torch.int32, device=DEVICE)
    spread[::2] = offs
    spread[1::2] = 10**6  # what a kernel reading the storage in order would take for offs[1]
    out = fp8.scaled_grouped_mm(x, w, sx, sw, spread[::2], check_offs=False)
    assert_close(out, fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64), torch.bfloat16)


@needs_fp8
def test_scaled_grouped_mm_bad_inputs_are_named():
    x, w, sx, sw, offs = moe_operands([8, 8], 128, 32)
    cases = [
        (TypeError, "x has dtype bfloat16", dict(x=x.to(torch.bfloat16))),
        (ValueError, "w must be column-major per expert", dict(w=w.contiguous())),
        (ValueError, r"scale_x must have shape \[16\]", dict(sx=sx[:8])),
        (ValueError, r"scale_w must have shape \[2, 32\]", dict(sw=sw.t())),
        (TypeError, "scale_w must be float32", dict(sw=sw.half())),
        (TypeError, "offs must be int32", dict(offs=offs.long())),
    ]
    for err, match, change in cases:
        args = dict(x=x, w=w, sx=sx, sw=sw, offs=offs) | change
        with pytest.raises(err, match=match):
            fp8.scaled_grouped_mm(args["x"], args["w"], args["sx"], args["sw"], args["offs"])
    with pytest.raises(ValueError, match="non-decreasing"):
        fp8.scaled_grouped_mm(x, w, sx, sw, offs.flip(0).contiguous(), check_offs=True)


# ---------------------------------------------------------------- on a GPU: real sizes, against the vendor
def _vendor_scaled_mm(a, b, sa, sb, scaling, fast=False):
    if scaling == "tensor":
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    return torch._scaled_mm(a, b, sa, sb.reshape(1, -1), out_dtype=torch.bfloat16, use_fast_accum=fast)


@needs_fp8
@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["tensor", "row"])
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (1000, 3584, 8192), (8192, 1024, 512)])
def test_gpu_accuracy_no_worse_than_torch(scaling, M, N, K):
    a, b, sa, sb = operands(M, N, K, scaling, outliers=True)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    ours = rel_err(fp8.scaled_mm(a, b, sa, sb), ref)
    theirs = rel_err(_vendor_scaled_mm(a, b, sa, sb, scaling), ref)
    assert ours <= theirs * 1.05 + 1e-6, (ours, theirs)


@needs_fp8
@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K", [(4096, 4096, 4096), (333, 7168, 2048)])
def test_gpu_block_scaled(M, N, K):
    check(*operands(M, N, K, "block", outliers=True))


@needs_fp8
@pytest.mark.gpu
@pytest.mark.parametrize("skew", [0.0, 1.2])
def test_gpu_scaled_grouped_mm_against_torch(skew):
    routing = moe.route_tokens(2048, 16, 2, skew=skew, generator=torch.Generator().manual_seed(0))
    x, w, sx, sw, offs = moe_operands(routing.counts.tolist(), 1024, 768)
    ref = fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64)
    out = fp8.scaled_grouped_mm(x, w, sx, sw, offs)
    again = fp8.scaled_grouped_mm(x, w, sx, sw, offs)  # the bound launch of a repeated shape
    assert torch.equal(out, again)
    theirs = torch._scaled_grouped_mm(x, w, sx, sw, offs=offs, out_dtype=torch.bfloat16)
    assert rel_err(out, ref) <= rel_err(theirs, ref) * 1.05 + 1e-6
    assert_close(out, ref, torch.bfloat16)


@needs_fp8
@pytest.mark.gpu
@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_gpu_hopper_runs_the_warp_specialized_kernel(scaling, monkeypatch):
    """On sm_90, scaled_mm's default and fast accumulation go through matmul_ws.scaled_mm_ws (with
    the tile the rule picks), promote_every=32 through the tiled kernel; all three are correct."""
    if not runtime.supports_wgmma():
        pytest.skip("no wgmma on this GPU: the tiled kernel is scaled_mm's only route")
    from gemm_kernels.kernels import matmul_ws

    calls = []
    route = matmul_ws.scaled_mm_ws
    monkeypatch.setattr(matmul_ws, "scaled_mm_ws", lambda *args, **kw: calls.append(kw) or route(*args, **kw))
    matmul_ws._PLANS.clear()
    fp8._KEPT.clear()
    a, b, sa, sb = operands(300, 520, 384, scaling, outliers=True)
    for kwargs, through_ws in ((dict(), True), (dict(use_fast_accum=True), True), (dict(promote_every=32), False)):
        before = len(calls)
        check(a, b, sa, sb, **kwargs)
        assert (len(calls) == before + 1) == through_ws, kwargs


@needs_fp8
@pytest.mark.gpu
def test_gpu_block_scales_in_two_piece_tiles(monkeypatch):
    """Block scales in 128 x 256 tiles (two 128-column pieces, so two b-scales per K block, the
    second masked past N), a path scaled_mm does not pick (it spills, PERF_NOTES 34): still right.
    N = 356 ends in a tile whose second piece lies past N; W's 128-column blocks differ in scale
    by 4x, so a piece that took the other's b-scale would be far off."""
    if not runtime.supports_wgmma():
        pytest.skip("no wgmma on this GPU: block scales run the tiled kernel")
    from gemm_kernels.kernels import matmul_ws

    M, N, K = 300, 356, 512
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(M, K, generator=gen)
    x[:, :: K // 4] *= 50
    w = torch.randn(N, K, generator=gen) / K**0.5 * (4.0 ** (torch.arange(N) // 128 % 3))[:, None]
    a, sa = fp8.quantize_fp8(x.to(DEVICE), (1, 128))
    b, sb = fp8.quantize_fp8(w.to(DEVICE).t(), (128, 128))
    config = matmul_ws.fp8_config
    monkeypatch.setattr(matmul_ws, "fp8_config",
                        lambda *args, **kw: config(*args, **{**kw, "tile": "128x256"}))
    matmul_ws._PLANS.clear()
    fp8._KEPT.clear()
    try:
        check(a, b, sa, sb)
        assert [plan.tile for plan in matmul_ws._PLANS.values()] == [(128, 256, "cooperative")]
    finally:  # no later test may reuse a plan of the forced tile
        matmul_ws._PLANS.clear()
        fp8._KEPT.clear()


# ---------------------------------------------------------------- the warp-specialized route (Hopper), on any machine
def test_ws_tiles_fit_shared_memory_and_are_picked_by_shape():
    """The fp8 tiles' rings as deep as the shared memory allows beside C, and the waves rule's picks."""
    from gemm_kernels.kernels import matmul_ws
    from gemm_kernels.models.tiles import FP8_WS_TILES, ws_default_tile

    def stages(tile, out_bytes):
        return matmul_ws._fit_stages(matmul_ws.FP8_CONFIGS[tile], 1, out_bytes)["STAGES"]

    assert (stages("128x256", 2), stages("128x256", 4), stages("128x128", 2), stages("128x128", 4)) == (4, 3, 6, 5)
    # block scales: each slot also holds 128 float32 scale products per 128-column piece
    block = matmul_ws._fit_stages(matmul_ws.FP8_CONFIGS["128x128"], 1, 2, block_scales=True)["STAGES"]
    assert block == 5 and matmul_ws.fp8_config(4096, 4096, "block", use_fast_accum=False, out_bytes=2)[0]["STAGES"] == 5
    assert ws_default_tile(4096, 4096, num_sms=132, tiles=FP8_WS_TILES) == "128x256"
    assert ws_default_tile(1024, 1024, num_sms=132, tiles=FP8_WS_TILES) == "128x128"  # 32 tiles of 128x256: 100 SMs idle


def test_ws_route_needs_operands_a_descriptor_can_describe():
    """scaled_mm takes the warp-specialized kernel only for operands its descriptors accept:
    overlapping rows (a legal as_strided view) go to the tiled kernel instead of an error."""
    from gemm_kernels.kernels import matmul_ws

    a, b, _, _ = operands(64, 48, 64, "tensor")
    assert matmul_ws.tma_readable(a, b)
    overlapping = torch.empty(64 * 16 + 64, dtype=a.dtype, device=a.device).as_strided((64, 64), (16, 1))
    assert not matmul_ws.tma_readable(overlapping, b)


WS_FP8 = {"tensor": dict(scaling="tensor"), "row fp32": dict(scaling="row", out_dtype=torch.float32),
          "fast": dict(scaling="tensor", use_fast_accum=True), "tensor 128x128": dict(scaling="tensor", tile="128x128"),
          "block": dict(scaling="block"), "block 128x256": dict(scaling="block", tile="128x256"),
          "tensor split": dict(scaling="tensor", splits=3), "row split": dict(scaling="row", splits=3),
          "block split": dict(scaling="block", splits=3), "fast split": dict(scaling="tensor", use_fast_accum=True,
                                                                               splits=3)}


@pytest.fixture(scope="module")
def ws_fp8_views():
    from gemm_kernels.lab.compile_examples import ws_fp8_example
    from gemm_kernels.lab.compile_view import compile_many

    return dict(zip(WS_FP8, compile_many([ws_fp8_example(**kw).request(90) for kw in WS_FP8.values()])))


@pytest.mark.parametrize("name", WS_FP8)
def test_ws_fp8_compiles_for_sm90_within_shared_memory(ws_fp8_views, name):
    """What scaled_mm launches on Hopper compiles for sm_90: e4m3 wgmma (m64n128 pieces when it
    promotes, m64n256 when it never does), within 227 KiB of shared memory, and without spilling
    registers, except block scales at 128 x 256 (why scaled_mm runs those at 128 x 128) and the split
    units of a promoted 128 x 256 tile: a few words to 104 bytes (Triton 3.6), stored and reloaded
    outside the K loops, where one 128-column piece is added up while the other's sum waits in
    registers (per unit, not per K block; PERF_NOTES 58)."""
    from gemm_kernels.kernels import matmul_ws

    view = ws_fp8_views[name]
    width = 256 if name.startswith("fast") else 128
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{width}k32\.f32\.e4m3\.e4m3", view.asm["ptx"])
    assert view.shared <= matmul_ws._SMEM_BYTES + 1024
    if view.spill_bytes is not None:
        if name in ("tensor split", "row split"):
            assert view.spill_bytes <= 128, view.spill_bytes
        else:
            assert (view.spill_bytes > 0) == (name == "block 128x256"), view.spill_bytes


@pytest.mark.parametrize("name", [name for name, kw in WS_FP8.items() if kw.get("splits", 1) > 1])
def test_ws_fp8_split_units_add_each_piece(ws_fp8_views, name):
    """Split units: one arrival and one count reset per 128-column piece and consumer (a promoted
    128 x 256 tile has two pieces; fast accumulation adds the whole tile at once), the slots read
    past L1, C through pointer stores."""
    ptx = ws_fp8_views[name].asm["ptx"]
    promoted_wide = name in ("tensor split", "row split")
    arrivals = 2 * (2 if promoted_wide else 1)
    assert ptx.count("atom.global.gpu.acq_rel.add") == arrivals
    assert ptx.count("atom.global.gpu.relaxed.exch") == arrivals
    assert "ld.global.cg" in ptx and "cp.async.bulk.tensor.2d.global.shared" not in ptx


def test_scaled_mm_ws_refuses_a_bad_tile_or_split_count_before_the_gpu():
    """scaled_mm_ws's own options, checked before it asks for Hopper (so on any machine): a tile that
    is no FP8_CONFIGS name, a split count over FP8_MAX_SPLITS (each piece an M x N fp32 slot of the
    workspace) or not a whole number >= 1."""
    from gemm_kernels.kernels import matmul_ws
    from gemm_kernels.models.tiles import FP8_MAX_SPLITS

    a = torch.zeros(4, 4)
    call = lambda **kw: matmul_ws.scaled_mm_ws(a, a, a, a, "tensor", out_dtype=torch.bfloat16, bias=None,  # noqa: E731
                                               use_fast_accum=False, **kw)
    for kw, error, words in [(dict(tile="bogus"), ValueError, "tile must be one of"),
                             (dict(tile="cooperative"), ValueError, "tile must be one of"),
                             (dict(split_k=FP8_MAX_SPLITS + 1), ValueError, f"split_k must be at most {FP8_MAX_SPLITS}"),
                             (dict(split_k=10**6), ValueError, "split_k must be at most"),
                             (dict(split_k=0), ValueError, "split_k must be >= 1"),
                             (dict(split_k=2.0), TypeError, "split_k must be an int")]:
        with pytest.raises(error, match=words):
            call(**kw)


def _k_loop_global_loads(ptx: str) -> list[int]:
    """Per innermost loop that issues wgmma (a K loop), how many global loads it holds."""
    lines = ptx.splitlines()
    loops = []
    for i, line in enumerate(lines):
        label = re.match(r"^(\$L__BB\d+_\d+):", line)
        if label:
            back = [j for j in range(i + 1, len(lines))
                    if re.search(r"\bbra(\.uni)?\s+" + re.escape(label.group(1)) + ";", lines[j])]
            if back:
                loops.append((i, back[-1]))
    inner = {min((lp for lp in loops if lp[0] < k < lp[1]), key=lambda lp: lp[1] - lp[0])
             for k, line in enumerate(lines) if "wgmma.mma_async" in line}
    return [sum("ld.global" in lines[n] for n in range(a, b + 1)) for a, b in sorted(inner)]


@pytest.mark.parametrize("name", WS_FP8)
def test_ws_fp8_k_loops_read_no_global_memory(ws_fp8_views, name):
    """The consumers' K loops load nothing from global memory, block scales included: the producer
    stores each slot's scales in shared memory (PERF_NOTES 35: a scale the K loop loaded itself
    stalled its warpgroup, on the load, between the wgmmas of a block)."""
    loads = _k_loop_global_loads(ws_fp8_views[name].asm["ptx"])
    assert len(loads) == 2 and loads == [0, 0], loads  # one K loop per consumer warpgroup



@needs_fp8
@pytest.mark.gpu
@pytest.mark.parametrize("scaling,fast,tile", [("tensor", False, "128x256"), ("row", False, "128x256"),
                                               ("tensor", True, "128x256"), ("tensor", False, "128x128"),
                                               ("block", False, "128x128"), ("block", False, "128x256")])
@pytest.mark.parametrize("splits", [2, 3, 5])
def test_gpu_split_units_of_the_warp_specialized_kernel(scaling, fast, tile, splits):
    """``scaled_mm_ws(split_k=...)``: each tile's K loop in ``splits`` units, the last of each
    128-column piece adding them in piece order.  K = 1792 is 14 K blocks, so 3 and 5 pieces end past
    K (block scales masked there; memcheck in sanitize_fp8.py sees a stray read); N = 520 ends in a
    128 x 256 tile whose first piece is mostly past N and whose second is wholly past it; a bias.
    The plan ran that many units, as accurate as the unsplit launch, the same bits on a repeat,
    every element written (conftest's NaN-filled torch.empty)."""
    if not runtime.supports_wgmma():
        pytest.skip("no wgmma on this GPU: the warp-specialized kernel is Hopper's")
    from gemm_kernels.kernels import matmul_ws
    from gemm_kernels.models.tiles import whole_pieces

    a, b, sa, sb = operands(300, 520, 1792, scaling, outliers=True, seed=splits)
    bias = torch.randn(520, device=DEVICE).to(torch.bfloat16)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, bias=bias, out_dtype=torch.float64)

    def run(split_k):
        key = ("split test", scaling, fast, tile, split_k)
        out = matmul_ws.scaled_mm_ws(a, b, sa, sb, scaling, out_dtype=torch.bfloat16, bias=bias,
                                     use_fast_accum=fast, tile=tile, split_k=split_k, key=key)
        assert matmul_ws._PLANS[("scaled_mm", *key)].splits == whole_pieces(14, split_k)
        return out

    try:
        whole, split = run(1), run(splits)
        assert whole_pieces(14, splits) == splits
        assert_close(split, ref, torch.bfloat16)
        assert rel_err(split, ref) <= rel_err(whole, ref) * 1.05 + 1e-6
        assert torch.equal(split, run(splits))
    finally:
        matmul_ws._PLANS.clear()


@needs_fp8
@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
def test_gpu_default_splits_few_long_tiles(scaling):
    """scaled_mm's default at DeepSeek-V3's q_a projection with 256 tokens (12 tiles, 56 K blocks) runs
    the split units ``tiles.fp8_ws_splits`` asks for, kept for the repeat, as accurate as
    torch; ``batch_invariant=True`` runs one K loop per tile (a row's bits may not depend on M); a
    CUDA graph of the split call replays it."""
    if not runtime.supports_wgmma():
        pytest.skip("no wgmma on this GPU: the warp-specialized kernel is Hopper's")
    from gemm_kernels.kernels import matmul_ws
    from gemm_kernels.models import tiles

    M, N, K = 256, 1536, 7168
    want = tiles.fp8_ws_splits(M, N, K, matmul_ws.fp8_tile(M, N, scaling), num_sms=runtime.num_sms())
    if want == 1:
        pytest.skip(f"{runtime.num_sms()} SMs: the rule does not split this shape here")
    matmul_ws._PLANS.clear()
    fp8._KEPT.clear()
    try:
        a, b, sa, sb = operands(M, N, K, scaling, outliers=True)
        out = check(a, b, sa, sb)
        assert [plan.splits for plan in matmul_ws._PLANS.values()] == [want]
        assert torch.equal(out, fp8.scaled_mm(a, b, sa, sb))  # the kept launch: same units, same bits
        if scaling != "block":
            ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
            assert rel_err(out, ref) <= rel_err(_vendor_scaled_mm(a, b, sa, sb, scaling), ref) * 1.05 + 1e-6
        matmul_ws._PLANS.clear()
        check(a, b, sa, sb, batch_invariant=True)
        assert [plan.splits for plan in matmul_ws._PLANS.values()] == [1]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = fp8.scaled_mm(a, b, sa, sb)
        a.copy_(operands(M, N, K, scaling, seed=1)[0])  # new values in the captured input
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, fp8.scaled_mm(a, b, sa, sb)) and not torch.equal(captured, out)
    finally:
        matmul_ws._PLANS.clear()
        fp8._KEPT.clear()
