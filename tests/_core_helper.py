"""A ``@triton.jit`` helper that sees ``triton.language.core`` and not ``tl``, as Triton's own
``tl.zeros`` does (``triton/language/standard.py``): test_checked's compiled-process case."""
from triton.language import core
from triton.runtime.jit import JITFunction


def _zeros_like_triton(shape, dtype):
    return core.full(shape, 0, dtype)


#: a JITFunction even in an interpreting process (where ``@triton.jit`` makes interpreted ones)
zeros_like_triton = JITFunction(_zeros_like_triton)
