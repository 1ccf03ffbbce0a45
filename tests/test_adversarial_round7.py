"""Adversarial review, round 7 (the single-GEMM launchers, on a CPU): a double backward through
relu and leaky_relu keeps the bias and A in the graph, with torch's values (leaky_relu's slope at
Z = 0 too); ``matmul`` with gradients on checks its tensors and options before the custom op's
schema does; a TMA layout error names the launcher that was called; ``num_programs`` far past the
tiles is the same launch as the tiles' count."""

from __future__ import annotations

import pytest
import torch

import gemm_kernels as gk
from gemm_kernels.kernels.epilogue import activation_ref


def _reference(a, b, bias, activation):
    return activation_ref(a.double() @ b.double() + bias.double(), activation)


@pytest.mark.parametrize("launcher", [gk.matmul, gk.matmul_auto])
@pytest.mark.parametrize("activation", ["relu", "leaky_relu", "gelu"])
def test_a_double_backward_keeps_the_bias_and_a_in_the_graph(launcher, activation):
    """``torch.where(Z > 0, dC, 0)`` cut Z off: the bias's second gradient was "not used in the
    graph" where torch's own relu gives zeros; and leaky_relu's derivative at Z = 0 was 1, torch's
    is the slope (a zero row of A with a zero bias puts a row of Z at 0)."""
    torch.manual_seed(0)
    a = torch.randn(8, 32, dtype=torch.float64).float()
    a[0] = 0
    a.requires_grad_()
    b = torch.randn(32, 16, requires_grad=True)
    bias = torch.zeros(16, requires_grad=True)
    (ga,) = torch.autograd.grad(launcher(a, b, bias=bias, activation=activation).sum(), [a], create_graph=True)
    second = torch.autograd.grad((ga * ga).sum(), [bias, a, b])  # no allow_unused: each is in the graph

    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    (ra,) = torch.autograd.grad(_reference(a64, b64, bias64, activation).sum(), [a64], create_graph=True)
    expected = torch.autograd.grad((ra * ra).sum(), [bias64, a64, b64])
    assert torch.allclose(ga.double(), ra, atol=1e-4), (ga.double() - ra).abs().max()
    for got, want in zip(second, expected):
        assert torch.allclose(got.double(), want, atol=1e-3, rtol=1e-3), (got.double() - want).abs().max()


def test_a_group_past_int64_with_gradients_on_is_the_group_of_every_row():
    a = torch.randn(8, 32, requires_grad=True)
    b = torch.randn(32, 16)
    out = gk.matmul(a, b, group_size_m=2**63)  # the op's schema holds int64: clamped to M first
    assert torch.allclose(out, a @ b, atol=1e-4)


def test_a_3d_a_with_a_huge_group_and_gradients_on_is_named_as_3d():
    a = torch.randn(2, 8, 32, requires_grad=True)
    with pytest.raises(ValueError, match="a must be 2-D"):
        gk.matmul(a, torch.randn(32, 16), group_size_m=2**70)


@pytest.mark.parametrize("which", ["b", "bias"])
def test_a_list_for_a_tensor_with_gradients_on_is_named(which):
    a = torch.randn(8, 32, requires_grad=True)
    b, bias = torch.randn(32, 16), torch.randn(16)
    kwargs = {"b": b.tolist() if which == "b" else b, "bias": bias.tolist() if which == "bias" else bias}
    with pytest.raises(TypeError, match=f"{which} must be a torch.Tensor, got list"):
        gk.matmul(a, kwargs["b"], bias=kwargs["bias"])


@pytest.mark.parametrize("call, named, otherwise", [
    (lambda x, y: gk.matmul_streamk(x, y), "matmul_streamk needs", "use matmul_persistent"),
    (lambda x, y: gk.matmul_splitk(x, y, tma=True), r"matmul_splitk\(tma=True\) needs", "leave tma=False"),
    (lambda x, y: gk.matmul_tma(x, y), "matmul_tma needs", "use matmul_persistent")])
def test_a_tma_layout_error_names_the_launcher_called(call, named, otherwise):
    x, y = torch.randn(33, 17).half(), torch.randn(17, 24).half()  # a's rows are 34 bytes apart
    with pytest.raises(ValueError, match=f"a cannot be read by TMA.*{named}.*{otherwise}"):
        call(x, y)


@pytest.mark.parametrize("launcher", [gk.matmul_persistent, gk.matmul_tma])
def test_num_programs_far_past_the_tiles_runs_the_tiles(launcher):
    """Its NUM_PROGRAMS constexpr is capped at C's elements (the grid already was at the tiles): a
    value past 32 bits would not compile on a GPU, and each value would compile anew."""
    a, b = torch.randn(40, 24).half(), torch.randn(24, 40).half()
    expected = (a.double() @ b.double())
    for programs in (2**31, 10**30):
        out = launcher(a, b, num_programs=programs)
        assert torch.allclose(out.double(), expected, atol=1e-2, rtol=1e-2)
