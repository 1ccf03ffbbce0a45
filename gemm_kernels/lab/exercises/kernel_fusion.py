"""Checks for notebook 04 (kernel fusion): the bytes an unfused activation pass costs, the
"spot the difference" leaky_relu variant, and an epilogue function written in Triton (tried where
its math overflows too, and compiled for sm_90: see ``_kernel_checks``).

Also holds the small elementwise harness the notebook and the checks use to run a
``@triton.jit`` activation on a vector: :func:`apply_elementwise`.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from ... import runtime
from . import _kernel_checks as kc
from ._core import Hints, call, fmt, unseen_cases

# ----------------------------------------------------------------------------- the harness
_ELEMENTWISE_BLOCK = 1024


@triton.jit
def _elementwise_kernel(x_ptr, y_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    """y = FN(x) on fp32, one block of BLOCK elements per program (FN is a @triton.jit function)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, FN(x).to(y_ptr.dtype.element_ty), mask=mask)


def apply_elementwise(fn, x: torch.Tensor) -> torch.Tensor:
    """Run the ``@triton.jit`` function ``fn(x) -> y`` on every element of ``x`` (any shape)."""
    flat = x.contiguous().reshape(-1)
    out = torch.empty_like(flat)
    n = flat.numel()
    if n:
        _elementwise_kernel[(triton.cdiv(n, _ELEMENTWISE_BLOCK),)](flat, out, n, FN=fn, BLOCK=_ELEMENTWISE_BLOCK)
    return out.reshape(x.shape)


# ----------------------------------------------------------------------------- exercise 1
# (M, N, bytes per element): a square fp16 GEMM, a fp32 one, a thin one, a 1x1
BYTES_CASES = [(4096, 4096, 2), (8192, 1024, 2), (1000, 3000, 4), (1, 1, 2)]


@kc.plain_exercise("activation_pass_bytes", hints=Hints(
    nudge="a separate activation kernel starts after the GEMM has written C: what must it move between DRAM and "
          "the GPU?",
    approach="it reads every element of C once and writes every result once; count elements, then bytes",
    solution="return 2 * M * N * bytes_per_element"))
def check_activation_pass_bytes(activation_pass_bytes):
    problems = _bytes_problems(activation_pass_bytes, BYTES_CASES)
    return problems or _bytes_problems(activation_pass_bytes, unseen_cases(
        lambda rng: (rng.randint(1, 16384), rng.randint(1, 16384), rng.choice([1, 2, 4, 8]))))


def _bytes_problems(activation_pass_bytes, cases) -> list[str]:
    problems = []
    for M, N, nbytes in cases:
        got = call(activation_pass_bytes, M, N, nbytes)
        one_way = M * N * nbytes
        expected = 2 * one_way
        case = f"M={M}, N={N}, {nbytes}-byte elements"
        try:
            got_num = float(got)
        except (TypeError, ValueError):
            problems.append(f"{case}: expected a number of bytes, got {got!r}")
            continue
        if got_num != expected:
            why = ""
            if got_num == one_way:
                why = " (that is one direction only: the pass reads C and writes it back)"
            elif got_num == 2 * M * N:
                why = " (that counts elements: multiply by the bytes per element)"
            problems.append(f"{case}: expected {expected:,} bytes (read C {one_way:,} + write C {one_way:,}), "
                            f"got {got_num:,.0f}{why}")
    return problems


# ----------------------------------------------------------------------------- exercise 2
@triton.jit
def leaky_relu_variant(x):
    """A leaky_relu as one often finds it in study notes.  Compare it with apply_activation."""
    x = x + 1
    return tl.where(x >= 0, x, 0.01 * x)


#: inputs around the interesting points: 0, -1, and far on either side
VARIANT_POINTS = [-3.0, -1.5, -1.0, -0.75, -0.5, -0.01, 0.0, 0.01, 0.5, 2.0]


@kc.plain_exercise("variant_reference", hints=Hints(
    nudge="read leaky_relu_variant line by line: what does the select see, and what does it return for a positive "
          "input?",
    approach="the variant shifts x by 1 before the select and never shifts it back: the select compares and "
             "returns the shifted value; write that in torch",
    solution="y = x + 1; return torch.where(y >= 0, y, 0.01 * y)"))
def check_variant_reference(variant_reference):
    problems = _variant_problems(variant_reference, [VARIANT_POINTS])
    # then one set of points drawn afresh (one launch, as many points as listed, anywhere in [-4, 4])
    return problems or _variant_problems(variant_reference, unseen_cases(
        lambda rng: sorted(round(rng.uniform(-4, 4), 3) for _ in VARIANT_POINTS), count=1))


def _variant_problems(variant_reference, point_sets) -> list[str]:
    for points in point_sets:
        problems = _variant_set_problems(variant_reference, points)
        if problems:
            return problems
    return []


def _variant_set_problems(variant_reference, points) -> list[str]:
    x = torch.tensor(points, dtype=torch.float32, device=runtime.DEVICE)
    expected = apply_elementwise(leaky_relu_variant, x).double().cpu()
    got = call(variant_reference, x.clone())
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        return [f"expected a tensor of shape {list(x.shape)} (one output per input), got {shape}"]
    got = got.detach().double().cpu()
    problems = []
    for xi, e, g in zip(points, expected.tolist(), got.tolist()):
        if not abs(g - e) <= 1e-5 + 1e-5 * abs(e):
            problems.append(f"x={fmt(xi)}: leaky_relu_variant gives {fmt(e)}, yours gives {fmt(g)}")
    return problems


# ----------------------------------------------------------------------------- exercise 3
GELU_RANGE = (-8.0, 8.0, 1601)
#: beyond the range: where exp(2u) overflows fp32 (|x| from about 10.4), x**3 too (|x| > 7e12)
GELU_LARGE = [s * v for v in (10.4, 10.5, 12.0, 20.0, 50.0, 100.0, 1e4, 1e30) for s in (1.0, -1.0)]


def _gelu_problems(gelu_tanh) -> list[str]:
    x = torch.cat([torch.linspace(*GELU_RANGE, dtype=torch.float32),
                   torch.tensor(GELU_LARGE, dtype=torch.float32)]).to(runtime.DEVICE)
    with np.errstate(all="ignore"):  # the interpreter's numpy overflows where the math does: no warnings
        got = call(apply_elementwise, gelu_tanh, x, what="a kernel calling gelu_tanh").double().cpu()
    expected = torch.nn.functional.gelu(x.double().cpu(), approximate="tanh")
    err = (got - expected).abs()
    bad = ~(err <= 1e-5 + 1e-5 * expected.abs())  # NaN counts as bad
    if not bad.any():
        return []
    xs = x.cpu()
    lines = []
    n = GELU_RANGE[2]
    for part, name in ((slice(0, n), f"points in [{GELU_RANGE[0]:g}, {GELU_RANGE[1]:g}]"),
                       (slice(n, None), "large points (|x| from 10.4 to 1e30)")):
        b = bad[part]
        if not b.any():
            continue
        e, g, xv = expected[part], got[part], xs[part]
        worst = int(torch.nan_to_num(err[part], nan=float("inf")).argmax())
        lines.append(f"{int(b.sum())} of {len(b)} {name} are off by more than 1e-5; "
                     f"worst at x={fmt(float(xv[worst]))}: expected {fmt(float(e[worst]))}, got {fmt(float(g[worst]))}")
    lines += [f"diagnosis: {d}" for d in _overflow_diagnosis(xs, expected, got, bad)]
    return lines


def _overflow_diagnosis(xs, expected, got, bad) -> list[str]:
    """NaN or inf where the reference is finite, only at large |x|: an exp that overflows."""
    broken = bad & ~torch.isfinite(got) & torch.isfinite(expected)
    if not broken.any() or bool((bad & ~broken).any()):
        return []
    first = float(xs[broken].abs().min())
    kinds = sorted({"NaN" if torch.isnan(v) else "inf" for v in got[broken]})
    return [f"your gelu_tanh returns {' and '.join(kinds)} from |x| = {fmt(first)} on, where the answer is finite: an "
            "exp overflows fp32 there (exp(2u) passes 3.4e38 once u > 44, at x near 10.4) and inf / inf is NaN; "
            "tl.sigmoid saturates instead (tanh(u) = 2 * sigmoid(2u) - 1), or clamp u before the exp"]


@kc.kernel_exercise("gelu_tanh", kind="jit", gpu_case=_gelu_problems, hints=Hints(
    nudge="compare with torch.nn.functional.gelu(x, approximate='tanh'): which formula does its documentation give?",
    approach="0.5 * x * (1 + tanh(u)) with u = sqrt(2/pi) * (x + 0.044715 * x**3); Triton's tl has no tanh here, "
             "but tanh(u) can be written with tl.sigmoid",
    solution="u = 0.7978845608028654 * (x + 0.044715 * x * x * x); return 0.5 * x * (1 + (2 * tl.sigmoid(2 * u) - 1))"))
def check_gelu_tanh(gelu_tanh):
    return _gelu_problems(gelu_tanh)
