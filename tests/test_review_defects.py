"""Defects an adversarial review found in GroupedMatmulPlan, grouped_mm's autograd and the lazy
negation handling of every launcher.  Each test failed before its fix.  Runs in the interpreter
on a CPU and compiled on a GPU; results are compared with float64 references."""

import gc
import weakref

import numpy as np
import pytest
import torch

from gemm_kernels import (DEVICE, GroupedMatmulPlan, grouped_matmul, grouped_matmul_ref, grouped_mm, grouped_mm_ref,
                          matmul, matmul_persistent, matmul_ref, matmul_tma, runtime)
from gemm_kernels.kernels import moe, moe_wgrad
from gemm_kernels.kernels.checks import resolve_lazy_views
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.lab.moe_training import grouped_mm_torch
from gemm_kernels.testing import assert_close


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


def _negated(t):
    """A view with torch's lazy negation bit: its memory holds ``-values``."""
    view = torch._neg_view(t)
    assert view.is_neg()
    return view


def _group(seed=0, dtype=torch.float16):
    """Two problems, square A_0 (so ``.t()`` keeps its shape), row-major everything."""
    shapes = [(16, 24, 16), (5, 8, 16)]
    return ([_randn(M, K, seed=seed + i, dtype=dtype) for i, (M, _, K) in enumerate(shapes)],
            [_randn(K, N, seed=seed + 10 + i, dtype=dtype) for i, (_, N, K) in enumerate(shapes)])


def _check_plan_outputs(outs, group_a, group_b):
    for c, ref in zip(outs, grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)):
        assert_close(c, ref, group_a[0].dtype)


# ---------------------------------------------------------------- 1. a plan keeps its outputs alive
def test_plan_keeps_its_outputs_when_the_caller_replaces_them():
    """``outs[0] = outs[0].relu()`` dropped the plan's only reference to C_0: the next run wrote
    into freed memory ("malloc(): unaligned tcache chunk", or a segfault)."""
    group_a, group_b = _group()
    plan = GroupedMatmulPlan(group_a, group_b)
    outs = plan.run()
    first = weakref.ref(outs[0])
    outs[0] = outs[0].relu()
    del outs[1]
    gc.collect()
    assert first() is not None, "the plan must hold its own outputs"
    outs = plan.run()
    assert outs is plan.outputs and len(outs) == 2 and outs[0] is first()
    _check_plan_outputs(outs, group_a, group_b)


def test_plan_refuses_an_output_whose_storage_the_caller_replaced():
    """The plan writes to the address it was built with: an output moved by ``.data =`` is named."""
    group_a, group_b = _group()
    plan = GroupedMatmulPlan(group_a, group_b)
    outs = plan.run()
    outs[1].data = torch.zeros(5, 8, dtype=torch.float16, device=DEVICE)
    with pytest.raises(ValueError, match=r"^outputs\[1\] changed since this GroupedMatmulPlan was built "
                                         r"\(address; .*writes its results to"):
        plan.run()


# ---------------------------------------------------------------- 2. `.data =` on the same storage
@pytest.mark.parametrize("change,fields", [
    (lambda t: setattr(t, "data", t.data.t()), "strides"),
    (lambda t: setattr(t, "data", t.data.view(32, 8)), "shape, strides"),
    (lambda t: setattr(t, "data", t.data.view(-1)[16:].view(15, 16)), "address, shape, storage offset"),
    (lambda t: setattr(t, "data", t.data.view(torch.bfloat16)), "dtype"),
    (lambda t: t.as_strided_((16, 16), (1, 16)), "strides"),
], ids=["transpose", "view", "offset", "dtype", "as_strided_"])
@pytest.mark.parametrize("which", ["group_a", "group_b"])
def test_plan_refuses_a_same_storage_layout_change(change, fields, which):
    """``a.data = a.data.t()`` keeps the address and the version counter: the plan silently read
    the old layout (relative error ~1.4)."""
    group_a, group_b = _group()
    if which == "group_b":  # B_0 square as well
        group_a[0], group_b[0] = _randn(24, 16, seed=1, dtype=torch.float16), _randn(16, 16, seed=2,
                                                                                     dtype=torch.float16)
    plan = GroupedMatmulPlan(group_a, group_b)
    plan.run()
    change((group_a if which == "group_a" else group_b)[0])
    with pytest.raises(ValueError, match=rf"^{which}\[0\] changed since this GroupedMatmulPlan was built "
                                         rf"\({fields}; .*Build a new plan"):
        plan.run()


def test_plan_still_reruns_after_in_place_value_changes():
    group_a, group_b = _group()
    plan = GroupedMatmulPlan(group_a, group_b)
    plan.run()
    group_a[0].mul_(-2)
    group_b[1].add_(1)
    _check_plan_outputs(plan.run(), group_a, group_b)


# ---------------------------------------------------------------- 3. negated x and the weight gradient
@pytest.mark.parametrize("w_transposed", [False, True], ids=["w_EKN", "w_view_of_ENK"])
def test_grouped_mm_weight_gradient_of_a_negated_x(w_transposed):
    """The backward saved the caller's x, a negated view, and the weight-gradient kernel read its
    memory: dw came out with the wrong sign (dx and the forward were right)."""
    T, K, N = 30, 16, 24
    base = _randn(T, K, seed=1).requires_grad_()
    x = _negated(base)
    w = (_randn(3, N, K, seed=2).transpose(1, 2) if w_transposed else _randn(3, K, N, seed=2)).requires_grad_()
    offs = torch.tensor([7, 7, 26], dtype=torch.int32, device=DEVICE)
    dy = _randn(T, N, seed=3)
    grouped_mm(x, w, offs).backward(dy)
    x64, w64 = (-base).detach().double().requires_grad_(), w.detach().double().requires_grad_()
    grouped_mm_torch(x64, w64, offs).backward(dy.double())
    assert_close(w.grad.flatten(0, 1), w64.grad.flatten(0, 1), torch.float32, what="dw")
    assert_close(base.grad, -x64.grad, torch.float32, what="dx")


@pytest.mark.parametrize("negated", ["x", "dy"])
def test_grouped_mm_wgrad_reads_a_negated_x_or_dy_by_its_values(negated):
    x, dy = _randn(20, 16, seed=4), _randn(20, 8, seed=5)
    x, dy = (_negated(x), dy) if negated == "x" else (x, _negated(dy))
    offs = torch.tensor([6, 20], dtype=torch.int32, device=DEVICE)
    dw = moe.grouped_mm_wgrad(x, dy, offs, tma=False)
    ref = moe_wgrad.grouped_mm_wgrad_ref(x.resolve_neg(), dy.resolve_neg(), offs)
    assert_close(dw.flatten(0, 1), ref.flatten(0, 1), torch.float32)


@pytest.mark.parametrize("fn", [matmul, matmul_tma], ids=["matmul", "matmul_tma"])
def test_single_gemm_gradients_of_negated_views(fn):
    """matmul's and matmul_tma's backward products go through their launchers, which resolve the
    negation: checked here for a negated a and a negated, row-padded b."""
    a_base = _randn(24, 16, seed=6).requires_grad_()
    b_base = tma_aligned(_randn(16, 5, seed=7)).requires_grad_()  # rows of 5 floats padded to 8
    a, b = _negated(a_base), _negated(b_base)
    dc = _randn(24, 5, seed=8)
    fn(a, b, activation="gelu").backward(dc)
    a64, b64 = (-a_base).detach().double().requires_grad_(), (-b_base).detach().double().requires_grad_()
    matmul_ref(a64, b64, activation="gelu", out_dtype=torch.float64).backward(dc.double())
    assert_close(a_base.grad, -a64.grad, torch.float32, what="da")
    assert_close(b_base.grad, -b64.grad, torch.float32, what="db")


# ---------------------------------------------------------------- 4, 5. second-order gradients
def _penalty(grads):
    return sum((g.double() ** 2).sum() for g in grads)


def _second_order(f, inputs):
    """Gradients of ``f(inputs).sum of squares + penalty(first gradients)`` (create_graph=True)."""
    out = f(*inputs)
    first = torch.autograd.grad((out.double() ** 2).sum(), inputs, create_graph=True)
    return torch.autograd.grad((out.double() ** 2).sum() + _penalty(first), inputs)


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("w_transposed", [False, True], ids=["w_EKN", "w_view_of_ENK"])
def test_grouped_mm_gradient_penalty_matches_float64(w_transposed):
    """The backward called the kernels directly: under create_graph=True its gradients had no
    graph, so a gradient penalty's second-order terms were dropped (or the call failed)."""
    x = _randn(26, 8, seed=10)
    w = _randn(3, 12, 8, seed=11).transpose(1, 2) if w_transposed else _randn(3, 8, 12, seed=11)
    offs = torch.tensor([5, 5, 21], dtype=torch.int32, device=DEVICE)  # an idle expert, 5 rows past offs[-1]
    ours = _second_order(lambda x, w: grouped_mm(x, w, offs), _leaves(x, w))
    ref = _second_order(lambda x, w: grouped_mm_torch(x, w, offs),
                        _leaves(x.double(), w.double()))
    for name, g, r in zip(("x", "w"), ours, ref):
        assert_close(g.flatten(0, -2), r.flatten(0, -2), torch.float32, what=f"d{name}")


def test_grouped_mm_wgrad_is_differentiable():
    x, dy = _leaves(_randn(20, 8, seed=12), _randn(20, 6, seed=13))
    offs = torch.tensor([9, 17], dtype=torch.int32, device=DEVICE)
    g = _randn(2, 8, 6, seed=14)
    moe.grouped_mm_wgrad(x, dy, offs).backward(g)
    x64, dy64 = _leaves(x.double(), dy.double())
    moe_wgrad.grouped_mm_wgrad_ref(x64, dy64, offs).backward(g.double())
    assert_close(x.grad, x64.grad, torch.float32, what="dx")
    assert_close(dy.grad, dy64.grad, torch.float32, what="ddy")


@pytest.mark.parametrize("activation,with_bias", [(None, False), ("relu", True), ("gelu", True),
                                                  ("leaky_relu", False)])
@pytest.mark.parametrize("fn", [matmul, matmul_tma], ids=["matmul", "matmul_tma"])
def test_single_gemm_gradient_penalty_matches_float64(fn, activation, with_bias):
    """matmul's backward was already differentiable (its products are the custom op); matmul_tma's
    launched the kernel directly and refused with the false "forward product only (no backward)"."""
    a, b = _randn(24, 16, seed=15), _randn(16, 20, seed=16)
    bias = _randn(20, seed=17) if with_bias else None
    inputs = [a, b] + ([bias] if with_bias else [])

    def ours(a, b, bias=None):
        return fn(a, b, activation=activation, bias=bias)

    def ref(a, b, bias=None):
        return matmul_ref(a, b, activation=activation, bias=bias, out_dtype=torch.float64)

    got = _second_order(ours, _leaves(*inputs))
    want = _second_order(ref, _leaves(*(t.double() for t in inputs)))
    for name, g, r in zip(("a", "b", "bias"), got, want):
        assert_close(g, r, torch.float32, what=f"d{name}")


@pytest.mark.filterwarnings("ignore:Input #.*double precision")
@pytest.mark.parametrize("fn", ["matmul_tma", "grouped_mm"])
def test_gradgradcheck_fp32(fn):
    """torch.autograd.gradgradcheck in fp32 (no fp64 kernels; the interpreter's fp32 dot is exact)."""
    if runtime.on_gpu():
        pytest.skip("fp32 runs TF32 tensor cores on a GPU: finite differences are too coarse there")
    if fn == "matmul_tma":
        f, inputs = (lambda a, b: matmul_tma(a, b)), _leaves(_randn(6, 4, seed=18), _randn(4, 8, seed=19))
    else:
        offs = torch.tensor([2, 2, 7], dtype=torch.int32)
        f, inputs = (lambda x, w: grouped_mm(x, w, offs)), _leaves(_randn(9, 4, seed=20), _randn(3, 4, 8, seed=21))
    assert torch.autograd.gradgradcheck(f, inputs, eps=1e-2, atol=1e-2, rtol=1e-2, fast_mode=True)


# ---------------------------------------------------------------- 6. grouped_mm's argument types
@pytest.mark.parametrize("bad", [None, [[1.0, 2.0]], np.ones((2, 2), dtype=np.float32)], ids=["None", "list", "numpy"])
@pytest.mark.parametrize("arg", ["x", "w", "offs"])
@pytest.mark.parametrize("on_gpu", [False, True], ids=["host_checks", "gpu_fast_path"])
def test_grouped_mm_names_an_argument_that_is_not_a_tensor(arg, bad, on_gpu, monkeypatch):
    """x or w as a list, numpy array or None gave an AttributeError ('list' object has no
    attribute 'is_neg'); so did offs on a GPU (the kept-launch look-up read offs.dtype)."""
    if on_gpu:  # the GPU path's order of checks, without a GPU: the TypeError comes first
        monkeypatch.setattr(runtime, "on_gpu", lambda: True)
    args = {"x": _randn(4, 2), "w": _randn(2, 2, 3), "offs": torch.tensor([1, 4], dtype=torch.int32, device=DEVICE)}
    args[arg] = bad
    with pytest.raises(TypeError, match=rf"^{arg} must be a torch.Tensor.*got {type(bad).__name__}"):
        grouped_mm(args["x"], args["w"], args["offs"])
    args["w"] = args["w"].requires_grad_() if isinstance(args["w"], torch.Tensor) else args["w"]
    with pytest.raises(TypeError, match=rf"^{arg} must be a torch.Tensor"):
        grouped_mm(args["x"], args["w"], args["offs"])


# ---------------------------------------------------------------- 7. negated views that TMA can read
def _padded_views(rows, cols, seed):
    """Row-major with rows padded to 16 bytes, and column-major (a padded matrix's transpose)."""
    return {"padded_row": tma_aligned(_randn(rows, cols, seed=seed)),
            "padded_col": tma_aligned(_randn(cols, rows, seed=seed)).t()}


@pytest.mark.parametrize("layout", ["padded_row", "padded_col"])
@pytest.mark.parametrize("fn", [matmul_tma, matmul_persistent, matmul], ids=["matmul_tma", "matmul_persistent",
                                                                             "matmul"])
def test_negated_tma_readable_views_give_the_right_answer(fn, layout):
    """The negation was resolved into a contiguous copy, its rows no longer 16-byte aligned, and
    matmul_tma refused b quoting the copy's strides (5, 1), not the caller's (8, 1)."""
    a = _negated(_padded_views(7, 12, 1)[layout])
    b = _negated(_padded_views(12, 5, 2)[layout])
    ref = matmul_ref(a.resolve_neg(), b.resolve_neg(), out_dtype=torch.float64)
    assert_close(fn(a, b), ref, torch.float32)


@pytest.mark.parametrize("negated", ["x", "w", "both"])
def test_grouped_mm_takes_negated_tma_readable_views(negated):
    x = tma_aligned(_randn(12, 5, seed=3))  # K = 5 floats: rows padded to 8
    w = _randn(2, 5, 16, seed=4)[:, :, :6]  # N = 6 floats in rows of 16: TMA-readable
    if negated in ("x", "both"):
        x = _negated(x)
    if negated in ("w", "both"):
        w = _negated(w)
    offs = torch.tensor([5, 12], dtype=torch.int32, device=DEVICE)
    ref = grouped_mm_ref(x.resolve_neg(), w.resolve_neg(), offs, out_dtype=torch.float64)
    assert_close(grouped_mm(x, w, offs, tma=runtime.supports_tma() or None), ref, torch.float32)


def test_grouped_matmul_takes_negated_tma_readable_views():
    if not runtime.supports_tma():
        pytest.skip("TMA needs sm_90+")
    group_a = [_negated(tma_aligned(_randn(7, 5, seed=5))), tma_aligned(_randn(3, 5, seed=6))]
    group_b = [_negated(tma_aligned(_randn(5, 6, seed=7))), _randn(5, 8, seed=8)]
    for c, ref in zip(grouped_matmul(group_a, group_b, tma=True),
                      grouped_matmul_ref([t.resolve_neg() for t in group_a], [t.resolve_neg() for t in group_b],
                                         out_dtype=torch.float64)):
        assert_close(c, ref, torch.float32)


@pytest.mark.parametrize("make,dense", [
    (lambda: tma_aligned(torch.randn(6, 5)), False),                   # padded rows
    (lambda: tma_aligned(torch.randn(5, 6)).t(), False),               # column-major, padded
    (lambda: torch.randn(4, 6, 10)[:, :, :7].transpose(1, 2), False),  # 3-D, sliced and transposed
    (lambda: torch.randn(9, 8)[::2], False),                           # every other row
    (lambda: torch.randn(6, 3).t(), True),                             # dense, not contiguous
], ids=["padded_row", "padded_col", "3d", "strided_rows", "dense_t"])
def test_resolved_copies_keep_the_layout(make, dense):
    """A dense view keeps its strides; any other is copied dense in its dimension order with
    16-byte-aligned rows: a layout TMA could read stays readable."""
    view = _negated(make().to(DEVICE))
    (copy,) = resolve_lazy_views(view)
    assert not copy.is_neg() and torch.equal(copy, view.resolve_neg())
    if dense:
        assert copy.stride() == view.stride()
        return
    unit = min(range(view.dim()), key=view.stride)
    assert copy.stride(unit) == 1
    assert sorted(range(view.dim()), key=copy.stride) == sorted(range(view.dim()), key=view.stride)
    assert all(s * copy.element_size() % 16 == 0 for d, s in enumerate(copy.stride()) if d != unit)


def test_resolving_a_plain_tensor_copies_nothing():
    t = _randn(4, 4)
    assert resolve_lazy_views(t, None, 3) == (t, None, 3) and resolve_lazy_views(t)[0] is t
