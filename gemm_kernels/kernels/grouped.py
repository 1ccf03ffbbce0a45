"""Grouped GEMM: many independent ``C_i = A_i @ B_i`` in one persistent launch.

The design of Triton's tutorial 08, with its gaps closed:

* The host packs, per problem, the data pointers, the sizes and *both* strides of A, B and C
  into one small int64 device array (one host-to-device copy per call).
* A fixed number of programs, ``min(num_sms(), total tiles)``, walks the tiles of all problems
  laid end to end: program ``p`` takes tiles ``p, p + num_programs, ...``
  (``tiles.multi_problem_schedule`` is the numpy mirror of exactly this walk).
* A global tile index becomes (problem, tile inside it) with ``tiles.locate_problem`` (a binary
  search over the host-computed ``tiles.problem_tile_starts``), then ``(pid_m, pid_n)`` with the
  same ``tiles.tile_coords`` (grouped order) as every other kernel.
* Every load and store is masked (or bounded by the tensor descriptor), so any sizes work:
  ragged tiles, ``M_i = 0`` / ``N_i = 0`` (no tiles), ``K_i = 0`` (zeros).
* The autotune key holds no pointers: it is the dtype, the variant and three small buckets
  (number of problems, largest K, total work), so it cannot grow with every call.

``tma=True`` reads A and B (and writes C when its rows are 16-byte aligned) through tensor
descriptors built in the kernel for the tile's problem (``tl.make_tensor_descriptor``).

Three layers as in ``matmul.py``: ``_grouped_matmul_kernel`` (the math), ``grouped_matmul`` (the
contract) and ``configs.grouped_configs`` (the tuning); ``grouped_matmul_ref`` is the reference.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from .. import runtime
from ..models.tiles import problem_tile_starts
from ..runtime import TMA_ALIGN_BYTES, ensure_tma_allocator
from . import checks, configs, tma
from .epilogue import store_tile_masked, widen_for_dot
from .matmul import k_loop_pointers
from .tma import common_layout
from .tiles import locate_problem, record_tile, tile_coords

#: torch dtype -> the element type the kernels cast raw pointers to
TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


# Columns of the per-problem metadata rows (int64): what the kernel loads for a tile's problem.
PROBLEM_FIELDS = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K",
                  "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")
_NUM_FIELDS = tl.constexpr(len(PROBLEM_FIELDS))
_A_PTR, _B_PTR, _C_PTR = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
_M, _N, _K = tl.constexpr(3), tl.constexpr(4), tl.constexpr(5)
_SAM, _SAK, _SBK, _SBN, _SCM, _SCN = (tl.constexpr(i) for i in range(6, 12))

#: what the "no TMA on this GPU" error of the grouped kernels (and grouped_mm) suggests instead
USE_POINTER_PATH = "Use the pointer path instead (tma=False)."


# ----------------------------------------------------------------------------- device side
@triton.jit
def _load_matrix(row, PTR: tl.constexpr, STRIDE_0: tl.constexpr, STRIDE_1: tl.constexpr,
                 DTYPE: tl.constexpr, LAYOUT: tl.constexpr, ALIGN_ELEMS: tl.constexpr):
    """A problem's matrix from its metadata row: (typed base pointer, stride 0, stride 1).

    Kernel arguments come with facts Triton derives at launch (a stride equal to 1, a value
    divisible by 16); values loaded from memory come with none, and every access would be
    scalar.  So the facts the host proved for the whole group are stated here, on the loaded
    values: ``"row"``: unit stride along dim 1, 16-byte-aligned base and row stride; ``"col"``:
    the transpose; ``"any"``: nothing known.  (The hints must sit on values made in this body:
    on a helper's parameters they would be lost.)"""
    ptr = tl.load(row + PTR).to(tl.pointer_type(DTYPE))
    stride_0 = tl.load(row + STRIDE_0)
    stride_1 = tl.load(row + STRIDE_1)
    if LAYOUT == "row":
        ptr = tl.multiple_of(ptr, 16)
        stride_0 = tl.multiple_of(stride_0, ALIGN_ELEMS)
        stride_1 = 1
    elif LAYOUT == "col":
        ptr = tl.multiple_of(ptr, 16)
        stride_0 = 1
        stride_1 = tl.multiple_of(stride_1, ALIGN_ELEMS)
    return ptr, stride_0, stride_1


@triton.jit
def _load_size(row, FIELD: tl.constexpr, ALIGN: tl.constexpr):
    """A problem's M, N or K, with the power of two that divides it for every problem of the call."""
    size = tl.load(row + FIELD).to(tl.int32)
    if ALIGN > 1:
        size = tl.multiple_of(size, ALIGN)
    return size


@triton.jit
def _grouped_matmul_kernel(
    problems_ptr, tile_starts_ptr, trace_ptr,
    num_problems,
    # autotune key only (see _autotune_key); the math never reads them
    num_problems_bucket, max_k_bucket, work_bucket,
    DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    STARTS_ROW: tl.constexpr, USE_TMA: tl.constexpr,
    # facts the host proved for every problem of this call (see _plan)
    A_LAYOUT: tl.constexpr, B_LAYOUT: tl.constexpr, C_LAYOUT: tl.constexpr, ALIGN_ELEMS: tl.constexpr,
    M_ALIGN: tl.constexpr, N_ALIGN: tl.constexpr, K_ALIGN: tl.constexpr,
    WIDEN: tl.constexpr, TRACE: tl.constexpr,
):
    # tile starts for this config's (BLOCK_M, BLOCK_N): one row of the host-computed table
    tile_starts_ptr += STARTS_ROW * (num_problems + 1)
    total_tiles = tl.load(tile_starts_ptr + num_problems).to(tl.int32)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    for tile in range(pid, total_tiles, num_programs):
        problem, local_tile = locate_problem(tile, tile_starts_ptr, num_problems)
        row = problems_ptr + problem * _NUM_FIELDS
        M = _load_size(row, _M, M_ALIGN)
        N = _load_size(row, _N, N_ALIGN)
        K = _load_size(row, _K, K_ALIGN)
        a_ptr, stride_am, stride_ak = _load_matrix(row, _A_PTR, _SAM, _SAK, DTYPE, A_LAYOUT, ALIGN_ELEMS)
        b_ptr, stride_bk, stride_bn = _load_matrix(row, _B_PTR, _SBK, _SBN, DTYPE, B_LAYOUT, ALIGN_ELEMS)
        c_ptr, stride_cm, stride_cn = _load_matrix(row, _C_PTR, _SCM, _SCN, DTYPE, C_LAYOUT, ALIGN_ELEMS)

        pid_m, pid_n = tile_coords(local_tile, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), True, GROUP_SIZE_M)
        if TRACE:  # which program computed which tile of which problem (tests and notebooks read it)
            record_tile(trace_ptr, tile, pid, problem, pid_m, pid_n)

        if USE_TMA:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if K > 0:  # K = 0: A and B are empty (no address to describe), C is zeros
                # descriptors over this problem's real shape: TMA zero-fills what a ragged tile
                # reads past its edge; a "col" operand is described in its storage order
                a_desc, b_desc = tma.input_descriptors(
                    a_ptr, b_ptr, M, N, K, stride_ak if A_LAYOUT == "col" else stride_am,
                    stride_bn if B_LAYOUT == "col" else stride_bk, A_LAYOUT == "col", B_LAYOUT == "col",
                    BLOCK_M, BLOCK_N, BLOCK_K)
                acc = tma.k_loop(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, tl.cdiv(K, BLOCK_K),
                                 A_LAYOUT == "col", B_LAYOUT == "col", WIDEN, BLOCK_M, BLOCK_N, BLOCK_K)
        else:
            # Rows/columns past the edge wrap (% M, % N): loads stay in bounds without an M/N mask
            # and the wrapped results are never stored.  With M_ALIGN/N_ALIGN the compiler knows the
            # wrap happens on an aligned boundary, so contiguous runs stay vectorized.
            offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
            offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
            acc = k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                                  BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)

        if USE_TMA and C_LAYOUT == "row":  # the descriptor's shape clips the ragged edge
            c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                               block_shape=[BLOCK_M, BLOCK_N])
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(DTYPE))
        else:
            store_tile_masked(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn,
                              BLOCK_M, BLOCK_N)


def _with_starts_rows(config_list):
    """Give every config the row of the tile-starts table that matches its (BLOCK_M, BLOCK_N).

    Tile starts depend on the block shape, and autotuning tries several; the launcher uploads
    the starts for every candidate shape at once (one copy), each config reads its own row."""
    shapes = list(dict.fromkeys((c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) for c in config_list))
    tagged = []
    for c in config_list:
        row = shapes.index((c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]))
        tagged.append(triton.Config({**c.kwargs, "STARTS_ROW": row}, num_warps=c.num_warps,
                                    num_stages=c.num_stages))
    return tagged, shapes


_CONFIGS, BLOCK_SHAPES = _with_starts_rows(configs.grouped_configs())
_grouped_matmul_tuned = configs.TunedKernel(
    _grouped_matmul_kernel, _CONFIGS,
    key=["num_problems_bucket", "max_k_bucket", "work_bucket", "DTYPE", "USE_TMA",
         "A_LAYOUT", "B_LAYOUT", "C_LAYOUT", "M_ALIGN", "N_ALIGN", "K_ALIGN"],
)


# ----------------------------------------------------------------------------- host side
def _pow2_divisor(values, cap: int = 16) -> int:
    """Largest power of two <= cap dividing every value (0 is divisible by anything)."""
    align = cap
    for v in values:
        while v % align:
            align //= 2
    return align


def _plan(group_a, group_b, group_c, shapes, tma: bool):
    """Facts that hold for every problem of this call, as the kernel's constexprs, plus the
    strides to pack per problem.  Only matrices the kernel touches count: A_i and B_i are read
    when M_i, N_i, K_i > 0, C_i is written when M_i, N_i > 0."""
    read = [i for i, (M, N, K) in enumerate(shapes) if M and N and K]
    written = [i for i, (M, N, _) in enumerate(shapes) if M and N]
    a_layout, strides_a = common_layout({i: group_a[i] for i in read}, "group_a", required=tma)
    b_layout, strides_b = common_layout({i: group_b[i] for i in read}, "group_b", required=tma)
    # C is ours (contiguous): its rows are aligned unless N_i * element size is not a multiple of
    # 16 bytes.  Then (also with tma=True) C is stored with masked pointer stores: correct, slower.
    c_layout, strides_c = common_layout({i: group_c[i] for i in written}, "group_c")
    facts = {
        "A_LAYOUT": a_layout, "B_LAYOUT": b_layout, "C_LAYOUT": c_layout,
        "ALIGN_ELEMS": TMA_ALIGN_BYTES // group_c[0].element_size(),
        "M_ALIGN": _pow2_divisor(shapes[i][0] for i in written),
        "N_ALIGN": _pow2_divisor(shapes[i][1] for i in written),
        "K_ALIGN": _pow2_divisor(shapes[i][2] for i in written),
    }
    return facts, (strides_a, strides_b, strides_c)


def _autotune_key(shapes) -> dict:
    """Small buckets: a new bucket (and a new tuning run) only when the work changes scale."""
    work = sum(2 * M * N * K for M, N, K in shapes)
    return {
        "num_problems_bucket": triton.next_power_of_2(len(shapes)),
        "max_k_bucket": triton.next_power_of_2(max(max(K for _, _, K in shapes), 1)),
        "work_bucket": int(math.log2(work)) // 2 if work else 0,  # factors of 4
    }


def _prepare(group_a, group_b, tma, block_shapes, *, runs_here: bool = True):
    """Validate, allocate the outputs, plan, and upload the metadata (one host-to-device copy).

    Returns (shapes, outputs, problems, tile_starts, constexpr facts, total tiles per block shape).
    Whether this GPU has TMA is the callers' check (the compile view builds TMA code anywhere)."""
    shapes = checks.check_group_inputs(group_a, group_b, runs_here=runs_here)
    if not isinstance(tma, bool):
        raise TypeError(f"tma must be True or False, got {tma!r}")
    dtype, device = group_a[0].dtype, group_a[0].device
    group_c = [torch.empty((M, N), device=device, dtype=dtype) for M, N, _ in shapes]
    facts, (strides_a, strides_b, strides_c) = _plan(group_a, group_b, group_c, shapes, tma)
    meta = []
    for i, ((M, N, K), a, b, c) in enumerate(zip(shapes, group_a, group_b, group_c)):
        meta += [a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K,
                 *strides_a.get(i, a.stride()), *strides_b.get(i, b.stride()), *strides_c.get(i, c.stride())]
    starts = [problem_tile_starts(shapes, bm, bn) for bm, bn in block_shapes]
    if starts[0][-1] > 2**31 - 1:
        raise ValueError(f"{starts[0][-1]} tiles: more than the kernel's 32-bit tile index counts")
    num_meta = len(meta)
    meta = torch.tensor(meta + np.concatenate(starts).tolist(), dtype=torch.int64)
    if device.type == "cuda":  # pinned, so the copy is asynchronous: the host never waits for the GPU
        meta = meta.pin_memory().to(device, non_blocking=True)
    else:
        meta = meta.to(device)
    total_tiles = {shape: int(s[-1]) for shape, s in zip(block_shapes, starts)}
    return shapes, group_c, meta[:num_meta], meta[num_meta:], facts, total_tiles


#: what :func:`_layout` returns, as the error of a changed tensor names it
_LAYOUT_FIELDS = ("address", "shape", "strides", "storage offset", "dtype")


def _layout(t) -> tuple:
    """What a plan's saved metadata depends on, per tensor: address, shape, strides, offset, dtype."""
    return t.data_ptr(), tuple(t.shape), t.stride(), t.storage_offset(), t.dtype


def _watch(t) -> tuple:
    """(tensor, an alias of its storage and view, address, dtype): :func:`_unchanged`'s record.
    The alias also keeps the planned memory alive whatever happens to ``t``."""
    return t, t.detach(), t.data_ptr(), t.dtype


def _unchanged(watched) -> bool:
    """Every tensor still has the storage, offset, shape, strides, address and dtype it was planned
    with (``is_set_to`` compares the first four in one call: ``.data = x.data.t()`` keeps the
    address and the version counter, so neither alone sees it)."""
    for t, alias, address, dtype in watched:
        if t.data_ptr() != address or t.dtype is not dtype or not t.is_set_to(alias):
            return False
    return True


class GroupedMatmulPlan:
    """``grouped_matmul`` in two steps: the host work once, then as many launches as you like.

    Building the plan validates the lists, allocates every C_i, packs the per-problem metadata
    (pointers, sizes, strides) and copies it to the device; :meth:`run` only launches the kernel
    and returns the same C_i tensors, overwritten.  This is how the pointer-array design is meant
    to be used when the same matrices are multiplied again and again (a layer called every step,
    a benchmark): the host work, tens to hundreds of microseconds of Python, is paid once, like
    the pointer arrays the tutorial builds once before timing its kernel.

    The plan holds the A_i and B_i tensors (the kernel only has their addresses): changing their
    values in place between runs is fine, replacing them needs a new plan.  It also holds its C_i
    (and each run refills the list it returns), so a caller replacing or dropping a returned
    tensor never frees memory the kernel writes.  Each :meth:`run` checks that every input and
    output still has the storage, address, shape, strides, offset and dtype it was planned with
    (``a.data = ...``, even ``a.data = a.data.t()``, ``a.resize_(...)`` or ``a.set_(...)``
    change them) and raises ValueError naming the tensor otherwise.

    On a GPU the launch itself is fixed too: the first :meth:`run` tunes (if needed) and keeps
    the compiled kernel with its arguments (:class:`~gemm_kernels._triton_compat.BoundLaunch`); later
    runs call its C launcher directly, skipping the tens of microseconds of Python a Triton
    launch spends binding ~20 arguments and looking the kernel up.

    ``cuda_graph=True`` (GPU only) goes one step further: the plan runs the kernel once (tuning
    it if needed), then records that launch in a CUDA graph, and :meth:`run` replays the graph:
    no Python launch code at all.  Same kernel, same config, same outputs.
    """

    def __init__(self, group_a, group_b, *, tma=False, cuda_graph=False):
        if not isinstance(cuda_graph, bool):
            raise TypeError(f"cuda_graph must be True or False, got {cuda_graph!r}")
        if cuda_graph and not runtime.on_gpu():
            raise ValueError("cuda_graph=True needs a CUDA GPU (the interpreter has no graphs to record); "
                             "use cuda_graph=False")
        if tma is True:
            runtime.require_tma("grouped_matmul(tma=True)", USE_POINTER_PATH)
        (self.shapes, self._returned, self._problems, self._tile_starts, facts,
         self._total_tiles) = _prepare(group_a, group_b, tma, BLOCK_SHAPES)
        self.tma = tma
        checks.check_no_lazy_views({f"{name}[{i}]": t for name, group in (("group_a", group_a), ("group_b", group_b))
                                    for i, t in enumerate(group)})
        self._outputs = tuple(self._returned)  # the plan's own C_i: a caller's list edits cannot free them
        self._names = [f"{name}[{i}]" for name, tensors in (("group_a", group_a), ("group_b", group_b),
                                                            ("outputs", self._outputs))
                       for i in range(len(tensors))]
        tensors = [*group_a, *group_b, *self._outputs]
        self._planned = [_layout(t) for t in tensors]
        self._watched = [_watch(t) for t in tensors]  # also keeps the memory the addresses point to alive
        dtype = group_a[0].dtype
        self._kwargs = dict(num_problems=len(self.shapes), **_autotune_key(self.shapes), DTYPE=TL_DTYPES[dtype],
                            USE_TMA=tma, **facts, WIDEN=widen_for_dot(dtype), TRACE=False)
        total_tiles = self._total_tiles
        self._grid = lambda meta: (min(runtime.num_sms(), total_tiles[(meta["BLOCK_M"], meta["BLOCK_N"])]),)
        # no tile when every problem has M_i = 0 or N_i = 0: nothing to launch or record
        self._has_tiles = next(iter(self._total_tiles.values())) > 0
        self._bound = None  # the launch with every argument fixed (launch.BoundLaunch), from the first run
        self._graph = self._record_graph() if cuda_graph and self._has_tiles else None

    def _launch(self) -> None:
        if not self._has_tiles:
            return
        if self.tma:
            ensure_tma_allocator()
        args = (self._problems, self._tile_starts, self._problems)
        if runtime.interpreted():  # nothing compiled to keep: every run is a plain launch
            _grouped_matmul_tuned[self._grid](*args, **self._kwargs)
            return
        if self._bound is None:  # first launch: tune if needed, then keep the compiled kernel
            self._bound = _grouped_matmul_tuned.bind(self._grid, *args, **self._kwargs)
        self._bound()

    def _record_graph(self):
        self._launch()  # tunes and compiles outside the recording (neither may happen inside it)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # records on a side stream; TMA scratch comes from the graph's pool
            self._launch()
        return graph

    def _check_inputs_unchanged(self) -> None:
        if _unchanged(self._watched):
            return
        for name, (t, alias, _, _), planned in zip(self._names, self._watched, self._planned):
            now = _layout(t)
            if now != planned or not t.is_set_to(alias):
                what = ", ".join(f for f, x, y in zip(_LAYOUT_FIELDS, now, planned) if x != y) or "storage"
                role = "writes its results to" if name.startswith("outputs") else "reads"
                raise ValueError(f"{name} changed since this GroupedMatmulPlan was built ({what}; e.g. by "
                                 f"`.data = ...`, `.resize_()` or `.set_()`): the plan {role} the memory and layout "
                                 "it was built with, so it would use freed or wrong memory. Build a new plan for the "
                                 "new tensors (values may change in place, the storage and layout may not)")

    def run(self) -> list:
        """Launch the kernel (or replay its graph); returns the list of C_i (the plan's own tensors,
        overwritten; the same list every run, refilled).  ValueError when an input's or output's
        storage or layout changed since planning."""
        self._check_inputs_unchanged()
        if self._graph is not None:
            self._graph.replay()
        else:
            self._launch()
        self._returned[:] = self._outputs  # a caller may have replaced or removed elements
        return self._returned

    @property
    def outputs(self) -> list:
        """The list of C_i that :meth:`run` fills and returns."""
        return self._returned


def grouped_matmul(group_a, group_b, *, tma=False):
    """``[A_i @ B_i for each i]`` in one persistent launch; each C_i in the inputs' dtype.

    group_a: list of A_i [M_i, K_i]; group_b: list of B_i [K_i, N_i]; any sizes (0 included)
    and any strides per problem; fp16, bf16 or fp32 (TF32 on a GPU), one dtype and device for all.

    ``tma=True`` loads A_i and B_i through tensor descriptors (TMA on sm_90+; RuntimeError on an
    older GPU).  Every A_i must then be readable with one layout (all row-major, or all column-
    major, i.e. transposed views), likewise every B_i, with 16-byte-aligned strides and bases;
    otherwise a ValueError names the first matrix that is not.  C_i is stored through a
    descriptor when its rows are 16-byte aligned (N_i * element size), with masked pointer
    stores otherwise.

    Speed without TMA: loads are vectorized only as far as the launcher can prove alignment for
    the whole group (shared layout, sizes that are multiples of 8 or 16); ragged sizes are still
    correct but read element by element.  TMA has no such cliff.

    Each call redoes the host work (checks, metadata, one copy); :class:`GroupedMatmulPlan` does
    it once for repeated products of the same matrices.
    """
    group_a, group_b = (list(checks.resolve_lazy_views(*g)) if isinstance(g, (list, tuple)) else g
                        for g in (group_a, group_b))
    return GroupedMatmulPlan(group_a, group_b, tma=tma).run()


def grouped_matmul_ref(group_a, group_b, *, out_dtype=None):
    """Plain-torch reference: each product in float64, returned in the inputs' dtype
    (``out_dtype=torch.float64`` keeps full precision for error measurements)."""
    checks.check_group_inputs(group_a, group_b)
    return [(a.double() @ b.double()).to(out_dtype or a.dtype) for a, b in zip(group_a, group_b)]
