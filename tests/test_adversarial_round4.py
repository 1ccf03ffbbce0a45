"""Adversarial review, round 4 (issue 50): each defect it found, at its mechanism, and the class
around it (other lazy views, other non-finite patterns, other damaged files, other spellings).

FP8 launchers resolve every tensor argument's lazy view, refuse inputs that need grad, spans past
32-bit offsets and sparse layouts by name; the interpreter decodes e4m3fn's NaN; ``quantize_fp8``
and ``scaled_mm_ref`` take empty and non-finite inputs; option values that compare equal but
differ in type never share a kept launch; environment booleans parse one way; the lab's readers
of a learner's files (student copies, progress) and of the committed results survive damaged
files and name them.  The split-K workspace test past 2^31 floats needs a GPU (marker ``gpu``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import DEVICE, _env, runtime
from gemm_kernels.book import github_repo
from gemm_kernels.kernels import checks, fp8, launches, moe
from gemm_kernels.testing import assert_close

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
REPO = Path(__file__).resolve().parents[1]
needs_fp8 = pytest.mark.skipif(not runtime.supports_fp8(), reason="needs fp8 tensor cores (sm_89+)")


def _row_operands(M=16, N=16, K=32, dtype=E4M3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a, sa = fp8.quantize_fp8(torch.randn(M, K, generator=gen).to(DEVICE), "row", dtype=dtype)
    b, sb = fp8.quantize_fp8(torch.randn(N, K, generator=gen).to(DEVICE).t(), "column", dtype=dtype)
    return a, b, sa, sb


def _negated_view(t: torch.Tensor) -> torch.Tensor:
    """A view whose values are ``t``'s and whose memory holds ``-t`` (the negation bit set)."""
    return torch._neg_view(t.neg() if t.dtype not in checks._ONE_BYTE_FLOATS else _flip_sign(t))


def _flip_sign(t):
    return (t.view(torch.uint8) ^ 0x80).view(t.dtype)


def _conj_imag(t: torch.Tensor) -> torch.Tensor:
    """``z.conj().imag`` whose values are ``t``: the memory holds ``-t``."""
    return torch.complex(torch.zeros_like(t), -t).conj().imag


# ----------------------------------------------------------------------------- FP8: lazy views
@needs_fp8
@pytest.mark.parametrize("which", ["a", "b", "scale_a", "scale_b", "bias"])
@pytest.mark.parametrize("view", ["conj().imag", "_neg_view"])
def test_scaled_mm_resolves_every_arguments_lazy_view(which, view):
    a, b, sa, sb = _row_operands()
    bias = torch.randn(16, device=DEVICE)
    args = dict(a=a, b=b, scale_a=sa, scale_b=sb, bias=bias)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, bias=bias, out_dtype=torch.float64)
    t = args[which]
    if view == "conj().imag" and t.dtype in checks._ONE_BYTE_FLOATS:
        pytest.skip("no complex fp8: conj().imag cannot make an fp8 view")
    lazy = _conj_imag(t) if view == "conj().imag" else _negated_view(t)
    assert lazy.is_neg() and torch.equal(checks.resolved_copy(lazy).float(), t.float())
    args[which] = lazy
    out = fp8.scaled_mm(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"),
                        out_dtype=torch.float32, **args)
    assert_close(out, ref, torch.float32)  # before: exactly -ref for a negated scale


@needs_fp8
@pytest.mark.parametrize("which", ["x", "w", "scale_x", "scale_w"])
def test_scaled_grouped_mm_resolves_every_arguments_lazy_view(which):
    gen = torch.Generator().manual_seed(1)
    T, K, N, E = 24, 32, 16, 3
    x, sx = fp8.quantize_fp8(torch.randn(T, K, generator=gen).to(DEVICE), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N, generator=gen).to(DEVICE))
    sx = sx.reshape(T)
    offs = torch.tensor([5, 5, 20], dtype=torch.int32, device=DEVICE)
    args = dict(x=x, w=w, scale_x=sx, scale_w=sw)
    ref = fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64)
    t = args[which]
    args[which] = _conj_imag(t) if t.dtype == torch.float32 else _negated_view(t)
    assert args[which].is_neg()
    out = fp8.scaled_grouped_mm(args["x"], args["w"], args["scale_x"], args["scale_w"], offs, out_dtype=torch.float32)
    assert_close(out, ref, torch.float32)


def test_a_lazy_fp8_view_is_resolved_in_its_layout():
    t = torch.randn(32, 8).to(E4M3).t()  # column-major, as b is
    resolved = checks.resolved_copy(_negated_view(t))
    assert not resolved.is_neg() and resolved.stride() == t.stride() and torch.equal(resolved.float(), t.float())


# ----------------------------------------------------------------------------- FP8: non-finite values
@needs_fp8
@pytest.mark.parametrize("nan_bits", [0x7F, 0xFF], ids=["+nan", "-nan"])
def test_a_nan_in_an_e4m3fn_input_reaches_its_row_and_column_only(nan_bits):
    a, b, sa, sb = _row_operands()
    a = a.clone()
    a.view(torch.uint8)[3, 5] = nan_bits
    b = b.t().clone().t()
    b.view(torch.uint8)[7, 9] = nan_bits  # b[7, 9]: column 9
    out = fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    assert out[3].isnan().all() and out[:, 9].isnan().all()  # before: finite (decoded as +-480)
    assert torch.equal(out.isnan(), ref.isnan())
    finite = ~ref.isnan()
    assert_close(out[finite], ref[finite], torch.float32)


@needs_fp8
def test_e5m2_infinities_and_nans_propagate_as_in_float64():
    a, b, sa, sb = _row_operands(dtype=E5M2)
    a = a.clone()
    a[2, 0] = float("inf")
    a[4, 1] = float("nan")
    out = fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())


@needs_fp8
def test_a_nan_in_scaled_grouped_mm_reaches_its_row_only():
    T, K, N, E = 16, 32, 16, 2
    x, sx = fp8.quantize_fp8(torch.randn(T, K).to(DEVICE), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N).to(DEVICE))
    x = x.clone()
    x.view(torch.uint8)[6, 3] = 0x7F
    offs = torch.tensor([8, 16], dtype=torch.int32, device=DEVICE)
    out = fp8.scaled_grouped_mm(x, w, sx.reshape(T), sw, offs, out_dtype=torch.float32)
    assert out[6].isnan().all() and not out[torch.arange(T) != 6].isnan().any()


# ----------------------------------------------------------------------------- FP8: refusals by name
@needs_fp8
@pytest.mark.parametrize("which", ["a", "b"])
def test_scaled_mm_refuses_an_input_that_requires_grad(which):
    a, b, sa, sb = _row_operands()
    args = dict(a=a, b=b)
    args[which] = args[which].float().requires_grad_().to(E4M3)  # as quantize_fp8 of a leaf that needs grad
    assert args[which].requires_grad
    with pytest.raises(ValueError, match=f"^{which} requires grad"):
        fp8.scaled_mm(args["a"], args["b"], sa, sb)
    with torch.no_grad():  # no graph to cut: fine
        fp8.scaled_mm(args["a"], args["b"], sa, sb)


@needs_fp8
@pytest.mark.parametrize("which", ["x", "w"])
def test_scaled_grouped_mm_refuses_an_input_that_requires_grad(which):
    T, K, N, E = 8, 32, 16, 2
    x, sx = fp8.quantize_fp8(torch.randn(T, K).to(DEVICE), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N).to(DEVICE))
    args = dict(x=x, w=w)
    args[which] = args[which].float().requires_grad_().to(E4M3)
    offs = torch.tensor([4, 8], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=f"^{which} requires grad"):
        fp8.scaled_grouped_mm(args["x"], args["w"], sx.reshape(T), sw, offs)


@needs_fp8
def test_a_row_slice_spanning_past_32_bit_offsets_is_refused_by_name():
    stride = 2**28 + 17  # 9 rows of 16: 2^31 + 136 elements apart (torch.empty: no memory is touched)
    a = torch.empty(8 * stride + 16, dtype=E4M3, device=DEVICE).as_strided((9, 16), (stride, 1))
    b = torch.zeros(8, 16, dtype=E4M3, device=DEVICE).t()
    one = torch.ones((), device=DEVICE)
    with pytest.raises(ValueError, match=r"^a spans 2147483800 elements.*32-bit"):
        fp8.scaled_mm(a, b, one, one)
    scale = torch.empty(8 * stride + 1, device=DEVICE).as_strided((9, 1), (stride, 1))  # 8.6 GB, untouched
    a, b, _, sb = _row_operands(M=9, N=16, K=16)
    with pytest.raises(ValueError, match=r"^scale_a spans"):
        fp8.scaled_mm(a, b, scale, sb)


@needs_fp8
@pytest.mark.parametrize("which", ["scale_a", "scale_b", "a", "bias"])
@pytest.mark.parametrize("layout", ["to_sparse", "to_sparse_csr"])
def test_scaled_mm_names_a_sparse_argument(which, layout):
    a, b, sa, sb = _row_operands()
    args = dict(a=a, b=b, scale_a=sa, scale_b=sb, bias=torch.randn(16, device=DEVICE))
    if which == "a" or (which == "bias" and layout == "to_sparse_csr"):
        try:
            args[which] = getattr(args[which].float() if which == "a" else args[which], layout)()
        except (RuntimeError, IndexError):
            pytest.skip(f"torch has no {layout} of this tensor")
    else:
        args[which] = getattr(args[which], layout)()
    with pytest.raises(TypeError, match=f"^{which} is a sparse_\\w+ tensor.*{which}.to_dense"):
        fp8.scaled_mm(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"), **args)


@needs_fp8
@pytest.mark.parametrize("which", ["scale_x", "scale_w"])
def test_scaled_grouped_mm_names_a_sparse_scale(which):
    T, K, N, E = 8, 32, 16, 2
    x, sx = fp8.quantize_fp8(torch.randn(T, K).to(DEVICE), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N).to(DEVICE))
    args = dict(scale_x=sx.reshape(T), scale_w=sw)
    args[which] = args[which].to_sparse()
    with pytest.raises(TypeError, match=f"^{which} is a sparse_coo tensor"):
        fp8.scaled_grouped_mm(x, w, args["scale_x"], args["scale_w"],
                              torch.tensor([4, 8], dtype=torch.int32, device=DEVICE))


def test_grouped_mm_names_a_sparse_offs():
    x, w = torch.randn(8, 16, device=DEVICE), torch.randn(2, 16, 8, device=DEVICE)
    offs = torch.tensor([4, 8], dtype=torch.int32, device=DEVICE).to_sparse()
    with pytest.raises(TypeError, match="^offs is a sparse_coo tensor"):
        moe.grouped_mm(x, w, offs)


@needs_fp8
@pytest.mark.parametrize("options, error, pattern", [
    (dict(promote_every=128.0), TypeError, "promote_every must be an int"),
    (dict(promote_every=True), TypeError, "promote_every must be an int"),
    (dict(use_fast_accum=1), TypeError, "use_fast_accum must be True or False"),
    (dict(use_fast_accum="yes"), TypeError, "use_fast_accum must be True or False"),
])
def test_fp8_options_that_compare_equal_to_valid_ones_are_refused(options, error, pattern):
    a, b, sa, sb = _row_operands()
    with pytest.raises(error, match=pattern):
        fp8.scaled_mm(a, b, sa, sb, **options)


# ----------------------------------------------------------------------------- quantize_fp8 and the reference
@pytest.mark.parametrize("shape, granularity, scale_shape", [
    ((0, 16), "tensor", ()), ((5, 0), "tensor", ()), ((0, 0), "tensor", ()),
    ((5, 0), "row", (5, 1)), ((0, 16), "row", (0, 1)),
    ((0, 5), "column", (1, 5)), ((7, 0), "column", (1, 0)),
    ((3, 0), (1, 128), (3, 0)), ((0, 256), (128, 128), (0, 2)),
])
def test_quantize_fp8_of_empty_tensors_keeps_its_scale_shapes(shape, granularity, scale_shape):
    q, scale = fp8.quantize_fp8(torch.zeros(shape), granularity)
    assert q.shape == shape and tuple(scale.shape) == scale_shape
    assert torch.equal(scale, torch.ones(scale_shape))
    assert fp8.dequantize(q, scale, granularity).shape == shape


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=str)
@pytest.mark.parametrize("granularity", ["tensor", "row", "column", (2, 2)])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")], ids=["nan", "inf", "-inf"])
def test_a_non_finite_value_changes_only_its_own_element(dtype, granularity, bad):
    x = torch.tensor([[1000.0, 3.0, -2.0, 0.5], [1.0, 250.0, -7.0, 0.0]])
    clean_q, clean_scale = fp8.quantize_fp8(x, granularity, dtype=dtype)
    x_bad = x.clone()
    x_bad[0, 1] = bad
    q, scale = fp8.quantize_fp8(x_bad, granularity, dtype=dtype)
    assert torch.isfinite(scale).all() and torch.equal(scale, clean_scale)  # the scale ignores it
    values = fp8.dequantize(q, scale, granularity)
    others = torch.ones_like(x, dtype=torch.bool)
    others[0, 1] = False
    assert torch.equal(values[others], fp8.dequantize(clean_q, clean_scale, granularity)[others])
    if bad != bad or dtype == E4M3:  # NaN stays NaN; e4m3fn has no inf (torch's cast would give 448)
        assert values[0, 1].isnan()
    else:
        assert values[0, 1] == bad


@pytest.mark.parametrize("tiny", [1e-44, 1e-40, 1e-38])
def test_a_block_of_tiny_values_keeps_a_positive_scale_and_no_nan(tiny):
    x = torch.tensor([[tiny, 0.0, -tiny, 0.0]])
    for granularity in ("tensor", "row", (1, 2)):
        q, scale = fp8.quantize_fp8(x, granularity)
        assert (scale > 0).all() and torch.isfinite(scale).all()
        values = fp8.dequantize(q, scale, granularity)
        assert not values.isnan().any() and values[0, 1] == 0 and values[0, 3] == 0


def test_float64_values_past_float32s_range():
    """Up to float32's max times fp8's max a float64 value is represented; past it no float32 scale
    reaches it: refused by name (found by tests/test_fuzz.py: it saturated 1.5e300 to 1.5e41)."""
    x = torch.tensor([[1e40, 1.0, -1e40]], dtype=torch.float64)
    q, scale = fp8.quantize_fp8(x)
    assert torch.isfinite(scale).all() and (fp8.dequantize(q, scale, "tensor") - x).abs().max() < 1e40 * 0.07
    with pytest.raises(ValueError, match=r"^x holds 1e\+300, past what an fp8 value times a float32 scale"):
        fp8.quantize_fp8(torch.tensor([[1e300, 1.0]], dtype=torch.float64))


@pytest.mark.parametrize("M, N", [(0, 8), (8, 0), (0, 0)])
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_scaled_mm_ref_of_empty_problems_matches_scaled_mm(M, N, scaling):
    K = 32
    ga, gb = fp8.granularities(scaling)
    a, sa = fp8.quantize_fp8(torch.zeros(M, K, device=DEVICE), ga)
    b, sb = fp8.quantize_fp8(torch.zeros(N, K, device=DEVICE).t(), gb)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float32)
    assert ref.shape == (M, N)
    if runtime.supports_fp8():
        assert fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32).shape == (M, N)


@pytest.mark.parametrize("args, error, pattern", [
    (dict(M=64, N=None, num_programs=4), TypeError, "^N must be an int"),
    (dict(M=64, N=2.0, num_programs=4), TypeError, "^N must be an int"),
    (dict(M=-1, N=64, num_programs=4), ValueError, "^M must be >= 0"),
    (dict(M=64, N=64, num_programs=0), ValueError, "^num_programs must be >= 1"),
    (dict(M=64, N=64, num_programs=4, schedule="streamk"), ValueError, "^schedule must be one of"),
    (dict(M=64, N=64, num_programs=4, group_size_m=True), TypeError, "^group_size_m must be an int"),
])
def test_ws_schedule_names_a_bad_argument(args, error, pattern):
    """Found by tests/test_fuzz.py: ws_schedule checked nothing (a KeyError, numpy's errors, or
    a schedule of 0 programs)."""
    with pytest.raises(error, match=pattern):
        gk.ws_schedule(**args)


# ----------------------------------------------------------------------------- launch keys
@pytest.mark.parametrize("valid, invalid", [(8, 8.0), (1, True), (True, 1), (False, 0), (128, 128.0)])
def test_options_equal_in_value_but_not_in_type_never_share_a_key(valid, invalid):
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    assert valid == invalid and hash(valid) == hash(invalid)
    assert launches.call_key((a, b, None), ("grouped", valid, None)) != launches.call_key(
        (a, b, None), ("grouped", invalid, None))
    cache = launches.LaunchCache()
    cache.keep(launches.call_key((a, b, None), ("grouped", valid, None)), "kept launch")
    assert cache.get(launches.call_key((a, b, None), ("grouped", invalid, None))) is None  # so it is checked


@pytest.mark.parametrize("valid, invalid", [(True, 1), (False, 0), (None, None)])
def test_grouped_launch_keys_hold_the_options_types(valid, invalid):
    x, w, offs = torch.randn(8, 16), torch.randn(2, 16, 8), torch.tensor([4, 8], dtype=torch.int32)
    same = moe._launch_key(x, w, offs, valid, None) == moe._launch_key(x, w, offs, invalid, None)
    assert same == (type(valid) is type(invalid))
    fp8_options = (torch.ones(8), torch.ones(2, 8), torch.bfloat16)
    assert (moe._launch_key(x, w, offs, None, None, (*fp8_options, 128))
            != moe._launch_key(x, w, offs, None, None, (*fp8_options, 128.0)))


def test_a_kept_launch_is_not_reused_for_an_option_of_another_type(monkeypatch):
    """matmul with keeping forced on (as on a GPU): a kept launch stands in for the checks, so a
    later group_size_m=8.0 must not find the key of group_size_m=8."""
    from gemm_kernels.kernels import matmul as matmul_module

    a, b = torch.randn(8, 16, device=DEVICE), torch.randn(16, 8, device=DEVICE)
    keys = []

    def run(key, **tensors):  # what a kept launch does: answer without the checks (here: zeros)
        if key is not None and key in keys:
            return torch.zeros(8, 8)
        keys.append(key)
        return None

    monkeypatch.setattr(launches, "keeping", lambda: True)
    monkeypatch.setattr(launches, "launch_and_keep", lambda cache, key, tuned, grid, args, *rest, **kw:
                        tuned[grid](**args))  # the interpreter has no launch to keep
    monkeypatch.setattr(matmul_module._KEPT, "run", run)
    assert_close(gk.matmul(a, b, group_size_m=8), a.double() @ b.double(), torch.float32)  # checked, then kept
    assert torch.equal(gk.matmul(a, b, group_size_m=8), torch.zeros(8, 8))  # the kept launch answers it
    with pytest.raises(TypeError, match="group_size_m must be an int"):
        gk.matmul(a, b, group_size_m=8.0)  # before: the kept launch answered this too


@pytest.mark.parametrize("launcher", ["matmul", "matmul_tma", "matmul_auto"])
@pytest.mark.parametrize("option, value, error", [("group_size_m", True, TypeError), ("group_size_m", 8.0, TypeError),
                                                  ("order", None, ValueError), ("activation", "RELU", ValueError)])
def test_an_input_that_requires_grad_does_not_skip_the_option_checks(launcher, option, value, error):
    """Found by tests/test_fuzz.py: matmul sent such a call straight to its custom op, whose schema
    turned group_size_m=True into 1 (accepted) and named no argument for 8.0 or order=None."""
    if launcher == "matmul_auto" and option != "activation":
        pytest.skip("matmul_auto takes no order or group_size_m")
    a, b = torch.randn(8, 16, device=DEVICE, requires_grad=True), torch.randn(16, 8, device=DEVICE)
    with pytest.raises(error, match=f"^{option} must be"):
        getattr(gk, launcher)(a, b, **{option: value})


# ----------------------------------------------------------------------------- environment booleans
@pytest.mark.parametrize("value, expected", [
    *((v, True) for v in ("1", "true", "TRUE", " Yes ", "on", "On")),
    *((v, False) for v in ("0", "false", "False", "no", "NO", "off", " off\n")),
    (None, "default"), ("", "default"), ("  ", "default"),
])
def test_env_flags_parse_as_a_user_means_them(value, expected):
    for default in (True, False):
        assert _env.parse_flag(value, "X", default) == (default if expected == "default" else expected)


@pytest.mark.parametrize("value", ["flase", "2", "enable", "none", "y", "t"])
def test_an_unknown_env_flag_value_is_refused_by_name(value):
    with pytest.raises(ValueError, match=f"^GEMM_KERNELS_KEEP_LAUNCHES={value!r} is not a yes/no value"):
        _env.parse_flag(value, "GEMM_KERNELS_KEEP_LAUNCHES", True)


@pytest.mark.parametrize("value, mode", [("1", "full"), ("true", "full"), ("YES", "full"), ("0", "off"),
                                         ("false", "off"), ("no", "off"), ("Off", "off"), ("small", "small"),
                                         ("Small", "small"), ("", "full")])
def test_autotune_spellings(monkeypatch, value, mode):
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, value)
    assert runtime.autotune_mode() == mode  # before: false and no meant "full"


def test_a_bad_autotune_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, "fals")
    with pytest.raises(ValueError, match="^GEMM_KERNELS_AUTOTUNE='fals' is not a yes/no value.*small"):
        runtime.autotune_mode()


def _import_with(env: dict, code: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GEMM_KERNELS_")}
    return subprocess.run([sys.executable, "-c", code], env={**environ, **env}, capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_keep_launches_and_interpret_flags_at_import():
    code = "from gemm_kernels.kernels import launches; print(launches._keep)"
    done = _import_with({"GEMM_KERNELS_KEEP_LAUNCHES": "false"}, code)
    assert done.returncode == 0 and done.stdout.split()[-1] == "False", done.stderr  # before: True
    done = _import_with({"GEMM_KERNELS_KEEP_LAUNCHES": "maybe", "GEMM_KERNELS_INTERPRET": "yes"}, code)
    assert done.returncode != 0 and "GEMM_KERNELS_KEEP_LAUNCHES='maybe' is not a yes/no value" in done.stderr
    done = _import_with({"GEMM_KERNELS_INTERPRET": "sure"}, "import gemm_kernels")
    assert done.returncode != 0 and "GEMM_KERNELS_INTERPRET='sure' is not a yes/no value" in done.stderr


# ----------------------------------------------------------------------------- book.github_repo
@pytest.mark.parametrize("repo", ["owner/name\n", "owner/name\r\n", " owner/name", "owner/name/x", "owner",
                                  "own er/name", 5, b"owner/name"])
def test_github_repo_takes_whole_strings_only(repo):
    with pytest.raises(ValueError, match="OWNER/NAME"):
        github_repo(repo)
    assert github_repo("owner/name.x_y-z") == "owner/name.x_y-z"


def test_github_repo_from_the_environment_is_checked_the_same_way(monkeypatch):
    monkeypatch.setenv("GEMM_KERNELS_REPO", "owner/name\n")
    with pytest.raises(ValueError, match="GEMM_KERNELS_REPO must be"):
        github_repo()


# ----------------------------------------------------------------------------- student copies
@pytest.fixture
def copies(tmp_path):
    """Two source notebooks and their fresh student copies."""
    from gemm_kernels.lab import student

    src, dest = tmp_path / "src", tmp_path / "student"
    src.mkdir()
    for path in student.notebook_paths(REPO / "notebooks")[:2]:
        (src / path.name).write_bytes(path.read_bytes())
    student.write_student_copies(src, dest)
    return src, dest, sorted(dest.glob("*.ipynb"))


def _set_record(path: Path, value) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    if value is KeyError:
        del nb["metadata"]["gemm_kernels_student_copy"]["cells"]
    elif value is LookupError:
        del nb["metadata"]["gemm_kernels_student_copy"]["answers"]
    elif value is IndexError:
        nb["metadata"]["gemm_kernels_student_copy"]["cells"] = [["only-an-id"], 5]
    else:
        nb["metadata"]["gemm_kernels_student_copy"] = value
    nb["cells"][-1]["source"] = "my own note"  # the learner's work: the copy is kept
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


@pytest.mark.parametrize("record", [None, "a string", 5, [], {}, KeyError, LookupError, IndexError],
                         ids=["null", "string", "int", "list", "empty", "no-cells", "no-answers", "bad-cells"])
def test_a_copy_with_a_broken_record_is_kept_and_the_others_written(copies, capsys, record):
    from gemm_kernels.lab import student

    src, dest, (first, second) = copies
    _set_record(first, record)
    mine = first.read_bytes()
    second.unlink()
    assert student.main([str(src), str(dest)]) == 0  # before: a TypeError/KeyError traceback
    assert first.read_bytes() == mine and second.exists()
    assert f"kept {first}" in capsys.readouterr().out
    assert student.main([str(src), str(dest), "--merge"]) == 0  # nothing to merge by: kept as it is
    assert first.read_bytes() == mine


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8 \x80", b'{"cells": [', b"[" * 100000 + b"]" * 100000,
                                     b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [5]}', b""],
                         ids=["non-utf8", "truncated", "deeply-nested", "cells-of-the-wrong-shape", "empty"])
def test_an_unreadable_copy_is_kept_named_and_the_others_still_written(copies, capsys, content):
    from gemm_kernels.lab import student

    src, dest, (first, second) = copies
    first.write_bytes(content)
    second.unlink()
    assert student.main([str(src), str(dest)]) == 0  # before: UnicodeDecodeError naming no file
    out = capsys.readouterr().out
    assert first.read_bytes() == content and second.exists()
    assert f"{first} is not a notebook this tool can read" in out
    assert student.main([str(src), str(dest), "--force"]) == 0  # backed up, then a fresh copy
    assert first.with_name(first.name + ".bak-1").read_bytes() == content
    assert nbformat.read(first, as_version=4).cells
    assert "it was not a readable notebook" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"[" * 100000 + b"]" * 100000, b'{"cells": [' * 3000 + b"]}" * 3000,
                                     b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {"x": "\xff"}, "cells": []}'],
                         ids=["nested-list", "nested-cells", "non-utf8-inside"])
def test_a_deeply_nested_or_non_utf8_source_notebook_is_named_and_nothing_is_written(copies, capsys, content):
    from gemm_kernels.lab import student

    src, dest, _ = copies
    bad = src / "03b_broken.ipynb"
    bad.write_bytes(content)
    assert student.main([str(src), str(tmp := dest.parent / "fresh")]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "not a valid notebook" in err and "Traceback" not in err
    assert not tmp.exists()


@pytest.mark.parametrize("heading", ["## Exercises (my answers)", "## exercises", "### Exercises", "##Exercises",
                                     "  ## Exercises: done!"])
def test_an_edited_exercises_heading_still_finds_the_exercises(heading):
    from gemm_kernels.lab import student

    nb = nbformat.read(REPO / "notebooks" / "00_start_here.ipynb", as_version=4)
    cells = student.exercise_cells(nb)
    index = student.exercises_heading(nb)
    nb.cells[index].source = nb.cells[index].source.replace("## Exercises", heading, 1)
    assert student.exercise_cells(nb) == cells and cells  # before: none, every exercise "not attempted"


def test_an_edited_heading_runs_the_exercises_of_a_solved_notebook():
    from gemm_kernels.lab import student

    nb = nbformat.read(REPO / "notebooks" / "00_start_here.ipynb", as_version=4)
    index = student.exercises_heading(nb)
    nb.cells[index].source = nb.cells[index].source.replace("## Exercises", "## Exercises (my answers)", 1)
    results = student.exercise_results(nb, "00_start_here.ipynb")
    assert results and all(r.status == "correct" for r in results)


# ----------------------------------------------------------------------------- progress.json
@pytest.fixture
def progress_file(tmp_path, monkeypatch):
    import importlib

    progress_module = importlib.import_module("gemm_kernels.lab.progress")  # gk.lab.progress is the function
    path = tmp_path / "progress.json"
    monkeypatch.setenv("GEMM_KERNELS_PROGRESS", str(path))
    monkeypatch.setattr(progress_module, "_warned", set())
    return path


@pytest.mark.parametrize("content", [b"[" * 100000 + b"]" * 100000,
                                     b'{"version": 1, "exercises": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001],
                         ids=["nested-list", "nested-dict"])
def test_a_deeply_nested_progress_file_is_named_and_repaired(progress_file, content):
    from gemm_kernels.lab.progress import progress, record

    progress_file.write_bytes(content)
    with pytest.warns(RuntimeWarning, match=f"{progress_file} is not a progress record"):
        assert progress().passed == 0  # before: RecursionError
    assert progress_file.read_bytes() == content  # reading never changes it
    with pytest.warns(RuntimeWarning, match="starting a new one"):
        record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    assert progress_file.with_name("progress.json.corrupt").read_bytes() == content
    assert progress().status("00_start_here", "axpy") == "correct"


def test_a_hand_edited_entry_loses_only_itself(progress_file):
    from gemm_kernels.lab.progress import progress, record

    record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    record("gemm_kernels.lab.exercises.start_here", "launch_stats", "wrong")
    data = json.loads(progress_file.read_text())
    data["exercises"]["00_start_here/launch_stats"]["status"] = ["hand", "edited"]
    data["exercises"][""] = "junk"
    progress_file.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="1 entries still readable"):
        assert progress().status("00_start_here", "axpy") == "correct"  # kept while reading
    with pytest.warns(RuntimeWarning, match="starting a new one from what is readable"):
        record("gemm_kernels.lab.exercises.naive_tiling", "my_matmul", "wrong")
    shown = progress()
    assert shown.status("00_start_here", "axpy") == "correct"  # before: lost with the bad entry
    assert shown.status("02_naive_tiling", "my_matmul") == "wrong"


def test_an_earlier_corrupt_file_is_never_overwritten(progress_file):
    from gemm_kernels.lab.progress import record

    for n, content in enumerate([b"first damage", b"second damage", b"third"]):
        progress_file.write_bytes(content)
        with pytest.warns(RuntimeWarning):
            record("gemm_kernels.lab.exercises.start_here", "axpy", "correct")
    names = ["progress.json.corrupt", "progress.json.corrupt-2", "progress.json.corrupt-3"]
    assert [progress_file.with_name(n).read_bytes() for n in names] == [b"first damage", b"second damage", b"third"]


# ----------------------------------------------------------------------------- committed results
@pytest.fixture
def results_dir(tmp_path):
    """A copy of one suite's committed files (csv, md, meta) to damage."""
    from gemm_kernels import results

    for name in ("square.csv", "results.md", "meta.json", "moe_host.json"):
        (tmp_path / name).write_bytes((results.BENCH_DIR / name).read_bytes())
    return tmp_path


@pytest.mark.parametrize("content, pattern", [
    (b"\xff\xfe\x00", "is not UTF-8 text"), (b'{"suites": {', "is not valid JSON"),
    (b"[" * 100000 + b"]" * 100000, "nested too deeply"), (b"[1, 2]", "holds a JSON list"),
])
def test_a_damaged_record_is_named(results_dir, content, pattern):
    from gemm_kernels import results

    (results_dir / "moe_host.json").write_bytes(content)
    with pytest.raises(results.ResultsFileError, match=f"moe_host.json (is )?{pattern}"):
        results.committed_record("moe_host", results_dir)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00", b'{"suites": {', b"[" * 100000 + b"]" * 100000, b"[1, 2]",
                                     b'{"suites": 5}', b'{"suites": {"square": "x"}}'])
def test_a_damaged_meta_json_hides_only_the_provenance(results_dir, content):
    from gemm_kernels import results

    (results_dir / "meta.json").write_bytes(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = results.load_committed("square", results_dir)
    assert found["table"] and found["csv"] and isinstance(found["meta"], dict)  # the other files still shown
    assert all(str(results_dir / "meta.json") in str(w.message) for w in caught)


def test_a_damaged_results_md_hides_only_its_table(results_dir):
    from gemm_kernels import results

    (results_dir / "results.md").write_bytes(b"\x80\x81 not text")
    with pytest.warns(RuntimeWarning, match="results.md is not UTF-8"):
        found = results.load_committed("square", results_dir)
    assert found["table"] is None and found["csv"] is not None and found["meta"]


@pytest.mark.parametrize("damage", ["truncated", "extra-cell", "non-utf8"])
def test_a_damaged_csv_is_named_with_its_line(results_dir, damage):
    from gemm_kernels import results

    path = results_dir / "square.csv"
    text = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(text[: len(text) // 2].rsplit(b",", 1)[0])
    elif damage == "extra-cell":
        lines = text.splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:3]) + lines[3].rstrip(b"\r\n") + b",extra\n" + b"".join(lines[4:]))
    else:
        path.write_bytes(text[:40] + b"\xff" + text[40:])
    with pytest.raises(results.ResultsFileError, match="square.csv"):
        results.committed_rows("square", results_dir)


# ----------------------------------------------------------------------------- split-K past 2^31 floats (GPU)
@pytest.mark.gpu
def test_gpu_splitk_workspace_past_2_31_floats():
    """8256^2 in 32 pieces: the partial sums fill 8256 * 8256 * 32 = 2.18e9 fp32 slots (8.7 GB),
    past what a 32-bit offset reaches; with int32 offsets the last tiles' pieces wrote and read
    wrapped slots.  One 128x128x64 config (no autotuning), checked against float64 on the GPU."""
    import triton

    M = N = 8256
    K = 32 * 64  # one 64-deep K block per piece
    need = M * N * 32 * 4 + 3 * M * K * 2 + M * N * (2 + 8)
    free = runtime.free_gpu_bytes()
    if free is not None and free < need * 1.1:
        pytest.skip(f"needs about {need / 2**30:.1f} GiB of GPU memory, {free / 2**30:.1f} GiB free")
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16, generator=gen)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16, generator=gen)
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=3)
    out = gk.matmul_splitk(a, b, split_k=32, config=config)
    ref = a.double() @ b.double()
    assert_close(out, ref, torch.float16)
    del ref
    torch.cuda.empty_cache()


# ----------------------------------------------------------------------------- round 4b (adv50): offs, keys, scales
def _grouped_fp8(T=8, K=32, N=16, E=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x, sx = fp8.quantize_fp8(torch.randn(T, K, generator=gen).to(DEVICE), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N, generator=gen).to(DEVICE))
    return x, w, sx.reshape(T), sw


def test_grouped_mm_resolves_a_lazily_negated_offs():
    """offs = _neg_view of its negation: the host check read the values, the kernel the memory
    (negative ends: an all-zero output).  grouped_mm, its weight gradient and (below) the fp8 one."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 32, generator=gen).to(DEVICE), torch.randn(2, 32, 8, generator=gen).to(DEVICE)
    plain = torch.tensor([2, 5], dtype=torch.int32, device=DEVICE)
    offs = torch._neg_view(-plain)
    assert offs.is_neg() and offs.tolist() == [2, 5]
    assert_close(gk.grouped_mm(x, w, offs), gk.grouped_mm_ref(x, w, plain, out_dtype=torch.float64), torch.float32)
    dy = torch.randn(5, 8, generator=gen).to(DEVICE)
    assert torch.equal(moe.grouped_mm_wgrad(x, dy, offs), moe.grouped_mm_wgrad(x, dy, plain))


@needs_fp8
def test_scaled_grouped_mm_resolves_a_lazily_negated_offs():
    x, w, sx, sw = _grouped_fp8()
    plain = torch.tensor([3, 8], dtype=torch.int32, device=DEVICE)
    out = fp8.scaled_grouped_mm(x, w, sx, sw, torch._neg_view(-plain), out_dtype=torch.float32)
    assert_close(out, fp8.scaled_grouped_mm_ref(x, w, sx, sw, plain, out_dtype=torch.float64), torch.float32)
    assert out.abs().sum() > 0


@needs_fp8
@pytest.mark.parametrize("options, pattern", [
    (dict(use_fast_accum="no"), "use_fast_accum must be True or False"),
    (dict(use_fast_accum=None), "use_fast_accum must be True or False"),
    (dict(use_fast_accum=1), "use_fast_accum must be True or False"),
    (dict(use_fast_accum=True, promote_every="bad"), "promote_every must be an int"),
    (dict(use_fast_accum=True, promote_every=128.0), "promote_every must be an int"),
])
def test_scaled_grouped_mm_checks_its_accumulation_options_before_a_kept_launch(monkeypatch, options, pattern):
    """Keeping forced on and every key found (a kept launch answers without checks): the options
    the key does not hold (use_fast_accum; promote_every under fast accumulation) are still checked."""
    x, w, sx, sw = _grouped_fp8()
    offs = torch.tensor([3, 8], dtype=torch.int32, device=DEVICE)
    monkeypatch.setattr(launches, "keeping", lambda: True)
    monkeypatch.setattr(moe, "kept_forward", lambda *args, **kw: torch.zeros(8, 16))
    with pytest.raises(TypeError, match=pattern):
        fp8.scaled_grouped_mm(x, w, sx, sw, offs, **options)


@pytest.mark.parametrize("meta, options", [({"BLOCK_M": 64.0}, {}), ({}, {"num_warps": 4.0}),
                                           ({"BLOCK_K": 32.0}, {}), ({}, {"num_stages": 2.0})])
def test_config_key_tells_apart_values_of_other_types(meta, options):
    """64.0 == 64 (and True == 1) hash alike: without the types a float config found the valid one's launch."""
    import triton

    def config(meta, options):
        return triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, **meta},
                             **{"num_warps": 4, "num_stages": 2, **options})
    assert launches.config_key(config(meta, options)) != launches.config_key(config({}, {}))
    assert launches.config_key(config({}, {})) == launches.config_key(config({}, {}))


def test_matmul_splitk_checks_a_float_config_after_a_kept_int_one(monkeypatch):
    """matmul_splitk with keeping forced on: a kept launch answers its key without the checks, so
    BLOCK_M=64.0 must not find the key of BLOCK_M=64."""
    import triton

    from gemm_kernels.kernels import splitk as splitk_module

    a = torch.randn(64, 64, device=DEVICE)
    keys = []

    def run(key, **tensors):
        if key is not None and key in keys:
            return torch.zeros(64, 64)
        keys.append(key)
        return None

    monkeypatch.setattr(launches, "keeping", lambda: True)
    monkeypatch.setattr(splitk_module._KEPT, "run", run)
    ok = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=2)
    bad = triton.Config({"BLOCK_M": 64.0, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=2)
    assert_close(gk.matmul_splitk(a, a, split_k=2, config=ok), a.double() @ a.double(), torch.float32)
    assert torch.equal(gk.matmul_splitk(a, a, split_k=2, config=ok), torch.zeros(64, 64))  # kept
    with pytest.raises((TypeError, ValueError), match="BLOCK_M"):
        gk.matmul_splitk(a, a, split_k=2, config=bad)


def _same_specials(out, ref):
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())
    finite = ref.isfinite()
    assert torch.equal(out[finite & out.isinf()], ref[finite & out.isinf()])  # no inf where ref is finite
    assert torch.equal(torch.sign(out[ref.isinf()]), torch.sign(ref[ref.isinf()].float()))


@needs_fp8
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
@pytest.mark.parametrize("bad", [float("inf"), -float("inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_scaled_mm_with_a_non_finite_scale_matches_its_reference(scaling, bad):
    """An inf scale: the kernels scale the product (inf where it is nonzero), the reference used to
    dequantize first (0 * inf = NaN wherever a value was 0).  Both now scale the product."""
    M, N, K = 16, 16, 128
    ga, gb = fp8.granularities(scaling)
    gen = torch.Generator().manual_seed(1)
    a, sa = fp8.quantize_fp8(torch.randn(M, K, generator=gen).to(DEVICE), ga)
    b, sb = fp8.quantize_fp8(torch.randn(N, K, generator=gen).to(DEVICE).t(), gb)
    a = a.clone()
    a.view(torch.uint8)[:, : K // 2] = 0  # zeros in every row: where the two semantics differ
    a.view(torch.uint8)[3] = 0  # an all-zero row: 0 * inf = NaN in both
    sa = sa.clone()
    sa.view(-1)[0] = bad
    out = fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    _same_specials(out, ref)
    finite = ref.isfinite()
    assert_close(out[finite], ref[finite], torch.float32)
    if bad != bad:
        assert ref.isnan().any()
    else:
        assert ref.isinf().any()  # not NaN wherever a row holds a zero


@needs_fp8
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
def test_scaled_mm_ref_equals_dequantizing_first_for_finite_scales(scaling):
    M, N, K = 8, 24, 256
    ga, gb = fp8.granularities(scaling)
    gen = torch.Generator().manual_seed(2)
    a, sa = fp8.quantize_fp8(torch.randn(M, K, generator=gen), ga)
    b, sb = fp8.quantize_fp8(torch.randn(N, K, generator=gen).t(), gb)
    dequantized = fp8.dequantize(a, sa, ga) @ fp8.dequantize(b, sb, gb)
    torch.testing.assert_close(fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64), dequantized,
                               rtol=1e-12, atol=1e-12)


@needs_fp8
@pytest.mark.parametrize("bad", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_scaled_grouped_mm_with_a_non_finite_scale_matches_its_reference(bad):
    x, w, sx, sw = _grouped_fp8()
    x = x.clone()
    x.view(torch.uint8)[:, :16] = 0
    sx, sw = sx.clone(), sw.clone()
    sx[1] = bad
    sw[1, 2] = bad
    offs = torch.tensor([3, 8], dtype=torch.int32, device=DEVICE)
    out = fp8.scaled_grouped_mm(x, w, sx, sw, offs, out_dtype=torch.float32)
    ref = fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64)
    _same_specials(out, ref)
    assert_close(out[ref.isfinite()], ref[ref.isfinite()], torch.float32)


@needs_fp8
@pytest.mark.parametrize("bad", [float("inf"), -float("inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_scaled_grouped_mm_rows_past_the_last_expert_are_zero_whatever_their_scale(bad):
    """The tail's zeros were multiplied by the tail rows' scale_x: NaN * 0 = NaN, inf * 0 = NaN."""
    x, w, sx, sw = _grouped_fp8(T=8)
    sx = sx.clone()
    sx[5:] = bad
    offs = torch.tensor([2, 5], dtype=torch.int32, device=DEVICE)
    out = fp8.scaled_grouped_mm(x, w, sx, sw, offs, out_dtype=torch.float32)
    assert torch.equal(out[5:], torch.zeros_like(out[5:]))
    assert torch.equal(fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float32)[5:], out[5:])
    assert out[:5].isfinite().all()


@pytest.mark.gpu
@needs_fp8
def test_gpu_kept_scaled_grouped_mm_launch_does_not_pass_bad_options():
    """On a GPU with launches kept: after a valid call, options its key cannot tell apart are refused."""
    x, w, sx, sw = _grouped_fp8(T=64, K=128, N=64)
    offs = torch.tensor([32, 64], dtype=torch.int32, device=DEVICE)
    assert launches.keeping()
    for valid, bads in [(dict(use_fast_accum=True), [dict(use_fast_accum="no"), dict(use_fast_accum=1),
                                                     dict(use_fast_accum=True, promote_every="bad")]),
                        (dict(), [dict(use_fast_accum=None), dict(use_fast_accum=0), dict(promote_every=128.0)])]:
        fp8.scaled_grouped_mm(x, w, sx, sw, offs, **valid)
        fp8.scaled_grouped_mm(x, w, sx, sw, offs, **valid)  # the kept launch
        for bad in bads:
            with pytest.raises(TypeError):
                fp8.scaled_grouped_mm(x, w, sx, sw, offs, **bad)


@pytest.mark.gpu
def test_gpu_kept_splitk_launch_does_not_pass_a_float_config():
    import triton

    a = torch.randn(64, 64, device=DEVICE, dtype=torch.float16)
    assert launches.keeping()
    ok = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=2)
    gk.matmul_splitk(a, a, split_k=2, config=ok)
    gk.matmul_splitk(a, a, split_k=2, config=ok)  # the kept launch
    for meta, options in [({"BLOCK_M": 64.0}, {}), ({}, {"num_warps": 4.0})]:
        bad = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, **meta}, **{"num_warps": 4, "num_stages": 2,
                                                                                     **options})
        with pytest.raises((TypeError, ValueError)):
            gk.matmul_splitk(a, a, split_k=2, config=bad)


@pytest.mark.gpu
@needs_fp8
def test_gpu_torch_scaled_mm_scales_the_product_as_the_kernels_do():
    """The semantics scaled_mm_ref documents: on CUDA torch._scaled_mm (cuBLASLt) scales the product,
    so an inf scale gives inf where the product is nonzero (its CPU path dequantizes first: NaN)."""
    a = torch.tensor([[0.0] * 15 + [1.0]] * 16, device=DEVICE).to(E4M3)
    b = torch.ones(16, 16, device=DEVICE).to(E4M3).t()
    inf, one = torch.tensor(float("inf"), device=DEVICE), torch.tensor(1.0, device=DEVICE)
    theirs = torch._scaled_mm(a, b, inf, one, out_dtype=torch.float32)
    ours = fp8.scaled_mm(a, b, inf, one, out_dtype=torch.float32)
    ref = fp8.scaled_mm_ref(a, b, inf, one, out_dtype=torch.float32)
    assert torch.equal(ours, ref) and torch.equal(theirs, ours)
