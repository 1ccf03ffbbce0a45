"""Several threads calling the kernels at once (a notebook's background thread, a web server, a
thread pool over a batch).  Triton's interpreter is not thread-safe (it swaps triton.language's
builtins module-wide during a launch, and keeps the program id in one global); before the
package serialised interpreted launches, 4 threads got "Did you forget to add @triton.jit?"
from matmul, matmul_persistent and matmul_tma, and matmul_streamk hung.  Each test runs in a
subprocess with a time limit, so a hang fails the test instead of hanging the suite."""

import os
import subprocess
import sys

import pytest
import torch

from gemm_kernels.testing import TOLERANCES

THREADS = 4
CALLS_PER_THREAD = 3

_SCRIPT = """
import concurrent.futures, sys, torch, gemm_kernels
from gemm_kernels.testing import rel_err
dev = gemm_kernels.DEVICE
name = sys.argv[1]
fn = getattr(gemm_kernels, name)

def work(seed):
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    for i in range({calls}):
        a = torch.randn(37 + i, 64, generator=g).to(dev); b = torch.randn(64, 40 + 8 * seed, generator=g).to(dev)
        ref = a.double() @ b.double()
        if name == "grouped_matmul":
            worst = max(worst, *(rel_err(c, ref) for c in fn([a, a], [b, b])))
        elif name == "matmul_streamk":  # 2 tiles for 4 programs, 65 K blocks: every tile is split
            a = torch.randn(30, 2080, generator=g).to(dev); b = torch.randn(2080, 48, generator=g).to(dev)
            worst = max(worst, rel_err(fn(a, b), a.double() @ b.double()))
        else:
            worst = max(worst, rel_err(fn(a, b), ref))
    return worst

with concurrent.futures.ThreadPoolExecutor({threads}) as pool:
    print(max(pool.map(work, range({threads}))))
"""


@pytest.mark.parametrize("name", ["matmul", "matmul_persistent", "matmul_tma", "matmul_streamk", "grouped_matmul"])
def test_concurrent_calls_from_threads_are_correct(name):
    script = _SCRIPT.format(calls=CALLS_PER_THREAD, threads=THREADS)
    try:
        out = subprocess.run([sys.executable, "-c", script, name], capture_output=True, text=True,
                             env={**os.environ, "GEMM_KERNELS_AUTOTUNE": "0"}, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{THREADS} threads calling {name} did not finish in 240 s (a hang)")
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.strip()) <= TOLERANCES[torch.float32]  # fp32: TF32 on a GPU
