"""Property-based fuzzing (Hypothesis) of the package's public entry points (``gk._PUBLIC``).

Every call gets shapes (0, 1, ragged), layouts (transposed, sliced, large strides, lazily negated,
conjugated, expanded, sparse; offs negated or strided; spans past 2^31 elements), dtypes (e4m3 x
e5m2 too), options in their odd spellings (``8.0`` for 8, ``True`` for 1, ``"RELU"``, float
configs; a valid call then the same one with an invalid option), scales zero, negative, NaN, inf
or [1]-shaped, requires-grad inputs and non-finite values, and must either

* return the float64 reference's answer (NaN where the reference has NaN, the same infinities,
  the finite rest within the dtype's tolerance; an output of an input that requires grad keeps
  its graph), or
* raise a **clear error**: a ValueError, TypeError or RuntimeError (not NotImplementedError,
  which is torch's "no kernel for this dtype") whose message names the argument at fault: one of
  the call's argument names (or a dimension of them: M, N, K, T, E), as a word used as a name
  (``a is``, ``a must``, ``scale_a [``, ``offs[0]``...: not the article "a"); or a RuntimeError
  "<entry point> needs ..." for what this machine cannot run (``matmul_ws`` off Hopper).  Inputs that no
  launcher may take (sparse, complex, unsupported or mixed dtypes, mismatched shapes, bad
  options) must raise one.

The environment's parsers and the readers of a user's files (progress, tuning cache, results,
student copies) get random, truncated, non-UTF-8, deeply nested and hand-edited content: a value
or an error naming the variable or file, and no file's data lost.

``make test`` runs the ``ci`` profile (few examples per entry point, derandomized: the same
inputs every run, about a minute of interpreter time on 2 cores); ``make fuzz`` the ``long``
profile (``GEMM_KERNELS_FUZZ=long``: many more, random; ``GEMM_KERNELS_FUZZ_EXAMPLES=N`` sets
the count).  The inputs run and refused per entry point are printed (``-s``) and appended to
``$GEMM_KERNELS_FUZZ_REPORT`` when set (``make fuzz`` prints that file).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import re
import shutil
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import triton

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gemm_kernels as gk  # noqa: E402
from gemm_kernels import DEVICE, _env, results, runtime  # noqa: E402
from gemm_kernels.kernels import checks, fp8, launches, tuning_cache  # noqa: E402
from gemm_kernels.lab import exam, student  # noqa: E402
from gemm_kernels.kernels.epilogue import ACTIVATIONS  # noqa: E402
from gemm_kernels.testing import TOLERANCES, rel_err  # noqa: E402

lab_progress = importlib.import_module("gemm_kernels.lab.progress")  # the package's ``progress`` is a function

PROFILE = os.environ.get("GEMM_KERNELS_FUZZ", "ci").strip().lower() or "ci"
_common = dict(deadline=None, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=12, derandomize=True, **_common)
settings.register_profile("long", max_examples=int(os.environ.get("GEMM_KERNELS_FUZZ_EXAMPLES", 300)), **_common)
if PROFILE not in ("ci", "long"):
    raise ValueError(f"GEMM_KERNELS_FUZZ={PROFILE!r}: use ci (the default) or long")
settings.load_profile(PROFILE)


def examples(ci: int):
    """A test's example count: ``ci`` in the ci profile, the profile's count in ``long``."""
    return settings(max_examples=ci) if PROFILE == "ci" else settings()


#: inputs run per entry point, and of those refused with a clear error (printed at the end with -s)
RAN: Counter = Counter()
REFUSED: Counter = Counter()


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    line = (f"fuzz ({PROFILE}): {sum(RAN.values())} inputs ({sum(REFUSED.values())} refused): "
            + ", ".join(f"{k} {v} ({REFUSED[k]} refused)" for k, v in sorted(RAN.items())))
    print("\n" + line)
    report = os.environ.get("GEMM_KERNELS_FUZZ_REPORT")
    if report:  # one line per worker (make fuzz prints them)
        with open(report, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# ----------------------------------------------------------------------------- what a clear error is
CLEAR_TYPES = (ValueError, TypeError, RuntimeError)


def _names_pattern(name: str) -> str:
    if len(name) > 1:
        return rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9])"
    # one letter (a, b, x, w, M, K ...): used as a name, not as the article
    return (rf"(?<![A-Za-z0-9_.]){name}(?=\s+(?:is|must|has|spans|requires|and|but|holds|would|needs)\b|\s*[\[(:.,=']"
            rf"|\s*$|\s+\d|\s+=)")


def assert_clear(exc: BaseException, names, context: str) -> None:
    """``exc`` is a clear error (module docstring) naming one of ``names``."""
    assert isinstance(exc, CLEAR_TYPES) and not isinstance(exc, NotImplementedError), (
        f"{context}: {type(exc).__name__} is not a clear error: {exc}")
    message = str(exc)
    assert any(re.search(_names_pattern(n), message) for n in names), (
        f"{context}: {type(exc).__name__} names none of {sorted(names)}: {message}")


def call(fn, args: dict, names, context: str, *, must_fail: str | None = None, label: str | None = None):
    """``fn(**args)``: its result, or None after checking the error is clear.  ``must_fail``: why
    this call must raise (then returning is a failure); ``label``: the count it adds to (fn's name)."""
    try:
        out = fn(**args)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001  (judged by assert_clear)
        what = getattr(fn, "__name__", str(fn))
        if not (type(exc) is RuntimeError and re.match(rf"{what} needs ", str(exc))):  # this machine cannot run it
            assert_clear(exc, names, context)
        REFUSED[label or what] += 1
        if os.environ.get("GEMM_KERNELS_FUZZ_SHOW"):
            print(f"refused: {context}: {type(exc).__name__}: {exc}")
        return None
    assert must_fail is None, f"{context}: accepted, but it should be refused ({must_fail})"
    return out


def assert_matches(out: torch.Tensor, ref: torch.Tensor, dtype, context: str, scale: torch.Tensor | None = None) -> None:
    """NaN where the reference has NaN, its infinities, the finite rest within ``dtype``'s tolerance.
    ``scale``: the values the error is relative to where not ``ref`` (an activation's input: the
    epilogue's GELU is exact within 3e-7 |x|, which near GELU's zeros is more than |GELU(x)|)."""
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    assert out64.shape == ref64.shape, f"{context}: shape {tuple(out64.shape)} != {tuple(ref64.shape)}"
    assert torch.equal(out64.isnan(), ref64.isnan()), (
        f"{context}: NaN at {(out64.isnan() != ref64.isnan()).nonzero()[:4].tolist()} differs from the reference")
    inf = ref64.isinf()
    assert torch.equal(out64[inf], ref64[inf]), f"{context}: infinities differ from the reference"
    finite = torch.isfinite(ref64)
    assert torch.isfinite(out64[finite]).all(), f"{context}: non-finite where the reference is finite"
    if finite.any():
        err = rel_err(out64[finite].to(out.dtype), ref64[finite])
        if scale is not None:  # relative to the larger of the two
            ratio = ref64[finite].norm() / scale.detach().double().cpu()[finite].norm().clamp_min(1e-300)
            err *= min(1.0, float(ratio))
        assert err <= TOLERANCES[dtype], f"{context}: relative error {err:.3g} > {TOLERANCES[dtype]}"


# ----------------------------------------------------------------------------- inputs
#: three in four, and one in six (sampled, the common case first: what Hypothesis tries first and shrinks to)
MOSTLY = st.sampled_from([True, True, True, False])
RARELY = st.sampled_from([False] * 5 + [True])
DIMS = st.sampled_from([0, 1, 2, 3, 5, 8, 16, 17, 33])
FLOATS = (torch.float16, torch.bfloat16, torch.float32)
DTYPES = st.sampled_from([*FLOATS] * 4 + [torch.float64, torch.int32, torch.float8_e4m3fn])
LAYOUTS = ("contiguous", "transposed", "sliced", "every_other", "large_stride", "negated", "conjugated", "expanded",
           "sparse", "requires_grad")
LAYOUT = st.sampled_from(LAYOUTS[:5] * 2 + LAYOUTS[5:])
#: layouts every launcher must refuse (complex dtype; no strides)
REFUSED_LAYOUTS = {"conjugated": "a complex tensor", "sparse": "a sparse tensor"}


@st.composite
def values(draw, shape, dtype=None):
    """Logical values: N(0, 1) (per seed), maybe one NaN/inf, as float32 on the CPU."""
    seed = draw(st.integers(0, 2**31 - 1))
    v = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    if v.numel() and draw(RARELY):  # one in six: a non-finite value somewhere
        index = draw(st.integers(0, v.numel() - 1))
        v.view(-1)[index] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    return v


def realise(v: torch.Tensor, dtype, layout: str) -> torch.Tensor:
    """A tensor whose values are ``v`` (in ``dtype``), laid out as ``layout`` asks."""
    t = v.to(dtype)
    if layout == "transposed" and t.dim() >= 2:
        t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "sliced":
        big = torch.zeros([s + 3 for s in t.shape], dtype=dtype)
        index = tuple(slice(2, 2 + s) for s in t.shape)
        big[index] = t
        t = big[index]
    elif layout == "every_other":
        big = torch.zeros([2 * s + 1 for s in t.shape], dtype=dtype)
        index = tuple(slice(1, 1 + 2 * s, 2) for s in t.shape)
        big[index] = t
        t = big[index]
    elif layout == "large_stride" and t.dim() >= 1 and t.numel():
        rows = t.shape[0]
        width = math.prod(t.shape[1:])
        big = torch.zeros(rows * 1031 + width, dtype=dtype)
        strides = [1031] + list(torch.empty(t.shape[1:]).stride())
        view = big.as_strided(t.shape, strides)
        view.copy_(t)
        t = view
    elif layout == "negated":
        if dtype in checks._ONE_BYTE_FLOATS:
            t = torch._neg_view((t.view(torch.uint8) ^ 0x80).view(dtype))
        elif dtype.is_floating_point:
            t = torch._neg_view(-t)  # values t, memory -t
    elif layout == "conjugated":
        t = torch.complex(v, torch.zeros_like(v)).conj()
    elif layout == "expanded" and t.dim() >= 1 and t.shape[0] > 1:
        first = v[:1].to(dtype)
        t = first.expand(t.shape)
    elif layout == "sparse" and t.dim() >= 1 and dtype not in checks._ONE_BYTE_FLOATS:  # torch: no fp8 sparse
        t = t.to_sparse()
    elif layout == "requires_grad" and dtype.is_floating_point and t.element_size() > 1:
        t = t.detach().requires_grad_()
    return t.to(DEVICE) if t.device != DEVICE else t


def logical(t: torch.Tensor) -> torch.Tensor:
    """The values a kernel should read, in float64 (a fresh tensor: no view bits)."""
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_complex():
        t = t.real
    if t.dtype in checks._ONE_BYTE_FLOATS:
        t = checks.resolved_copy(t) if t.is_neg() else t
    return t.detach().resolve_neg().resolve_conj().double()


def refused_reason(**tensors) -> str | None:
    """Why every launcher must refuse these tensors (None when they are plain inputs)."""
    for name, t in tensors.items():
        if t is None:
            continue
        if t.layout != torch.strided:
            return f"{name} is sparse"
        if t.is_complex():
            return f"{name} is complex"
    return None


# ----------------------------------------------------------------------------- single GEMMs
OPTION_VALUES = {
    "order": st.sampled_from(["grouped", "row_major", "grouped", "column_major", None, "GROUPED"]),
    "group_size_m": st.sampled_from([8, 1, 3, 8, 8.0, True, 0, -1, np.int64(4), "8"]),
    "activation": st.sampled_from([None, "relu", "leaky_relu", "gelu", None, "RELU", "tanh", 5]),
    "split_k": st.sampled_from([None, 1, 2, 3, None, 1.0, True, 0, -2]),
    "num_programs": st.sampled_from([None, 1, 3, None, 2.0, True, 0]),
    "batch_invariant": st.sampled_from([False, True, False, 1, "yes"]),
}


def option_valid(name: str, value) -> bool:
    if name == "order":
        return value in ("grouped", "row_major")
    if name == "activation":
        return value in ACTIVATIONS and (value is None or isinstance(value, str))
    if name == "batch_invariant":
        return isinstance(value, bool)
    if value is None and name in ("split_k", "num_programs"):
        return True
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1


#: launcher -> its options (beside a, b and bias)
SINGLE = {
    "matmul": ("order", "group_size_m", "activation"),
    "matmul_persistent": ("order", "group_size_m", "activation", "num_programs"),
    "matmul_tma": ("order", "group_size_m", "activation", "num_programs"),
    "matmul_streamk": ("order", "group_size_m", "activation", "num_programs"),
    "matmul_splitk": ("order", "group_size_m", "activation", "split_k"),
    "matmul_auto": ("activation", "batch_invariant"),
    "matmul_ws": ("activation", "split_k"),
}


VALID_LAYOUT = st.sampled_from(["contiguous", "transposed", "sliced", "every_other", "large_stride"] * 2
                               + ["negated", "expanded", "requires_grad"])
VALID_OPTIONS = {"order": ["grouped", "row_major"], "group_size_m": [8, 1, 3, np.int64(4)],
                 "activation": list(ACTIVATIONS), "split_k": [None, 1, 2, 3], "num_programs": [None, 1, 3],
                 "batch_invariant": [False, True]}


@st.composite
def single_gemm_calls(draw, launcher: str):
    """Three in four calls valid in every part (the product is checked); the rest with anything."""
    valid = draw(MOSTLY)
    M, N, K = draw(DIMS), draw(DIMS), draw(DIMS)
    K_b = K if valid or draw(MOSTLY) else draw(DIMS.filter(lambda k: k != K))
    dtype_a = draw(st.sampled_from(FLOATS) if valid else DTYPES)
    dtype_b = dtype_a if valid or draw(MOSTLY) else draw(DTYPES)
    layout = VALID_LAYOUT if valid else LAYOUT
    layout_a, layout_b = draw(layout), draw(layout)
    a = realise(draw(values((M, K))), dtype_a, layout_a)
    b = realise(draw(values((K_b, N))), dtype_b, layout_b)
    bias = None
    if draw(st.booleans()):
        n_bias = N if valid or draw(MOSTLY) else N + 1
        bias_layouts = ["contiguous", "every_other", "negated"] + ([] if valid else ["requires_grad", "sparse"])
        bias = realise(draw(values((n_bias,))), dtype_a if valid or draw(MOSTLY) else torch.float32,
                       draw(st.sampled_from(bias_layouts)))
    pool = {k: st.sampled_from(v) for k, v in VALID_OPTIONS.items()} if valid else OPTION_VALUES
    options = {name: draw(pool[name]) for name in SINGLE[launcher] if draw(st.booleans())}
    return dict(a=a, b=b, bias=bias, **options), (layout_a, layout_b)


def single_refusal(args: dict) -> str | None:
    a, b, bias = args["a"], args["b"], args["bias"]
    reason = refused_reason(a=a, b=b, bias=bias)
    if reason:
        return reason
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in FLOATS:
            return f"{name} is {t.dtype}"
    if a.dtype != b.dtype:
        return "a and b differ in dtype"
    if a.shape[1] != b.shape[0]:
        return "inner dimensions differ"
    if bias is not None and (bias.shape[0] != b.shape[1] or bias.dtype not in FLOATS):
        return "bias of the wrong size or dtype"
    bad = [k for k in args if k not in ("a", "b", "bias") and not option_valid(k, args[k])]
    return f"bad option {bad}" if bad else None


def check_single(launcher: str, args: dict, layouts) -> None:
    fn = getattr(gk, launcher)
    context = f"{launcher}(a {tuple(args['a'].shape)} {args['a'].dtype} {layouts[0]}, b {tuple(args['b'].shape)} " \
              f"{args['b'].dtype} {layouts[1]}, bias {None if args['bias'] is None else tuple(args['bias'].shape)}, " \
              + ", ".join(f"{k}={v!r}" for k, v in args.items() if k not in ("a", "b", "bias")) + ")"
    refusal = single_refusal(args)
    names = {*args, "M", "N", "K", "C", "inputs", "A", "B"}
    if refusal and refusal.startswith("bad option"):  # the option must be named (or, where it has no backward,
        # an input that requires grad: that refusal is the launcher's too)
        names = set(eval(refusal[len("bad option "):])) | {  # noqa: S307  (our own list)
            k for k in ("a", "b", "bias") if args[k] is not None and args[k].requires_grad}
    if launcher == "matmul_ws" and refusal is None and args["a"].dtype == torch.float32:
        refusal = "matmul_ws takes float16 or bfloat16"
    out = call(fn, args, names, context, must_fail=refusal)
    RAN[launcher] += 1
    if out is None:
        return
    a, b, bias = (logical(t) if t is not None else None for t in (args["a"], args["b"], args["bias"]))
    ref = gk.matmul_ref(a, b, bias=bias, activation=args.get("activation"), out_dtype=torch.float64)
    before = gk.matmul_ref(a, b, bias=bias, out_dtype=torch.float64) if args.get("activation") else None
    assert out.dtype == args["a"].dtype, f"{context}: output dtype {out.dtype}"
    assert_matches(out, ref, out.dtype, context, scale=before)
    grads = [t for t in (args["a"], args["b"], args["bias"]) if t is not None and t.requires_grad]
    if grads and torch.is_grad_enabled():
        assert out.grad_fn is not None, f"{context}: an input requires grad but the output has no graph"


@pytest.mark.parametrize("launcher", sorted(SINGLE))
def test_fuzz_single_gemm_launchers(launcher):
    @examples(ci=25)
    @given(single_gemm_calls(launcher))
    def run(case):
        args, layouts = case
        check_single(launcher, args, layouts)

    run()


@examples(ci=10)
@given(single_gemm_calls("matmul_auto"))
def test_fuzz_pick_launcher_names_a_launcher_that_computes_the_product(case):
    args, layouts = case
    args.pop("activation", None)
    names = {*args, "M", "N", "K", "inputs"}
    # by design it may name a launcher for a call that launcher refuses (pick_launcher's docstring): then
    # running the pick must refuse it clearly (check_single holds it to that)
    picked = call(gk.pick_launcher, args, names, f"pick_launcher({layouts})")
    RAN["pick_launcher"] += 1
    if picked is not None:
        name, reason = picked
        assert name in SINGLE and isinstance(reason, str) and reason
        run_args = {k: v for k, v in args.items() if k in ("a", "b", "bias")}
        check_single(name, run_args, layouts)


# ----------------------------------------------------------------------------- grouped GEMMs
GROUPED_LAYOUT = st.sampled_from(["contiguous", "transposed", "sliced", "every_other", "large_stride", "expanded"])


@examples(ci=16)
@given(st.data())
def test_fuzz_grouped_matmul(data):
    count = data.draw(st.sampled_from([1, 2, 3, 1, 2, 0]))
    dtype = data.draw(st.sampled_from(FLOATS))
    layout = GROUPED_LAYOUT if data.draw(MOSTLY) else LAYOUT  # three in four: no layout to refuse
    group_a, group_b, shapes = [], [], []
    for _ in range(count):
        M, N, K = data.draw(DIMS), data.draw(DIMS), data.draw(DIMS)
        shapes.append((M, N, K))
        group_a.append(realise(data.draw(values((M, K))), dtype, data.draw(layout)))
        group_b.append(realise(data.draw(values((K, N))), dtype, data.draw(layout)))
    if count and data.draw(RARELY):
        group_b = group_b[:-1]  # one B missing
    tma = data.draw(st.sampled_from([False, False, False, True, True, 1, None]))
    as_tuple = data.draw(st.booleans())
    args = dict(group_a=tuple(group_a) if as_tuple else group_a, group_b=group_b, tma=tma)
    refusal = (None if count and len(group_b) == count else "no problems, or a B missing") or refused_reason(
        **{f"group_a[{i}]": t for i, t in enumerate(group_a)}, **{f"group_b[{i}]": t for i, t in enumerate(group_b)})
    if not isinstance(tma, bool):
        refusal = refusal or "tma must be a bool"
    names = {"group_a", "group_b", "tma", "problem", "A", "B", "grouped_matmul", "inputs"}
    context = f"grouped_matmul({shapes}, {dtype}, tma={tma!r})"
    out = call(gk.grouped_matmul, args, names, context, must_fail=refusal)
    RAN["grouped_matmul"] += 1
    # the plan takes the same lists, but refuses lazily negated views (it re-reads their memory every run)
    plan = call(gk.GroupedMatmulPlan, args, names, f"GroupedMatmulPlan: {context}", must_fail=refusal)
    RAN["GroupedMatmulPlan"] += 1
    runs = [] if plan is None else [plan.run(), plan.run()]  # twice: the same C_i, overwritten
    for got in ([out] if out is not None else []) + runs:
        assert len(got) == count
        for i, c in enumerate(got):
            ref = logical(group_a[i]) @ logical(group_b[i])
            assert_matches(c, ref, dtype, f"{context}, problem {i}")


@st.composite
def moe_calls(draw, dtypes=FLOATS, k_multiple=1):
    T, E = draw(st.sampled_from([0, 1, 5, 16, 33])), draw(st.sampled_from([1, 2, 3]))
    K = draw(st.sampled_from([0, 1, 7, 16, 32])) * k_multiple // (16 if k_multiple > 1 else 1) or (
        0 if k_multiple == 1 else 16)
    N = draw(st.sampled_from([1, 8, 17]))
    dtype = draw(st.sampled_from(dtypes))
    cuts = sorted(draw(st.lists(st.integers(0, T), min_size=E, max_size=E)))
    kind = draw(st.sampled_from(["valid"] * 4 + ["decreasing", "negative", "past_T", "int64", "short"]))
    offs = list(cuts)
    if kind == "decreasing" and E > 1 and offs[-1] > 0:
        offs[0], offs[-1] = offs[-1], 0 if offs[-1] > 0 else offs[0]
    elif kind == "negative":
        offs[0] = -1
    elif kind == "past_T":
        offs[-1] = T + 3
    offs_t = torch.tensor(offs[:-1] if kind == "short" else offs,
                          dtype=torch.int64 if kind == "int64" else torch.int32, device=DEVICE)
    offs_layout = draw(st.sampled_from(["plain"] * 4 + ["negated", "strided", "expanded"]))
    offs_t = offs_view(offs_t, offs_layout)
    bad_offs = any(o < 0 or o > T for o in offs) or any(x > y for x, y in zip(offs, offs[1:]))
    return dict(T=T, E=E, K=K, N=N, dtype=dtype, offs=offs_t, kind=kind if (bad_offs or kind in ("int64", "short"))
                else "valid", offs_layout=offs_layout, layout_x=draw(LAYOUT), layout_w=draw(LAYOUT),
                check_offs=draw(st.sampled_from([None, None, True, False, 1])),
                tma=draw(st.sampled_from([None, None, False, True, 0])))


def offs_view(offs: torch.Tensor, layout: str) -> torch.Tensor:
    """``offs``' values laid out as ``layout`` asks: a lazily negated view (its memory the
    negation), every other element of a longer tensor, or one value expanded (stride 0)."""
    if layout == "negated":
        return torch._neg_view(-offs)
    if layout == "strided":
        big = torch.zeros(2 * offs.numel() + 1, dtype=offs.dtype, device=offs.device)
        big[1::2] = offs
        return big[1::2]
    if layout == "expanded" and offs.numel() and bool((offs == offs[0]).all()):
        return offs[:1].expand(offs.shape)
    return offs


def grouped_ref(x64, w64, offs) -> torch.Tensor:
    """float64 ``out[rows of e] = x[rows of e] @ w[e]``, zeros past offs[-1] (grouped_mm_ref takes no float64)."""
    out = torch.zeros((x64.shape[0], w64.shape[2]), dtype=torch.float64)
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x64[start:end] @ w64[e]
        start = end
    return out


@examples(ci=25)
@given(moe_calls(), st.data())
def test_fuzz_grouped_mm(case, data):
    x = realise(data.draw(values((case["T"], case["K"]))), case["dtype"], case["layout_x"])
    w = realise(data.draw(values((case["E"], case["K"], case["N"]))), case["dtype"], case["layout_w"])
    args = dict(x=x, w=w, offs=case["offs"], tma=case["tma"], check_offs=case["check_offs"])
    refusal = refused_reason(x=x, w=w)
    if case["kind"] in ("int64", "short"):
        refusal = refusal or f"offs {case['kind']}"
    if case["check_offs"] is not None and not isinstance(case["check_offs"], bool):
        refusal = refusal or "check_offs must be a bool"
    if case["tma"] is not None and not isinstance(case["tma"], bool):
        refusal = refusal or "tma must be a bool"
    trusted = case["check_offs"] is False and case["kind"] not in ("valid", "int64", "short")
    if case["kind"] not in ("valid", "int64", "short") and not trusted and not runtime.on_gpu():
        refusal = refusal or "a bad offs, checked on the host"
    context = f"grouped_mm(T={case['T']}, E={case['E']}, K={case['K']}, N={case['N']}, {case['dtype']}, " \
              f"x {case['layout_x']}, w {case['layout_w']}, offs {case['offs'].tolist()} ({case['kind']}, " \
              f"{case['offs_layout']}), " \
              f"tma={case['tma']!r}, check_offs={case['check_offs']!r})"
    names = {"x", "w", "offs", "tma", "check_offs", "T", "K", "E", "inputs", "grouped_mm"}
    out = call(gk.grouped_mm, args, names, context, must_fail=refusal)
    RAN["grouped_mm"] += 1
    if out is None or trusted:
        return
    assert_matches(out, grouped_ref(logical(x), logical(w), case["offs"]), case["dtype"], context)
    if (x.requires_grad or w.requires_grad) and torch.is_grad_enabled():
        assert out.grad_fn is not None, f"{context}: output cut off from the graph"


# ----------------------------------------------------------------------------- FP8
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
GRANULARITIES = st.sampled_from(["tensor", "row", "column", (1, 2), (2, 3), (1, 128), (4, 4), "block", (0, 1),
                                 (1.0, 2), "ROW"])


@examples(ci=40)
@given(st.sampled_from([0, 1, 3, 8]), st.sampled_from([0, 1, 5, 16]), GRANULARITIES,
       st.sampled_from([*FP8, *FP8, torch.float16]), st.sampled_from([torch.float32, torch.float32, torch.float16,
                                                                     torch.bfloat16, torch.float64, torch.int32]),
       st.sampled_from(["contiguous", "transposed", "every_other", "negated", "expanded", "tiny", "huge"]), st.data())
def test_fuzz_quantize_fp8(rows, cols, granularity, dtype, x_dtype, layout, data):
    v = data.draw(values((rows, cols)))
    if layout == "tiny":
        v = v * 1e-44
    elif layout == "huge" and x_dtype == torch.float64:
        v = v.double() * 1e300
    x = realise(v, x_dtype, "contiguous" if layout in ("tiny", "huge") else layout)
    context = f"quantize_fp8({rows}x{cols} {x_dtype} {layout}, {granularity!r}, dtype={dtype})"
    valid_granularity = granularity in ("tensor", "row", "column") or (
        isinstance(granularity, tuple) and all(isinstance(n, int) and n >= 1 for n in granularity))
    refusal = None if x_dtype.is_floating_point and dtype in FP8 and valid_granularity else "bad dtype or granularity"
    finite = v[torch.isfinite(v)].abs()
    if x_dtype == torch.float64 and finite.numel() and finite.max() > torch.finfo(torch.float32).max * fp8.fp8_max(
            dtype if dtype in FP8 else torch.float8_e4m3fn):
        refusal = refusal or "past what a float32 scale represents"
    got = call(fp8.quantize_fp8, dict(x=x, granularity=granularity, dtype=dtype), {"x", "dtype", "granularity"},
               context, must_fail=refusal)
    RAN["quantize_fp8"] += 1
    if got is None:
        return
    q, scale = got
    assert q.shape == x.shape and q.dtype == dtype and scale.dtype == torch.float32, context
    expected = {"tensor": (), "row": (rows, 1), "column": (1, cols)}.get(granularity) if isinstance(
        granularity, str) else (-(-rows // granularity[0]), -(-cols // granularity[1]))
    assert tuple(scale.shape) == expected, f"{context}: scale shape {tuple(scale.shape)} != {expected}"
    assert torch.isfinite(scale).all() and (scale > 0).all(), f"{context}: scale {scale}"
    xv = logical(x)
    deq = fp8.dequantize(q, scale, granularity)
    fmax, bits = fp8.fp8_max(dtype), (3 if dtype == torch.float8_e4m3fn else 2)
    full_scale = fp8.expand_scale(scale.double(), x.shape, granularity)
    finite = torch.isfinite(xv)
    step = full_scale * 2.0 ** (-bits - (6 if bits == 3 else 14))  # subnormal step, in x's units
    bound = xv.abs() * 2.0 ** -bits + step + full_scale * fmax * 1e-7
    assert ((deq - xv).abs()[finite] <= bound[finite]).all(), f"{context}: a finite value quantized too far"
    assert deq[xv.isnan()].isnan().all(), f"{context}: NaN lost"
    inf = xv.isinf()
    if dtype == torch.float8_e5m2:
        assert torch.equal(deq[inf], xv[inf]), f"{context}: inf lost"
    else:
        assert deq[inf].isnan().all(), f"{context}: inf should be NaN in e4m3fn"


#: what a scale holds beside the quantizer's own (three in five as is); all valid
SCALE_VALUES = st.sampled_from(["as_is"] * 6 + ["zero", "negative", "nan", "inf", "-inf", "one_shaped"])


def scale_values(s: torch.Tensor, kind: str, index: int, one_shape) -> torch.Tensor:
    """``s`` with ``kind`` applied: all zero, negated, one element NaN or +-inf, or (a single
    scale) reshaped to ``one_shape`` ([], [1] or [1, 1]: every one-element scale is tensor-wise)."""
    if kind == "zero":
        return torch.zeros_like(s)
    if kind == "negative":
        return -s
    if kind in ("nan", "inf", "-inf") and s.numel():
        s = s.clone()
        s.view(-1)[index % s.numel()] = float(kind)
        return s
    if kind == "one_shaped" and s.numel() == 1:
        return s.reshape(one_shape)
    return s


@st.composite
def scaled_mm_calls(draw):
    valid = draw(MOSTLY)  # three in four calls valid in every part
    M, N = draw(st.sampled_from([0, 1, 5, 16, 17])), draw(st.sampled_from([0, 1, 8, 17]))
    scaling = draw(st.sampled_from(["tensor", "row", "row", "block"]))
    K = draw(st.sampled_from([128, 256])) if scaling == "block" else draw(
        st.sampled_from([0, 16, 32, 48] + ([] if valid else [17])))
    dtype = draw(st.sampled_from([*FP8] if valid else [*FP8, torch.float16]))
    ga, gb = fp8.granularities(scaling)
    xa, xb = draw(values((M, K))), draw(values((N, K)))
    qdtype = dtype if dtype in FP8 else torch.float8_e4m3fn
    dtype_b = draw(st.sampled_from([qdtype] * 3 + [*FP8]))  # one in five an e4m3 x e5m2 mix
    a, sa = fp8.quantize_fp8(xa.to(DEVICE), ga, dtype=qdtype)
    b, sb = fp8.quantize_fp8(xb.to(DEVICE).t(), gb, dtype=dtype_b)
    if dtype not in FP8:
        a = a.float().to(dtype)
    one_shape = draw(st.sampled_from([(), (1,), (1, 1)]))
    scales = {name: draw(SCALE_VALUES) for name in ("scale_a", "scale_b")}
    sa = scale_values(sa, scales["scale_a"], draw(st.integers(0, 64)), one_shape)
    sb = scale_values(sb, scales["scale_b"], draw(st.integers(0, 64)), one_shape)
    layouts = {}
    for name in ("a", "b", "scale_a", "scale_b"):
        pool = (["as_is"] * 3 + ["negated"] + (["sliced", "transposed"] if name.startswith("scale") else [])) if valid \
            else ["as_is"] * 2 + ["transposed", "negated", "sliced", "sparse", "requires_grad"]
        layouts[name] = draw(st.sampled_from(pool))
    tensors = dict(a=a, b=b, scale_a=sa, scale_b=sb)
    for name, layout in layouts.items():
        t = tensors[name]
        if layout == "transposed" and t.dim() == 2:
            t = t.contiguous() if name == "b" else t.t().contiguous().t()  # b row-major, a column-major
        elif layout == "negated":
            t = (torch._neg_view((t.view(torch.uint8) ^ 0x80).view(t.dtype)) if t.dtype in checks._ONE_BYTE_FLOATS
                 else torch.complex(torch.zeros_like(t), -t).conj().imag)
        elif layout == "sliced" and t.dim() == 2:
            big = torch.zeros((t.shape[0] + 2, t.shape[1] * 2 + 1), dtype=t.dtype, device=t.device)
            big.view(torch.uint8 if t.element_size() == 1 else t.dtype)[1:1 + t.shape[0], 1::2] = (
                t.view(torch.uint8) if t.element_size() == 1 else t)
            t = big[1:1 + t.shape[0], 1::2]
        elif layout == "sparse" and t.dtype == torch.float32 and t.dim() >= 1:
            t = t.to_sparse()
        elif layout == "requires_grad":
            t = t.float().requires_grad_().to(t.dtype) if t.dtype != torch.float32 else t.detach().requires_grad_()
        tensors[name] = t
    bias = None
    if draw(st.booleans()):
        bias = realise(draw(values((N,))), draw(st.sampled_from([torch.float32, torch.bfloat16])),
                       draw(st.sampled_from(["contiguous", "every_other", "negated"] + ([] if valid else
                                                                                        ["requires_grad"]))))
    options = draw(fp8_options(valid))
    return dict(**tensors, bias=bias, **options), dict(M=M, N=N, K=K, scaling=scaling, dtype=dtype, dtype_b=dtype_b,
                                                       **{f"{k} values": v for k, v in scales.items()}, **layouts)


@st.composite
def fp8_options(draw, valid: bool):
    """out_dtype, use_fast_accum and promote_every: valid ones, or (``valid`` False) with odd spellings."""
    out_dtypes, fast, promote = [torch.bfloat16, torch.float16, torch.float32], [False, True], [128, 32, 64]
    if not valid:
        out_dtypes = out_dtypes + [torch.float64, torch.int32, "bfloat16", None]
        fast, promote = fast + [1, "no", None], promote + [128.0, 16, True, np.int64(64), "128"]
    return dict(out_dtype=draw(st.sampled_from(out_dtypes)), use_fast_accum=draw(st.sampled_from(fast)),
                promote_every=draw(st.sampled_from(promote)))


def fp8_options_valid(options: dict) -> bool:
    promote = options["promote_every"]
    return (isinstance(options["out_dtype"], torch.dtype) and options["out_dtype"] in fp8.OUT_DTYPES
            and isinstance(options["use_fast_accum"], bool)
            and isinstance(promote, (int, np.integer)) and not isinstance(promote, bool)
            and promote in fp8.PROMOTE_CHOICES)


def out_tolerance_dtype(out_dtype):
    """The tolerance an fp8 product is held to: e4m3's where the output is bf16 (coarser), else the output's."""
    return torch.float8_e4m3fn if out_dtype == torch.bfloat16 else out_dtype


@examples(ci=40)
@given(scaled_mm_calls())
def test_fuzz_scaled_mm(case):
    args, info = case
    context = f"scaled_mm({info}, bias {None if args['bias'] is None else args['bias'].dtype}, " \
              f"out_dtype={args['out_dtype']}, use_fast_accum={args['use_fast_accum']!r}, " \
              f"promote_every={args['promote_every']!r})"
    a, b = args["a"], args["b"]
    refusal = refused_reason(**{k: args[k] for k in ("a", "b", "scale_a", "scale_b", "bias")})
    if info["dtype"] not in FP8:
        refusal = refusal or "a is not fp8"
    if info["K"] % 16:
        refusal = refusal or "K % 16"
    if info["K"] > 1 and (a.stride(1) != 1 or b.stride(0) != 1):
        refusal = refusal or "a not row-major or b not column-major"
    if not fp8_options_valid(args):
        refusal = refusal or "a bad option"
    grads = [k for k in ("a", "b", "scale_a", "scale_b", "bias") if args[k] is not None and args[k].requires_grad]
    if grads and torch.is_grad_enabled():
        refusal = refusal or f"{grads} require grad (no backward)"
    names = {*args, "M", "N", "K", "inputs"}
    out = call(fp8.scaled_mm, args, names, context, must_fail=refusal)
    RAN["scaled_mm"] += 1
    if out is None:
        return
    # the reference resolves lazy views itself and runs scaled_mm's argument checks (not its layout rules)
    ref = fp8.scaled_mm_ref(a, b, args["scale_a"], args["scale_b"], bias=args["bias"], out_dtype=torch.float64)
    assert out.dtype == args["out_dtype"]
    assert_matches(out, ref, out_tolerance_dtype(args["out_dtype"]), context)


@examples(ci=25)
@given(moe_calls(dtypes=FP8, k_multiple=16), st.data())
def test_fuzz_scaled_grouped_mm(case, data):
    T, K, N, E = case["T"], case["K"], case["N"], case["E"]
    x, sx = fp8.quantize_fp8(data.draw(values((T, K))).to(DEVICE), "row", dtype=case["dtype"])
    w, sw = fp8.quantize_experts(data.draw(values((E, K, N))).to(DEVICE), dtype=case["dtype"])
    sx = sx.reshape(T)
    sx = scale_values(sx, data.draw(SCALE_VALUES), data.draw(st.integers(0, 64)), ())
    sw = scale_values(sw, data.draw(SCALE_VALUES), data.draw(st.integers(0, 64)), ())
    layout = data.draw(st.sampled_from(["as_is"] * 3 + ["negated_scale_w", "negated_scale_x", "sparse_scale_x",
                                                         "grad_x", "strided_scale_w", "wrong_shape", "e5m2_w"]))
    if layout == "negated_scale_w":
        sw = torch.complex(torch.zeros_like(sw), -sw).conj().imag
    elif layout == "negated_scale_x":
        sx = torch.complex(torch.zeros_like(sx), -sx).conj().imag
    elif layout == "sparse_scale_x":
        sx = sx.to_sparse()
    elif layout == "grad_x":
        x = x.float().requires_grad_().to(x.dtype)
    elif layout == "strided_scale_w":
        sw = sw.t().contiguous().t()
    elif layout == "wrong_shape":
        sx = sx[: max(T - 1, 0)] if T else torch.ones(1, device=DEVICE)
    elif layout == "e5m2_w":  # an e4m3 x e5m2 mix: x and w must share a dtype here
        w = w.float().to(FP8[1] if w.dtype == FP8[0] else FP8[0])
    valid_options = data.draw(MOSTLY)
    options = data.draw(fp8_options(valid_options))
    args = dict(x=x, w=w, scale_x=sx, scale_w=sw, offs=case["offs"], tma=case["tma"], check_offs=case["check_offs"],
                **options)
    refusal = {"sparse_scale_x": "sparse", "grad_x": "x requires grad", "wrong_shape": "scale_x's shape",
               "e5m2_w": "x and w differ in dtype"}.get(layout)
    if layout == "strided_scale_w" and sw.numel() and sw.stride(-1) != 1:
        refusal = "scale_w not contiguous in N"
    if case["kind"] in ("int64", "short"):
        refusal = refusal or f"offs {case['kind']}"
    for flag in ("check_offs", "tma"):
        if case[flag] is not None and not isinstance(case[flag], bool):
            refusal = refusal or f"{flag} must be a bool"
    if not fp8_options_valid(options):
        refusal = refusal or "a bad option"
    trusted = case["check_offs"] is False and case["kind"] != "valid"
    if case["kind"] not in ("valid", "int64", "short") and not trusted and not runtime.on_gpu():
        refusal = refusal or "a bad offs, checked on the host"
    context = f"scaled_grouped_mm(T={T}, E={E}, K={K}, N={N}, {case['dtype']}, {layout}, offs " \
              f"{case['offs'].tolist()} ({case['kind']}, {case['offs_layout']}), tma={case['tma']!r}, " \
              f"check_offs={case['check_offs']!r}, {options})"
    names = {*args, "T", "K", "E", "inputs", "scaled_grouped_mm"}
    out = call(fp8.scaled_grouped_mm, args, names, context, must_fail=refusal)
    RAN["scaled_grouped_mm"] += 1
    if out is None or trusted:
        return
    assert out.dtype == options["out_dtype"], context
    ref = fp8.scaled_grouped_mm_ref(x, w, sx, sw, case["offs"], out_dtype=torch.float64)
    assert_matches(out, ref, out_tolerance_dtype(options["out_dtype"]), context)


# ----------------------------------------------------------------------------- models and schedules (no kernels)
ODD_INTS = st.sampled_from([0, 1, 2, 3, 7, 16, 32, 64, 128, 0, 1, 16, 64, 5, 33]  # three in four valid
                           + [-1, True, 2.0, 2.5, None, np.int64(16), 10**7, "16"])


BLOCKS = st.sampled_from([16, 32, 64, 128] * 3 + [0, -1, 2.0, None, True, 8])  # three in four valid


def _int_valid(value, minimum=1) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= minimum


@examples(ci=150)
@given(ODD_INTS, ODD_INTS, BLOCKS, BLOCKS, st.sampled_from(["grouped", "row_major", "col", None]), ODD_INTS)
def test_fuzz_tile_schedule_and_its_l2_models(M, N, block_m, block_n, order, group_size_m):
    context = f"tile_schedule({M!r}, {N!r}, {block_m!r}, {block_n!r}, {order!r}, {group_size_m!r})"
    small = all(not _int_valid(v) or v <= 4096 for v in (M, N)) and all(not _int_valid(v) or v >= 16
                                                                         for v in (block_m, block_n))
    assume(small)  # a schedule of millions of tiles is slow, not wrong
    ok = (_int_valid(M, 0) and _int_valid(N, 0) and _int_valid(block_m) and _int_valid(block_n)
          and order in ("grouped", "row_major") and _int_valid(group_size_m))
    args = dict(M=M, N=N, block_m=block_m, block_n=block_n, order=order, group_size_m=group_size_m)
    schedule = call(gk.tile_schedule, args, set(args), context, must_fail=None if ok else "bad argument")
    RAN["tile_schedule"] += 1
    if schedule is None:
        return
    for fn in (gk.l2_traffic, gk.reuse_profile):
        for block_k in (16, 0, 2.0):
            got = call(fn, dict(schedule=schedule, block_k=block_k, K=64), {"block_k", "schedule", "K"},
                       f"{fn.__name__}({context}, block_k={block_k!r})",
                       must_fail=None if _int_valid(block_k) else "bad block_k")
            RAN[fn.__name__] += 1
            assert got is None or got is not None


@examples(ci=100)
@given(ODD_INTS, ODD_INTS, ODD_INTS, st.sampled_from([0.0, 0.5, 1.0, -1.0, float("nan"), 2, "x"]))
def test_fuzz_route_tokens(num_tokens, num_experts, top_k, skew):
    assume(not (_int_valid(num_tokens) and num_tokens > 4096) and not (_int_valid(num_experts) and num_experts > 4096))
    context = f"route_tokens({num_tokens!r}, {num_experts!r}, {top_k!r}, skew={skew!r})"
    args = dict(num_tokens=num_tokens, num_experts=num_experts, top_k=top_k, skew=skew)
    routing = call(gk.route_tokens, args, set(args), context)
    RAN["route_tokens"] += 1
    if routing is None:
        return
    assert _int_valid(num_tokens, 0) and _int_valid(num_experts) and _int_valid(top_k) and top_k <= num_experts, (
        f"{context}: accepted")
    assert routing.counts.sum() == num_tokens * top_k and routing.offs.dtype == torch.int32, context
    assert torch.equal(routing.offs.cpu(), routing.counts.cumsum(0).to(torch.int32).cpu()), context


@examples(ci=80)
@given(st.lists(st.tuples(ODD_INTS, ODD_INTS, ODD_INTS), max_size=3), BLOCKS, BLOCKS,
       st.sampled_from([None, 1, 4, 0, 2.0]))
def test_fuzz_grouped_gemm_schedule(shapes, block_m, block_n, num_programs):
    assume(all(not _int_valid(v) or v <= 2048 for s in shapes for v in s))
    assume(all(not _int_valid(v) or v >= 16 for v in (block_m, block_n)))
    context = f"grouped_gemm_schedule({shapes!r}, {block_m!r}, {block_n!r}, {num_programs!r})"
    args = dict(problem_shapes=shapes, block_m=block_m, block_n=block_n, num_programs=num_programs)
    got = call(gk.grouped_gemm_schedule, args, {*args, "problem", "M", "N", "K"}, context)
    RAN["grouped_gemm_schedule"] += 1
    if got is not None:
        assert shapes and all(_int_valid(m, 0) and _int_valid(n, 0) and (k is None or _int_valid(k, 0))
                              for m, n, k in shapes) and _int_valid(block_m) and _int_valid(
            block_n) and (num_programs is None or _int_valid(num_programs)), f"{context}: accepted"


@examples(ci=30)
@given(st.sampled_from([0, 1, 5, 16, 33, 1, 16, -1, 2.0]), st.sampled_from([1, 8, 17, 16, 0, True]),
       st.sampled_from([1, 16, 40, 16, 0, None]), st.sampled_from(["trace_program_tiles", "trace_persistent_tiles",
                                                                  "trace_streamk_segments"]),
       st.sampled_from([None, None, 16, 32, 0, 24, 16.0]), st.sampled_from(["grouped", "row_major", "diagonal"]))
def test_fuzz_traces(M, N, K, name, block, order):
    """The lab's traces run the kernels with TRACE on: a table of tiles, or a clear error."""
    args = dict(M=M, N=N, K=K, block_m=block, block_n=block, order=order)
    context = f"{name}({args})"
    got = call(getattr(gk, name), args, {*args, "BLOCK_M", "BLOCK_N", "BLOCK_K", "config", "a", "b"}, context)
    RAN[name] += 1
    if got is not None:
        assert _int_valid(M, 0) and _int_valid(N, 0) and order in ("grouped", "row_major"), f"{context}: accepted"


@examples(ci=30)
@given(ODD_INTS, ODD_INTS, st.sampled_from(["cooperative", "pingpong", "streamk", None]), ODD_INTS)
def test_fuzz_ws_schedule(M, N, schedule, num_programs):
    assume(all(not _int_valid(v) or v <= 4096 for v in (M, N)))
    args = dict(M=M, N=N, schedule=schedule, num_programs=num_programs)
    context = f"ws_schedule({args})"
    got = call(gk.ws_schedule, args, {*args, "config", "group_size_m"}, context)
    RAN["ws_schedule"] += 1
    if got is not None:
        assert _int_valid(M, 0) and _int_valid(N, 0) and _int_valid(num_programs), f"{context}: accepted"


# ----------------------------------------------------------------------------- spans past 32-bit offsets
def spread(t: torch.Tensor, dim: int, stride: int) -> torch.Tensor:
    """``t``'s values in a view whose dimension ``dim`` steps ``stride`` elements (its other
    dimensions dense, innermost last); the memory between is torch.empty's: never touched."""
    shape = list(t.shape)
    rest = [d for d in range(t.dim()) if d != dim]
    strides = [0] * t.dim()
    step = 1
    for d in reversed(rest):
        strides[d] = step
        step *= shape[d]
    strides[dim] = stride
    span = sum((n - 1) * s for n, s in zip(shape, strides)) + 1
    free = runtime.free_gpu_bytes()  # on a GPU the memory is allocated (untouched): a small card skips
    assume(free is None or span * t.element_size() <= free // 2)
    out = torch.empty(span, dtype=t.dtype, device=t.device).as_strided(shape, strides)
    if t.element_size() == 1:  # fp8: no copy kernel on every torch; the bytes are the values
        out.view(torch.uint8).copy_(t.view(torch.uint8))
    else:
        out.copy_(t)
    return out


#: (rows along the spread dimension, stride): past 2^31 elements, or just under it (must run)
SPANS = st.sampled_from([(9, 2**28 + 17), (2, 2**31 + 3), (7, 2**28 + 17)])
SPAN_CALLS = ("matmul", "matmul_persistent", "matmul_tma", "matmul_streamk", "matmul_splitk", "matmul_auto",
              "matmul_ws", "grouped_matmul", "grouped_mm", "scaled_mm", "scaled_grouped_mm")


@examples(ci=8)  # each builds a storage of 2^31+ elements: about 2.5 s (`make fuzz` runs 300)
@given(st.sampled_from(SPAN_CALLS), SPANS, st.integers(0, 3), st.integers(0, 2**31 - 1))
def test_fuzz_a_span_past_32_bit_offsets(name, span, which, seed):
    """A tiny tensor whose rows (or columns) lie 2^31 elements apart: a clear error naming it, or
    the right answer (a kernel with 64-bit offsets); never an illegal access or wrapped offsets."""
    rows, stride = span
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=gen).to(DEVICE)  # noqa: E731
    K, half = 16, torch.float16
    e4m3 = torch.float8_e4m3fn
    if name in SINGLE or name == "grouped_matmul":
        arg = ("a", "b")[which % 2]
        args = dict(a=randn(rows if arg == "a" else 8, K).to(half), b=randn(K, rows if arg == "b" else 8).to(half))
        args[arg] = spread(args[arg], 0 if arg == "a" else 1, stride)
        a, b = args["a"], args["b"]
        fn, ref = getattr(gk, name), gk.matmul_ref(a, b, out_dtype=torch.float64)
        if name == "grouped_matmul":
            args = dict(group_a=[a], group_b=[b])
    elif name == "grouped_mm":
        x, w = randn(rows, K).to(half), randn(2, K, 8).to(half)
        arg = ("x", "w")[which % 2]
        x, w = (spread(x, 0, stride), w) if arg == "x" else (x, spread(w, 0, stride))
        offs = torch.tensor([1, rows], dtype=torch.int32, device=DEVICE)
        args, fn, ref = dict(x=x, w=w, offs=offs), gk.grouped_mm, grouped_ref(x.double().cpu(), w.double().cpu(), offs)
    elif name == "scaled_mm":
        a, sa = fp8.quantize_fp8(randn(rows, K), "row")
        b, sb = fp8.quantize_fp8(randn(K, rows), "column")
        b = b.t().contiguous().t()
        arg = ("a", "b", "scale_a", "scale_b")[which]
        args = dict(a=a, b=b, scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        args[arg] = spread(args[arg], 0 if arg in ("a", "scale_a") else 1, stride)
        fn = fp8.scaled_mm
        ref = fp8.scaled_mm_ref(args["a"], args["b"], args["scale_a"], args["scale_b"], out_dtype=torch.float64)
    else:  # scaled_grouped_mm
        x, sx = fp8.quantize_fp8(randn(rows, K), "row")
        w, sw = fp8.quantize_experts(randn(2, K, 8))
        args = dict(x=x, w=w, scale_x=sx.reshape(rows), scale_w=sw,
                    offs=torch.tensor([1, rows], dtype=torch.int32, device=DEVICE), out_dtype=torch.float32)
        arg = ("x", "w", "scale_x", "scale_w")[which]
        args[arg] = spread(args[arg] if arg != "w" else args[arg].transpose(1, 2).contiguous(), 0, stride)
        if arg == "w":
            args[arg] = args[arg].transpose(1, 2)  # column-major per expert, experts 2^31 apart
        fn = fp8.scaled_grouped_mm
        ref = fp8.scaled_grouped_mm_ref(**args)
    context = f"{name}({arg} {rows} rows {stride} apart)"
    out = call(fn, args, {arg, "inputs", name}, context, label=f"{name} (span)")
    RAN[f"{name} (span)"] += 1
    if out is not None:
        assert_matches(out[0] if isinstance(out, list) else out, ref, torch.float16 if name in SINGLE or name in (
            "grouped_matmul", "grouped_mm") else torch.float32, context)


# ----------------------------------------------------------------------------- a valid call, then an invalid one
def _config(**fields):
    kwargs = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}
    warps, stages = fields.pop("num_warps", 4), fields.pop("num_stages", 2)
    return triton.Config({**kwargs, **fields}, num_warps=warps, num_stages=stages)


#: launcher -> option -> (a valid value, values that must be refused: most compare equal to a valid one)
SEQUENCES = {
    "matmul": {"group_size_m": (8, [8.0, np.float64(8), "8"]), "order": ("grouped", ["GROUPED", None]),
               "activation": ("relu", ["RELU", 5])},
    "matmul_persistent": {"num_programs": (3, [3.0, True, "3"]), "config": (_config(), [
        _config(BLOCK_M=32.0), _config(num_warps=4.0), _config(num_stages=2.0), _config(BLOCK_K=True)])},
    "matmul_tma": {"group_size_m": (1, [True, 1.0]), "config": (_config(), [_config(BLOCK_N=32.0)])},
    "matmul_streamk": {"num_programs": (2, [2.0, np.float32(2)]), "config": (_config(), [_config(BLOCK_M=32.0)])},
    "matmul_splitk": {"split_k": (2, [2.0, "2"]), "config": (_config(), [_config(num_warps=4.0)])},
    "matmul_auto": {"batch_invariant": (False, [0, "no", None])},
    "grouped_matmul": {"tma": (False, [0, "no"])},
    "grouped_mm": {"tma": (False, [0]), "check_offs": (True, [1, "yes"])},
    "scaled_mm": {"promote_every": (64, [64.0, np.float64(64), "64"]), "use_fast_accum": (False, [0, "no"]),
                  "out_dtype": (torch.float32, ["float32", torch.float64]), "batch_invariant": (True, [1])},
    "scaled_grouped_mm": {"promote_every": (64, [64.0, True]), "use_fast_accum": (True, [1, "yes"]),
                          "out_dtype": (torch.float32, [torch.float64, "float32"]), "tma": (False, [0]),
                          "check_offs": (True, [1])},
}


def _sequence_call(name: str):
    """``(fn, tensors, reference)`` of one small valid call of ``name`` (seeded: the same every time)."""
    gen = torch.Generator().manual_seed(7)
    randn = lambda *shape: torch.randn(*shape, generator=gen).to(DEVICE)  # noqa: E731
    offs = torch.tensor([5, 32], dtype=torch.int32, device=DEVICE)
    if name in SINGLE or name == "grouped_matmul":
        a, b = randn(32, 32).half(), randn(32, 32).half()
        ref = gk.matmul_ref(a, b, out_dtype=torch.float64)
        if name == "grouped_matmul":
            return gk.grouped_matmul, dict(group_a=[a], group_b=[b]), ref
        return getattr(gk, name), dict(a=a, b=b), ref
    if name == "grouped_mm":
        x, w = randn(32, 32), randn(2, 32, 16)
        return gk.grouped_mm, dict(x=x, w=w, offs=offs), grouped_ref(x.double().cpu(), w.double().cpu(), offs)
    if name == "scaled_mm":
        a, sa = fp8.quantize_fp8(randn(32, 32), "row")
        b, sb = fp8.quantize_fp8(randn(16, 32).t(), "column")
        return fp8.scaled_mm, dict(a=a, b=b, scale_a=sa, scale_b=sb), fp8.scaled_mm_ref(a, b, sa, sb,
                                                                                       out_dtype=torch.float64)
    x, sx = fp8.quantize_fp8(randn(32, 32), "row")
    w, sw = fp8.quantize_experts(randn(2, 32, 16))
    tensors = dict(x=x, w=w, scale_x=sx.reshape(32), scale_w=sw, offs=offs)
    return fp8.scaled_grouped_mm, tensors, fp8.scaled_grouped_mm_ref(**tensors, out_dtype=torch.float64)


@examples(ci=15)
@given(st.data())
def test_fuzz_a_valid_call_then_an_invalid_option(data):
    """The same tensors with a valid option, then an invalid one (equal-comparing: 8.0 for 8, True for
    1, a float config), then the valid one again: the second is refused naming the option, the third
    still right.  A kept launch (GPU) must never let the second skip its checks, nor key it alike."""
    name = data.draw(st.sampled_from(sorted(SEQUENCES)))
    option = data.draw(st.sampled_from(sorted(SEQUENCES[name])))
    valid, invalids = SEQUENCES[name][option]
    invalid = data.draw(st.sampled_from(invalids))
    fn, tensors, ref = _sequence_call(name)
    context = f"{name}(..., {option}={valid!r}), then {option}={invalid!r}"
    dtype = torch.float16 if name in SINGLE or name == "grouped_matmul" else torch.float32
    for value, must_fail in ((valid, None), (invalid, "an invalid option after a valid call"), (valid, None)):
        out = call(fn, {**tensors, option: value}, {option, "config", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps",
                                                    "num_stages"}, context, must_fail=must_fail,
                   label=f"{name} (sequence)")
        RAN[f"{name} (sequence)"] += 1
        if out is not None:
            got = out[0] if isinstance(out, list) else out
            want = gk.matmul_ref(tensors["a"], tensors["b"], activation=value, out_dtype=torch.float64) \
                if option == "activation" else ref
            assert_matches(got, want, out_tolerance_dtype(got.dtype) if got.dtype != dtype else dtype, context)
    if option == "config":
        assert launches.config_key(valid) != launches.config_key(invalid), context
    elif not isinstance(invalid, str):
        assert launches.call_key((), (valid,)) != launches.call_key((), (invalid,)), context


# ----------------------------------------------------------------------------- explicit configs
CONFIG_BLOCKS = st.sampled_from([16, 32, 16, 32, 64, 16.0, 32.0, True, np.int64(16), 24, 0, 512, "16", None])
CONFIG_WARPS = st.sampled_from([4, 2, 4, 1, 4.0, True, 3, np.int64(4), 32])
CONFIG_STAGES = st.sampled_from([1, 2, 2, 3, 2.0, True, 0, -1])


def _plain_int(value) -> bool:
    return type(value) is int


@examples(ci=12)
@given(st.sampled_from(["matmul_persistent", "matmul_tma", "matmul_streamk", "matmul_splitk"]),
       st.sampled_from([(17, 9, 20), (32, 32, 32), (1, 40, 16)]), st.data())
def test_fuzz_explicit_configs(name, shape, data):
    """``config=triton.Config(...)`` with odd values (floats, bools, numpy ints, strings, sizes no
    kernel compiles): the product, or a clear error naming the config."""
    if data.draw(MOSTLY):  # three in four: a config every kernel takes
        blocks, warps, stages, extra = (st.sampled_from([16, 32, 64]), st.sampled_from([1, 2, 4, 8]),
                                        st.sampled_from([1, 2, 3]), st.sampled_from([{}, {"FLATTEN": False}]))
    else:
        blocks, warps, stages, extra = CONFIG_BLOCKS, CONFIG_WARPS, CONFIG_STAGES, st.sampled_from(
            [{}] * 4 + [{"FLATTEN": False}, {"FLATTEN": 0}, {"FLATTEN": 0.0}, {"BLOCK_Q": 16}])
    block_m, block_n, block_k = data.draw(blocks), data.draw(blocks), data.draw(blocks)
    warps, stages, extra = data.draw(warps), data.draw(stages), data.draw(extra)
    M, N, K = shape
    gen = torch.Generator().manual_seed(M * N + K)
    a = torch.randn(M, K, generator=gen).to(DEVICE, torch.float16)
    b = torch.randn(K, N, generator=gen).to(DEVICE, torch.float16)
    config = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, **extra}, num_warps=warps,
                           num_stages=stages)
    blocks_ok = all(_plain_int(v) and 16 <= v <= 256 and v & (v - 1) == 0 for v in (block_m, block_n, block_k))
    ok = (blocks_ok and _plain_int(warps) and warps in (1, 2, 4, 8, 16) and _plain_int(stages) and stages >= 1
          and "BLOCK_Q" not in extra and all(isinstance(v, bool) for k, v in extra.items() if k == "FLATTEN"))
    numpy_ints = any(isinstance(v, np.integer) for v in (block_m, block_n, block_k, warps))
    context = f"{name}({M}x{N}x{K}, config={config})"
    must_fail = None if ok or numpy_ints else "a config no kernel takes"
    out = call(getattr(gk, name), dict(a=a, b=b, config=config), {"config", "a", "b"}, context, must_fail=must_fail,
               label=f"{name} (config)")
    RAN[f"{name} (config)"] += 1
    if out is not None:
        assert_matches(out, gk.matmul_ref(a, b, out_dtype=torch.float64), torch.float16, context)


# ----------------------------------------------------------------------------- environment variables
ENV_TEXT = st.one_of(
    st.sampled_from(["1", "0", "true", "FALSE", " yes ", "On", "off", "no", "none", "None", "disabled", "small",
                     "SMALL ", "flase", "2", "", "   ", "nan", "inf", "-inf", "4", "4.5", "-1", "1e400", "0x10",
                     "sm_86", "86", "8.6", "SM_90", "sm_100", "ampere", "/tmp/x", "~/cache", "y", "\t1\n"]),
    st.text(max_size=12))


def _named(exc: BaseException, variable: str) -> None:
    assert isinstance(exc, ValueError) and variable in str(exc), f"{type(exc).__name__} not naming {variable}: {exc}"


@examples(ci=60)
@given(ENV_TEXT)
def test_fuzz_environment_spellings(value):
    """Every GEMM_KERNELS_ variable's parser (gemm_kernels._env and what reads through it): a
    value, or a ValueError naming the variable; never a spelling read as its opposite."""
    text = value.strip().lower()
    try:  # flags: the listed words only
        got = _env.parse_flag(value, "GEMM_KERNELS_X", None)
        assert got is (None if not text else text in _env.TRUE) and (not text or text in _env.TRUE + _env.FALSE)
    except ValueError as exc:
        _named(exc, "GEMM_KERNELS_X")
        assert text and text not in _env.TRUE + _env.FALSE, value
    try:  # a path, or off
        got = _env.parse_path_or_off(value, "GEMM_KERNELS_P")
        path = os.path.expanduser(value.strip())
        assert got == (None if not text else "off" if text in _env.PATH_OFF else path), (value, got)
    except ValueError as exc:
        _named(exc, "GEMM_KERNELS_P")
        assert (text in _env.TRUE or os.path.expanduser(value.strip()).startswith("~")) and text not in _env.PATH_OFF, \
            value
    try:
        arch = runtime.parse_arch(value)
        assert arch in runtime.ARCH_SHARED_MEMORY, (value, arch)
    except ValueError as exc:
        _named(exc, runtime.ARCH_ENV)
    RAN["_env parsers"] += 1
    if "\x00" in value:  # no environment holds a NUL
        return
    with pytest.MonkeyPatch.context() as mp:
        for variable in (runtime.AUTOTUNE_ENV, tuning_cache.ENV, lab_progress.ENV, runtime.MEMORY_GB_ENV, exam.ENV):
            mp.setenv(variable, value)
        readers = {runtime.AUTOTUNE_ENV: runtime.autotune_mode, tuning_cache.ENV: tuning_cache.cache_directory,
                   lab_progress.ENV: lab_progress.progress_path, runtime.MEMORY_GB_ENV: lambda: _env.number(
                       runtime.MEMORY_GB_ENV), exam.ENV: lambda: exam.enabled(os.environ[exam.ENV])}
        for variable, read in readers.items():
            try:
                got = read()
            except ValueError as exc:
                _named(exc, variable)
                continue
            if variable == runtime.MEMORY_GB_ENV:
                assert got is None or math.isfinite(got), (value, got)
            elif variable == runtime.AUTOTUNE_ENV:
                assert got == ("small" if text == "small" else "off" if text in _env.FALSE else "full"), (value, got)
            RAN["environment readers"] += 1


# ----------------------------------------------------------------------------- files a learner or teacher hands us
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=3), max_leaves=8)


def _json_nodes(doc, path=()):
    """Every (container path, key) of a JSON document, depth first."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield path, key
        yield from _json_nodes(value, (*path, key))


@st.composite
def damaged(draw, good: bytes, json_doc: bool = True):
    """``good`` (a valid file's bytes) damaged one way: random bytes, truncated, a byte changed,
    not UTF-8, a byte-order mark, nested deeply, or (JSON) one node replaced by any JSON value."""
    how = draw(st.sampled_from(["as_is", "random", "truncated", "byte", "not_utf8", "bom", "nested", "node", "node",
                                "empty"]))
    if how == "random":
        return how, draw(st.binary(max_size=200))
    if how == "truncated":
        return how, good[:draw(st.integers(0, max(len(good) - 1, 0)))]
    if how in ("byte", "not_utf8") and good:
        i = draw(st.integers(0, len(good) - 1))
        new = b"\xff\xfe" if how == "not_utf8" else bytes([draw(st.integers(0, 255))])
        return how, good[:i] + new + good[i + 1:]
    if how == "bom":
        return how, b"\xef\xbb\xbf" + good
    if how == "nested":
        n = draw(st.sampled_from([50, 5000, 200_000]))
        return how, (b'{"a":' * n + b"1" + b"}" * n) if draw(st.booleans()) else b"[" * n + good + b"]" * n
    if how == "node" and json_doc:
        doc = json.loads(good)
        nodes = list(_json_nodes(doc))
        if nodes:
            path, key = nodes[draw(st.integers(0, len(nodes) - 1))]
            parent = doc
            for step in path:
                parent = parent[step]
            parent[key] = draw(JSON_VALUES)
        return how, json.dumps(doc).encode()
    if how == "empty":
        return how, b""
    return "as_is", good


def _progress_record() -> bytes:
    entries = {f"{ex.notebook}/{ex.title}": {"status": "wrong", "updated": "2026-01-01T00:00:00"}
               for ex in lab_progress.exercises()[:3]}
    return json.dumps({"version": lab_progress.VERSION, "exercises": entries}).encode()


@examples(ci=15)
@given(st.data())
def test_fuzz_a_damaged_progress_file(data):
    """gk.lab.progress() shows a table whatever the file holds; the next check's record is kept, the
    file's readable entries with it, and a damaged file is set aside whole (never lost)."""
    good = _progress_record()
    how, content = data.draw(damaged(good))
    exercise = lab_progress.exercises()[data.draw(st.integers(0, 3))]
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a damaged file is warned about (that is the point)
        path = Path(tmp) / "progress.json"
        path.write_bytes(content)
        mp.setenv(lab_progress.ENV, str(path))
        table = gk.lab.progress()
        assert str(table) and table._repr_html_(), how
        module = f"{lab_progress.EXERCISES_PACKAGE}.{exercise.notebook.split('_', 1)[1]}"
        lab_progress.record(module, exercise.title, "correct")
        after = json.loads(path.read_text(encoding="utf-8"))
        assert lab_progress._valid(after), (how, after)
        key = f"{exercise.notebook}/{exercise.title}"
        assert after["exercises"][key]["status"] == "correct", (how, after)
        try:
            before = json.loads(content.decode("utf-8"))
        except (ValueError, RecursionError):
            before = None
        if lab_progress._valid(before):  # a valid record loses nothing
            assert set(before["exercises"]) <= set(after["exercises"]), how
        else:  # a damaged one is kept aside, byte for byte
            assert any(p.read_bytes() == content for p in Path(tmp).glob("progress.json.corrupt*")), how
        assert dict(((ex.notebook, ex.title), status) for ex, status, *_ in gk.lab.progress().rows)[
            (exercise.notebook, exercise.title)] == "correct", how
    RAN["progress file"] += 1


def _tuning_kernel():
    from gemm_kernels.kernels.matmul import _matmul_kernel

    return _matmul_kernel, [_config(), _config(BLOCK_M=16), _config(num_warps=2)]


@examples(ci=15)
@given(st.data())
def test_fuzz_a_damaged_tuning_cache_file(data):
    """A tuning file of any content: its picks read (or a warning and none), a new pick kept, the
    file rewritten valid with every pick that was a config; never an exception."""
    kernel, cfgs = _tuning_kernel()
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mp.setenv(tuning_cache.ENV, tmp)
        writer = tuning_cache.DiskPicks(kernel, cfgs, "-fuzz")
        writer.put(("good",), cfgs[1])
        good = writer.path().read_bytes()
        how, content = data.draw(damaged(good))
        picks = tuning_cache.DiskPicks(kernel, cfgs, "-fuzz")
        picks.path().write_bytes(content)
        got = picks.get(("good",), cfgs)
        assert got is None or got in cfgs, how
        if how == "as_is":
            assert got is cfgs[1]
        picks.put(("new",), cfgs[2])
        again = tuning_cache.DiskPicks(kernel, cfgs, "-fuzz")
        assert again.get(("new",), cfgs) is cfgs[2], how
        assert json.loads(again.path().read_text(encoding="utf-8"))["picks"], how
    RAN["tuning cache file"] += 1


@examples(ci=15)
@given(st.sampled_from(["csv", "meta", "md"]), st.data())
def test_fuzz_damaged_results_files(which, data):
    """The committed results' readers on a damaged copy of one file: rows, or a ResultsFileError
    naming the file; show_committed prints what is readable, warning about the rest."""
    suite = "order"
    files = {"csv": f"{suite}.csv", "meta": results.META_JSON, "md": results.RESULTS_MD}
    how, content = data.draw(damaged((results.BENCH_DIR / files[which]).read_bytes(), json_doc=which == "meta"))
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        directory = Path(tmp)
        for kind, name in files.items():
            (directory / name).write_bytes(content if kind == which else (results.BENCH_DIR / name).read_bytes())
        path = directory / files[which]
        readers = {"csv": results.read_csv, "meta": results.read_json, "md": results.read_text}
        for read in (readers[which], lambda p: results.committed_rows(suite, directory)):
            try:
                read(path)
            except results.ResultsFileError as exc:
                assert str(path) in str(exc) or str(directory / files["csv"]) in str(exc), (how, exc)
        with contextlib.redirect_stdout(io.StringIO()) as shown:
            found = results.show_committed(suite, directory)
        assert found is not None and shown.getvalue(), how
    RAN["results files"] += 1


#: two of the course's notebooks, read once (their student copies are what the fuzzing damages)
STUDENT_SOURCES = ("00_start_here.ipynb", "04_kernel_fusion.ipynb")


@examples(ci=8)
@given(st.data())
def test_fuzz_a_damaged_student_copy(data):
    """``make lab`` with one student copy damaged (bytes, JSON, its metadata or cells hand-edited):
    the other copy is written, the damaged one is kept or backed up byte for byte, never lost."""
    force, merge = data.draw(st.booleans()), data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src, dest = Path(tmp) / "src", Path(tmp) / "dest"
        src.mkdir()
        for name in STUDENT_SOURCES:
            shutil.copy(student.REPO_ROOT / "notebooks" / name, src / name)
        student.write_student_copies(src, dest)
        target = dest / STUDENT_SOURCES[0]
        how, content = data.draw(damaged(target.read_bytes()))
        target.write_bytes(content)
        (dest / STUDENT_SOURCES[1]).unlink()
        done = student.write_student_copies(src, dest, force=force, merge=merge)
        assert dest / STUDENT_SOURCES[1] in done.written, (how, done)
        kept = [p for p in dest.iterdir() if p.name.startswith(STUDENT_SOURCES[0])]
        if not any(p.read_bytes() == content for p in kept):  # neither in place nor as a .bak: rewritten, so
            # it held none of the learner's work: its cells (id, type, source) those written now, none run
            mine = nbformat.reads(content.decode("utf-8"), as_version=4)
            now = nbformat.read(target, as_version=4)
            assert [[c.get("id"), c.get("cell_type"), c.get("source")] for c in mine.cells] == [
                [c.id, c.cell_type, c.source] for c in now.cells], (how, done)
            assert not any(c.get("outputs") or c.get("execution_count") for c in mine.cells), (how, done)
        for path in done.written + done.merged:  # what it wrote is a notebook (a kept copy stays as it was)
            nbformat.validate(nbformat.read(path, as_version=4))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert student.main([str(src), str(dest)]) in (0, 1), how
    RAN["student copies"] += 1


def test_no_error_is_left_pending():
    """The device-side error records (grouped_mm's offs, Stream-K's hand-over): on the CPU, where every
    check is on the host, nothing the fuzzing ran may leave one raised."""
    assert gk.raise_pending_offs_error() is None and gk.raise_pending_streamk_error() is None
