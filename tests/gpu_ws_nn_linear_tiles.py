"""Every ``matmul_ws`` tile, and a 128 x 128 cooperative one, on the ``nn-linear`` suite's rows that
``matmul_auto`` sends to ``matmul_ws`` (M >= 127), beside cuBLAS and ``matmul_auto`` (GPU only):
``OUT=DIR python tests/gpu_ws_nn_linear_tiles.py [SECONDS]``.  bf16, do_bench medians (L2 flushed)
of 3 interleaved rounds, each output's error against float64 recorded; rows at 257, 777 and 2049
tokens first, stopping after SECONDS.  Writes DIR/tiles51.csv; PERF_NOTES entry 51 reads it."""
import os
import statistics
import sys
import time

import torch
import triton

from gemm_kernels import matmul_auto
from gemm_kernels.bench import suites
from gemm_kernels.kernels import matmul_ws as mw
from gemm_kernels.models.tiles import ws_default_tile
from gpu_sweep_rows import write_rows

OUT = os.environ.get("OUT", ".")
CANDIDATES = {
    "cooperative": mw.CONFIGS["cooperative"],
    "coop_128x128": dict(SCHEDULE="cooperative", WG_M=64, BLOCK_N=128, BLOCK_K=64, STAGES=6, EPI_SPLIT=1),
    "pingpong": mw.CONFIGS["pingpong"],
    "pingpong_64x256": mw.CONFIGS["pingpong_64x256"],
    "pingpong_64x128": mw.CONFIGS["pingpong_64x128"],
    "cooperative_256x128": mw.CONFIGS["cooperative_256x128"],
}
captured = []
_orig_keep = mw._keep
mw._keep = lambda key, plan: (captured.append(plan), _orig_keep(key, plan))[1]


def plan_for(a, b, cfg):
    mw._launch(a, b, config=cfg)
    plan = captured[-1]
    return lambda: plan(a, b, None, None)


shapes = [s for s in suites.nn_linear_shapes("full") if s[2] >= 127]
shapes.sort(key=lambda s: s[2] not in (257, 777, 2049))  # the misses first
budget = float(sys.argv[1]) if len(sys.argv) > 1 else 200
start = time.time()
rows = []
for i, (model, proj, M, N, K, row_major) in enumerate(shapes):
    if time.time() - start > budget:
        print("budget reached at row", i, flush=True)
        break
    x, b = suites._linear_inputs(M, N, K, torch.bfloat16, row_major, seed=i)
    ref = (x.double() @ b.double())
    fns = {"cuBLAS": lambda: torch.matmul(x, b), "auto": lambda: matmul_auto(x, b)}
    for name, cfg in CANDIDATES.items():
        try:
            fns[name] = plan_for(x, b, cfg)
        except Exception as e:  # noqa: BLE001
            print("skip", name, M, N, K, type(e).__name__, str(e)[:120], flush=True)
    errs = {}
    for name, f in fns.items():
        out = f().double()
        errs[name] = ((out - ref).norm() / ref.norm()).item()
    times = {n: [] for n in fns}
    for _ in range(3):
        for n, f in fns.items():
            times[n].append(triton.testing.do_bench(f, warmup=10, rep=40, return_mode="median"))
    med = {n: statistics.median(t) for n, t in times.items()}
    pick = ws_default_tile(M, N, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    for n in fns:
        rows.append(dict(model=model, projection=proj, M=M, N=N, K=K, layout="row" if row_major else "Wt",
                         provider=n, ms=med[n], spread=(max(times[n]) - min(times[n])) / med[n],
                         vs_cublas=med["cuBLAS"] / med[n], rel_err=errs[n], rule_pick=pick))
    best = min((n for n in fns if n not in ("cuBLAS", "auto")), key=med.get)
    print(f"{model[:12]:12} {proj[:7]:7} {M:5} {N:6} {K:6} auto {med['cuBLAS']/med['auto']:.3f} "
          f"best {best} {med['cuBLAS']/med[best]:.3f} coop128 {med['cuBLAS']/med.get('coop_128x128', 1e9):.3f} "
          f"pick {pick}", flush=True)
    write_rows(os.path.join(OUT, "tiles51.csv"), list(rows[0]), rows)  # after every row: a timeout keeps them
print("rows", len(rows), "seconds", round(time.time() - start))
