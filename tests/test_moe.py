"""gemm_kernels.grouped_mm (MoE): routings against float64, the device-side expert lookup against the
numpy mirror, w layouts, TMA choices, offs validation, and the routing helper."""

import re

import numpy as np
import pytest
import torch

from gemm_kernels import DEVICE, grouped_mm, grouped_mm_ref, route_tokens, runtime
from gemm_kernels.kernels import moe, moe_wgrad
from gemm_kernels.kernels.moe import num_programs_for
from gemm_kernels.lab.traces import trace_moe_schedule
from gemm_kernels.testing import assert_close
from gemm_kernels.models.tiles import multi_problem_schedule

DTYPES = [torch.float16, torch.bfloat16]


def make_inputs(counts, K, N, dtype, *, w_transposed=False, seed=0):
    """x sorted by expert, w [E, K, N] (or a transposed view of [E, N, K]), offs int32 on DEVICE."""
    gen = torch.Generator().manual_seed(seed)
    T, E = sum(counts), len(counts)
    x = torch.randn(T, K, generator=gen).to(DEVICE, dtype)
    if w_transposed:
        w = torch.randn(E, N, K, generator=gen).to(DEVICE, dtype).transpose(1, 2)
    else:
        w = torch.randn(E, K, N, generator=gen).to(DEVICE, dtype)
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=DEVICE)
    return x, w, offs


def check(x, w, offs, **kwargs):
    out = grouped_mm(x, w, offs, **kwargs)
    assert out.shape == (x.shape[0], w.shape[2]) and out.dtype == x.dtype
    if out.numel():
        assert_close(out, grouped_mm_ref(x, w, offs, out_dtype=torch.float64), x.dtype)
    return out


# ---------------------------------------------------------------- correctness
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("w_transposed", [False, True], ids=["w_EKN", "w_view_of_ENK"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_skewed_routing_with_empty_experts(dtype, w_transposed, tma):
    """Zipf-like routing: hot experts with several row tiles, cold ones with one row or none."""
    routing = route_tokens(29, 7, 2, skew=1.5, generator=torch.Generator().manual_seed(1))
    counts = routing.counts.tolist()
    counts[3], counts[6] = 0, 0  # empty experts in the middle and at the end
    counts[0] += 1
    check(*make_inputs(counts, 40, 48, dtype, w_transposed=w_transposed, seed=2), tma=tma)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_ragged_routings(seed):
    """Ragged K and N (primes) read through pointers; uniform and skewed routings; any expert count."""
    rng = np.random.default_rng(seed)
    E = int(rng.integers(1, 9))
    counts = rng.integers(0, 40, size=E).tolist()
    K, N = [(31, 37), (7, 65), (64, 1)][seed]
    check(*make_inputs(counts, K, N, torch.float16, w_transposed=seed == 1, seed=seed), tma=False)


@pytest.mark.parametrize("tma", [False, True])
def test_edge_routings(tma):
    for counts in ([0, 0, 5, 0], [1], [33], [0, 0, 0, 1], [1, 1, 1, 1, 1, 1, 1, 1, 1]):
        check(*make_inputs(counts, 16, 24, torch.float16), tma=tma)


def test_no_tokens_and_empty_sums():
    x, w, offs = make_inputs([0, 0, 0], 16, 8, torch.float16)
    assert grouped_mm(x, w, offs).shape == (0, 8)
    x, w, offs = make_inputs([3, 0, 2], 0, 8, torch.float16)  # K = 0: every row is an empty sum
    assert torch.equal(grouped_mm(x, w, offs).float().cpu(), torch.zeros(5, 8))
    x, w, offs = make_inputs([3, 2], 16, 0, torch.float16)
    assert grouped_mm(x, w, offs).shape == (5, 0)


def test_fp32():
    check(*make_inputs([5, 0, 40], 24, 16, torch.float32), tma=True)


def test_unchecked_offs_give_the_same_answer():
    x, w, offs = make_inputs([9, 0, 30, 2], 32, 16, torch.bfloat16)
    assert torch.equal(grouped_mm(x, w, offs, check_offs=False), grouped_mm(x, w, offs))


@pytest.mark.parametrize("check_offs", [None, True, False])
@pytest.mark.parametrize("tma", [False, True])
def test_rows_past_the_last_expert_are_zeros(tma, check_offs):
    """offs[-1] < T (a padded token buffer, dropped tokens): as in torch._grouped_mm, rows no
    expert owns come out as zeros, on every path (the test suite poisons torch.empty with NaN, so
    an unwritten row would show).  The last expert's tiles span those rows: its stores must stop."""
    x, w, _ = make_inputs([15, 6, 19], 32, 16, torch.float16)
    offs = torch.tensor([15, 21, 21], dtype=torch.int32, device=DEVICE)
    for _ in range(2):  # the second call takes the bound launch on a GPU
        out = grouped_mm(x, w, offs, tma=tma, check_offs=check_offs).float().cpu()
        assert torch.equal(out[21:], torch.zeros(19, 16)), "rows owned by no expert must be zeros"
        assert_close(out, grouped_mm_ref(x, w, offs, out_dtype=torch.float64), torch.float16)


def test_every_row_past_offs_when_no_expert_has_rows():
    x, w, _ = make_inputs([4, 4], 16, 24, torch.float16)
    offs = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    assert torch.equal(grouped_mm(x, w, offs).float().cpu(), torch.zeros(8, 24))


def test_tma_auto_choice():
    """tma=None: TMA when x and w are 16-byte aligned for it, pointer loads otherwise; both correct."""
    aligned = make_inputs([10, 20], 32, 16, torch.float16)
    ragged = make_inputs([10, 20], 33, 16, torch.float16)  # 33 * 2 bytes: x rows not aligned
    out = torch.empty(30, 16, dtype=torch.float16, device=DEVICE)
    assert moe._plan_tma(aligned[0], aligned[1], out, None)["USE_TMA"] == runtime.supports_tma()
    assert moe._plan_tma(ragged[0], ragged[1], out, None)["USE_TMA"] is False
    assert moe._plan_tma(*make_inputs([1], 32, 16, torch.float16, w_transposed=True)[:2], out, None)["W_NK"]
    check(*aligned)
    check(*ragged)


# ---------------------------------------------------------------- the schedule: device lookup == mirror
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("counts,N,num_programs", [
    ([70, 0, 3, 33, 0], 40, None),        # the launcher's grid (an upper bound of the tiles)
    ([0, 0, 100, 1], 72, 3),
    ([5, 5, 5, 5, 5, 5, 5, 5, 5, 5], 8, 1),
    ([64], 40, 11),                       # more programs than tiles
])
def test_kernel_schedule_equals_mirror(counts, N, num_programs, tma):
    """Tile counts per expert are computed in the kernel from the device-side offs; the trace of
    (program, expert, pid_m, pid_n) per tile must still be multi_problem_schedule's."""
    x, w, offs = make_inputs(counts, 16, N, torch.float16)
    out, trace = trace_moe_schedule(x, w, offs, tma=tma, num_programs=num_programs)
    blocks = moe.configs.moe_configs()[0].kwargs
    bm, bn = blocks["BLOCK_M"], blocks["BLOCK_N"]
    programs = num_programs or num_programs_for(x.shape[0], len(counts), N, bm, bn)
    mirror = multi_problem_schedule([(c, N) for c in counts], bm, bn, programs, "grouped", blocks["GROUP_SIZE_M"])
    np.testing.assert_array_equal(trace.numpy(), mirror[:, [1, 3, 4, 5]])
    assert_close(out, grouped_mm_ref(x, w, offs, out_dtype=torch.float64), torch.float16)


def test_grid_bound_covers_every_routing():
    rng = np.random.default_rng(0)
    for _ in range(300):
        E, bm = int(rng.integers(1, 64)), int(rng.choice([16, 32, 64, 128]))
        counts = rng.integers(0, 300, size=E)
        T = int(counts.sum())
        if T == 0:
            continue
        tail = int(rng.integers(0, 100))  # rows past offs[-1]: one more problem
        tiles = sum(-(-int(c) // bm) for c in counts) + -(-tail // bm)
        assert min(-(-(T + tail) // bm) + E + 1, T + tail) >= tiles


# ---------------------------------------------------------------- bad input -> clear errors
def _good():
    return make_inputs([3, 5], 16, 8, torch.float16)


def _with(**changes):
    x, w, offs = _good()
    return changes.get("x", x), changes.get("w", w), changes.get("offs", offs)


# every tensor on the kernels' device: each case breaks exactly one rule
@pytest.mark.parametrize("make,exc,pattern", [
    (lambda: _with(x=torch.zeros(8, 16, 1, dtype=torch.float16, device=DEVICE)), ValueError, "x must be 2-D"),
    (lambda: _with(w=torch.zeros(16, 8, dtype=torch.float16, device=DEVICE)), ValueError, "w must be 3-D"),
    (lambda: _with(w=torch.zeros(2, 15, 8, dtype=torch.float16, device=DEVICE)), ValueError, r"K must match \(16 != 15\)"),
    (lambda: _with(w=torch.zeros(0, 16, 8, dtype=torch.float16, device=DEVICE)), ValueError, "at least one expert"),
    (lambda: _with(w=torch.zeros(2, 16, 8, dtype=torch.bfloat16, device=DEVICE)), TypeError, "share one dtype"),
    (lambda: _with(x=torch.zeros(8, 16, dtype=torch.float64, device=DEVICE)), TypeError, "dtype float64"),
    (lambda: _with(offs=[3, 8]), TypeError, "offs must be a torch.Tensor"),
    (lambda: _with(offs=torch.tensor([3, 8], device=DEVICE)), TypeError, "offs must be int32.*got int64"),
    (lambda: _with(offs=torch.tensor([[3, 8]], dtype=torch.int32, device=DEVICE)), ValueError, r"shape \[E\] = \[2\]"),
    (lambda: _with(offs=torch.tensor([8], dtype=torch.int32, device=DEVICE)), ValueError, r"shape \[E\] = \[2\].*got \[1\]"),
    (lambda: _with(offs=torch.tensor([5, 3], dtype=torch.int32, device=DEVICE)), ValueError,
     r"non-decreasing.*offs\[0\] = 5 > offs\[1\] = 3"),
    (lambda: _with(offs=torch.tensor([3, 9], dtype=torch.int32, device=DEVICE)), ValueError,
     r"offs\[-1\] = 9 but x has only T = 8 rows"),
    (lambda: _with(offs=torch.tensor([-1, 8], dtype=torch.int32, device=DEVICE)), ValueError, r"offs\[0\] = -1 is negative"),
])
def test_bad_inputs(make, exc, pattern):
    """Refused on the host: shapes and dtypes always; offs' values with check_offs=True (and by
    default on the CPU, where reading them is free)."""
    x, w, offs = make()
    with pytest.raises(exc, match=pattern):
        grouped_mm(x, w, offs, check_offs=True)
    if not runtime.on_gpu():
        with pytest.raises(exc, match=pattern):
            grouped_mm(x, w, offs)


@pytest.mark.skipif(runtime.on_gpu(), reason="on a GPU the cpu/cuda case below covers this")
def test_device_mix_is_named():
    x, w, offs = _good()
    with pytest.raises(ValueError, match="share one device"):
        grouped_mm(x, w, offs.to("meta"))
    with pytest.raises(ValueError, match="w is on meta"):
        grouped_mm(x, w.to("meta"), offs)


@pytest.mark.gpu
def test_device_mix_is_named_on_gpu():
    x, w, offs = _good()
    with pytest.raises(ValueError, match="share one device"):
        grouped_mm(x, w, offs.cpu())


def test_bad_options():
    x, w, offs = _good()
    with pytest.raises(TypeError, match="tma must be None, True or False"):
        grouped_mm(x, w, offs, tma="auto")
    with pytest.raises(TypeError, match="check_offs must be None, True or False"):
        grouped_mm(x, w, offs, check_offs="yes")


def test_tma_true_rejects_unaligned_tensors():
    x, w, offs = make_inputs([3, 5], 20, 8, torch.float16)  # 20 * 2 = 40-byte rows
    with pytest.raises(ValueError, match=r"tma=True: x \(shape \[8, 20\], strides \[20, 1\]"):
        grouped_mm(x, w, offs, tma=True)
    x, w, offs = make_inputs([3, 5], 16, 12, torch.float16)  # w rows 24 bytes
    with pytest.raises(ValueError, match=r"tma=True: w \(shape \[2, 16, 12\]"):
        grouped_mm(x, w, offs, tma=True)
    check(x, w, offs, tma=None)  # the automatic choice falls back to pointer loads


def test_tma_without_hardware_says_why(monkeypatch):
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)
    x, w, offs = _good()
    with pytest.raises(RuntimeError, match=r"needs the Tensor Memory Accelerator.*sm_90.*tma=False"):
        grouped_mm(x, w, offs, tma=True)
    assert moe._plan_tma(x, w, x, None)["USE_TMA"] is False  # automatic: pointer loads, no error


# ---------------------------------------------------------------- routing helper
def test_route_tokens_counts_and_offsets():
    r = route_tokens(100, 8, 2, generator=torch.Generator().manual_seed(0))
    assert r.counts.sum().item() == 200 and r.counts.shape == (8,)
    assert r.offs.dtype == torch.int32 and r.offs.device.type == DEVICE.type
    assert r.offs.tolist() == np.cumsum(r.counts.tolist()).tolist()
    assert r.experts.shape == (100, 2)
    assert (r.experts[:, 0] != r.experts[:, 1]).all(), "a token's top_k experts must be distinct"
    again = route_tokens(100, 8, 2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(r.counts, again.counts)


def test_route_tokens_huge_skew_picks_the_top_experts():
    """Weights 1/(e+1)**1100 underflow to 0 in float64; sampled in log space they still rank:
    every token goes to experts 0 and 1, the heaviest two."""
    r = route_tokens(1000, 8, 2, skew=1100.0, generator=torch.Generator().manual_seed(0))
    assert r.counts.tolist() == [1000, 1000, 0, 0, 0, 0, 0, 0]
    assert (r.experts.sort(dim=1).values == torch.tensor([0, 1])).all()


def test_route_tokens_skew_concentrates_load():
    uniform = route_tokens(4000, 16, 2, skew=0.0, generator=torch.Generator().manual_seed(0)).counts
    skewed = route_tokens(4000, 16, 2, skew=1.5, generator=torch.Generator().manual_seed(0)).counts
    assert uniform.max() < 1.3 * uniform.float().mean()  # about 500 each
    assert skewed[0] > 3 * skewed[-1] and skewed.max() == skewed[0]


def test_route_tokens_validation():
    with pytest.raises(ValueError, match="top_k = 3 but there are only 2 experts"):
        route_tokens(10, 2, 3)
    with pytest.raises(ValueError, match="skew must be finite and >= 0"):
        route_tokens(10, 4, 1, skew=-1.0)
    with pytest.raises(TypeError, match="skew must be a number.*str '1'"):
        route_tokens(10, 4, 1, skew="1")
    assert route_tokens(0, 4, 2).counts.tolist() == [0, 0, 0, 0]


# ---------------------------------------------------------------- real sizes on the GPU
def _torch_grouped_mm():
    fn = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    return fn


def _check_gpu_moe(tokens, E, top_k, K, N, skew, dtype, tma, w_transposed):
    routing = route_tokens(tokens, E, top_k, skew=skew, generator=torch.Generator().manual_seed(0))
    T = tokens * top_k
    x = torch.randn(T, K, device=DEVICE, dtype=dtype)
    w = (torch.randn(E, N, K, device=DEVICE, dtype=dtype).transpose(1, 2) if w_transposed
         else torch.randn(E, K, N, device=DEVICE, dtype=dtype))
    out = grouped_mm(x, w, routing.offs, tma=tma)
    assert_close(out, grouped_mm_ref(x, w, routing.offs, out_dtype=torch.float64), dtype)
    return x, w, routing.offs, out


MOE_SHAPES = {  # tokens, experts, top_k, hidden K, expert width N
    "mixtral-w1": (4096, 8, 2, 4096, 14336),
    "mixtral-w2": (4096, 8, 2, 14336, 4096),
    "deepseek-v3-w1": (2048, 256, 8, 7168, 2048),
    "deepseek-v3-w2": (2048, 256, 8, 2048, 7168),
    "decode-few-tokens": (16, 64, 6, 2048, 1408),
}


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [None, False])
@pytest.mark.parametrize("skew", [0.0, 1.2], ids=["uniform", "zipf1.2"])
@pytest.mark.parametrize("name", list(MOE_SHAPES))
def test_gpu_moe_shapes(name, skew, tma):
    tokens, E, top_k, K, N = MOE_SHAPES[name]
    _check_gpu_moe(tokens, E, top_k, K, N, skew, torch.bfloat16, tma, w_transposed=True)


@pytest.mark.gpu
@pytest.mark.parametrize("w_transposed", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_moe_layouts_and_ragged(dtype, w_transposed):
    # ragged hidden sizes force pointer loads under tma=None; aligned ones use TMA
    for K, N in [(1000, 1001), (1024, 2048)]:
        _check_gpu_moe(1000, 16, 2, K, N, 1.0, dtype, None, w_transposed)


@pytest.mark.gpu
@pytest.mark.parametrize("check_offs", [None, False])
def test_gpu_kept_launches_hold_none_of_the_callers_tensors(check_offs):
    """grouped_mm keeps one bound launch per shape: it must not keep x, w, out or offs (GPU
    memory) alive, and the next call with the same shape must read its own tensors."""
    import gc
    import weakref

    x, w, offs, out = _check_gpu_moe(300, 8, 2, 256, 128, 1.0, torch.bfloat16, None, w_transposed=True)
    again = grouped_mm(x, w, offs, check_offs=check_offs)  # the first call of this key binds the launch
    refs = [weakref.ref(t) for t in (x, w, offs, out, again)]
    del x, w, offs, out, again
    gc.collect()
    assert all(r() is None for r in refs)
    _check_gpu_moe(300, 8, 2, 256, 128, 1.0, torch.bfloat16, None, w_transposed=True)


@pytest.mark.gpu
@pytest.mark.parametrize("w_transposed", [False, True])
def test_gpu_shared_out_descriptor_writes_every_row_right(w_transposed):
    """Tiles that end inside their expert store through one [T, N] descriptor, the expert's last
    row tile through its own (OUT_SHARED_DESC): every config, checked and unchecked, with and
    without it, writes every row right (NaN-poisoned out, a zero tail) and the two agree bit for
    bit.  (A store past an expert's end could be overwritten by the next expert's tile; that it
    cannot happen rests on the kernel's condition, first_row + BLOCK_M <= row_end.)"""
    from gemm_kernels.bench import moe_configs

    if not runtime.supports_tma():
        pytest.skip("this GPU has no TMA: the store under test is a TMA store")

    counts = [0, 1, 127, 128, 129, 300, 256, 64, 0]
    x, w, offs = make_inputs(counts, 256, 384, torch.bfloat16, w_transposed=w_transposed)
    x = torch.cat([x, torch.randn(37, 256, device=DEVICE).to(torch.bfloat16)])  # offs[-1] < T: a zero tail
    launches, _, out = moe_configs.candidates(x, w, offs, switch="OUT_SHARED_DESC")
    assert moe._plan_tma(x, w, out, None)["OUT_TMA"], "this test is about the TMA store"
    ref = grouped_mm_ref(x, w, offs, out_dtype=torch.float64)
    results = {}
    for name, launch in launches[:-1]:
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        assert_close(out, ref, torch.bfloat16, what=name)
        results[name] = out.clone()
    for name, result in results.items():
        if name.endswith("=True"):
            assert torch.equal(result, results[name[:-len("True")] + "False"]), name


@pytest.mark.gpu
def test_gpu_matches_torch_grouped_mm():
    fn = _torch_grouped_mm()
    if fn is None:
        pytest.skip("this torch has neither torch.nn.functional.grouped_mm nor torch._grouped_mm")
    x, w, offs, out = _check_gpu_moe(2048, 32, 4, 2048, 1024, 1.0, torch.bfloat16, None, w_transposed=True)
    try:
        theirs = fn(x, w, offs=offs)
    except (RuntimeError, TypeError, NotImplementedError) as err:  # e.g. not built for this GPU
        pytest.skip(f"torch's grouped mm is not usable here: {err}")
    assert_close(out, theirs.double(), torch.bfloat16, what="grouped_mm vs torch grouped mm")


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
def test_gpu_trace_equals_mirror(tma):
    counts = [700, 0, 5, 129, 0, 3000, 64]
    x, w, offs = make_inputs(counts, 256, 512, torch.bfloat16)
    _, trace = trace_moe_schedule(x, w, offs, tma=tma)
    blocks = moe.configs.moe_configs()[0].kwargs
    bm, bn = blocks["BLOCK_M"], blocks["BLOCK_N"]
    mirror = multi_problem_schedule([(c, 512) for c in counts], bm, bn,
                                    num_programs_for(sum(counts), len(counts), 512, bm, bn), "grouped",
                                    blocks["GROUP_SIZE_M"])
    np.testing.assert_array_equal(trace.numpy(), mirror[:, [1, 3, 4, 5]])


# ---------------------------------------------------------------- 64-bit offsets
def test_strides_whose_products_pass_2_to_the_31_are_read_right(tmp_path):
    """x[t, k] at t + k * 2**28 elements: k * stride passes 2**31 from k = 8 on, where 32-bit
    offsets wrap (a read far outside x: a crash or garbage).  x is a strided view of a sparse file
    mapped into memory, so only the pages the kernel touches ever exist (K of them); the
    gathered copy is small.  On a GPU the same file would have to be copied: CPU only."""
    if runtime.on_gpu():
        pytest.skip("the 8 GiB sparse mapping is a CPU interpreter test (a GPU copy would allocate it)")
    T, K, N, stride = 6, 12, 8, 2**28
    path = tmp_path / "sparse.bin"
    elements = (K - 1) * stride + T
    with open(path, "wb") as f:
        f.truncate(elements * 2)  # fp16: a sparse file, nothing allocated
    storage = torch.from_file(str(path), shared=True, size=elements, dtype=torch.float16)
    x = storage.as_strided((T, K), (1, stride))
    x.copy_(torch.randn(T, K, generator=torch.Generator().manual_seed(0)).half())  # touches K pages
    w = torch.randn(2, K, N, generator=torch.Generator().manual_seed(1)).half()
    offs = torch.tensor([2, 6], dtype=torch.int32)
    ref = grouped_mm_ref(x.contiguous(), w, offs, out_dtype=torch.float64)
    assert_close(grouped_mm(x, w, offs, tma=False), ref, torch.float16)
    # and the weight gradient, reading x transposed through the same strides
    dy = torch.randn(T, N, generator=torch.Generator().manual_seed(2)).half()
    assert_close(moe.grouped_mm_wgrad(x, dy, offs, tma=False).flatten(0, 1),
                 moe_wgrad.grouped_mm_wgrad_ref(x.contiguous(), dy, offs).flatten(0, 1), torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, None], ids=["pointers", "auto"])
@pytest.mark.parametrize("layout", ["columns", "rows"])
def test_gpu_strides_whose_products_pass_2_to_the_31_are_read_right(layout, tma):
    """The test above on a GPU, compiled, in two layouts: x[t, k] at t + k * 2**28 elements
    (columns) or at t * 2**28 + k (rows, 10 rows: a 4.5e9-element span that TMA can describe), in
    a buffer of 5.5 or 9 GiB of which only the touched elements hold data.  With 32-bit offsets
    the kernel would read outside x (an illegal address) or garbage."""
    T, K, N, stride = (6, 12, 8, 2**28) if layout == "columns" else (10, 16, 8, 2**28)
    shape_strides = ((T, K), (1, stride)) if layout == "columns" else ((T, K), (stride, 1))
    elements = (max(T, K) - 1) * stride + max(T, K)
    free = runtime.free_gpu_bytes()
    if free is not None and free < elements * 2 * 1.2:
        pytest.skip(f"needs about {elements * 2 / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB free")
    storage = torch.empty(elements, device=DEVICE, dtype=torch.float16)
    x = storage.as_strided(*shape_strides)
    x.copy_(torch.randn(T, K, generator=torch.Generator().manual_seed(0)).half().to(DEVICE))
    w = torch.randn(2, K, N, generator=torch.Generator().manual_seed(1)).half().to(DEVICE)
    offs = torch.tensor([2, T], dtype=torch.int32, device=DEVICE)
    ref = grouped_mm_ref(x.contiguous(), w, offs, out_dtype=torch.float64)
    assert_close(grouped_mm(x, w, offs, tma=tma), ref, torch.float16)
    dy = torch.randn(T, N, generator=torch.Generator().manual_seed(2)).half().to(DEVICE)
    assert_close(moe.grouped_mm_wgrad(x, dy, offs, tma=tma).flatten(0, 1),
                 moe_wgrad.grouped_mm_wgrad_ref(x.contiguous(), dy, offs).flatten(0, 1), torch.float16)
    torch.cuda.synchronize()
    del storage, x
    torch.cuda.empty_cache()


# ---------------------------------------------------------------- the weight gradient kernel
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("counts,tail", [([9, 0, 40, 1, 0], 0), ([0, 33, 7], 5), ([0, 0], 3), ([70], 0)])
def test_wgrad_matches_float64(counts, tail, dtype, tma):
    """dw[e] = x_eᵀ dy_e: ragged rows (the reduction), idle experts (zeros), rows past offs[-1]
    (left out of every sum), a single expert; ragged K = 40 and N = 24 (TMA: 16-byte rows)."""
    x, _, offs = make_inputs(counts + [tail], 40, 24, dtype)
    offs = offs[:-1].contiguous()
    dy = torch.randn(x.shape[0], 24, generator=torch.Generator().manual_seed(5)).to(DEVICE, dtype)
    dw = moe.grouped_mm_wgrad(x, dy, offs, tma=tma)
    assert dw.shape == (len(counts), 40, 24) and dw.dtype == dtype
    assert_close(dw.flatten(0, 1), moe_wgrad.grouped_mm_wgrad_ref(x, dy, offs).flatten(0, 1), dtype)
    for e, c in enumerate(counts):
        if c == 0:
            assert torch.equal(dw[e].float().cpu(), torch.zeros(40, 24)), f"idle expert {e} must get zeros"


@pytest.mark.parametrize("tma", [False, True])
def test_wgrad_repeated_shape_reads_each_calls_tensors_and_keeps_none(tma):
    """On a GPU the second call of a shape takes the kept (bound) launch: it must read its own
    x, dy and offs, and the kept launch must not hold the first call's tensors."""
    import gc
    import weakref

    for seed in (1, 2):  # same shapes, other values and another routing
        counts = [9, 0, 40, 1, 0] if seed == 1 else [0, 30, 20, 0, 0]
        x, _, offs = make_inputs(counts + [0], 48, 32, torch.bfloat16)
        offs = offs[:-1].contiguous()
        dy = torch.randn(x.shape[0], 32, generator=torch.Generator().manual_seed(seed)).to(DEVICE, torch.bfloat16)
        dw = moe.grouped_mm_wgrad(x, dy, offs, tma=tma)
        assert_close(dw.flatten(0, 1), moe_wgrad.grouped_mm_wgrad_ref(x, dy, offs).flatten(0, 1), torch.bfloat16)
        refs = [weakref.ref(t) for t in (x, dy, offs, dw)]
        del x, dy, offs, dw
        gc.collect()
        assert all(r() is None for r in refs)


def test_wgrad_tile_lookup_visits_every_tile_once():
    """wgrad_tile's (expert, pid_m, pid_n) over all tiles = every tile of every expert once."""
    from gemm_kernels.lab.exercises.moe_training import run_wgrad_tile_lookup
    offs = torch.tensor([3, 3, 40, 41], dtype=torch.int32, device=DEVICE)
    table = run_wgrad_tile_lookup(moe_wgrad.wgrad_tile, offs, T=45, num_pid_m=3, num_pid_n=5, group_size_m=2)
    assert sorted(map(tuple, table[:, :3].tolist())) == [(e, m, n) for e in range(4) for m in range(3)
                                                          for n in range(5)]
    starts, rows = [0, 3, 3, 40], [3, 0, 37, 1]
    for expert, _, _, first_row, count in table.tolist():
        assert (first_row, count) == (starts[expert], rows[expert])


# ---------------------------------------------------------------- backward
def _reference_grads(x, w, offs, dy):
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    from gemm_kernels.lab.moe_training import grouped_mm_torch
    grouped_mm_torch(x64, w64, offs).backward(dy.double())
    return x64.grad, w64.grad


@pytest.mark.parametrize("w_transposed", [False, True], ids=["w_EKN", "w_view_of_ENK"])
@pytest.mark.parametrize("tma", [None, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_backward_matches_float64(dtype, tma, w_transposed):
    """Ragged rows, an idle expert in the middle and at the end, 7 rows past offs[-1]."""
    counts = [13, 0, 30, 2, 0]
    x, w, offs = make_inputs(counts + [7], 32, 48, dtype, w_transposed=w_transposed)
    w = w[:-1]
    offs = offs[:-1].contiguous()
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    dy = torch.randn(x.shape[0], 48, generator=torch.Generator().manual_seed(9)).to(DEVICE, dtype)
    out = grouped_mm(x, w, offs, tma=tma)
    assert out.grad_fn is not None
    out.backward(dy)
    ref_dx, ref_dw = _reference_grads(x, w, offs, dy)
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and x.grad.dtype == w.grad.dtype == dtype
    assert_close(x.grad, ref_dx, dtype, what="dx")
    assert_close(w.grad.flatten(0, 1), ref_dw.flatten(0, 1), dtype, what="dw")
    assert torch.equal(x.grad[45:].float().cpu(), torch.zeros(7, 32)), "rows past offs[-1] get no gradient"
    assert torch.equal(w.grad[1].float().cpu(), torch.zeros(32, 48)), "an idle expert's weights get zeros"


@pytest.mark.filterwarnings("ignore:Input #.*double precision")
def test_gradcheck_fp32():
    """torch.autograd.gradcheck in fp32 (the kernels take no fp64; the interpreter's fp32 dot is
    exact, so finite differences with eps 1e-2 agree to 1e-2)."""
    if runtime.on_gpu():
        pytest.skip("fp32 runs TF32 tensor cores on a GPU: finite differences are too coarse there")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(9, 5, generator=gen, requires_grad=True)
    w = torch.randn(3, 5, 4, generator=gen, requires_grad=True)
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)
    assert torch.autograd.gradcheck(lambda x, w: grouped_mm(x, w, offs), (x, w), eps=1e-2, atol=1e-2, rtol=1e-2,
                                    fast_mode=True)


def test_only_inputs_that_require_grad_get_one():
    x, w, offs = make_inputs([5, 9], 16, 24, torch.float32)
    w.requires_grad_()
    grouped_mm(x, w, offs).sum().backward()
    assert w.grad is not None and x.grad is None
    with torch.no_grad():
        assert not grouped_mm(x, w, offs).requires_grad


def test_moe_layer_compiles_without_graph_breaks():
    """A whole MoE layer (route, gather, grouped_mm, gelu, grouped_mm, scatter) under
    torch.compile(fullgraph=True): a graph break would raise.  Backend aot_eager: it runs the
    ops' fake implementations and traces the backward like inductor, without inductor's C++ code
    generation for the surrounding ops (about 20 s on a 2-core CPU); the graph is the same."""
    from gemm_kernels.lab.moe_training import make_layer, moe_layer
    x, _, params = make_layer(40, 32, 48, 6, seed=1)
    w_up, w_down = params["w_up"].requires_grad_(), params["w_down"].requires_grad_()

    def loss(x, router, w_up, w_down):
        return moe_layer(x, router, w_up, w_down, 2).square().mean()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    compiled(x, params["router"], w_up, w_down).backward()
    grads = w_up.grad.clone(), w_down.grad.clone()
    w_up.grad = w_down.grad = None
    loss(x, params["router"], w_up, w_down).backward()
    assert_close(grads[0].flatten(0, 1), w_up.grad.double().flatten(0, 1), torch.float32)
    assert_close(grads[1].flatten(0, 1), w_down.grad.double().flatten(0, 1), torch.float32)


def test_training_matches_torch():
    """A few SGD steps of the layer: the loss curve with grouped_mm = the torch loop's."""
    from gemm_kernels.lab.moe_training import grouped_mm_torch, make_layer, train
    x, target, params = make_layer(48, 32, 48, 6, seed=2)
    ours = train(x, target, params, top_k=2, steps=3)
    theirs = train(x, target, params, top_k=2, steps=3, expert_mm=grouped_mm_torch)
    assert ours[-1] < ours[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-3)


# ---------------------------------------------------------------- GPU: sync-free, graphs, bad offs, real sizes
@pytest.mark.gpu
def test_gpu_default_call_never_syncs():
    """torch.cuda.set_sync_debug_mode("error") raises on any call that waits for the device."""
    x, w, offs = make_inputs([300, 0, 129, 64], 256, 512, torch.bfloat16)
    grouped_mm(x, w, offs)  # first call: tuning and compiling may sync
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = grouped_mm(x, w, offs)
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        grouped_mm(xg, wg, offs).backward(out)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert_close(out, grouped_mm_ref(x, w, offs, out_dtype=torch.float64), torch.bfloat16)


@pytest.mark.gpu
def test_gpu_cuda_graph_capture_and_replay():
    """grouped_mm's default call captured in a CUDA graph; replays follow new routings written
    into the same offs buffer (the kernel reads offs on the device)."""
    counts = [100, 0, 37, 200]
    x, w, offs = make_inputs(counts, 128, 256, torch.bfloat16)
    grouped_mm(x, w, offs)  # warm up (tune, compile) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = grouped_mm(x, w, offs)
    for new_counts in ([100, 0, 37, 200], [0, 337, 0, 0], [10, 20, 30, 40]):
        offs.copy_(torch.tensor(np.cumsum(new_counts), dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, grouped_mm_ref(x, w, offs, out_dtype=torch.float64), torch.bfloat16)


@pytest.mark.gpu
def test_gpu_stream_buffer_is_kept_per_stream_and_fresh_in_a_capture():
    """runtime.stream_buffer: the same buffer for the same (device, stream, purpose), another
    for another stream, a bigger one when asked for more, and a fresh one while a graph is
    being captured (a graph may replay on another stream while eager launches use the kept one)."""
    index = torch.cuda.current_device()
    first = runtime.stream_buffer("test", 4, torch.int32, index)
    assert first.dtype == torch.int32 and first.numel() >= 4 and first.device == torch.device("cuda", index)
    assert runtime.stream_buffer("test", 2, torch.int32, index).data_ptr() == first.data_ptr()
    assert runtime.stream_buffer("other test", 2, torch.int32, index).data_ptr() != first.data_ptr()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = runtime.stream_buffer("test", 4, torch.int32, index)
    assert on_side.data_ptr() != first.data_ptr()
    with torch.cuda.stream(side):
        assert runtime.stream_buffer("test", 2, torch.int32, index).data_ptr() == on_side.data_ptr()
    bigger = runtime.stream_buffer("test", 1 << 20, torch.int32, index)
    assert bigger.numel() >= 1 << 20
    assert runtime.stream_buffer("test", 4, torch.int32, index).data_ptr() == bigger.data_ptr()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = runtime.stream_buffer("test", 4, torch.int32, index)
        captured.fill_(1)
    assert captured.data_ptr() not in {bigger.data_ptr(), on_side.data_ptr()}


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [None, False])
def test_gpu_calls_on_two_streams_at_once(tma):
    """Two streams running grouped_mm side by side, each on its own data: Triton's descriptor
    scratch is kept per stream (runtime.stream_buffer), so neither call sees the other's (a
    shared scratch would give wrong rows)."""
    inputs = [make_inputs(c, 256, 384, torch.bfloat16, w_transposed=t, seed=s)
              for s, (c, t) in enumerate((([300, 0, 129, 64], True), ([7, 250, 1, 333], False)))]
    refs = [grouped_mm_ref(x, w, offs, out_dtype=torch.float64) for x, w, offs in inputs]
    for x, w, offs in inputs:
        grouped_mm(x, w, offs, tma=tma)  # compile and tune first
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in inputs]
    outs: list[list] = [[], []]
    for _ in range(20):
        for i, (stream, (x, w, offs)) in enumerate(zip(streams, inputs)):
            with torch.cuda.stream(stream):
                outs[i].append(grouped_mm(x, w, offs, tma=tma))
    torch.cuda.synchronize()
    for ref, results in zip(refs, outs):
        for out in results:
            assert_close(out, ref, torch.bfloat16)


BAD_OFFS = {  # offs for x of 64 rows and 3 experts -> what the report must say
    "decreasing": ([40, 20, 64], r"offs must be non-decreasing, but offs\[0\] = 40 > offs\[1\] = 20"),
    "negative": ([-3, 10, 64], r"offs\[0\] = -3 is negative"),
    "negative inside": ([3, -10, 64], r"offs\[1\] = -10 is negative"),
    "past T": ([10, 20, 65], r"offs\[2\] = 65 but x has only T = 64 rows"),
    "far past T": ([10, 2**31 - 1, 2**31 - 1], r"offs\[1\] = 2147483647 but x has only T = 64 rows"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(BAD_OFFS))
def test_gpu_bad_offs_is_reported_at_the_next_call_without_a_sync(name):
    """The default call returns without waiting; its kernel records the bad entry in pinned host
    memory; the next call raises a ValueError naming it (the CUDA context survives, and later
    calls work); raise_pending_offs_error does the same after a synchronize."""
    from gemm_kernels import raise_pending_offs_error

    offs_list, message = BAD_OFFS[name]
    x, w, good = make_inputs([20, 0, 44], 32, 16, torch.float16)
    bad = torch.tensor(offs_list, device=DEVICE, dtype=torch.int32)
    grouped_mm(x, w, good)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        grouped_mm(x, w, bad)  # no sync here
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match="a call launched earlier had a bad offs .*" + message):
        grouped_mm(x, w, good)
    check(x, w, good)  # reported once, then cleared; the context is fine
    grouped_mm(x, w, bad)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=message):
        raise_pending_offs_error()
    raise_pending_offs_error()  # nothing pending


@pytest.mark.gpu
def test_gpu_unchecked_calls_and_other_streams_give_no_false_alarm():
    """check_offs=False calls with a bad offs (on this stream and another), mixed with default
    calls with a good one, report nothing; a default call with a bad offs on a side stream is
    reported like any other."""
    from gemm_kernels import raise_pending_offs_error

    x, w, good = make_inputs([20, 0, 44], 32, 16, torch.float16)
    bad = torch.tensor(BAD_OFFS["decreasing"][0], device=DEVICE, dtype=torch.int32)
    other = torch.cuda.Stream()
    for _ in range(50):
        grouped_mm(x, w, good)
        with torch.cuda.stream(other):
            grouped_mm(x, w, bad, check_offs=False)
        grouped_mm(x, w, bad, check_offs=False)
    torch.cuda.synchronize()
    raise_pending_offs_error()  # nothing pending
    with torch.cuda.stream(other):
        grouped_mm(x, w, bad)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=BAD_OFFS["decreasing"][1]):
        grouped_mm(x, w, good)


@pytest.mark.gpu
def test_gpu_bad_offs_in_a_cuda_graph_replay_is_reported():
    """A captured default call checks the offs of each replay (the record is pinned host memory)."""
    from gemm_kernels import raise_pending_offs_error

    x, w, offs = make_inputs([20, 0, 44], 32, 16, torch.float16)
    grouped_mm(x, w, offs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_mm(x, w, offs)
    graph.replay()
    torch.cuda.synchronize()
    raise_pending_offs_error()  # good offs: nothing
    offs.copy_(torch.tensor(BAD_OFFS["past T"][0], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=BAD_OFFS["past T"][1]):
        raise_pending_offs_error()


@pytest.mark.gpu
def test_gpu_bad_offs_under_memcheck():
    """tests/sanitize_bad_offs.py under compute-sanitizer memcheck: bad offs through the unchecked
    path, the weight gradient and the default call touch no memory outside x, w, dy and the
    outputs (0 errors), and every default call's bad offs is reported after the synchronize."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on the PATH")
    script = Path(__file__).with_name("sanitize_bad_offs.py")
    env = {**__import__("os").environ, "GEMM_KERNELS_AUTOTUNE": "0"}

    def run(mode):
        return subprocess.run([sanitizer, "--tool", "memcheck", sys.executable, str(script), mode],
                              capture_output=True, text=True, timeout=600, env=env)

    unchecked = run("unchecked")
    text = unchecked.stdout + unchecked.stderr
    assert unchecked.returncode == 0 and "ERROR SUMMARY: 0 errors" in text, text[-3000:]
    assert "unchecked path and weight gradient: 0 wrong" in text
    default = run("default")
    text = default.stdout + default.stderr
    assert default.returncode == 0 and "ERROR SUMMARY: 0 errors" in text, text[-3000:]
    assert "launched without a sync" in text and "5 of 5 reported" in text, text[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,E,top_k,K,N", [
    (1024, 8, 2, 4096, 14336),   # Mixtral-8x7B gate/up
    (1024, 128, 8, 2048, 768),   # Qwen3-30B-A3B gate/up: 64 rows per expert on average
    (16, 64, 6, 2048, 1408),     # DeepSeek-V2-Lite, a decode-sized batch: most experts idle
], ids=["mixtral-up", "qwen3-30b-up", "few-tokens"])
def test_gpu_backward_matches_float64(tokens, E, top_k, K, N):
    """dx and dw at real sizes against float64 loops (the float64 dw of a 256-expert model would
    not fit: sizes keep it under 4 GiB)."""
    routing = route_tokens(tokens, E, top_k, skew=1.0, generator=torch.Generator().manual_seed(0))
    T = tokens * top_k
    x = torch.randn(T, K, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(E, N, K, device=DEVICE, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    dy = torch.randn(T, N, device=DEVICE, dtype=torch.bfloat16)
    grouped_mm(x, w, routing.offs).backward(dy)
    dx_ref = grouped_mm_ref(dy, w.detach().transpose(1, 2), routing.offs, out_dtype=torch.float64)
    assert_close(x.grad, dx_ref, torch.bfloat16, what="dx")
    dw_ref = moe_wgrad.grouped_mm_wgrad_ref(x.detach(), dy, routing.offs)
    assert_close(w.grad.flatten(0, 1), dw_ref.flatten(0, 1), torch.bfloat16, what="dw")


@pytest.mark.parametrize("offs, T, expected", [
    ([-3, 10, 64], 64, "offs[0] = -3 is negative"),
    ([3, -10, 64], 64, "offs[1] = -10 is negative"),
    ([40, 20, 64], 64, "offs must be non-decreasing, but offs[0] = 40 > offs[1] = 20"),
    ([10, 20, 65], 64, "offs[2] = 65 but x has only T = 64 rows (every entry must be <= T)"),
    ([3, 10, 5], 8, "offs[1] = 10 but x has only T = 8 rows (every entry must be <= T)"),
    ([0, 0, 2**31 - 1], 64, "offs[2] = 2147483647 but x has only T = 64 rows"),
])
def test_device_check_report_names_the_entry(offs, T, expected, monkeypatch):
    """The kernel's first bad lane (mirrored here in numpy: lane e checks offs[e-1], or 0, against
    offs[e], or T for the tail) and its record [flag, lane, offs[lane-1], offs[lane], T, E, -, -]
    become a message naming the entry; reading it clears the flag (the record is faked here:
    pinned memory needs a GPU)."""
    E = len(offs)
    starts = np.array([0, *offs], dtype=np.int64)
    ends = np.array([*offs, T], dtype=np.int64)
    bad = (starts < 0) | (ends < starts) | (ends > T)
    lane = int(np.argmax(bad))
    assert bad.any()
    record = np.array([1, lane, starts[lane], ends[lane], T, E, 0, 0], dtype=np.int64).astype(np.int32)
    monkeypatch.setattr(moe._errors, "_view", record)
    assert expected in moe.describe_bad_offs(lane, int(starts[lane]), int(ends[lane]), T)
    with pytest.raises(ValueError, match="a call launched earlier had a bad offs .*" + re.escape(expected)):
        moe.raise_pending_offs_error()
    assert record[0] == 0
    moe.raise_pending_offs_error()  # nothing pending now
