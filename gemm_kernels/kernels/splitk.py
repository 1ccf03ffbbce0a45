"""Split-K: each tile's K loop cut into ``S`` pieces run by ``S`` programs, then added up.

With few tiles and a long K (512 x 512 x 16384 is 64 tiles of 64 x 64 for 132 SMs), one program
per tile leaves most SMs idle however fast each runs.  Split-K launches ``tiles x S`` programs
(``grid = (tiles, S)``): program ``(t, s)`` runs K blocks ``[s * per_split, (s + 1) * per_split)``
of tile ``t`` and leaves its fp32 partial sum in a workspace slot.  The fix-up needs no waiting:
every piece bumps the tile's arrival counter after its store, and the piece that arrives last
adds the ``S`` partials *in split order* and runs the epilogue.  The sum's order never depends
on which piece came last, so the result is bitwise the same on every run (an ``atomic_add``
into C would be faster by a pass and give a different rounding from run to run).

Compared with Stream-K (``streamk.py``): split-K cuts every tile the same way and needs no
persistent loop, ticket or spin; Stream-K balances K iterations exactly over a fixed number of
programs.  cuBLAS does split-K in two kernels (``...splitK...`` then ``splitKreduce_kernel``,
as the profiler names them); here the reduction is the last piece's epilogue.

Pointer loads by default: any GPU Triton supports, and the interpreter.  ``tma=True`` reads A
and B through TMA instead (``tma.k_loop``, the loop ``matmul_tma`` runs; sm_90+), measured no
faster (PERF_NOTES entry 30; the hypothesis: each short-lived program builds its descriptors
first).  Forward only.  ``tiles.splitk_default_splits`` is the default rule; ``split_k=`` sets
any other.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .. import runtime
from ..models.tiles import cdiv, splitk_default_splits
from . import checks, configs, launches, tma
from .epilogue import bias_and_activation, load_bias, store_tile_masked, widen_for_dot
from .matmul import k_loop_pointers, matmul
from .tiles import tile_coords


@triton.jit(do_not_specialize=configs.ROWS)  # column-major A: _splitk_tuned_rows_specialised
def _matmul_splitk_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    partial_ptr,  # fp32 [tiles * S * BLOCK_M * BLOCK_N]: one slot per piece
    count_ptr,  # int32 [tiles]: pieces arrived per tile; zero, and left zero
    M, N, K,
    split_request,  # the caller's split_k (-1: the default rule): only a key of the tuning cache
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    stride_a, stride_b,  # TMA_LOADS: each matrix's one non-unit stride, as its descriptor reads it
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUPED: tl.constexpr, GROUP_SIZE_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, WIDEN: tl.constexpr,
    TMA_LOADS: tl.constexpr, A_COL_MAJOR: tl.constexpr, B_COL_MAJOR: tl.constexpr,  # TMA: how each is read
):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    num_splits = tl.num_programs(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUPED, GROUP_SIZE_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # wrapped, as in matmul: never stored
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N

    # this piece's K blocks (the last piece may be shorter, or empty: then its sum is zero)
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_tiles, num_splits)
    if TMA_LOADS:
        a_desc, b_desc = tma.input_descriptors(a_ptr, b_ptr, M, N, K, stride_a, stride_b, A_COL_MAJOR, B_COL_MAJOR,
                                               BLOCK_M, BLOCK_N, BLOCK_K)
        acc = tma.k_loop(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, split * per_split,
                         tl.minimum((split + 1) * per_split, k_tiles), A_COL_MAJOR, B_COL_MAJOR, WIDEN,
                         BLOCK_M, BLOCK_N, BLOCK_K)
    else:
        k_start = split * per_split * BLOCK_K
        k_len = tl.minimum(per_split * BLOCK_K, K - k_start)
        acc = k_loop_pointers(a_ptr + k_start * stride_ak, b_ptr + k_start * stride_bk, offs_m, offs_n, k_len,
                              stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, WIDEN)

    tile_offsets = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if num_splits > 1:
        # 64-bit: tiles x splits x BLOCK_M x BLOCK_N floats pass 2^31 (e.g. 8256^2 in 32 pieces, 8.7 GB)
        slots = partial_ptr + tile.to(tl.int64) * num_splits * (BLOCK_M * BLOCK_N)
        tl.store(slots + split * (BLOCK_M * BLOCK_N) + tile_offsets, acc)
        tl.debug_barrier()  # every thread's stores are issued before the count goes up...
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")  # ...and visible with it
        last = arrived == num_splits - 1
        if last:
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # left zero for the next launch
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(0, num_splits):  # split order, whichever piece came last: deterministic
                acc += tl.load(slots + s * (BLOCK_M * BLOCK_N) + tile_offsets, cache_modifier=".cg")
    else:
        last = True
    if last:
        bias = load_bias(bias_ptr, pid_n * BLOCK_N, N, BLOCK_N, HAS_BIAS)
        acc = bias_and_activation(acc, bias, HAS_BIAS, ACTIVATION)
        store_tile_masked(acc, c_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


_splitk_tuned = configs.TunedKernel(_matmul_splitk_kernel, configs.splitk_configs(),
                                   key=[*configs.SINGLE_GEMM_KEY, "split_request", "TMA_LOADS", "A_COL_MAJOR",
                                        "B_COL_MAJOR"])
_splitk_tuned_rows_specialised = configs.TunedKernel(configs.rows_specialised(_matmul_splitk_kernel),
                                                    configs.splitk_configs(), key=_splitk_tuned.keys, variant="-rows")


def _splits(M, N, K, block_m, block_n, block_k, split_k) -> int:
    num_tiles = cdiv(M, block_m) * cdiv(N, block_n)
    k_tiles = cdiv(K, block_k)
    if split_k is None:
        return splitk_default_splits(num_tiles, k_tiles, runtime.num_sms())
    return min(split_k, k_tiles)  # more pieces than K blocks would only add empty ones


def matmul_splitk(a, b, *, split_k=None, activation=None, bias=None, order="grouped", group_size_m=8, config=None,
                  tma=False):
    """``activation(a @ b + bias)`` with each tile's K loop split over ``split_k`` programs.

    Same contract as :func:`gemm_kernels.matmul` (any strides, fp16/bf16/fp32), forward only.
    ``split_k``: pieces per tile (1 = no split; at most one per K block: more ask for that); by default
    ``tiles.splitk_default_splits`` fills one wave of SMs when the tiles alone would not.
    Deterministic: the pieces are added in split order.  ``config``: an explicit
    ``triton.Config`` with BLOCK_M/N/K (no autotuning).  ``tma=True``: read a and b through
    TMA (sm_90+, TMA-readable layouts; raises saying why not)."""
    key = None
    if launches.keeping():
        key = launches.call_key((a, b, bias), (split_k, activation, order, group_size_m, launches.config_key(config),
                                               tma))
        out = _KEPT.run(key, a=a, b=b, bias=bias)  # checked before with this key: launch
        if out is not None:
            return out
    a, b, bias = checks.resolve_lazy_views(a, b, bias)
    bias, group_size_m = checks.check_matmul_inputs(a, b, order, group_size_m, activation, bias)
    if split_k is not None:  # past K (more than the K blocks) it asks for one piece per K block: so many
        split_k = min(checks.check_int(split_k, "split_k"), max(a.shape[1], 1))  # (int32 for the kernel)
    config_kwargs = None if config is None else configs.explicit_config_kwargs(config, "pointer")
    layouts = _tma_layouts(a, b, tma)
    M, K = a.shape
    N = b.shape[1]
    if M == 0 or N == 0 or K == 0:
        return matmul(a, b, activation=activation, bias=bias)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    candidates = [config] if config is not None else _splitk_tuned.configs  # the list, built once
    slots = max(cdiv(M, k["BLOCK_M"]) * cdiv(N, k["BLOCK_N"]) * _splits(M, N, K, k["BLOCK_M"], k["BLOCK_N"],
                                                                       k["BLOCK_K"], split_k) * k["BLOCK_M"] * k["BLOCK_N"]
                for k in (cfg.kwargs for cfg in candidates))
    tiles_max = max(cdiv(M, cfg.kwargs["BLOCK_M"]) * cdiv(N, cfg.kwargs["BLOCK_N"]) for cfg in candidates)
    device = a.device
    partials, counts = _workspace(slots, tiles_max, device)

    def grid(meta):
        return (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),
                _splits(M, N, K, meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"], split_k))

    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, partial_ptr=partials,
                count_ptr=counts, M=M, N=N, K=K, split_request=-1 if split_k is None else split_k, stride_am=a.stride(0), stride_ak=a.stride(1),
                stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0), stride_cn=c.stride(1),
                stride_a=layouts[1] if layouts else 0, stride_b=layouts[3] if layouts else 0,
                GROUPED=order == "grouped", GROUP_SIZE_M=group_size_m, HAS_BIAS=bias is not None,
                ACTIVATION=activation, WIDEN=widen_for_dot(a.dtype), TMA_LOADS=layouts is not None,
                A_COL_MAJOR=bool(layouts and layouts[0]), B_COL_MAJOR=bool(layouts and layouts[2]))
    if layouts is not None:
        runtime.ensure_tma_allocator()

    def workspace():  # per call: the buffers are kept per stream
        partials, counts = _workspace(slots, tiles_max, device)
        return {"partial_ptr": partials, "count_ptr": counts}

    rows_specialised = layouts is None and configs.column_major_rows(a)  # pointer loads along M
    tuned = _splitk_tuned_rows_specialised if rows_specialised else _splitk_tuned
    launches.launch_and_keep(_KEPT, key, tuned, grid, args, c,
                             {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out", "bias_ptr": "bias"},
                             config_kwargs=config_kwargs, uses_tma=layouts is not None, workspace=workspace)
    return c


def _tma_layouts(a, b, use_tma):
    """``(a_col_major, stride_a, b_col_major, stride_b)`` when the K loop reads through TMA
    (``use_tma``), None for pointer loads."""
    if not isinstance(use_tma, bool):
        raise TypeError(f"tma must be True or False, got {use_tma!r}")
    if not use_tma:
        return None
    runtime.require_tma("matmul_splitk(tma=True)", "Leave tma=False (pointer loads).")
    launcher, otherwise = "matmul_splitk(tma=True)", "leave tma=False (pointer loads, any strides)"
    # raises saying which tensor and why
    return (*tma.tma_layout(a, "a", launcher, otherwise), *tma.tma_layout(b, "b", launcher, otherwise))


_KEPT = launches.LaunchCache()


def _workspace(slots: int, tiles: int, device: torch.device, owner: str = "splitk"):
    """The fp32 partial-sum slots and the int32 arrival counts (zero, and left zero by every
    launch): kept per stream on a GPU (named after ``owner``: each kernel family its own), fresh in
    the interpreter."""
    if runtime.interpreted():
        return (torch.empty(slots, dtype=torch.float32, device=device),
                torch.zeros(tiles, dtype=torch.int32, device=device))
    index = device.index if device.index is not None else torch.cuda.current_device()
    return runtime.stream_buffers(index, ((f"{owner} partials", slots, torch.float32, False),
                                          (f"{owner} counts", tiles, torch.int32, runtime.ALWAYS_LEFT_ZERO)))
