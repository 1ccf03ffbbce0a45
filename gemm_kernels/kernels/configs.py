"""Tuning, kept apart from the math: block shapes, warps and pipeline depth per kernel.

On a GPU each kernel is autotuned over a small, pruned list of configs (Hopper-friendly
shapes first).  In the interpreter every kernel gets one small fixed config: autotuning
needs a GPU driver to time anything, and small blocks keep the CPU emulation quick.
"""

from __future__ import annotations

import triton

from .. import _triton_compat, runtime

#: the single config used by every kernel in the interpreter (tl.dot needs blocks >= 16)
INTERPRETER_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}


def _cfg(bm, bn, bk, stages, warps, **extra):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **extra}, num_stages=stages, num_warps=warps)


def _interpreter(**extra):
    return [triton.Config({**INTERPRETER_BLOCKS, **extra}, num_stages=1, num_warps=4)]


def _tuning_list(cfgs):
    """The configs a kernel autotunes over (``None`` entries, loop options this Triton lacks, dropped).
    GEMM_KERNELS_AUTOTUNE=0 is applied per launch by :func:`fit_to_device`, after the configs
    that do not fit the inputs' dtype are gone."""
    return [c for c in cfgs if c is not None]


#: Hopper's shared memory per block (227 KiB), used where no GPU can be asked (compile view, tests)
HOPPER_SHARED_MEMORY_BYTES = runtime.ARCH_SHARED_MEMORY[(9, 0)]
MIN_STAGES = 2


def shared_memory_limit() -> int:
    """Shared memory one program may use on this GPU (opt-in maximum), GEMM_KERNELS_ARCH's, or Hopper's on a CPU."""
    return runtime.shared_memory_bytes()


def pipeline_bytes(config: triton.Config, element_bytes: int) -> int:
    """Shared memory of the software pipeline: ``num_stages`` A and B blocks in flight."""
    k = config.kwargs
    return config.num_stages * (k["BLOCK_M"] * k["BLOCK_K"] + k["BLOCK_K"] * k["BLOCK_N"]) * element_bytes


def _element_bytes(args: dict) -> int:
    """Bytes per input element of a launch: the DTYPE constexpr or the a/x tensor (default 2)."""
    dtype = args.get("DTYPE")
    if getattr(dtype, "primitive_bitwidth", None):
        return dtype.primitive_bitwidth // 8
    for name in ("a_ptr", "x_ptr"):
        if hasattr(args.get(name), "element_size"):
            return args[name].element_size()
    return 2


def _bytes(config: triton.Config, stages: int, element_bytes: int) -> int:
    """Shared memory of ``config`` at ``stages``: the pipeline, plus the C tile staged for the store."""
    k = config.kwargs
    per_stage = pipeline_bytes(config, element_bytes) // config.num_stages
    return stages * per_stage + k["BLOCK_M"] * k["BLOCK_N"] * element_bytes


def _fewer_stages(config: triton.Config, element_bytes: int, limit: int):
    """``config`` with as few stages taken off as it needs to fit (down to MIN_STAGES), or None."""
    stages = config.num_stages
    while stages > MIN_STAGES and _bytes(config, stages, element_bytes) > limit:
        stages -= 1
    if _bytes(config, stages, element_bytes) > limit:
        return None
    return config if stages == config.num_stages else triton.Config(dict(config.kwargs), num_warps=config.num_warps,
                                                                    num_stages=stages)


def _smaller_blocks(config: triton.Config, element_bytes: int, limit: int) -> triton.Config:
    """When no config of a list fits (fp32 on a 100 KB Ampere/Ada card): the smallest one at
    MIN_STAGES with its largest block halved until it fits (blocks stay >= 32, tl.dot's comfort)."""
    k = dict(config.kwargs)
    shrunk = triton.Config(k, num_warps=config.num_warps, num_stages=MIN_STAGES)
    while _bytes(shrunk, MIN_STAGES, element_bytes) > limit:
        name = max(("BLOCK_K", "BLOCK_N", "BLOCK_M"), key=lambda n: k[n])
        if k[name] <= 32:
            break
        k[name] //= 2
        shrunk = triton.Config(dict(k), num_warps=min(config.num_warps, 4), num_stages=MIN_STAGES)
    return shrunk


def fit_to_device(config_list, named_args, **kwargs):
    """``early_config_prune`` of every kernel: make each config fit this launch, then apply the
    GEMM_KERNELS_AUTOTUNE switch.

    The lists above are tuned for 2-byte inputs; fp32 doubles every block's bytes, so a config
    whose pipeline plus the C tile staged for the epilogue would overflow shared memory gets
    fewer stages (down to 2) or is dropped; if none is left, the smallest gets smaller blocks.  With
    GEMM_KERNELS_AUTOTUNE=0 only the first surviving config remains (no tuning run)."""
    element_bytes = _element_bytes({**named_args, **kwargs})
    limit = shared_memory_limit()
    fitted = [c for c in (_fewer_stages(config, element_bytes, limit) for config in config_list) if c is not None]
    fitted = fitted or [_smaller_blocks(min(config_list, key=lambda c: _bytes(c, MIN_STAGES, element_bytes)),
                                        element_bytes, limit)]
    if not runtime.autotune_enabled():
        return fitted[:1]
    return small_search(fitted) if runtime.autotune_mode() == "small" else fitted


#: tile shapes the small search (GEMM_KERNELS_AUTOTUNE=small, the notebooks) tries per new shape
SMALL_SEARCH_SHAPES = 3


def small_search(fitted):
    """The first config of each of the first SMALL_SEARCH_SHAPES tile shapes (BLOCK_M x BLOCK_N):
    a few compiles per new problem instead of every config, but still a small tile for a small
    problem (the lists put the large, Hopper-friendly tiles first)."""
    seen, picked = set(), []
    for config in fitted:
        shape = (config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"])
        if shape not in seen and len(seen) < SMALL_SEARCH_SHAPES:
            seen.add(shape)
            picked.append(config)
    return picked


#: block sizes an explicit config may use: tl.dot needs >= 16, a TMA block dimension <= 256
BLOCK_RANGE = (16, 256)


def _power_of_two(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def check_block_size(value, name: str) -> int:
    """A block size a kernel can compile: a power of two in BLOCK_RANGE (ValueError otherwise)."""
    low, high = BLOCK_RANGE
    if not (_power_of_two(value) and low <= value <= high):
        raise ValueError(f"{name} must be a power of two from {low} to {high}, got {value!r}")
    return value


def blocks_or_defaults(defaults: dict, block_m=None, block_n=None, block_k=None) -> tuple[int, int, int]:
    """The trace helpers' ``block_m/n/k`` arguments, None meaning the kernel's default, checked."""
    return tuple(check_block_size(defaults[f"BLOCK_{d}"] if value is None else value, f"block_{d.lower()}")
                 for d, value in zip("MNK", (block_m, block_n, block_k)))


def check_explicit_config(config: triton.Config, allowed_switches: dict) -> None:
    """A user's ``config=``: only the block sizes and the kernel's loop switches, with values the
    kernel can compile (powers of two in BLOCK_RANGE, boolean switches, sane warps and stages).
    Raises ValueError/TypeError naming the field, instead of a compiler error or a wrong answer."""
    unknown = set(config.kwargs) - {"BLOCK_M", "BLOCK_N", "BLOCK_K"} - set(allowed_switches)
    if unknown:
        raise ValueError(f"config sets {sorted(unknown)}, which this kernel does not take from a config; "
                         f"allowed: BLOCK_M, BLOCK_N, BLOCK_K{''.join(', ' + k for k in allowed_switches)}")
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        check_block_size(config.kwargs[name], f"config {name}")
    for name in set(config.kwargs) & set(allowed_switches):
        if not isinstance(config.kwargs[name], bool):
            raise TypeError(f"config {name} must be True or False, got {config.kwargs[name]!r}")
    if not (_power_of_two(config.num_warps) and config.num_warps <= 16):
        raise ValueError(f"config num_warps must be 1, 2, 4, 8 or 16, got {config.num_warps!r}")
    if isinstance(config.num_stages, bool) or not isinstance(config.num_stages, int) or config.num_stages < 1:
        raise ValueError(f"config num_stages must be an int >= 1, got {config.num_stages!r}")


#: pass as ``triton.autotune(..., prune_configs_by=PRUNE)``
PRUNE = {"early_config_prune": fit_to_device}


def time_candidate(kernel_call, quantiles=None):
    """How the autotuner times each config: from a CUDA graph of the launches.

    Triton's default (``do_bench``) times back-to-back Python launches; a kernel that runs for
    less than a launch costs on the host (~50-100 µs here) is then timed by the host, and the
    choice between configs is noise (measured on an H100 for 4 x 512^3 grouped problems:
    do_bench put the 64x64 config first, while from a graph 64x128 is faster; PERF_NOTES.md).  A graph replays the launches without Python in between."""
    import torch
    from triton.testing import do_bench_cudagraph

    # do_bench_cudagraph runs on a stream of its own, which does not wait for this one: the
    # launch's inputs may still be in flight here (an asynchronous copy of the grouped kernels'
    # metadata was: misaligned-address faults, only with several processes on the GPU).  Its
    # writes to C must also be done before this stream's real launch.  Wait both ways.
    torch.cuda.synchronize()
    rep = SMALL_SEARCH_REP_MS if runtime.autotune_mode() == "small" else AUTOTUNE_REP_MS
    timings = do_bench_cudagraph(kernel_call, rep=rep, quantiles=quantiles)
    torch.cuda.synchronize()
    return timings


#: milliseconds of replays per candidate config (full search, small search)
AUTOTUNE_REP_MS = 50
SMALL_SEARCH_REP_MS = 10


class TunedKernel:
    """``triton.autotune(kernel)`` that remembers what it chose, so a repeated launch skips it.

    Triton's autotuner rebuilds its cache key from every argument and re-binds them all on
    every call, even when the answer is cached; on an H100 that Python costs more than many
    small kernels run (PERF_NOTES.md).  Here the first launch for a key goes through the
    autotuner (tuning if needed) and its choice is kept; later launches with the same key call
    the kernel with that config directly.  The key is the ``key`` arguments plus every tensor's
    dtype, as the autotuner's.  Reading the choice is the one internal used
    (``_triton_compat.chosen_config``); without it every launch goes through the autotuner.

    When :func:`fit_to_device` leaves a single config (the interpreter, GEMM_KERNELS_AUTOTUNE=0,
    or one config that fits), there is nothing to choose: the kernel is launched with it directly
    and the autotuner is never asked.  (Triton 3.6 and 3.7's autotuner would still time a list
    pruned to one config.)

    The key's ``M`` (the token count, which changes call to call) is bucketed by
    :func:`row_bucket`, with the smallest BLOCK_M of the list as its granule: a new M in a known
    bucket launches the bucket's pick, with no tuning.  Picks are also kept on disk
    (``tuning_cache``), so a new process with the same Triton, GPU and kernel source reuses them.

    Used like the autotuner: ``tuned[grid](*args, **kwargs)``.  ``fn`` is the kernel, ``keys``
    the key names, ``autotuner`` Triton's object, ``chosen`` the memory, ``disk`` the kept
    picks; ``do_bench`` times one candidate (:func:`time_candidate` by default).  ``variant``
    names a second JIT object of the same kernel in the disk cache's file name.
    """

    def __init__(self, kernel, config_list, key, do_bench=None, variant: str = ""):
        import inspect

        from .tuning_cache import DiskPicks

        self.fn = kernel
        self.configs = list(config_list)
        self.keys = list(key)
        self.arg_names = list(inspect.signature(kernel.fn).parameters)
        self.autotuner = triton.autotune(configs=self.configs, key=self.keys, prune_configs_by=PRUNE,
                                         do_bench=do_bench or time_candidate)(kernel)
        self.chosen: dict = {}
        self.row_granule = min(c.kwargs["BLOCK_M"] for c in self.configs) if "M" in self.keys else None
        self.disk = DiskPicks(kernel, self.configs, variant)

    def tuning_key(self, *args, **kwargs) -> tuple:
        """The tuning key of these launch arguments (positional ones by name), M bucketed."""
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        if self.row_granule is not None and "M" in named:
            named["M"] = row_bucket(named["M"], self.row_granule)
        return (*(named[k] for k in self.keys if k in named),
                *(str(v.dtype) for v in named.values() if hasattr(v, "dtype")))

    def _only_config(self, key, args, kwargs):
        """The config of this launch when pruning leaves just one, or the pick kept on disk for
        ``key`` when it is still a candidate (remembered under ``key``); else None."""
        fitted = fit_to_device(self.configs, {**dict(zip(self.arg_names, args)), **kwargs})
        config = fitted[0] if len(fitted) == 1 else self.disk.get(key, fitted)
        if config is not None:
            self.chosen[key] = config
        return config

    def _known_config(self, key, args, kwargs):
        """The remembered config of ``key``, the only one that fits, or the one kept on disk; None
        when there is a choice to make."""
        return self.chosen.get(key) or self._only_config(key, args, kwargs)

    def _tune(self, grid, key, args, kwargs):
        """Launch through the autotuner (tuning this key) and remember its choice, in memory and
        on disk; None when the choice cannot be read."""
        self.autotuner[grid](*args, **kwargs)
        config = _triton_compat.chosen_config(self.autotuner)
        if config is not None:
            self.chosen[key] = config
            self.disk.put(key, config)
        return config

    def config_for(self, grid, *args, **kwargs):
        """The config this launch runs with: the remembered one, the only one that fits, or the
        autotuner's after a run through it (which launches the kernel).  None when the choice
        cannot be read."""
        key = self.tuning_key(*args, **kwargs)
        return self._known_config(key, args, kwargs) or self._tune(grid, key, args, kwargs)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            key = self.tuning_key(*args, **kwargs)
            config = self._known_config(key, args, kwargs)
            if config is None:
                self._tune(grid, key, args, kwargs)  # launches through the autotuner
            else:
                self.fn[grid](*args, **kwargs, **config.all_kwargs())
        return launch

    def bind(self, grid, *args, **kwargs):
        """A :class:`~gemm_kernels._triton_compat.BoundLaunch` of this launch with the tuned config:
        calling it repeats the launch with no Python argument handling (GPU only; None in the
        interpreter).  Tunes first if this key is new and several configs fit, which launches the
        kernel (its output is then written once more by the first call)."""
        if runtime.interpreted():
            return None
        config = self.config_for(grid, *args, **kwargs)
        if config is None:  # the choice is not readable: every run goes through the autotuner
            return _AutotunedLaunch(self, grid, args, kwargs)
        options = {k: v for k, v in config.all_kwargs().items() if k not in config.kwargs}
        return _triton_compat.BoundLaunch(self.fn, grid, args, {**kwargs, **config.kwargs}, options)


class _AutotunedLaunch:
    """The public fallback of :meth:`TunedKernel.bind`: every call is a launch through the autotuner."""

    def __init__(self, tuned, grid, args, kwargs):
        self._call = lambda: tuned.autotuner[grid](*args, **kwargs)
        self.fast = False

    def __call__(self) -> None:
        self._call()


#: kernel arguments a kernel need not specialise on: Triton compiles a kernel anew for an int
#: argument that turns divisible by 16, or 1.  M (the token count) only bounds the tile rows of
#: the TMA kernels and of pointer loads along K, so those kernels take ``do_not_specialize=ROWS``:
#: a new M reuses the compiled kernel (their compile-view PTX is the same either way, PERF_NOTES 40).
ROWS = ("M",)


def rows_specialised(kernel):
    """A second JIT object of a pointer kernel (declared with ``do_not_specialize=ROWS``) that
    does specialise on M: where A is column-major its loads run along M, and 16-byte loads need
    M divisible by 16 (``(pid_m * BLOCK_M + arange) % M`` is contiguous only then)."""
    fn = kernel
    while not isinstance(fn, type(rows_specialised)):
        fn = fn.fn
    return triton.jit(fn)


def column_major_rows(a) -> bool:
    """Whether A's loads run along M (unit stride between rows): the launch then needs the
    kernel that specialises on M (:func:`rows_specialised`)."""
    return a.stride(0) == 1 and a.shape[0] > 1


#: buckets of the tuning key's M per doubling of M, once a granule is at most 1/8 of M
ROW_BUCKETS_PER_OCTAVE = 4


def row_bucket(M: int, granule: int) -> int:
    """The M a tuning key holds for ``M`` rows: the top of M's bucket.

    The configs a kernel tunes over differ in tile shape, warps and stages; pruning
    (:func:`fit_to_device`) looks at the dtype, never at M, so M changes the timing only through
    the rows of tiles, ``cdiv(M, BLOCK_M)`` for each BLOCK_M of the list.  All of them are
    multiples of the smallest, ``granule``: up to ``8 * granule`` rows a bucket is one granule
    (every config's count of tile rows is the same across it, so its timing is the same but for
    the rows' own work); above, ``ROW_BUCKETS_PER_OCTAVE`` buckets per doubling, so within a
    bucket the rows change by at most a quarter.  N and K stay exact: they are a model's weight
    shapes, a few per model, where M is the token count of each call."""
    step = max(granule, triton.next_power_of_2(M) // (2 * ROW_BUCKETS_PER_OCTAVE))
    return -(-M // step) * step


#: Autotune key of the single-GEMM kernels: the sizes, the tile order and the epilogue (never
#: pointers: a pointer key would re-tune on every call).  The epilogue is in it because the
#: best config for a plain product can be a poor one once a GELU's registers join the tile's
#: (measured: a config tuned on leaky_relu ran fused GELU 6x slower at 8192^3, PERF_NOTES.md).  Triton adds the arguments' dtypes itself;
#: ``TunedKernel`` buckets M (:func:`row_bucket`).
SINGLE_GEMM_KEY = ["M", "N", "K", "GROUPED", "HAS_BIAS", "ACTIVATION"]


def matmul_configs():
    """Configs for the one-program-per-tile kernel (naive and grouped order)."""
    if runtime.interpreted():
        return _interpreter()
    return _tuning_list([
        _cfg(128, 256, 64, 3, 8),
        _cfg(256, 128, 64, 3, 8),
        _cfg(128, 128, 64, 4, 8),
        _cfg(128, 128, 64, 4, 4),
        _cfg(128, 64, 64, 4, 4),
        _cfg(64, 128, 64, 4, 4),
        _cfg(64, 64, 64, 4, 4),
        _cfg(64, 32, 32, 5, 2),
    ])


#: the one config of the batch-invariant mode (``matmul_auto(..., batch_invariant=True)``): one tile
#: shape and one BLOCK_K for every M, so each output row sums its K products in the same order,
#: in the same instructions, whatever the batch (no tuning key can pick another per M)
BATCH_INVARIANT_BLOCKS = (128, 128, 64)


def batch_invariant_configs():
    """The single config of the batch-invariant launches (the interpreter's own on a CPU)."""
    if runtime.interpreted():
        return _interpreter()
    return [_cfg(*BATCH_INVARIANT_BLOCKS, 3, 8)]


def splitk_configs(gpu: bool | None = None):
    """Configs for ``matmul_splitk``: smaller tiles first (it serves few-tile problems, where
    more tiles mean more SMs busy before any split).  64x128x128 and 128x128x64 with 4 warps led
    the few-tile shapes of the H100 sweep (PERF_NOTES entry 30)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter()
    return _tuning_list([
        _cfg(64, 128, 128, 3, 4),
        _cfg(128, 128, 64, 4, 4),
        _cfg(64, 64, 64, 4, 4),
        _cfg(128, 64, 64, 4, 4),
        _cfg(64, 128, 64, 4, 4),
        _cfg(128, 128, 64, 4, 8),
        _cfg(64, 64, 128, 3, 4),
        _cfg(128, 128, 64, 3, 4),
    ])


#: fp8 K blocks are 128 elements (128 bytes, one swizzled row; DeepSeek-V3's scale block)
FP8_BLOCK_K = 128


def fp8_configs(gpu: bool | None = None):
    """Configs for ``scaled_mm``: 1-byte operands, so BLOCK_K = 128 moves the bytes a 16-bit
    kernel's 64 does.  Measured on an H100 (PERF_NOTES 27): 256x128, 3 stages, 8 warps led
    tensor-wise (0.79x torch._scaled_mm at 4096^3), 128x128, 4 stages, 8 warps block-wise (at
    256x128 the block-scaled loop ran at 250 TFLOP/s against 570)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return [triton.Config({**INTERPRETER_BLOCKS, "BLOCK_K": FP8_BLOCK_K, "GROUP_SIZE_M": 4}, num_stages=1,
                              num_warps=4)]
    return _tuning_list([
        _cfg(256, 128, FP8_BLOCK_K, 3, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, FP8_BLOCK_K, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 256, FP8_BLOCK_K, 3, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, FP8_BLOCK_K, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 128, FP8_BLOCK_K, 4, 4, GROUP_SIZE_M=8),
        _cfg(128, 64, FP8_BLOCK_K, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 64, FP8_BLOCK_K, 4, 4, GROUP_SIZE_M=8),
    ])


def fp8_batch_invariant_configs(gpu: bool | None = None):
    """The single config of ``scaled_mm(..., batch_invariant=True)`` where the warp-specialized
    kernel does not run: 128x128 tiles, BLOCK_K 128, for every M (the interpreter's own on a CPU)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return fp8_configs(gpu=False)
    return [_cfg(128, 128, FP8_BLOCK_K, 4, 8, GROUP_SIZE_M=8)]


def range_options_supported() -> set:
    """Loop options of ``tl.range`` the installed Triton knows (``flatten``, ``warp_specialize``, ...).

    The persistent kernels always pass FLATTEN / WARP_SPECIALIZE to ``tl.range``; a config may
    switch one on only where Triton has it (both exist from Triton 3.4 on)."""
    import inspect

    import triton.language as tl

    return set(inspect.signature(tl.range.__init__).parameters) - {"self", "arg1", "arg2", "step"}


# Loop/epilogue switches of the persistent kernels (constexprs), off unless a config turns them on:
# FLATTEN merges the tile loop and the K loop so the pipeline keeps loading across tiles,
# EPILOGUE_SUBTILE (TMA only) stores C in two halves so the epilogue needs half the registers/shared
# memory at a time.  WARP_SPECIALIZE is tl.range's request for automatic warp specialization: on
# sm_90 with Triton 3.6-3.9 it changes nothing (the PTX is byte-identical, tests/test_claims.py),
# so no config asks for it; the kernels keep the switch for GPUs where Triton acts on it.
PERSISTENT_LOOP_DEFAULTS = {"FLATTEN": False, "WARP_SPECIALIZE": False}


def _persistent_cfg(bm, bn, bk, stages, warps, **extra):
    unknown = {k.lower() for k, v in extra.items() if v and k in PERSISTENT_LOOP_DEFAULTS} - range_options_supported()
    if unknown:  # never hand the kernel a loop option this Triton would reject
        return None
    return _cfg(bm, bn, bk, stages, warps, **{**PERSISTENT_LOOP_DEFAULTS, **extra})


def persistent_configs(gpu: bool | None = None):
    """Configs for ``matmul_persistent``.  ``gpu=True`` gives the GPU list even in the interpreter
    (the compile view builds Hopper code on a CPU machine)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(**PERSISTENT_LOOP_DEFAULTS)
    # Measured on an H100 (4096^3 / 8192^3 fp16 and bf16): 128x256x64, 3 stages,
    # 8 warps led (0.89-1.02x cuBLAS); 128x128 tiles trailed by 10-15%.  The smaller ones are
    # for small or thin problems, where 128x256 tiles leave most SMs idle.
    return _tuning_list([
        _persistent_cfg(128, 256, 64, 3, 8),
        _persistent_cfg(128, 256, 64, 3, 8, FLATTEN=True),
        _persistent_cfg(256, 128, 64, 3, 8),
        _persistent_cfg(128, 128, 64, 4, 4),
        _persistent_cfg(64, 128, 64, 4, 4),
        _persistent_cfg(128, 64, 64, 4, 4),
    ])


def tma_configs(gpu: bool | None = None):
    """Configs for ``matmul_tma`` (Hopper): as persistent_configs, plus EPILOGUE_SUBTILE."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(**PERSISTENT_LOOP_DEFAULTS, EPILOGUE_SUBTILE=False)
    # Same H100 sweep: 128x256x64/3 stages/8 warps with and without the subtiled epilogue and the
    # flattened loop land within the run-to-run noise of each other (0.93-1.01x cuBLAS), so all
    # three stay and the autotuner picks per shape.
    return _tuning_list([
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 256, 64, 3, 8, FLATTEN=True, EPILOGUE_SUBTILE=True),
        _persistent_cfg(256, 128, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(64, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 64, 64, 4, 4, EPILOGUE_SUBTILE=False),
    ])


def streamk_configs(gpu: bool | None = None):
    """Configs for ``matmul_streamk`` (its full waves are ``matmul_tma``'s loop; the flattened and
    warp-specialized variants are left out: the Stream-K phase after the loop is plain code)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(**PERSISTENT_LOOP_DEFAULTS, EPILOGUE_SUBTILE=False)
    return _tuning_list([
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 256, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(256, 128, 64, 3, 8, EPILOGUE_SUBTILE=True),
        _persistent_cfg(128, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(64, 128, 64, 4, 4, EPILOGUE_SUBTILE=False),
        _persistent_cfg(128, 64, 64, 4, 4, EPILOGUE_SUBTILE=False),
    ])


#: GROUP_SIZE_M of the grouped kernels in the interpreter: small, so the interpreter's few tile
#: rows per problem still form several groups (and a short last one).
INTERPRETER_GROUP_SIZE_M = 4


def grouped_configs(gpu: bool | None = None):
    """Configs for ``grouped_matmul`` (pointer-array grouped GEMM, both the pointer and TMA paths).

    A short Hopper list to start from; GROUP_SIZE_M is part of the config so it can be tuned too.
    ``gpu=True`` gives the GPU list even in the interpreter (for the compile view)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    return _tuning_list([
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 3, 4, GROUP_SIZE_M=8),
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 128, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(128, 64, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 64, 64, 4, 4, GROUP_SIZE_M=8),
    ])


def moe_configs(gpu: bool | None = None):
    """Configs for ``grouped_mm`` (MoE: many experts, often few rows each, so BLOCK_M=64 is in).
    ``gpu=True`` gives the GPU list even in the interpreter (for the compile view)."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    # H100 sweep over Mixtral / DeepSeek-V3 / DeepSeek-V2-Lite shapes: 128x256x64
    # won most rows (up to 1.26x torch._grouped_mm); 64-row tiles won where experts get few
    # rows; 64x64 tiles never won (0.4-0.9x) and were dropped.
    return _tuning_list([
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(128, 128, 128, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 256, 64, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(64, 128, 128, 3, 4, GROUP_SIZE_M=8),
    ])


def moe_wgrad_configs(gpu: bool | None = None):
    """Configs for the MoE weight gradient (``moe_wgrad``): dw[e] is a full K x N matrix per
    expert, its reduction (the expert's tokens) often short, so the list leans on wide tiles
    and a shallow pipeline.  A starting list, timed on an H100 in PERF_NOTES.md."""
    if not (runtime.on_gpu() if gpu is None else gpu):
        return _interpreter(GROUP_SIZE_M=INTERPRETER_GROUP_SIZE_M)
    return _tuning_list([
        _cfg(128, 128, 64, 4, 8, GROUP_SIZE_M=8),
        _cfg(128, 256, 64, 3, 8, GROUP_SIZE_M=8),
        _cfg(128, 128, 64, 3, 4, GROUP_SIZE_M=8),
        _cfg(128, 128, 32, 4, 4, GROUP_SIZE_M=8),
        _cfg(64, 128, 64, 4, 4, GROUP_SIZE_M=8),
    ])


def explicit_config_kwargs(config: triton.Config, kind: str) -> dict:
    """A user's ``config=`` -> kernel kwargs (``kind``: "pointer" for a kernel without loop
    switches, "persistent" or "tma"): its blocks and switches (unset switches off), warps,
    stages; checked first."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"config must be a triton.Config, got {type(config).__name__}")
    missing = {"BLOCK_M", "BLOCK_N", "BLOCK_K"} - set(config.kwargs)
    if missing:
        raise ValueError(f"config must set BLOCK_M, BLOCK_N and BLOCK_K; missing {sorted(missing)}")
    switches = {} if kind == "pointer" else {**PERSISTENT_LOOP_DEFAULTS,
                                              **({"EPILOGUE_SUBTILE": False} if kind == "tma" else {})}
    check_explicit_config(config, allowed_switches=switches)
    return {**switches, **config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
