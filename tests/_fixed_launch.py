"""A kernel with some constexprs fixed, launched like a learner's kernel (``kernel[grid](...)``):
the exercise tests hand the checks deliberately wrong variants (``MISTAKE="..."``) this way."""


class Bound:
    """``kernel[grid](...)`` with some constexprs fixed, as a learner's kernel would have them written in."""

    def __init__(self, kernel, **fixed):
        self.kernel, self.fixed = kernel, fixed

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.kernel[grid](*args, **kwargs, **self.fixed)

    def __call__(self, *args, **kwargs):  # like a JITFunction: only launched, never called
        raise RuntimeError("launch it with kernel[grid](...)")
