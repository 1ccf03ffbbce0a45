"""Automatic checks for the notebooks' exercises, one module per notebook.

Each ``check_<name>(answer)`` returns a :class:`~gemm_kernels.lab.exercises._core.CheckResult`:
"not attempted yet" for a stub, a precise explanation for a wrong answer (expected vs got, the
checked run's picture of bad lanes, the common mistake behind it when it is one), or "correct".  It never raises.  ``check_<name>.hint(level)`` gives the hints in steps:
1 a nudge, 2 the approach, 3 a solution.

"Correct" for an exercise in ``@triton.jit`` code means it would run on a GPU
(:mod:`._kernel_checks`): the learner's own kernel ran (not torch, not the package's code, not a
check's ``*_ref``), it compiles for sm_90 with the arguments the check launched it with (in a
worker process, on any machine), it keeps the exercise's rules (an fp32 accumulator, the clamp),
and on a GPU it also runs there, compiled, on one case.

=========================  ==========================================
notebook                   module
=========================  ==========================================
00_start_here              :mod:`gemm_kernels.lab.exercises.start_here`
01_pointer_arithmetic      :mod:`gemm_kernels.lab.exercises.pointer_arithmetic`
02_naive_tiling            :mod:`gemm_kernels.lab.exercises.naive_tiling`
03_grouped_l2_ordering     :mod:`gemm_kernels.lab.exercises.grouped_l2_ordering`
04_kernel_fusion           :mod:`gemm_kernels.lab.exercises.kernel_fusion`
05_persistent_tma          :mod:`gemm_kernels.lab.exercises.persistent_tma`
05b_stream_k               :mod:`gemm_kernels.lab.exercises.stream_k`
06_grouped_gemm            :mod:`gemm_kernels.lab.exercises.grouped_gemm`
07_moe_grouped_mm          :mod:`gemm_kernels.lab.exercises.moe_grouped_mm`
08_warp_specialization     :mod:`gemm_kernels.lab.exercises.warp_specialization`
09_moe_training            :mod:`gemm_kernels.lab.exercises.moe_training`
09b_measuring              :mod:`gemm_kernels.lab.exercises.measuring`
10_fp8                     :mod:`gemm_kernels.lab.exercises.fp8`
=========================  ==========================================
"""

from ._core import CORRECT, NOT_ATTEMPTED, WRONG, CheckResult, Hints, reset_hints

__all__ = ["CORRECT", "NOT_ATTEMPTED", "WRONG", "CheckResult", "Hints", "reset_hints"]
