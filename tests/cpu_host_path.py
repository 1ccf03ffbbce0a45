"""The host-side Python of a repeated ``matmul_auto`` call on the CPU, the kernel launch stubbed
(issue 51, item 2): ``python tests/cpu_host_path.py``.

A repeated call's Python is the same on a CPU and a GPU but for the launch itself (the C launcher,
a CUDA allocation): a stand-in bound launch whose ``launch`` does nothing is kept for
``matmul_splitk`` (what ``matmul_auto`` picks at 192 x 192 x 320 fp16 on an H100/H200), and both
paths are timed on CPU tensors: the launcher's call behind ``matmul_auto``'s pick (before: two
call keys, the launcher's own Python) and ``matmul_auto``'s kept launch run straight (now).
Prints µs per call (best of 5 runs of 20000 calls) and cProfile's top lines of the current path.
"""
import cProfile
import pstats
import timeit

import torch

import gemm_kernels as gk
from gemm_kernels.kernels import dispatch, launches, splitk


class StubBound:
    """What ``KeptLaunch`` (and ``launches.launch_and_keep``) needs of a ``BoundLaunch``, bound to
    ``kwargs`` (by parameter name; others 0); launching does nothing.  Also used by
    ``cpu_first_call_path.py``."""

    takes_addresses, owns_scratch, scratch_allocator, fast = True, False, None, True

    def __init__(self, kernel, kwargs=None):
        self.names = list(kernel.arg_names)
        self.arguments = [(kwargs or {}).get(n, 0) for n in self.names]

    def forget(self, *names):
        return self

    def slot(self, name):
        return self.names.index(name)

    def launch(self, arguments):
        pass

    def __call__(self):
        pass


def main():
    launches.keeping = lambda: True  # kept launches are GPU-only: this run keeps them on the CPU
    M, N, K = 192, 192, 320
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    partials, counts = torch.empty(1 << 16), torch.zeros(64, dtype=torch.int32)
    kept = launches.KeptLaunch(StubBound(splitk._matmul_splitk_kernel), (M, N), a.dtype,
                               {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out", "bias_ptr": "bias"},
                               workspace=lambda: {"partial_ptr": partials, "count_ptr": counts})
    splitk._KEPT.keep(launches.call_key((a, b, None), (None, None, "grouped", 8, None, False)), kept)
    picks = launches.LaunchCache()  # the pick as matmul_auto kept it before: the launcher itself
    picks.keep(launches.call_key((a, b, None), (None,)), splitk.matmul_splitk)

    def before():
        launcher = picks.get(launches.call_key((a, b, None), (None,)))
        return launcher(a, b, activation=None, bias=None)

    dispatch._PICKS.keep(launches.call_key((a, b, None), (None,)), dispatch._direct(kept, None, None))
    now = lambda: gk.matmul_auto(a, b)  # noqa: E731
    results = {}
    for name, fn in (("before: pick, then the launcher's kept call", before), ("now: the kept launch straight", now),
                     ("torch.empty alone", lambda: torch.empty(M, N, dtype=a.dtype))):
        results[name] = min(timeit.repeat(fn, number=20000, repeat=5)) / 20000 * 1e6
        print(f"{results[name]:6.2f} us per call: {name}")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20000):
        now()
    profiler.disable()
    for (file, line, fn), (_, nc, own, cum, _) in sorted(pstats.Stats(profiler).stats.items(),
                                                         key=lambda kv: -kv[1][2])[:8]:
        print(f"  {own / 20000 * 1e6:6.2f} us own {cum / 20000 * 1e6:6.2f} cumulative: {fn} ({file.rsplit('/', 1)[-1]}:{line})")


if __name__ == "__main__":
    main()
