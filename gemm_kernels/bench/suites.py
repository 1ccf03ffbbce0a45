"""The benchmark suites: which problems, which providers, which baseline.

Every suite is a function ``(settings) -> list[Case]``.  Kernel modules are imported
inside the providers' set-up, so a suite still runs (with that provider marked "not
available") while a kernel module is missing or being rewritten.

Sizes: ``full`` on a GPU, ``quick`` on a GPU (a smoke run of a minute or two), and tiny
sizes in the interpreter on a CPU (correctness only: the interpreter is ~10^5x slower).
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass
from typing import Callable

import torch

from .. import runtime
from ..kernels.epilogue import activation_ref
from ..models.tiles import ws_default_tile
from .core import Case, CaseData, Provider, Skip, dtype_name

# ------------------------------------------------------------------------------ settings


@dataclass
class SuiteSettings:
    quick: bool = False
    dtype: torch.dtype | None = None   # None: each suite's own default dtypes
    seed: int = 0                      # base of the per-case random seeds
    seed_tutorial: object = None       # path of the seed page, or None when not found
    seed_kernels: object = None        # loaded lazily (bench.seed.SeedKernels) or an error string
    size_override: str | None = None   # "full"/"quick": list a GPU run's cases on any machine

    @property
    def size_class(self) -> str:
        if self.size_override:
            return self.size_override
        if runtime.interpreted():
            return "cpu"
        return "quick" if self.quick else "full"


def _dtypes(settings: SuiteSettings, default: tuple) -> tuple:
    return (settings.dtype,) if settings.dtype is not None else default


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device=runtime.DEVICE).manual_seed(seed)


def _randn(shape, dtype, gen) -> torch.Tensor:
    """Fresh N(0, 1) numbers made on the device (never zeros: they can time faster than data)."""
    return torch.randn(*shape, device=runtime.DEVICE, dtype=dtype, generator=gen)


class _Seeds:
    """A different, reproducible random seed for every case of a run."""

    def __init__(self, base: int):
        self.next = base * 1_000_003

    def __call__(self) -> int:
        self.next += 1
        return self.next


# ------------------------------------------------------------------------------ kernels, lazily


def kernel(module: str, name: str) -> Callable:
    """``gemm_kernels.kernels.<module>.<name>``, or Skip saying it is not there yet."""
    try:
        mod = importlib.import_module(f"gemm_kernels.kernels.{module}")
    except ImportError as exc:
        raise Skip(f"gemm_kernels.{module} not available ({exc})") from exc
    try:
        return getattr(mod, name)
    except AttributeError as exc:
        raise Skip(f"gemm_kernels.{module}.{name} not available") from exc


def lazy_provider(name: str, make: Callable[[], tuple], **kwargs) -> Provider:
    """A provider whose functions come from ``make() -> (fn, check_fn or None)``; a Skip raised
    by ``make`` (missing module, no TMA here) becomes the provider's skip reason."""
    try:
        fn, check_fn = make()
    except Skip as exc:
        return Provider(name, None, skip=str(exc), **kwargs)
    except Exception as exc:  # a broken set-up is this provider's failure, not the case's
        return Provider(name, None, error=f"set-up failed: {type(exc).__name__}: {exc}".splitlines()[0][:300],
                        **kwargs)
    return Provider(name, fn, check_fn, **kwargs)


def _require_tma(what: str) -> None:
    """A TMA provider on a GPU without TMA is skipped (with runtime.require_tma's reason), not failed."""
    try:
        runtime.require_tma(what, "Skipped.")
    except RuntimeError as exc:
        raise Skip(str(exc)) from None


def _mm_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 product, kept as float32 (6e-8 relative: far below every tolerance)."""
    return (a.double() @ b.double()).float()


# ------------------------------------------------------------------------------ square

#: The seed notes sweep square sizes 256..18944 in steps of 256 (74 sizes).  Beside the powers
#: of two we keep four of its points: 1280 and 2304 (non-powers of two where the notes' Triton
#: kernel led cuBLAS), 4864 (where the notes' cuBLAS dipped) and 18944 (the sweep's end).
SQUARE_SIZES = {
    "full": (256, 512, 1024, 1280, 2048, 2304, 3072, 4096, 4864, 6144, 8192, 18944),
    "quick": (1024, 4096),
    "cpu": (40, 64),  # 40: ragged against the interpreter's 32-blocks, rows still 16-byte aligned for TMA
}
SQUARE_DTYPES = (torch.float16, torch.bfloat16)


def _single_gemm_providers(a, b, *, activation=None, bias=None, suffix="", row_major=True):
    """Our single-GEMM kernels on (a, b) with an optional fused epilogue."""
    epi = {"activation": activation, "bias": bias}

    def matmul_order(order):
        def make():
            matmul = kernel("matmul", "matmul")
            return (lambda: matmul(a, b, order=order, **epi)), None
        return make

    def persistent():
        f = kernel("persistent", "matmul_persistent")
        return (lambda: f(a, b, **epi)), None

    def tma():
        _require_tma("matmul_tma")
        f = kernel("persistent", "matmul_tma")
        return (lambda: f(a, b, **epi)), None

    def stream_k():
        _require_tma("matmul_streamk")
        f = kernel("streamk", "matmul_streamk")
        return (lambda: f(a, b, **epi)), None

    return [
        *([lazy_provider("row_major" + suffix, matmul_order("row_major"))] if row_major else []),
        lazy_provider("grouped" + suffix, matmul_order("grouped")),
        lazy_provider("persistent" + suffix, persistent),
        lazy_provider("tma" + suffix, tma),
        lazy_provider("stream_k" + suffix, stream_k),
        _ws_provider(a, b, suffix, **epi),
    ]


def _ws_provider(a, b, suffix="", **epi) -> Provider:
    """matmul_ws (the warp-specialized Gluon kernel): skipped, with the reason, where there is no sm_90 GPU."""
    def make():
        module = importlib.import_module("gemm_kernels.kernels.matmul_ws")
        try:
            module._require_hopper()
        except RuntimeError as exc:
            raise Skip(str(exc).split(";")[0]) from None
        return (lambda: module.matmul_ws(a, b, **epi)), None
    tile = ws_default_tile(a.shape[0], b.shape[1], num_sms=runtime.num_sms())
    return lazy_provider("ws" + suffix, make, note=f"matmul_ws, {tile} tile")


def _auto_provider(a, b) -> Provider:
    """matmul_auto (the default dispatch), its note naming the launcher it picked at this shape."""
    dispatch = importlib.import_module("gemm_kernels.kernels.dispatch")
    M, K = a.shape
    return Provider("auto", lambda: dispatch.matmul_auto(a, b),
                    note=f"matmul_auto picked {dispatch.pick_launcher(a, b)[0]} at {M}x{b.shape[1]}x{K}")


def square_suite(settings: SuiteSettings) -> list[Case]:
    """Single square GEMMs: cuBLAS (torch.matmul) vs our row-major, grouped, persistent, TMA, Stream-K
    and warp-specialized kernels, and the default dispatch (matmul_auto)."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, SQUARE_DTYPES):
        for n in SQUARE_SIZES[settings.size_class]:
            def setup(n=n, dtype=dtype, seed=seeds()):
                gen = _generator(seed)
                a, b = _randn((n, n), dtype, gen), _randn((n, n), dtype, gen)
                providers = [Provider("cuBLAS", lambda: torch.matmul(a, b), ours=False)]
                providers += [*_single_gemm_providers(a, b), _auto_provider(a, b)]
                return CaseData(providers, lambda: [_mm_ref(a, b)])
            cases.append(Case("square", dtype_name(dtype), f"{n}x{n}x{n}", n, dtype, [(n, n, n)], "cuBLAS",
                              setup, {"M": n, "N": n, "K": n}))
    return cases


# ------------------------------------------------------------------------------ order

#: (M, N, K): squares, and a short-and-wide C where row-major order walks a whole row of
#: 128 column tiles (re-reading all of B) before it moves down.
ORDER_SHAPES = {
    "full": ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 16384, 4096)),
    "quick": ((4096, 4096, 4096),),
    "cpu": ((64, 96, 64),),
}
ORDER_GROUP_SIZES = (4, 8, 16)


def order_suite(settings: SuiteSettings) -> list[Case]:
    """Program order over C tiles (notebook 03): row-major vs grouped with GROUP_SIZE_M 4/8/16."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, (torch.float16,)):
        for M, N, K in ORDER_SHAPES[settings.size_class]:
            def setup(M=M, N=N, K=K, dtype=dtype, seed=seeds()):
                gen = _generator(seed)
                a, b = _randn((M, K), dtype, gen), _randn((K, N), dtype, gen)

                def order(order, group):
                    def make():
                        matmul = kernel("matmul", "matmul")
                        return (lambda: matmul(a, b, order=order, group_size_m=group)), None
                    return make

                providers = [Provider("cuBLAS", lambda: torch.matmul(a, b), ours=False),
                             lazy_provider("row_major", order("row_major", 8))]
                providers += [lazy_provider(f"grouped g={g}", order("grouped", g)) for g in ORDER_GROUP_SIZES]
                return CaseData(providers, lambda: [_mm_ref(a, b)])
            cases.append(Case("order", dtype_name(dtype), f"{M}x{N}x{K}", M * N * K, dtype, [(M, N, K)], "cuBLAS",
                              setup, {"M": M, "N": N, "K": K}))
    return cases


# ------------------------------------------------------------------------------ fusion

FUSION_SIZES = {"full": (2048, 4096, 8192), "quick": (4096,), "cpu": (48,)}
#: (activation, with bias): the seed notes' leaky_relu, and exact GELU with a bias.  Two only: every
#: epilogue is a new compile of every autotune config of every kernel (minutes on a cold cache).
FUSION_EPILOGUES = (("leaky_relu", False), ("gelu", True))
_TORCH_ACTIVATIONS = {
    "relu": torch.relu,
    "leaky_relu": lambda x: torch.nn.functional.leaky_relu(x, 0.01),
    "gelu": torch.nn.functional.gelu,
}


def fusion_suite(settings: SuiteSettings) -> list[Case]:
    """act(A @ B (+ bias)) fused in one kernel vs torch: matmul (addmm with a bias) then the activation."""
    seeds = _Seeds(settings.seed)
    cases = []
    epilogues = FUSION_EPILOGUES if settings.size_class != "quick" else FUSION_EPILOGUES[:1]
    for dtype in _dtypes(settings, (torch.float16,)):
        for n in FUSION_SIZES[settings.size_class]:
            for activation, with_bias in epilogues:
                def setup(n=n, dtype=dtype, activation=activation, with_bias=with_bias, seed=seeds()):
                    gen = _generator(seed)
                    a, b = _randn((n, n), dtype, gen), _randn((n, n), dtype, gen)
                    bias = _randn((n,), dtype, gen) if with_bias else None
                    act = _TORCH_ACTIVATIONS[activation]
                    if bias is None:
                        baseline = lambda: act(torch.matmul(a, b))  # noqa: E731
                    else:
                        baseline = lambda: act(torch.addmm(bias, a, b))  # noqa: E731

                    def reference():
                        acc = a.double() @ b.double()
                        if bias is not None:
                            acc = acc + bias.double()
                        return [activation_ref(acc, activation).float()]

                    providers = [Provider("torch matmul+act", baseline, ours=False,
                                          note="torch.addmm (bias in cuBLAS) then the activation" if bias is not None
                                          else "torch.matmul then the activation")]
                    providers += _single_gemm_providers(a, b, activation=activation, bias=bias, suffix=" fused",
                                                        row_major=False)  # order is not what this suite is about
                    return CaseData(providers, reference)
                label = f"{n}^3 {activation}" + (" +bias" if with_bias else "")
                cases.append(Case("fusion", f"{dtype_name(dtype)} {n}^3", label, n, dtype, [(n, n, n)],
                                  "torch matmul+act", setup,
                                  {"M": n, "N": n, "K": n, "activation": activation, "bias": with_bias}))
    return cases


# ------------------------------------------------------------------------------ stream-k

#: (M, N, K) from "few tiles, long K" (where the 128x256 tiles leave most SMs idle) to 4096^3
#: (3.9 waves); cpu: 2 tiles of the interpreter's 32x32 blocks on its 4 "SMs", one of them split.
STREAMK_SHAPES = {
    "full": ((512, 512, 16384), (1024, 1024, 8192), (1280, 1280, 1280), (2048, 2048, 8192), (3072, 3072, 3072),
             (4096, 4096, 4096)),
    "quick": ((1024, 1024, 8192), (4096, 4096, 4096)),
    "cpu": ((40, 32, 296), (70, 40, 200)),
}


def _streamk_fixed_config():
    """The config of the suite's controlled pair (same tiles, split or not): Hopper's 128x256
    tile on a GPU, the interpreter's blocks on a CPU."""
    import triton

    if runtime.interpreted():
        return triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "FLATTEN": False, "WARP_SPECIALIZE": False,
                              "EPILOGUE_SUBTILE": False}, num_warps=4, num_stages=1)
    return triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "FLATTEN": False, "WARP_SPECIALIZE": False,
                          "EPILOGUE_SUBTILE": True}, num_warps=8, num_stages=3)


#: suites timed with do_bench_cudagraph (core.median_ms): their small problems run in ~30-100 us,
#: less than a Python launch of our kernels (~100 us, PERF_NOTES.md), so do_bench would
#: time the host instead of the schedule they are about
CUDA_GRAPH_SUITES = ("stream-k", "decode")


def streamk_suite(settings: SuiteSettings) -> list[Case]:
    """Stream-K (notebook 05b): where splitting along K pays.  cuBLAS, matmul_tma, matmul_streamk
    and matmul_splitk autotuned, plus a controlled pair on one fixed tile: matmul_tma vs
    matmul_streamk with the whole tail split (``sk_tiles`` = tiles % programs, or all tiles)."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, (torch.float16,)):
        for M, N, K in STREAMK_SHAPES[settings.size_class]:
            def setup(M=M, N=N, K=K, dtype=dtype, seed=seeds()):
                _require_tma("matmul_streamk")
                from ..models.tiles import cdiv

                gen = _generator(seed)
                a, b = _randn((M, K), dtype, gen), _randn((K, N), dtype, gen)
                config = _streamk_fixed_config()
                num_tiles = cdiv(M, config.kwargs["BLOCK_M"]) * cdiv(N, config.kwargs["BLOCK_N"])
                programs = runtime.num_sms()
                tail = num_tiles if num_tiles < programs else num_tiles % programs
                tile = "{BLOCK_M}x{BLOCK_N}".format(**config.kwargs)

                def make(module, name, **kw):
                    def build():
                        f = kernel(module, name)
                        return (lambda: f(a, b, **kw)), None
                    return build

                providers = [Provider("cuBLAS", lambda: torch.matmul(a, b), ours=False),
                             lazy_provider("tma", make("persistent", "matmul_tma")),
                             lazy_provider("stream_k", make("streamk", "matmul_streamk")),
                             lazy_provider("split_k", make("splitk", "matmul_splitk")),
                             _auto_provider(a, b),
                             lazy_provider(f"tma {tile}", make("persistent", "matmul_tma", config=config)),
                             lazy_provider(f"stream_k {tile} tail split",
                                           make("streamk", "matmul_streamk", config=config, sk_tiles=tail),
                                           note=f"sk_tiles={tail}: the last {tail} of {num_tiles} tiles split along K")]
                return CaseData(providers, lambda: [_mm_ref(a, b)])
            cases.append(Case("stream-k", dtype_name(dtype), f"{M}x{N}x{K}", M * N * K, dtype, [(M, N, K)], "cuBLAS",
                              setup, {"M": M, "N": N, "K": K}, cuda_graph="stream-k" in CUDA_GRAPH_SUITES))
    return cases


# ------------------------------------------------------------------------------ seed-grouped

#: The seed tutorial's two tables: 4 square problems N x N x N, and 4 problems M x 8192 x 8192.
SEED_GROUP_SIZE = 4
SEED_TABLES = {
    "full": {"square": (128, 256, 512, 1024), "tall": (128, 256, 512, 1024), "NK": 8192},
    "quick": {"square": (128, 1024), "tall": (128, 1024), "NK": 8192},
    "cpu": {"square": (32, 64), "tall": (32, 64), "NK": 64},  # multiples of 32: the seed assumes full tiles
}
#: the seed kernels' config in the interpreter (their autotuning needs a GPU to time configs)
SEED_INTERPRETER_CONFIG = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}


def _seed_kernels(settings: SuiteSettings):
    """The seed's kernels (loaded once per run), or Skip with the reason they are not here."""
    from .seed import SeedError, load_seed_kernels

    if settings.seed_kernels is None:
        if settings.seed_tutorial is None:
            settings.seed_kernels = ("seed tutorial not found: pass --seed-tutorial PATH "
                                     "(the saved page of Triton's tutorial 08)")
        else:
            try:
                settings.seed_kernels = load_seed_kernels(settings.seed_tutorial)
                for note in settings.seed_kernels.notes:
                    print(f"[seed-grouped] {note}")
            except (SeedError, OSError, SyntaxError, ValueError, NameError) as exc:
                settings.seed_kernels = f"could not load the seed kernels: {type(exc).__name__}: {exc}"
    if isinstance(settings.seed_kernels, str):
        raise Skip(settings.seed_kernels)
    return settings.seed_kernels


def _seed_launcher(seed, tma: bool, group_a, group_b_or_bt, group_c):
    """Launch-only call of the seed kernel on pre-built pointer arrays, as the seed times it.

    Writes into ``group_c`` (pre-allocated) and returns it.  On a GPU the seed's own
    autotuning runs; in the interpreter its fixed small config does (sizes are multiples of it)."""
    dev = runtime.DEVICE
    ptrs = [torch.tensor([t.data_ptr() for t in group], device=dev, dtype=torch.int64)
            for group in (group_a, group_b_or_bt, group_c)]
    sizes, lds = [], []
    for a, b, c in zip(group_a, group_b_or_bt, group_c):
        M, K = a.shape
        N = c.shape[1]
        sizes += [M, N, K]
        lds += [a.stride(0), b.stride(0), c.stride(0)]
    sizes = torch.tensor(sizes, device=dev, dtype=torch.int32)
    lds = torch.tensor(lds, device=dev, dtype=torch.int32)
    args = (*ptrs, sizes, lds, len(group_a))
    kern = seed.grouped_matmul_tma_kernel if tma else seed.grouped_matmul_kernel
    extra = {"FP8": False, "NUM_SM": runtime.num_sms()} if tma else {}
    if tma and runtime.on_gpu():
        runtime.ensure_tma_allocator()
    if runtime.interpreted():
        cfg = {**SEED_INTERPRETER_CONFIG, "NUM_SM": runtime.num_sms(), **extra}
        launch = lambda: kern.fn[(cfg["NUM_SM"],)](*args, **cfg)  # noqa: E731
    else:
        grid = lambda meta: (meta["NUM_SM"],)  # noqa: E731
        launch = lambda: kern[grid](*args, **extra)  # noqa: E731

    alive = (group_a, group_b_or_bt)  # the kernel holds only raw addresses: keep the tensors alive

    def run(alive=alive):
        launch()
        return group_c

    def check():  # same buffers (the seed's autotune key includes the pointer arrays), poisoned first
        for c in group_c:
            c.fill_(float("nan"))
        return run()

    return run, check


def seed_grouped_suite(settings: SuiteSettings) -> list[Case]:
    """The seed tutorial 08's two tables: cuBLAS loop vs grouped_matmul (plain, TMA) vs
    torch._grouped_mm (the equal shapes stacked 3-D) vs the seed's own Triton kernels."""
    seeds = _Seeds(settings.seed)
    table = SEED_TABLES[settings.size_class]
    nk = table["NK"]
    cases = []
    for dtype in _dtypes(settings, (torch.float16,)):
        problems = [(f"{SEED_GROUP_SIZE} problems N x N x N", n, (n, n, n)) for n in table["square"]]
        problems += [(f"{SEED_GROUP_SIZE} problems M x {nk} x {nk}", m, (m, nk, nk)) for m in table["tall"]]
        for panel, x, (M, N, K) in problems:
            def setup(M=M, N=N, K=K, dtype=dtype, seed=seeds()):
                gen = _generator(seed)
                a3 = _randn((SEED_GROUP_SIZE, M, K), dtype, gen)
                b3 = _randn((SEED_GROUP_SIZE, K, N), dtype, gen)
                group_a, group_b = list(a3.unbind(0)), list(b3.unbind(0))
                providers = [Provider("cuBLAS loop", lambda: [torch.matmul(a, b) for a, b in zip(group_a, group_b)],
                                      ours=False)]

                def ours(tma):
                    def make():
                        if tma:
                            _require_tma("grouped_matmul(tma=True)")
                        f = kernel("grouped", "grouped_matmul")
                        return (lambda: f(group_a, group_b, tma=tma)), None
                    return make

                def prepared(tma, cuda_graph=False):
                    def make():
                        if tma:
                            _require_tma("grouped_matmul(tma=True)")
                        if cuda_graph and not runtime.on_gpu():
                            raise Skip("CUDA graphs need a GPU")
                        plan_class = kernel("grouped", "GroupedMatmulPlan")
                        # host work (and a graph's recording) once, outside the timing
                        plan = plan_class(group_a, group_b, tma=tma, cuda_graph=cuda_graph)

                        def check():  # a fresh plan, its outputs poisoned after building it (a graph's
                            fresh = plan_class(group_a, group_b, tma=tma, cuda_graph=cuda_graph)
                            for c in fresh.outputs:  # recording already wrote them), then run
                                c.fill_(float("nan"))
                            return fresh.run()
                        return plan.run, check
                    return make

                note = "times the whole call: checks, metadata packing, one host-to-device copy, launch"
                providers.append(lazy_provider("grouped_matmul", ours(False), note=note))
                providers.append(lazy_provider("grouped_matmul tma", ours(True), note=note))
                prepared_note = ("GroupedMatmulPlan.run: launch only, metadata built beforehand (as the seed times its "
                                 "kernels); from the second run the compiled kernel is called directly (launch.BoundLaunch)")
                providers.append(lazy_provider("grouped_matmul plan", prepared(False), note=prepared_note))
                providers.append(lazy_provider("grouped_matmul tma plan", prepared(True), note=prepared_note))
                graph_note = ("GroupedMatmulPlan(cuda_graph=True).run: replays a CUDA graph of the launch "
                              "(no Python launch code at all)")
                providers.append(lazy_provider("grouped_matmul plan graph", prepared(False, cuda_graph=True),
                                               note=graph_note))
                providers.append(lazy_provider("grouped_matmul tma plan graph", prepared(True, cuda_graph=True),
                                               note=graph_note))
                providers.append(Provider(
                    "torch._grouped_mm", lambda: torch._grouped_mm(a3, b3), ours=False,
                    note="3-D x 3-D (equal shapes stacked)"
                    + ("" if dtype == torch.bfloat16 else "; its fast path is bf16-only on sm_90, "
                       "other dtypes may take torch's per-group fallback")))

                def seed_provider(tma):
                    def make():
                        if dtype != torch.float16:
                            raise Skip("the seed's kernels are fp16-only")
                        if tma:
                            _require_tma("the seed's TMA kernel")
                        seed_k = _seed_kernels(settings)
                        group_c = [torch.empty((M, N), device=runtime.DEVICE, dtype=dtype) for _ in group_a]
                        # the seed's TMA kernel reads B transposed (N x K, K contiguous), made once outside timing
                        b_in = [b.t().contiguous() for b in group_b] if tma else group_b
                        return _seed_launcher(seed_k, tma, group_a, b_in, group_c)
                    return make

                seed_note = "launch only, pointer arrays built beforehand (as the seed times it)"
                providers.append(lazy_provider("seed triton", seed_provider(False), ours=False, note=seed_note))
                providers.append(lazy_provider("seed triton+tma", seed_provider(True), ours=False, note=seed_note))
                return CaseData(providers, lambda: [_mm_ref(a, b) for a, b in zip(group_a, group_b)])
            cases.append(Case("seed-grouped", panel, f"{SEED_GROUP_SIZE}x {M}x{N}x{K}", x, dtype,
                              [(M, N, K)] * SEED_GROUP_SIZE, "cuBLAS loop", setup,
                              {"M": M, "N": N, "K": K, "problems": SEED_GROUP_SIZE}))
    return cases


# ------------------------------------------------------------------------------ moe


@dataclass(frozen=True)
class MoeModel:
    name: str
    experts: int
    top_k: int
    hidden: int
    ffn: int  # one expert's intermediate size


#: Expert shapes of real models, from their published configs (experts, top-k, hidden size, one
#: expert's intermediate size): Mixtral-8x7B 8/2/4096/14336; DeepSeek-V3 256 routed/8/7168/2048;
#: DeepSeek-V2-Lite 64 routed/6/2048/1408; Qwen3-30B-A3B 128/8/2048/768; Qwen3-235B-A22B
#: 128/8/4096/1536; gpt-oss-20b 32/4/2880/2880; gpt-oss-120b 128/4/2880/2880; OLMoE-1B-7B
#: 64/8/2048/1024.  Gate and up projections have the same shape (hidden -> ffn): "up" stands for both.
MOE_MODELS = {
    "full": (MoeModel("Mixtral-8x7B", 8, 2, 4096, 14336), MoeModel("DeepSeek-V3", 256, 8, 7168, 2048),
             MoeModel("DeepSeek-V2-Lite", 64, 6, 2048, 1408), MoeModel("Qwen3-30B-A3B", 128, 8, 2048, 768),
             MoeModel("Qwen3-235B-A22B", 128, 8, 4096, 1536), MoeModel("gpt-oss-20b", 32, 4, 2880, 2880),
             MoeModel("gpt-oss-120b", 128, 4, 2880, 2880), MoeModel("OLMoE-1B-7B", 64, 8, 2048, 1024)),
    "quick": (MoeModel("Mixtral-8x7B", 8, 2, 4096, 14336), MoeModel("Qwen3-30B-A3B", 128, 8, 2048, 768)),
    "cpu": (MoeModel("tiny 8 experts top-2", 8, 2, 64, 96), MoeModel("tiny 64 experts top-6", 64, 6, 32, 48)),
}
MOE_TOKENS = {"full": (512, 4096, 32768), "quick": (4096,), "cpu": (37,)}
#: "up": hidden -> ffn (the gate/up projections); "down": ffn -> hidden
MOE_PROJECTIONS = {"full": ("up", "down"), "quick": ("up",), "cpu": ("up", "down")}
#: "fwd": the expert GEMM; "fwd+bwd": the GEMM, then dx and dw from a given dy (a training step's share)
MOE_PASSES = {"full": ("fwd", "fwd+bwd"), "quick": ("fwd", "fwd+bwd"), "cpu": ("fwd", "fwd+bwd")}
MOE_ROUTINGS = ("uniform", "skewed")
MOE_DTYPES = (torch.bfloat16,)  # torch._grouped_mm's fast path on sm_90 is bf16-only


def _moe_weights(model: MoeModel, projection: str, dtype, gen) -> torch.Tensor:
    """Expert weights stored as nn.Linear stores them ([E, out, in]) and passed as the
    [E, in, out] view, the way MoE layers call torch._grouped_mm (B is K-contiguous)."""
    k, n = (model.hidden, model.ffn) if projection == "up" else (model.ffn, model.hidden)
    w = torch.empty((model.experts, n, k), device=runtime.DEVICE, dtype=dtype)
    for e in range(model.experts):  # one expert at a time: DeepSeek-V3's 7.5 GB never exists twice
        w[e] = torch.randn(n, k, device=runtime.DEVICE, dtype=dtype, generator=gen)
    return w.transpose(1, 2)


#: route_tokens' skew for "skewed" routing: Zipf-like, expert e weighted 1 / (e + 1)
MOE_SKEW = 1.0


def _route(model: MoeModel, tokens: int, routing: str, seed: int) -> torch.Tensor:
    """Rows per expert for ``tokens`` tokens (each sent to top_k distinct experts) via moe.route_tokens."""
    route_tokens = kernel("moe", "route_tokens")
    skew = 0.0 if routing == "uniform" else MOE_SKEW
    gen = torch.Generator().manual_seed(seed)  # route_tokens draws on the CPU
    routed = route_tokens(tokens, model.experts, model.top_k, skew=skew, generator=gen)
    return _counts_from_routing(routed, model.experts, tokens * model.top_k)


def _counts_from_routing(routed, experts: int, rows: int) -> torch.Tensor:
    """Rows per expert from route_tokens' result (its ``counts``), checked against the expected total."""
    counts = getattr(routed, "counts", routed)
    t = torch.as_tensor(counts).to("cpu", torch.int64).flatten()
    if t.numel() != experts:
        raise ValueError(f"route_tokens returned {t.numel()} numbers for {experts} experts")
    if int(t.sum()) == rows:
        return t
    raise ValueError(f"route_tokens' result sums to {int(t.sum())}, expected {rows} routed rows")


def _moe_fwd_bwd(mm, x, w, offs, dy):
    """One forward and backward of ``mm(x, w, offs)`` with x and w requiring grad: returns
    [out, dx, dw] (dw split per expert by the checker)."""
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()

    def run():
        xg.grad = wg.grad = None
        out = mm(xg, wg, offs)
        out.backward(dy)
        return [out.detach(), xg.grad, wg.grad]
    return run


def moe_suite(settings: SuiteSettings) -> list[Case]:
    """Ragged MoE expert GEMMs: our grouped_mm vs torch._grouped_mm (and a per-expert torch loop),
    forward, and forward+backward (dx and dw) at default arguments."""
    seeds = _Seeds(settings.seed)
    size = settings.size_class
    cases = []
    weights_cache: dict = {}
    for dtype in _dtypes(settings, MOE_DTYPES):
        for model in MOE_MODELS[size]:
            for projection in MOE_PROJECTIONS[size]:
                k, n = (model.hidden, model.ffn) if projection == "up" else (model.ffn, model.hidden)
                for routing in MOE_ROUTINGS:
                    for tokens in MOE_TOKENS[size]:
                        for moe_pass in MOE_PASSES[size]:
                            cases.append(_moe_case(model, projection, routing, tokens, moe_pass, dtype, k, n,
                                                   seeds(), weights_cache))
    return cases


def _moe_case(model, projection, routing, tokens, moe_pass, dtype, k, n, seed, weights_cache) -> Case:
    rows = tokens * model.top_k
    training = moe_pass == "fwd+bwd"

    def setup():
        gen = _generator(seed)
        key = (model, projection, dtype)
        if key not in weights_cache:  # one model's weights at a time
            weights_cache.clear()
            weights_cache[key] = _moe_weights(model, projection, dtype, _generator(seed + 7))
        w = weights_cache[key]
        counts = _route(model, tokens, routing, seed)
        ends = torch.cumsum(counts, 0)
        bounds = list(zip([0] + ends[:-1].tolist(), ends.tolist()))
        offs = ends.to(device=runtime.DEVICE, dtype=torch.int32)
        x = _randn((rows, k), dtype, gen)
        dy = _randn((rows, n), dtype, gen) if training else None

        def reference():
            ref = torch.empty((rows, n), device=x.device, dtype=torch.float32)
            for e, (s, t) in enumerate(bounds):
                ref[s:t] = (x[s:t].double() @ w[e].double()).float()
            if not training:
                return [ref]
            dx = torch.empty((rows, k), device=x.device, dtype=torch.float32)
            dws = []
            for e, (s, t) in enumerate(bounds):
                dx[s:t] = (dy[s:t].double() @ w[e].double().T).float()
                dws.append((x[s:t].double().T @ dy[s:t].double()).float())
            return [ref, dx, *dws]

        def ours():
            f = kernel("moe", "grouped_mm")
            if training:
                return _moe_fwd_bwd(f, x, w, offs, dy), None
            return (lambda: f(x, w, offs)), (lambda: f(x, w, offs, check_offs=True))

        def torch_mm(a, b, offs):
            return torch._grouped_mm(a, b, offs=offs)

        if training:
            providers = [
                Provider("torch._grouped_mm fwd+bwd", _moe_fwd_bwd(torch_mm, x, w, offs, dy), ours=False),
                lazy_provider("grouped_mm fwd+bwd", ours, note="default arguments; dw by the ragged-K kernel"),
            ]
        else:
            def loop():
                out = torch.empty((rows, n), device=x.device, dtype=dtype)
                for e, (s, t) in enumerate(bounds):
                    if t > s:
                        torch.mm(x[s:t], w[e], out=out[s:t])
                return out

            providers = [
                Provider("torch._grouped_mm", lambda: torch_mm(x, w, offs), ours=False,
                         note="" if dtype == torch.bfloat16 else
                         "its fast path is bf16-only on sm_90: other dtypes may take the fallback"),
                lazy_provider("grouped_mm", ours, note="timed at default arguments (no host sync); "
                                                       "checked with check_offs=True"),
                Provider("per-expert loop", loop, ours=False,
                         note="torch.mm per expert; expert bounds on the host beforehand (no sync timed)"),
            ]
        used = int((counts > 0).sum())
        # fewest bytes: x read, out written, and only the weights of experts that got rows (the
        # backward also reads dy and writes dx and the used experts' dw)
        elements = rows * k + used * k * n + rows * n
        min_bytes = (3 * elements if training else elements) * (torch.finfo(dtype).bits // 8)
        return CaseData(providers, reference, {"experts_used": used, "max_rows": int(counts.max())},
                        min_bytes=min_bytes)

    label = f"{model.name} {projection} T={tokens} {routing}" + (" fwd+bwd" if training else "")
    baseline = "torch._grouped_mm fwd+bwd" if training else "torch._grouped_mm"
    # FLOPs count the routed rows only; fwd+bwd is three GEMMs of the same size (out, dx, dw)
    shapes = [(rows, n, k)] * (3 if training else 1)
    return Case("moe", f"{model.name} {projection} ({routing}, {moe_pass})", label, tokens, dtype, shapes, baseline,
                setup, {"model": model.name, "experts": model.experts, "top_k": model.top_k, "tokens": tokens,
                        "rows": rows, "K": k, "N": n, "routing": routing, "pass": moe_pass})


# ------------------------------------------------------------------------------ llm


@dataclass(frozen=True)
class LlmLayer:
    """The dense projections of one transformer layer, from the model's published config.json
    (hidden size, MLP intermediate size, attention heads x head_dim, key/value heads)."""

    model: str
    hidden: int
    ffn: int
    q_dim: int   # attention heads x head_dim
    kv_dim: int  # key/value heads x head_dim (one of K and V)
    fused_gate_up: bool = True  # gate and up as one [2 * ffn, hidden] weight (vLLM's merged layer)

    def projections(self) -> dict[str, tuple[int, int]]:
        """name -> (N, K) of ``x @ W^T`` with the nn.Linear weight W of shape [N, K]."""
        return {
            "QKV": (self.q_dim + 2 * self.kv_dim, self.hidden),
            "O": (self.hidden, self.q_dim),
            "gate/up" if self.fused_gate_up else "gate": ((2 if self.fused_gate_up else 1) * self.ffn, self.hidden),
            "down": (self.hidden, self.ffn),
        }


#: config.json values (hidden_size, intermediate_size, num_attention_heads x head_dim,
#: num_key_value_heads x head_dim): Llama-3-8B 4096, 14336, 32x128, 8x128; Llama-3-70B 8192,
#: 28672, 64x128, 8x128; Qwen3-32B 5120, 25600, 64x128, 8x128; Mistral-Small-24B (2501) 5120,
#: 32768, 32x128, 8x128.  DeepSeek-V3's dense layers (its first three) have hidden 7168 and MLP
#: intermediate 18432; their attention is MLA, whose two dense input projections (q_a 7168 ->
#: q_lora_rank 1536, kv_a 7168 -> kv_lora_rank 512 + rope 64) are one [2112, 7168] product here
#: ("QKV"), and o_proj reads 128 heads x v_head_dim 128 = 16384.
LLM_LAYERS = (
    LlmLayer("Llama-3-8B", 4096, 14336, 32 * 128, 8 * 128),
    LlmLayer("Llama-3-70B", 8192, 28672, 64 * 128, 8 * 128, fused_gate_up=False),
    LlmLayer("Qwen3-32B", 5120, 25600, 64 * 128, 8 * 128, fused_gate_up=False),
    LlmLayer("Mistral-Small-24B", 5120, 32768, 32 * 128, 8 * 128, fused_gate_up=False),
)
#: DeepSeek-V3's dense layer, written out (MLA: see above)
DEEPSEEK_V3_DENSE = {"QKV (q_a+kv_a)": (1536 + 512 + 64, 7168), "O": (7168, 128 * 128), "gate": (18432, 7168),
                     "down": (7168, 18432)}


def llm_shapes(size_class: str) -> list[tuple[str, str, int, int, int]]:
    """(model, projection, M, N, K) of the llm suite: every projection at M = 4096 tokens, and
    Llama-3-8B's also at 1024 and 16384 (small and large prefills)."""
    table = [(layer.model, name, n, k) for layer in LLM_LAYERS for name, (n, k) in layer.projections().items()]
    table += [("DeepSeek-V3", name, n, k) for name, (n, k) in DEEPSEEK_V3_DENSE.items()]
    if size_class == "cpu":  # tiny stand-ins (same roles: QKV wider than hidden, down from a wider K)
        return [("tiny", "QKV", 40, 96, 64), ("tiny", "down", 40, 64, 160)]
    if size_class == "quick":
        return [("Llama-3-8B", name, 4096, n, k) for model, name, n, k in table if model == "Llama-3-8B"]
    shapes = [(model, name, 4096, n, k) for model, name, n, k in table]
    shapes += [("Llama-3-8B", name, m, n, k) for m in (1024, 16384) for model, name, n, k in table
               if model == "Llama-3-8B"]
    return shapes


LLM_DTYPES = (torch.float16, torch.bfloat16)


def llm_suite(settings: SuiteSettings) -> list[Case]:
    """LLM projections ``x @ W^T`` (W an nn.Linear weight [N, K], passed as ``w.t()``): cuBLAS
    (torch.matmul) vs matmul_tma, matmul_persistent, matmul_streamk and matmul_ws; the cuBLAS
    kernel of each shape in the ``vendor_kernel`` column (the harness profiles every baseline)."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, LLM_DTYPES):
        for model, projection, M, N, K in llm_shapes(settings.size_class):
            def setup(M=M, N=N, K=K, dtype=dtype, seed=seeds()):
                gen = _generator(seed)
                x, w = _randn((M, K), dtype, gen), _randn((N, K), dtype, gen)
                b = w.t()  # B^T contiguous: what a linear layer hands the GEMM

                def make(module, name):
                    def build():
                        _require_tma(name)
                        f = kernel(module, name)
                        return (lambda: f(x, b)), None
                    return build

                def persistent():
                    f = kernel("persistent", "matmul_persistent")
                    return (lambda: f(x, b)), None

                cublas = lambda: torch.matmul(x, b)  # noqa: E731
                providers = [Provider("cuBLAS", cublas, ours=False),
                             lazy_provider("tma", make("persistent", "matmul_tma")),
                             lazy_provider("persistent", persistent),
                             lazy_provider("stream_k", make("streamk", "matmul_streamk")),
                             _ws_provider(x, b)]
                return CaseData(providers, lambda: [_mm_ref(x, b)])
            cases.append(Case("llm", f"{dtype_name(dtype)} M={M}" if settings.size_class != "cpu" else dtype_name(dtype),
                              f"{model} {projection}", M, dtype, [(M, N, K)], "cuBLAS", setup,
                              {"model": model, "projection": projection, "M": M, "N": N, "K": K}))
    return cases


#: token counts of the llm-linear suite: not powers of two (a prefill chunk, a few requests, one odd
#: batch); every projection of every LLM_LAYERS model and DeepSeek-V3's dense layer at each
LLM_LINEAR_M = {"full": (257, 1000, 3001), "quick": (1000,), "cpu": (37,)}


def llm_linear_shapes(size_class: str) -> list[tuple[str, str, int, int, int, bool]]:
    """(model, projection, M, N, K, b row-major?) of the llm-linear suite: b = W.t() (nn.Linear's
    layout) for every projection at every M, plus Llama-3-8B's at M = 1000 with b row-major."""
    if size_class == "cpu":
        return [("tiny", "down", 37, 48, 160, False), ("tiny", "down", 37, 48, 160, True)]
    table = [(layer.model, name, n, k) for layer in LLM_LAYERS for name, (n, k) in layer.projections().items()]
    table += [("DeepSeek-V3", name, n, k) for name, (n, k) in DEEPSEEK_V3_DENSE.items()]
    shapes = [(model, name, m, n, k, False) for m in LLM_LINEAR_M[size_class] for model, name, n, k in table]
    if size_class == "full":
        shapes += [(model, name, 1000, n, k, True) for model, name, n, k in table if model == "Llama-3-8B"]
    return shapes


def _linear_inputs(M: int, N: int, K: int, dtype, row_major: bool, seed: int):
    """x [M, K] and b [K, N] of a linear layer's product: b = W.t() (nn.Linear's layout) or row-major."""
    gen = _generator(seed)
    x = _randn((M, K), dtype, gen)
    return x, (_randn((K, N), dtype, gen) if row_major else _randn((N, K), dtype, gen).t())


def llm_linear_suite(settings: SuiteSettings) -> list[Case]:
    """``F.linear``'s product at token counts users call (not powers of two): cuBLAS vs every
    dense kernel of ours at default arguments; the target is on the best of ours per shape."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, (torch.bfloat16,)):
        for model, projection, M, N, K, row_major in llm_linear_shapes(settings.size_class):
            def setup(M=M, N=N, K=K, dtype=dtype, row_major=row_major, seed=seeds()):
                x, b = _linear_inputs(M, N, K, dtype, row_major, seed)

                def make(module, name, needs_tma):
                    def build():
                        if needs_tma:
                            _require_tma(name)
                        f = kernel(module, name)
                        return (lambda: f(x, b)), None
                    return build

                providers = [Provider("cuBLAS", lambda: torch.matmul(x, b), ours=False),
                             lazy_provider("grouped", make("matmul", "matmul", False)),
                             lazy_provider("tma", make("persistent", "matmul_tma", True)),
                             lazy_provider("stream_k", make("streamk", "matmul_streamk", True)),
                             lazy_provider("split_k", make("splitk", "matmul_splitk", False)),
                             _ws_provider(x, b), _auto_provider(x, b)]
                return CaseData(providers, lambda: [_mm_ref(x, b)])
            layout = "b row-major" if row_major else "b = W.t()"
            cases.append(Case("llm-linear", f"M={M}, {layout}", f"{model} {projection}", M, dtype, [(M, N, K)],
                              "cuBLAS", setup, {"model": model, "projection": projection, "M": M, "N": N, "K": K,
                                                "layout": layout}))
    return cases


# ------------------------------------------------------------------------------ nn-linear

#: models no other suite holds, from their config.json (hidden, intermediate, heads x head_dim, key/value
#: heads x head_dim): Qwen2.5-72B 8192, 29568, 64x128, 8x128; Gemma-2-27B 4608, 36864, 32x128, 16x128;
#: Phi-4 5120, 17920, 40x128, 10x128 (fused qkv and gate_up); Llama-3.2-3B 3072, 8192, 24x128, 8x128;
#: Llama-3.1-405B 16384, 53248, 128x128, 8x128 (the K-heaviest down); Qwen2.5-7B 3584, 18944, 28x128,
#: 4x128; Gemma-2-9B 3584, 14336, 16x256, 8x256
NN_LINEAR_LAYERS = (
    LlmLayer("Qwen2.5-72B", 8192, 29568, 64 * 128, 8 * 128, fused_gate_up=False),
    LlmLayer("Gemma-2-27B", 4608, 36864, 32 * 128, 16 * 128, fused_gate_up=False),
    LlmLayer("Phi-4", 5120, 17920, 40 * 128, 10 * 128),
    LlmLayer("Llama-3.2-3B", 3072, 8192, 24 * 128, 8 * 128, fused_gate_up=False),
)
#: three more, for issue 51's 48 projections; after DeepSeek-V3's in the table, so that the rows
#: before them keep their token counts (the committed run of 36 projections)
NN_LINEAR_LAYERS_ADDED = (
    LlmLayer("Llama-3.1-405B", 16384, 53248, 128 * 128, 8 * 128, fused_gate_up=False),
    LlmLayer("Qwen2.5-7B", 3584, 18944, 28 * 128, 4 * 128, fused_gate_up=False),
    LlmLayer("Gemma-2-9B", 3584, 14336, 16 * 256, 8 * 256, fused_gate_up=False),
)
#: odd token counts from decode to a long prefill; each projection meets two of them (:func:`nn_linear_shapes`)
NN_LINEAR_M = (1, 7, 33, 127, 257, 777, 2049, 6001, 8191)


def nn_linear_shapes(size_class: str) -> list[tuple[str, str, int, int, int, bool]]:
    """(model, projection, M, N, K, b row-major?) of the nn-linear suite (issue 51, item 4): every
    projection of 12 models (the llm suites' 5 and 7 more), each at two token counts of NN_LINEAR_M
    drawn by a fixed rule, with b = W.t() (nn.Linear) on one and b row-major on the other."""
    if size_class == "cpu":
        return [("tiny", "down", 5, 48, 160, False), ("tiny", "QKV", 37, 96, 64, True)]
    table = [(layer.model, name, n, k) for layer in LLM_LAYERS + NN_LINEAR_LAYERS
             for name, (n, k) in layer.projections().items()]
    table += [("DeepSeek-V3", name, n, k) for name, (n, k) in DEEPSEEK_V3_DENSE.items()]
    table += [(layer.model, name, n, k) for layer in NN_LINEAR_LAYERS_ADDED
              for name, (n, k) in layer.projections().items()]
    if size_class == "quick":
        table = [row for row in table if row[0] in ("Gemma-2-27B", "Phi-4")]
    shapes = []
    for i, (model, name, n, k) in enumerate(table):
        # projection i meets token counts i and i + 4 (mod 9): every count is met by 10 or 11 projections,
        # a small and a large one each; the layout alternates, so every model is timed in both
        for j, m in enumerate((NN_LINEAR_M[i % 9], NN_LINEAR_M[(i + 4) % 9])):
            shapes.append((model, name, m, n, k, (i + j) % 2 == 1))
    return shapes


def nn_linear_suite(settings: SuiteSettings) -> list[Case]:
    """What a user calling ``matmul_auto`` on a linear layer gets against cuBLAS, on models and token
    counts the dispatch's rules were not tuned on.  M <= 64 is timed from CUDA graphs (as the decode
    suite: launch cost would otherwise be the measurement), the rest with do_bench, L2 flushed."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, (torch.bfloat16,)):
        for model, projection, M, N, K, row_major in nn_linear_shapes(settings.size_class):
            def setup(M=M, N=N, K=K, dtype=dtype, row_major=row_major, seed=seeds()):
                x, b = _linear_inputs(M, N, K, dtype, row_major, seed)
                providers = [Provider("cuBLAS", lambda: torch.matmul(x, b), ours=False), _auto_provider(x, b)]
                return CaseData(providers, lambda: [_mm_ref(x, b)])
            layout = "b row-major" if row_major else "b = W.t()"
            cases.append(Case("nn-linear", model, f"{projection} M={M}, {layout}", M, dtype, [(M, N, K)], "cuBLAS",
                              setup, {"model": model, "projection": projection, "M": M, "N": N, "K": K,
                                      "layout": layout}, cuda_graph=M <= 64))
    return cases


# ------------------------------------------------------------------------------ fp8

#: square sizes and LLM projections (model, projection, M, N, K; b = W.t()) of the fp8 suite
FP8_SQUARE = {"full": (1024, 2048, 4096, 8192), "quick": (4096,), "cpu": (128,)}
FP8_LLM_M = {"full": (4096, 1000), "quick": (), "cpu": ()}
FP8_SCALINGS = ("tensor", "row", "block")


def fp8_shapes(size_class: str) -> list[tuple[str, int, int, int]]:
    """(label, M, N, K): squares, then Llama-3-8B's, Llama-3-70B's and DeepSeek-V3's dense
    projections at 4096 tokens and at 1000 (not a power of two)."""
    shapes = [(f"{n}^3", n, n, n) for n in FP8_SQUARE[size_class]]
    table = [(layer.model, name, n, k) for layer in LLM_LAYERS[:2] for name, (n, k) in layer.projections().items()]
    table += [("DeepSeek-V3", name, n, k) for name, (n, k) in DEEPSEEK_V3_DENSE.items()]
    for m in FP8_LLM_M[size_class]:
        shapes += [(f"{model} {name} M={m}", m, n, k) for model, name, n, k in table]
    return shapes


def _torch_block_scales(sa: torch.Tensor, sb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Our block scales in the layouts torch's 1x128 / 128x128 recipe asks for: scale_a M-major,
    scale_b [round_up(K/128, 4), N/128] K-major."""
    kb, nb = sb.shape
    padded = -(-kb // 4) * 4
    tb = torch.zeros(nb, padded, device=sb.device, dtype=sb.dtype).t()
    tb[:kb] = sb
    return sa.t().contiguous().t(), tb


def _vendor_block_mm(a, b, sa, sb):
    """torch's block-scaled GEMM (``torch.nn.functional.scaled_mm``, 1x128 x 128x128), or Skip
    where this torch or GPU has none."""
    F = torch.nn.functional
    if not hasattr(F, "scaled_mm") or not hasattr(F, "ScalingType"):
        raise Skip("this torch has no torch.nn.functional.scaled_mm (block-wise scaling)")
    ta, tb = _torch_block_scales(sa, sb)
    call = lambda: F.scaled_mm(a, b, ta, F.ScalingType.BlockWise1x128, tb,  # noqa: E731
                               F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
    try:
        call()
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        raise Skip(f"torch block-wise scaled_mm unavailable here: {str(exc).splitlines()[0][:200]}") from None
    return call, None


def fp8_suite(settings: SuiteSettings) -> list[Case]:
    """FP8 e4m3 GEMMs ``(a * sa) @ (b * sb)``, b column-major: our ``scaled_mm`` vs
    ``torch._scaled_mm`` (per-tensor and row-wise scales, with and without fast accumulation)
    and torch's block-wise scaled_mm (1x128 / 128x128), where it exists."""
    seeds = _Seeds(settings.seed)
    cases = []
    for scaling in FP8_SCALINGS:
        for label, M, N, K in fp8_shapes(settings.size_class):
            if scaling == "block" and K % 128:
                continue

            def setup(M=M, N=N, K=K, scaling=scaling, seed=seeds()):
                from ..kernels import fp8

                gen = _generator(seed)
                x, w = _randn((M, K), torch.bfloat16, gen), _randn((N, K), torch.bfloat16, gen)
                x[:, :: max(1, K // 8)] *= 20  # a few outlier channels, as in real activations
                ga, gb = fp8.granularities(scaling)
                a, sa = fp8.quantize_fp8(x, ga)
                b, sb = fp8.quantize_fp8(w.t(), gb)
                del x, w

                def ours(**kw):
                    return lambda: ((lambda: fp8.scaled_mm(a, b, sa, sb, **kw)), None)

                if scaling == "block":
                    providers = [lazy_provider("torch block-wise", lambda: _vendor_block_mm(a, b, sa, sb), ours=False,
                                               note="torch.nn.functional.scaled_mm, BlockWise1x128 x BlockWise128x128"),
                                 lazy_provider("scaled_mm", ours(), note="scales applied in the K loop")]
                    baseline = "torch block-wise"
                else:
                    vendor_sb = sb if scaling == "tensor" else sb.reshape(1, N)
                    vendor = lambda fast: (lambda: torch._scaled_mm(  # noqa: E731
                        a, b, sa, vendor_sb, out_dtype=torch.bfloat16, use_fast_accum=fast))
                    providers = [Provider("torch._scaled_mm", vendor(False), ours=False, note="use_fast_accum=False"),
                                 Provider("torch._scaled_mm fast", vendor(True), ours=False, note="use_fast_accum=True"),
                                 lazy_provider("scaled_mm", ours(), note=f"promotes every {fp8.PROMOTE_EVERY}"),
                                 lazy_provider("scaled_mm fast", ours(use_fast_accum=True), note="never promotes")]
                    baseline = "torch._scaled_mm"
                assert baseline == providers[0].name
                return CaseData(providers, lambda: [fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64).float()])
            base = "torch block-wise" if scaling == "block" else "torch._scaled_mm"
            cases.append(Case("fp8", scaling, label, M, torch.float8_e4m3fn, [(M, N, K)], base, setup,
                              {"scaling": scaling, "M": M, "N": N, "K": K}))
    return cases


FP8_MOE_TOKENS = {"full": (512, 4096, 32768), "quick": (4096,), "cpu": (37,)}


def fp8_moe_suite(settings: SuiteSettings) -> list[Case]:
    """MoE expert GEMMs in fp8 with row-wise scales: ``scaled_grouped_mm`` vs
    ``torch._scaled_grouped_mm``, forward, the moe suite's models, routings and token counts."""
    seeds = _Seeds(settings.seed)
    size = settings.size_class
    cases = []
    weights_cache: dict = {}
    for model in MOE_MODELS[size]:
        for projection in MOE_PROJECTIONS[size]:
            k, n = (model.hidden, model.ffn) if projection == "up" else (model.ffn, model.hidden)
            for routing in MOE_ROUTINGS:
                for tokens in FP8_MOE_TOKENS[size]:
                    cases.append(_fp8_moe_case(model, projection, routing, tokens, k, n, seeds(), weights_cache))
    return cases


def _fp8_moe_case(model, projection, routing, tokens, k, n, seed, weights_cache) -> Case:
    rows = tokens * model.top_k

    def setup():
        from ..kernels import fp8

        key = (model, projection)
        if key not in weights_cache:
            weights_cache.clear()
            w = _moe_weights(model, projection, torch.bfloat16, _generator(seed + 7))
            weights_cache[key] = fp8.quantize_experts(w)
        w, sw = weights_cache[key]
        counts = _route(model, tokens, routing, seed)
        offs = torch.cumsum(counts, 0).to(device=runtime.DEVICE, dtype=torch.int32)
        x, sx = fp8.quantize_fp8(_randn((rows, k), torch.bfloat16, _generator(seed)), "row")
        sx = sx.reshape(rows)
        def vendor():
            if not runtime.on_gpu():
                raise Skip("torch._scaled_grouped_mm runs on CUDA GPUs only")
            return (lambda: torch._scaled_grouped_mm(x, w, sx, sw, offs=offs, out_dtype=torch.bfloat16)), None

        providers = [
            lazy_provider("torch._scaled_grouped_mm", vendor, ours=False),
            lazy_provider("scaled_grouped_mm", lambda: ((lambda: fp8.scaled_grouped_mm(x, w, sx, sw, offs)),
                                                        (lambda: fp8.scaled_grouped_mm(x, w, sx, sw, offs,
                                                                                       check_offs=True))),
                          note="default arguments (no host sync); checked with check_offs=True"),
        ]
        used = int((counts > 0).sum())
        return CaseData(providers, lambda: [fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64)
                                            .float()],
                        {"experts_used": used, "max_rows": int(counts.max())},
                        min_bytes=rows * k + used * k * n + 2 * rows * n)

    label = f"{model.name} {projection} T={tokens} {routing}"
    return Case("fp8-moe", f"{model.name} {projection} ({routing})", label, tokens, torch.float8_e4m3fn,
                [(rows, n, k)], "torch._scaled_grouped_mm", setup,
                {"model": model.name, "experts": model.experts, "top_k": model.top_k, "tokens": tokens,
                 "rows": rows, "K": k, "N": n, "routing": routing})


# ------------------------------------------------------------------------------ host

#: (label, M, N, K, dtype, b as W.t()): problems whose GPU time is below a call's host time, so
#: the enqueue time per call is the host's; a square one and an nn.Linear decode step
HOST_SHAPES = {
    "full": (("256^3", 256, 256, 256, torch.float16, False),
             ("decode M=16 4096x4096 W.t()", 16, 4096, 4096, torch.bfloat16, True)),
    "quick": (("256^3", 256, 256, 256, torch.float16, False),),
    "cpu": (("40x48x64", 40, 48, 64, torch.float16, False),),
}
#: MoE problem of the host cases: (experts, rows per expert, K, N), bf16 (``bench.moe_host``'s)
HOST_MOE = {"full": (8, 64, 256, 256), "quick": (8, 64, 256, 256), "cpu": (4, 5, 32, 48)}


def _checked_every_call(fn):
    """``fn`` with kept launches switched off (``kernels.launches.set_keeping``): every call checks and binds."""
    from ..kernels import launches

    def call():
        before = launches.set_keeping(False)
        try:
            return fn()
        finally:
            launches.set_keeping(before)
    return call


def _host_providers(name, make, vendor_name, vendor_make):
    """The vendor's call, ours, and ours checked every call (the launch path before kept launches)."""
    def ours():
        fn, check = make()
        return fn, check

    def unkept():
        fn, check = make()
        return _checked_every_call(fn), None

    return [lazy_provider(vendor_name, vendor_make, ours=False),
            lazy_provider(name, ours),
            lazy_provider(f"{name}, checked every call", unkept,
                          note="launches.set_keeping(False) around the call: the path before kept launches")]


def _rows_of_one_tuning(a, b) -> list[int]:
    """The Ms up to ``a``'s whose calls share ``a``'s tuning: the same launcher for ``matmul_auto``
    and the same bucket of every tuning key (``configs.row_bucket`` with the smallest granule, 16:
    a bucket of a larger power-of-two granule holds it whole)."""
    from ..kernels import configs, dispatch

    M = a.shape[0]
    launcher = dispatch.pick_launcher(a, b)[0]
    return [m for m in range(1, M + 1) if configs.row_bucket(m, 16) == configs.row_bucket(M, 16)
            and dispatch.pick_launcher(a[:m], b)[0] == launcher]


def _first_calls(call, a, b, rows):
    """``call`` on row views ``a[:m]`` for m cycling over ``rows``, every kept launch forgotten
    before each: each call is a first call of its M (its checks, its binding) in a tuned bucket.
    Before the timing, a call with the full ``a`` tunes the bucket (it is also the check call), and
    one at each M compiles whatever specialises on M (GPU only: the interpreter compiles nothing).
    Skip when ``rows`` holds one M: no other M of the bucket to cycle over."""
    from ..kernels import launches

    if len(rows) < 2:
        raise Skip(f"M = {rows[-1]} is its bucket's first: no other M of the bucket up to it")
    views = [a[:m] for m in rows]
    for view in [a, *views] if runtime.on_gpu() else ():  # the tuning, then every M's compile
        call(view, b)
    cycle = itertools.cycle(views)

    def fn():
        launches.forget_kept()
        return call(next(cycle), b)

    return fn, (lambda: call(a, b))


def host_suite(settings: SuiteSettings) -> list[Case]:
    """Host time per call (enqueue µs, ``core.host_ms``) of every public launcher against torch's
    equivalent, on problems the GPU finishes faster than the host can launch them."""
    seeds = _Seeds(settings.seed)
    size = settings.size_class
    cases = []
    for label, M, N, K, dtype, linear in HOST_SHAPES[size]:
        def setup(M=M, N=N, K=K, dtype=dtype, linear=linear, seed=seeds()):
            gen = _generator(seed)
            a = _randn((M, K), dtype, gen)
            b = _randn((N, K), dtype, gen).t() if linear else _randn((K, N), dtype, gen)
            vendor = lambda: ((lambda: torch.matmul(a, b)), None)  # noqa: E731
            providers = []
            for name, module, needs_tma in (("matmul", "matmul", False), ("matmul_persistent", "persistent", False),
                                            ("matmul_tma", "persistent", True), ("matmul_streamk", "streamk", True),
                                            ("matmul_splitk", "splitk", False)):
                def make(name=name, module=module, needs_tma=needs_tma):
                    if needs_tma:
                        _require_tma(name)
                    f = kernel(module, name)
                    return (lambda: f(a, b)), None
                providers += _host_providers(name, make, "torch.matmul", vendor)[0 if not providers else 1:]

            def ws():
                module = importlib.import_module("gemm_kernels.kernels.matmul_ws")
                try:
                    module._require_hopper()
                except RuntimeError as exc:
                    raise Skip(str(exc).split(";")[0]) from None
                return (lambda: module.matmul_ws(a, b)), None
            providers.append(lazy_provider("matmul_ws", ws, note="per-shape plans (WS_NOTES 6)"))
            auto = kernel("dispatch", "matmul_auto")
            providers += _host_providers("matmul_auto", lambda: ((lambda: auto(a, b)), None), "torch.matmul",
                                         vendor)[1:]
            rows = _rows_of_one_tuning(a, b)
            providers.append(lazy_provider(
                "matmul_auto, a new M each call", lambda: _first_calls(auto, a, b, rows),
                note=f"M cycling over {rows[0]}..{rows[-1]} (its bucket's Ms up to the case's, one launcher), every kept launch "
                     "forgotten before each call (launches.forget_kept): the first call of a new M in a known bucket"))
            return CaseData(providers, lambda: [_mm_ref(a, b)])
        cases.append(Case("host", "single GEMM", label, M, dtype, [(M, N, K)], "torch.matmul", setup,
                          {"M": M, "N": N, "K": K, "b": "W.t()" if linear else "row-major"}, host=True))

    cases.append(_host_fp8_case(size, seeds()))
    experts, per_expert, K, N = HOST_MOE[size]
    for backward in (False, True):
        cases.append(_host_moe_case(experts, per_expert, K, N, backward, seeds()))
    return cases


def _host_fp8_case(size, seed) -> Case:
    label, M, N, K, _, _ = HOST_SHAPES[size][0]

    def setup():
        from ..kernels import fp8

        gen = _generator(seed)
        a, sa = fp8.quantize_fp8(_randn((M, K), torch.bfloat16, gen), "row")
        w, sw = fp8.quantize_fp8(_randn((N, K), torch.bfloat16, gen), "row")
        b, sb = w.t(), sw.t()

        def vendor():
            if not runtime.supports_fp8() or not runtime.on_gpu():
                raise Skip("torch._scaled_mm needs an sm_89+ GPU")
            return (lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)), None

        def ours():
            if not runtime.supports_fp8():
                raise Skip("scaled_mm needs fp8 (sm_89+)")
            return (lambda: fp8.scaled_mm(a, b, sa, sb)), None

        providers = _host_providers("scaled_mm", ours, "torch._scaled_mm", vendor)
        return CaseData(providers, lambda: [fp8.scaled_mm_ref(a, b, sa, sb, out_dtype=torch.float64).float()])
    return Case("host", "fp8", f"scaled_mm {label} row-wise", M, torch.float8_e4m3fn, [(M, N, K)], "torch._scaled_mm",
                setup, {"M": M, "N": N, "K": K}, host=True)


def _host_moe_case(experts, per_expert, K, N, backward, seed) -> Case:
    rows = experts * per_expert

    def setup():
        from ..kernels import moe

        gen = _generator(seed)
        x = _randn((rows, K), torch.bfloat16, gen)
        w = _randn((experts, N, K), torch.bfloat16, gen).transpose(1, 2)  # nn.Linear weights, [E, K, N] views
        offs = torch.arange(1, experts + 1, device=runtime.DEVICE, dtype=torch.int32) * per_expert
        dy = _randn((rows, N), torch.bfloat16, gen)

        def vendor_mm():
            if not runtime.on_gpu() or not hasattr(torch, "_grouped_mm"):
                raise Skip("torch._grouped_mm needs a CUDA GPU and torch >= 2.8")
            return lambda x, w, offs: torch._grouped_mm(x, w, offs=offs)

        if backward:
            def vendor():
                return _moe_fwd_bwd(vendor_mm(), x, w, offs, dy), None

            def ours():
                return _moe_fwd_bwd(moe.grouped_mm, x, w, offs, dy), None

            def reference():
                xd, wd, dyd = x.double(), w.double(), dy.double()
                starts = range(0, rows, per_expert)
                out = torch.cat([xd[s:s + per_expert] @ wd[e] for e, s in enumerate(starts)])
                dx = torch.cat([dyd[s:s + per_expert] @ wd[e].T for e, s in enumerate(starts)])
                dws = [xd[s:s + per_expert].T @ dyd[s:s + per_expert] for s in starts]
                return [t.float() for t in (out, dx, *dws)]
        else:
            def vendor():
                mm = vendor_mm()
                return (lambda: mm(x, w, offs)), None

            def ours():
                return (lambda: moe.grouped_mm(x, w, offs)), None

            def reference():
                return [moe.grouped_mm_ref(x, w, offs, out_dtype=torch.float64).float()]
        providers = [lazy_provider("torch._grouped_mm", vendor, ours=False), lazy_provider("grouped_mm", ours)]
        return CaseData(providers, reference)
    what = "forward and backward" if backward else "forward"
    return Case("host", "MoE", f"grouped_mm {what} {experts}x{per_expert}x{K}x{N}", rows, torch.bfloat16,
                [(rows, N, K)] * (3 if backward else 1), "torch._grouped_mm", setup,
                {"experts": experts, "rows": rows, "K": K, "N": N}, host=True)


# ------------------------------------------------------------------------------ decode

#: (N, K) of the decode suite's weights (b = W.t(), nn.Linear's layout), 2048^2 to 16384^2 and
#: Llama-3-8B's MLP shapes; cpu: one ragged weight in the interpreter
DECODE_WEIGHTS = {
    "full": ((2048, 2048), (4096, 4096), (8192, 8192), (16384, 16384), (4096, 14336), (14336, 4096)),
    "quick": ((8192, 8192),),
    "cpu": ((48, 160),),
}
#: rows per call: one token, then a few requests batched
DECODE_M = {"full": (1, 8, 16, 32, 64), "quick": (1, 16), "cpu": (1, 5)}


def decode_suite(settings: SuiteSettings) -> list[Case]:
    """Decode (issue 51): M <= 64 rows against a weight, bound by reading it.  cuBLAS,
    ``matmul_decode`` and ``matmul_auto`` (which picks it), timed from CUDA graphs: one call's
    inputs replayed, so weights up to L2's size (2048^2, 4096^2 in bf16) are read from L2 after
    the first call (``tests/gpu_decode.py`` cycles through copies instead: PERF_NOTES 44)."""
    seeds = _Seeds(settings.seed)
    cases = []
    for dtype in _dtypes(settings, (torch.bfloat16,)):
        for N, K in DECODE_WEIGHTS[settings.size_class]:
            for M in DECODE_M[settings.size_class]:
                def setup(M=M, N=N, K=K, dtype=dtype, seed=seeds()):
                    gen = _generator(seed)
                    x, b = _randn((M, K), dtype, gen), _randn((N, K), dtype, gen).t()

                    def build():
                        f = kernel("decode", "matmul_decode")
                        return (lambda: f(x, b)), None

                    providers = [Provider("cuBLAS", lambda: torch.matmul(x, b), ours=False),
                                 lazy_provider("decode", build), _auto_provider(x, b)]
                    return CaseData(providers, lambda: [_mm_ref(x, b)])
                cases.append(Case("decode", f"{N}x{K}", f"M={M} {N}x{K}", M, dtype, [(M, N, K)], "cuBLAS", setup,
                                  {"M": M, "N": N, "K": K, "layout": "b = W.t()"}, cuda_graph=True))
    return cases


#: the suites by name: results.SUITE_NAMES, which reads committed results without this module (a test checks they agree)
SUITES = {
    "square": square_suite,
    "order": order_suite,
    "fusion": fusion_suite,
    "stream-k": streamk_suite,
    "seed-grouped": seed_grouped_suite,
    "moe": moe_suite,
    "llm": llm_suite,
    "llm-linear": llm_linear_suite,
    "fp8": fp8_suite,
    "fp8-moe": fp8_moe_suite,
    "host": host_suite,
    "decode": decode_suite,
    "nn-linear": nn_linear_suite,
}
