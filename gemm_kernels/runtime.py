"""Where kernels run: compiled on a CUDA GPU, or in Triton's interpreter on the CPU.

The decision is made once, when ``gemm_kernels`` is imported and before any
``@triton.jit`` function is defined, because Triton looks at ``TRITON_INTERPRET``
when a kernel is decorated.  Everything else in the package asks this module.

* No usable CUDA GPU  -> the interpreter (``TRITON_INTERPRET=1``), tensors on the CPU.
* ``GEMM_KERNELS_INTERPRET=1`` (or ``TRITON_INTERPRET=1``) -> the interpreter even on
  a GPU machine, so a learner can ``print`` / ``pdb`` inside a kernel.
* Otherwise -> compiled kernels on ``cuda``.
* ``GEMM_KERNELS_ARCH=sm_86`` (or sm_75/80/89) -> the runtime reports that GPU's features (no
  TMA, wgmma, Gluon or clusters before sm_90; its shared memory) while the kernels still run on the
  GPU present (or the interpreter): an H100 then takes the paths a learner's Ampere or Ada card
  takes, and a CPU runs the notebooks' no-TMA branches.

On a CPU-only machine nothing here touches the CUDA driver: a CPU build of
torch is recognised without a CUDA call, and the interpreter never loads one.

Triton imported first (``import triton``, ``torch.compile``, ``import torch._dynamo`` before
``import gemm_kernels``) is fine: kernels defined afterwards are still interpreted, and
Triton's own library helpers are switched to the interpreter too
(:func:`prepare_interpreter`).  Interpreted launches are serialised by a lock, because
Triton's interpreter is not thread-safe; so several threads may call the kernels at once.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import warnings
from dataclasses import dataclass

import torch

from . import _env

#: Environment variable that forces the interpreter on a GPU machine.
FORCE_INTERPRET_ENV = "GEMM_KERNELS_INTERPRET"
#: Set by the compile view's worker process (``gemm_kernels.lab.compile_view``): no GPU, but kernels
#: stay real ``JITFunction``s (not interpreted) so ``triton.compile`` can build them for a target.
COMPILE_ONLY_ENV = "GEMM_KERNELS_COMPILE_ONLY"
#: Report an older GPU than the one present, e.g. ``sm_86`` (module docstring).
ARCH_ENV = "GEMM_KERNELS_ARCH"
#: Shared memory per block (the opt-in maximum, bytes) of the architectures ARCH_ENV may name:
#: Turing, A100, RTX 30xx/A10, Jetson Orin, RTX 40xx/L4, Hopper.
ARCH_SHARED_MEMORY = {(7, 5): 65536, (8, 0): 166912, (8, 6): 101376, (8, 7): 166912, (8, 9): 101376,
                      (9, 0): 232448}
#: Cap this process's GPU memory, in GB (e.g. 8: a learner's laptop card), through
#: ``torch.cuda.set_per_process_memory_fraction``; :func:`free_gpu_bytes` then reports the capped room.
MEMORY_GB_ENV = "GEMM_KERNELS_MEMORY_GB"
#: Set to 0 to skip autotuning on a GPU: each kernel then uses the first (default) config of its
#: list.  Meant for quick correctness runs (each new shape otherwise compiles and times every config).
AUTOTUNE_ENV = "GEMM_KERNELS_AUTOTUNE"

#: SM count reported when interpreting.  Small on purpose: the persistent kernels
#: launch ``num_sms()`` programs, and with 4 each program walks several tiles even
#: on the small problems the interpreter can afford, so the loop is really exercised.
INTERPRETER_NUM_SMS = 4


def _truthy(value: str | None) -> bool:
    """``TRITON_INTERPRET`` read as Triton reads it (Triton's variable: an odd value is Triton's to judge)."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _cuda_usable() -> bool:
    # torch.backends.cuda.is_built() is a compile-time flag: no driver call on a CPU build.
    if not torch.backends.cuda.is_built():
        return False
    try:
        return torch.cuda.is_available()
    except Exception:  # a broken driver install counts as "no GPU"
        return False


@dataclass(frozen=True)
class Runtime:
    interpreted: bool
    device: torch.device
    gpu_name: str
    capability: tuple[int, int] | None  # what the kernels may use: the GPU's, or ARCH_ENV's
    num_sms: int
    reason: str
    arch_from_env: bool = False  # capability comes from ARCH_ENV, not from the device


def parse_arch(value: str) -> tuple[int, int]:
    """``"sm_86"`` (or ``"86"``, ``"8.6"``) -> (8, 6), for one of ARCH_SHARED_MEMORY's architectures; ASCII
    digits only (``\\d`` and ``int`` take any script's: ``sm_٩٠`` would be sm_90)."""
    import re

    match = re.fullmatch(r"(?:sm_?)?([0-9])\.?([0-9])a?", value.strip().lower())
    cap = (int(match.group(1)), int(match.group(2))) if match else None
    if cap not in ARCH_SHARED_MEMORY:
        known = ", ".join(f"sm_{a}{b}" for a, b in ARCH_SHARED_MEMORY)
        raise ValueError(f"{ARCH_ENV}={_env.shown(value)} is not an architecture this package knows; "
                         f"use one of {known}")
    return cap


def _with_arch(decided: Runtime) -> Runtime:
    """ARCH_ENV applied to the decision: the reported capability, never newer than the GPU's."""
    value = os.environ.get(ARCH_ENV, "").strip()
    if not value:
        return decided
    cap = parse_arch(value)
    if decided.capability is not None and cap > decided.capability:
        raise ValueError(f"{ARCH_ENV}={value} asks for a newer GPU than this {decided.gpu_name} "
                         f"(sm_{decided.capability[0]}{decided.capability[1]}): it can only hide features")
    return Runtime(decided.interpreted, decided.device, decided.gpu_name, cap, decided.num_sms,
                   f"{decided.reason}; {ARCH_ENV}={value}: features of an sm_{cap[0]}{cap[1]} GPU", True)


def _decide() -> Runtime:
    if _env.flag(COMPILE_ONLY_ENV, False):
        os.environ.pop("TRITON_INTERPRET", None)
        return Runtime(True, torch.device("cpu"), "CPU (compile only)", None, INTERPRETER_NUM_SMS,
                       "compile-only worker: kernels are built for a GPU target, never run")
    forced = _env.flag(FORCE_INTERPRET_ENV, False) or _truthy(os.environ.get("TRITON_INTERPRET"))
    if forced:
        reason = f"interpreter forced by {FORCE_INTERPRET_ENV}/TRITON_INTERPRET"
    elif not _cuda_usable():
        forced = True
        reason = "no usable CUDA GPU found: kernels run in Triton's interpreter on the CPU"
    if forced:
        os.environ["TRITON_INTERPRET"] = "1"  # must happen before any @triton.jit below
        return Runtime(True, torch.device("cpu"), "CPU (Triton interpreter)", None, INTERPRETER_NUM_SMS, reason)
    props = torch.cuda.get_device_properties(0)
    return Runtime(
        interpreted=False,
        device=torch.device("cuda", 0),
        gpu_name=props.name,
        capability=(props.major, props.minor),
        num_sms=props.multi_processor_count,
        reason="CUDA GPU found: kernels are compiled",
    )


def _check_interpreter_numpy(decided: Runtime) -> Runtime:
    """Triton 3.6 and 3.7's interpreter breaks with numpy >= 2.4 (a scalar's ``__index__``; 3.8
    fixed it): there, fix it now, before any kernel runs (``_triton_compat.index_scalars_for_new_numpy``)."""
    if not decided.interpreted or _env.flag(COMPILE_ONLY_ENV, False):
        return decided
    from importlib.metadata import PackageNotFoundError, version

    import numpy

    try:
        triton_version = version("triton")
    except PackageNotFoundError:
        return decided
    if _release(triton_version) < (3, 8) and _release(numpy.__version__) >= (2, 4):
        from . import _triton_compat

        try:
            _triton_compat.index_scalars_for_new_numpy()  # imports Triton (its interpreter) now
        except ImportError:  # no usable Triton: nothing to fix (models and drawings import without it)
            pass
    return decided


def _release(text: str) -> tuple[int, ...]:
    """'3.6.0+git1234' -> (3, 6, 0)."""
    import re

    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


RUNTIME = _check_interpreter_numpy(_with_arch(_decide()))


def _cap_memory() -> None:
    gb = _env.number(MEMORY_GB_ENV)  # not a number: a ValueError naming it, on a GPU or not
    value = os.environ.get(MEMORY_GB_ENV, "").strip()
    if gb is not None and not gb > 0:  # also on a CPU: a course laptop says what a GPU would refuse
        raise ValueError(f"{MEMORY_GB_ENV}={_env.shown(value)}: give a number of GB above 0")
    if gb is None or RUNTIME.interpreted:
        return
    total = torch.cuda.get_device_properties(0).total_memory
    if not 0 < gb * 2**30 <= total:
        raise ValueError(f"{MEMORY_GB_ENV}={_env.shown(value)}: give a number of GB above 0 and at most this GPU's "
                         f"{total / 2**30:.0f}")
    torch.cuda.set_per_process_memory_fraction(gb * 2**30 / total, 0)


_cap_memory()
#: The device every tensor of the package lives on.
DEVICE = RUNTIME.device


def prepare_interpreter() -> None:
    """When kernels are interpreted: make Triton's library ``@jit`` helpers interpreted (needed
    when Triton was imported before this package) and serialise interpreted launches (Triton's
    interpreter is not thread-safe).  Imports Triton; a no-op in the compile-only worker.
    ``gemm_kernels.kernels`` calls it before any kernel module loads.

    First it keeps the decision made at import: ``TRITON_INTERPRET`` changed since (unset on a
    CPU, set on a GPU machine) is put back, with one warning, and Triton's knob is pinned when
    interpreting (``_triton_compat.keep_interpret_decision``); kernels defined afterwards would
    otherwise be of the other kind and every launch fail ("0 active drivers")."""
    if _env.flag(COMPILE_ONLY_ENV, False):
        return
    from . import _triton_compat

    _triton_compat.keep_interpret_decision(RUNTIME.interpreted)
    if not RUNTIME.interpreted:
        return
    _triton_compat.index_scalars_for_new_numpy()
    _triton_compat.bf16_arithmetic_in_interpreter()
    _triton_compat.float_conversions_in_interpreter()
    _triton_compat.interpret_library_functions()
    _triton_compat.serialise_interpreted_launches()


if sys.modules.get("triton") is not None:  # imported before us: a learner's own kernels need its helpers switched now
    prepare_interpreter()


def interpreted() -> bool:
    """True when kernels run in Triton's interpreter (on the CPU)."""
    return RUNTIME.interpreted


def on_gpu() -> bool:
    """True when kernels are compiled and run on a CUDA GPU."""
    return not RUNTIME.interpreted


#: TMA's alignment unit: a descriptor's base address and every stride but the unit one, in bytes
TMA_ALIGN_BYTES = 16


#: buffers kept per (device, stream, purpose): see stream_buffer
_STREAM_BUFFERS: dict = {}
_MAX_STREAM_BUFFERS = 64


def stream_buffer(purpose: str, numel: int, dtype: torch.dtype, device_index: int, zeroed: bool = False) -> torch.Tensor:
    """A device buffer of at least ``numel`` elements of ``dtype`` on device ``device_index``,
    kept for launches on that device's current CUDA stream, for ``purpose`` (e.g. "tma scratch";
    one dtype per purpose).

    Kernels on one stream run one after another, so a buffer that each kernel writes before it
    reads it (the scratch where Triton's kernels build tensor descriptors) can serve the next
    launch on that stream as it is: no ``torch.empty`` per launch (0.7 µs of host time in
    ``grouped_mm``'s default call, PERF_NOTES 22).  It is allocated while its stream is current,
    so torch's caching allocator orders its reuse on that stream if it is ever replaced.  While
    a CUDA graph is being captured the buffer is fresh, from the graph's pool: a graph may be
    replayed on another stream, at the same time as eager launches on this one (one whose
    ``zeroed`` is :data:`ALWAYS_LEFT_ZERO` is a slice of a pool zeroed before the capture, so a
    replay runs no memset).  Two cases the key cannot tell apart, so kernels using it must not
    do them: programmatic dependent launch
    (a kernel starting before the previous one on its stream ends), and a stream destroyed
    while its work is pending whose handle a new stream then reuses.  ``zeroed``: a new buffer
    starts at zero (the kernels that ask for it leave it at zero; :data:`ALWAYS_LEFT_ZERO`: even
    after an error).  :func:`stream_buffers` gets several at once."""
    return stream_buffers(device_index, ((purpose, numel, dtype, zeroed),))[0]


def stream_buffers(device_index: int, requests) -> tuple:
    """:func:`stream_buffer` of each ``(purpose, numel, dtype, zeroed)`` in ``requests``, all on
    device ``device_index``'s current stream, in order: one capture check and one stream look-up
    for all of them (a Stream-K or split-K call needs two buffers per launch)."""
    if torch._C._cuda_isCurrentStreamCapturing():
        capture = None
        if any(request[3] == ALWAYS_LEFT_ZERO for request in requests):
            stream = torch._C._cuda_getCurrentRawStream(device_index)
            capture = (device_index, stream, _capture_id(stream))
        return tuple([_captured_zeros(purpose, numel, dtype, capture) if zeroed == ALWAYS_LEFT_ZERO else
                      _fresh_buffer(numel, dtype, device_index, bool(zeroed))
                      for purpose, numel, dtype, zeroed in requests])
    if device_index not in _CAPTURE_ZEROS and any(request[3] == ALWAYS_LEFT_ZERO for request in requests):
        _make_capture_zeros(device_index)
    stream = torch._C._cuda_getCurrentRawStream(device_index)  # as Triton's launcher reads it (faster than torch.cuda's)
    return tuple([_kept_buffer(device_index, stream, purpose, numel, dtype, zeroed)
                  for purpose, numel, dtype, zeroed in requests])


#: ``zeroed`` of a request whose kernels leave it zero on every path, an error's included (split-K's
#: arrival counts: every piece arrives, the last one zeroes the count).  Under a CUDA graph capture it
#: is a slice of a pool zeroed before the capture: plain ``True`` gets ``torch.zeros`` there, a memset
#: node that every replay runs (Stream-K's flags ask for that: a wait that ran out leaves one raised,
#: and only the memset clears it for the next replay).
ALWAYS_LEFT_ZERO = "always left zero"

#: the pool per device (a :class:`_ZeroPool`).  The memset node was most of a split
#: decode call's miss in a graph (PERF_NOTES 52, images/bench/entry53).  A slice is never handed to
#: another capture, and the pool is never freed or replaced: graphs point into it and may live as
#: long as the process.  Within one capture, the calls on one stream run one after another (each
#: node depends on the stream's last; nothing here rewrites a capture's dependencies), so they
#: share one slice per purpose (:data:`_CAPTURE_SLICES`, PERF_NOTES 54): a capture holds a few
#: slices, however many calls it records.  4 MiB (the caching allocator keeps it in a 20 MiB segment
#: that empty_cache cannot release); when it is spent, or before any uncaptured call made it, a
#: capture falls back to torch.zeros, with one warning.
_CAPTURE_ZEROS: dict = {}
#: per (device, stream): (the id of the capture under way on it, {purpose: its slice of the pool})
_CAPTURE_SLICES: dict = {}
_CAPTURE_ZEROS_BYTES = 1 << 22
_CAPTURE_ZEROS_LOCK = threading.Lock()


@dataclass
class _ZeroPool:
    zeros: torch.Tensor  # bytes kept zero
    free: int = 0  # the first byte not handed out
    warned: bool = False  # that it is spent


def _make_capture_zeros(device_index: int) -> None:
    with _CAPTURE_ZEROS_LOCK:  # made once: two threads' first calls must not make two
        if device_index not in _CAPTURE_ZEROS:
            # no host sync (it would break another thread's capture in global mode): torch.cuda.graph
            # synchronizes the device before it captures, so the memset ends before any replay
            _CAPTURE_ZEROS[device_index] = _ZeroPool(_capture_zeros_pool(device_index))


def _capture_zeros_pool(device_index: int) -> torch.Tensor:
    return torch.zeros(_CAPTURE_ZEROS_BYTES, dtype=torch.uint8, device=torch.device("cuda", device_index))


def _captured_zeros(purpose: str, numel: int, dtype: torch.dtype, capture: tuple) -> torch.Tensor:
    """A zeroed buffer for a captured call: the slice this capture already holds on this stream for
    ``purpose`` when it is large enough (the earlier call ended before this one starts and left it
    zero), else a new slice of the pool; ``capture`` is (device, stream, capture id or None)."""
    device_index, stream, capture_id = capture
    nbytes = -(-numel * dtype.itemsize // 256) * 256  # 256-byte aligned slices, as torch's own allocations
    with _CAPTURE_ZEROS_LOCK:  # captures in two threads get two slices
        held = None
        if capture_id is not None:  # a stream is in one capture at a time: the last one's slices are done
            held = _CAPTURE_SLICES.get((device_index, stream))
            if held is None or held[0] != capture_id:
                held = _CAPTURE_SLICES[device_index, stream] = (capture_id, {})
            kept = held[1].get(purpose)
            if kept is not None and kept.numel() >= nbytes:
                return kept[:numel * dtype.itemsize].view(dtype)
        pool = _CAPTURE_ZEROS.get(device_index)
        if pool is None or pool.free + nbytes > pool.zeros.numel():
            if pool is not None and not pool.warned:
                pool.warned = True
                warnings.warn("gemm_kernels: the zeroed buffers kept for CUDA graph captures are spent; "
                              "later captures of split-K calls each record a memset node", stacklevel=3)
            return _fresh_buffer(numel, dtype, device_index, True)
        start, pool.free = pool.free, pool.free + nbytes
        piece = pool.zeros[start:start + nbytes]
        if held is not None:
            held[1][purpose] = piece
    return piece[:numel * dtype.itemsize].view(dtype)


#: cuStreamGetCaptureInfo of the CUDA driver (ctypes), once looked up; False where it cannot be had
_GET_CAPTURE_INFO = None


def _capture_id(stream: int) -> int | None:
    """The id CUDA gives the capture under way on ``stream`` (unique in the process; a side stream
    forked into the capture shares it), or None where the driver cannot tell (each captured call then
    takes a slice of its own)."""
    global _GET_CAPTURE_INFO
    if _GET_CAPTURE_INFO is None:
        _GET_CAPTURE_INFO = _driver_capture_info()
    if not _GET_CAPTURE_INFO:
        return None
    import ctypes

    status, capture_id = ctypes.c_int(0), ctypes.c_uint64(0)
    if _GET_CAPTURE_INFO(stream, ctypes.byref(status), ctypes.byref(capture_id)) != 0 or status.value != 1:
        return None  # an error, or no capture active on it (1: cudaStreamCaptureStatusActive)
    return capture_id.value or None


def _driver_capture_info():
    """``f(stream, status*, id*) -> CUresult`` through the driver's versioned entry points (their
    first three parameters are v1's; the later out-pointers are passed as NULL), or False."""
    import ctypes

    try:
        driver = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
    except OSError:
        return False
    for name, extra in (("cuStreamGetCaptureInfo_v3", 4), ("cuStreamGetCaptureInfo_v2", 3)):
        fn = getattr(driver, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64)] + \
                [ctypes.c_void_p] * extra
            nulls = (None,) * extra
            return lambda stream, status, capture_id: fn(stream, status, capture_id, *nulls)
    return False


def _fresh_buffer(numel: int, dtype: torch.dtype, device_index: int, zeroed: bool) -> torch.Tensor:
    return (torch.zeros if zeroed else torch.empty)(numel, device=torch.device("cuda", device_index), dtype=dtype)


def _kept_buffer(device_index: int, stream: int, purpose: str, numel: int, dtype: torch.dtype,
                 zeroed: bool) -> torch.Tensor:
    """The kept buffer of (device, stream, purpose), replaced by a new one when it is too small."""
    key = (device_index, stream, purpose)
    buffer = _STREAM_BUFFERS.get(key)
    if buffer is None or buffer.numel() < numel:
        if len(_STREAM_BUFFERS) >= _MAX_STREAM_BUFFERS:  # many streams: start over (frees stream-ordered)
            _STREAM_BUFFERS.clear()
        buffer = _STREAM_BUFFERS[key] = _fresh_buffer(numel, dtype, device_index, zeroed)
    return buffer


def reset_stream_buffers(purpose: str) -> None:
    """Forget every kept buffer of ``purpose`` (the next launches get new ones)."""
    for key in [k for k in _STREAM_BUFFERS if k[2] == purpose]:
        del _STREAM_BUFFERS[key]


def tma_scratch(size: int, alignment: int, stream):
    """Triton's allocator protocol: descriptor scratch for a launch on ``stream``, the raw handle of
    the current device's current stream that Triton launches on (so no second look-up of it);
    torch's allocations are 512-byte aligned, more than the 128 bytes descriptors need."""
    if torch._C._cuda_isCurrentStreamCapturing():
        return _fresh_buffer(size, torch.uint8, torch._C._cuda_getDevice(), False)
    return _kept_buffer(torch._C._cuda_getDevice(), stream, "tma scratch", size, torch.uint8, False)


def ensure_tma_allocator() -> None:
    """Tensor descriptors built inside a kernel need a little global scratch memory per program
    (128 bytes each); Triton asks the allocator registered with ``triton.set_allocator`` for it.
    That registration is a context variable (per thread / async context): the launchers of every
    TMA kernel call this on every launch (it is cheap)."""
    import triton  # here, not at the top: this module must run before Triton is imported

    triton.set_allocator(tma_scratch)


def supports_tma() -> bool:
    """Tensor descriptors (TMA) need Hopper (sm_90) or newer.

    The interpreter emulates tensor descriptors, so the TMA kernels also run there (unless
    GEMM_KERNELS_ARCH names an older GPU)."""
    if RUNTIME.interpreted and not RUNTIME.arch_from_env:
        return True
    return RUNTIME.capability is not None and RUNTIME.capability[0] >= 9


def supports_wgmma() -> bool:
    """Hopper's warpgroup MMA, and with it the Gluon kernels (matmul_ws): compiled on an sm_90 GPU
    only (no interpreter, nor an older GPU, nor GEMM_KERNELS_ARCH below sm_90)."""
    return on_gpu() and RUNTIME.capability is not None and RUNTIME.capability[0] == 9


def gpu_description() -> str:
    """"this NVIDIA A100 is sm_80", or how GEMM_KERNELS_ARCH changed that: for error messages."""
    if RUNTIME.capability is None:
        return f"this machine has no usable CUDA GPU ({RUNTIME.reason})"
    if RUNTIME.arch_from_env:
        return f"this {gpu_name()} is treated as {arch_name()} ({ARCH_ENV} is set)"
    return f"this {gpu_name()} is {arch_name()}"


def supports_bf16() -> bool:
    """bf16 tensor-core products need Ampere (sm_80) or newer; the interpreter has them (unless
    GEMM_KERNELS_ARCH names an older GPU)."""
    if RUNTIME.interpreted and not RUNTIME.arch_from_env:
        return True
    return RUNTIME.capability is not None and RUNTIME.capability >= (8, 0)


def supports_fp8() -> bool:
    """fp8 (e4m3/e5m2) tensor-core products need Ada (sm_89) or Hopper (sm_90) and newer; the
    interpreter multiplies them exactly in fp32 (unless GEMM_KERNELS_ARCH names an older GPU)."""
    if RUNTIME.interpreted and not RUNTIME.arch_from_env:
        return True
    return RUNTIME.capability is not None and RUNTIME.capability >= (8, 9)


def shared_memory_bytes() -> int:
    """Shared memory one program may use (the opt-in maximum): the GPU's, GEMM_KERNELS_ARCH's, or
    Hopper's where no GPU can be asked (the interpreter, the compile view)."""
    if RUNTIME.arch_from_env:
        return ARCH_SHARED_MEMORY[RUNTIME.capability]
    if on_gpu():
        return torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    return ARCH_SHARED_MEMORY[(9, 0)]


def half_dtype() -> torch.dtype:
    """bf16 where this GPU multiplies it (sm_80+, the interpreter), else fp16: the 16-bit type a demo uses."""
    return torch.bfloat16 if supports_bf16() else torch.float16


def free_gpu_bytes() -> int | None:
    """Bytes a demo may still allocate on the GPU: the driver's free memory plus torch's cached
    blocks, within ``torch.cuda.set_per_process_memory_fraction``'s cap; None in the interpreter.
    GPU demos size themselves from it, so they fit a learner's 8 GB card."""
    if not on_gpu():
        return None
    free, total = torch.cuda.mem_get_info()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    fraction = torch.cuda.get_per_process_memory_fraction() if hasattr(torch.cuda, "get_per_process_memory_fraction") else 1.0
    return max(0, min(free + reserved - allocated, int(fraction * total) - allocated))


def arch_name() -> str:
    """``sm_90`` etc.: the architecture the kernels may use, or ``"interpreter"``."""
    cap = RUNTIME.capability
    return f"sm_{cap[0]}{cap[1]}" if cap else "interpreter"


def missing_feature(what: str, needs: str, instead: str = "", *, interpreter_has_it: bool = False,
                    suggest_interpreter: bool = True) -> str:
    """The message of every "``what`` needs ``needs``" error (one wording): what this machine is,
    then the ways out.  Where GEMM_KERNELS_ARCH hides the feature, unsetting it (the interpreter
    obeys it too, so sending someone there would send them where they may already be); otherwise
    the CPU interpreter, when ``interpreter_has_it`` and it is not what runs (unless
    ``suggest_interpreter`` is off); then ``instead``."""
    ways = [f"{what} needs {needs}; {gpu_description()}."]
    if RUNTIME.arch_from_env and (interpreter_has_it or not RUNTIME.interpreted):
        ways.append(f"{ARCH_ENV} hides it: unset {ARCH_ENV} (read when gemm_kernels is imported) to use this "
                    "machine's own features.")
    elif interpreter_has_it and suggest_interpreter and not RUNTIME.interpreted:
        ways.append(f"Run it in the CPU interpreter ({FORCE_INTERPRET_ENV}=1).")
    return " ".join(ways + ([instead] if instead else []))


def require_tma(what: str, instead: str) -> None:
    """Raise RuntimeError unless this GPU has TMA: names ``what`` needed it, the GPU's
    architecture, and ``instead``, the pointer-load alternative.  Never a silent fallback, so a
    benchmark never reports pointer-kernel numbers under a TMA name."""
    if not supports_tma():
        raise RuntimeError(missing_feature(what, "the Tensor Memory Accelerator (tensor descriptors) of an sm_90 "
                                                 "(Hopper) or newer GPU", instead, interpreter_has_it=True,
                                           suggest_interpreter=False))


def tma_row_length(length: int, itemsize: int) -> int:
    """Smallest row length (in elements) >= ``length`` whose bytes are a whole number of
    TMA_ALIGN_BYTES units, and at least one unit: a descriptor's stride may not be 0."""
    step = TMA_ALIGN_BYTES // math.gcd(TMA_ALIGN_BYTES, itemsize)
    return max(step, -(-length // step) * step)


def num_sms() -> int:
    """Streaming multiprocessors (the persistent kernels' program count); see INTERPRETER_NUM_SMS."""
    return RUNTIME.num_sms


#: GEMM_KERNELS_AUTOTUNE's values: every config, a short search (the notebooks), the first config only
AUTOTUNE_MODES = ("full", "small", "off")


def autotune_mode() -> str:
    """``"full"`` (the default, ``full``, or any yes value: ``1``, ``true``, ...), ``"small"``
    (``GEMM_KERNELS_AUTOTUNE=small``: a few tile shapes, shorter timing; what the notebooks ask
    for) or ``"off"`` (``0``, ``false``, ``no``, ``off``: each kernel's first config); any other
    value is a ValueError naming the variable (``_env.parse_flag``)."""
    value = os.environ.get(AUTOTUNE_ENV, "")
    if value.strip().lower() in ("small", "full"):  # the modes by name too (set_autotune's)
        return value.strip().lower()
    try:
        return "full" if _env.parse_flag(value, AUTOTUNE_ENV, True) else "off"
    except ValueError as exc:
        raise ValueError(f"{exc}; or small (a short search)") from None


def set_autotune(mode: str) -> None:
    """Set the autotuning mode for this process (one of AUTOTUNE_MODES); shapes already tuned keep their pick."""
    if mode not in AUTOTUNE_MODES:
        raise ValueError(f"autotune mode must be one of {AUTOTUNE_MODES}, got {mode!r}")
    os.environ[AUTOTUNE_ENV] = {"full": "1", "small": "small", "off": "0"}[mode]


def default_autotune(mode: str) -> None:
    """:func:`set_autotune`, unless GEMM_KERNELS_AUTOTUNE is set: what a notebook asks for, which
    the person running it can still override."""
    if not os.environ.get(AUTOTUNE_ENV, "").strip():
        set_autotune(mode)


def autotune_enabled() -> bool:
    """Autotuning happens only on a GPU, and only unless GEMM_KERNELS_AUTOTUNE=0 (its value is
    read on a CPU too: a bad one is named there, as on the GPU it was meant for)."""
    return autotune_mode() != "off" and on_gpu()


def gpu_name() -> str:
    return RUNTIME.gpu_name


def fp32_dot_operands(dtype: torch.dtype) -> bool:
    """Whether tiles of ``dtype`` must be widened to fp32 before ``tl.dot``.

    Triton's interpreter multiplies the raw bit patterns of bf16 operands in
    ``tl.dot`` (triton-lang/triton#11584: relative errors ~1e9), fp16 is fine.
    Widening bf16 tiles to fp32 gives the right answer.  Compiled kernels keep
    bf16 so they use the tensor cores.  Every kernel asks this one function."""
    return RUNTIME.interpreted and dtype == torch.bfloat16


def describe() -> dict:
    """A summary for notebooks and bug reports."""
    import triton

    return {
        "mode": "interpreter (CPU)" if RUNTIME.interpreted else "compiled (GPU)",
        "reason": RUNTIME.reason,
        "device": str(DEVICE),
        "gpu": RUNTIME.gpu_name,
        "compute_capability": RUNTIME.capability,
        "num_sms": RUNTIME.num_sms,
        "supports_tma": supports_tma(),
        "arch_from_env": RUNTIME.arch_from_env,
        "shared_memory_bytes": shared_memory_bytes(),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }
