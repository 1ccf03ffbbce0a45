"""Property-based fuzzing (Hypothesis) of the package's public entry points (``gk._PUBLIC``).

Every call gets shapes (0, 1, ragged), layouts (transposed, sliced, large strides, lazily negated,
conjugated, expanded, sparse), dtypes, options in their odd spellings (``8.0`` for 8, ``True`` for
1, ``"RELU"``), requires-grad inputs and non-finite values, and must either

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

``make test`` runs the ``ci`` profile (few examples per entry point, derandomized: the same
inputs every run, about a minute of interpreter time on 2 cores); ``make fuzz`` the ``long``
profile (``GEMM_KERNELS_FUZZ=long``: many more, random; ``GEMM_KERNELS_FUZZ_EXAMPLES=N`` sets
the count).  The inputs run and refused per entry point are printed (``-s``) and appended to
``$GEMM_KERNELS_FUZZ_REPORT`` when set (``make fuzz`` prints that file).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gemm_kernels as gk  # noqa: E402
from gemm_kernels import DEVICE, runtime  # noqa: E402
from gemm_kernels.kernels import checks, fp8  # noqa: E402
from gemm_kernels.kernels.epilogue import ACTIVATIONS  # noqa: E402
from gemm_kernels.testing import TOLERANCES, rel_err  # noqa: E402

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


def call(fn, args: dict, names, context: str, *, must_fail: str | None = None):
    """``fn(**args)``: its result, or None after checking the error is clear.  ``must_fail``: why
    this call must raise (then returning is a failure)."""
    try:
        out = fn(**args)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001  (judged by assert_clear)
        what = getattr(fn, "__name__", str(fn))
        if not (type(exc) is RuntimeError and re.match(rf"{what} needs ", str(exc))):  # this machine cannot run it
            assert_clear(exc, names, context)
        REFUSED[what] += 1
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
    if refusal and refusal.startswith("bad option"):
        names = set(eval(refusal[len("bad option "):]))  # noqa: S307  (our own list): the option must be named
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
    bad_offs = any(o < 0 or o > T for o in offs) or any(x > y for x, y in zip(offs, offs[1:]))
    return dict(T=T, E=E, K=K, N=N, dtype=dtype, offs=offs_t, kind=kind if (bad_offs or kind in ("int64", "short"))
                else "valid", layout_x=draw(LAYOUT), layout_w=draw(LAYOUT),
                check_offs=draw(st.sampled_from([None, None, True, False, 1])),
                tma=draw(st.sampled_from([None, None, False, True, 0])))


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
              f"x {case['layout_x']}, w {case['layout_w']}, offs {case['offs'].tolist()} ({case['kind']}), " \
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
    a, sa = fp8.quantize_fp8(xa.to(DEVICE), ga, dtype=qdtype)
    b, sb = fp8.quantize_fp8(xb.to(DEVICE).t(), gb, dtype=qdtype)
    if dtype not in FP8:
        a = a.float().to(dtype)
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
    out_dtypes, fast, promote = [torch.bfloat16, torch.float16, torch.float32], [False, True], [128, 32, 64]
    if not valid:
        out_dtypes, fast, promote = out_dtypes + [torch.float64], fast + [1], promote + [128.0, 16, True]
    options = dict(out_dtype=draw(st.sampled_from(out_dtypes)), use_fast_accum=draw(st.sampled_from(fast)),
                   promote_every=draw(st.sampled_from(promote)))
    return dict(**tensors, bias=bias, **options), dict(M=M, N=N, K=K, scaling=scaling, dtype=dtype, **layouts)


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
    if args["out_dtype"] not in fp8.OUT_DTYPES or not isinstance(args["use_fast_accum"], bool) or (
            type(args["promote_every"]) is not int or args["promote_every"] not in fp8.PROMOTE_CHOICES):
        refusal = refusal or "a bad option"
    grads = [k for k in ("a", "b", "scale_a", "scale_b", "bias") if args[k] is not None and args[k].requires_grad]
    if grads and torch.is_grad_enabled():
        refusal = refusal or f"{grads} require grad (no backward)"
    names = {*args, "M", "N", "K", "inputs"}
    out = call(fp8.scaled_mm, args, names, context, must_fail=refusal)
    RAN["scaled_mm"] += 1
    if out is None:
        return
    ref = fp8.scaled_mm_ref(*(logical(args[k]).to(args[k].dtype) if args[k].dtype not in checks._ONE_BYTE_FLOATS
                              else checks.resolved_copy(args[k]) if args[k].is_neg() else args[k]
                              for k in ("a", "b", "scale_a", "scale_b")),
                            bias=None if args["bias"] is None else logical(args["bias"]), out_dtype=torch.float64)
    assert out.dtype == args["out_dtype"]
    tolerance_dtype = torch.float8_e4m3fn if args["out_dtype"] == torch.bfloat16 else args["out_dtype"]
    assert_matches(out, ref, tolerance_dtype, context)


@examples(ci=25)
@given(moe_calls(dtypes=FP8, k_multiple=16), st.data())
def test_fuzz_scaled_grouped_mm(case, data):
    T, K, N, E = case["T"], case["K"], case["N"], case["E"]
    x, sx = fp8.quantize_fp8(data.draw(values((T, K))).to(DEVICE), "row", dtype=case["dtype"])
    w, sw = fp8.quantize_experts(data.draw(values((E, K, N))).to(DEVICE), dtype=case["dtype"])
    sx = sx.reshape(T)
    layout = data.draw(st.sampled_from(["as_is"] * 3 + ["negated_scale_w", "negated_scale_x", "sparse_scale_x",
                                                         "grad_x", "strided_scale_w", "wrong_shape"]))
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
    args = dict(x=x, w=w, scale_x=sx, scale_w=sw, offs=case["offs"], tma=case["tma"], check_offs=case["check_offs"],
                out_dtype=torch.float32)
    refusal = {"sparse_scale_x": "sparse", "grad_x": "x requires grad", "wrong_shape": "scale_x's shape"}.get(layout)
    if layout == "strided_scale_w" and sw.numel() and sw.stride(-1) != 1:
        refusal = "scale_w not contiguous in N"
    if case["kind"] in ("int64", "short"):
        refusal = refusal or f"offs {case['kind']}"
    for flag in ("check_offs", "tma"):
        if case[flag] is not None and not isinstance(case[flag], bool):
            refusal = refusal or f"{flag} must be a bool"
    trusted = case["check_offs"] is False and case["kind"] != "valid"
    if case["kind"] not in ("valid", "int64", "short") and not trusted and not runtime.on_gpu():
        refusal = refusal or "a bad offs, checked on the host"
    context = f"scaled_grouped_mm(T={T}, E={E}, K={K}, N={N}, {case['dtype']}, {layout}, offs " \
              f"{case['offs'].tolist()} ({case['kind']}), tma={case['tma']!r}, check_offs={case['check_offs']!r})"
    names = {*args, "T", "K", "E", "inputs", "scaled_grouped_mm"}
    out = call(fp8.scaled_grouped_mm, args, names, context, must_fail=refusal)
    RAN["scaled_grouped_mm"] += 1
    if out is None or trusted:
        return
    ref = fp8.scaled_grouped_mm_ref(x, w, sx, sw, case["offs"], out_dtype=torch.float64)
    assert_matches(out, ref, torch.float32, context)


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


def test_no_error_is_left_pending():
    """The device-side error records (grouped_mm's offs, Stream-K's hand-over): on the CPU, where every
    check is on the host, nothing the fuzzing ran may leave one raised."""
    assert gk.raise_pending_offs_error() is None and gk.raise_pending_streamk_error() is None
