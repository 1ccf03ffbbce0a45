"""See what a kernel becomes on a real GPU, from a machine without one.

``triton.compile`` needs no driver: given a target such as ``sm_90`` it runs the whole
pipeline (Triton IR -> TritonGPU IR -> LLVM IR -> PTX -> cubin with the ptxas that ships with
Triton) on the CPU.  ``compile_for`` does that for one of our kernels and returns a
:class:`CompileView`: the stages' text, shared memory, registers, and a count of the
instructions that tell Hopper code from Ampere code (``highlights``).

How the kernel is specialised.  ``args`` maps kernel parameters to what a launch would pass
(tensors, ints, constexpr values).  Types and the ``tt.divisibility=16`` hints are derived
exactly as Triton's launcher derives them (pointers 16-byte aligned, ints divisible by 16,
ints equal to 1 folded to constants), so the code is the code a launch with those arguments
gets.  A tensor may be a small CPU tensor: only its dtype and its address modulo 16 count.

Interpreter mode.  When ``TRITON_INTERPRET=1`` (any CPU machine) ``@triton.jit`` returns
interpreter objects, and so do Triton's own library functions (``tl.cdiv``...).  For
compiling, :func:`as_jit_function` rebuilds a real ``JITFunction`` from the Python function
(``kernel.fn``), with every interpreter object it reaches (our helpers, ``tl.*``) rebuilt the
same way, and the interpreter knob is switched off for the duration of the compile only.

Registry protocol (for every kernel module of the package)
-----------------------------------------------------------
A kernel module listed in :data:`KERNEL_MODULES` defines::

    def compile_examples() -> list[KernelExample]: ...

each example being one representative launch: a name, the ``@triton.jit`` kernel (not the
autotuned wrapper; either works), ``args`` (every parameter a launch passes, built with the
launcher's own argument builder where it has one, on small CPU tensors whose sizes are
multiples of 16 like real large problems), a GPU ``triton.Config`` (blocks, num_warps,
num_stages), the capabilities it must compile for (``targets``: ``(90, 80)``, or ``(90,)``
for TMA kernels), and ``expect``: capability -> highlight names that must appear in its PTX.
``compile_all_kernels`` and ``tests/test_compile_view.py`` pick them up; a module that does
not exist yet is skipped.  Import ``KernelExample`` inside ``compile_examples`` (this module
imports the kernel modules lazily, never at import time).
"""

from __future__ import annotations

import contextlib
import html
import importlib
import re
import subprocess
import tempfile
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
import triton

from . import runtime as _runtime  # noqa: F401  (decides interpreter vs GPU before Triton kernels exist)

#: modules searched for ``compile_examples()``, in teaching order
KERNEL_MODULES = ("gemm_kernels.matmul", "gemm_kernels.persistent", "gemm_kernels.streamk", "gemm_kernels.grouped",
                  "gemm_kernels.moe")

#: PTX instructions worth pointing at: name -> (regex, what it means)
HIGHLIGHTS = {
    "wgmma": (r"\bwgmma\.mma_async", "Hopper warpgroup MMA: 4 warps drive the tensor cores asynchronously, "
                                     "operands read from shared memory"),
    "cp.async.bulk.tensor": (r"\bcp\.async\.bulk\.tensor", "TMA: one thread asks the copy engine for a whole "
                                                           "tile, described by a tensor descriptor"),
    "mbarrier": (r"\bmbarrier\.", "shared-memory barriers that say when an asynchronous copy (TMA) has landed"),
    "tensormap": (r"\btensormap\.", "a tensor descriptor built or patched on the device"),
    "ldmatrix": (r"\bldmatrix\.", "Ampere-style: warps load MMA fragments from shared memory into registers"),
    "mma.sync": (r"\bmma\.sync", "Ampere-style warp-level MMA (synchronous, operands in registers)"),
    "cp.async": (r"\bcp\.async\.c[ag]\b", "Ampere-style asynchronous copies (per thread, 4-16 bytes each)"),
    "atom": (r"\batom\.", "an atomic read-modify-write in global memory (Stream-K's flags between programs)"),
}
STAGES = ("ttir", "ttgir", "llir", "ptx")


def parse_target(target) -> int:
    """"sm_90", "sm_90a", "90", 90 or a GPUTarget -> compute capability as an int (90)."""
    if hasattr(target, "arch"):
        return int(target.arch)
    if isinstance(target, int):
        return target
    match = re.fullmatch(r"(?:sm_?)?(\d+)a?", str(target).strip().lower())
    if not match:
        raise ValueError(f"target must look like 'sm_90' or 'sm_80' (a CUDA compute capability), got {target!r}")
    return int(match.group(1))


# ----------------------------------------------------------------------------- interpreter -> JITFunction
class _JitRebuilder:
    """Turns interpreter objects back into compilable ``JITFunction``s (see the module docstring)."""

    def __init__(self):
        self._memo: dict[int, Any] = {}

    def convert(self, value):
        from triton.runtime.interpreter import InterpretedFunction

        if isinstance(value, InterpretedFunction):
            return self.function(value)
        if isinstance(value, types.ModuleType) and value.__name__.startswith("triton.language"):
            return self.module(value)
        return value

    def module(self, mod):
        # A real module object (Triton's dependency scanner skips exactly ``ModuleType``) whose
        # attributes are converted on first access (PEP 562 module __getattr__).
        key = id(mod)
        if key not in self._memo:
            proxy = types.ModuleType(mod.__name__)

            def __getattr__(name, proxy=proxy):
                value = self.convert(getattr(mod, name))
                setattr(proxy, name, value)
                return value

            proxy.__getattr__ = __getattr__
            self._memo[key] = proxy
        return self._memo[key]

    def function(self, interpreted):
        from triton.runtime.jit import JITFunction

        fn = interpreted.fn
        if id(fn) in self._memo:
            return self._memo[id(fn)]
        scope = dict(fn.__globals__)
        clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        clone.__qualname__, clone.__doc__, clone.__module__ = fn.__qualname__, fn.__doc__, fn.__module__
        clone.__annotations__, clone.__kwdefaults__ = dict(fn.__annotations__), fn.__kwdefaults__  # tl.constexpr marks
        jit_fn = JITFunction(clone, **interpreted.kwargs)
        self._memo[id(fn)] = jit_fn  # before recursing: helpers may call each other
        for name in fn.__code__.co_names:  # the globals (and attribute names) the body mentions
            if name in scope:
                scope[name] = self.convert(scope[name])
        return jit_fn


_REBUILDER = _JitRebuilder()


def as_jit_function(kernel):
    """The compilable ``JITFunction`` behind ``kernel`` (a jit function, an autotuned or
    heuristics wrapper, or an interpreter object)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    obj = kernel
    while not isinstance(obj, (JITFunction, InterpretedFunction)):
        if not hasattr(obj, "fn"):
            raise TypeError(f"expected a @triton.jit kernel (or an autotuned one), got {type(kernel).__name__}")
        obj = obj.fn
    return obj if isinstance(obj, JITFunction) else _REBUILDER.convert(obj)


def undo_interpreter_leftovers() -> int:
    """Put back the ``triton.language`` builtins an interpreted launch left patched; returns how many.

    While a kernel runs, Triton's interpreter replaces the builtins of ``triton.language`` with
    wrappers that force its own semantics, and restores them afterwards.  But a kernel that
    calls one of Triton's library ``@jit`` functions (``tl.cdiv``, ``tl.sum``...) leaves those of
    ``triton.language.core`` replaced (Triton 3.x), and a compile after that runs the
    interpreter's semantics inside the code generator and fails ("at ...: tl.cdiv(...)").  Each
    leftover wrapper keeps the original as its ``member`` keyword default, so it can be undone;
    the interpreter patches again on its next launch."""
    import triton.language as tl

    restored = 0
    for owner in (tl, tl.core, tl.math, tl.core.tensor, tl.core.tensor_descriptor_base):
        for name, value in list(vars(owner).items()):
            original = (getattr(value, "__kwdefaults__", None) or {}).get("member")
            if getattr(value, "__module__", None) == "triton.runtime.interpreter" and original is not None:
                setattr(owner, name, original)
                restored += 1
    return restored


@contextlib.contextmanager
def _compiling():
    """Interpreter off for the duration of a compile (and its noisy default-change warning muted)."""
    import triton.compiler.code_generator  # noqa: F401  (imports Gluon while the knob still says "interpret")

    undo_interpreter_leftovers()
    knobs = triton.knobs.runtime
    saved = knobs.interpret
    knobs.interpret = False
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
            yield
    finally:
        knobs.interpret = saved


# ----------------------------------------------------------------------------- specialisation
def _specialize(value, specialize=True, align=True):
    """(type, attribute) as Triton's launcher computes them for one runtime argument."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend

        return native_specialize_impl(BaseBackend, value, False, specialize, align)
    except ImportError:  # a Triton without the native helper: the same rules, written out
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
        raise TypeError(f"cannot specialise a {type(value).__name__}")


def build_source(kernel, args: Mapping[str, Any], constexprs: Mapping[str, Any] | None = None):
    """``triton.compiler.ASTSource`` for ``kernel`` launched with ``args`` (see module docstring).

    ``args`` holds runtime values (or type strings such as ``"*fp16"`` / ``"i32"``, which get no
    divisibility hint); constexpr parameters may be in ``args`` or ``constexprs``."""
    from triton.backends.nvidia.compiler import CUDABackend

    jit_fn = as_jit_function(kernel)
    given = {**args, **(constexprs or {})}
    params = jit_fn.params
    missing = [p.name for p in params if p.name not in given and not p.has_default]
    if missing:
        raise ValueError(f"{jit_fn.__name__} needs values for {missing}")
    unknown = sorted(set(given) - {p.name for p in params})
    if unknown:
        raise ValueError(f"{jit_fn.__name__} has no parameters named {unknown}")
    signature, consts, attrs = {}, {}, {}
    for i, p in enumerate(params):
        value = given[p.name] if p.name in given else p.default
        if p.is_constexpr:
            signature[p.name], consts[p.name] = "constexpr", value
            continue
        if isinstance(value, str):
            signature[p.name] = value
            continue
        ty, attr = _specialize(value, not p.do_not_specialize, not p.do_not_specialize_on_alignment)
        signature[p.name] = ty
        if ty == "constexpr":
            consts[p.name] = attr
        elif attr:
            attrs[(i,)] = CUDABackend.parse_attr(attr)
    return triton.compiler.ASTSource(fn=jit_fn, signature=signature, constexprs=consts, attrs=attrs)


# ----------------------------------------------------------------------------- the view
def _resource_usage(cubin: bytes) -> dict:
    """Registers, stack and local (spill) bytes from ``cuobjdump -res-usage`` (Triton ships it)."""
    try:
        tool = triton.knobs.nvidia.cuobjdump.path
    except Exception:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out))
    return {k.lower(): int(v) for k, v in found.items()}


@dataclass
class CompileView:
    """One kernel compiled for one GPU target: stages, resources, highlights."""

    name: str
    target: str
    asm: dict = field(repr=False)
    shared: int  # bytes of shared memory per program (Triton's metadata)
    num_warps: int
    num_stages: int
    num_regs: int | None  # registers per thread (ptxas, via cuobjdump); None if the tool is missing
    spill_bytes: int | None  # local memory per thread: > 0 means registers spilled
    global_scratch: int  # bytes of global scratch per program (tensor descriptors built on device)
    metadata: Any = field(repr=False)

    @property
    def ttir(self) -> str:
        return self.asm["ttir"]

    @property
    def ttgir(self) -> str:
        return self.asm["ttgir"]

    @property
    def llir(self) -> str:
        return self.asm["llir"]

    @property
    def ptx(self) -> str:
        return self.asm["ptx"]

    @property
    def cubin(self) -> bytes:
        return self.asm["cubin"]

    def highlights(self) -> dict[str, int]:
        """How many PTX instructions of each kind in :data:`HIGHLIGHTS` the kernel has."""
        return {name: len(re.findall(pattern, self.ptx)) for name, (pattern, _) in HIGHLIGHTS.items()}

    def excerpt(self, name: str, stage: str = "ptx", context: int = 2, max_hits: int = 2) -> str:
        """Lines of ``stage`` around the first ``max_hits`` matches of highlight ``name`` (or a regex)."""
        pattern = HIGHLIGHTS[name][0] if name in HIGHLIGHTS else name
        lines = getattr(self, stage).splitlines()
        hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        chunks = []
        for i in hits[:max_hits]:
            lo, hi = max(0, i - context), min(len(lines), i + context + 1)
            chunks.append("\n".join(f"{j + 1:6d}{'>' if j == i else ' '} {lines[j]}" for j in range(lo, hi)))
        more = f"\n   ... {len(hits) - max_hits} more" if len(hits) > max_hits else ""
        return "\n   ...\n".join(chunks) + more

    def summary(self) -> str:
        regs = "unknown (cuobjdump missing)" if self.num_regs is None else f"{self.num_regs} per thread"
        spills = "" if not self.spill_bytes else f", {self.spill_bytes} bytes spilled to local memory"
        lines = [
            f"{self.name} for {self.target}: {self.num_warps} warps, {self.num_stages} stages",
            f"  shared memory {self.shared} bytes ({self.shared / 1024:.1f} KiB), registers {regs}{spills}"
            + (f", global scratch {self.global_scratch} bytes/program" if self.global_scratch else ""),
            "  " + ", ".join(f"{k}: {v}" for k, v in self.highlights().items()),
        ]
        return "\n".join(lines)

    def __str__(self):
        return self.summary()

    def _repr_html_(self):
        rows = "".join(
            f"<tr><td><code>{html.escape(k)}</code></td><td>{v}</td><td>{html.escape(HIGHLIGHTS[k][1])}</td></tr>"
            for k, v in self.highlights().items())
        excerpts = "".join(
            f"<details><summary><code>{html.escape(k)}</code> in PTX</summary>"
            f"<pre>{html.escape(self.excerpt(k))}</pre></details>"
            for k, v in self.highlights().items() if v)
        head = html.escape(self.summary().splitlines()[0])
        res = html.escape(self.summary().splitlines()[1].strip())
        return (f"<div><b>{head}</b><br>{res}<table><tr><th>PTX</th><th>count</th><th>meaning</th></tr>{rows}"
                f"</table>{excerpts}</div>")

    def sass(self) -> str | None:
        """SASS (the GPU's own machine code) via Triton's bundled cuobjdump, or None if missing."""
        try:
            from triton.tools.disasm import get_sass

            return get_sass(self.cubin)
        except Exception:
            return None


def compile_for(kernel, args: Mapping[str, Any], *, target="sm_90", config: triton.Config | None = None,
                num_warps: int | None = None, num_stages: int | None = None, name: str | None = None,
                **constexprs) -> CompileView:
    """Compile ``kernel`` as launched with ``args`` for ``target`` (e.g. "sm_90", "sm_80").

    ``config`` (a ``triton.Config``) supplies block constexprs, num_warps and num_stages, as an
    autotuner would; explicit ``num_warps`` / ``num_stages`` / constexpr keywords override it.
    Works without a GPU (and under the interpreter).  Raises triton's CompilationError when the
    kernel cannot be built for that target.
    """
    from triton.backends.compiler import GPUTarget

    capability = parse_target(target)
    consts = {**(config.kwargs if config else {}), **constexprs}
    options = {
        "num_warps": num_warps or (config.num_warps if config else 4),
        "num_stages": num_stages or (config.num_stages if config else 3),
    }
    src = build_source(kernel, args, consts)
    with _compiling():
        compiled = triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)
    usage = _resource_usage(compiled.asm["cubin"]) if "cubin" in compiled.asm else {}
    meta = compiled.metadata
    return CompileView(
        name=name or src.name, target=f"sm_{capability}", asm=dict(compiled.asm), shared=int(meta.shared),
        num_warps=meta.num_warps, num_stages=meta.num_stages, num_regs=usage.get("reg"),
        spill_bytes=usage.get("local"), global_scratch=int(getattr(meta, "global_scratch_size", 0) or 0),
        metadata=meta,
    )


# ----------------------------------------------------------------------------- registry
@dataclass
class KernelExample:
    """One representative launch of a kernel, for the compile view (see the registry protocol)."""

    name: str
    kernel: Any
    args: Mapping[str, Any] = field(repr=False)
    config: triton.Config
    targets: tuple = (90, 80)
    expect: Mapping[int, tuple] = field(default_factory=dict)

    def compile(self, target) -> CompileView:
        return compile_for(self.kernel, self.args, target=target, config=self.config, name=self.name)


def _matmul_examples():
    """``matmul.py`` predates the registry; its example lives here until it defines its own."""
    kernel = importlib.import_module("gemm_kernels.matmul")._matmul_kernel  # the package re-exports a function named matmul
    a = torch.zeros(256, 256, dtype=torch.float16)
    b_t = torch.zeros(256, 256, dtype=torch.float16).t()
    c = torch.zeros(256, 256, dtype=torch.float16)
    bias = torch.zeros(256, dtype=torch.float16)
    args = dict(a_ptr=a, b_ptr=b_t, c_ptr=c, bias_ptr=bias, trace_ptr=c, M=256, N=256, K=256,
                stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b_t.stride(0), stride_bn=b_t.stride(1),
                stride_cm=c.stride(0), stride_cn=c.stride(1), GROUPED=True, GROUP_SIZE_M=8,
                HAS_BIAS=True, ACTIVATION="gelu", WIDEN=False, TRACE=False)
    # one of configs.matmul_configs()' GPU entries (that function returns the interpreter's on a CPU)
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_stages=4, num_warps=8)
    return [KernelExample("matmul[fp16, grouped, gelu+bias]", kernel, args, config,
                          targets=(90, 80), expect={90: ("wgmma",), 80: ("mma.sync",)})]


def registered_examples() -> list[KernelExample]:
    """Every ``KernelExample`` of the package's kernel modules (modules not written yet are skipped)."""
    examples = []
    for module_name in KERNEL_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue
            raise
        make = getattr(module, "compile_examples", None)
        if make is None and module_name == "gemm_kernels.matmul":
            make = _matmul_examples
        if make is not None:
            examples.extend(make())
    return examples


def compile_all_kernels(target="sm_90") -> dict[str, CompileView]:
    """Compile every registered example that supports ``target``; name -> CompileView.

    Raises RuntimeError naming the example when one does not compile."""
    capability = parse_target(target)
    views = {}
    for example in registered_examples():
        if capability not in example.targets:
            continue
        try:
            views[example.name] = example.compile(capability)
        except Exception as err:
            raise RuntimeError(f"{example.name} does not compile for sm_{capability}: {err}") from err
    return views
