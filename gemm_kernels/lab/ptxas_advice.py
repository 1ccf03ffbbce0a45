"""What ``ptxas`` says about a kernel: its ``-v`` report and its advisories, read on any machine.

``ptxas`` (the PTX -> SASS assembler that ships with Triton) prints, beside registers and
shared memory, *advisories*: warnings that an optimisation was given up, with the reason.  On
Hopper the one that matters most for GEMMs is C7510, "wgmma pipeline ... serialized due to
...": the asynchronous wgmmas of a K loop are then waited for one by one.  ``advisories(view)``
runs Triton's bundled ptxas on a compile view's PTX; ``dot_loop`` is the smallest kernel that
shows C7510: a ``tl.device_assert`` in its K loop, compiled in only with ``debug`` (or
``TRITON_DEBUG=1``), becomes a call to ``__assertfail``, and a wgmma pipeline cannot cross a call.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import triton
import triton.language as tl

from .compile_view import CompileView, compile_for


@triton.jit
def dot_loop(a_ptr, b_ptr, c_ptr, K, BLOCK: tl.constexpr):
    """One BLOCK x BLOCK tile of A @ B (A is BLOCK x K, B is K x BLOCK), a device assert in the K loop."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        a = tl.load(a_ptr + offs[:, None] * K + k + offs[None, :])
        b = tl.load(b_ptr + (k + offs[:, None]) * BLOCK + offs[None, :])
        tl.device_assert(k + BLOCK <= K, "K must be a multiple of BLOCK")
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs[:, None] * BLOCK + offs[None, :], acc)


def dot_loop_view(debug: bool) -> CompileView:
    """``dot_loop`` (fp16, BLOCK = 64) compiled for sm_90, its assert compiled in (``debug``) or not."""
    import torch

    a = torch.zeros(64, 256, dtype=torch.float16)
    b = torch.zeros(256, 64, dtype=torch.float16)
    c = torch.zeros(64, 64, dtype=torch.float32)
    return compile_for(dot_loop, dict(a_ptr=a, b_ptr=b, c_ptr=c, K=256, BLOCK=64), target="sm_90",
                       num_warps=4, num_stages=3, name=f"dot_loop[debug={debug}]", options={"debug": debug})


def advisories(view: CompileView) -> list[str]:
    """The lines ``ptxas -v`` prints for the view's PTX (Hopper: assembled for sm_90a, as Triton
    does), without the file names: "info" lines (registers, barriers) and "warning" lines."""
    from triton.backends.nvidia.compiler import get_ptxas

    capability = int(view.target.removeprefix("sm_").rstrip("a"))
    arch = f"sm_{capability}a" if capability >= 90 else f"sm_{capability}"
    with tempfile.TemporaryDirectory() as folder:
        ptx = os.path.join(folder, "kernel.ptx")
        with open(ptx, "w") as f:
            f.write(view.asm["ptx"])
        done = subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={arch}", ptx, "-o",
                               os.path.join(folder, "kernel.cubin")], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"ptxas failed on {view.name}: {done.stderr.strip()[-500:]}")
    lines = [re.sub(r"^ptxas\S*\s+", "", line).replace(ptx, "kernel.ptx") for line in done.stderr.splitlines()]
    return [line for line in lines if line.startswith(("info", "warning")) and "Compiling entry" not in line]
