"""Disassemble matmul_ws's sm_90 cubin, to read sanitizer reports (``kernel+0x100``) against SASS.

    python tests/ws_sass.py DIR      # writes DIR/<example>.sass (and .ptx); needs no GPU
    python tests/ws_sass.py DIR --sanitized 0x100,0x110,...   # sanitize_ws.py's kernels at those offsets

Compiles the compile view's matmul_ws examples for sm_90 with the installed Triton and runs the
``nvdisasm`` that ships with it.  The same Triton wheel gives the same cubin as on the GPU, so an
offset in a compute-sanitizer report can be looked up here (WS_NOTES.md, "Correctness and
sanitizers").  Prints the instructions that read or write the partition-state bytes and the
CTA-wide barriers between them.
"""

import os
import pathlib
import re
import subprocess
import sys


def main(directory: pathlib.Path) -> None:
    import triton

    from gemm_kernels.lab.compile_examples import ws_examples
    from gemm_kernels.lab.compile_view import compile_many

    examples = ws_examples()
    views = compile_many([ex.request(90) for ex in examples])
    nvdisasm = triton.knobs.nvidia.nvdisasm.path  # the one Triton ships (as compile_view's cuobjdump)
    directory.mkdir(parents=True, exist_ok=True)
    print(f"Triton {triton.__version__}")
    for ex, view in zip(examples, views):
        stem = re.sub(r"[^A-Za-z0-9_+-]+", "_", ex.name).strip("_")
        cubin = directory / f"{stem}.cubin"
        cubin.write_bytes(view.asm["cubin"])
        (directory / f"{stem}.ptx").write_text(view.asm["ptx"])
        sass = subprocess.run([nvdisasm, "-c", "-g", os.fspath(cubin)], capture_output=True,
                              text=True, check=True).stdout
        (directory / f"{stem}.sass").write_text(sass)
        print(f"\n{ex.name}: {directory / (stem + '.sass')}")
        for line in sass.splitlines():
            if re.search(r"LDS\.U8|STS\.64 \[UR\d+\+0x[0-9a-f]+\], R2|BAR\.SYNC\.DEFER_BLOCKING 0x1 ;|EXIT", line):
                print("   ", line.strip())


def sanitized(directory: pathlib.Path, offsets: list[int]) -> None:
    """Compile every kernel ``sanitize_ws.py`` launches (each config, shape and dtype: Triton
    specialises integer arguments divisible by 16 or equal to 1, so the ragged shapes give other
    cubins than the compile view's 512³ examples) and print the instruction at each offset."""
    import torch
    import triton

    from gemm_kernels.kernels import matmul_ws as ws
    from gemm_kernels.lab.compile_examples import KernelExample
    from gemm_kernels.lab.compile_view import compile_many
    from sanitize_ws import DTYPES, SHAPES, inputs

    examples = []
    for name in ws.CONFIGS:
        for (M, N, K, _) in SHAPES:
            for dtype in DTYPES:
                a, b, bias = inputs(M, N, K, dtype, "cpu")
                args = ws._kernel_args(a, b, torch.empty(M, N, dtype=dtype), bias, None, ws.CONFIGS[name],
                                       activation="gelu")
                examples.append(KernelExample(f"{name} {M}x{N}x{K} {str(dtype)[6:]}", ws._matmul_ws_kernel, args,
                                              triton.Config({}, num_warps=4), targets=(90,), expect={90: ()},
                                              options={"maxnreg": ws.MAXNREG}))
    views = compile_many([ex.request(90) for ex in examples])
    nvdisasm = triton.knobs.nvidia.nvdisasm.path
    directory.mkdir(parents=True, exist_ok=True)
    print(f"Triton {triton.__version__}; instructions at " + ", ".join(hex(o) for o in offsets))
    for ex, view in zip(examples, views):
        cubin = directory / (re.sub(r"[^A-Za-z0-9_+-]+", "_", ex.name) + ".cubin")
        cubin.write_bytes(view.asm["cubin"])
        sass = subprocess.run([nvdisasm, "-c", os.fspath(cubin)], capture_output=True, text=True, check=True).stdout
        found = {}
        for line in sass.splitlines():
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;?\s*$", line)
            if m and int(m.group(1), 16) in offsets:
                found[int(m.group(1), 16)] = m.group(2)
        print(f"{ex.name}:")
        for offset in offsets:
            print(f"    +{offset:#x}  {found.get(offset, '(past the end)')}")


if __name__ == "__main__":
    # python tests/ws_sass.py DIR                               the compile view's examples
    # python tests/ws_sass.py DIR --sanitized 0x100,0x119c0,...  sanitize_ws.py's kernels, at these offsets
    if len(sys.argv) > 3 and sys.argv[2] == "--sanitized":
        sanitized(pathlib.Path(sys.argv[1]), [int(o, 16) for o in sys.argv[3].split(",")])
    else:
        main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "ws_sass"))
