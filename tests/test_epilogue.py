"""The epilogue's activations, element by element, against torch in float64.

The GEMM tests compare whole products in fp16/bf16, whose rounding would hide an activation
that is wrong by 1e-4; here each activation runs on an fp32 vector (interpreter on a CPU,
compiled on a GPU) and must match torch to fp32 accuracy, special values included.
"""

import math

import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels import DEVICE
from gemm_kernels.kernels.epilogue import ACTIVATIONS, activation_ref, apply_activation

SPECIALS = [0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 1e4, -1e4, 3e38, -3e38, math.inf, -math.inf, math.nan]


@triton.jit
def _activation_kernel(x_ptr, y_ptr, n, ACTIVATION: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, apply_activation(x, ACTIVATION), mask=offs < n)


def _apply(x: torch.Tensor, activation) -> torch.Tensor:
    x = x.to(DEVICE)
    y = torch.empty_like(x)  # NaN-poisoned by conftest
    block = 1024
    _activation_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), ACTIVATION=activation, BLOCK=block)
    return y.cpu()


# gelu_erf squares its argument: for the +-inf / huge inputs numpy (the interpreter) warns about
# the inf * inf and inf * 0 it computes on the way to the right answer, which the test checks
@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_activation_matches_torch_to_fp32_accuracy(activation):
    # dense where GELU bends (|x| < 6), plus random values of every magnitude fp32 holds
    gen = torch.Generator().manual_seed(7)
    wide = torch.randn(4096, generator=gen) * torch.exp(torch.empty(4096).uniform_(-20, 20, generator=gen))
    x = torch.cat([torch.linspace(-12.0, 12.0, 48001), wide, torch.tensor(SPECIALS)]).float()
    y = _apply(x, activation).double()
    ref = activation_ref(x.double(), activation)
    finite = torch.isfinite(ref)
    # absolute error scaled by max(1, |x|): fp32 rounding of the inputs and the formula's own error
    err = ((y - ref).abs() / x.double().abs().clamp(min=1.0))[finite]
    assert err.max().item() < 2e-6, f"{activation}: worst error {err.max().item():.2e} at x = {x[finite][err.argmax()].item()}"
    # infinities and NaN land where torch puts them
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), f"{activation}: NaN pattern differs from torch"
    assert torch.equal(y[~finite & ~torch.isnan(ref)], ref[~finite & ~torch.isnan(ref)])


def test_gelu_is_odd_symmetric_around_its_linear_part():
    """GELU(x) - GELU(-x) = x exactly in real arithmetic (Phi(x) + Phi(-x) = 1): the kernel's
    tail formula keeps it to fp32 rounding, so no side of zero is favoured."""
    x = torch.linspace(0.0, 8.0, 8001).float()
    gap = (_apply(x, "gelu").double() - _apply(-x, "gelu").double()) - x.double()
    assert gap.abs().max().item() < 1e-5 * 8
