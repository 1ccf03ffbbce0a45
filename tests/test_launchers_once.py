"""Every public launcher of ``gemm_kernels``, called once as a user calls it (default settings: on a
GPU the autotuner runs), on ragged shapes and a transposed operand, against a float64 reference
by relative error; outputs NaN-poisoned (conftest).  The launchers are found from the package's
public names, so a new one fails ``test_every_public_launcher_is_called`` until it has a call here.

This is the kernels' part of ``make test-gpu-smoke``; the full suites are ``make test-gpu``."""

from __future__ import annotations

import inspect

import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import runtime
from gemm_kernels.testing import TOLERANCES, rel_err

#: public names of kernels/ that are not launchers: references, the dispatcher's rule, helpers
NOT_LAUNCHERS = {"pick_launcher", "route_tokens", "raise_pending_offs_error", "raise_pending_streamk_error",
                 "ws_schedule"}


def _public_launchers() -> set[str]:
    names = {name for name, module in gk._PUBLIC.items() if module.startswith("kernels.")}
    return {n for n in names if not n.endswith("_ref") and n not in NOT_LAUNCHERS}


def _shape():
    return (300, 257, 208) if runtime.on_gpu() else (37, 43, 32)  # K: fp8 rows of 16 bytes


def _operands(dtype=torch.float16, seed=0):
    M, N, K = _shape()
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=gen).to(gk.DEVICE, dtype)
    b = torch.randn(N, K, generator=gen).to(gk.DEVICE, dtype).t()  # a transposed view, as nn.Linear's weight
    return a, b


def _single(fn, needs=None):
    def call():
        if needs is not None:
            needs()
        a, b = _operands()
        bias = torch.randn(b.shape[1], device=gk.DEVICE, dtype=a.dtype)
        out = fn(a, b, bias=bias)
        return out, gk.matmul_ref(a, b, out_dtype=torch.float64) + bias.double(), a.dtype
    return call


def _tma():
    if not runtime.supports_tma():
        pytest.skip(f"TMA: {runtime.describe()}")


def _wgmma():
    if not runtime.supports_wgmma():
        pytest.skip(f"wgmma (sm_90): {runtime.describe()}")


def _fp8():
    if not runtime.supports_fp8():
        pytest.skip(f"fp8: {runtime.describe()}")


def _grouped_inputs():
    gen = torch.Generator().manual_seed(1)
    shapes = [(70, 33, 40), (1, 64, 16), (129, 17, 72)] if runtime.on_gpu() else [(20, 9, 16), (1, 8, 8)]
    group_a = [torch.randn(m, k, generator=gen).to(gk.DEVICE, torch.float16) for m, n, k in shapes]
    group_b = [torch.randn(k, n, generator=gen).to(gk.DEVICE, torch.float16) for m, n, k in shapes]
    return group_a, group_b


def _grouped_matmul():
    group_a, group_b = _grouped_inputs()
    out, ref = gk.grouped_matmul(group_a, group_b), gk.grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)
    return torch.cat([o.flatten() for o in out]), torch.cat([r.flatten() for r in ref]), torch.float16


def _grouped_plan():
    group_a, group_b = _grouped_inputs()
    plan = gk.GroupedMatmulPlan(group_a, group_b)
    plan.run()
    out = plan.run()  # the second run: the kept launch
    ref = gk.grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)
    return torch.cat([o.flatten() for o in out]), torch.cat([r.flatten() for r in ref]), torch.float16


def _moe_inputs(seed=2):
    gen = torch.Generator().manual_seed(seed)
    T, E, K, N = (333, 4, 96, 80) if runtime.on_gpu() else (19, 3, 16, 24)
    counts = torch.tensor([T // 3, 0, T - T // 3 - 5, 5][:E - 1] + [0])
    counts[-1] = T - counts[:-1].sum()
    offs = torch.cumsum(counts, 0).to(torch.int32).to(gk.DEVICE)
    x = torch.randn(T, K, generator=gen).to(gk.DEVICE, torch.float16)
    w = torch.randn(E, K, N, generator=gen).to(gk.DEVICE, torch.float16)
    return x, w, offs


def _grouped_mm():
    """Forward and the backward's two products (dgrad, wgrad) through autograd."""
    x, w, offs = _moe_inputs()
    x.requires_grad_(True)
    w.requires_grad_(True)
    out = gk.grouped_mm(x, w, offs)
    grad = torch.randn_like(out)
    out.backward(grad)
    x64, w64, g64 = x.detach().double(), w.detach().double(), grad.double()
    ref, dx, dw = torch.zeros_like(g64), torch.zeros_like(x64), torch.zeros_like(w64)
    start = 0
    for e, end in enumerate(offs.tolist()):  # out = x @ w[e], dx = g @ w[e].T, dw[e] = x.T @ g, per expert's rows
        ref[start:end] = x64[start:end] @ w64[e]
        dx[start:end] = g64[start:end] @ w64[e].T
        dw[e] = x64[start:end].T @ g64[start:end]
        start = end
    got = torch.cat([out.detach().flatten(), x.grad.flatten(), w.grad.flatten()])
    want = torch.cat([ref.flatten(), dx.flatten(), dw.flatten()])
    return got, want, torch.float16


def _scaled_mm():
    _fp8()
    a, b = _operands(torch.float32, seed=3)
    qa, sa = gk.quantize_fp8(a, "row")
    qb, sb = gk.quantize_fp8(b.t().contiguous(), "row")  # per output column: B's rows of K
    qb, sb = qb.t(), sb.t()
    out = gk.scaled_mm(qa, qb, sa, sb, out_dtype=torch.bfloat16)
    return out, gk.scaled_mm_ref(qa, qb, sa, sb, out_dtype=torch.float64), torch.float8_e4m3fn


def _quantize_fp8():
    a, _ = _operands(torch.float32, seed=4)
    q, scale = gk.quantize_fp8(a, "row")
    return q.double() * scale.double(), a.double(), torch.float8_e4m3fn  # 3 mantissa bits: within 1/16 each


def _quantize_fp8_transposed():
    _fp8()
    a, _ = _operands(torch.float32, seed=7)
    q, scale, q_t, scale_t = gk.quantize_fp8_transposed(a)
    deq = torch.cat([(q.double() * scale.double().repeat_interleave(128, 1)[:, :a.shape[1]]).flatten(),
                     (q_t.double() * scale_t.double().repeat_interleave(128, 1)[:, :a.shape[0]]).flatten()])
    return deq, torch.cat([a.double().flatten(), a.double().t().flatten()]), torch.float8_e4m3fn


def _scaled_mm_amax():
    _fp8()
    a, b = _operands(torch.float32, seed=8)
    qa, sa = gk.quantize_fp8(a, "row")
    qb, sb = gk.quantize_fp8(b, "column")  # b = W.t(): quantize_fp8 keeps its column-major layout
    out, amax = gk.scaled_mm_amax(qa, qb, sa, sb)
    assert amax.item() == out.float().abs().max().item(), "the epilogue's amax is not max |out|"
    return out, gk.scaled_mm_ref(qa, qb, sa, sb, out_dtype=torch.float64), torch.float8_e4m3fn


def _quantize_experts():
    _, w, _ = _moe_inputs(seed=6)
    q, scale = gk.quantize_experts(w.float())
    return q.double() * scale.double()[:, None, :], w.double(), torch.float8_e4m3fn  # as quantize_fp8's


def _scaled_grouped_mm():
    _fp8()
    x, w, offs = _moe_inputs(seed=5)
    qx, sx = gk.quantize_fp8(x.float(), "row")
    qw, sw = zip(*(gk.quantize_fp8(w[e].float().t().contiguous(), "row") for e in range(w.shape[0])))
    qw, sw = torch.stack(qw).transpose(1, 2), torch.stack(sw)[:, :, 0]  # w [E, K, N] K-major, scale_w [E, N]
    sx = sx[:, 0]  # scale_x [T]: one per token
    out = gk.scaled_grouped_mm(qx, qw, sx, sw, offs)
    return out, gk.scaled_grouped_mm_ref(qx, qw, sx, sw, offs, out_dtype=torch.float64), torch.float8_e4m3fn


def _trace_ws_tiles():
    """Not a product: the trace's schedule fields must be the numpy mirror's (exact)."""
    _wgmma()
    M, N, _ = _shape()
    trace = gk.trace_ws_tiles(M, N, 256)
    ref = gk.ws_schedule(M, N, num_programs=runtime.num_sms())
    return trace[:, :6].double(), torch.as_tensor(ref, dtype=torch.float64), None


CALLS = {
    "matmul": _single(gk.matmul),
    "matmul_persistent": _single(gk.matmul_persistent),
    "matmul_tma": _single(gk.matmul_tma, _tma),
    "matmul_streamk": _single(gk.matmul_streamk, _tma),  # TMA only: refuses by name without it
    "matmul_splitk": _single(gk.matmul_splitk),
    "matmul_auto": _single(gk.matmul_auto),
    "matmul_ws": _single(gk.matmul_ws, _wgmma),
    "grouped_matmul": _grouped_matmul,
    "GroupedMatmulPlan": _grouped_plan,
    "grouped_mm": _grouped_mm,
    "scaled_mm": _scaled_mm,
    "quantize_fp8": _quantize_fp8,
    "quantize_experts": _quantize_experts,
    "quantize_fp8_transposed": _quantize_fp8_transposed,
    "scaled_mm_amax": _scaled_mm_amax,
    "scaled_grouped_mm": _scaled_grouped_mm,
    "trace_ws_tiles": _trace_ws_tiles,
}


def test_every_public_launcher_is_called():
    assert _public_launchers() == set(CALLS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_launcher_once(name):
    out, ref, dtype = CALLS[name]()
    not_products = {"quantize_fp8": 1 / 16, "quantize_experts": 1 / 16, "quantize_fp8_transposed": 1 / 16,
                    "trace_ws_tiles": 0.0}
    tolerance = not_products[name] if name in not_products else TOLERANCES[dtype]
    error = rel_err(out, ref)
    assert error <= tolerance, f"{name}: relative error {error:.3g} > {tolerance:g} (signature {inspect.signature(getattr(gk, name))})"
