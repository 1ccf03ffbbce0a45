"""matmul_persistent and matmul_tma against the float64 reference; their schedule against the mirror.

Ragged shapes, layouts, dtypes, epilogues, program counts, configs, TMA's layout rules, bad input.
"""

import dataclasses

import numpy as np
import pytest
import torch
import triton

from gemm_kernels import DEVICE, matmul_ref, runtime
from gemm_kernels.kernels import configs
from gemm_kernels.models import tiles
from gemm_kernels.kernels.persistent import _persistent_tuned, _tma_args, _tma_tuned, matmul_persistent, matmul_tma
from gemm_kernels.kernels.tma import tma_aligned, tma_layout
from gemm_kernels.lab.traces import trace_persistent_tiles
from gemm_kernels.testing import STRIDED_LAYOUTS, assert_close, random_matrix, strided_operands

KERNELS = {"persistent": matmul_persistent, "tma": matmul_tma}
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# not multiples of the 32-wide interpreter blocks; with 4 "SMs" most programs walk several tiles
SHAPES = [(1, 1, 1), (1, 17, 5), (31, 1, 7), (37, 61, 45), (97, 89, 101), (65, 33, 16), (2, 131, 67)]


def _ids(shape):
    return "M{}-N{}-K{}".format(*shape)


def _inputs(kind, M, N, K, dtype, **kw):
    """Random a, b; for TMA copied into 16-byte aligned rows (ragged sizes break TMA's stride rule)."""
    a, b = random_matrix(M, K, dtype, **kw.get("a", {})), random_matrix(K, N, dtype, **kw.get("b", {}))
    if kind == "tma":
        a, b = tma_aligned(a), tma_aligned(b)
    return a, b


def _tma_operand(rows, cols, dtype, col_major):
    """A [rows, cols] operand TMA can read: row-major, or column-major (a .t() view), aligned."""
    if col_major:
        return tma_aligned(random_matrix(cols, rows, dtype)).t()
    return tma_aligned(random_matrix(rows, cols, dtype))


@pytest.mark.parametrize("layout", ["a_t", "b_t", "both_t", "sliced_aligned", "contiguous"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_tma_row_and_column_major_inputs(layout, dtype):
    """Descriptors are built over whichever dimension has stride 1 (A^T -> [K, M], B^T -> [N, K])."""
    M, N, K = 45, 64, 40  # ragged M; 40- and 64-element rows are 16-byte multiples in every dtype
    if layout == "sliced_aligned":  # views into bigger matrices whose offsets and row strides stay aligned
        a = random_matrix(M + 3, 96, dtype)[2:2 + M, 8:8 + K]
        b = random_matrix(K + 1, 88, dtype)[1:, 16:16 + N]
    elif layout == "contiguous":
        a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype)
    else:
        a = _tma_operand(M, K, dtype, col_major=layout in ("a_t", "both_t"))
        b = _tma_operand(K, N, dtype, col_major=layout in ("b_t", "both_t"))
    assert tma_layout(a, "a")[0] == (layout in ("a_t", "both_t"))
    assert tma_layout(b, "b")[0] == (layout in ("b_t", "both_t"))
    assert_close(matmul_tma(a, b), matmul_ref(a, b, out_dtype=torch.float64), dtype)


@pytest.mark.parametrize("kind", KERNELS)
@pytest.mark.parametrize("num_programs", [1, 3, 4, 7, 1000])
@pytest.mark.parametrize("order,group", [("row_major", 8), ("grouped", 2), ("grouped", 1000)])
def test_program_counts_and_orders(kind, num_programs, order, group):
    """Every tile computed once whatever the program count (1: one program does all; 1000 > tiles)."""
    a, b = _inputs(kind, 130, 100, 24, torch.float16)
    out = KERNELS[kind](a, b, num_programs=num_programs, order=order, group_size_m=group)
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64))


@pytest.mark.parametrize("kind", KERNELS)
@pytest.mark.parametrize("order,group,num_programs", [
    ("grouped", 8, None), ("grouped", 3, 5), ("row_major", 8, 3), ("grouped", 2, 1), ("grouped", 4, 64),
])
@pytest.mark.parametrize("M,N", [(150, 100), (33, 250), (1, 1)])
def test_trace_equals_mirror(kind, order, group, num_programs, M, N):
    """The kernel's own record of (program, step, pid_m, pid_n) per tile == tiles.persistent_schedule."""
    trace = trace_persistent_tiles(M, N, tma=kind == "tma", order=order, group_size_m=group,
                                   num_programs=num_programs)
    bm, bn = configs.INTERPRETER_BLOCKS["BLOCK_M"], configs.INTERPRETER_BLOCKS["BLOCK_N"]
    schedule = tiles.persistent_schedule(M, N, bm, bn, num_programs or runtime.num_sms(), order, group)
    fields = [tiles.SCHEDULE_FIELDS.index(f) for f in ("program", "step", "pid_m", "pid_n")]
    assert trace.shape == (len(schedule), 4)
    np.testing.assert_array_equal(trace.numpy(), schedule[:, fields])


def test_trace_with_other_blocks():
    trace = trace_persistent_tiles(100, 90, block_m=16, block_n=64, block_k=16, num_programs=3)
    schedule = tiles.persistent_schedule(100, 90, 16, 64, 3)
    np.testing.assert_array_equal(trace.numpy(), schedule[:, [1, 2, 4, 5]])
    assert set(trace[:, 0].tolist()) == {0, 1, 2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [64, 61])  # 64: TMA stores C; 61 (122-byte rows): masked pointer stores
def test_tma_epilogue_subtile_and_store_paths(dtype, n):
    a, b = _inputs("tma", 70, n, 48, dtype)
    c = torch.empty(70, n, dtype=dtype, device=DEVICE)
    assert _tma_args(a, b, c, None, None, order="grouped", group_size_m=8, num_programs=4,
                     activation=None)["C_TMA"] == (n == 64)
    bias = torch.randn(n).to(DEVICE, dtype)
    for subtile in (False, True):
        config = triton.Config({**configs.INTERPRETER_BLOCKS, "EPILOGUE_SUBTILE": subtile, "FLATTEN": True})
        out = matmul_tma(a, b, activation="relu", bias=bias, config=config)
        assert_close(out, matmul_ref(a, b, activation="relu", bias=bias, out_dtype=torch.float64), dtype)


def test_explicit_config_with_other_blocks():
    config = triton.Config({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 16})
    for kind, fn in KERNELS.items():
        a, b = _inputs(kind, 77, 90, 40, torch.float16)
        assert_close(fn(a, b, config=config), matmul_ref(a, b, out_dtype=torch.float64))


def test_tma_single_row_ignores_its_free_stride():
    """M = 1 with K = 67: the row stride is 134 bytes, but a 1-row matrix never steps over it."""
    a = random_matrix(1, 67, torch.float16)
    b = tma_aligned(random_matrix(67, 45, torch.float16))
    assert tma_layout(a, "a") == (False, 72)  # any aligned stride will do: the row length rounded up
    assert_close(matmul_tma(a, b), matmul_ref(a, b, out_dtype=torch.float64))


def test_tma_aligned_copies_values_into_aligned_rows():
    x = random_matrix(5, 13, torch.float16, transposed=True)
    y = tma_aligned(x)
    assert torch.equal(y.cpu(), x.cpu()) and y.stride() == (16, 1)
    assert tma_layout(y, "y") == (False, 16)
    assert tma_aligned(random_matrix(3, 5, torch.float32)).stride() == (8, 1)


def test_autotune_keys_hold_sizes_and_epilogue_not_pointers():
    """A fused GELU must not reuse the config tuned for a plain product of the same size."""
    from gemm_kernels.kernels.matmul import _matmul_tuned

    for tuned in (_matmul_tuned, _persistent_tuned, _tma_tuned):
        assert tuned.keys[:3] == ["M", "N", "K"]
        assert {"GROUPED", "HAS_BIAS", "ACTIVATION"} <= set(tuned.keys)
        assert not any(name.endswith("_ptr") or name.startswith("stride") for name in tuned.keys)
    assert _tma_tuned.keys[-2:] == ["A_COL_MAJOR", "B_COL_MAJOR"]


def test_gpu_config_lists_are_well_formed():
    supported = configs.range_options_supported()
    assert {"flatten", "warp_specialize"} <= supported  # Triton >= 3.4 (we require 3.6)
    for cfgs, switches in ((configs.persistent_configs(gpu=True), {"FLATTEN", "WARP_SPECIALIZE"}),
                           (configs.tma_configs(gpu=True), {"FLATTEN", "WARP_SPECIALIZE", "EPILOGUE_SUBTILE"})):
        assert cfgs
        for c in cfgs:
            assert switches <= set(c.kwargs) and c.kwargs["BLOCK_N"] % 32 == 0


# ---------------------------------------------------------------- bad input -> clear errors
def _ab(M=8, N=8, K=8, dtype=torch.float16):
    return random_matrix(M, K, dtype), random_matrix(K, N, dtype)


@pytest.mark.parametrize("kind", KERNELS)
@pytest.mark.parametrize("kwargs,exc,pattern", [
    ({"order": "zigzag"}, ValueError, "order must be one of"),
    ({"group_size_m": 0}, ValueError, "group_size_m must be >= 1, got 0"),
    ({"activation": "swish"}, ValueError, "activation must be one of"),
    ({"num_programs": 0}, ValueError, "num_programs must be >= 1, got 0"),
    ({"num_programs": 2.5}, TypeError, "num_programs must be an int"),
    ({"config": {"BLOCK_M": 32}}, TypeError, "config must be a triton.Config"),
    ({"config": triton.Config({"BLOCK_M": 32})}, ValueError, r"missing \['BLOCK_K', 'BLOCK_N'\]"),
    ({"bias": "wrong_shape"}, ValueError, r"bias must have shape \[N\] = \[8\]"),
])
def test_bad_options(kind, kwargs, exc, pattern):
    a, b = _ab()
    if kwargs.get("bias") == "wrong_shape":
        kwargs = {"bias": torch.randn(7).to(DEVICE, torch.float16)}
    with pytest.raises(exc, match=pattern):
        KERNELS[kind](a, b, **kwargs)


def _storage_offset_view(rows, cols, offset, dtype=torch.float16):
    flat = random_matrix(1, rows * cols + offset, dtype).reshape(-1)
    return flat[offset:].view(rows, cols)


@pytest.mark.parametrize("make_a,pattern", [
    # row stride 65 * 2 = 130 bytes
    (lambda: random_matrix(64, 65)[:, :64], r"a cannot be read by TMA: its row stride is 130 bytes, not a multiple of 16"),
    # contiguous but ragged: K = 45 -> 90-byte rows; the hint must not promise .contiguous() helps
    (lambda: random_matrix(16, 45), r"row stride is 90 bytes.*tma_aligned\(a\)"),
    # first element 2 bytes past an aligned address
    (lambda: _storage_offset_view(16, 64, 1), r"first element's address is not 16-byte aligned.*storage offset 1"),
    (lambda: random_matrix(32, 128)[::2, ::2], r"neither of its strides is 1"),
    (lambda: random_matrix(1, 64).expand(16, 64), r"rows overlap \(row stride 0 < row length 64\)"),
    # column-major with a misaligned column stride, and a non-contiguous view that .contiguous() would fix
    (lambda: random_matrix(64, 21).t(), r"column stride is 42 bytes.*a\.contiguous\(\) would fix it"),
    (lambda: random_matrix(16, 68)[:, :64], r"row stride is 136 bytes.*a\.contiguous\(\) would fix it"),
])
def test_tma_layout_errors_name_the_tensor_and_the_rule(make_a, pattern):
    a = make_a()
    b = tma_aligned(random_matrix(a.shape[1], 32))
    with pytest.raises(ValueError, match=pattern):
        matmul_tma(a, b)
    matmul_persistent(a, b)  # the pointer kernel takes any of them


def test_tma_layout_error_names_b():
    a = random_matrix(16, 64)
    b = random_matrix(64, 37)  # 74-byte rows
    with pytest.raises(ValueError, match=r"^b cannot be read by TMA: its row stride is 74 bytes"):
        matmul_tma(a, b)


def test_tma_needs_hopper_on_a_gpu(monkeypatch):
    old_gpu = dataclasses.replace(runtime.RUNTIME, interpreted=False, gpu_name="NVIDIA A100", capability=(8, 0))
    monkeypatch.setattr(runtime, "RUNTIME", old_gpu)
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)
    a, b = _ab()
    with pytest.raises(RuntimeError, match=r"matmul_tma needs the Tensor Memory Accelerator.*sm_90.*is sm_80.*matmul_persistent"):
        matmul_tma(a, b)


# ---------------------------------------------------------------- real sizes on the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("kind", KERNELS)
def test_gpu_every_config_is_correct(kind):
    """Each GPU config (flatten, subtile...) on a ragged problem, skipping only what does not fit."""
    if kind == "tma" and not runtime.supports_tma():
        pytest.skip("no TMA on this GPU (or GEMM_KERNELS_ARCH below sm_90): matmul_tma refuses, tested elsewhere")
    a = tma_aligned(random_matrix(1000, 520, torch.float16))
    b = tma_aligned(random_matrix(520, 1003, torch.float16))
    ref = matmul_ref(a, b, activation="relu", out_dtype=torch.float64)
    cfgs = configs.tma_configs() if kind == "tma" else configs.persistent_configs()
    for config in cfgs:
        try:
            out = KERNELS[kind](a, b, activation="relu", config=config)
        except triton.runtime.OutOfResources:
            continue
        assert_close(out, ref, what=f"{kind} with {config}")


@pytest.mark.gpu
def test_gpu_trace_equals_mirror_at_real_block_sizes():
    for tma in (False, True) if runtime.supports_tma() else (False,):
        trace = trace_persistent_tiles(1000, 1003, K=64, tma=tma, block_m=128, block_n=128, block_k=64)
        schedule = tiles.persistent_schedule(1000, 1003, 128, 128, runtime.num_sms())
        np.testing.assert_array_equal(trace.numpy(), schedule[:, [1, 2, 4, 5]])
