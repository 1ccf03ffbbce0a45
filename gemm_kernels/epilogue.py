"""What happens to a tile after the K loop, while the accumulator is still fp32.

Fusing the bias and the activation here saves a full extra pass over C in
device memory (read M*N, write M*N) that a separate ``torch`` call would cost.
The same names are used on both sides: ``apply_activation`` in kernels,
``activation_ref`` in the torch references.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import runtime as _runtime

ACTIVATIONS = (None, "relu", "leaky_relu", "gelu")
LEAKY_RELU_SLOPE = 0.01  # torch.nn.functional.leaky_relu's default


def check_activation(activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


@triton.jit
def apply_activation(x, ACTIVATION: tl.constexpr):
    """x is the fp32 accumulator tile; ACTIVATION is a compile-time string (or None)."""
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == "leaky_relu":
        # the standard definition: no "+ 1" before the select (notebook 04 explains why it matters)
        x = tl.where(x >= 0, x, 0.01 * x)
    elif ACTIVATION == "gelu":
        # exact (erf) GELU, like torch.nn.functional.gelu's default
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    return x


@triton.jit
def mma_operand(tile, WIDEN: tl.constexpr):
    """Tile as fed to tl.dot: widened to fp32 only where runtime.fp32_dot_operands says so."""
    if WIDEN:
        tile = tile.to(tl.float32)
    return tile


def activation_ref(x: torch.Tensor, activation) -> torch.Tensor:
    """torch reference for :func:`apply_activation` (on an fp32/fp64 tensor)."""
    check_activation(activation)
    if activation == "relu":
        return torch.relu(x)
    if activation == "leaky_relu":
        return torch.nn.functional.leaky_relu(x, LEAKY_RELU_SLOPE)
    if activation == "gelu":
        return torch.nn.functional.gelu(x)
    return x


def widen_for_dot(dtype: torch.dtype) -> bool:
    return _runtime.fp32_dot_operands(dtype)
