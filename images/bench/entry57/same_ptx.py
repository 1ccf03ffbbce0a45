"""Entry 57: the decode kernel's two K loops (commit 7f15bba) made one (`_accumulate`) without changing
the code it compiles to.  Builds both for sm_90 with the installed Triton on a CPU and compares the PTX
of every dot and FMA config the GPU tunes over, at 16, 32 and 64 rows, with and without GELU; the
DWARF section, comments and debug labels left out (an inlined helper adds only those).

    GEMM_KERNELS_COMPILE_ONLY=1 python images/bench/entry57/same_ptx.py
"""
import pathlib
import re
import subprocess
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget

from gemm_kernels.kernels import decode
from gemm_kernels.lab._compile_worker import _jit_function, build_source

ROOT = pathlib.Path(__file__).resolve().parents[3]
BEFORE = "7f15bba"  # decode.py with the loop written twice


def ptx(module, cfg, dot, act):
    t = torch.empty(64, dtype=torch.bfloat16)
    given = dict(a_ptr=t, b_ptr=t, c_ptr=t, bias_ptr=t, partial_ptr=torch.empty(64),
                 count_ptr=torch.empty(64, dtype=torch.int32), M=5, N=4096, K=4096, split_request=-1,
                 stride_am=4096, stride_ak=1, stride_bk=1, stride_bn=4096, stride_cm=4096, stride_cn=1,
                 **cfg.kwargs, USE_DOT=dot, WIDEN=False, HAS_BIAS=True, ACTIVATION=act)
    src = build_source(_jit_function(module, "_decode_kernel"), given)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages})
    code = k.asm["ptx"].split("\t.section\t.debug")[0]
    lines = [l for l in code.splitlines() if not l.strip().startswith("//") and ".loc" not in l
             and ".file" not in l and not re.fullmatch(r"\$L__tmp\d+:", l.strip())]
    return re.sub(r"\$L__tmp\d+", "$L__tmp", "\n".join(lines)), k.metadata.shared


def main():
    old = ROOT / "gemm_kernels" / "kernels" / "_decode_before.py"
    old.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:gemm_kernels/kernels/decode.py"],
                                  capture_output=True, text=True, check=True).stdout)
    differ = 0
    try:
        configs = [(c, True) for rows in (16, 32, 64) for c in decode.decode_configs(rows, "dot", gpu=True)]
        configs += [(c, False) for rows in (1, 4) for c in decode.decode_configs(rows, "fma", gpu=True)]
        for cfg, dot in configs:
            rows = cfg.kwargs["BLOCK_M"]
            for act in (None, "gelu"):
                a = ptx("gemm_kernels.kernels._decode_before", cfg, dot, act)
                b = ptx("gemm_kernels.kernels.decode", cfg, dot, act)
                differ += a != b
                kind = "wgmma" if "wgmma" in b[0] else "mma.sync" if "mma.sync" in b[0] else "fma"
                print(f"rows {rows:2} {'dot' if dot else 'fma'} {cfg.kwargs['BLOCK_N']}x{cfg.kwargs['BLOCK_K']} "
                      f"s{cfg.num_stages} swap={cfg.kwargs['SWAP_AB']} {act}: "
                      f"{'same' if a == b else 'DIFFERENT'} ({kind}, {b[1]} B shared)", flush=True)
    finally:
        old.unlink()
    print(f"{differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
