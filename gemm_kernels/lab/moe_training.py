"""One MoE layer, trainable, for notebook 09 and the tests: route -> gather -> grouped_mm ->
activation -> grouped_mm -> scatter, with the expert GEMMs either ``gemm_kernels.grouped_mm`` or
a plain-torch loop (the reference), so the two can be trained side by side.

Every step is a torch op with a static shape (token counts per expert come from a one-hot sum,
not ``bincount``), so ``torch.compile(fullgraph=True)`` traces the layer in one graph.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import runtime
from ..kernels.moe import grouped_mm


def grouped_mm_torch(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The expert GEMMs as a loop of ``torch.mm`` (differentiable; reads offs on the host).
    Rows past ``offs[-1]`` are zeros, as in ``grouped_mm``."""
    outs, start = [], 0
    for e, end in enumerate(offs.tolist()):
        outs.append(x[start:end] @ w[e])
        start = end
    outs.append(x.new_zeros((x.shape[0] - start, w.shape[2])))
    return torch.cat(outs)


def route(x: torch.Tensor, router: torch.Tensor, top_k: int):
    """Top-k routing: ``(rows_to_tokens, offs, gates)``.  Routed row ``r`` is token
    ``rows_to_tokens[r]``, rows sorted by expert (``offs``: int32 cumulative ends), ``gates[r]``
    its softmax weight."""
    probs = torch.softmax(x.float() @ router.float(), dim=-1)
    gate, expert = probs.topk(top_k, dim=-1)
    expert = expert.flatten()
    order = torch.argsort(expert, stable=True)
    counts = torch.nn.functional.one_hot(expert, router.shape[1]).sum(0)  # static shape: no bincount
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return order // top_k, offs, gate.flatten()[order]


def moe_layer(x, router, w_up, w_down, top_k: int, expert_mm: Callable = grouped_mm):
    """``sum_k gate_k * down_e(gelu(up_e(x)))`` over each token's top_k experts e."""
    rows_to_tokens, offs, gates = route(x, router, top_k)
    hidden = expert_mm(x[rows_to_tokens], w_up, offs)           # gather, then [T*k, H] @ [E, H, F]
    hidden = torch.nn.functional.gelu(hidden)
    out = expert_mm(hidden, w_down, offs) * gates[:, None].to(x.dtype)  # [T*k, F] @ [E, F, H]
    return torch.zeros_like(x).index_add_(0, rows_to_tokens, out)  # scatter back to the tokens


def make_layer(tokens: int, hidden: int, ffn: int, experts: int, dtype=torch.float32, seed: int = 0):
    """Random inputs and parameters of one layer (weights scaled so activations stay O(1))."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(runtime.DEVICE, dtype)

    x = randn(tokens, hidden)
    target = randn(tokens, hidden)
    params = {"router": randn(hidden, experts, scale=hidden ** -0.5),
              "w_up": randn(experts, hidden, ffn, scale=hidden ** -0.5),
              "w_down": randn(experts, ffn, hidden, scale=ffn ** -0.5)}
    return x, target, params


def train(x, target, params: dict, top_k: int, steps: int, lr: float = 0.5,
          expert_mm: Callable = grouped_mm, layer: Callable = moe_layer) -> list[float]:
    """Plain SGD on the mean squared error of the layer's output; returns the loss per step.
    The router is kept fixed (its top-k choice has no gradient), the expert weights learn."""
    params = {k: v.detach().clone().requires_grad_(k != "router") for k, v in params.items()}
    losses = []
    for _ in range(steps):
        out = layer(x, params["router"], params["w_up"], params["w_down"], top_k, expert_mm)
        loss = torch.nn.functional.mse_loss(out.float(), target.float())
        loss.backward()
        with torch.no_grad():
            for name in ("w_up", "w_down"):
                params[name] -= lr * params[name].grad
                params[name].grad = None
        losses.append(float(loss.detach()))
    return losses
