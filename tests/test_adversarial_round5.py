"""Adversarial review, round 4's last two defects (issue 50: D11, D12), at their mechanisms.

D11: the FP8 references took what their launchers refuse: ``scaled_mm_ref`` answered a 1-D ``a``,
mismatched K or a bias of the wrong length with an IndexError or torch's broadcasting error, and
``scaled_grouped_mm_ref`` silently answered decreasing offs, offs past T and offs shorter than
the expert count.  They now run the launchers' own argument checks (one source of truth: the
same message), less the kernels' layout rules.  ``quantize_fp8``/``quantize_experts`` name a
sparse or meta input and a dtype given as a string; ``quantize_experts`` is public like its siblings.

D12: with ``GEMM_KERNELS_ARCH`` naming an older GPU in the CPU interpreter, the fp8 launchers told
the learner to run in the interpreter, where they were.  Every "needs a feature" error is now
built by ``runtime.missing_feature``: where the variable hides the feature, it says to unset it.

Found by the fuzzer (tests/test_fuzz.py) since: with K = 0 the references scaled the empty sum
(0 * NaN = NaN) where the kernels, like torch._scaled_mm on the CPU, give 0; a path variable set to
``~user`` with no home raised pathlib's RuntimeError naming no variable."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import DEVICE, runtime
from gemm_kernels.kernels import fp8

E4M3 = torch.float8_e4m3fn
needs_fp8 = pytest.mark.skipif(not runtime.supports_fp8(), reason="needs fp8 tensor cores (sm_89+)")


def _fp8(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, E4M3)


def _col_major(K, N, seed=1):
    return _fp8(N, K, seed=seed).t()


def _error(fn, *args, **kwargs) -> BaseException:
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


def _same_refusal(ref: BaseException, kernel: BaseException) -> None:
    """The reference's error is the launcher's (its out_dtypes add float64, for error measurements)."""
    assert isinstance(kernel, (ValueError, TypeError)), kernel
    expected = str(kernel).replace("float16, float32 (", "float16, float32, float64 (")
    assert type(ref) is type(kernel) and str(ref) == expected, (ref, kernel)


ONE = torch.tensor(1.0, device=DEVICE)

#: name -> (a, b, scale_a, scale_b, options): calls scaled_mm refuses for their arguments, not their layouts
SCALED_MM_REFUSALS = {
    "a 1-D": lambda: (_fp8(16), _col_major(16, 2), ONE, ONE, {}),
    "K mismatch": lambda: (_fp8(2, 16), _col_major(32, 2), ONE, ONE, {}),
    "bias length": lambda: (_fp8(2, 16), _col_major(16, 2), ONE, ONE, {"bias": torch.ones(5, device=DEVICE)}),
    "bias 2-D": lambda: (_fp8(2, 16), _col_major(16, 2), ONE, ONE, {"bias": torch.ones(1, 2, device=DEVICE)}),
    "a float16": lambda: (torch.ones(2, 16, device=DEVICE, dtype=torch.float16), _col_major(16, 2), ONE, ONE, {}),
    "K not a multiple of 16": lambda: (_fp8(2, 8), _col_major(8, 2), ONE, ONE, {}),
    "scales of no scaling": lambda: (_fp8(3, 16), _col_major(16, 2), torch.ones(3, 2, device=DEVICE), ONE, {}),
    "scale_a float16": lambda: (_fp8(2, 16), _col_major(16, 2), ONE.half(), ONE, {}),
    "scale_b sparse": lambda: (_fp8(2, 16), _col_major(16, 2), ONE, torch.ones(1, 1, device=DEVICE).to_sparse(), {}),
    "out_dtype a string": lambda: (_fp8(2, 16), _col_major(16, 2), ONE, ONE, {"out_dtype": "bfloat16"}),
    "out_dtype an array": lambda: (_fp8(2, 16), _col_major(16, 2), ONE, ONE, {"out_dtype": np.array([1, 2])}),
    "out_dtype int32": lambda: (_fp8(2, 16), _col_major(16, 2), ONE, ONE, {"out_dtype": torch.int32}),
}


@needs_fp8
@pytest.mark.parametrize("case", sorted(SCALED_MM_REFUSALS))
def test_scaled_mm_ref_refuses_what_scaled_mm_refuses_with_its_message(case):
    a, b, sa, sb, options = SCALED_MM_REFUSALS[case]()
    kernel = _error(fp8.scaled_mm, a, b, sa, sb, **options)
    ref = _error(fp8.scaled_mm_ref, a, b, sa, sb, **options)
    _same_refusal(ref, kernel)


def test_scaled_mm_ref_keeps_what_only_the_kernels_refuse():
    """Layouts are the kernels' rule, not the product's: a column-major a, a row-major b and a
    float64 output are the reference's to take (the dequantized product)."""
    x, w = torch.randn(5, 32), torch.randn(32, 7)
    a, sa = fp8.quantize_fp8(x.t().contiguous().t().to(DEVICE), "row")
    b, sb = fp8.quantize_fp8(w.contiguous().to(DEVICE), "column")
    assert a.stride(1) != 1 and b.stride(0) != 1
    ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
    expected = fp8.dequantize(a, sa, "row") @ fp8.dequantize(b, sb, "column")
    torch.testing.assert_close(ref.cpu(), expected.cpu(), rtol=1e-12, atol=1e-12)


def _grouped(T=4, E=2, K=16, N=2, offs=(1, 4)):
    x, sx = fp8.quantize_fp8(torch.randn(T, K).to(DEVICE), "row")
    w, sw = fp8.quantize_experts(torch.randn(E, K, N).to(DEVICE))
    return x, w, sx.reshape(T), sw, torch.tensor(offs, dtype=torch.int32, device=DEVICE)


#: name -> changes to a valid scaled_grouped_mm call
GROUPED_REFUSALS = {
    "offs decreasing": dict(offs=(3, 1)),
    "offs past T": dict(offs=(3, 9)),
    "offs negative": dict(offs=(-1, 4)),
    "offs shorter than E": dict(offs=(4,)),
    "offs int64": dict(offs_dtype=torch.int64),
    "scale_x of the wrong length": dict(scale_x=torch.ones(3)),
    "scale_w of the wrong shape": dict(scale_w=torch.ones(2, 3)),
    "x float32": dict(x=torch.ones(4, 16)),
    "out_dtype a string": dict(out_dtype="float32"),
}


@needs_fp8
@pytest.mark.parametrize("case", sorted(GROUPED_REFUSALS))
def test_scaled_grouped_mm_ref_refuses_what_scaled_grouped_mm_refuses(case):
    change = dict(GROUPED_REFUSALS[case])
    x, w, sx, sw, offs = _grouped(offs=change.pop("offs", (1, 4)))
    if "offs_dtype" in change:
        offs = offs.to(change.pop("offs_dtype"))
    args = dict(x=x, w=w, scale_x=sx, scale_w=sw, offs=offs, out_dtype=torch.float32)
    args.update({k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in change.items()})
    kernel = _error(fp8.scaled_grouped_mm, **args, check_offs=True)  # offs' values checked on the host
    ref = _error(fp8.scaled_grouped_mm_ref, **args)
    _same_refusal(ref, kernel)


def _no_strided_values(kind: str, *shape) -> torch.Tensor:
    if kind == "meta":
        return torch.ones(*shape, device="meta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: sparse CSR support is in beta
        return torch.ones(*shape).to_sparse() if kind == "coo" else torch.ones(*shape).to_sparse_csr()


@pytest.mark.parametrize("kind", ["coo", "csr", "meta"])
def test_quantizers_name_an_input_with_no_strided_values(kind):
    with pytest.raises((TypeError, ValueError), match=r"^x is (a sparse_csr|a sparse_coo|on the meta device)"):
        fp8.quantize_fp8(_no_strided_values(kind, 3, 16))
    with pytest.raises((TypeError, ValueError), match=r"^w is (a sparse_csr|a sparse_coo|on the meta device)"):
        fp8.quantize_experts(_no_strided_values(kind, 2, 16, 8))


@pytest.mark.parametrize("dtype", ["e4m3", "float8_e4m3fn", torch.float16, None, np.array([1, 2])])
def test_quantize_experts_names_a_bad_dtype_as_quantize_fp8_does(dtype):
    experts = _error(fp8.quantize_experts, torch.ones(2, 32, 8), dtype=dtype)
    single = _error(fp8.quantize_fp8, torch.ones(32, 8), dtype=dtype)
    assert type(experts) is TypeError and str(experts) == str(single), (experts, single)
    assert str(experts).startswith("dtype must be one of float8_e4m3fn, float8_e5m2"), experts


def test_quantize_experts_is_public_like_its_siblings():
    assert "quantize_experts" in gk.__all__
    assert gk.quantize_experts is fp8.quantize_experts


# ----------------------------------------------------------------------------- D12: GEMM_KERNELS_ARCH's messages
_ARCH_SCRIPT = r"""
import torch, gemm_kernels as gk
a = torch.ones(16, 16).to(torch.float8_e4m3fn)
calls = {
    "scaled_mm": lambda: gk.scaled_mm(a, a.t(), torch.tensor(1.0), torch.tensor(1.0)),
    "scaled_grouped_mm": lambda: gk.scaled_grouped_mm(a, a.t()[None], torch.ones(16), torch.ones(1, 16),
                                                      torch.tensor([16], dtype=torch.int32)),
    "matmul_tma": lambda: gk.matmul_tma(torch.ones(64, 64), torch.ones(64, 64)),
    "bf16": lambda: gk.matmul(torch.ones(16, 16, dtype=torch.bfloat16), torch.ones(16, 16, dtype=torch.bfloat16)),
}
for name, fn in calls.items():
    try:
        fn()
    except Exception as e:
        print(name, "|", type(e).__name__, "|", str(e).replace("\n", " "))
    else:
        print(name, "| ran")
"""


def test_an_emulated_older_gpu_in_the_interpreter_is_named_as_the_cause():
    env = {**os.environ, "GEMM_KERNELS_ARCH": "sm_75", "GEMM_KERNELS_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", _ARCH_SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    lines = dict(line.split(" | ", 1) for line in out.stdout.splitlines() if " | " in line)
    assert set(lines) == {"scaled_mm", "scaled_grouped_mm", "matmul_tma", "bf16"}, out.stdout + out.stderr[-3000:]
    for name, got in lines.items():
        assert "unset GEMM_KERNELS_ARCH" in got, (name, got)
        assert "GEMM_KERNELS_INTERPRET=1" not in got, (name, got)  # it runs there already


@pytest.mark.parametrize("arch_from_env", [False, True])
def test_a_missing_feature_on_a_gpu_names_the_way_out(monkeypatch, arch_from_env):
    """On a real GPU: without the variable, fp8 and bf16 point to the interpreter (which has them);
    with it, to unsetting it.  matmul_ws has no interpreter way out: the interpreter is never named
    as a place it runs, and on an emulated older GPU unsetting is the way."""
    fake = dataclasses.replace(runtime.RUNTIME, interpreted=False, gpu_name="NVIDIA A100", capability=(8, 0),
                               arch_from_env=arch_from_env)
    monkeypatch.setattr(runtime, "RUNTIME", fake)
    monkeypatch.setattr(runtime, "supports_fp8", lambda: False)
    with pytest.raises(RuntimeError) as info:
        fp8.require_fp8("scaled_mm")
    message = str(info.value)
    assert message.startswith("scaled_mm needs fp8 tensor cores") and "notebook 10" in message
    assert ("unset GEMM_KERNELS_ARCH" in message) == arch_from_env, message
    assert ("GEMM_KERNELS_INTERPRET=1" in message) != arch_from_env, message
    ws = runtime.missing_feature("matmul_ws", "an sm_90 GPU", "Use matmul_tma.")
    assert "GEMM_KERNELS_INTERPRET=1" not in ws and ("unset GEMM_KERNELS_ARCH" in ws) == arch_from_env, ws


# ----------------------------------------------------------------------------- found by the fuzzer
@needs_fp8
@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_an_empty_sum_is_zero_whatever_the_scales_in_kernels_and_references(scale):
    """K = 0: the kernels launch nothing (zeros, then the bias), as torch._scaled_mm does on the CPU;
    the references scaled the empty product, 0 * NaN = NaN (the fuzzer's find).  With K > 0 and
    zero values the product is scaled: NaN in both."""
    bad = torch.tensor(scale, device=DEVICE)
    a, b = torch.zeros(2, 0, device=DEVICE).to(E4M3), torch.zeros(3, 0, device=DEVICE).to(E4M3).t()
    bias = torch.arange(3.0, device=DEVICE)
    for fn in (fp8.scaled_mm, fp8.scaled_mm_ref):
        got = fn(a, b, bad, ONE, bias=bias, out_dtype=torch.float32)
        assert torch.equal(got.cpu(), bias.cpu().expand(2, 3)), (fn.__name__, got)
    x, w = torch.zeros(3, 0, device=DEVICE).to(E4M3), torch.zeros(2, 4, 0, device=DEVICE).to(E4M3).transpose(1, 2)
    sx = torch.tensor([1.0, scale, 1.0], device=DEVICE)
    offs = torch.tensor([1, 3], dtype=torch.int32, device=DEVICE)
    for fn in (fp8.scaled_grouped_mm, fp8.scaled_grouped_mm_ref):
        got = fn(x, w, sx, torch.ones(2, 4, device=DEVICE), offs, out_dtype=torch.float32)
        assert torch.equal(got.cpu(), torch.zeros(3, 4)), (fn.__name__, got)
    a16 = torch.zeros(2, 16, device=DEVICE).to(E4M3)
    for fn in (fp8.scaled_mm, fp8.scaled_mm_ref):
        assert fn(a16, a16.t(), bad, ONE, out_dtype=torch.float32).isnan().all(), fn.__name__


@pytest.mark.parametrize("variable", ["GEMM_KERNELS_TUNING_CACHE", "GEMM_KERNELS_PROGRESS"])
def test_a_path_variable_naming_no_users_home_is_refused_by_name(variable, monkeypatch):
    """``~0`` (the fuzzer's find): pathlib's expanduser raised "Could not determine home directory",
    naming no variable.  ``~`` itself is expanded once, where the variable is parsed."""
    import importlib

    from gemm_kernels.kernels import tuning_cache

    progress = importlib.import_module("gemm_kernels.lab.progress")
    read = {"GEMM_KERNELS_TUNING_CACHE": tuning_cache.cache_directory,
            "GEMM_KERNELS_PROGRESS": progress.progress_path}[variable]
    monkeypatch.setenv(variable, "~no-such-user-here/x")
    with pytest.raises(ValueError, match=rf"^{variable}='~no-such-user-here/x': '~no-such-user-here' is no user's home"):
        read()
    monkeypatch.setenv(variable, "~/x")
    assert str(read()) == os.path.expanduser("~/x")
