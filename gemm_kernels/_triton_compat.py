"""Every use of a non-public Triton API, in one place, each with a public fallback.

Triton's internals change from release to release.  The package leans on a few of them where
they buy something real (host time per launch, exact compile specialisation); each has a
fallback built on public API only, so that a Triton upgrade that changes an internal costs
speed, never correctness.  A fallback is taken, once and with a warning, when the internal is
missing or misbehaves; ``GEMM_KERNELS_TRITON_INTERNALS=0`` forces every fallback (CI runs the
tests that way too, see ``tests/test_triton_compat.py``).  Each function's docstring names the
internal it relies on; in short:

* :class:`SpecializedLaunch`, :class:`BoundLaunch` (host time of a repeated launch):
  ``JITFunction.warmup`` and the compiled kernel's C launcher.  Fallback: ``kernel[grid](...)``.
* :func:`descriptor_on` (host time of a Gluon launch): a host ``TensorDescriptor`` copied without
  re-running its checks.  Fallback: ``dataclasses.replace``.
* :func:`chosen_config`: ``Autotuner.best_config``.  Fallback: every launch asks the autotuner.
* :func:`hash_callees_first` (kernel keys the same in every process): ``DependenciesFinder._update_hash``.
  Fallback: Triton's own order (the tuning and compile caches may miss across processes).
* :func:`specialize` (compile view): ``native_specialize_impl``.  Fallback: its rules in Python.
* :func:`ast_source` (compile view): ``ASTSource`` with ``CUDABackend.parse_attr`` (fallback: no
  divisibility hints, with a warning); Gluon needs ``GluonASTSource`` (no fallback: the compile
  view says so; running on a GPU needs none of this).
* :func:`interpret_library_functions` (Triton imported first, on a CPU): ``InterpretedFunction``.
  No fallback can exist: a RuntimeError says to import ``gemm_kernels`` first.
* :func:`serialise_interpreted_launches`: a lock around ``InterpretedFunction.run``.  Fallback: no
  lock, with a warning.  :class:`ThreadLocalPatch` keeps the checks' patches per thread, and
  :func:`keep_interpret_decision` holds the interpreter setting to what import decided.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from ._env import flag

#: set to 0 to take every public fallback below (tests do, to keep the fallbacks working)
INTERNALS_ENV = "GEMM_KERNELS_TRITON_INTERNALS"

_disabled: set = set()  # internals that failed once in this process


def internals_enabled(name: str) -> bool:
    """Whether the internal fast path ``name`` may be used (env switch, and not failed before)."""
    return flag(INTERNALS_ENV, True) and name not in _disabled


def _give_up(name: str, err: BaseException) -> None:
    """An internal did not behave: use the public fallback from now on, and say so once."""
    _disabled.add(name)
    warnings.warn(f"gemm_kernels: Triton internal '{name}' is not usable with this Triton ({type(err).__name__}: "
                  f"{err}); using the public fallback (correct, possibly slower)", RuntimeWarning, stacklevel=3)


# ----------------------------------------------------------------------------- launches
def ordered_arguments(kernel, args: Sequence = (), kwargs: dict | None = None) -> list:
    """Every parameter of ``kernel`` (a ``@triton.jit`` function), in signature order, defaults
    filled in (public: ``inspect.signature`` of the Python function, read once per function:
    making the signature and binding through it cost most of a plan's first call, PERF_NOTES 38).
    Launch options such as ``num_warps`` are not parameters and must not be in ``kwargs``.
    TypeError names the parameter when an argument is missing or unknown, in ``inspect``'s words."""
    kwargs = kwargs or {}
    names, defaults = _parameters(kernel.fn)
    rest = names[len(args):] if names is not None and len(args) <= len(names) else None
    # every keyword a parameter after the positional ones, every such parameter given or defaulted
    if rest is None or len(kwargs) != sum(name in kwargs for name in rest) or any(
            name not in kwargs and name not in defaults for name in rest):
        return _bound_arguments(kernel.fn, args, kwargs)  # inspect binds it, or names what is wrong
    return [*args, *(kwargs[name] if name in kwargs else defaults[name] for name in rest)]


#: Python function -> (parameter names, defaults), or (None, None) for keyword-only or variadic
#: parameters; weak keys, so kernels a notebook re-defines do not pile up
_PARAMETERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _parameters(fn) -> tuple:
    cached = _PARAMETERS.get(fn)
    if cached is None:
        import inspect

        params = list(inspect.signature(fn).parameters.values())
        if all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
            cached = (tuple(p.name for p in params), {p.name: p.default for p in params if p.default is not p.empty})
        else:
            cached = (None, None)
        _PARAMETERS[fn] = cached
    return cached


def _bound_arguments(fn, args, kwargs) -> list:
    import inspect

    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{fn.__name__}: {exc}") from None
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


class SpecializedLaunch:
    """The compiled kernel of one launch's specialisation, launched with fresh arguments.

    ``kernel[grid](...)`` does a lot of Python before the GPU sees anything: it binds every
    argument, works out each one's specialisation (type, 16-byte alignment, divisibility),
    looks the compiled kernel up by that key.  A launcher that calls one kernel again and again
    with arguments it knows specialise alike (same dtypes, sizes, alignments: ``matmul_ws``'s
    per-shape plans) asks once, here, and then goes straight to the compiled kernel's C
    launcher with :meth:`launch`.  Nothing of the first launch's arguments is kept.

    Fast path (internals, see the module docstring) on a GPU; the public launch
    ``kernel[grid](*arguments, **options)`` otherwise, or when the internals are missing
    (``fast`` says which is in use).
    """

    #: ``(bytes, alignment, stream) -> tensor``: the scratch memory of a kernel that makes tensor
    #: descriptors, handed to the C launcher directly (None: Triton asks ``triton.set_allocator``'s)
    scratch_allocator = None

    def __init__(self, kernel, grid, args: Sequence = (), kwargs: dict | None = None,
                 options: dict | None = None):
        self._kernel = kernel
        self._options = dict(options or {})
        arguments = ordered_arguments(kernel, args, kwargs)
        self.grid = resolve_grid(grid, dict(zip(kernel.arg_names, arguments)))
        self.fast = internals_enabled("launcher") and self._bind_launcher(args, kwargs or {})

    def _bind_launcher(self, args, kwargs) -> bool:
        try:
            import torch
            from triton import knobs
            from triton.runtime.driver import driver

            compiled = self._kernel.warmup(*args, grid=self.grid, **kwargs, **self._options)
            if hasattr(compiled, "result"):  # asynchronous compilation hands back a future
                compiled = compiled.result()
            self.compiled = compiled
            self._launcher = compiled.run  # loads the binary and builds the C launcher (once)
            self._function = compiled.function
            self._packed_metadata = compiled.packed_metadata
            self._current_stream: Callable = driver.active.get_current_stream
            # torch's own query, without torch.cuda.current_device()'s Python (Triton's is that function)
            self._current_device: Callable = getattr(torch._C, "_cuda_getDevice", driver.active.get_current_device)
            self._device = self._current_device()
            self._runtime_knobs = knobs.runtime  # the profiler hooks are read from it on every launch
            run = compiled.run
            # a kernel that needs no scratch memory can skip the launcher object's Python and call
            # the C launch function itself (Triton 3.6's CudaLauncher.__call__, minus the scratch)
            self._raw = self._scratch = None
            scratch = getattr(run, "global_scratch_size", None)
            if scratch is not None and getattr(run, "profile_scratch_size", None) == 0:
                self._raw = run.launch
                self._raw_flags = (run.launch_cooperative_grid, run.launch_pdl)
                # bytes per program, alignment: descriptors made in the kernel need scratch memory
                self._scratch = (scratch * getattr(run, "num_ctas", 1), run.global_scratch_align) if scratch else None
            return True
        except Exception as err:  # an internal moved: the public launch still works
            _give_up("launcher", err)
            return False

    def launch(self, arguments: Sequence, grid: tuple[int, int, int] | None = None) -> None:
        """Launch with ``arguments`` (every kernel parameter in signature order, constexprs
        included, specialising as the ones this was built with) on ``grid`` (default: the first's)."""
        grid = grid or self.grid
        if not self.fast:
            self._kernel[grid](*arguments, **self._options)
            return
        self._launch(arguments, grid)

    def _stream(self):
        if self._current_device() != self._device:  # the kernel was loaded into that device's context
            raise RuntimeError(f"this launch was bound on cuda:{self._device} but cuda:{self._current_device()} "
                               f"is the current device: call it under torch.cuda.device({self._device})")
        return self._current_stream(self._device)

    def hooks_idle(self) -> bool:
        """No profiler hook is set (launches then skip the metadata and the hook calls)."""
        return _hook_idle(self._runtime_knobs.launch_enter_hook) and _hook_idle(self._runtime_knobs.launch_exit_hook)

    @property
    def takes_addresses(self) -> bool:
        """Whether :meth:`launch` may be given device addresses (ints) for pointer parameters in
        place of their tensors.  The fast path always ends in the compiled kernel's C launcher
        (``_call_raw``, or the launcher object when that is not usable), which takes an int as the
        address; for a tensor it calls ``data_ptr`` and asks the driver (``cuPointerGetAttribute``)
        once per pointer.  Not on the public fallback: ``kernel[grid]`` would specialise an int as
        an integer.  Not for a kernel with a ``launch_metadata`` function either: with a profiler's
        hooks set, Triton hands it the arguments, which it may read as tensors."""
        return self.fast and getattr(self._kernel, "launch_metadata", None) is None

    def _call_raw(self, raw, grid, stream, scratch, arguments) -> None:
        """Call the C launch function ``raw`` (Triton 3.6's argument layout; no profile scratch, no
        launch metadata, no hooks) with ``arguments`` as the kernel takes them."""
        raw(*grid, stream, self._function, *self._raw_flags, scratch, None, self._packed_metadata, None, None, None,
            *arguments)

    def _launch(self, arguments, grid) -> None:
        stream = self._stream()
        enter_hook, exit_hook = self._runtime_knobs.launch_enter_hook, self._runtime_knobs.launch_exit_hook
        if _hook_idle(enter_hook) and _hook_idle(exit_hook):  # no profiler listening: no metadata, no hook calls
            if self._raw is not None and (self._scratch is None or self.scratch_allocator is not None):
                scratch = None if self._scratch is None else self.scratch_allocator(
                    grid[0] * grid[1] * grid[2] * self._scratch[0], self._scratch[1], stream)
                try:  # the scratch's address: no driver query for it (``scratch`` keeps it alive meanwhile)
                    self._call_raw(self._raw, grid, stream, None if scratch is None else scratch.data_ptr(), arguments)
                    return
                except TypeError as err:  # the C launcher's arguments changed: through the launcher object
                    _give_up("raw_launch", err)
                    self._raw = None
            if self._scratch is not None and self.scratch_allocator is not None:  # Triton asks its allocator
                import triton

                triton.set_allocator(self.scratch_allocator)
            self._launcher(*grid, stream, self._function, self._packed_metadata, None, None, None, *arguments)
            return
        # profilers (proton) set the hooks and read the launch's metadata: build it only for them
        metadata = (self.compiled.launch_metadata(grid, stream, *arguments)
                    if enter_hook is not None else None)
        self._launcher(*grid, stream, self._function, self._packed_metadata, metadata,
                       enter_hook, exit_hook, *arguments)


class DescriptorArguments:
    """Host tensor descriptors of a :class:`SpecializedLaunch` expanded by us instead of by
    Triton's launcher, with each slot's CUtensorMap kept per base address (a weight's repeats).

    Triton 3.6's launcher (``wrap_handle_tensordesc``) walks every argument in Python and encodes
    a CUtensorMap for each descriptor on every launch.  For a plan whose descriptors differ from
    call to call only in their base tensor, the rest of the expansion (``[map, *shape,
    *strides]``) is fixed: :meth:`launch` takes the base tensors and the other arguments and calls
    the C launch function below the wrapper.  Relies on the wrapper's closure (``launcher``,
    ``tensordesc_indices``, ``tensordesc_meta``) and ``fill_tma_descriptor``; ``make`` returns
    None when any of it is missing (callers then launch descriptors the public way)."""

    _CACHED = 8  # CUtensorMaps kept per slot (new addresses beyond that start the slot over)

    def __init__(self, launch, raw, indices, slots):
        self._launch, self._raw, self._indices, self._slots = launch, raw, indices, slots

    @classmethod
    def make(cls, launch: "SpecializedLaunch", arguments: Sequence):
        """For ``launch`` (fast, no scratch) whose ``arguments`` hold its descriptors; None if unusable."""
        if not internals_enabled("descriptor_args") or not launch.fast or launch._raw is None or launch._scratch:
            return None
        try:
            from triton.backends.nvidia import driver as nvidia
            from triton.runtime.driver import driver

            code = launch._raw.__code__
            cells = dict(zip(code.co_freevars, (c.cell_contents for c in launch._raw.__closure__)))
            raw, metas = cells["launcher"], cells["tensordesc_meta"]
            indices = sorted(cells["tensordesc_indices"])
            fill = driver.active.utils.fill_tma_descriptor
            slots = []
            for i, meta in zip(indices, metas):
                d = arguments[i]
                if meta is None or meta.get("fp4_padded") or d.padding == "nan":
                    return None
                fixed = (meta["swizzle"], meta["elem_size"], nvidia.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
                         meta["block_size"], list(d.shape), list(d.strides), 0)
                slots.append((fixed, [*d.shape, *d.strides], {}, fill))
            return cls(launch, raw, indices, slots)
        except Exception as err:  # the wrapper changed: Triton's own expansion still works
            _give_up("descriptor_args", err)
            return None

    @property
    def indices(self) -> list:
        """Argument positions of the descriptors, in order."""
        return self._indices

    def launch(self, arguments: list, bases: Sequence) -> bool:
        """Launch with ``arguments`` (descriptor positions ignored) and descriptors on ``bases``;
        False (nothing launched) while a profiler's hooks are set: they need Triton's own path."""
        if not self._launch.hooks_idle():
            return False
        final, start = [], 0
        for i, base, (fixed, tail, cache, fill) in zip(self._indices, bases, self._slots):
            final += arguments[start:i]
            address = base.data_ptr()
            expanded = cache.get(address)
            if expanded is None:
                if len(cache) >= self._CACHED:
                    cache.clear()
                expanded = cache[address] = [fill(address, *fixed), *tail]
            final += expanded
            start = i + 1
        final += arguments[start:]
        launch = self._launch
        launch._call_raw(self._raw, launch.grid, launch._stream(), None, final)
        return True


def _hook_idle(hook) -> bool:
    """No launch hook to call: None, or Triton 3.6's ``HookChain`` with no hook in it (the C
    launcher would still call the empty chain twice per launch, and Python build its metadata)."""
    if hook is None:
        return True
    calls = getattr(hook, "calls", None)
    return isinstance(calls, list) and not calls


class BoundLaunch(SpecializedLaunch):
    """``kernel[grid](*args, **kwargs, **options)`` with the compiled kernel looked up once.

    When the same launch is repeated on the same tensors and sizes (a
    :class:`~gemm_kernels.GroupedMatmulPlan`), every look-up of ``kernel[grid]`` gives the same
    answer: this asks once and each call goes straight to the kernel's C launcher, reading only
    the tensors' current addresses and the stream.  Tensors must stay the same objects (values
    may change).  Fast path and fallback as :class:`SpecializedLaunch`.
    """

    def __init__(self, kernel, grid, args: Sequence = (), kwargs: dict | None = None,
                 options: dict | None = None):
        self._args, self._kwargs = tuple(args), dict(kwargs or {})
        self.arguments = ordered_arguments(kernel, self._args, self._kwargs)
        super().__init__(kernel, grid, self._args, self._kwargs, options)

        self._slots = {name: i for i, name in enumerate(kernel.arg_names)}  # parameter -> position
        self._forgotten: frozenset = frozenset()

    def forget(self, *names: str) -> "BoundLaunch":
        """Drop the bound tensors of parameters ``names``: a cache of launches must not keep its
        callers' tensors (and their memory) alive.  Afterwards only :meth:`launch_with`, given
        every one of them, can launch."""
        for name in names:
            self.arguments[self._slots[name]] = None
        self._args, self._kwargs = (), {}
        self._forgotten = frozenset(names)
        return self

    @property
    def owns_scratch(self) -> bool:
        """Whether launches hand the kernel its scratch memory themselves (no ``triton.set_allocator``
        needed): the fast path, with a ``scratch_allocator``, for a kernel that needs scratch."""
        return (self.fast and self._raw is not None and self._scratch is not None
                and self.scratch_allocator is not None)

    def slot(self, name: str) -> int:
        """The position of parameter ``name`` in :attr:`arguments` (for callers that fill it in)."""
        return self._slots[name]

    def __call__(self) -> None:
        if self._forgotten:
            raise RuntimeError(f"this launch forgot its tensors {sorted(self._forgotten)}: use launch_with")
        if not self.fast:
            self._kernel[self.grid](*self._args, **self._kwargs, **self._options)
            return
        self._launch(self.arguments, self.grid)

    def launch_with(self, **tensors) -> None:
        """The same launch with some tensor arguments replaced by others, by parameter name
        (``grouped_mm`` binds one launch per shape and hands each call its fresh tensors).  The
        compiled kernel is specialised on each pointer's 16-byte alignment and dtype: the
        replacements must match the bound tensors in both (the caller's cache key says so)."""
        arguments = list(self.arguments)
        for name, tensor in tensors.items():
            arguments[self._slots[name]] = tensor
        self.launch(arguments)


def descriptor_on(template, base):
    """A copy of the host tensor descriptor ``template`` whose base is the tensor ``base``
    (same shape, strides, block shape and layout).  The caller guarantees that ``base`` has the
    dtype and alignment ``template`` was checked with (``matmul_ws`` keys its plans on them)."""
    return descriptor_mover()(template, base)


def descriptor_mover() -> Callable:
    """:func:`descriptor_on`'s implementation, chosen now (a caller that keeps it skips the
    choice on every call): the fast copy (it relies on the descriptor being a plain dataclass whose
    fields the launcher reads, and skips its constructor's checks), or the public
    ``dataclasses.replace``."""
    return _copy_descriptor if internals_enabled("descriptor_copy") else _replace_descriptor


def _copy_descriptor(template, base):
    try:
        copy = object.__new__(type(template))
        copy.__dict__.update(template.__dict__)  # a plain dataclass: its fields live in __dict__
        copy.base = base
        return copy
    except Exception as err:  # e.g. a descriptor class with __slots__
        _give_up("descriptor_copy", err)
        return _replace_descriptor(template, base)


def _replace_descriptor(template, base):
    import dataclasses

    return dataclasses.replace(template, base=base)


def chosen_config(autotuner):
    """The config Triton's autotuner chose on its last run, or None when that is not readable
    (then callers go through the autotuner on every launch)."""
    if not internals_enabled("best_config"):
        return None
    config = getattr(autotuner, "best_config", None)
    if config is not None and not hasattr(config, "all_kwargs"):
        _give_up("best_config", TypeError(f"best_config is a {type(config).__name__}, not a triton.Config"))
        return None
    return config


def hash_callees_first() -> bool:
    """Make a kernel's ``JITFunction.cache_key`` the same whichever kernels this process hashed
    before (its callees' keys, then their global variables: Triton 3.9's order).

    Triton 3.6's ``DependenciesFinder._update_hash`` merges a called function's
    ``used_global_vals`` before computing that function's key, so a callee not hashed yet adds
    none of its constexpr globals (``epilogue._INTERPRETED`` under ``store_tile_masked``) and
    ``matmul_tma``'s key in a process that launched it first differed from one that launched
    ``matmul`` first: the tuning cache's file (``kernels.tuning_cache``) and Triton's compile
    cache missed across processes (fixed upstream: triton-lang/triton#10494).  Wraps
    ``_update_hash`` to ask the callee's key first; on a Triton that already does, this changes
    nothing.  Returns whether the wrapper is in place (never with internals off: then keys may
    differ by process and the caches miss, which costs tuning and compiles, never a wrong result)."""
    if not internals_enabled("hash_callees_first"):
        return False
    try:
        from triton.runtime.jit import DependenciesFinder

        original = DependenciesFinder._update_hash
    except (ImportError, AttributeError) as err:
        _give_up("hash_callees_first", err)
        return False
    if getattr(original, "_callees_first", False):
        return True

    def _update_hash(self, func):
        func.cache_key  # fills func.used_global_vals, which the original merges before asking the key
        return original(self, func)

    _update_hash._callees_first = True
    DependenciesFinder._update_hash = _update_hash
    return True


# ----------------------------------------------------------------------------- compile view
def _specialize_public(value):
    """Triton's launch-time typing of one argument, written out: (type, attribute)."""
    import torch

    if isinstance(value, torch.Tensor):
        name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.int32: "i32",
                torch.int64: "i64", torch.int8: "i8"}[value.dtype]
        return "*" + name, "D" if value.data_ptr() % 16 == 0 else ""
    if isinstance(value, bool):
        return "u1", None
    if isinstance(value, int):
        if value == 1:
            return "constexpr", 1
        return ("i32" if -(2**31) <= value < 2**31 else "i64"), "D" if value % 16 == 0 else ""
    if isinstance(value, float):
        return "fp32", None
    if value is None:
        return "constexpr", None
    if _is_gluon_descriptor(value):  # Gluon's host TensorDescriptor: dtype, block shape, shared layout
        from triton._utils import canonicalize_dtype

        block = ", ".join(str(int(d)) for d in value.block_shape)
        return f"tensordesc<{canonicalize_dtype(value.base.dtype)}[{block}],{value.layout!r}>", None
    raise TypeError(f"cannot specialise a {type(value).__name__}")


def _is_gluon_descriptor(value) -> bool:
    """Gluon's host ``TensorDescriptor`` (triton.experimental.gluon.nvidia.hopper/blackwell)."""
    return type(value).__name__ == "TensorDescriptor" and type(value).__module__.startswith("triton.experimental.gluon")


def specialize(value, specialize=True, align=True):
    """(type, attribute) as Triton's launcher computes them for one runtime argument."""
    if internals_enabled("specialize"):
        try:
            from triton._C.libtriton import native_specialize_impl
            from triton.backends.compiler import BaseBackend

            return native_specialize_impl(BaseBackend, value, False, specialize, align)
        except Exception as err:
            _give_up("specialize", err)
    return _specialize_public(value)


def is_gluon(jit_fn) -> bool:
    """Whether ``jit_fn`` is a ``@gluon.jit`` kernel (public: ``JITFunction.is_gluon``)."""
    return bool(getattr(jit_fn, "is_gluon", lambda: False)())


def _source_class(jit_fn):
    """The compiler-source class of ``jit_fn``: ASTSource, or GluonASTSource for a Gluon kernel."""
    import triton

    if not is_gluon(jit_fn):
        return triton.compiler.ASTSource
    try:
        from triton.experimental.gluon._runtime import GluonASTSource
    except ImportError as err:
        raise RuntimeError(f"the compile view cannot build the Gluon kernel {jit_fn.__name__} with this Triton: "
                           f"triton.experimental.gluon._runtime.GluonASTSource is missing ({err}). Running it on "
                           "a GPU does not need it; showing its compiled code without one does") from None
    return GluonASTSource


def ast_source(jit_fn, signature: dict, constexprs: dict, attrs: dict):
    """The compiler source (``ASTSource``, or ``GluonASTSource`` for a Gluon kernel) of
    ``jit_fn``; ``attrs`` maps an argument index to its launcher attribute ("D": divisible by
    16), turned into the backend's hints."""
    source = _source_class(jit_fn)
    if internals_enabled("compile_attrs"):
        try:
            from triton.backends.nvidia.compiler import CUDABackend

            parsed = {(i,): CUDABackend.parse_attr(a) for i, a in attrs.items()}
            return source(jit_fn, signature, constexprs, parsed)
        except Exception as err:
            _give_up("compile_attrs", err)
    return source(jit_fn, signature, constexprs)


# ----------------------------------------------------------------------------- checked runs
# ``gemm_kernels.lab.checked.run_checked`` runs a kernel in Triton's interpreter with every load
# and store checked first.  Triton has no public hook for that, so it relies on the interpreter's
# internals: ``triton.runtime.interpreter.interpreter_builder`` (the object whose ``create_*``
# methods execute every IR operation on numpy arrays: ``create_masked_load``,
# ``create_masked_store``, ``create_addptr``, ...; wrapped on the instance while a checked run is
# under way, acting in its thread only), ``InterpretedFunction`` (an interpreted twin of a
# ``JITFunction``, built on the fly when the process runs compiled kernels), ``InterpreterError``
# (how the interpreter wraps an exception raised inside a kernel) and ``KernelInterface.__getitem__``
# (``kernel[grid]``, redirected in the thread of an exercise check).  Each of these process-wide
# hooks is a :class:`ThreadLocalPatch`: other threads' launches go on unchecked, and overlapping
# checks end in any order.  There is no public fallback: without them :func:`interpreter_internals`
# raises a RuntimeError that says what is missing.

#: the builder methods a checked run wraps; every one must exist for a checked run
CHECKED_BUILDER_METHODS = (
    "create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas",
    "create_descriptor_load", "create_descriptor_store", "create_make_tensor_descriptor",
    "create_addptr", "create_splat", "create_broadcast", "create_expand_dims", "create_reshape",
    "create_trans", "create_select", "create_cat", "create_join", "create_bitcast", "create_int_to_ptr", "create_ptr_to_int",
)


def interpreter_internals():
    """``(interpreter_builder, InterpretedFunction, InterpreterError)`` of this Triton, after checking
    that the builder has every method a checked run wraps; RuntimeError naming what is missing."""
    import triton

    try:
        from triton.runtime.errors import InterpreterError
        from triton.runtime.interpreter import InterpretedFunction, interpreter_builder
    except ImportError as err:
        raise RuntimeError(f"checked runs need Triton's interpreter (triton.runtime.interpreter: "
                           f"interpreter_builder, InterpretedFunction); Triton {triton.__version__} has no "
                           f"usable one ({err}). Launch the kernel with kernel[grid](...) instead.") from None
    missing = [m for m in CHECKED_BUILDER_METHODS if not callable(getattr(interpreter_builder, m, None))]
    if missing:
        raise RuntimeError(f"checked runs wrap the interpreter builder's {', '.join(missing)}, which Triton "
                           f"{triton.__version__} does not have. Launch the kernel with kernel[grid](...) instead.")
    return interpreter_builder, InterpretedFunction, InterpreterError


def jit_source_function(kernel):
    """The Python function behind a ``@triton.jit`` kernel (compiled or interpreted), or None."""
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover  (every supported Triton has it)
        InterpretedFunction = ()  # noqa: N806
    if isinstance(kernel, (JITFunction, InterpretedFunction)):
        return kernel.fn
    return None


class ThreadLocalPatch:
    """Replacements of some attributes of one object (a class, a module, the interpreter's
    builder) that act only in the threads that activated them.

    A check patches process-wide things (``kernel[grid]``, ``torch.empty``, the interpreter
    builder's memory operations), but other threads must go on as if nothing happened, and
    overlapping checks may end in any order.  So the replacements are put in place when the first
    activation in the process begins and taken out when the last one ends (whatever the order);
    in between, each replacement asks :meth:`current` for this thread's innermost activation and
    calls the original when this thread has none.  ``factories`` maps an attribute name to
    ``make(original) -> replacement``; ``owner`` is a function returning the object (looked up on
    first use: Triton is imported late).  An attribute that someone else replaced meanwhile is left
    as they set it (ours, inactive, calls through).  In a forked child only the forking thread's
    activations remain (see :func:`_after_fork_in_child`)."""

    def __init__(self, owner: Callable[[], object], factories: dict[str, Callable[[Callable], Callable]]):
        self._owner = owner
        self._factories = factories
        self._local = threading.local()
        self._active: dict = {}      # token -> the activating thread's stack (a list of (token, value))
        self._installed: dict = {}   # name -> (owner, had its own attribute, the old value, the replacement)
        _THREAD_LOCAL_PATCHES.append(self)

    def current(self):
        """This thread's innermost active value (None when this thread has not activated it)."""
        stack = getattr(self._local, "stack", None)
        return stack[-1][1] if stack else None

    def activate(self, value) -> object:
        """Act with ``value`` in this thread until :meth:`deactivate` (returns its token)."""
        if value is None:
            raise ValueError("a ThreadLocalPatch needs a value other than None to activate")
        token = object()
        stack = self._local.__dict__.setdefault("stack", [])
        with _PATCH_LOCK:
            if not self._active:
                self._install()
            self._active[token] = stack
        stack.append((token, value))
        return token

    def deactivate(self, token) -> None:
        """End one activation (any order; from any thread); the last one restores the originals."""
        with _PATCH_LOCK:
            stack = self._active.pop(token, None)
            if stack is None:
                return  # ended already
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] is token:
                    del stack[i]
                    break
            if not self._active:
                self._uninstall()

    @contextlib.contextmanager
    def active(self, value):
        token = self.activate(value)
        try:
            yield value
        finally:
            self.deactivate(token)

    def _install(self) -> None:
        owner = self._owner()
        installed = {}
        try:
            for name, make in self._factories.items():
                own = vars(owner)
                had, old = name in own, own.get(name)
                replacement = make(getattr(owner, name))
                setattr(owner, name, replacement)
                installed[name] = (owner, had, old, replacement)
        finally:
            self._installed = installed

    def _uninstall(self) -> None:
        installed, self._installed = self._installed, {}
        for name, (owner, had, old, replacement) in installed.items():
            if vars(owner).get(name) is not replacement:
                continue  # replaced by someone else since: theirs stays, ours (inactive) calls through
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)

    def _keep_only_this_thread(self) -> None:
        """After a fork: the other threads are gone, and so are their activations."""
        mine = getattr(self._local, "stack", None)
        self._active = {token: stack for token, stack in self._active.items() if stack is mine}
        if not self._active and self._installed:
            self._uninstall()


#: guards every ThreadLocalPatch's activations (re-created in a forked child)
_PATCH_LOCK = threading.Lock()
_THREAD_LOCAL_PATCHES: list[ThreadLocalPatch] = []


def _jit_class():
    from triton.runtime.jit import JITFunction

    return JITFunction


def _interpreted_call(original):
    def call(jit_fn, *args, **kwargs):
        twins = _INTERPRETED_CALLS.current()
        if twins is None:
            return original(jit_fn, *args, **kwargs)
        twin = twins.get(jit_fn.fn)
        if twin is None:
            _, InterpretedFunction, _ = interpreter_internals()  # noqa: N806
            twin = twins[jit_fn.fn] = InterpretedFunction(jit_fn.fn).rewrite()
        scope = _patch_core_for(jit_fn.fn)
        try:
            return twin(*args, **kwargs)
        finally:
            if scope is not None:
                scope.restore()
    return call


def _patch_core_for(fn):
    """The interpreter's patch of ``triton.language.core`` for a helper that calls it directly
    (Triton's own ``tl.zeros``, ``tl.full``-based helpers), undone by the caller: the launch
    patched only the modules the *kernel's* globals name (``tl``), so in a compiled process
    such a helper's ``core.full`` would raise "_semantic argument must be provided".  None for
    helpers that see ``tl`` alone (already patched), or a Triton without ``_patch_lang``."""
    import triton.language as tl

    if not any(value is tl.core for value in fn.__globals__.values()):
        return None
    try:
        from triton.runtime.interpreter import _patch_lang
    except ImportError:  # pragma: no cover  (Triton 3.6 to 3.9 have it)
        return None
    return _patch_lang(fn)


def index_scalars_for_new_numpy() -> None:
    """Triton 3.6 and 3.7's interpreter gives its scalars ``__index__ = int(handle.data)``, where the
    data is a 1-element 1-D array: numpy >= 2.4 refuses that conversion, so ``range(0, K, BLOCK)``
    in an interpreted kernel raises "only 0-dimensional arrays can be converted".  Wrap the function
    that installs it (``interpreter._patch_lang_tensor``) to install one that reads the element.
    Idempotent; nothing where the function is gone (Triton 3.8 fixed it)."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_gemm_kernels_index", False):
        return

    def index(self):
        data = self.handle.data
        return int(data.reshape(-1)[0]) if getattr(data, "size", 0) == 1 else int(data)

    def patch_lang_tensor(tensor, *rest):
        original(tensor, *rest)
        if rest and hasattr(rest[0], "set_attr"):  # 3.6+: a scope that restores what it set
            rest[0].set_attr(tensor, "__index__", index)
        else:  # pragma: no cover  (older interpreters set attributes for good)
            tensor.__index__ = index

    patch_lang_tensor._gemm_kernels_index = True
    interpreter._patch_lang_tensor = patch_lang_tensor


def _is_bf16(handle) -> bool:
    dtype = getattr(getattr(handle, "dtype", None), "scalar", None)
    return getattr(dtype, "name", None) == "bf16"


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) as float32: the same numbers, exactly."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 rounded to bf16 bit patterns (uint16), to nearest even as a GPU does; NaN stays NaN."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def bf16_arithmetic_in_interpreter() -> None:
    """Triton's interpreter keeps bf16 values as their raw 16-bit patterns (numpy has no bf16) and
    does arithmetic on those integers: ``a * b`` or ``tl.dot(a, b)`` of bf16 blocks gives garbage
    (triton-lang/triton#11584; errors of 1e10 and more), where a GPU computes.  Wrap the builder's
    ``binary_op``, ``unary_op`` and ``create_dot`` so bf16 operands are widened to float32 (exact),
    and a bf16 result is rounded back to bf16 as the GPU rounds it; ``cast_impl`` so that
    ``x.to(tl.bfloat16)`` of fp32 rounds to nearest even, as the GPU does (it truncated).
    Idempotent; each method is wrapped only where it exists."""
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    handle_class = getattr(interpreter, "TensorHandle", None)
    if builder is None or handle_class is None or getattr(builder, "_gemm_kernels_bf16", False):
        return
    import triton.language as tl

    def widened(handle):
        return handle_class(_bf16_to_f32(handle.data), tl.float32) if _is_bf16(handle) else handle

    def narrowed(result, bf16):
        data = getattr(result, "data", None)
        if bf16 and isinstance(data, np.ndarray) and data.dtype == np.float32:
            return handle_class(_f32_to_bf16(data), tl.bfloat16)
        return result

    binary_op, unary_op, create_dot, cast_impl = (getattr(builder, n, None) for n in
                                                  ("binary_op", "unary_op", "create_dot", "cast_impl"))
    if binary_op is not None:
        def binary(self, lhs, rhs, op):
            if not (_is_bf16(lhs) or _is_bf16(rhs)):
                return binary_op(self, lhs, rhs, op)
            return narrowed(binary_op(self, widened(lhs), widened(rhs), op), _is_bf16(lhs))
        builder.binary_op = binary
    if unary_op is not None:
        def unary(self, arg, op):
            if not _is_bf16(arg):
                return unary_op(self, arg, op)
            return narrowed(unary_op(self, widened(arg), op), True)
        builder.unary_op = unary
    if create_dot is not None:
        def dot(self, a, b, d, *rest, **kwargs):  # the accumulator d is fp32 (or fp16): its type stays
            return create_dot(self, widened(a), widened(b), d, *rest, **kwargs)
        builder.create_dot = dot
    if cast_impl is not None:
        def cast(self, src, dst_type, *rest, **kwargs):  # x.to(tl.bfloat16): to nearest even (it truncated)
            if getattr(dst_type.scalar, "name", None) == "bf16" and getattr(src.dtype.scalar, "name", None) == "fp32":
                return handle_class(_f32_to_bf16(src.data), tl.bfloat16)
            return cast_impl(self, src, dst_type, *rest, **kwargs)
        builder.cast_impl = cast
    if getattr(builder, "get_bf16", None) is None:  # Triton 3.6: a bf16 block times a Python float
        def get_bf16(self, value):
            return handle_class(_f32_to_bf16(np.array([value], dtype=np.float32)), tl.bfloat16)
        builder.get_bf16 = get_bf16
    builder._gemm_kernels_bf16 = True


#: Triton's float type names -> torch's dtype names, for the conversions torch does exactly
_TORCH_FLOATS = {"fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp16": "float16", "bf16": "bfloat16",
                 "fp32": "float32", "fp64": "float64"}


def _exact_widening(input_dtype, output_dtype):
    """(torch source, torch target) when every value of the one is a value of the other, else None."""
    import torch

    names = (_TORCH_FLOATS.get(getattr(input_dtype, "name", None)), _TORCH_FLOATS.get(getattr(output_dtype, "name", None)))
    if None in names:
        return None
    src, dst = (getattr(torch, name) for name in names)
    a, b = torch.finfo(src), torch.finfo(dst)
    # as many mantissa bits, as large a maximum and as small a subnormal
    if b.eps <= a.eps and b.max >= a.max and b.smallest_normal * b.eps <= a.smallest_normal * a.eps:
        return src, dst
    return None


def float_conversions_in_interpreter() -> None:
    """Make Triton's interpreter convert floats as a GPU does (``interpreter._convert_float``, used by
    ``.to()`` between float types and by ``tl.dot``'s fp8 operands).  Its bit arithmetic misreads
    subnormals where both formats have the exponent's width (bf16 -> fp32, e5m2 -> fp16: 2**-16
    came back 0, a bf16 1.1e-39 as 5.9e-39), and decodes every format as if it had IEEE
    infinities and NaNs: e4m3fn's NaN, S.1111.111, came back +-480, e5m2's NaNs finite in fp32.
    A widening (every source value exists in the target) goes through torch's conversion, exact,
    with the input's sign bit (a NaN's too); a narrowing keeps Triton's rounding, with e4m3fn's
    NaN made the output's NaN.
    Idempotent; nothing where the converter is gone."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_convert_float", None)
    if original is None or getattr(original, "_gemm_kernels_conversions", False):
        return

    def convert(input, input_dtype, output_dtype, *rest, **kwargs):
        widening = _exact_widening(input_dtype, output_dtype)
        if widening is not None:
            import torch

            src, dst = widening
            width_in, width_out = input_dtype.primitive_bitwidth, output_dtype.primitive_bitwidth
            raw = np.frombuffer(np.ascontiguousarray(input).tobytes(), dtype=f"int{width_in}").copy()
            out = torch.from_numpy(raw).view(src).to(dst).view(getattr(torch, f"int{width_out}")).numpy()
            # the sign bit as the input's: torch drops a NaN's (float16 -> float32 in its scalar path, -> bf16)
            top = np.array(1 << (width_out - 1), dtype=f"uint{width_out}")
            out = np.where(raw < 0, out.view(top.dtype) | top, out.view(top.dtype) & ~top)
            return out.reshape(np.shape(input))
        output = original(input, input_dtype, output_dtype, *rest, **kwargs)
        if getattr(input_dtype, "name", None) != "fp8e4nv" or not output_dtype.is_floating():
            return output
        nan_in = (np.frombuffer(np.ascontiguousarray(input).tobytes(), dtype=np.uint8) & 0x7F) == 0x7F
        if not nan_in.any():
            return output
        width, mantissa = output_dtype.primitive_bitwidth, output_dtype.fp_mantissa_width
        quiet_nan = ((1 << (width - 1 - mantissa)) - 1) << mantissa | 1 << (mantissa - 1)
        flat = output.reshape(-1).copy()
        flat[nan_in] = quiet_nan
        return flat.reshape(output.shape)

    convert._gemm_kernels_conversions = True
    interpreter._convert_float = convert


#: ``JITFunction.__call__`` (a ``@triton.jit`` helper called from a kernel) runs the helper's
#: interpreted twin in a thread inside :class:`interpreting`
_INTERPRETED_CALLS = ThreadLocalPatch(_jit_class, {"__call__": _interpreted_call})
#: (thread id, the knob's value before) of each :class:`interpreting` that switched the knob on
_knob_switches: list = []


class interpreting:
    """While active, ``@triton.jit`` functions called from interpreted code in this thread (a
    helper such as ``tl.cdiv``) run their interpreted twins, even in a process whose kernels are
    compiled; and the knob ``triton.knobs.runtime.interpret`` is on (it is process-wide: in a
    process that compiles, it is switched only while this thread holds :data:`INTERPRETER_LOCK`,
    which this takes, so one interpreted launch runs at a time).  Other threads' calls are not
    affected; in a process that interprets already, only the lock is taken."""

    def __enter__(self):
        from triton import knobs

        interpreter_internals()
        index_scalars_for_new_numpy()
        bf16_arithmetic_in_interpreter()
        float_conversions_in_interpreter()
        self._lock = INTERPRETER_LOCK
        self._lock.acquire()
        try:
            self._switched = not knobs.runtime.interpret
            if self._switched:
                _knob_switches.append((threading.get_ident(), knobs.runtime.interpret))
                knobs.runtime.interpret = True
            self._token = _INTERPRETED_CALLS.activate({})
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc):
        from triton import knobs

        try:
            _INTERPRETED_CALLS.deactivate(self._token)
            if self._switched:
                _, before = _knob_switches.pop()
                knobs.runtime.interpret = before
        finally:
            self._lock.release()
        return False


def interpreted_twin(kernel):
    """An interpreted version of the ``@triton.jit`` kernel (itself when it is interpreted already)."""
    _, InterpretedFunction, _ = interpreter_internals()  # noqa: N806
    if isinstance(kernel, InterpretedFunction):
        return kernel
    return InterpretedFunction(kernel.fn)


def _kernel_interface():
    from triton.runtime.jit import KernelInterface

    return KernelInterface


def _redirecting_getitem(original):
    def getitem(kernel, grid):
        launch = _LAUNCH_REDIRECTS.current()
        if launch is None or jit_source_function(kernel) is None:
            return original(kernel, grid)
        return lambda *args, **kwargs: launch(kernel, grid, *args, **kwargs)
    return getitem


#: ``kernel[grid]`` in a thread inside :class:`redirect_launches`
_LAUNCH_REDIRECTS = ThreadLocalPatch(_kernel_interface, {"__getitem__": _redirecting_getitem})


def launches_redirected() -> bool:
    """Whether this thread's ``kernel[grid]`` launches are redirected now (an exercise check records them)."""
    return _LAUNCH_REDIRECTS.current() is not None


class redirect_launches:
    """While active, ``kernel[grid](*args, **kwargs)`` of every plain ``@triton.jit`` kernel
    launched *in this thread* calls ``launch(kernel, grid, *args, **kwargs)`` instead (autotuned
    kernels launch as usual; other threads' launches are not affected).  Several may be active
    at once, in one thread (the innermost acts) or in several, and end in any order."""

    def __init__(self, launch: Callable):
        self._launch = launch
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(_LAUNCH_REDIRECTS.activate(self._launch))
        return self

    def __exit__(self, *exc):
        if self._tokens:
            _LAUNCH_REDIRECTS.deactivate(self._tokens.pop())
        return False


# ----------------------------------------------------------------------------- interpreter
def _library_modules():
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name == "triton.language" or name.startswith("triton.language."))]


def interpret_library_functions() -> int:
    """Make ``triton.language``'s own ``@triton.jit`` functions interpreted; returns how many changed.

    Triton decides at decoration time whether a ``@triton.jit`` function is compiled
    (``JITFunction``) or interpreted (``InterpretedFunction``), by ``TRITON_INTERPRET``.  The
    package's kernels are decorated after ``gemm_kernels.runtime`` sets it; but when Triton was
    imported first (``import triton``, ``torch.compile``, ``import torch._dynamo``), its library
    helpers such as ``tl.cdiv`` were decorated as compiled functions, and an interpreted kernel
    that calls one fails with "Cannot call @triton.jit'd outside of the scope of a kernel".
    This replaces each of them (module attributes and the ``tl.tensor`` methods) by the
    ``InterpretedFunction`` that an interpreted import would have made.  Only called when the
    process runs kernels in the interpreter, where no compiled kernel can run anyway."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        replaced: dict = {}

        def interpreted(value):
            if id(value) not in replaced:
                replaced[id(value)] = (value, InterpretedFunction(value.fn))
            return replaced[id(value)][1]

        for module in _library_modules():
            namespaces = [module] + [v for v in vars(module).values()
                                     if isinstance(v, type) and v.__module__ == module.__name__]
            for namespace in namespaces:
                for name, value in list(vars(namespace).items()):
                    if isinstance(value, JITFunction):
                        setattr(namespace, name, interpreted(value))
        return len(replaced)
    except Exception as err:
        raise RuntimeError(
            "gemm_kernels runs kernels in Triton's interpreter here, but Triton was imported first (by `import "
            "triton`, torch.compile or torch._dynamo) in compiled mode, and this Triton's library functions could "
            f"not be switched to the interpreter ({type(err).__name__}: {err}). Restart Python (the notebook "
            "kernel) and `import gemm_kernels` before anything that imports Triton, or set TRITON_INTERPRET=1 "
            "in the environment before Python starts.") from err


#: held by every interpreted launch (see serialise_interpreted_launches); a forked child gets a
#: fresh one (:func:`_after_fork_in_child`)
INTERPRETER_LOCK = threading.RLock()


def serialise_interpreted_launches() -> bool:
    """Let only one interpreted launch run at a time in this process; True when the lock is in place.

    Triton's interpreter is not thread-safe: during a launch it swaps ``triton.language``'s
    builtins for interpreted versions *module-wide* and restores them afterwards, and the
    program id lives in one global builder.  Two threads launching at once see each other's
    restored builtins ("Did you forget to add @triton.jit?") and program ids (a Stream-K kernel
    then waited forever).  So ``InterpretedFunction.run`` (every ``kernel[grid](...)`` and
    autotuner launch) takes :data:`INTERPRETER_LOCK`: concurrent calls are correct, one at a time."""
    try:
        import functools

        from triton.runtime.interpreter import InterpretedFunction

        run = InterpretedFunction.run
        if getattr(run, "_gemm_kernels_locked", False):
            return True

        @functools.wraps(run)
        def locked_run(self, *args, **kwargs):
            if os.environ.get("TRITON_INTERPRET") != "1":  # changed since the import: say so, keep ours
                keep_interpret_decision(True)
            with INTERPRETER_LOCK:  # looked up on every call: a forked child has a new one
                return run(self, *args, **kwargs)

        locked_run._gemm_kernels_locked = True
        InterpretedFunction.run = locked_run
        return True
    except Exception as err:
        _give_up("interpreter_lock", RuntimeError(f"{err}; interpreted launches from several threads at once are "
                                                  "not safe: launch from one thread"))
        return False


# ----------------------------------------------------------------------------- the decision made at import
_TRUTHY = {"1", "true", "yes", "on"}
_interpret_change_warned = False


def keep_interpret_decision(interpreted: bool) -> None:
    """Keep kernels interpreted (``interpreted``) or compiled, as ``gemm_kernels.runtime`` decided
    at import, whatever happened to ``TRITON_INTERPRET`` since.

    Triton reads ``TRITON_INTERPRET`` whenever it decorates a ``@triton.jit`` function (the
    package's kernel modules load on first use) and in a few places at launch: unsetting it after
    ``import gemm_kernels`` on a CPU made every kernel a compiled one ("0 active drivers"), and
    setting it on a GPU machine would have sent tensors on the GPU to the interpreter.  So a change
    is undone, with one warning saying it is ignored and how to switch for real, and Triton's knob
    ``triton.knobs.runtime.interpret`` is pinned in an interpreting process (from then on the
    variable no longer matters to Triton here)."""
    global _interpret_change_warned

    value = os.environ.get("TRITON_INTERPRET")
    if ((value or "").strip().lower() in _TRUTHY) != interpreted:
        if not _interpret_change_warned:
            _interpret_change_warned = True
            now = "unset" if value is None else f"set to {value!r}"
            mode = "in Triton's interpreter on the CPU" if interpreted else "compiled on the GPU"
            warnings.warn(
                f"gemm_kernels: TRITON_INTERPRET was {now} after `import gemm_kernels`, which had already decided "
                f"to run kernels {mode}; the change is ignored (Triton decides when each kernel is defined, so "
                "switching now would break the kernels). To switch, set GEMM_KERNELS_INTERPRET=1 (or "
                "TRITON_INTERPRET=1) before Python starts, or unset it there, and restart (the notebook kernel).",
                RuntimeWarning, stacklevel=3)
    elif not interpreted:
        return  # compiled, and the variable untouched: nothing to do (Triton is not even imported here)
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    from triton import knobs  # after the variable is right: a first import decorates triton.language by it

    if "interpret" not in vars(knobs.runtime) or knobs.runtime.interpret != interpreted:
        knobs.runtime.interpret = interpreted  # pinned: read from here on, not from the environment
        if not interpreted:
            os.environ.pop("TRITON_INTERPRET", None)  # setting the knob wrote "0" there


# ----------------------------------------------------------------------------- fork
def _after_fork_in_child() -> None:
    """A child forked while another thread was inside an interpreted launch (or a check) inherits
    its locks held and its activations on: that thread does not exist in the child, so nothing
    would ever release them (the child's first launch waited forever).  Fresh locks, and only the
    forking thread's activations kept."""
    global INTERPRETER_LOCK, _PATCH_LOCK

    INTERPRETER_LOCK = threading.RLock()
    _PATCH_LOCK = threading.Lock()
    for patch in _THREAD_LOCAL_PATCHES:
        patch._keep_only_this_thread()
    me = threading.get_ident()
    others = [before for thread, before in _knob_switches if thread != me]
    if others:  # a thread that is gone had switched the knob on for its check: switch it back
        from triton import knobs

        knobs.runtime.interpret = others[0]
        _knob_switches[:] = [(t, b) for t, b in _knob_switches if t == me]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
