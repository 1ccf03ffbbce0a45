"""PERF_NOTES 58: fp8 `scaled_mm` (promoting every 128) with each tile's K loop cut into 1, 2, 3, 4
or 6 split units (and the rule's count), against torch._scaled_mm, at the fp8 suite's shapes with
few tiles (all with --every-shape), per-tensor and row-wise scales.
do_bench medians (L2 flushed), 3 interleaved rounds, each call the kept plan's launch
(``run_kept_scaled_mm``, as a user's repeated ``scaled_mm`` call; ``scaled_mm_ws`` builds a plan every
call, whose host time the first two runs timed); each split checked against float64 first.

    python fp8_split_sweep.py OUT.json [tensor] [row] [--every-shape | --rule-check]   # writes after every case

--rule-check: the shapes of RULE_CHECK instead (none in the suite), where the rule refitted to the
first timed sweep (``fit_split_cost.py``) splits, and four beside them where it keeps one K loop.
"""
import json
import sys

import torch
import triton
from triton.testing import do_bench

from gemm_kernels import runtime
from gemm_kernels.bench.suites import fp8_shapes
from gemm_kernels.kernels import fp8, matmul_ws
from gemm_kernels.models import tiles
from gemm_kernels.testing import rel_err

SPLITS = (1, 2, 3, 4, 6)
#: few tiles and a long K (prefill chunks of 256-512 tokens through LLM projections, a 512² output
#: with K = 16384); on 132 SMs the rule splits the first, second and fifth
RULE_CHECK = [("512x512 K=16384", 512, 512, 16384), ("Llama-3-8B down M=256", 256, 4096, 14336),
              ("Llama-3-8B down M=384", 384, 4096, 14336), ("DeepSeek-V3 QKV (q_a+kv_a) M=512", 512, 2112, 7168),
              ("DeepSeek-V3 q_a M=256", 256, 1536, 7168), ("Llama-3-8B O M=512", 512, 4096, 4096),
              ("DeepSeek-V3 o_proj-like M=256", 256, 7168, 2048)]


def main(out_path, scalings=("tensor", "row"), every_shape=False, rule_check=False):
    """every_shape: all of the fp8 suite's shapes; else those with fewer 128 x 256 tiles than SMs
    (where the rule may split) and two that fill the GPU (where it must not)."""
    sms = runtime.num_sms()
    shapes = RULE_CHECK if rule_check else [s for s in fp8_shapes("full") if every_shape or s[0] in ("4096^3", "DeepSeek-V3 QKV (q_a+kv_a) M=4096")
              or tiles.cdiv(s[1], 128) * tiles.cdiv(s[2], 256) <= sms]
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                num_sms=runtime.num_sms(), splits=SPLITS)
    rows = []
    for scaling in scalings:
        for label, M, N, K in shapes:
            g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
            x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
            w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g)
            x[:, :: max(1, K // 8)] *= 20
            ga, gb = fp8.granularities(scaling)
            a, sa = fp8.quantize_fp8(x, ga)
            b, sb = fp8.quantize_fp8(w.t(), gb)
            ref = fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64)
            vsb = sb if scaling == "tensor" else sb.reshape(1, N)
            fns = {"torch": lambda: torch._scaled_mm(a, b, sa, vsb, out_dtype=torch.bfloat16)}
            row = dict(scaling=scaling, case=label, M=M, N=N, K=K)
            row["tile"] = matmul_ws.fp8_tile(M, N, scaling)
            row["rule"] = tiles.fp8_ws_splits(M, N, K, row["tile"], num_sms=runtime.num_sms())
            for s in sorted({*SPLITS, row["rule"]}):  # the rule's count too (8 is not in SPLITS)
                key = ("entry58", scaling, label, s)
                out = matmul_ws.scaled_mm_ws(a, b, sa, sb, scaling, out_dtype=torch.bfloat16, bias=None,
                                             use_fast_accum=False, split_k=s, key=key)  # builds and keeps the plan

                def f(key=key):  # the kept plan's launch, as a user's repeated scaled_mm call runs it
                    return matmul_ws.run_kept_scaled_mm(key, a, b, sa, sb, None)

                row[f"err_{s}"] = rel_err(out, ref)
                out2 = f()
                row[f"same_bits_{s}"] = bool(torch.equal(out, out2))
                fns[f"split_{s}"] = f
            row["err_torch"] = rel_err(fns["torch"](), ref)
            times = {k: [] for k in fns}
            for _ in range(3):
                for k, fn in fns.items():
                    times[k].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))
            for k, t in times.items():
                row[f"{k}_us"] = round(sorted(t)[1] * 1e3, 2)
            best = min((s for s in SPLITS + (row["rule"],) if f"split_{s}_us" in row), key=lambda s: row[f"split_{s}_us"])
            row["best"] = best
            row["vs_torch_1"] = round(row["torch_us"] / row["split_1_us"], 3)
            row["vs_torch_best"] = round(row["torch_us"] / row[f"split_{best}_us"], 3)
            row["vs_torch_rule"] = round(row["torch_us"] / row[f"split_{row['rule']}_us"], 3)
            rows.append(row)
            print({k: v for k, v in row.items() if not k.startswith(("err", "same"))}, flush=True)
            with open(out_path, "w") as f:  # after every case: a run cut short keeps what it timed
                json.dump(dict(meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], tuple(a for a in sys.argv[2:] if not a.startswith("--")) or ("tensor", "row"),
         every_shape="--every-shape" in sys.argv, rule_check="--rule-check" in sys.argv)
