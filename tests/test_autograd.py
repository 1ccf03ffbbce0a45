"""Backward of matmul and matmul_tma (kernels.autograd): gradients against float64 torch autograd,
on ragged shapes, transposed views, every activation, with and without bias; the custom op
``gemm_kernels::matmul`` under torch.compile.  (grouped_mm's backward: tests/test_moe.py.)

The kernels accept fp16/bf16/fp32, not fp64, so torch.autograd.gradcheck cannot run at full
precision: analytic gradients are compared with float64 torch autograd by relative error."""

import pytest
import torch

from gemm_kernels import DEVICE, matmul, matmul_tma
from gemm_kernels.kernels.epilogue import activation_ref
from gemm_kernels.testing import assert_close


def _leaf(shape, dtype, seed, transposed=False):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn(*(shape[::-1] if transposed else shape), generator=gen).to(DEVICE, dtype)
    return (t.t() if transposed else t).detach().requires_grad_()


def _reference_grads(a, b, bias, activation, dc):
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    bias64 = bias.detach().double().requires_grad_() if bias is not None else None
    z = a64 @ b64 + (bias64 if bias64 is not None else 0)
    activation_ref(z, activation).backward(dc.double())
    return a64.grad, b64.grad, bias64.grad if bias64 is not None else None


@pytest.mark.parametrize("fn", [matmul, matmul_tma], ids=["matmul", "matmul_tma"])
@pytest.mark.parametrize("activation", [None, "relu", "leaky_relu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_gradients_match_float64(fn, activation, dtype):
    M, N, K = (37, 24, 40) if fn is matmul else (40, 24, 48)  # TMA: 16-byte aligned rows
    a = _leaf((M, K), dtype, 0)
    b = _leaf((K, N), dtype, 1, transposed=True)  # a column-major view, as nn.Linear weights are
    bias = _leaf((N,), dtype, 2)
    dc = torch.randn(M, N, generator=torch.Generator().manual_seed(3)).to(DEVICE, dtype)
    out = fn(a, b, activation=activation, bias=bias)
    assert out.requires_grad and out.grad_fn is not None
    out.backward(dc)
    for got, ref, name in zip((a.grad, b.grad, bias.grad), _reference_grads(a, b, bias, activation, dc), "abc"):
        assert got.shape == ref.shape and got.dtype == dtype
        assert_close(got.float(), ref, dtype, what=f"grad of {name}")


def test_only_the_inputs_that_require_grad_get_one():
    a = _leaf((20, 32), torch.float16, 0)
    b = _leaf((32, 16), torch.float16, 1).detach()
    matmul(a, b).sum().backward()
    assert a.grad is not None and b.grad is None


def test_no_grad_mode_takes_the_plain_launch():
    a = _leaf((20, 32), torch.float16, 0)
    with torch.no_grad():
        out = matmul(a, a.detach().t().contiguous())
    assert not out.requires_grad


def test_matmul_compiles_without_graph_breaks():
    """The op has a fake implementation: torch.compile(fullgraph=True) traces forward and backward."""
    a = _leaf((24, 32), torch.float32, 0)
    b = _leaf((32, 16), torch.float32, 1)

    def f(a, b):
        return matmul(torch.relu(a), b, activation="gelu").sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    compiled(a, b).backward()
    grads = a.grad.clone(), b.grad.clone()
    a.grad = b.grad = None
    f(a, b).backward()
    assert_close(grads[0], a.grad.double(), torch.float32)
    assert_close(grads[1], b.grad.double(), torch.float32)
