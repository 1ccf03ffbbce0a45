"""See what a kernel becomes on a real GPU, from a machine without one.

``triton.compile`` needs no driver: given a target such as ``sm_90`` it runs the whole pipeline
(Triton IR -> TritonGPU IR -> LLVM IR -> PTX -> cubin with the ptxas that ships with Triton) on
the CPU.  ``compile_for`` does that for one of the package's kernels and returns a
:class:`CompileView`: the stages' text, shared memory, registers, and a count of the
instructions that tell Hopper code from Ampere code (``highlights``).

How.  On a CPU the package's kernels are interpreter objects, which cannot be compiled; so the
compile runs in a fresh Python process (``gemm_kernels.lab._compile_worker``) that imports the
package in compile-only mode, where the kernels stay ordinary ``@triton.jit`` functions.
Nothing of Triton is patched, in either process.  The worker needs the kernel by module and
name, so ``compile_for`` takes kernels defined in an importable module (all of the package's).

How the kernel is specialised.  ``args`` maps kernel parameters to what a launch would pass
(tensors, ints, constexpr values).  Types and the ``tt.divisibility=16`` hints are derived as
Triton's launcher derives them (pointers 16-byte aligned, ints divisible by 16, ints equal to 1
folded to constants), so the code is the code a launch with those arguments gets.  A tensor may
be a small CPU tensor: only its dtype and its address modulo 16 count.

The examples every kernel module is shown with live in ``compile_examples.py``.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
import triton

from .. import runtime
from .._triton_compat import _is_gluon_descriptor

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

STAGES = ("ttir", "ttgir", "llir", "ptx")

#: compute capabilities Triton's NVIDIA backend builds for (sm_75 Turing ... sm_120 Blackwell)
KNOWN_CAPABILITIES = (75, 80, 86, 87, 89, 90, 100, 103, 120)


def parse_target(target) -> int:
    """"sm_90", "sm_90a", "90", 90 or a GPUTarget -> compute capability as an int (90).
    ValueError for anything else, before any compile starts."""
    if hasattr(target, "arch"):
        target = target.arch
    if isinstance(target, bool) or not isinstance(target, (int, str)):
        raise ValueError(f"target must look like 'sm_90' or 'sm_80' (a CUDA compute capability), got {target!r}")
    match = re.fullmatch(r"(?:sm_?)?(\d+)a?", str(target).strip().lower())
    capability = int(match.group(1)) if match else None
    if capability not in KNOWN_CAPABILITIES:
        known = ", ".join(f"sm_{c}" for c in KNOWN_CAPABILITIES)
        raise ValueError(f"target must be a CUDA compute capability Triton builds for ({known}), got {target!r}")
    return capability


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
    spill_bytes: int | None  # stack frame + local memory per thread: > 0 means registers spilled
    global_scratch: int  # bytes of global scratch per program (tensor descriptors built on device)
    metadata: dict = field(repr=False, default_factory=dict)
    gluon: bool = False  # a Gluon kernel: written at the TritonGPU level, so it has no TTIR stage

    @property
    def stages(self) -> tuple:
        """The compiler stages this kernel went through (a Gluon kernel starts at ttgir)."""
        return tuple(s for s in STAGES if s in self.asm)

    @property
    def ttir(self) -> str:
        if "ttir" not in self.asm and self.gluon:
            return "(no TTIR: a Gluon kernel is written with its layouts, at the TritonGPU level; see .ttgir)"
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
        return self.asm.get("cubin", b"")

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

    def op_layouts(self, op: str = "tt.load") -> list[dict]:
        """The register layout of every ``op`` result in the TritonGPU IR, in program order.

        Each entry: ``{"line": the op's line, "layout": its layout's name (``blocked1``),
        "size_per_thread", "threads_per_warp", "warps_per_cta", "order": lists of ints}`` (a
        layout other than ``#ttg.blocked`` has only ``line`` and ``layout``).  ``order`` lists
        the dimensions fastest first: ``[1, 0]`` walks along rows, ``[0, 1]`` down columns."""
        text = self.ttgir
        definitions = dict(re.findall(r"^#(\w+) = (#ttg\.\w+<\{.*\}>)", text, flags=re.MULTILINE))
        found = []
        for line in text.splitlines():
            if not re.search(rf"=\s*{re.escape(op)}\b", line):
                continue
            layouts = re.findall(r", #(\w+)>", line)  # the type of a tensor: tensor<..., #layout>
            if not layouts:
                continue
            entry = {"line": line.strip(), "layout": layouts[-1]}
            definition = definitions.get(layouts[-1], "")
            for key, field_name in (("size_per_thread", "sizePerThread"), ("threads_per_warp", "threadsPerWarp"),
                                    ("warps_per_cta", "warpsPerCTA"), ("order", "order")):
                match = re.search(rf"\b{field_name} = \[([\d, ]*)\]", definition)
                if match:
                    entry[key] = [int(v) for v in match.group(1).split(",") if v.strip()]
            found.append(entry)
        return found

    def summary(self) -> str:
        regs = "unknown (cuobjdump missing)" if self.num_regs is None else f"{self.num_regs} per thread"
        spills = "" if not self.spill_bytes else f", {self.spill_bytes} bytes spilled (stack frame and local memory)"
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



# ----------------------------------------------------------------------------- requests to the worker
def _python_function(kernel):
    """The Python function behind a jit function (Triton or Gluon), an autotuned/tuned wrapper or an
    interpreter object."""
    obj = kernel
    for _ in range(8):
        if isinstance(obj, types.FunctionType):
            return obj
        obj = getattr(obj, "fn", None)
    raise TypeError(f"expected a @triton.jit kernel (or an autotuned one), got {type(kernel).__name__}")


def _encode(value):
    """A launch argument as JSON the worker turns back into an equivalent argument."""
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).replace("torch.", ""), "aligned": value.data_ptr() % 16 == 0}
    if _is_gluon_descriptor(value):  # a Gluon kernel's host TMA descriptor: its type is all that compiles
        return {"gluon_descriptor": {
            "dtype": str(value.base.dtype).replace("torch.", ""), "shape": [int(d) for d in value.shape],
            "strides": [int(d) for d in value.strides], "block_shape": [int(d) for d in value.block_shape],
            "layout": {f.name: getattr(value.layout, f.name) for f in dataclasses.fields(value.layout)},
            "padding": value.padding}}
    if isinstance(value, dict) and set(value) == {"jit_function"}:  # a kernel's function argument, by module
        return value
    if isinstance(value, triton.runtime.jit.JITFunction):  # a @triton.jit/@gluon.jit function as a constexpr
        fn = _python_function(value)
        if fn.__module__ in (None, "__main__"):
            raise TypeError(f"compile_for passes a function argument by module and name; {fn.__name__} lives in "
                            f"{fn.__module__!r}: put it in a .py file")
        return {"jit_function": {"module": fn.__module__, "name": fn.__qualname__}}
    if isinstance(value, triton.language.dtype):
        return {"tl_dtype": value.name}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"compile_for cannot pass a {type(value).__name__} to the compiler: use tensors, ints, "
                    "floats, bools, strings, None, triton.language dtypes or Gluon TensorDescriptors")


#: compile options a request may set beside num_warps / num_stages (Gluon's warp-specialized
#: kernels launch with ``maxnreg``: registers per thread before setmaxnreg moves them; ``debug``
#: compiles tl.device_assert and the overflow checks in, as TRITON_DEBUG=1 does)
COMPILE_OPTIONS = ("maxnreg", "debug")


def _request(kernel, args, target, config, num_warps, num_stages, name, constexprs, options=None) -> dict:
    fn = _python_function(kernel)
    module, qualname = fn.__module__, fn.__qualname__
    if module in (None, "__main__") or "<" in qualname:
        raise ValueError(f"compile_for compiles kernels defined at the top level of an importable module; "
                         f"{qualname} lives in {module!r}: put it in a .py file and import it from there")
    params = list(inspect.signature(fn).parameters)
    given = {**args, **(config.kwargs if config else {}), **constexprs}
    unknown = sorted(set(given) - set(params))
    if unknown:
        raise ValueError(f"{fn.__name__} has no parameters named {unknown}")
    options = dict(options or {})
    bad = sorted(set(options) - set(COMPILE_OPTIONS))
    if bad:
        raise ValueError(f"unknown compile options {bad}; allowed: {list(COMPILE_OPTIONS)}")
    return {
        "module": module, "qualname": qualname, "capability": parse_target(target),
        "args": {k: _encode(v) for k, v in given.items()},
        "num_warps": num_warps or (config.num_warps if config else 4),
        "num_stages": num_stages or (config.num_stages if config else 3),
        "name": name or fn.__name__,
        **({"options": options} if options else {}),
    }


_CACHE: dict[str, CompileView] = {}


def _worker_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env[runtime.COMPILE_ONLY_ENV] = "1"
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the package
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def compile_many(requests: list[dict]) -> list[CompileView]:
    """Compile several requests in one worker process (each cached by what was asked)."""
    keys = [json.dumps(r, sort_keys=True) for r in requests]
    todo = {k: r for k, r in zip(keys, requests) if k not in _CACHE}
    if todo:
        with tempfile.TemporaryDirectory() as tmp:
            job, result = Path(tmp) / "job.json", Path(tmp) / "result.json"
            job.write_text(json.dumps(list(todo.values())))
            proc = subprocess.run([sys.executable, "-m", "gemm_kernels.lab._compile_worker", str(job), str(result)],
                                  env=_worker_env(), capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0 or not result.exists():
                raise RuntimeError(f"the compile worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
            outcomes = json.loads(result.read_text())
        for key, outcome in zip(todo, outcomes):
            if "error" in outcome:
                raise RuntimeError(f"{todo[key]['name']} does not compile for sm_{todo[key]['capability']}: "
                                   f"{outcome['error']}")
            asm = dict(outcome["asm"])
            asm["cubin"] = bytes.fromhex(asm.pop("cubin_hex", ""))
            _CACHE[key] = CompileView(asm=asm, **outcome["view"])
    return [_CACHE[k] for k in keys]


def compile_for(kernel, args: Mapping[str, Any], *, target="sm_90", config: triton.Config | None = None,
                num_warps: int | None = None, num_stages: int | None = None, name: str | None = None,
                options: Mapping[str, Any] | None = None, **constexprs) -> CompileView:
    """Compile ``kernel`` as launched with ``args`` for ``target`` (e.g. "sm_90", "sm_80").

    ``config`` (a ``triton.Config``) supplies block constexprs, num_warps and num_stages, as an
    autotuner would; explicit ``num_warps`` / ``num_stages`` / constexpr keywords override it.
    ``kernel`` may be a ``@triton.jit`` or a ``@gluon.jit`` kernel (whose host TMA descriptors
    are passed as ``TensorDescriptor`` objects); ``options`` sets :data:`COMPILE_OPTIONS`.
    Works without a GPU.  Raises ValueError for a bad target or argument names, RuntimeError
    (with the compiler's message) when the kernel cannot be built for that target.
    """
    return compile_many([_request(kernel, args, target, config, num_warps, num_stages, name, constexprs,
                                  options)])[0]


# ----------------------------------------------------------------------------- registry
@dataclass
class KernelExample:
    """One representative launch of a kernel, for the compile view (see ``compile_examples.py``)."""

    name: str
    kernel: Any
    args: Mapping[str, Any] = field(repr=False)
    config: triton.Config
    targets: tuple = (90, 80)
    expect: Mapping[int, tuple] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"maxnreg": 168}

    def request(self, target) -> dict:
        return _request(self.kernel, self.args, target, self.config, None, None, self.name, {}, self.options)

    def compile(self, target) -> CompileView:
        return compile_many([self.request(target)])[0]
