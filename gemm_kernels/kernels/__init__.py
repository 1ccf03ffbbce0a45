"""The Triton kernels.  Each module reads top to bottom like Triton's tutorials: the
``@triton.jit`` kernel(s), then a short launcher (checks in ``checks.py``, tuning in
``configs.py``).  Shared device code: ``tiles.py`` (pid -> tile), ``epilogue.py`` (bias,
activation, masked store), ``tma.py`` (descriptors, the TMA K loop, the TMA store).
Kernels never import ``lab``, ``viz`` or ``bench``.

In the interpreter, launches are serialised by a lock (``runtime.prepare_interpreter``:
Triton's interpreter is not thread-safe), so every launcher may be called from several threads."""

from .. import _triton_compat, runtime

runtime.prepare_interpreter()
_triton_compat.hash_callees_first()  # before any kernel is hashed: its key, the same in every process
