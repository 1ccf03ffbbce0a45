"""What binding a launch's arguments costs the host, before and after PERF_NOTES 38's cache (any
machine, no GPU): ``python tests/cpu_bind_cost.py``.

``_triton_compat.ordered_arguments`` (names and defaults read once per kernel) against
``_bound_arguments`` (``inspect.signature(fn).bind``, what every call did before) for the
package's launch kernels, all arguments by keyword as the launchers pass them: µs per call,
best of 5 repeats of 2000 calls (``timeit``).
"""
import inspect
import timeit

from gemm_kernels._triton_compat import _bound_arguments, ordered_arguments
from gemm_kernels.kernels import matmul_ws, persistent, streamk

for kernel in (matmul_ws._matmul_ws_kernel, persistent._matmul_tma_kernel, streamk._matmul_streamk_kernel):
    names = list(inspect.signature(kernel.fn).parameters)
    kwargs = {name: i for i, name in enumerate(names)}
    assert ordered_arguments(kernel, (), kwargs) == _bound_arguments(kernel.fn, (), kwargs)
    before, after = (min(timeit.repeat(f, number=2000, repeat=5)) / 2000 * 1e6
                     for f in (lambda: _bound_arguments(kernel.fn, (), kwargs), lambda: ordered_arguments(kernel, (), kwargs)))
    print(f"{kernel.fn.__name__} ({len(names)} parameters): inspect {before:.1f} us per call, cached {after:.1f} us")
