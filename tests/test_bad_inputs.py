"""Inputs an adversarial review found mishandled: each must now give the right answer or a clear
ValueError/TypeError, never a wrong answer, a crash or an out-of-bounds access.  Runs in the
interpreter on a CPU and compiled on a GPU."""

import math

import numpy as np
import pytest
import torch
import triton

from gemm_kernels import (DEVICE, grouped_matmul, grouped_matmul_ref, grouped_mm, grouped_mm_ref, matmul, matmul_persistent, matmul_ref,
                          matmul_streamk, matmul_tma, route_tokens)
from gemm_kernels.kernels import streamk
from gemm_kernels.lab import traces
from gemm_kernels.models import l2model, schedule
from gemm_kernels.testing import assert_close

SINGLE_GEMMS = {"matmul": matmul, "matmul_persistent": matmul_persistent, "matmul_tma": matmul_tma,
                "matmul_streamk": matmul_streamk}


def _operands(M, N, K, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(M, K, generator=gen).to(DEVICE, dtype), torch.randn(K, N, generator=gen).to(DEVICE, dtype))


def _config(**overrides):
    kwargs = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, **overrides}
    warps, stages = kwargs.pop("num_warps", 4), kwargs.pop("num_stages", 1)
    return triton.Config(kwargs, num_warps=warps, num_stages=stages)


# ---------------------------------------------------------------- single GEMM
@pytest.mark.parametrize("fn", SINGLE_GEMMS.values(), ids=SINGLE_GEMMS)
@pytest.mark.parametrize("bias_kind", ["every_other_element", "expanded_scalar"])
def test_strided_bias_is_read_by_its_strides(fn, bias_kind):
    a, b = _operands(40, 48, 32)
    if bias_kind == "every_other_element":
        bias = torch.randn(2 * 48).to(DEVICE, torch.float16)[::2]
    else:  # stride 0: one value for every column
        bias = torch.randn(1).to(DEVICE, torch.float16).expand(48)
    out = fn(a, b, bias=bias, activation="relu")
    assert_close(out, matmul_ref(a, b, bias=bias, activation="relu", out_dtype=torch.float64), torch.float16)


@pytest.mark.parametrize("fn", SINGLE_GEMMS.values(), ids=SINGLE_GEMMS)
def test_output_beyond_32_bit_offsets_is_refused_before_allocating(fn):
    a, b = _operands(2**16, 2**16 + 16, 1)  # C would be 2^32 + 2^20 elements
    with pytest.raises(ValueError, match=r"C would be 65536x65552 = \d+ elements: more than 32-bit"):
        fn(a, b)


@pytest.mark.parametrize("fn", SINGLE_GEMMS.values(), ids=SINGLE_GEMMS)
@pytest.mark.parametrize("group_size_m", [2**31 - 1, 2**40])
def test_a_group_taller_than_c_is_the_same_order(fn, group_size_m):
    a, b = _operands(96, 64, 32)
    assert_close(fn(a, b, group_size_m=group_size_m), matmul_ref(a, b, out_dtype=torch.float64), torch.float16)


@pytest.mark.parametrize("fn", [matmul_persistent, matmul_tma, matmul_streamk],
                         ids=["matmul_persistent", "matmul_tma", "matmul_streamk"])
@pytest.mark.parametrize("overrides, error, message", [
    ({"BLOCK_M": -32}, ValueError, r"config BLOCK_M must be a power of two from 16 to 256, got -32"),
    ({"BLOCK_M": 0}, ValueError, r"config BLOCK_M must be a power of two"),
    ({"BLOCK_N": 17}, ValueError, r"config BLOCK_N must be a power of two"),
    ({"BLOCK_K": 8}, ValueError, r"config BLOCK_K must be a power of two from 16"),
    ({"BLOCK_M": 32.0}, ValueError, r"config BLOCK_M must be a power of two"),
    ({"BLOCK_M": "32"}, ValueError, r"config BLOCK_M must be a power of two"),
    ({"BLOCK_M": True}, ValueError, r"config BLOCK_M must be a power of two"),
    ({"BLOCK_N": 2**20}, ValueError, r"config BLOCK_N must be a power of two from 16 to 256"),
    ({"GROUP_SIZE_M": 4}, ValueError, r"config sets \['GROUP_SIZE_M'\], which this kernel does not take"),
    ({"M": 4}, ValueError, r"config sets \['M'\]"),
    ({"FOO": 1}, ValueError, r"config sets \['FOO'\]"),
    ({"FLATTEN": 1}, TypeError, r"config FLATTEN must be True or False, got 1"),
    ({"num_warps": 0}, ValueError, r"config num_warps must be 1, 2, 4, 8 or 16, got 0"),
    ({"num_warps": 3}, ValueError, r"config num_warps must be"),
    ({"num_stages": -1}, ValueError, r"config num_stages must be an int >= 1, got -1"),
])
def test_explicit_config_values_are_checked(fn, overrides, error, message):
    a, b = _operands(40, 48, 32)
    with pytest.raises(error, match=message):
        fn(a, b, config=_config(**overrides))


def test_streamk_refuses_absurd_program_counts():
    from gemm_kernels import runtime

    a, b = _operands(96, 64, 32)
    limit = streamk.MAX_PROGRAMS_PER_SM * runtime.num_sms()
    per_sm = streamk.MAX_PROGRAMS_PER_SM
    with pytest.raises(ValueError, match=rf"num_programs={limit + 1} is more than {per_sm} per SM"):
        matmul_streamk(a, b, num_programs=limit + 1)
    with pytest.raises(ValueError, match=r"num_programs=2147483647 is more than"):
        matmul_streamk(a, b, num_programs=2**31 - 1)


def test_streamk_trace_reports_an_out_of_range_split_like_the_launcher():
    with pytest.raises(ValueError, match=r"sk_tiles=99 is more than min\(tiles, num_programs\)"):
        traces.trace_streamk_segments(40, 40, 64, sk_tiles=99)


# ---------------------------------------------------------------- grouped GEMMs
def _moe_inputs(counts=(5, 0, 11, 8), K=32, N=48, dtype=torch.float16):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(sum(counts), K, generator=gen).to(DEVICE, dtype)
    w = torch.randn(len(counts), K, N, generator=gen).to(DEVICE, dtype)
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=DEVICE)
    return x, w, offs


@pytest.mark.parametrize("tma", [False, None])
def test_grouped_mm_reads_a_strided_offs_by_its_strides(tma):
    x, w, offs = _moe_inputs()
    interleaved = torch.zeros(2 * offs.numel(), dtype=torch.int32, device=DEVICE)
    interleaved[::2] = offs
    strided = interleaved[::2]
    assert strided.stride(0) == 2
    out = grouped_mm(x, w, strided, tma=tma)
    assert_close(out, grouped_mm_ref(x, w, offs, out_dtype=torch.float64), torch.float16)


@pytest.mark.parametrize("tma", [0, 1, "yes", 1.0])
def test_grouped_mm_tma_flag_must_be_a_bool_or_none(tma):
    x, w, offs = _moe_inputs()
    with pytest.raises(TypeError, match=r"tma must be None, True or False"):
        grouped_mm(x, w, offs, tma=tma)


def test_expanded_operands_never_go_through_a_descriptor():
    """A stride of 0 (an expanded view) is refused by tma=True and read with pointers by tma=None."""
    from gemm_kernels import runtime

    x, _, offs = _moe_inputs()
    w = torch.randn(1, 32, 48).to(DEVICE, torch.float16).expand(4, 32, 48)
    assert_close(grouped_mm(x, w, offs, tma=None), grouped_mm_ref(x, w, offs, out_dtype=torch.float64), torch.float16)
    if runtime.supports_tma():
        with pytest.raises(ValueError, match=r"tma=True: w .* cannot be read through a tensor descriptor"):
            grouped_mm(x, w, offs, tma=True)
        a = torch.randn(1, 32).to(DEVICE, torch.float16).expand(16, 32)
        b = torch.randn(32, 48).to(DEVICE, torch.float16)
        with pytest.raises(ValueError, match=r"group_a\[0\] .* nonzero multiple of 16 bytes"):
            grouped_matmul([a], [b], tma=True)
        assert_close(grouped_matmul([a], [b])[0], matmul_ref(a, b, out_dtype=torch.float64), torch.float16)


@pytest.mark.parametrize("skew", [math.inf, math.nan, -1.0])
def test_route_tokens_skew_must_be_finite_and_non_negative(skew):
    with pytest.raises(ValueError, match=r"skew must be finite and >= 0"):
        route_tokens(8, 4, 2, skew=skew)


# ---------------------------------------------------------------- models
@pytest.mark.parametrize("shape", [(5.5, 7), (5, 7.0, 3), (4, 4, 2.5)])
def test_schedule_sizes_must_be_ints(shape):
    with pytest.raises(TypeError, match=r"problem 0: [MNK] must be an int, got float"):
        schedule.grouped_gemm_schedule([shape], 16, 16, num_programs=2)


def test_schedule_wave_must_be_an_int():
    s = schedule.tile_schedule(64, 64, 16, 16, programs_in_flight=4)
    with pytest.raises(TypeError, match=r"wave must be an int, got float"):
        s.wave_footprint(0.5)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"block_k": 1.5}, TypeError, r"block_k must be an int, got float"),
    ({"block_k": True}, TypeError, r"block_k must be an int, got bool"),
    ({"block_k": 16, "element_bytes": 1.5}, TypeError, r"element_bytes must be an int, got float"),
    ({"block_k": 16, "K": 64.5}, TypeError, r"problem 0: K .* must be an int, got float"),
    ({"block_k": 16, "l2_bytes": math.inf}, ValueError, r"l2_bytes must be finite and >= 0"),
    ({"block_k": 16, "l2_bytes": math.nan}, ValueError, r"l2_bytes must be finite and >= 0"),
])
def test_l2_model_arguments_are_checked(kwargs, error, message):
    s = schedule.tile_schedule(64, 64, 16, 16, programs_in_flight=4)
    kwargs = {"K": 64, **kwargs}
    with pytest.raises(error, match=message):
        l2model.l2_traffic(s, **kwargs)


def test_huge_group_size_and_l2_are_the_same_as_their_largest_useful_value():
    """group_size_m=2**62 and l2_bytes=10**30 overflowed int64 (OverflowError)."""
    tall = schedule.tile_schedule(64, 80, 16, 16, group_size_m=2**62, programs_in_flight=4)
    whole = schedule.tile_schedule(64, 80, 16, 16, group_size_m=4, programs_in_flight=4)  # 4 tile rows
    np.testing.assert_array_equal(tall.table, whole.table)
    persistent = schedule.tile_schedule(64, 80, 16, 16, "persistent", group_size_m=2**62, programs_in_flight=3)
    np.testing.assert_array_equal(
        persistent.table, schedule.tile_schedule(64, 80, 16, 16, "persistent", group_size_m=4, programs_in_flight=3).table)
    grouped = schedule.grouped_gemm_schedule([(64, 64), (32, 48)], 16, 16, num_programs=3, group_size_m=2**62)
    assert grouped.num_tiles == 16 + 6
    huge = l2model.l2_traffic(whole, block_k=16, K=64, l2_bytes=10**30).totals()
    assert huge == l2model.l2_traffic(whole, block_k=16, K=64, l2_bytes=None).totals()


def test_tile_schedule_defaults_to_this_machines_sm_count():
    from gemm_kernels import num_sms

    assert schedule.tile_schedule(64, 64, 16, 16).programs_in_flight == num_sms()
    assert schedule.grouped_gemm_schedule([(64, 64)], 16, 16).programs_in_flight == num_sms()


@pytest.mark.parametrize("l2_bytes", ["50", [50], True])
def test_l2_bytes_must_be_a_number(l2_bytes):
    s = schedule.tile_schedule(64, 64, 16, 16, programs_in_flight=4)
    with pytest.raises(TypeError, match=r"l2_bytes must be a number of bytes \(or None: unlimited\), got"):
        l2model.l2_traffic(s, block_k=16, K=64, l2_bytes=l2_bytes)


@pytest.mark.parametrize("call, error, message", [
    (lambda s, t: s.tile_grid(5), ValueError, r"problem must be in \[0, 1\): this schedule has 1 problem, got 5"),
    (lambda s, t: s.tile_grid(-1), ValueError, r"problem must be >= 0, got -1"),
    (lambda s, t: s.footprint(problem=5), ValueError, r"problem must be in \[0, 1\)"),
    (lambda s, t: s.launch_grid(problem=1.0), TypeError, r"problem must be an int, got float"),
    (lambda s, t: t.upto(-1), ValueError, r"wave must be >= 0, got -1"),
    (lambda s, t: t.upto(4), ValueError, r"wave must be in \[0, 4\) \(this schedule has 4 waves\), got 4"),
    (lambda s, t: t.upto(1.5), TypeError, r"wave must be an int, got float"),
])
def test_schedule_and_traffic_lookups_name_what_is_out_of_range(call, error, message):
    """tile_grid(5) gave a bare IndexError; footprint(problem=5) and upto(-1) returned silently."""
    s = schedule.tile_schedule(64, 64, 16, 16, programs_in_flight=4)  # 16 tiles: 4 waves
    with pytest.raises(error, match=message):
        call(s, l2model.l2_traffic(s, block_k=16, K=64))


# ---------------------------------------------------------------- trace helpers (notebooks call them)
def _traces():
    from gemm_kernels import trace_program_tiles

    return {"trace_program_tiles": trace_program_tiles, "trace_persistent_tiles": traces.trace_persistent_tiles,
            "trace_streamk_segments": traces.trace_streamk_segments}


@pytest.mark.parametrize("name", ["trace_program_tiles", "trace_persistent_tiles", "trace_streamk_segments"])
@pytest.mark.parametrize("kwargs, error, message", [
    ({"M": -1}, ValueError, r"M must be >= 0, got -1"),
    ({"N": 5.0}, TypeError, r"N must be an int, got float"),
    ({"block_m": 17}, ValueError, r"block_m must be a power of two from 16 to 256, got 17"),
    ({"block_k": 8}, ValueError, r"block_k must be a power of two"),
    ({"block_n": 0}, ValueError, r"block_n must be a power of two"),
])
def test_trace_helpers_check_sizes_and_blocks(name, kwargs, error, message):
    call = {"M": 40, "N": 40, "K": 64, **kwargs}
    M, N, K = call.pop("M"), call.pop("N"), call.pop("K")
    with pytest.raises(error, match=message):
        _traces()[name](M, N, K, **call)


def test_grouped_trace_helpers_check_blocks():
    from gemm_kernels.lab.traces import trace_grouped_schedule, trace_moe_schedule

    a, b = _operands(40, 48, 32)
    with pytest.raises(ValueError, match=r"block_m must be a power of two"):
        trace_grouped_schedule([a], [b], block_m=17)
    with pytest.raises(ValueError, match=r"group_size_m must be >= 1, got 0"):
        trace_grouped_schedule([a], [b], group_size_m=0)
    x, w, offs = _moe_inputs()
    with pytest.raises(ValueError, match=r"block_n must be a power of two"):
        trace_moe_schedule(x, w, offs, block_n=48)


@pytest.mark.parametrize("num_programs, error, message", [
    (-2, ValueError, r"num_programs must be >= 1, got -2"),
    (0, ValueError, r"num_programs must be >= 1, got 0"),
    (2.5, TypeError, r"num_programs must be an int, got float"),
    (True, TypeError, r"num_programs must be an int, got bool"),
])
def test_every_trace_helper_checks_num_programs(num_programs, error, message):
    """-2 returned uninitialised traces from the grouped/MoE helpers, 2.5 an interpreter error."""
    from gemm_kernels.lab.traces import trace_grouped_schedule, trace_moe_schedule

    a, b = _operands(40, 48, 32)
    x, w, offs = _moe_inputs()
    calls = [lambda: trace_grouped_schedule([a], [b], num_programs=num_programs),
             lambda: trace_moe_schedule(x, w, offs, num_programs=num_programs),
             lambda: traces.trace_persistent_tiles(40, 48, 32, num_programs=num_programs),
             lambda: traces.trace_streamk_segments(40, 48, 32, num_programs=num_programs)]
    for call in calls:
        with pytest.raises(error, match=message):
            call()


# ---------------------------------------------------------------- autograd
def test_inputs_that_require_grad_are_refused_unless_autograd_is_off():
    """Forward-only kernels: an output silently cut off from the autograd graph would be a wrong answer.
    (matmul, matmul_tma and grouped_mm have a backward: tests/test_autograd.py, tests/test_moe.py.)"""
    a, b = _operands(24, 40, 16)
    w = b.clone().requires_grad_()
    for name in ("matmul_persistent", "matmul_streamk"):
        fn = SINGLE_GEMMS[name]
        with pytest.raises(ValueError, match=r"b requires grad, but these kernels compute the forward product only"):
            fn(a, w)
        with pytest.raises(ValueError, match=r"bias requires grad"):
            fn(a, b, bias=torch.zeros(40, device=DEVICE, dtype=torch.float16, requires_grad=True))
        with torch.no_grad():
            assert_close(fn(a, w), matmul_ref(a, b, out_dtype=torch.float64), torch.float16)
        assert_close(fn(a, w.detach()), matmul_ref(a, b, out_dtype=torch.float64), torch.float16)
    with pytest.raises(ValueError, match=r"group_b\[0\] requires grad"):
        grouped_matmul([a], [w])


# ---------------------------------------------------------------- the numpy mirror (tiles)
@pytest.mark.parametrize("call, error, message", [
    (lambda t: t.tile_grid(64.5, 64, 16, 16), TypeError, r"M must be an int, got float"),
    (lambda t: t.program_tiles(64, 64, 16, 16, group_size_m=1.5), TypeError, r"group_size_m must be an int"),
    (lambda t: t.tile_coords_np(100, 2, 2), ValueError, r"pid must be integers in \[0, 4\)"),
    (lambda t: t.tile_coords_np(np.array([0.5]), 2, 2), ValueError, r"pid must be integers"),
    (lambda t: t.problem_tile_starts([(8, 8)], 0, 32), ValueError, r"block_m and block_n must be >= 1"),
    (lambda t: t.problem_tile_starts([(8.0, 8)], 16, 32), TypeError, r"M must be an int, got float"),
    (lambda t: t.persistent_tile_ids(10, 2.0), TypeError, r"num_programs must be an int"),
    (lambda t: t.streamk_segments(8, 4.0, 4), TypeError, r"k_tiles must be an int"),
])
def test_tile_mirror_checks_its_arguments(call, error, message):
    from gemm_kernels.models import tiles

    with pytest.raises(error, match=message):
        call(tiles)


def test_tile_mirror_takes_numpy_ints():
    from gemm_kernels.models import tiles

    assert tiles.tile_grid(np.int64(64), np.int32(48), 16, 16) == (4, 3)


def test_launchers_take_numpy_ints():
    a, b = _operands(40, 48, 32)
    out = matmul_persistent(a, b, group_size_m=np.int64(4), num_programs=np.int32(3))
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64), torch.float16)


# ---------------------------------------------------------------- lazy negation, sparse layouts
def _negated_view(rows, cols, seed):
    """``z.conj().imag``: a float32 view with torch's lazy negation bit, its memory holding -values."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.complex(torch.randn(rows, cols, generator=gen), torch.randn(rows, cols, generator=gen)).to(DEVICE)
    view = z.conj().imag
    assert view.is_neg()
    return view


@pytest.mark.parametrize("fn", SINGLE_GEMMS.values(), ids=SINGLE_GEMMS)
@pytest.mark.parametrize("negated", ["a", "b", "bias", "all"])
def test_negated_views_keep_their_sign(fn, negated):
    """The kernels read memory: a lazily negated view came out with the wrong sign."""
    a, b = (t.float() for t in _operands(40, 48, 64))
    bias = torch.randn(48).to(DEVICE)
    if negated in ("a", "all"):
        a = _negated_view(40, 64, 1)
    if negated in ("b", "all"):
        b = _negated_view(64, 48, 2)
    if negated in ("bias", "all"):
        bias = _negated_view(1, 48, 3)[0]
    assert_close(fn(a, b, bias=bias), matmul_ref(a, b, bias=bias, out_dtype=torch.float64), torch.float32)


def test_negated_views_in_grouped_matmul_and_the_plan():
    a, b = _negated_view(40, 64, 1), _negated_view(64, 48, 2)
    a2, b2 = (t.float() for t in _operands(8, 16, 64))
    for c, ref in zip(grouped_matmul([a, a2], [b, b2]), grouped_matmul_ref([a, a2], [b, b2], out_dtype=torch.float64)):
        assert_close(c, ref, torch.float32)
    # a plan re-reads its inputs' memory on every run: a resolved copy would miss later updates
    from gemm_kernels import GroupedMatmulPlan

    with pytest.raises(ValueError, match=r"group_b\[0\] is a lazily negated view .*resolve_neg\(\)"):
        GroupedMatmulPlan([a2], [b])


def test_negated_views_in_grouped_mm():
    """grouped_mm read x's and w's memory too: a negated x (or w) gave the product's negation."""
    x = _negated_view(40, 64, 1)
    w = _negated_view(3 * 64, 48, 2).reshape(3, 64, 48)
    assert x.is_neg() and w.is_neg()
    offs = torch.tensor([10, 10, 40], dtype=torch.int32, device=DEVICE)
    assert_close(grouped_mm(x, w, offs), grouped_mm_ref(x.resolve_neg(), w.resolve_neg(), offs, out_dtype=torch.float64),
                 torch.float32)


def _dense_to(layout):
    return {"sparse_coo": lambda t: t.to_sparse(), "sparse_csr": lambda t: t.to_sparse_csr(),
            "mkldnn": lambda t: t.float().to_mkldnn()}[layout]


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr",
                                    pytest.param("mkldnn", marks=pytest.mark.skipif(DEVICE.type != "cpu",
                                                                                    reason="mkldnn tensors are CPU only"))])
def test_sparse_and_mkldnn_inputs_get_a_named_type_error(layout):
    a, b = (t.float() for t in _operands(16, 32, 32))
    odd = _dense_to(layout)(a)
    pattern = rf"^a is a {layout} tensor, but the kernels read dense \(strided\) memory: pass a.to_dense\(\)"
    for fn in SINGLE_GEMMS.values():
        with pytest.raises(TypeError, match=pattern):
            fn(odd, b)
        with pytest.raises(TypeError, match=r"^bias is a sparse_coo tensor.*pass bias.to_dense\(\)"):
            fn(a, b, bias=torch.ones(32, device=DEVICE).to_sparse())
    with pytest.raises(TypeError, match=r"^group_b\[0\] is a " + layout):
        grouped_matmul([a], [_dense_to(layout)(b)])
