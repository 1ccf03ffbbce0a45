"""Disassemble matmul_ws's sm_90 cubin, to read sanitizer reports (``kernel+0x100``) against SASS.

    python tests/ws_sass.py DIR      # writes DIR/<example>.sass (and .ptx); needs no GPU

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


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "ws_sass"))
