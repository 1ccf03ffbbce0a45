"""A look at Blackwell (sm_100), from any machine: what an mxfp8 GEMM and a warp-specialized K
loop become there, next to what the same source becomes on Hopper (sm_90).

* ``mxfp8_matmul_kernel``: ``tl.dot_scaled`` on e4m3 tiles with e8m0 scales, one per 32 values
  of K.  Its scales come either as rows (``[M, K/32]``, pointer loads) or re-laid for tcgen05
  (``to_tcgen05_scales``, TMA loads); ``mxfp8_matmul`` runs it, ``mxfp8_reference`` checks it.
* ``block_scaled_summary`` / ``block_scaled_comparison``: its MMA instructions, tensor memory,
  the scales' path and layout, shared memory and registers, counted from the compiled stages.
* ``warp_specialize_comparison``: ``ws_matmul_kernel`` (an fp16 TMA K loop in
  ``tl.range(..., warp_specialize=True)``) on both targets: its ``ttg.warp_specialize``
  partitions and the pass the installed Triton runs for each (``warp_specialize_passes``).

Why warp specialization differs.  ``make_ttgir`` (triton/backends/nvidia/compiler.py) adds
``nvidia.passes.hopper.add_hopper_warpspec`` for sm_8x/9x (NVGPUWarpSpecialization,
third_party/nvidia/hopper/lib/Transforms/WarpSpecialization.cpp) but ``passes.ttgpuir.
add_warp_specialize`` for sm_100+ (AutomaticWarpSpecialization, lib/Dialect/TritonGPU/Transforms/
WarpSpecialization/); libtriton.so names both files, the wheel ships no C++.  Upstream's Hopper
pass returns unless the kernel has 4 warps, and the compiles agree: at 4 warps the kernel's own
warps keep the TMA loads and two added 4-warp partitions run the wgmma; at 8 warps the PTX is
unchanged (as tests/test_claims.py asserts for matmul_tma).  The Blackwell pass splits the loop
at 4 and 8 warps: a 1-warp tcgen05 MMA partition, a 2-warp TMA load partition.  At 4 warps the
Hopper pass fails on a dot_scaled loop (a compile error, no fallback).  Triton 3.6 vs 3.9: 3.6's
Hopper pass also splits a num_stages=1 loop; 3.6 spells the scaled MMA ``.block_scale.
scale_vec::1X``, 3.9 ``.block32``; only 3.9's interpreter runs ``dot_scaled``.
No timings: nobody here has a Blackwell GPU.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import torch
import triton
import triton.language as tl

from .. import runtime
from .compile_view import CompileView, KernelExample, compile_many, parse_target

#: K values that share one e8m0 scale (the MX formats' block size)
SCALE_GROUP = 32
#: tile edge of the examples (BLOCK_M = BLOCK_N = BLOCK_K): tcgen05's scale layout covers 128 rows
BLOCK = 128
SCALE_LAYOUTS = ("rows", "tcgen05")


# ----------------------------------------------------------------------------- device side
@triton.jit
def _scale_source(scale_ptr, rows, K, BLOCK_ROWS: tl.constexpr, BLOCK_K: tl.constexpr,
                  TCGEN05_SCALES: tl.constexpr):
    """What the K loop reads a tile's scales through: a TMA descriptor of the tcgen05 layout
    ``[rows/128, K/128, 32, 16]`` (see ``to_tcgen05_scales``), or the ``[rows, K/32]`` pointer."""
    if TCGEN05_SCALES:
        src = tl.make_tensor_descriptor(scale_ptr, shape=[rows // 128, K // 128, 32, 16],
                                        strides=[(K // 128) * 512, 512, 16, 1],
                                        block_shape=[BLOCK_ROWS // 128, BLOCK_K // 128, 32, 16])
    else:
        src = scale_ptr
    return src


@triton.jit
def _load_scales(src, off, k, K, BLOCK_ROWS: tl.constexpr, BLOCK_K: tl.constexpr, TCGEN05_SCALES: tl.constexpr):
    """The ``[BLOCK_ROWS, BLOCK_K / 32]`` e8m0 scales of rows ``off...`` and K values ``k...``."""
    if TCGEN05_SCALES:
        # a 512-byte chunk covers 128 rows x 4 groups; its byte i*16 + j*4 + g is row j*32 + i, group g
        s = src.load([off // 128, k // 128, 0, 0])
        s = s.reshape(BLOCK_ROWS // 128, BLOCK_K // 128, 32, 4, 4).trans(0, 3, 2, 1, 4)
        s = s.reshape(BLOCK_ROWS, BLOCK_K // 32)
    else:
        rows = off + tl.arange(0, BLOCK_ROWS)
        groups = k // 32 + tl.arange(0, BLOCK_K // 32)
        s = tl.load(src + rows[:, None] * (K // 32) + groups[None, :])
    return s


@triton.jit
def mxfp8_matmul_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        TCGEN05_SCALES: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    # C[M, N] (bf16) = (A * 2^(sa - 127)) @ (B * 2^(sb - 127))^T: A [M, K] and B [N, K] e4m3, row-major;
    # one program per tile, no masks (M, N, K multiples of the blocks)
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    a_scales = _scale_source(a_scale_ptr, M, K, BLOCK_M, BLOCK_K, TCGEN05_SCALES)
    b_scales = _scale_source(b_scale_ptr, N, K, BLOCK_N, BLOCK_K, TCGEN05_SCALES)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([off_m, k])
        b = b_desc.load([off_n, k])
        sa = _load_scales(a_scales, off_m, k, K, BLOCK_M, BLOCK_K, TCGEN05_SCALES)
        sb = _load_scales(b_scales, off_n, k, K, BLOCK_N, BLOCK_K, TCGEN05_SCALES)
        # B's scales stay [N, K/32] although B enters as [K, N] (dot_scaled's convention)
        acc = tl.dot_scaled(a, sa, "e4m3", b.T, sb, "e4m3", acc)
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(tl.bfloat16))


@triton.jit
def ws_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     WARP_SPECIALIZE: tl.constexpr):
    # C = A @ B^T in fp16 (A [M, K], B [N, K]), TMA loads: the loop warp specialization splits
    off_m = tl.program_id(0) * BLOCK_M
    off_n = tl.program_id(1) * BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WARP_SPECIALIZE):
        acc = tl.dot(a_desc.load([off_m, k]), b_desc.load([off_n, k]).T, acc)
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(tl.float16))


# ----------------------------------------------------------------------------- host side
def to_tcgen05_scales(scale: torch.Tensor) -> torch.Tensor:
    """``[rows, K/32]`` e8m0 bytes -> the ``[rows/128, K/128, 32, 16]`` order tcgen05 reads: each
    512-byte chunk holds 128 rows x 4 groups, row ``i`` of 32 the bytes of rows i, i+32, i+64, i+96."""
    rows, groups = scale.shape
    if rows % 128 or groups % 4:
        raise ValueError(f"scales of shape {tuple(scale.shape)}: rows must be a multiple of 128 and K/32 of 4")
    chunks = scale.reshape(rows // 128, 4, 32, groups // 4, 4)  # (row chunk, j, i, K chunk, g)
    return chunks.permute(0, 3, 2, 1, 4).contiguous().reshape(rows // 128, groups // 4, 32, 16)


def mxfp8_reference(a, a_scale, b, b_scale) -> torch.Tensor:
    """float64 ``(A * 2^(sa-127)) @ (B * 2^(sb-127))^T`` for A ``[M, K]``, B ``[N, K]`` (e4m3) and
    ``[M, K/32]``, ``[N, K/32]`` uint8 scales."""
    def dequant(x, s):
        return x.double() * torch.exp2(s.double() - 127).repeat_interleave(SCALE_GROUP, dim=1)

    return dequant(a, a_scale) @ dequant(b, b_scale).T


def _interpreter_has_dot_scaled() -> bool:
    from triton.runtime import interpreter

    return hasattr(interpreter.InterpreterBuilder, "create_dot_scaled")


def mxfp8_matmul(a, a_scale, b, b_scale, *, tcgen05_scales: bool = False) -> torch.Tensor:
    """bf16 ``[M, N]`` from e4m3 A ``[M, K]``, B ``[N, K]`` and uint8 (e8m0) scales ``[M, K/32]``,
    ``[N, K/32]``; M, N, K multiples of 128.  ``tcgen05_scales`` passes them re-laid
    (``to_tcgen05_scales``).  Needs TMA (sm_90+, or the interpreter): NotImplementedError in an
    interpreter without dot_scaled (Triton 3.6's)."""
    (M, K), (N, K_b) = a.shape, b.shape
    for name, x, dtype in (("a", a, torch.float8_e4m3fn), ("b", b, torch.float8_e4m3fn),
                           ("a_scale", a_scale, torch.uint8), ("b_scale", b_scale, torch.uint8)):
        if x.dtype != dtype or not x.is_contiguous():
            raise ValueError(f"{name} must be a contiguous {dtype} tensor, got {x.dtype} with strides {x.stride()}")
    if K_b != K or M % BLOCK or N % BLOCK or K % BLOCK:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)}: M, N, K must be multiples of {BLOCK} "
                         "and share K")
    if a_scale.shape != (M, K // SCALE_GROUP) or b_scale.shape != (N, K // SCALE_GROUP):
        raise ValueError(f"scales must be [M, K/32] = {[M, K // 32]} and [N, K/32] = {[N, K // 32]}, got "
                         f"{list(a_scale.shape)} and {list(b_scale.shape)}")
    if runtime.interpreted() and not _interpreter_has_dot_scaled():
        raise NotImplementedError(f"Triton {triton.__version__}'s interpreter has no dot_scaled (3.9's has): "
                                  "run mxfp8_matmul on a GPU, or look at it compiled (block_scaled_summary)")
    runtime.require_tma("mxfp8_matmul", "The compiled view (block_scaled_summary) needs no GPU.")
    if tcgen05_scales:
        a_scale, b_scale = to_tcgen05_scales(a_scale), to_tcgen05_scales(b_scale)
    c = torch.empty(M, N, device=a.device, dtype=torch.bfloat16)
    if runtime.on_gpu():
        runtime.ensure_tma_allocator()
    mxfp8_matmul_kernel[(M // BLOCK, N // BLOCK)](
        a, b, c, a_scale, b_scale, M, N, K, a.stride(0), b.stride(0), c.stride(0),
        BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK, TCGEN05_SCALES=tcgen05_scales, WARP_SPECIALIZE=False,
        num_warps=4, num_stages=3)
    return c


# ----------------------------------------------------------------------------- compiled examples
def mxfp8_example(scales: str = "tcgen05", warp_specialize: bool = False, size: int = 256) -> KernelExample:
    """``mxfp8_matmul_kernel`` as a launch on ``size``-sized problems compiles (128 x 128 x 128
    tiles, 4 warps, 3 stages)."""
    if scales not in SCALE_LAYOUTS:
        raise ValueError(f"scales must be one of {SCALE_LAYOUTS}, got {scales!r}")
    a = torch.zeros(size, size, dtype=torch.float8_e4m3fn)
    s = torch.zeros(size, size // SCALE_GROUP, dtype=torch.uint8)
    c = torch.zeros(size, size, dtype=torch.bfloat16)
    args = dict(a_ptr=a, b_ptr=a, c_ptr=c, a_scale_ptr=s, b_scale_ptr=s, M=size, N=size, K=size,
                stride_am=size, stride_bn=size, stride_cm=size)
    config = triton.Config({"BLOCK_M": BLOCK, "BLOCK_N": BLOCK, "BLOCK_K": BLOCK,
                            "TCGEN05_SCALES": scales == "tcgen05", "WARP_SPECIALIZE": warp_specialize},
                           num_warps=4, num_stages=3)
    name = f"mxfp8_matmul[{scales} scales{', warp_specialize' if warp_specialize else ''}]"
    return KernelExample(name, mxfp8_matmul_kernel, args, config, targets=(100, 90))


def ws_example(warp_specialize: bool = True, num_warps: int = 8, size: int = 512) -> KernelExample:
    """``ws_matmul_kernel`` with 128 x 128 x 64 fp16 tiles, ``num_warps`` warps, 3 stages."""
    a = torch.zeros(size, size, dtype=torch.float16)
    args = dict(a_ptr=a, b_ptr=a, c_ptr=a, M=size, N=size, K=size, stride_am=size, stride_bn=size, stride_cm=size)
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "WARP_SPECIALIZE": warp_specialize},
                           num_warps=num_warps, num_stages=3)
    return KernelExample(f"ws_matmul[{'on' if warp_specialize else 'off'}, {num_warps} warps]", ws_matmul_kernel,
                         args, config, targets=(100, 90))


def compile_mxfp8(target="sm_100", *, scales: str = "tcgen05", warp_specialize: bool = False) -> CompileView:
    """``mxfp8_example`` compiled for ``target`` in the compile view's worker (cached per process).

    RuntimeError where it does not build: on sm_90 with ``warp_specialize`` the Hopper pass stops
    on this 4-warp dot_scaled loop (the compiler's crash report, on the worker's stderr, names
    NVGPUWarpSpecialization)."""
    capability = parse_target(target)
    try:
        return compile_many([mxfp8_example(scales, warp_specialize).request(capability)])[0]
    except RuntimeError as err:
        if warp_specialize and "add_hopper_warpspec" in warp_specialize_passes(capability):
            raise RuntimeError(f"{err}\n(sm_{capability}: Triton {triton.__version__}'s Hopper warp-specialization "
                               "pass, NVGPUWarpSpecialization, cannot split a 4-warp dot_scaled loop; compile with "
                               "warp_specialize=False, or for sm_100)") from err
        raise


# ----------------------------------------------------------------------------- reading the stages
def stage_lines(view: CompileView, pattern: str, stage: str = "ptx", limit: int = 4, width: int = 110) -> list[str]:
    """The first ``limit`` lines of ``stage`` (ttir, ttgir, llir, ptx) matching the regex ``pattern``,
    whitespace squeezed, MLIR ``loc(...)`` dropped, cut to ``width`` characters."""
    found = []
    for line in getattr(view, stage).splitlines():
        if re.search(pattern, line):
            line = " ".join(re.sub(r"\s+loc\(.*\)\s*$", "", line).split())
            found.append(line if len(line) <= width else line[:width - 3] + "...")
            if len(found) == limit:
                break
    return found


def _opcodes(ptx: str, prefix: str) -> dict[str, int]:
    """PTX opcode (with its qualifiers) -> how many times it appears, for opcodes starting ``prefix``."""
    counts: dict[str, int] = {}
    for op in re.findall(rf"^\s*(?:@!?%\w+\s+)?({re.escape(prefix)}[\w.:]*)", ptx, flags=re.MULTILINE):
        counts[op] = counts.get(op, 0) + 1
    return counts


def _layout_definitions(ttgir: str) -> dict[str, str]:
    return dict(re.findall(r"^(#\w+) = (.*)$", ttgir, flags=re.MULTILINE))


def _bases(definition: str) -> dict[str, list]:
    """The basis vectors of a linear layout: ``{"register": [[0, 1], ...], "lane": ..., "offset": ...}``."""
    found = {}
    for name, body in re.findall(r"\b(register|lane|warp|block|offset) = \[((?:\[[-\d, ]*\],? ?)*)\]", definition):
        found[name] = [[int(v) for v in vec.split(",") if v.strip()] for vec in re.findall(r"\[([-\d, ]*)\]", body)]
    return found


#: the scales' way to the MMA, in order: (regex on the TTGIR, what a match means)
SCALE_STEPS = (
    (r"ttng\.async_tma_copy_global_to_local .*-> !ttg\.memdesc<[\dx]*32x16xi8",
     "global -> shared memory by TMA, in 512-byte [32, 16] chunks (ttng.async_tma_copy_global_to_local)"),
    (r"= tt\.load \S+ : tensor<\d+x\d+x!tt\.ptr<i8>", "global -> registers by pointer loads (tt.load)"),
    (r"ttg\.memdesc_trans .*order = array<i32: 0, 3, 2, 1, 4>",
     "chunks put in row order as a view of shared memory (ttg.memdesc_reshape, ttg.memdesc_trans: no data moved)"),
    (r"= tt\.trans .*order = array<i32: 0, 3, 2, 1, 4>",
     "chunks put in row order in registers (ttg.local_load, then tt.reshape, tt.trans)"),
    (r"ttng\.tmem_copy .*#tmem_scales", "shared memory -> tensor memory: ttng.tmem_copy (tcgen05.cp)"),
    (r"ttng\.tmem_alloc %\S+ : \(tensor<\d+x\d+xi8", "registers -> tensor memory: ttng.tmem_alloc of a register "
                                                     "tensor (tcgen05.st)"),
    (r"ttng\.tc_gen5_mma_scaled", "the MMA reads both scale tiles from tensor memory: ttng.tc_gen5_mma_scaled"),
    (r"tt\.fp_to_fp .*f8E4M3FN.* -> tensor<[\dx]+xbf16", "each e4m3 operand upcast to bf16: tt.fp_to_fp"),
    (r"arith\.shli .*xi16", "each e8m0 byte widened to 16 bits and shifted left 7 (arith.extui, arith.shli): "
                            "a bf16 exponent field, bitcast to bf16 (tt.bitcast)"),
    (r"arith\.mulf .*xbf16", "the bf16 scale, broadcast over its 32 values, multiplied into the operand "
                             "(arith.mulf) before the MMA"),
)


def _scale_layout(ttgir: str) -> dict | None:
    """The layout the scales reach tensor memory in: the source of ``ttng.tmem_copy`` (shared
    memory) or of ``ttng.tmem_alloc`` from registers; None when no scale goes to tensor memory."""
    definitions = _layout_definitions(ttgir)
    copy = re.search(r"ttng\.tmem_copy .*?: !ttg\.memdesc<([\dx]+)xi8, (#\w+)", ttgir)
    store = re.search(r"ttng\.tmem_alloc %\S+ : \(tensor<([\dx]+)xi8, (#\w+)>\)", ttgir)
    match, where = (copy, "shared memory") if copy else (store, "registers") if store else (None, None)
    if match is None:
        return None
    name = match.group(2)
    definition = definitions.get(name, "")
    return {"where": where, "shape": [int(d) for d in match.group(1).split("x")], "name": name,
            "definition": definition, "bases": _bases(definition)}


def _tmem_allocs(ttgir: str) -> list[str]:
    """Distinct tensor-memory buffers of the TTGIR: ``"128x128xf32 #tmem"``, ``"128x4xi8 #tmem_scales"``."""
    found = re.findall(r"ttng\.tmem_alloc[^\n]*?-> !ttg\.memdesc<([\dx]+x\w+), (#\w+), #ttng\.tensor_memory", ttgir)
    return sorted({f"{shape} {layout}" for shape, layout in found})


def block_scaled_summary(target="sm_100", scales: str = "tcgen05", warp_specialize: bool = False) -> dict:
    """What ``mxfp8_matmul_kernel`` becomes on ``target``, read from its compiled stages.

    Keys: ``target``, ``scales``, ``mma`` (PTX MMA opcode -> count), ``block_scaled_mma`` (how
    many of them scale by themselves: ``.block_scale``), ``wgmma``, ``tensor_memory`` (tcgen05
    opcode family, e.g. ``tcgen05.cp``, -> count, plus ``columns`` allocated), ``tmem_allocs``,
    ``tmem_layouts`` (``#tmem...`` name -> definition), ``scale_path`` (the SCALE_STEPS found, in
    their order), ``scale_layout`` (``_scale_layout``), ``partitions`` (``partitions``: none
    unless warp-specialized), ``upcasts`` (``tt.fp_to_fp`` count),
    ``shared`` (bytes), ``registers`` and ``spill_bytes`` (per thread; None without cuobjdump),
    ``num_warps``."""
    return _summarize(compile_mxfp8(target, scales=scales, warp_specialize=warp_specialize), scales)


def block_scaled_comparison(scales: str = "tcgen05") -> dict[str, dict]:
    """``block_scaled_summary`` for sm_100 and sm_90, both compiled in one worker process."""
    views = compile_many([mxfp8_example(scales).request(cap) for cap in (100, 90)])
    return {view.target: _summarize(view, scales) for view in views}


def _summarize(view: CompileView, scales: str) -> dict:
    ptx, ttgir = view.ptx, view.ttgir
    mma = {**_opcodes(ptx, "tcgen05.mma"), **_opcodes(ptx, "wgmma.mma_async")}
    tmem: dict[str, int] = {}
    for op, n in _opcodes(ptx, "tcgen05.").items():  # tcgen05.wait::ld... -> tcgen05.wait
        family = "tcgen05." + re.split(r"[.:]", op[len("tcgen05."):])[0]
        tmem[family] = tmem.get(family, 0) + n
    columns = re.search(r"tcgen05\.alloc\S*\s+\[[^\]]*\],\s*(\d+);", ptx)
    tmem["columns"] = int(columns.group(1)) if columns else 0
    return {
        "target": view.target, "scales": scales, "mma": mma,
        "block_scaled_mma": sum(n for op, n in mma.items() if ".block_scale" in op),
        "wgmma": sum(n for op, n in mma.items() if op.startswith("wgmma")),
        "tensor_memory": tmem,
        "tmem_allocs": _tmem_allocs(ttgir),
        "tmem_layouts": {k: v for k, v in _layout_definitions(ttgir).items() if k.startswith("#tmem")},
        "scale_path": [meaning for pattern, meaning in SCALE_STEPS if re.search(pattern, ttgir)],
        "scale_layout": _scale_layout(ttgir), "partitions": partitions(ttgir),
        "upcasts": len(re.findall(r"= tt\.fp_to_fp ", ttgir)),
        "shared": view.shared, "registers": view.num_regs, "spill_bytes": view.spill_bytes,
        "num_warps": view.num_warps,
    }


# ----------------------------------------------------------------------------- warp specialization
#: TTGIR ops worth naming per partition (op -> what it does)
KEY_OPS = {
    "ttng.async_tma_copy_global_to_local": "TMA load",
    "ttg.async_copy_global_to_local": "cp.async load",
    "ttng.tc_gen5_mma": "tcgen05 MMA", "ttng.tc_gen5_mma_scaled": "tcgen05 block-scaled MMA",
    "ttng.warp_group_dot": "wgmma", "ttng.tmem_load": "tensor memory -> registers",
    "tt.load": "pointer load", "ttng.tmem_copy": "shared -> tensor memory (tcgen05.cp)",
    "tt.store": "pointer store", "tt.descriptor_store": "TMA store",
}


def partitions(ttgir: str) -> list[dict]:
    """The regions of each ``ttg.warp_specialize`` op in ``ttgir``, in order: ``{"region":
    "default" or "partitionN", "num_warps": int or None (the default region's are the kernel's),
    "ops": the KEY_OPS it holds}``.  Empty when the TTGIR has none."""
    found, region, depth, inside = [], None, 0, False
    for line in ttgir.splitlines():
        text = re.sub(r"\s+loc\(.*\)\s*$", "", line).strip()
        if not inside:
            inside = text.startswith("ttg.warp_specialize(")
            continue
        if depth == 0:
            head = re.match(r"(default|partition\d+)\b.*?(?:num_warps\((\d+)\))?\s*\{$", text)
            if head:
                region = {"region": head.group(1), "num_warps": int(head.group(2)) if head.group(2) else None,
                          "ops": []}
                found.append(region)
                depth = 1
            elif text.startswith("} :") or text.startswith("}:"):
                inside = False
            continue
        depth += text.count("{") - text.count("}")
        op = re.match(r"(?:%[\w:#]+(?:, %[\w:#]+)* = )?([a-z_]+\.[a-z_0-9.]+)", text)
        if op and op.group(1) in KEY_OPS and op.group(1) not in region["ops"]:
            region["ops"].append(op.group(1))
    return found


def warp_specialize_passes(target) -> list[str]:
    """The warp-specialization passes the installed Triton's ``make_ttgir`` adds for ``target``,
    read from its source (``triton/backends/nvidia/compiler.py``): e.g. ``["add_hopper_warpspec"]``."""
    from triton.backends.nvidia.compiler import CUDABackend

    capability = parse_target(target)
    tree = ast.parse(textwrap.dedent(inspect.getsource(CUDABackend.make_ttgir)))
    found = []

    def names(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.If) and names(node.test) == {"capability"}:
                test = compile(ast.Expression(node.test), "make_ttgir", "eval")
                taken = eval(test, {"__builtins__": {}}, {"capability": capability})  # e.g. capability // 10 >= 10
                visit(node.body if taken else node.orelse)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                name = getattr(node.value.func, "attr", "")
                if "warpspec" in name or "warp_specialize" in name:
                    found.append(name)

    visit(tree.body[0].body)
    return found


def _ptx_without_comments(ptx: str) -> str:
    return re.sub(r"^\s*//.*$", "", ptx, flags=re.MULTILINE)


def warp_specialize_comparison(num_warps=(4, 8)) -> dict[str, dict[int, dict]]:
    """``ws_matmul_kernel`` with ``warp_specialize`` on and off, for sm_100 and sm_90 and each
    ``num_warps``, compiled in one worker: target -> num_warps -> ``{"passes"
    (warp_specialize_passes), "warp_specialize_ops", "partitions" (count, default region not
    counted), "partition_warps", "regions" (``partitions``), "requested_registers", "total_warps"
    (the launch's, all partitions), "shared", "ptx_identical_without" (PTX, comments aside, equals
    the switch-off compile's)}``."""
    cases = [(cap, warps) for cap in (100, 90) for warps in num_warps]
    requests = [ws_example(ws, warps).request(cap) for cap, warps in cases for ws in (True, False)]
    views = compile_many(requests)
    result: dict[str, dict[int, dict]] = {}
    for i, (cap, warps) in enumerate(cases):
        on, off = views[2 * i], views[2 * i + 1]
        regions = partitions(on.ttgir)
        named = [r for r in regions if r["region"] != "default"]
        registers = re.search(r"requestedRegisters = array<i32: ([\d, ]+)>", on.ttgir)
        result.setdefault(f"sm_{cap}", {})[warps] = {
            "passes": warp_specialize_passes(cap),
            "warp_specialize_ops": len(re.findall(r"\bttg\.warp_specialize\(", on.ttgir)),
            "partitions": len(named), "partition_warps": [r["num_warps"] for r in named], "regions": regions,
            "requested_registers": [int(v) for v in registers.group(1).split(",")] if registers else [],
            "total_warps": on.num_warps, "shared": on.shared,
            "ptx_identical_without": _ptx_without_comments(on.ptx) == _ptx_without_comments(off.ptx),
        }
    return result
