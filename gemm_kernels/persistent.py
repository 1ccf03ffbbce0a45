"""Persistent GEMM kernels: a fixed number of programs, each looping over many output tiles.

``matmul`` (one program per tile) lets the hardware schedule programs in waves; when the tile
count is not a multiple of what fits on the GPU, the last wave runs half empty.  A persistent
kernel launches ``min(num_sms, num_tiles)`` programs once and each walks the tiles
``pid, pid + NUM_PROGRAMS, pid + 2 * NUM_PROGRAMS, ...`` (``tiles.persistent_schedule`` is the
numpy mirror; ``trace_persistent_tiles`` proves the kernel does exactly that).

Two kernels, same schedule, same epilogue (bias + activation on the fp32 accumulator):

``matmul_persistent``  pointer loads with masks, any strides.
``matmul_tma``         Hopper's Tensor Memory Accelerator: tensor descriptors built in the kernel
                       (``tl.make_tensor_descriptor``).  The hardware bounds-checks every block
                       (zero fill on reads, clipped writes), so ragged shapes need no masks; in
                       exchange every input needs a unit-stride dimension and 16-byte aligned base
                       and strides (``check_tma_compatible`` says what is wrong and how to fix it).

Three layers as in ``matmul.py``: ``@triton.jit`` kernels, validated launchers, configs in
``configs.persistent_configs`` / ``configs.tma_configs``.  ``compile_examples()`` feeds the compile view.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _validate, configs, runtime
from .epilogue import apply_activation, mma_operand, widen_for_dot
from .matmul import _check_matmul_inputs, k_loop_pointers, matmul
from .runtime import TMA_ALIGN_BYTES
from .tiles import tile_coords

#: columns of ``trace_persistent_tiles``' result, per tile index (the last four of tiles.SCHEDULE_FIELDS)
TRACE_FIELDS = ("program", "step", "pid_m", "pid_n")


# ----------------------------------------------------------------------------- device helpers
@triton.jit
def _record_tile(trace_ptr, tile, pid, step, pid_m, pid_n):
    """TRACE mode: row ``tile`` of the trace gets (program, step, pid_m, pid_n)."""
    row = trace_ptr + 4 * tile
    tl.store(row, pid)
    tl.store(row + 1, step)
    tl.store(row + 2, pid_m)
    tl.store(row + 3, pid_n)


@triton.jit
def _load_bias(bias_ptr, off_n, N, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    """The tile's BLOCK_N bias values (0 without a bias).  Issued before the K loop, so the load's
    latency hides behind the MMAs instead of stalling the epilogue (one register per thread)."""
    offs_n = off_n + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        return tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    return tl.zeros((BLOCK_N,), dtype=tl.float32)


@triton.jit
def _bias_and_activation(acc, bias, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        acc += bias[None, :]
    return apply_activation(acc, ACTIVATION)


@triton.jit
def _store_tile(acc, c_ptr, off_m, off_n, M, N, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Masked pointer store of one C tile (the rows/columns past M/N are dropped)."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# ----------------------------------------------------------------------------- persistent, pointer loads
@triton.jit
def _matmul_persistent_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    step = 0  # how many tiles this program has done so far (TRACE records it)
    # The grid has at most NUM_PROGRAMS programs, so striding by NUM_PROGRAMS visits every tile once.
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
        if TRACE:
            _record_tile(trace_ptr, tile, pid, step, pid_m, pid_n)
        # As in matmul: rows/columns past the edge wrap (% M, % N) so loads need no M/N mask
        # (their results are never stored); only the K tail is masked to zero.  No contiguity
        # hints: after the wrap they would be false (see matmul.py).
        offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        bias = _load_bias(bias_ptr, pid_n * BLOCK_N, N, BLOCK_N, HAS_BIAS)
        acc = k_loop_pointers(a_ptr, b_ptr, offs_m, offs_n, K, stride_am, stride_ak, stride_bk, stride_bn,
                              BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)
        acc = _bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
        _store_tile(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        step += 1


# ----------------------------------------------------------------------------- TMA building blocks
@triton.jit
def tma_input_descriptors(a_ptr, b_ptr, M, N, K, stride_a, stride_b,
                          A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Descriptors for A and B.  A descriptor names a 2-D array in global memory (base, shape,
    strides) and the block a load moves.  Its last dimension must be the unit-stride one: a
    column-major A (A^T contiguous) is described as the [K, M] array it really is, and each
    loaded block is transposed in registers (free: tl.dot reads either orientation from shared
    memory)."""
    if A_COL_MAJOR:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_a, 1],
                                           block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    if B_COL_MAJOR:  # B^T contiguous, e.g. an nn.Linear weight [N, K]
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    return a_desc, b_desc


@triton.jit
def tma_output_descriptor(c_ptr, M, N, stride_c, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          EPILOGUE_SUBTILE: tl.constexpr):
    """Descriptor for C; with EPILOGUE_SUBTILE its block is half a tile wide (two stores per tile)."""
    if EPILOGUE_SUBTILE:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_c, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_c, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    return c_desc


@triton.jit
def tma_k_loop(a_desc, b_desc, off_m, off_n, k_first, k_end, A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr,
               WIDEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """fp32 sum over K blocks ``k_first <= ki < k_end`` of one C tile's products, read through TMA.
    No masks: the TMA unit zero-fills whatever lies past M, N or K."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_first, k_end):
        off_k = ki * BLOCK_K
        if A_COL_MAJOR:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if B_COL_MAJOR:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        acc = tl.dot(mma_operand(a, WIDEN), mma_operand(b, WIDEN), acc)
    return acc


@triton.jit
def tma_store_tile(acc, c_desc, off_m, off_n, BLOCK_N: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    """TMA store of one C tile (clipped at M and N by the hardware), in two halves with
    EPILOGUE_SUBTILE: each half needs half the registers and shared memory of the whole."""
    if EPILOGUE_SUBTILE:
        halves = tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([off_m, off_n], left.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def tma_finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn,
                    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, C_TMA: tl.constexpr,
                    EPILOGUE_SUBTILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Epilogue (bias, activation) and store of one C tile.  ``c_out`` is C's descriptor when
    C_TMA (the TMA store clips the rows/columns past M and N), else C's pointer: C's rows are
    not 16-byte aligned (N * itemsize % 16 != 0) and a masked pointer store writes the tile."""
    acc = _bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
    if C_TMA:
        tma_store_tile(acc, c_out, off_m, off_n, BLOCK_N, EPILOGUE_SUBTILE)
    else:
        _store_tile(acc, c_out, off_m, off_n, M, N, stride_c, stride_cn, BLOCK_M, BLOCK_N)


# ----------------------------------------------------------------------------- persistent, TMA
@triton.jit
def _matmul_tma_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, trace_ptr,
    M, N, K,
    stride_a, stride_b, stride_c,  # the one non-unit stride of each matrix (in elements)
    stride_cn,  # C's column stride, used only by the pointer-store fallback (C_TMA=False)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
    A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr, C_TMA: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr, TRACE: tl.constexpr,
    FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
):
    a_desc, b_desc = tma_input_descriptors(a_ptr, b_ptr, M, N, K, stride_a, stride_b,
                                           A_COL_MAJOR, B_COL_MAJOR, BLOCK_M, BLOCK_N, BLOCK_K)
    if C_TMA:
        c_out = tma_output_descriptor(c_ptr, M, N, stride_c, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE)
    else:
        c_out = c_ptr

    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    step = 0
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
        if TRACE:
            _record_tile(trace_ptr, tile, pid, step, pid_m, pid_n)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        bias = _load_bias(bias_ptr, off_n, N, BLOCK_N, HAS_BIAS)
        acc = tma_k_loop(a_desc, b_desc, off_m, off_n, 0, k_tiles, A_COL_MAJOR, B_COL_MAJOR, WIDEN,
                         BLOCK_M, BLOCK_N, BLOCK_K)
        tma_finish_tile(acc, bias, c_out, off_m, off_n, M, N, stride_c, stride_cn, HAS_BIAS, ACTIVATION, C_TMA,
                        EPILOGUE_SUBTILE, BLOCK_M, BLOCK_N)
        step += 1


# Autotune keys (configs.SINGLE_GEMM_KEY): sizes, order, epilogue and layout flags, never pointers.
_persistent_tuned = configs.TunedKernel(_matmul_persistent_kernel, configs.persistent_configs(),
                                       key=configs.SINGLE_GEMM_KEY)
_tma_tuned = configs.TunedKernel(_matmul_tma_kernel, configs.tma_configs(),
                                key=[*configs.SINGLE_GEMM_KEY, "A_COL_MAJOR", "B_COL_MAJOR"])


# ----------------------------------------------------------------------------- TMA layout checks
def _describe_strides(x: torch.Tensor) -> str:
    return f"shape {tuple(x.shape)}, strides {tuple(x.stride())} (elements of {x.element_size()} bytes)"


def tma_layout(x: torch.Tensor, name: str) -> tuple[bool, int]:
    """How a TMA descriptor sees the 2-D tensor ``x``: ``(col_major, outer_stride)``.

    Row-major (unit column stride) is described as ``[rows, cols]``; column-major (unit row
    stride, e.g. a ``.t()`` view) as ``[cols, rows]``.  ``outer_stride`` is the other stride in
    elements.  Raises ValueError naming ``name``, the rule broken and a fix, when neither works.
    """
    rows, cols = x.shape
    itemsize = x.element_size()
    # (col_major, outer stride, length of the unit-stride dimension, what a "line" is called).
    # A dimension of size 1 is never stepped over, so its stride is free: use an aligned one.
    layouts = []
    if x.stride(1) == 1 or cols == 1:
        layouts.append((False, x.stride(0) if rows > 1 else runtime.tma_row_length(cols, itemsize), cols, "row"))
    if x.stride(0) == 1 or rows == 1:
        layouts.append((True, x.stride(1) if cols > 1 else runtime.tma_row_length(rows, itemsize), rows, "column"))
    problems = [] if layouts else ["neither of its strides is 1 (TMA moves contiguous rows)"]
    for col_major, outer, line_len, line in layouts:
        if outer * itemsize % TMA_ALIGN_BYTES:
            problems.append(f"its {line} stride is {outer * itemsize} bytes, not a multiple of {TMA_ALIGN_BYTES}")
        elif outer < line_len:
            problems.append(f"its {line}s overlap ({line} stride {outer} < {line} length {line_len})")
        elif x.data_ptr() % TMA_ALIGN_BYTES:
            problems = [f"its first element's address is not {TMA_ALIGN_BYTES}-byte aligned "
                        f"(address % {TMA_ALIGN_BYTES} = {x.data_ptr() % TMA_ALIGN_BYTES}, storage offset "
                        f"{x.storage_offset()} elements)"]
            break
        else:
            return col_major, outer
    raise ValueError(f"{name} cannot be read by TMA: {'; '.join(problems)} [{name} has {_describe_strides(x)}]. "
                     f"{_tma_fix_hint(x, name)}")


def _tma_fix_hint(x: torch.Tensor, name: str) -> str:
    rule = ("matmul_tma needs one unit stride and 16-byte aligned base address and other stride: "
            f"copy {name} into such storage with gemm_kernels.persistent.tma_aligned({name}), "
            "or use matmul_persistent (pointer loads, any strides).")
    # A fresh row-major copy is aligned when one row fills whole 16-byte units.
    if x.shape[1] * x.element_size() % TMA_ALIGN_BYTES == 0 or x.shape[0] == 1:
        copy = f"{name}.clone()" if x.is_contiguous() else f"{name}.contiguous()"
        return f"{copy} would fix it. Otherwise: {rule}"
    return rule


def tma_aligned(x: torch.Tensor) -> torch.Tensor:
    """A copy of 2-D ``x`` that TMA can read: row-major, with each row padded to 16 bytes.

    The result has ``x``'s shape and values; its row stride is rounded up (the padding is
    never read: TMA clips every block at the logical shape)."""
    _validate.check_tensor(x, "x", 2)
    rows, cols = x.shape
    storage = torch.zeros((rows, runtime.tma_row_length(cols, x.element_size())), dtype=x.dtype, device=x.device)
    out = storage[:, :cols]
    out.copy_(x)
    return out


# ----------------------------------------------------------------------------- launchers
def _check_num_programs(num_programs):
    if num_programs is None:
        return runtime.num_sms()
    return _validate.check_int(num_programs, "num_programs")


def _config_kwargs(config, kind):
    """Explicit config -> kernel kwargs: its blocks and switches (unset switches off), warps, stages."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"config must be a triton.Config, got {type(config).__name__}")
    missing = {"BLOCK_M", "BLOCK_N", "BLOCK_K"} - set(config.kwargs)
    if missing:
        raise ValueError(f"config must set BLOCK_M, BLOCK_N and BLOCK_K; missing {sorted(missing)}")
    switches = {**configs.PERSISTENT_LOOP_DEFAULTS, **({"EPILOGUE_SUBTILE": False} if kind == "tma" else {})}
    configs.check_explicit_config(config, allowed_switches=switches)
    return {**switches, **config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def _persistent_grid(M, N, num_programs):
    return lambda meta: (min(num_programs, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)


def _persistent_args(a, b, c, bias, trace, *, order, group_size_m, num_programs, activation):
    """Every argument of ``_matmul_persistent_kernel`` except the config's (blocks, loop switches)."""
    M, K = a.shape
    N = b.shape[1]
    return dict(
        a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, trace_ptr=trace if trace is not None else c,
        M=M, N=N, K=K,
        stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_cm=c.stride(0), stride_cn=c.stride(1),
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m, NUM_PROGRAMS=num_programs,
        HAS_BIAS=bias is not None, ACTIVATION=activation, WIDEN=widen_for_dot(a.dtype), TRACE=trace is not None,
    )


def _tma_args(a, b, c, bias, trace, *, order, group_size_m, num_programs, activation):
    """Every argument of ``_matmul_tma_kernel`` except the config's; checks TMA can read a and b."""
    M, K = a.shape
    N = b.shape[1]
    a_col_major, stride_a = tma_layout(a, "a")
    b_col_major, stride_b = tma_layout(b, "b")
    # C is ours (contiguous, fresh allocation): TMA stores need its rows 16-byte aligned too.
    c_tma = c.stride(1) == 1 and c.data_ptr() % TMA_ALIGN_BYTES == 0 and (
        c.stride(0) * c.element_size() % TMA_ALIGN_BYTES == 0 or M == 1)
    stride_c = c.stride(0) if (M > 1 or not c_tma) else runtime.tma_row_length(N, c.element_size())
    return dict(
        a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, trace_ptr=trace if trace is not None else c,
        M=M, N=N, K=K, stride_a=stride_a, stride_b=stride_b, stride_c=stride_c, stride_cn=c.stride(1),
        GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m, NUM_PROGRAMS=num_programs,
        A_COL_MAJOR=a_col_major, B_COL_MAJOR=b_col_major, C_TMA=c_tma,
        HAS_BIAS=bias is not None, ACTIVATION=activation, WIDEN=widen_for_dot(a.dtype), TRACE=trace is not None,
    )


def _launch(kind, a, b, *, activation, bias, order, group_size_m, num_programs, config, trace=None):
    """Shared body of both launchers (and of the trace helper).  Returns C."""
    bias, group_size_m = _check_matmul_inputs(a, b, order, group_size_m, activation, bias)
    num_programs = _check_num_programs(num_programs)
    config_kwargs = None if config is None else _config_kwargs(config, kind)
    M, K = a.shape
    N = b.shape[1]
    if kind == "tma":
        runtime.require_tma("matmul_tma", "Use matmul_persistent (same schedule, pointer loads) instead.")
    if M == 0 or N == 0 or K == 0:  # no tile or an empty sum: matmul already handles it like torch
        return matmul(a, b, activation=activation, bias=bias)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    make_args = _tma_args if kind == "tma" else _persistent_args
    args = make_args(a, b, c, bias, trace, order=order, group_size_m=group_size_m,
                     num_programs=num_programs, activation=activation)
    if kind == "tma":
        runtime.ensure_tma_allocator()
    grid = _persistent_grid(M, N, num_programs)
    if config_kwargs is None:
        (_tma_tuned if kind == "tma" else _persistent_tuned)[grid](**args)
    else:
        (_matmul_tma_kernel if kind == "tma" else _matmul_persistent_kernel)[grid](**args, **config_kwargs)
    return c


def matmul_persistent(a, b, *, activation=None, bias=None, order="grouped", group_size_m=8,
                      num_programs=None, config=None):
    """``activation(a @ b + bias)`` with a persistent kernel: ``min(num_programs, tiles)`` programs
    each loop over the tiles ``pid, pid + num_programs, ...`` of C (``tiles.persistent_schedule``).

    Same contract as :func:`gemm_kernels.matmul` (any M, N, K >= 0 and strides; fp16/bf16/fp32;
    ``order`` "grouped" or "row_major").  ``num_programs`` defaults to the SM count
    (``runtime.num_sms()``).  ``config`` (a ``triton.Config``) skips autotuning and runs that config.
    """
    return _launch("persistent", a, b, activation=activation, bias=bias, order=order,
                   group_size_m=group_size_m, num_programs=num_programs, config=config)


def matmul_tma(a, b, *, activation=None, bias=None, order="grouped", group_size_m=8, num_programs=None,
               config=None):
    """Persistent matmul whose A/B tiles (and C tiles) move through TMA tensor descriptors.

    Like :func:`matmul_persistent`, plus what TMA demands of its inputs: each of ``a`` and ``b``
    must be row-major or column-major (one stride equal to 1) with the other stride and the base
    address 16-byte aligned; anything else raises ValueError saying which tensor and why
    (``tma_aligned(x)`` makes a readable copy).  C is written by TMA when its rows are 16-byte
    aligned (``N * itemsize % 16 == 0``) and by masked stores otherwise.

    Needs sm_90+ on a GPU: on an older GPU it raises RuntimeError (no silent fallback, so a
    benchmark never reports pointer-kernel numbers under the TMA name).  Runs in the interpreter.
    """
    return _launch("tma", a, b, activation=activation, bias=bias, order=order,
                   group_size_m=group_size_m, num_programs=num_programs, config=config)


def trace_persistent_tiles(M, N, K=16, *, tma=False, block_m=None, block_n=None, block_k=None,
                           order="grouped", group_size_m=8, num_programs=None, dtype=torch.float16):
    """Run the real persistent kernel (TMA one if ``tma``) with tracing on and return what it did.

    Returns an int ``[num_tiles, 4]`` tensor indexed by tile: columns :data:`TRACE_FIELDS`
    ``(program, step, pid_m, pid_n)``: the program that computed the tile, how many tiles it
    had done before, and the tile's coordinates.  Poisoned with -1 first, so a tile no program
    reached shows.  Compare with ``tiles.persistent_schedule(...)[:, 1:6]`` minus the problem column.
    """
    blocks = configs.INTERPRETER_BLOCKS
    bm, bn, bk = configs.blocks_or_defaults(blocks, block_m, block_n, block_k)
    M, N, K = (_validate.check_int(v, name, minimum=0) for v, name in ((M, "M"), (N, "N"), (K, "K")))
    a = torch.randn(M, K).to(runtime.DEVICE, dtype)
    b = torch.randn(K, N).to(runtime.DEVICE, dtype)
    if tma:  # any M, N: give TMA 16-byte aligned rows
        a, b = tma_aligned(a), tma_aligned(b)
    num_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    trace = torch.full((num_tiles, 4), -1, dtype=torch.int32, device=a.device)
    config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
                           num_warps=4, num_stages=1 if runtime.interpreted() else 3)
    _launch("tma" if tma else "persistent", a, b, activation=None, bias=None, order=order,
            group_size_m=group_size_m, num_programs=num_programs, config=config, trace=trace)
    return trace.cpu()


# ----------------------------------------------------------------------------- compile view registry
def compile_examples():
    """Representative launches for ``compile_view.compile_all_kernels`` (see its registry protocol).

    Built from the launchers' own argument builders on small CPU tensors whose sizes are
    multiples of 16, so the compiled code is specialised like a real 4096-sized launch."""
    from .compile_view import KernelExample

    dev = "cpu"
    size = 256
    a = torch.zeros(size, size, dtype=torch.float16, device=dev)
    b_t = torch.zeros(size, size, dtype=torch.float16, device=dev).t()  # B^T contiguous: nn.Linear's weight
    c = torch.zeros(size, size, dtype=torch.float16, device=dev)
    bias = torch.zeros(size, dtype=torch.float16, device=dev)
    common = dict(order="grouped", group_size_m=8, num_programs=132, activation="gelu")
    pers_cfg = configs.persistent_configs(gpu=True)[0]
    tma_cfgs = configs.tma_configs(gpu=True)
    plain_tma = next(c for c in tma_cfgs if not c.kwargs["EPILOGUE_SUBTILE"] and not c.kwargs["FLATTEN"])
    subtiled_tma = next((c for c in tma_cfgs if c.kwargs["EPILOGUE_SUBTILE"]), plain_tma)
    return [
        KernelExample(
            "matmul_persistent[fp16, gelu+bias]", _matmul_persistent_kernel,
            _persistent_args(a, b_t, c, bias, None, **common), pers_cfg,
            targets=(90, 80), expect={90: ("wgmma",), 80: ("mma.sync",)},
        ),
        KernelExample(
            "matmul_tma[fp16, A row-major, B^T, gelu+bias]", _matmul_tma_kernel,
            _tma_args(a, b_t, c, bias, None, **common), plain_tma,
            targets=(90,), expect={90: ("wgmma", "cp.async.bulk.tensor")},
        ),
        KernelExample(
            "matmul_tma[bf16, A^T, B row-major, epilogue subtile]", _matmul_tma_kernel,
            _tma_args(a.to(torch.bfloat16).t(), a.to(torch.bfloat16), c.to(torch.bfloat16), None, None,
                      **{**common, "activation": None}),
            subtiled_tma, targets=(90,), expect={90: ("wgmma", "cp.async.bulk.tensor")},
        ),
    ]
