"""gemm_kernels.grouped_mm (MoE): routings against float64, the device-side expert lookup against the
numpy mirror, w layouts, TMA choices, offs validation, and the routing helper."""

import numpy as np
import pytest
import torch

from gemm_kernels import DEVICE, grouped_mm, grouped_mm_ref, route_tokens, runtime
from gemm_kernels.kernels import moe
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


@pytest.mark.parametrize("tma", [False, True])
def test_stores_stop_at_the_experts_last_row(tma):
    """A tile's rows past its expert's end belong to someone else: they must never be written.
    Here nobody owns rows 21..39 (offs[-1] < T, allowed only unchecked), so they stay NaN (the
    test suite poisons torch.empty); the last expert's tile spans them with either store."""
    x, w, _ = make_inputs([15, 6, 19], 32, 16, torch.float16)
    offs = torch.tensor([15, 21, 21], dtype=torch.int32, device=DEVICE)
    out = grouped_mm(x, w, offs, tma=tma, check_offs=False).float().cpu()
    assert torch.isnan(out[21:]).all(), "rows owned by no expert were written"
    ref = grouped_mm_ref(x[:21], w, offs, out_dtype=torch.float64)
    assert_close(out[:21], ref, torch.float16)


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
        tiles = sum(-(-int(c) // bm) for c in counts)
        assert min(-(-T // bm) + E, T) >= tiles


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
    (lambda: _with(offs=torch.tensor([3, 7], dtype=torch.int32, device=DEVICE)), ValueError, r"offs\[-1\] = 7 but x has T = 8 rows"),
    (lambda: _with(offs=torch.tensor([-1, 8], dtype=torch.int32, device=DEVICE)), ValueError, r"offs\[0\] = -1 is negative"),
])
def test_bad_inputs(make, exc, pattern):
    x, w, offs = make()
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
    with pytest.raises(TypeError, match="check_offs must be True or False"):
        grouped_mm(x, w, offs, check_offs=None)


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
