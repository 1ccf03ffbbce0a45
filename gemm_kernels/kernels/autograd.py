"""Backward of the single-GEMM launchers ``matmul`` and ``matmul_tma``, through the same kernels.

``C = act(Z)``, ``Z = A @ B + bias``.  Given ``dC``: ``dZ = dC * act'(Z)`` (Z recomputed by the
forward kernel when there is an activation: it is not kept), then ``dA = dZ @ Bᵀ`` and
``dB = Aᵀ @ dZ``, two more products of the same kernel on transposed views (every kernel reads
any strides), and ``dbias = dZ`` summed over rows.  ``grad_enabled_for`` says when a launcher
must take this route.  The MoE backward (``grouped_mm``) lives with its kernels in ``moe.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .epilogue import LEAKY_RELU_SLOPE


def grad_enabled_for(*tensors) -> bool:
    """True when autograd must record the call: grad mode on and an input requires grad, or
    torch.compile is tracing (it must see the op, not the Python launch)."""
    if torch.compiler.is_compiling():
        return True
    if not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(generator): this runs on every launch (host time)
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


def activation_grad(dc: torch.Tensor, z: torch.Tensor, activation) -> torch.Tensor:
    """``dC * act'(Z)`` in fp32 (the derivatives of ``epilogue.apply_activation``), by torch's own
    backward ops: the same values as torch's (leaky_relu's slope at Z = 0 too), and Z stays in
    the graph of a double backward (its derivative there is zero, which a ``torch.where`` on
    ``Z > 0`` would cut off: a gradient of the bias "not used in the graph")."""
    dc, z = dc.float(), z.float()
    if activation == "relu":
        return torch.ops.aten.threshold_backward(dc, z, 0.0)
    if activation == "leaky_relu":
        return torch.ops.aten.leaky_relu_backward(dc, z, LEAKY_RELU_SLOPE, False)
    if activation == "gelu":
        return torch.ops.aten.gelu_backward(dc, z)
    return dc


def matmul_grads(product: Callable, a, b, bias, activation, dc, needs_grad) -> tuple:
    """``(dA, dB, dbias)`` (None where ``needs_grad`` says no) of ``act(a @ b + bias)``.
    ``product(x, y, bias)`` is the forward kernel's launch, without activation."""
    dz = dc
    if activation is not None:
        dz = activation_grad(dc, product(a, b, bias), activation).to(a.dtype)
    da = product(dz, b.t(), None) if needs_grad[0] else None
    db = product(a.t(), dz, None) if needs_grad[1] else None
    dbias = dz.float().sum(0).to(bias.dtype) if bias is not None and needs_grad[2] else None
    return da, db, dbias
