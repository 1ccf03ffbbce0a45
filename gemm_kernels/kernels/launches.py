"""Kept launches: a repeated call skips its checks, its argument binding and Triton's launch path.

``kernel[grid](...)`` spends tens of microseconds of Python per call (binding ~25 arguments,
working out each one's specialisation, looking the compiled kernel up), more than the GPU time
of a small GEMM.  A call whose tensors have the same shapes, strides, dtypes, devices and
16-byte alignments as an earlier call's, with the same options, passes the same checks and
launches the same compiled kernel with the same arguments but the tensors' addresses.  So the
first such call binds its launch (``TunedKernel.bind``: tuned config, compiled kernel, C
launcher) and keeps it under that *call key*, without the call's tensors; the next call
computes the key, allocates C and hands the kernel its tensors (``KeptLaunch``; their addresses
where the C launcher reads them, which spares it a driver query per pointer).

A tensor that cannot be keyed (a subclass other than ``nn.Parameter``, a lazily negated view,
one that needs autograd) takes the checked path every time.  GPU only: the interpreter has no
compiled kernel to keep.  ``GEMM_KERNELS_KEEP_LAUNCHES=0`` (at import) or ``set_keeping(False)``
turns keeping off (the ``host`` bench suite's "checked every call" rows).  Measured: PERF_NOTES 28; ``python -m gemm_kernels.bench
--suite host``.
"""

from __future__ import annotations

import threading
import weakref

import torch

from .. import _env, _triton_compat, runtime

KEEP_ENV = "GEMM_KERNELS_KEEP_LAUNCHES"
_KEYABLE = (torch.Tensor, torch.nn.Parameter)


def tensor_key(t):
    """What the checks and Triton's specialisation read of ``t`` (not its values or address), or
    None when ``t`` must go through the checks every call.  (A lazily conjugated view is complex,
    a dtype no kernel takes: its call is refused by the checks, so never kept.)"""
    if type(t) not in _KEYABLE or t.layout is not torch.strided or t.is_neg() or (
            t.requires_grad and torch.is_grad_enabled()):
        return None
    return t.size(), t.stride(), t.dtype, t.device, t.data_ptr() % 16


def call_key(tensors, options) -> tuple | None:
    """The key of a call with these tensors (None entries allowed: an absent bias) and hashable
    options; None when a tensor cannot be keyed or an option cannot be hashed."""
    keys = []
    grad_enabled = None  # read once, and only when a tensor requires grad
    for t in tensors:  # tensor_key of each, inlined: a call per tensor costs about as much as its key
        if t is None:
            keys.append(None)
            continue
        if type(t) not in _KEYABLE or t.layout is not torch.strided or t.is_neg():  # sparse: no strides
            return None
        if t.requires_grad:
            if grad_enabled is None:
                grad_enabled = torch.is_grad_enabled()
            if grad_enabled:
                return None
        keys.append((t.size(), t.stride(), t.dtype, t.device, t.data_ptr() % 16))
    try:  # the tensors' parts always hash: only the options can fail (the cache's look-up hashes the key)
        hash(options)
    except TypeError:  # e.g. a bad activation passed as a list: the checks name it
        return None
    # each option's type too: 8.0 == 8 and True == 1 hash alike, but only one of each pair passes the checks
    return (*keys, *options, *map(type, options))


class KeptLaunch:
    """A bound launch without its tensors: ``__call__(a=..., b=..., ...)`` allocates C (on
    ``out_device``, by default a's device) and launches.

    ``sources`` maps each forgotten kernel parameter to the call's tensor it takes (``"out"`` is
    C; a missing tensor, e.g. no bias, also takes C, which the kernel then never reads; a strided
    ``bias`` is copied, as the checks copy it: the kernels read ``bias_ptr + n``);
    ``workspace()`` returns per-call buffers by parameter (kept per stream, ``runtime.stream_buffers``).
    Where the bound launch goes straight to the C launcher (``takes_addresses``), the kernel gets
    the tensors' addresses, not the tensors: the launcher then asks the driver about none of them."""

    def __init__(self, bound, out_shape, out_dtype, sources: dict, *, uses_tma=False, workspace=None,
                 out_device=None):
        buffers = workspace() if workspace is not None else {}
        self.bound = bound.forget(*sources, *buffers)
        # separate sizes: torch.empty parses them faster than a torch.Size
        self.out_shape, self.out_dtype, self.out_device = tuple(out_shape), out_dtype, out_device
        slot = bound.slot  # the parameters' positions, worked out once
        self.sources = tuple((slot(param), source) for param, source in sources.items())
        if uses_tma:  # hand the kernel its descriptor scratch directly: no triton.set_allocator per call
            self.bound.scratch_allocator = runtime.tma_scratch
        self.uses_tma = uses_tma and not self.bound.owns_scratch
        self.workspace = workspace
        self.workspace_slots = {param: slot(param) for param in buffers}
        self.addresses = getattr(self.bound, "takes_addresses", False)

    def __call__(self, **tensors) -> torch.Tensor:
        if _HEARD.listening:
            _HEARD.launches.append(self)
        bias = tensors.get("bias")
        if bias is not None and bias.stride(0) != 1:
            tensors["bias"] = bias.contiguous()
        out = torch.empty(*self.out_shape, device=self.out_device or tensors["a"].device, dtype=self.out_dtype)
        arguments = self.bound.arguments.copy()
        # the buffers themselves held until the launch returns, not only their addresses: under a
        # graph capture they are fresh, and nothing else keeps them
        buffers = None if self.workspace is None else self.workspace()
        slots = self.workspace_slots
        if self.addresses:
            address = out.data_ptr()
            for i, source in self.sources:
                t = tensors.get(source)
                arguments[i] = address if t is None else t.data_ptr()
            if buffers is not None:
                for param, buffer in buffers.items():
                    arguments[slots[param]] = buffer.data_ptr()
        else:
            for i, source in self.sources:
                t = tensors.get(source)
                arguments[i] = out if t is None else t
            if buffers is not None:
                for param, buffer in buffers.items():
                    arguments[slots[param]] = buffer
        if self.uses_tma:
            runtime.ensure_tma_allocator()
        self.bound.launch(arguments)
        return out


class _Listening(threading.local):
    """The kept launches a call ran or kept, while :func:`kept_during` listens (per thread)."""

    listening = False
    launches: list | None = None


_HEARD = _Listening()


def heard(launch) -> None:
    """Tell a listening :func:`kept_during` that this call ran or kept ``launch`` (a
    :class:`KeptLaunch`, or ``matmul_ws``'s plan)."""
    if _HEARD.listening:
        _HEARD.launches.append(launch)


def kept_during(fn):
    """``(fn(), launch)``: ``launch`` is the one kept launch ``fn`` ran or kept, None when it ran
    none or several.  ``matmul_auto`` keeps it, so a repeated call goes to it straight."""
    outer = _HEARD.listening, _HEARD.launches
    _HEARD.listening, _HEARD.launches = True, []
    try:
        result = fn()
        launches = _HEARD.launches
    finally:
        _HEARD.listening, _HEARD.launches = outer
    return result, (launches[0] if len(launches) == 1 else None)


#: every store of kept launches, for :func:`forget_kept`: each LaunchCache (weakly: a test or a
#: script that replaces a module's cache lets the old one go) and plain dicts such as ``matmul_ws``'s plans
_CACHES: weakref.WeakSet = weakref.WeakSet()
_DICTS: list = []


def register_store(store: dict) -> None:
    """Make :func:`forget_kept` clear ``store``, a module's dict of kept launches (LaunchCaches
    register themselves)."""
    _DICTS.append(store)


def forget_kept() -> None:
    """Drop every kept launch: each call key's next call is a first call again (checks, binding),
    while the tuned configs and the compiled kernels stay.  The ``host`` suite's first-call rows
    time a new M in a tuned bucket so."""
    for store in [*_CACHES, *_DICTS]:
        store.clear()


class LaunchCache:
    """Kept launches of one launcher by call key; at most ``size`` (then it starts over)."""

    def __init__(self, size: int = 256):
        self._launches: dict = {}
        self.size = size
        _CACHES.add(self)

    def get(self, key):
        if key is None:
            return None
        return self._launches.get(key)

    def run(self, key, **tensors):
        """C from the kept launch of ``key`` on these tensors (C on ``a``'s device), or None when
        none is kept (a call whose key is None never has one)."""
        kept = self.get(key)
        return None if kept is None else kept(**tensors)

    def keep(self, key, launch) -> None:
        if key is None:
            return
        if len(self._launches) >= self.size:  # many shapes (e.g. M changing every call): start over
            self._launches.clear()
        self._launches[key] = launch
        heard(launch)

    def clear(self) -> None:
        self._launches.clear()

    def __len__(self) -> int:
        return len(self._launches)


#: launches are kept on a GPU unless GEMM_KERNELS_KEEP_LAUNCHES is off (0, false, no) at import;
#: ``set_keeping`` changes it
_keep = _env.flag(KEEP_ENV, True)


def keeping() -> bool:
    """Whether launches are kept (read on every call: one global, not the environment).  Never while
    an exercise check records this thread's launches: a kept launch would bypass ``kernel[grid]``,
    and a package kernel launched by a learner's launcher would go unseen (a GPU test caught it)."""
    return _keep and not runtime.RUNTIME.interpreted and not _triton_compat.launches_redirected()


def set_keeping(on: bool) -> bool:
    """Keep launches (True) or check and bind every call (False); returns the previous setting.
    Kept launches stay kept, but are not used while off."""
    global _keep
    before, _keep = _keep, bool(on)
    return before


def bind(tuned, grid, kwargs: dict, config_kwargs: dict | None = None):
    """The launch of ``tuned`` (a ``TunedKernel``) with ``kwargs``, bound: tuned (which launches)
    then kept as a ``BoundLaunch``; or with an explicit config's kwargs (``num_warps`` and
    ``num_stages`` among them) on its kernel.  None when the choice cannot be read (then the
    caller launches the public way every time)."""
    if config_kwargs is None:
        bound = tuned.bind(grid, **kwargs)
        return bound if hasattr(bound, "launch_with") else None
    options = {k: config_kwargs[k] for k in ("num_warps", "num_stages") if k in config_kwargs}
    params = {k: v for k, v in config_kwargs.items() if k not in options}
    return _triton_compat.BoundLaunch(tuned.fn, grid, (), {**kwargs, **params}, options)


def launch_and_keep(cache, key, tuned, grid, args, out, sources, *, config_kwargs=None, uses_tma=False,
                    workspace=None) -> None:
    """Launch ``tuned`` with ``args`` (the checked path of every single-GEMM launcher) and, when
    the call has a key, keep the bound launch for the next call with that key."""
    bound = bind(tuned, grid, args, config_kwargs) if key is not None else None
    if bound is None:
        if config_kwargs is None:
            tuned[grid](**args)
        else:
            tuned.fn[grid](**args, **config_kwargs)
        return
    bound()  # binding may have tuned (launching through the autotuner): this launch is the one that counts
    cache.keep(key, KeptLaunch(bound, out.shape, out.dtype, sources, uses_tma=uses_tma, workspace=workspace,
                               out_device=out.device))  # a's device, which the key fixes


def config_key(config) -> tuple | None:
    """A ``triton.Config``'s identity as a key part (None for the default, tuned, config): each
    value with its type, as ``call_key`` keys options (BLOCK_M=64.0 or num_warps=4.0 equal 64
    and 4, but only the ints pass the checks)."""
    if config is None or not hasattr(config, "all_kwargs"):  # not a Config: the checks refuse it, nothing is kept
        return config
    return tuple(sorted((name, value, type(value)) for name, value in config.all_kwargs().items()))
