"""One launch, fixed once, repeated for the price of the driver call alone.

``kernel[grid](*args)`` does a lot of Python before the GPU sees anything: Triton binds every
argument to the signature, works out each one's specialization (is this pointer 16-byte
aligned? is this int 1?), looks the compiled kernel up by that key and checks the globals it
captured; an autotuned kernel first rebuilds its tuning key too.  That is 60-150 µs per call
on the lent H100 (PERF_NOTES.md entries 13 and 15), longer than many small kernels run.

When the same kernel is launched again and again on the *same* tensors and sizes (a
:class:`~gemm_kernels.grouped.GroupedMatmulPlan`, a benchmark), all of that gives the same
answer every time.  :class:`BoundLaunch` asks once, keeps the compiled kernel, the grid and
the argument list, and each call goes straight to the kernel's C launcher: the tensors' current
``data_ptr()`` and the stream are read then, nothing else.  A CUDA graph goes further (no
Python at all), but needs a recording and the caller's stream discipline; this needs neither.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def ordered_arguments(kernel, args: Sequence = (), kwargs: dict | None = None) -> list:
    """Every parameter of ``kernel`` (a ``@triton.jit`` function), in signature order, defaults
    filled in: the list Triton hands its launcher (constexpr values included; the launcher skips
    them).  Launch options such as ``num_warps`` are not parameters and must not be in ``kwargs``.
    Raises TypeError, naming the parameter, when an argument is missing or unknown."""
    import inspect

    signature = inspect.signature(kernel.fn)
    try:
        bound = signature.bind(*args, **(kwargs or {}))
    except TypeError as exc:
        raise TypeError(f"{kernel.fn.__name__}: {exc}") from None
    bound.apply_defaults()
    return list(bound.arguments.values())


def resolve_grid(grid, named_arguments: dict) -> tuple[int, int, int]:
    """The launch grid as three ints: ``grid`` is a tuple of 1-3 ints or a callable of the
    arguments by name (Triton's ``meta``), as in ``kernel[grid](...)``."""
    if callable(grid):
        grid = grid(named_arguments)
    grid = tuple(int(g) for g in grid)
    if not 1 <= len(grid) <= 3 or min(grid) < 1:
        raise ValueError(f"a launch grid needs 1 to 3 positive sizes, got {grid}")
    return grid + (1,) * (3 - len(grid))


class BoundLaunch:
    """``kernel[grid](*args, **kwargs)`` with the compiled kernel looked up once.

    ``options`` are Triton's launch options (``num_warps``, ``num_stages``, ...).  Building it
    compiles the kernel if needed (no launch); calling it launches on the current stream.  The
    arguments are kept as given, so tensors must stay the same objects (their values may change)
    and ints the same values: exactly the situation of a plan that owns its tensors.
    GPU only: the interpreter has no compiled kernel to keep.
    """

    def __init__(self, kernel, grid, args: Sequence = (), kwargs: dict | None = None,
                 options: dict | None = None):
        from triton.runtime.driver import driver

        kwargs = dict(kwargs or {})
        self.arguments = ordered_arguments(kernel, args, kwargs)
        named = dict(zip(kernel.arg_names, self.arguments))
        self.grid = resolve_grid(grid, named)
        # warmup: the same binding, specialization and cache lookup as a launch, minus the launch
        compiled = kernel.warmup(*args, grid=self.grid, **kwargs, **(options or {}))
        if hasattr(compiled, "result"):  # asynchronous compilation hands back a future
            compiled = compiled.result()
        self.compiled = compiled
        self._launcher = compiled.run  # loads the binary and builds the C launcher (once)
        self._function = compiled.function
        self._packed_metadata = compiled.packed_metadata
        self._current_stream: Callable = driver.active.get_current_stream
        self._current_device: Callable = driver.active.get_current_device
        self._device = self._current_device()

    def __call__(self) -> None:
        from triton import knobs

        if self._current_device() != self._device:  # the kernel was loaded into that device's context
            raise RuntimeError(f"this launch was bound on cuda:{self._device} but cuda:{self._current_device()} "
                               f"is the current device: call it under torch.cuda.device({self._device})")
        stream = self._current_stream(self._device)
        enter_hook, exit_hook = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        # profilers (proton) set the hooks and read the launch's metadata: build it only for them
        metadata = (self.compiled.launch_metadata(self.grid, stream, *self.arguments)
                    if enter_hook is not None else None)
        self._launcher(*self.grid, stream, self._function, self._packed_metadata, metadata,
                       enter_hook, exit_hook, *self.arguments)
