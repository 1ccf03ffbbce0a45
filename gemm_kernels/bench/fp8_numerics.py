"""FP8 accumulation, measured on a GPU: how the error of an fp8 GEMM grows with K, with and without
promotion to fp32, for our ``scaled_mm`` and torch's ``_scaled_mm``, beside the CPU model of
``models.fp8_numerics``; and what each promotion interval costs in time.

    python -m gemm_kernels.bench.fp8_numerics --out images/bench/fp8_numerics.json

Inputs are e4m3 with per-tensor scales, outputs fp32 (so the bf16 rounding of the output does
not hide the accumulation).  "signed": N(0, 1) values, whose sums cancel; "positive": |N(0, 1)|,
whose running sum grows with K, the case the narrow accumulator handles worst.  Errors are
relative Frobenius errors against the float64 product of the same fp8 values.  Timings:
``triton.testing.do_bench`` medians (L2 flushed), the providers interleaved over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from .. import runtime

KS = (256, 1024, 4096, 16384, 65536)
ROWS = 256
PROMOTIONS = (32, 64, 128, None)
MODEL_BITS = (12, 13, 14, 15)
TIMED_SIZES = (4096, 8192)
KINDS = ("signed", "positive")
#: the committed measurement
COMMITTED = Path(__file__).resolve().parents[2] / "images" / "bench" / "fp8_numerics.json"


def _operands(kind: str, K: int, seed: int):
    from ..kernels import fp8

    gen = torch.Generator(device=runtime.DEVICE).manual_seed(seed)
    x = torch.randn(ROWS, K, device=runtime.DEVICE, generator=gen)
    w = torch.randn(ROWS, K, device=runtime.DEVICE, generator=gen)
    if kind == "positive":
        x, w = x.abs(), w.abs()
    a, sa = fp8.quantize_fp8(x)
    b, sb = fp8.quantize_fp8(w.t())
    return a, b, sa, sb


def errors(model: bool = True) -> list[dict]:
    """Relative error against float64 for every kind, K and provider (and the model's bit widths)."""
    from ..kernels import fp8
    from ..models import fp8_numerics
    from ..testing import rel_err

    rows = []
    for kind in KINDS:
        for i, K in enumerate(KS):
            a, b, sa, sb = _operands(kind, K, seed=i)
            ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
            for p in PROMOTIONS:
                out = fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=p is None,
                                    promote_every=p or fp8.PROMOTE_EVERY)
                rows.append({"kind": kind, "K": K, "provider": "scaled_mm", "promote": p, "rel_err": rel_err(out, ref)})
            if runtime.on_gpu():
                for fast in (False, True):
                    out = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast)
                    rows.append({"kind": kind, "K": K, "provider": "torch._scaled_mm", "use_fast_accum": fast,
                                 "rel_err": rel_err(out, ref)})
            if model:
                av, bv = (a.double() * sa.double()).cpu(), (b.double() * sb.double()).cpu()
                ref_cpu = ref.cpu()
                for bits in MODEL_BITS:
                    for p in (None, 128):
                        out = fp8_numerics.accumulate_model(av, bv, mantissa_bits=bits, promote_every=p)
                        rows.append({"kind": kind, "K": K, "provider": "model", "bits": bits, "promote": p,
                                     "rel_err": rel_err(out, ref_cpu)})
    return rows


def timings(rounds: int = 3) -> list[dict]:
    """TFLOP/s of ``scaled_mm`` at each promotion interval and of torch's two modes, per size."""
    from triton.testing import do_bench

    from ..kernels import fp8

    rows = []
    for n in TIMED_SIZES:
        gen = torch.Generator(device=runtime.DEVICE).manual_seed(n)
        a, sa = fp8.quantize_fp8(torch.randn(n, n, device=runtime.DEVICE, generator=gen))
        b, sb = fp8.quantize_fp8(torch.randn(n, n, device=runtime.DEVICE, generator=gen).t())
        calls = {f"scaled_mm promote {p}": (lambda p=p: fp8.scaled_mm(a, b, sa, sb, promote_every=p))
                 for p in PROMOTIONS if p}
        calls["scaled_mm fast"] = lambda: fp8.scaled_mm(a, b, sa, sb, use_fast_accum=True)
        calls["torch._scaled_mm"] = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        calls["torch._scaled_mm fast"] = lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                                                  use_fast_accum=True)
        for fn in calls.values():
            fn()  # compile and tune first
        samples = {name: [] for name in calls}
        names = list(calls)
        for r in range(rounds):
            for j in range(len(names)):
                name = names[(j + r) % len(names)]
                samples[name].append(do_bench(calls[name], warmup=25, rep=100))
        for name, ms in samples.items():
            t = statistics.median(ms)
            rows.append({"size": n, "provider": name, "ms": t, "tflops": 2 * n**3 / t / 1e9})
    return rows


def load(path: Path = COMMITTED) -> dict:
    """The committed measurement (``errors``, ``timings``, and where it ran)."""
    from ..results import read_json

    return read_json(Path(path))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="fp8_numerics.json")
    args = parser.parse_args(argv)
    if not runtime.on_gpu():
        raise SystemExit("fp8_numerics measures a GPU's fp8 tensor cores: run it on one")
    import triton

    result = {"gpu": runtime.gpu_name(), "torch": torch.__version__, "triton": triton.__version__,
              "rows": ROWS, "errors": errors(), "timings": timings()}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
