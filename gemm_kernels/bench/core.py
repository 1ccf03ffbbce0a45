"""The benchmark machinery: cases, providers, timing, correctness, peaks.

A *case* is one problem (a GEMM shape, a group of GEMMs, an MoE layer) with several
*providers* (cuBLAS, our kernels, torch._grouped_mm, the seed's kernels) that compute the
same thing.  For every case the runner

1. builds the inputs (fresh random numbers, never zeros) and a float64 reference;
2. runs each provider once with ``torch.empty`` poisoned with NaN (an element a kernel
   never writes then shows as a non-finite error) and records ``rel_err`` =
   ||out - ref|| / ||ref|| against :data:`gemm_kernels.testing.TOLERANCES`;
3. on a GPU, names the GPU kernels one call of the vendor baseline launches (``torch.profiler``:
   which cuBLAS kernel a comparison is against, in the ``vendor_kernel`` column), then times
   each provider with ``triton.testing.do_bench`` (median, L2 flushed between repetitions),
   all providers once per round over several rounds, so every case carries the baseline's
   spread as its noise estimate;
4. turns times into TFLOP/s (2*M*N*K summed over the problems), % of the GPU's dense
   peak and the speed-up over the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import runtime
from ..testing import TOLERANCES

# --- peaks -----------------------------------------------------------------------------

#: Dense (no sparsity) fp16/bf16 tensor-core peak in TFLOP/s, from the vendors' datasheets.
#: Matched against ``torch.cuda.get_device_properties(0).name`` by :func:`dense_peak_tflops`.
DENSE_PEAK_TFLOPS = {
    "H100 SXM": 989.4,
    "H100 PCIe": 756.0,
    "H200": 989.4,
    "A100": 312.0,
}
PEAK_DTYPES = (torch.float16, torch.bfloat16)
#: Dense fp8 (e4m3/e5m2) peak: twice the 16-bit one on Hopper (datasheets: 1979 TFLOP/s on H100 SXM)
FP8_DENSE_PEAK_TFLOPS = {"H100 SXM": 1978.9, "H100 PCIe": 1513.0, "H200": 1978.9}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def peak_entry(gpu_name: str) -> str | None:
    """Which :data:`DENSE_PEAK_TFLOPS` row a device name belongs to (None: unknown GPU).

    'NVIDIA H100 80GB HBM3' is the SXM part; 'NVIDIA H100 PCIe' the PCIe card; an H100 NVL
    (or any other name) is unknown rather than guessed."""
    name = gpu_name.upper()
    if "H200" in name:
        return "H200"
    if "H100" in name:
        if "PCIE" in name:
            return "H100 PCIe"
        if "NVL" in name:
            return None
        return "H100 SXM"
    if "A100" in name:
        return "A100"
    return None


def dense_peak_tflops(gpu_name: str, dtype: torch.dtype) -> float | None:
    """Datasheet dense fp16/bf16 (or fp8) peak of ``gpu_name``; None when the GPU or dtype is not in the table."""
    entry = peak_entry(gpu_name)
    if entry is not None and dtype in FP8_DTYPES:
        return FP8_DENSE_PEAK_TFLOPS.get(entry)
    if entry is None or dtype not in PEAK_DTYPES:
        return None
    return DENSE_PEAK_TFLOPS[entry]


# --- arithmetic ------------------------------------------------------------------------


def gemm_flops(shapes) -> int:
    """2*M*N*K summed over ``shapes`` (an iterable of (M, N, K))."""
    return sum(2 * M * N * K for M, N, K in shapes)


def gemm_min_bytes(shapes, element_bytes: int) -> int:
    """Fewest bytes a grouped GEMM must move: each A and B read once, each C written once."""
    return sum((M * K + K * N + M * N) * element_bytes for M, N, K in shapes)


def tflops(flops: int, ms: float) -> float:
    """Achieved TFLOP/s of ``flops`` in ``ms`` milliseconds."""
    if not ms > 0:
        raise ValueError(f"time must be positive, got {ms} ms")
    return flops / (ms * 1e-3) / 1e12


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float8_e4m3fn: "e4m3",
            torch.float8_e5m2: "e5m2"}[dtype]


DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2}


# --- command lines ----------------------------------------------------------------------


def number_arg(kind: type, low: float, high: float | None = None, low_open: bool = False) -> Callable[[str], object]:
    """An argparse ``type=`` for an int or float option in [low, high], or > low with ``low_open``
    (and no ``high``): anything else is a usage error that names the option and the range
    ("argument --rounds: must be an integer >= 1, got '0'"), never a silent default."""
    noun = "an integer" if kind is int else "a number"
    assert not (low_open and high is not None), "low_open takes no high"
    if high is not None:
        allowed = f"{noun} in {low}..{high}"
    else:
        allowed = f"{noun} {'>' if low_open else '>='} {low}"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not (value > low if low_open else value >= low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


positive_int = number_arg(int, 1)
non_negative_int = number_arg(int, 0)
positive_float = number_arg(float, 0, low_open=True)


# --- cases and providers ----------------------------------------------------------------


class Skip(Exception):
    """A provider cannot run here (no TMA, dtype unsupported, seed file absent...): a note, not a failure."""


@dataclass
class Provider:
    """One way of computing a case.  ``fn`` is what gets timed and returns the output;
    ``check_fn`` (default ``fn``) is what gets checked, e.g. the same call with input
    validation switched on.  ``ours`` marks this project's kernels: their failures fail the run."""

    name: str
    fn: Callable[[], object] | None
    check_fn: Callable[[], object] | None = None
    ours: bool = True
    skip: str | None = None   # cannot run here: a note
    error: str | None = None  # could not even be set up: a failure
    note: str = ""


@dataclass
class CaseData:
    providers: list[Provider]
    reference: Callable[[], list[torch.Tensor]]  # float32 tensors computed in float64
    extra_params: dict = field(default_factory=dict)  # facts known only once inputs exist
    min_bytes: int | None = None  # when the case's shapes overcount (MoE: only used experts' weights)


@dataclass
class Case:
    """A problem and how to set it up.  ``setup`` allocates inputs only when the case runs."""

    suite: str
    panel: str           # a plot panel / table group, e.g. "fp16" or "Mixtral-8x7B up, skewed"
    label: str           # the row label, e.g. "4096x4096x4096"
    x: float             # the plot's x value (size, tokens...)
    dtype: torch.dtype
    shapes: list[tuple[int, int, int]]  # (M, N, K) of every GEMM in the case
    baseline: str        # name of the vendor provider the others are compared with
    setup: Callable[[], CaseData]
    params: dict = field(default_factory=dict)
    cuda_graph: bool = False  # time with do_bench_cudagraph: GPU time without Python launch overhead
    host: bool = False  # time the host instead: enqueue time per call (host_ms); no TFLOP/s then

    @property
    def flops(self) -> int:
        return gemm_flops(self.shapes)

    @property
    def min_bytes(self) -> int:
        return gemm_min_bytes(self.shapes, torch.finfo(self.dtype).bits // 8)


#: CSV columns, in order
COLUMNS = (
    "suite", "panel", "case", "x", "dtype", "provider", "ours", "baseline", "time_ms", "tflops", "pct_peak",
    "speedup", "baseline_spread", "gb_s", "rel_err", "tol", "ok", "flops", "min_bytes", "params", "note",
    "vendor_kernel",
)


@dataclass
class Row:
    suite: str
    panel: str
    case: str
    x: float
    dtype: str
    provider: str
    baseline: str
    ours: bool = True
    time_ms: float | None = None
    tflops: float | None = None
    pct_peak: float | None = None
    speedup: float | None = None          # baseline time / this time: > 1 is faster than the vendor
    baseline_spread: float | None = None  # |t1 - t2| / mean of the baseline's two timings
    gb_s: float | None = None             # min_bytes / time
    rel_err: float | None = None
    tol: float | None = None
    ok: bool | None = None                # None: not run (skipped)
    flops: int = 0
    min_bytes: int = 0
    params: str = ""
    note: str = ""
    vendor_kernel: str = ""               # baseline rows on a GPU: the kernels one call launched

    @property
    def failed(self) -> bool:
        """Ran (or tried to) and was wrong or raised."""
        return self.ok is False

    def as_dict(self) -> dict:
        return {c: getattr(self, c) for c in COLUMNS}


# --- correctness ------------------------------------------------------------------------


def as_tensor_list(out) -> list[torch.Tensor]:
    """A provider's output as a list of 2-D tensors (3-D stacks are split along dim 0)."""
    if isinstance(out, torch.Tensor):
        return list(out.unbind(0)) if out.dim() == 3 else [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in as_tensor_list(item)]
    raise TypeError(f"provider returned {type(out).__name__}, expected a tensor or a list of tensors")


def rel_err_lists(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> float:
    """||out - ref|| / ||ref|| over all pieces together, computed in float64 where the
    tensors live (the definition of :func:`gemm_kernels.testing.rel_err`: NaN/inf -> inf; without
    its floor for references below the dtype's smallest normal, which no suite's output comes near)."""
    if len(outs) != len(refs):
        raise ValueError(f"provider returned {len(outs)} matrices, the reference has {len(refs)}")
    diff_sq = ref_sq = 0.0
    for out, ref in zip(outs, refs):
        if tuple(out.shape) != tuple(ref.shape):
            raise ValueError(f"shape mismatch: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
        flat_out, flat_ref = out.reshape(-1), ref.to(out.device).reshape(-1)
        for start in range(0, flat_out.numel(), REL_ERR_CHUNK):  # float64 copies of a chunk at a time
            out64 = flat_out[start:start + REL_ERR_CHUNK].double()
            ref64 = flat_ref[start:start + REL_ERR_CHUNK].double()
            if not bool(torch.isfinite(out64).all()):
                return float("inf")
            diff_sq += float(torch.linalg.vector_norm(out64 - ref64) ** 2)
            ref_sq += float(torch.linalg.vector_norm(ref64) ** 2)
    return math.sqrt(diff_sq) if ref_sq == 0 else math.sqrt(diff_sq / ref_sq)


#: elements per float64 chunk in rel_err_lists (512 MB): a 2-GB output is not copied whole, three times
REL_ERR_CHUNK = 1 << 26


@contextlib.contextmanager
def poisoned_empty():
    """``torch.empty`` returns NaN-filled floating tensors inside the block."""
    real_empty = torch.empty

    def nan_empty(*args, **kwargs):
        out = real_empty(*args, **kwargs)
        if out.dtype.is_floating_point:
            out.fill_(math.nan)
        return out

    torch.empty = nan_empty
    try:
        yield
    finally:
        torch.empty = real_empty


def synchronize() -> None:
    if runtime.on_gpu():
        torch.cuda.synchronize()


# --- which vendor kernel ----------------------------------------------------------------


def short_kernel_name(name: str) -> str:
    """A GPU kernel's name without what only repeats its signature.

    cuBLAS's Hopper kernels are named for their design (``nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT``:
    tile 256x128, K step 64, 4 stages, a 1x2 cluster, cooperative) and are kept whole; C++ template
    kernels (torch's elementwise kernels) keep their function name only, without ``void``, template
    arguments and parameter list; CUTLASS's generic launchers (``cutlass::Kernel2<...>``) are named
    by their first template argument, the GEMM they launch; mangled CUTLASS 3 names are summarised
    by :func:`_mangled_cutlass_summary`."""
    name = name.strip()
    if name.startswith("_Z"):  # a mangled C++ name (CUTLASS 3 kernels, e.g. torch._grouped_mm's)
        return _mangled_cutlass_summary(name)
    if name.startswith(("cutlass GemmUniversal (", "cutlass kernel (")):  # already summarised
        return name
    if name.startswith("void "):
        name = name[len("void "):]
    depth, cut, first_arg_end = 0, None, None
    for i, ch in enumerate(name):
        if ch in "<(" and depth == 0 and cut is None:
            cut = i
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if cut is not None and name[cut] == "<" and first_arg_end is None and (
                (ch == "," and depth == 1) or (ch == ">" and depth == 0)):
            first_arg_end = i
    if cut is None:
        return name
    function = name[:cut]
    if function.startswith("cutlass::") and first_arg_end is not None:  # generic launcher: the GEMM is its argument
        return name[cut + 1:first_arg_end].strip()
    return function


def _mangled_cutlass_summary(name: str) -> str:
    """A mangled CUTLASS 3 kernel name cut to what tells kernels apart: its kernel schedule
    (``KernelTmaWarpSpecializedCooperative``, ``...Pingpong``) and its wgmma instruction shape
    (``MMA_64x256x16_F32BF16BF16_SS``); other mangled names keep their first 80 characters."""
    import re

    schedule = re.search(r"(Kernel\w*?(?:Cooperative|Pingpong|WarpSpecialized))(?=E|I|N)", name)
    mma = re.search(r"(MMA_\d+x\d+x\d+_\w+?_(?:SS|RS))", name)
    if "cutlass" not in name or not (schedule or mma):
        return name[:80]
    found = ", ".join(m.group(1) for m in (schedule, mma) if m)
    return f"cutlass {'GemmUniversal' if 'GemmUniversal' in name else 'kernel'} ({found})"


def gpu_kernel_names(fn: Callable[[], object]) -> list[str]:
    """Names of the GPU kernels one call of ``fn`` launches, in launch order (``torch.profiler``).

    ``fn`` runs once before the profiled call, so a library's first-call set-up (cuBLAS picks and
    loads its kernel then) is not what gets named; memory copies and memsets are left out."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset"))]
    kernels.sort(key=lambda e: e.time_range.start)
    return [e.name for e in kernels]


def vendor_kernel_label(names: list[str]) -> str:
    """The ``vendor_kernel`` cell: short names in launch order, a repeated one counted once
    with its count (a loop of 4 GEMMs: ``name x4``), joined by `` + ``."""
    shorts: list[str] = []
    counts: dict[str, int] = {}
    for n in map(short_kernel_name, names):
        if n not in counts:
            shorts.append(n)
        counts[n] = counts.get(n, 0) + 1
    return " + ".join(n if counts[n] == 1 else f"{n} x{counts[n]}" for n in shorts)


def vendor_kernel_of(fn: Callable[[], object]) -> str:
    """:func:`vendor_kernel_label` of one call of ``fn``; a note in parentheses when profiling failed,
    and empty off a GPU (the interpreter runs no GPU kernels to name)."""
    if not runtime.on_gpu():
        return ""
    try:
        return vendor_kernel_label(gpu_kernel_names(fn))
    except Exception as exc:  # naming the kernel is provenance, never a reason to lose the timings
        return f"(not profiled: {_first_line(exc, 120)})"


# --- timing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TimingSettings:
    """do_bench's warm-up and repetition (ms) per timing, and ``rounds``: every provider of a case
    is timed once per round, the providers interleaved (the starting one rotates), and each
    reports the median of its rounds.  A GPU's clock drifts with temperature and power over
    seconds; interleaving spreads that drift over all providers instead of charging it to
    whichever ran last, and the baseline's spread across rounds is the case's noise estimate."""

    warmup_ms: int = 25
    rep_ms: int = 100
    rounds: int = 3


#: calls per host timing (``host_ms``)
HOST_CALLS = 1000


def host_ms(fn: Callable[[], object], calls: int = HOST_CALLS) -> float:
    """Host time of one call in ms: ``calls`` calls back to back timed with ``time.perf_counter``,
    then one synchronize (not timed).  Where the GPU is faster than the host, the launches never
    wait for the GPU and this is what the host spends per call (checks, allocation, launch)."""
    for _ in range(20):
        fn()
    synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    synchronize()
    return elapsed / calls * 1e3


def host_profile(fn: Callable[[], object], calls: int, top: int = 10) -> list[str]:
    """Where ``calls`` calls of ``fn`` spend the host's time: cProfile's ``top`` functions by own
    time, one line each with µs per call (own and cumulative) and calls per call."""
    import cProfile
    import pstats

    synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    synchronize()
    rows = sorted(pstats.Stats(profiler).stats.items(), key=lambda kv: -kv[1][2])[:top]  # (cc, nc, own, cum, callers)
    return [f"{own / calls * 1e6:7.2f} us own, {cum / calls * 1e6:7.2f} us cumulative per call, {nc // calls} calls: "
            f"{name} ({'/'.join(file.rsplit('/', 2)[-2:]) if '/' in file else file}:{line})"
            for (file, line, name), (_, nc, own, cum, _) in rows]


def median_ms(fn: Callable[[], object], settings: TimingSettings, cuda_graph: bool = False) -> float:
    """Median time of ``fn`` in ms with ``triton.testing.do_bench`` (events, L2 flushed).

    With ``cuda_graph``: ``triton.testing.do_bench_cudagraph`` instead, which captures back-to-back
    calls in a CUDA graph and replays it, so the time is the GPU's alone (no Python launch
    overhead, no L2 flush between calls).
    Triton 3.x's ``do_bench`` takes ``return_mode="median"``; a version without that
    argument gets ``quantiles=[0.5]`` instead (the same number)."""
    from triton.testing import do_bench, do_bench_cudagraph

    bench = do_bench_cudagraph if cuda_graph else do_bench
    params = inspect.signature(bench).parameters
    kwargs = {"warmup": settings.warmup_ms, "rep": settings.rep_ms} if not cuda_graph else {"rep": settings.rep_ms}
    if "return_mode" in params:
        kwargs["return_mode"] = "median"
    else:
        kwargs["quantiles"] = [0.5]
    ms = bench(fn, **kwargs)
    if isinstance(ms, (list, tuple)):
        ms = ms[0]
    return float(ms)


def is_fatal(exc: BaseException) -> bool:
    """CUDA errors that poison the context: nothing after them can be trusted."""
    text = str(exc).lower()
    return any(s in text for s in ("illegal memory access", "misaligned address", "unspecified launch failure",
                                   "device-side assert", "an illegal instruction"))


class FatalBenchError(RuntimeError):
    pass


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:limit]


def run_case(case: Case, timing: TimingSettings | None, peak: float | None) -> list[Row]:
    """Check every provider of ``case`` and (when ``timing`` is given) time it."""
    data = case.setup()
    params = ";".join(f"{k}={v}" for k, v in {**case.params, **data.extra_params}.items())
    min_bytes = data.min_bytes if data.min_bytes is not None else case.min_bytes
    tol = TOLERANCES[case.dtype]
    refs = data.reference()
    synchronize()
    rows: list[Row] = []
    timed: list[tuple[Row, Callable[[], object]]] = []  # checked providers, timed after all checks
    for p in data.providers:
        row = Row(case.suite, case.panel, case.label, case.x, dtype_name(case.dtype), p.name, case.baseline,
                  ours=p.ours, tol=tol, flops=case.flops, min_bytes=min_bytes, params=params, note=p.note)
        rows.append(row)
        if p.error is not None:
            row.ok = False
            row.note = "; ".join(s for s in (p.error, row.note) if s)
            continue
        if p.skip is not None or p.fn is None:
            row.note = "; ".join(s for s in (p.skip or "not available", row.note) if s)
            continue
        try:
            with poisoned_empty():
                out = (p.check_fn or p.fn)()
                outs = as_tensor_list(out)
                synchronize()
            row.rel_err = rel_err_lists(outs, refs)
            row.ok = row.rel_err <= tol
            del out, outs
        except Skip as exc:
            row.note = "; ".join(s for s in (str(exc), row.note) if s)
            continue
        except Exception as exc:  # recorded in the row; the summary and exit status report it
            if is_fatal(exc):
                raise FatalBenchError(f"{case.suite} {case.label} {p.name}: {_first_line(exc)}") from exc
            row.ok = False
            row.note = "; ".join(s for s in (_first_line(exc), row.note) if s)
            continue
        if timing is not None:
            if p.name == case.baseline:
                row.vendor_kernel = vendor_kernel_of(p.fn)
            timed.append((row, p.fn))
    if timing is not None:
        _time_interleaved(timed, case, timing)
    _derive(rows, case, peak)
    del data, refs
    return rows


def _time_interleaved(timed: list, case: Case, timing: TimingSettings) -> None:
    """Time every checked provider ``timing.rounds`` times, interleaved; median per provider.
    Sets every row's ``baseline_spread``: (slowest - fastest) / median of the baseline's rounds."""
    if not timed:
        return
    samples: dict[int, list[float]] = {i: [] for i in range(len(timed))}
    rounds = max(1, timing.rounds)
    for r in range(rounds):
        for j in range(len(timed)):
            i = (j + r) % len(timed)  # rotate who goes first
            samples[i].append(host_ms(timed[i][1]) if case.host else median_ms(timed[i][1], timing, case.cuda_graph))
    for i, (row, _) in enumerate(timed):
        row.time_ms = statistics.median(samples[i])
    base = next((i for i, (row, _) in enumerate(timed) if row.provider == case.baseline), None)
    if base is not None and rounds > 1:
        times = samples[base]
        spread = (max(times) - min(times)) / statistics.median(times)
        for row, _ in timed:
            row.baseline_spread = spread


def _derive(rows: list[Row], case: Case, peak: float | None) -> None:
    base = next((r for r in rows if r.provider == case.baseline and r.time_ms is not None), None)
    for r in rows:
        if r.time_ms is None:
            continue
        r.speedup = base.time_ms / r.time_ms if base is not None else None
        if case.host:  # host time is not the GPU's: no throughput from it
            continue
        r.tflops = tflops(r.flops, r.time_ms)
        r.gb_s = r.min_bytes / (r.time_ms * 1e-3) / 1e9
        r.pct_peak = 100 * r.tflops / peak if peak else None


# --- device facts -----------------------------------------------------------------------


def measure_ceilings(timing: TimingSettings) -> dict:
    """The two ceilings every floor is computed from, measured once per run on this GPU: a large
    bf16 cuBLAS matmul (TFLOP/s) and a large device-to-device copy (bytes read + written)."""
    n = 8192
    a = torch.randn(n, n, device=runtime.DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=runtime.DEVICE, dtype=torch.bfloat16)
    mm_ms = median_ms(lambda: torch.matmul(a, b), timing)
    src = torch.randn(256 * 2**20, device=runtime.DEVICE)  # 1 GiB of fp32
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), timing)
    return {
        "matmul_bf16_8192_tflops": round(tflops(2 * n**3, mm_ms), 1),
        "copy_1GiB_tb_s": round(2 * src.numel() * 4 / (copy_ms * 1e-3) / 1e12, 3),
    }


class Stopwatch:
    def __init__(self):
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.start
