"""Which kernels ``torch._scaled_mm`` runs in notebook 10's accumulation measurement (GPU only):
``python tests/gpu_fp8_fast_accum_kernels.py OUT.json``.

Notebook 10 (section 4) finds cuBLAS's fast mode growing more slowly with K than our never-promoted
kernel past K = 4096, on the 256 x 256 outputs of ``bench.fp8_numerics``.  A kernel that splits K
into S pieces keeps each narrow sum to K / S products: its name says so (``splitK``, and a second
reduction kernel, as in notebook 05b).  This records the kernel names of each K and mode, on the
same operands as ``bench.fp8_numerics`` (positive data), for the notebook to quote once committed.
"""

import json
import sys

import torch

import gemm_kernels as gk
from gemm_kernels.bench import fp8_numerics
from gemm_kernels.bench.core import gpu_kernel_names


def main(path):
    if not (gk.on_gpu() and gk.supports_fp8()):
        raise SystemExit("gpu_fp8_fast_accum_kernels.py needs a GPU with fp8 (Hopper or Ada)")
    rows = []
    for i, K in enumerate(fp8_numerics.KS):
        a, b, sa, sb = fp8_numerics._operands("positive", K, seed=i)
        for fast in (False, True):
            names = gpu_kernel_names(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32,
                                                              use_fast_accum=fast))
            rows.append({"K": K, "rows": fp8_numerics.ROWS, "use_fast_accum": fast, "kernels": names,
                         "split_k": any("splitk" in n.lower() for n in names)})
            print(rows[-1], flush=True)
    record = {"gpu": gk.gpu_name(), "torch": torch.__version__, "rows": rows}
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print(f"-> {path}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.splitlines()[0])
    main(sys.argv[1])
