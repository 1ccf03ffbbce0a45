"""What notebook 10 (FP8 GEMM) shows, read from compiles and from the committed measurements.

* :func:`b_layout_comparison`: the pointer-load GEMM of notebook 02 compiled for sm_90 with fp8
  and fp16 operands, B column-major (K-major, ``W.t()``) or row-major: what the compiler adds to
  put a row-major fp8 B into the K-major order fp8 wgmma reads (byte permutes in registers, B
  taken out of the asynchronous copies), counted in the TTGIR and the PTX.
* :func:`promotion_code`: ``scaled_mm``'s kernel compiled per promotion interval: its wgmma and
  the fp32 adds (``add.f32``, ``fma.rn.f32`` for block scales) that promotion costs, beside the
  accumulator elements each thread holds.
* :func:`error_series`, :func:`model_ratios`: the committed H100 errors of
  ``bench.fp8_numerics`` by provider, and the accumulation *model*'s rows against the measured ones.
* :func:`live_errors`: the same measurement on this machine, at small K (on a CPU the
  interpreter sums fp8 products exactly in fp32: every interval gives the same error).
* :func:`committed_summary`: a committed suite (``fp8``, ``fp8-moe``) per case: the vendor's
  kernel, our fastest, the ratio, TFLOP/s and the share of the fp8 peak.

Everything here compiles or reads files; only :func:`live_errors` runs kernels.
"""

from __future__ import annotations

import re

import torch
import triton

from .. import runtime

#: PTX and TTGIR patterns counted by :func:`b_layout_comparison`: name -> (stage, regex)
LAYOUT_COUNTS = {
    "async copies (TTGIR)": ("ttgir", r"ttg\.async_copy_global_to_local"),
    "loads to registers (TTGIR)": ("ttgir", r"= tt\.load\b"),
    "cp.async": ("ptx", r"\bcp\.async\.c[ag]\b"),
    "ld.global": ("ptx", r"\bld\.global\b"),
    "prmt (byte permutes)": ("ptx", r"\bprmt\.b32\b"),
    "st.shared": ("ptx", r"\bst\.shared\b"),
}
_WGMMA = r"\bwgmma\.mma_async\.sync\.aligned\.[\w.]+"


def _layout_request(dtype, b_col_major: bool, size: int):
    from ..kernels import matmul
    from .compile_view import _request

    a = torch.zeros(size, size, dtype=dtype)
    b = torch.zeros(size, size, dtype=dtype)
    if b_col_major:
        b = b.t().contiguous().t()  # W.t() of an nn.Linear weight: K-major
    c = torch.zeros(size, size, dtype=torch.bfloat16)
    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=c, trace_ptr=c, M=size, N=size, K=size,
                stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
                stride_cm=c.stride(0), stride_cn=c.stride(1), GROUPED=True, GROUP_SIZE_M=8, HAS_BIAS=False,
                ACTIVATION=None, WIDEN=False, TRACE=False)
    block_k = 128 if dtype.itemsize == 1 else 64  # the same bytes per K block
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": block_k}, num_warps=4, num_stages=3)
    name = f"matmul[{str(dtype).replace('torch.', '')}, B {'column' if b_col_major else 'row'}-major]"
    return _request(matmul._matmul_kernel, args, "sm_90", config, None, None, name, {})


def b_layout_comparison(dtypes=(torch.float8_e4m3fn, torch.float16), size: int = 512) -> dict:
    """``(dtype name, "column-major" | "row-major") -> {"wgmma": the PTX wgmma, "shared": bytes,
    **counts of LAYOUT_COUNTS}`` for notebook 02's pointer-load GEMM compiled for sm_90 with B
    in either layout (A row-major, 128x128 tiles, 3 stages; BLOCK_K 128 for fp8, 64 for fp16)."""
    from .compile_view import compile_many

    cases = [(dtype, col) for dtype in dtypes for col in (True, False)]
    views = compile_many([_layout_request(dtype, col, size) for dtype, col in cases])
    out = {}
    for (dtype, col), view in zip(cases, views):
        stages = {"ptx": view.ptx, "ttgir": view.ttgir}
        row = {"wgmma": sorted(set(re.findall(_WGMMA, view.ptx))), "shared": view.shared}
        row.update({name: len(re.findall(pattern, stages[stage])) for name, (stage, pattern) in LAYOUT_COUNTS.items()})
        out[str(dtype).replace("torch.", ""), "column-major" if col else "row-major"] = row
    return out


def promotion_code(promotes=(128, 32, None), scaling: str = "tensor") -> list[dict]:
    """``scaled_mm``'s kernel (TMA, its first GPU config) compiled for sm_90 per promotion
    interval (None: fast accumulation), then the block-scaled one: per compile ``{"name",
    "wgmma", "add.f32", "fma.rn.f32", "acc_per_thread", "block_k", "promote"}`` (PTX counts for
    the whole kernel; ``acc_per_thread``: fp32 accumulator elements each thread holds)."""
    from .compile_examples import fp8_example
    from .compile_view import compile_many

    examples = [(fp8_example(scaling, promote=p), p) for p in promotes] + [(fp8_example("block"), "block")]
    views = compile_many([ex.request(90) for ex, _ in examples])
    out = []
    for (ex, promote), view in zip(examples, views):
        cfg = ex.config.kwargs
        out.append({
            "name": ex.name, "promote": promote, "block_k": cfg["BLOCK_K"],
            "wgmma": sorted(set(re.findall(_WGMMA, view.ptx))),
            "add.f32": len(re.findall(r"^\s*add\.f32\b", view.ptx, flags=re.MULTILINE)),
            "fma.rn.f32": len(re.findall(r"^\s*fma\.rn\.f32\b", view.ptx, flags=re.MULTILINE)),
            "acc_per_thread": cfg["BLOCK_M"] * cfg["BLOCK_N"] // (32 * view.num_warps),
            "registers": view.num_regs, "spill_bytes": view.spill_bytes,
        })
    return out


def kernel_doc(kernel) -> str:
    """The docstring of a ``@triton.jit`` function (compiled or interpreted)."""
    import inspect

    from .compile_view import _python_function

    return inspect.getdoc(_python_function(kernel)) or ""


# ----------------------------------------------------------------------------- scales and outliers
def quantization_errors(outlier_scales=(50, 1e3, 1e4, 1e5), granularities=("tensor", "row", (1, 128)),
                        rows: int = 256, cols: int = 1024, seed: int = 0, dtype=torch.float8_e4m3fn) -> list[dict]:
    """Quantize ``models.fp8_numerics.outlier_activations`` (4 outlier channels ``outlier_scale``
    times larger) at each granularity: per case ``{"outliers", "granularity", "ordinary_err"
    (relative error of the ordinary channels), "outlier_err", "subnormal" (share of the ordinary
    channels' values stored below the smallest normal, zero included)}``."""
    from ..kernels import fp8
    from ..models.fp8_numerics import outlier_activations

    tiny = torch.finfo(dtype).tiny
    out = []
    for size in outlier_scales:
        x = outlier_activations(rows, cols, outlier_scale=size, generator=torch.Generator().manual_seed(seed))
        ordinary = x.abs().amax(0) < 10  # N(0, 1) channels: |x| < 10 in every row
        for granularity in granularities:
            q, scale = fp8.quantize_fp8(x, granularity, dtype=dtype)
            error = fp8.dequantize(q, scale, granularity) - x.double()
            xd = x.double()
            out.append({"outliers": size, "granularity": granularity,
                        "ordinary_err": (error[:, ordinary].norm() / xd[:, ordinary].norm()).item(),
                        "outlier_err": (error[:, ~ordinary].norm() / xd[:, ~ordinary].norm()).item(),
                        "subnormal": (q.float().abs()[:, ordinary] < tiny).float().mean().item()})
    return out


# ----------------------------------------------------------------------------- the committed errors
def _matches(row: dict, provider: str, match: dict) -> bool:
    return row["provider"] == provider and all(row.get(k) == v for k, v in match.items())


def error_series(data: dict, kind: str, provider: str = "scaled_mm", **match) -> tuple[list, list]:
    """``(Ks, rel_errs)`` of ``data["errors"]`` (``bench.fp8_numerics.load()``) for one kind and
    provider, rows filtered by ``match`` (``promote=128``, ``use_fast_accum=True``, ``bits=13``)."""
    rows = sorted((r for r in data["errors"] if r["kind"] == kind and _matches(r, provider, match)),
                  key=lambda r: r["K"])
    return [r["K"] for r in rows], [r["rel_err"] for r in rows]


def model_ratios(data: dict, bits: int = 13) -> dict:
    """``(kind, promote) -> [(K, model error / measured error), ...]``: the committed rows of the
    accumulation model (``mantissa_bits=bits``) over ``scaled_mm``'s measured ones, same operands."""
    out = {}
    for kind in sorted({r["kind"] for r in data["errors"]}):
        for promote in (None, 128):
            ks, measured = error_series(data, kind, promote=promote)
            mks, model = error_series(data, kind, "model", promote=promote, bits=bits)
            if ks and ks == mks:
                out[kind, promote] = [(k, m / g) for k, m, g in zip(ks, model, measured)]
    return out


# ----------------------------------------------------------------------------- measured here
def fp8_operands(kind: str, rows: int, K: int, seed: int):
    """``(a, b, scale_a, scale_b)``: e4m3 per-tensor-scaled ``a`` [rows, K] and ``b`` [K, rows]
    (column-major) on this machine's device, from N(0, 1) values ("signed") or their magnitudes
    ("positive"), as ``bench.fp8_numerics`` makes them."""
    from ..kernels import fp8

    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(rows, K, generator=gen), torch.randn(rows, K, generator=gen)
    if kind == "positive":
        x, w = x.abs(), w.abs()
    a, sa = fp8.quantize_fp8(x.to(runtime.DEVICE))
    b, sb = fp8.quantize_fp8(w.to(runtime.DEVICE).t())
    return a, b, sa, sb


def live_errors(Ks=(256, 1024, 4096), kinds=("signed", "positive"), promotes=(32, 128, None), rows: int = 256,
                vendor: bool = True) -> list[dict]:
    """Relative errors of ``scaled_mm`` (fp32 output) against float64 on this machine, rows like
    the committed ones (``kind, K, provider, promote | use_fast_accum, rel_err``); with ``vendor``
    and a GPU that has it, ``torch._scaled_mm`` in both modes too."""
    from ..kernels import fp8
    from ..testing import rel_err

    out = []
    for kind in kinds:
        for i, K in enumerate(Ks):
            a, b, sa, sb = fp8_operands(kind, rows, K, seed=i)
            ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
            for p in promotes:
                c = fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=p is None,
                                  promote_every=p or fp8.PROMOTE_EVERY)
                out.append({"kind": kind, "K": K, "provider": "scaled_mm", "promote": p, "rel_err": rel_err(c, ref)})
            if vendor and runtime.on_gpu() and hasattr(torch, "_scaled_mm"):
                for fast in (False, True):
                    c = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast)
                    out.append({"kind": kind, "K": K, "provider": "torch._scaled_mm", "use_fast_accum": fast,
                                "rel_err": rel_err(c, ref)})
    return out


# ----------------------------------------------------------------------------- the committed suites
#: our provider -> the vendor's that does the same work (the first one a case has): precise against
#: precise, fast accumulation against fast accumulation, block scales against torch's block-wise recipe
PAIRS = {"scaled_mm": ("torch._scaled_mm", "torch block-wise"), "scaled_mm fast": ("torch._scaled_mm fast",),
         "scaled_grouped_mm": ("torch._scaled_grouped_mm",)}


def paired_rows(suite: str, directory=None) -> list[dict]:
    """One dict per (case, our provider) of a committed suite, against the vendor provider doing the
    same work (:data:`PAIRS`): ``panel, case, ours, vendor, ratio`` (vendor time / ours: above 1,
    ours is faster), ``tflops`` (ours), ``pct_peak`` (of the GPU's dense fp8 peak, ``bench.core``)
    and ``vendor_kernel``.  FileNotFoundError when the suite is not committed."""
    from ..bench.core import FP8_DENSE_PEAK_TFLOPS, peak_entry
    from ..results import committed_rows, load_committed

    rows = committed_rows(suite, directory)
    device = (load_committed(suite, directory) or {}).get("meta", {}).get("device", "?")
    peak = FP8_DENSE_PEAK_TFLOPS.get(peak_entry(str(device)) or "")
    out = []
    for key in dict.fromkeys((r["panel"], r["case"]) for r in rows):
        same = {r["provider"]: r for r in rows if (r["panel"], r["case"]) == key and r.get("time_ms")}
        for ours, vendors in PAIRS.items():
            vendor = next((v for v in vendors if v in same), None)
            if ours not in same or vendor is None or same[ours].get("ok") != "True":
                continue
            mine, theirs = same[ours], same[vendor]
            tflops = float(mine["tflops"]) if mine.get("tflops") else float("nan")
            out.append({"panel": key[0], "case": key[1], "ours": ours, "vendor": vendor,
                        "ratio": float(theirs["time_ms"]) / float(mine["time_ms"]), "tflops": tflops,
                        "pct_peak": 100 * tflops / peak if peak else float("nan"), "device": device,
                        "vendor_kernel": theirs.get("vendor_kernel") or ""})
    return out


def _within(row: dict) -> str:
    """A case's name without the words its panel already says ("T=4096" of "Mixtral-8x7B up (uniform)")."""
    said = set(row["panel"].replace("(", " ").replace(")", " ").split())
    return " ".join(w for w in row["case"].split() if w not in said) or row["case"]


def committed_summary(suite: str, directory=None, detail: bool = False) -> str:
    """A committed suite (``fp8``, ``fp8-moe``) against the vendor, like for like (:data:`PAIRS`):
    per panel and pair, the cases, the geomean ratio (vendor time / ours: above 1, ours is
    faster), the lowest and highest with their cases, and our median share of the dense fp8 peak;
    ``detail``: one line per case instead.  Then the vendor's kernels, as ``torch.profiler`` named
    them.  A message when the suite is not committed yet."""
    import statistics

    from ..results import missing_message, short_gpu

    try:
        rows = paired_rows(suite, directory)
    except FileNotFoundError:
        return missing_message(suite)
    if not rows:
        return f"{suite}: no case with both our kernel and the vendor's"
    lines = [f"{suite} on {short_gpu(rows[0]['device'])}, like for like; ratio = vendor time / ours (above 1: ours "
             "is faster); % of the dense fp8 peak"]
    if detail:
        lines.append(f"{'case':40} {'ours':18} {'vendor':24} {'ratio':>6} {'TFLOP/s':>8} {'% peak':>7}")
        for r in rows:
            lines.append(f"{(r['panel'] + ': ' + r['case'])[:40]:40} {r['ours']:18} {r['vendor'][:24]:24} "
                         f"{r['ratio']:5.2f}x {r['tflops']:8.0f} {r['pct_peak']:6.1f}%")
    else:
        lines.append(f"{'panel':31} {'ours':18} {'vendor':24} {'cases':>5} {'geomean':>8}  {'lowest':33} "
                     f"{'highest':33} {'% peak':>7}")
        for group in dict.fromkeys((r["panel"], r["ours"], r["vendor"]) for r in rows):
            same = [r for r in rows if (r["panel"], r["ours"], r["vendor"]) == group]
            low, high = min(same, key=lambda r: r["ratio"]), max(same, key=lambda r: r["ratio"])
            geomean = statistics.geometric_mean(r["ratio"] for r in same)
            share = statistics.median(r["pct_peak"] for r in same)
            lines.append(f"{group[0][:31]:31} {group[1]:18} {group[2][:24]:24} {len(same):>5} {geomean:7.2f}x  "
                         f"{low['ratio']:5.2f}x {_within(low)[:26]:26} {high['ratio']:5.2f}x {_within(high)[:26]:26} "
                         f"{share:6.1f}%")
    kernels = list(dict.fromkeys(r["vendor_kernel"] for r in rows if r["vendor_kernel"]))
    if kernels:
        lines += ["the vendor's kernels (torch.profiler):"] + [f"  {k}" for k in kernels]
    return "\n".join(lines)
