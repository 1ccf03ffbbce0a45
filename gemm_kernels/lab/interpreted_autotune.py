"""``@triton.autotune`` kernels inside the checks, on a CPU and on a GPU.  :func:`install` makes

* inside a check (a launch redirected by ``_triton_compat.redirect_launches``), the launch of the
  first config (after the tuner's pruning and its heuristics) go through the check's launch, so
  it is recorded and run checked like a plain ``@triton.jit`` kernel's (the tuner's own launches
  call ``fn.run`` and would bypass the check: on a GPU, a right autotuned answer read "launched no
  kernel you wrote").  Its other configs are not checked; a check's plain GPU run tunes as usual;
* when this process interprets, the tuner run each config once and time it as 0 s (unless the
  caller gave it a ``do_bench`` of its own): Triton's interpreter has no device to time on (an
  autotuned kernel failed with "0 active drivers ([]). There should only be one.").

Outside a check, a GPU process's tuner works as Triton's.
"""

from __future__ import annotations


def _run_once(kernel_call, quantiles=None, **_):
    kernel_call()
    return [0.0] * len(quantiles) if quantiles else 0.0


def install() -> bool:
    """Patch Triton's Autotuner (see the module docstring); whether its timing is the interpreter's."""
    from .. import runtime

    from triton.runtime import autotuner

    if not getattr(autotuner.Autotuner, "_gk_checked", False):
        _redirect_in_checks(autotuner)
    if not runtime.interpreted():
        return False
    if getattr(autotuner.Autotuner, "_gk_interpreted", False):
        return True

    def do_bench(self):
        # a do_bench of the caller's stays theirs; Triton's own (the GPU's, or triton.testing.do_bench
        # for warmup/rep, defined in the autotuner's module) cannot time in the interpreter
        own = getattr(self, "_do_bench", None)
        code = getattr(own, "__code__", None)
        if own is not None and (code is None or code.co_filename != autotuner.__file__):
            return own
        return _run_once

    autotuner.Autotuner.do_bench = property(do_bench)
    autotuner.Autotuner._gk_interpreted = True
    return True


def _library_code(fn) -> bool:
    """Whether the Python function behind a kernel is this package's or Triton's (not a learner's)."""
    import os

    import triton

    name = getattr(getattr(fn, "__code__", None), "co_filename", "") or ""
    if name.startswith("<"):  # a notebook cell's, or exec'd
        return False
    path = os.path.abspath(name)
    roots = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(triton.__file__))
    return fn is None or any(path.startswith(root + os.sep) for root in roots)


def _redirect_in_checks(autotuner) -> None:
    from .. import runtime

    original = autotuner.Autotuner.run

    def run(self, *args, **kwargs):
        from .._triton_compat import _LAUNCH_REDIRECTS, jit_source_function

        launch = _LAUNCH_REDIRECTS.current()
        if launch is None or "grid" not in kwargs:
            return original(self, *args, **kwargs)
        fn = self.fn
        while jit_source_function(fn) is None and hasattr(fn, "fn"):  # through @triton.heuristics
            fn = fn.fn
        if runtime.on_gpu() and _library_code(jit_source_function(fn)):  # the package's own tuned kernels tune on the GPU as usual
            return original(self, *args, **kwargs)
        grid = kwargs.pop("grid")
        kwargs.pop("warmup", None)
        self.nargs = dict(zip(self.arg_names, args))
        config = (self.prune_configs(kwargs) if len(self.configs) > 1 else self.configs)[0]
        self.best_config = config
        chosen = {**kwargs, **config.all_kwargs()}
        if config.pre_hook is not None:
            config.pre_hook({**self.nargs, **chosen})
        fn = self.fn
        while jit_source_function(fn) is None and hasattr(fn, "fn"):  # through @triton.heuristics to the jit function
            for name, rule in getattr(fn, "values", {}).items():
                chosen[name] = rule({**self.nargs, **chosen})
            fn = fn.fn
        self.nargs = None
        return launch(fn, grid, *args, **chosen)

    autotuner.Autotuner.run = run
    autotuner.Autotuner._gk_checked = True
