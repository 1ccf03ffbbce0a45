"""Which ``matmul_ws`` tile fits which shape, measured (GPU only):
``python tests/gpu_ws_tiles_sweep.py OUT.csv [--quick] [--part drawn,unseen,check]``.

For shapes whose token count M leaves a 128-row tile mostly empty (M = 257) or whose N is
narrow, every candidate tile of the warp-specialized kernel (``matmul_ws._launch(config=...)``),
``matmul_auto`` at its defaults and cuBLAS.  Part ``drawn``: the ``llm-linear`` suite's M = 257
rows and its narrow-N rows at M = 1000 (the rule is drawn from these).  Part ``unseen``: other
token counts and projection widths, to check the rule on shapes it was not drawn from.  Part
``check``: small squares, few-tile long-K shapes and M = 1000 rows where the rule moves the
pick.  ``split_k`` at its defaults beside.  bf16;
b = W.t() (an nn.Linear weight) and, for some, row-major.  GPU time of back-to-back calls in a
CUDA graph (``triton.testing.do_bench_cudagraph``), median; each row checked against a float64
reference first.  PERF_NOTES entry 33 reads the CSV.
"""

import itertools
import sys
import time

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import matmul_ws
from gpu_sweep_rows import timed_row, write_rows

WS_CANDIDATES = {  # name -> config (smem per CTA under 227 KiB at bf16, registers as the kernel's)
    "coop 128x256": dict(matmul_ws.CONFIGS["cooperative"]),
    "coop 256x128": dict(matmul_ws.CONFIGS["cooperative_256x128"]),
    "pingpong 128x128": dict(matmul_ws.CONFIGS["pingpong"]),
    "pingpong 64x256": dict(matmul_ws.CONFIGS["pingpong_64x256"]),
    "pingpong 64x128": dict(matmul_ws.CONFIGS["pingpong_64x128"]),
    # not a CONFIGS entry: 2 x 64 rows of 128 columns, 6 x 32 KiB + 2 x 8 KiB
    "coop 128x128": dict(SCHEDULE="cooperative", WG_M=64, BLOCK_N=128, BLOCK_K=64, STAGES=6, EPI_SPLIT=2),
}
# (N, K) of the llm-linear suite's M = 257 rows (b = W.t()), and its narrow-N rows at M = 1000
DRAWN = ([(257, n, k) for n, k in [
    (2112, 7168), (4096, 4096), (4096, 14336), (5120, 8192), (5120, 25600), (5120, 4096), (5120, 32768),
    (6144, 4096), (6144, 5120), (7168, 16384), (7168, 18432), (8192, 8192), (8192, 28672), (10240, 8192),
    (10240, 5120), (18432, 7168), (25600, 5120), (28672, 4096), (28672, 8192), (32768, 5120)]]
    + [(1000, n, k) for n, k in [(2112, 7168), (4096, 4096), (4096, 14336), (5120, 8192), (5120, 4096)]])
UNSEEN = list(itertools.product((129, 200, 385, 600, 777, 1500), ((3072, 4096), (4096, 11008), (11008, 4096),
                                                                 (2560, 8192))))
UNSEEN = [(m, n, k) for m, (n, k) in UNSEEN]
# where the rule moves a pick away from split-K or the 128 x 256 tile, beyond the shapes above:
# small squares, the stream-k suite's few-tile shapes, llm-linear rows at M = 1000
CHECK = [(n, n, n) for n in (256, 512, 768, 1024, 1536, 2048)] + [
    (512, 512, 16384), (1024, 1024, 8192), (768, 768, 12288), (1024, 2048, 8192),
    (1000, 5120, 25600), (1000, 5120, 32768), (1000, 6144, 4096), (1000, 6144, 5120)]


def operands(M, N, K, layout, dtype=torch.bfloat16):
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    w = torch.randn(N, K, device="cuda", dtype=dtype)
    return a, (w.t() if layout == "W.t()" else w.t().contiguous())


def main(path, quick=False, parts=("drawn", "unseen", "check")):
    rows, started = [], time.time()
    fields = ["part", "layout", "M", "N", "K", "provider", "config", "ms", "tflops", "vs_cublas", "rel_err", "error"]

    def record(part, layout, shape, provider, fn, a, b, base_ms=None, config=""):
        M, N, K = shape
        row = dict(part=part, layout=layout, M=M, N=N, K=K, provider=provider, config=config)
        rows.append(row)
        return timed_row(row, fn, a, b, base_ms, rep=20)

    cases = []
    if "drawn" in parts:
        cases += [("drawn", s, "W.t()") for s in (DRAWN[:3] if quick else DRAWN)]
    if "unseen" in parts:
        unseen = UNSEEN[:3] if quick else UNSEEN
        cases += [("unseen", s, "W.t()") for s in unseen] + [("unseen", s, "row-major") for s in unseen[::3]]
    if "check" in parts:
        cases += [("check", s, "W.t()") for s in (CHECK[:3] if quick else CHECK)]
    for part, shape, layout in cases:
        a, b = operands(*shape, layout)
        base = record(part, layout, shape, "cuBLAS", lambda: torch.matmul(a, b), a, b)
        for name, cfg in WS_CANDIDATES.items():
            record(part, layout, shape, "ws", lambda cfg=cfg: matmul_ws._launch(a, b, config=cfg), a, b, base, name)
        record(part, layout, shape, "auto", lambda: gk.matmul_auto(a, b), a, b, base, gk.pick_launcher(a, b)[1])
        record(part, layout, shape, "split_k", lambda: gk.matmul_splitk(a, b), a, b, base)
        print(f"{part} {shape} {layout}: {time.time() - started:.0f} s", flush=True)
        write_rows(path, fields, rows)



if __name__ == "__main__":
    args = sys.argv[1:]
    parts = args[args.index("--part") + 1].split(",") if "--part" in args else ("drawn", "unseen", "check")
    main(args[0], quick="--quick" in args, parts=parts)
