"""The host-side Python of a first call of a new M, against a repeated call, the launch stubbed
(issue 51, item 1; any machine, no GPU): ``python tests/cpu_first_call_path.py``.

A first call in a tuned bucket runs the checks, builds the kernel's arguments and binds a launch
(``launches.launch_and_keep``); a repeated one runs its kept launch.  Here ``launches.bind``
returns a stand-in whose launch does nothing, so what is timed is the package's Python alone
(Triton's own binding and the C launcher come on top on a GPU).  ``matmul`` and
``matmul_splitk`` at M = 900..999 x 4096 x 4096 fp16, b = W.t(): µs per call (best of 3 runs of
300), each first call after ``launches.forget_kept()``, and cProfile's top lines of the first calls.
"""
import cProfile
import pstats
import timeit

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import launches

from cpu_host_path import StubBound  # this script's folder is on the path when it runs


def main():
    launches.keeping = lambda: True  # kept launches are GPU-only: this run keeps them on the CPU
    launches.bind = lambda tuned, grid, kwargs, config_kwargs=None: StubBound(tuned.fn, kwargs)
    N, K = 4096, 4096
    b = torch.randn(N, K, dtype=torch.float16).t()
    ms = list(range(900, 1000))
    inputs = {M: torch.randn(M, K, dtype=torch.float16) for M in ms}
    for name, launcher in (("matmul", gk.matmul), ("matmul_splitk", gk.matmul_splitk)):
        order = iter(ms * 1000)

        def first():
            launches.forget_kept()
            launcher(inputs[next(order)], b)

        launcher(inputs[950], b)
        for label, fn in (("first call of a new M", first), ("repeated call", lambda: launcher(inputs[950], b))):
            us = min(timeit.repeat(fn, number=300, repeat=3)) / 300 * 1e6
            print(f"{name} {label}: {us:.1f} us")
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(300):
            first()
        profiler.disable()
        for (file, line, fn), (_, _, own, cum, _) in sorted(pstats.Stats(profiler).stats.items(),
                                                            key=lambda kv: -kv[1][2])[:8]:
            print(f"  {own / 300 * 1e6:6.2f} us own {cum / 300 * 1e6:6.2f} cumulative: {fn} "
                  f"({file.rsplit('/', 1)[-1]}:{line})")


if __name__ == "__main__":
    main()
