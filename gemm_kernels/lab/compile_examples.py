"""One representative launch per kernel, for the compile view (:func:`registered_examples`).

Each example is built with the launcher's own argument builder where it has one, on small CPU
tensors whose sizes are multiples of 16 (like a real 4096-sized launch, so the compiled code is
specialised the same way), with a GPU ``triton.Config``, the capabilities it must compile for
(``targets``: ``(90, 80)``, or ``(90,)`` for TMA kernels) and ``expect``: capability -> highlight
names that must appear in its PTX.  ``tests/test_compile_view.py`` compiles them all.
"""

from __future__ import annotations

import torch
import triton

from .. import runtime
from ..kernels import configs, fp8, grouped, matmul, matmul_ws, moe, persistent, splitk, streamk
from . import compile_view
from .compile_view import CompileView, KernelExample, parse_target


def matmul_examples():
    """The one-program-per-tile kernel, Hopper and Ampere."""
    kernel = matmul._matmul_kernel
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


def persistent_examples():
    """Representative launches for :func:`compile_all_kernels`.

    Built from the launchers' own argument builders on small CPU tensors whose sizes are
    multiples of 16, so the compiled code is specialised like a real 4096-sized launch."""
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
            "matmul_persistent[fp16, gelu+bias]", persistent._matmul_persistent_kernel,
            persistent._persistent_args(a, b_t, c, bias, None, **common), pers_cfg,
            targets=(90, 80), expect={90: ("wgmma",), 80: ("mma.sync",)},
        ),
        KernelExample(
            "matmul_tma[fp16, A row-major, B^T, gelu+bias]", persistent._matmul_tma_kernel,
            persistent._tma_args(a, b_t, c, bias, None, **common), plain_tma,
            targets=(90,), expect={90: ("wgmma", "cp.async.bulk.tensor")},
        ),
        KernelExample(
            "matmul_tma[bf16, A^T, B row-major, epilogue subtile]", persistent._matmul_tma_kernel,
            persistent._tma_args(a.to(torch.bfloat16).t(), a.to(torch.bfloat16), c.to(torch.bfloat16), None, None,
                      **{**common, "activation": None}),
            subtiled_tma, targets=(90,), expect={90: ("wgmma", "cp.async.bulk.tensor")},
        ),
    ]


def streamk_examples():
    """Representative launch for :func:`compile_all_kernels`."""
    a = torch.zeros(256, 256, dtype=torch.float16)
    b_t = torch.zeros(256, 256, dtype=torch.float16).t()
    c = torch.zeros(256, 256, dtype=torch.float16)
    bias = torch.zeros(256, dtype=torch.float16)
    args = persistent._tma_args(a, b_t, c, bias, None, order="grouped", group_size_m=8, num_programs=132, activation="gelu")
    args.update(partial_ptr=torch.zeros(16, dtype=torch.float32), flag_ptr=torch.zeros(16, dtype=torch.int32),
                error_ptr=torch.zeros(8, dtype=torch.int32), sk_tiles_requested=-1, spin_limit=streamk.SPIN_LIMIT,
                SYSTEM_FENCE=True)
    return [KernelExample("matmul_streamk[fp16, A row-major, B^T, gelu+bias]", streamk._matmul_streamk_kernel, args,
                          configs.streamk_configs(gpu=True)[0], targets=(90,),
                          expect={90: ("wgmma", "cp.async.bulk.tensor", "atom")})]


def splitk_examples():
    """Split-K with pointer loads (Hopper and Ampere; the arrival count is an atomic) and with
    TMA loads (``tma=True``, Hopper)."""
    a = torch.zeros(256, 256, dtype=torch.float16)
    b_t = torch.zeros(256, 256, dtype=torch.float16).t()
    c = torch.zeros(256, 256, dtype=torch.float16)
    args = dict(a_ptr=a, b_ptr=b_t, c_ptr=c, bias_ptr=c, partial_ptr=torch.zeros(16, dtype=torch.float32),
                count_ptr=torch.zeros(16, dtype=torch.int32), M=256, N=256, K=256, split_request=-1,
                stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b_t.stride(0), stride_bn=b_t.stride(1),
                stride_cm=c.stride(0), stride_cn=c.stride(1), stride_a=0, stride_b=0, GROUPED=True, GROUP_SIZE_M=8,
                HAS_BIAS=False, ACTIVATION="relu", WIDEN=False, TMA_LOADS=False, A_COL_MAJOR=False, B_COL_MAJOR=False)
    tma_args = {**args, "stride_a": 256, "stride_b": 256, "TMA_LOADS": True, "B_COL_MAJOR": True}
    config = configs.splitk_configs(gpu=True)[0]
    return [KernelExample("matmul_splitk[fp16, B^T, relu]", splitk._matmul_splitk_kernel, args, config,
                          targets=(90, 80), expect={90: ("wgmma", "atom"), 80: ("mma.sync", "atom")}),
            KernelExample("matmul_splitk[fp16, tma, B^T, relu]", splitk._matmul_splitk_kernel, tma_args, config,
                          targets=(90,), expect={90: ("wgmma", "cp.async.bulk.tensor", "atom")})]


def grouped_examples():
    """Representative launches for :func:`compile_all_kernels`:
    the pointer path (Hopper and Ampere) and the TMA path with transposed B (Hopper)."""
    examples = []
    for name, dtype, tma, targets, expect in [
        ("grouped_matmul[fp16, pointers]", torch.float16, False, (90, 80),
         {90: ("wgmma", "cp.async"), 80: ("mma.sync", "cp.async")}),
        ("grouped_matmul[bf16, tma, B transposed]", torch.bfloat16, True, (90,),
         {90: ("wgmma", "cp.async.bulk.tensor", "tensormap", "mbarrier")}),
    ]:
        sizes = [(256, 128, 64), (64, 256, 128), (128, 128, 256), (192, 64, 128)]  # multiples of 16
        group_a = [torch.zeros(M, K, dtype=dtype, device=runtime.DEVICE) for M, _, K in sizes]
        group_b = [torch.zeros(N, K, dtype=dtype, device=runtime.DEVICE).t() if tma else
                   torch.zeros(K, N, dtype=dtype, device=runtime.DEVICE) for _, N, K in sizes]
        config = configs.grouped_configs(gpu=True)[0]
        block_shape = (config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"])
        shapes, _, problems, tile_starts, facts, _ = grouped._prepare(group_a, group_b, tma, [block_shape],
                                                                        runs_here=False)  # compiled only
        args = dict(problems_ptr=problems, tile_starts_ptr=tile_starts, trace_ptr=problems,
                    num_problems=len(shapes), **grouped._autotune_key(shapes), DTYPE=grouped.TL_DTYPES[dtype], STARTS_ROW=0,
                    USE_TMA=tma, **facts, WIDEN=False, TRACE=False)
        examples.append(KernelExample(name, grouped._grouped_matmul_kernel, args, config, targets=targets, expect=expect))
    return examples


def moe_examples():
    """Representative launches for :func:`compile_all_kernels`:
    pointer loads (Hopper and Ampere) and TMA with w a transposed view of [E, N, K] (Hopper)."""
    T, K, N, E = 512, 256, 256, 8  # multiples of 16, like real MoE sizes
    examples = []
    for name, dtype, tma, checked, targets, expect in [
        ("grouped_mm[fp16, pointers]", torch.float16, False, False, (90, 80), {90: ("wgmma",), 80: ("mma.sync",)}),
        ("grouped_mm[bf16, tma, w as [E, N, K]]", torch.bfloat16, True, False, (90,),
         {90: ("wgmma", "cp.async.bulk.tensor", "tensormap", "mbarrier")}),
        # the default call's variant: offs checked on the device, a bad one recorded for the host
        ("grouped_mm[bf16, tma, offs checked on the device]", torch.bfloat16, True, True, (90,),
         {90: ("wgmma", "cp.async.bulk.tensor")}),
    ]:
        x = torch.zeros(T, K, dtype=dtype, device=runtime.DEVICE)
        w = (torch.zeros(E, N, K, dtype=dtype, device=runtime.DEVICE).transpose(1, 2) if tma
             else torch.zeros(E, K, N, dtype=dtype, device=runtime.DEVICE))
        out = torch.zeros(T, N, dtype=dtype, device=runtime.DEVICE)
        offs = torch.arange(1, E + 1, dtype=torch.int32, device=runtime.DEVICE) * (T // E)
        flags = moe._plan_tma(x, w, out, tma, check_gpu=False)
        args = dict(x_ptr=x, w_ptr=w, out_ptr=out, offs_ptr=offs, error_ptr=offs, trace_ptr=offs, sx_ptr=offs, sw_ptr=offs,
                    **{**moe._launch_args(x, w, offs, out, flags), "WIDEN": False}, TRACE=False, CHECK_OFFS=checked)
        examples.append(KernelExample(name, moe._grouped_mm_kernel, args, configs.moe_configs(gpu=True)[0],
                                      targets=targets, expect=expect))
    return examples


def fp8_example(scaling="tensor", *, promote=fp8.PROMOTE_EVERY, use_tma=True, size=512, name=None) -> KernelExample:
    """``scaled_mm`` as launched on ``size``-cubed e4m3 inputs (b column-major, as required):
    ``promote=None`` is the fast accumulation, ``use_tma=False`` the pointer loads of an Ada GPU."""
    x = torch.zeros(size, size)
    ga, gb = fp8.granularities(scaling)
    a, sa = fp8.quantize_fp8(x, ga)
    b, sb = fp8.quantize_fp8(x.t(), gb)
    c = torch.zeros(size, size, dtype=torch.bfloat16)
    args = fp8.kernel_args(a, b, c, sa, sb, None, scaling, promote, use_tma)
    name = name or f"scaled_mm[e4m3, {scaling}, {'tma' if use_tma else 'pointers'}, promote {promote}]"
    if use_tma:
        return KernelExample(name, fp8._scaled_mm_kernel, args, configs.fp8_configs(gpu=True)[0], targets=(90,),
                             expect={90: ("wgmma", "cp.async.bulk.tensor")})
    # two stages of 128x128x128: 64 KB, within an Ada GPU's 99 KB
    small = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": configs.FP8_BLOCK_K, "GROUP_SIZE_M": 8},
                          num_warps=4, num_stages=2)
    return KernelExample(name, fp8._scaled_mm_kernel, args, small, targets=(90, 89),
                         expect={90: ("wgmma",), 89: ("mma.sync",)})


def fp8_examples():
    """FP8 ``scaled_mm``: tensor-wise with TMA (promoting every 128), block-wise (scales in the K
    loop), and pointer loads (Hopper and Ada)."""
    return [fp8_example("tensor"), fp8_example("block"), fp8_example("row", use_tma=False)]


def ws_example(*, dtype=torch.float16, schedule=matmul_ws.DEFAULT_SCHEDULE, a_col_major=False, b_col_major=False,
               activation=None, has_bias=False, c_tma=True, trace=False, size=512, splits=1,
               name=None) -> KernelExample:
    """The warp-specialized Gluon kernel in tile ``schedule`` (a ``matmul_ws.CONFIGS`` name; by
    default the 128 x 256 cooperative tile ``matmul_ws`` runs where tiles fill the GPU) on
    ``size``-cubed inputs (sm_90 only: wgmma, TMA and mbarriers are Hopper's).  ``c_tma=False``: C's rows are not
    16-byte aligned (N = size - 3), so the epilogue stores through pointers.  ``splits`` > 1: each
    tile's K loop in that many units, the last of a tile's adding them (``matmul_ws(split_k=...)``)."""
    n = size if c_tma else size - 3  # 2 * (size - 3) bytes per row: not 16-byte aligned
    a = torch.zeros(size, size, dtype=dtype)
    b = torch.zeros(size, size, dtype=dtype)
    a = a.t().contiguous().t() if a_col_major else a
    b = (b.t().contiguous().t() if b_col_major else b)[:, :n]  # ragged n: a view of aligned rows
    c = torch.zeros(size, n, dtype=dtype)
    bias = torch.zeros(n, dtype=dtype) if has_bias else None
    tr = torch.zeros(1, len(matmul_ws.TRACE_FIELDS), dtype=torch.int64) if trace else None
    config = matmul_ws.CONFIGS[schedule]
    workspace = None
    if splits > 1:  # the kernel's view of matmul_ws._split_workspace (sizes do not enter the compile)
        workspace = (torch.zeros(8, dtype=torch.float32), torch.zeros(8, dtype=torch.int32))
        config = matmul_ws._fit_stages(config, a.element_size(), 0)
    args = matmul_ws._kernel_args(a, b, c, bias, tr, config, activation=activation, splits=splits,
                                  workspace=workspace)
    if name is None:
        layout = f"{'A^T' if a_col_major else 'A'}, {'B^T' if b_col_major else 'B'}"
        epilogue = "+".join(filter(None, [activation, "bias" if has_bias else None])) or "plain"
        name = f"matmul_ws[{str(dtype).replace('torch.', '').replace('float', 'fp').replace('bfp', 'bf')}, " \
               f"{schedule}, {layout}, {epilogue}{'' if c_tma else ', pointer stores'}{', trace' if trace else ''}" \
               f"{', split units' if splits > 1 else ''}]"
    return KernelExample(name, matmul_ws._matmul_ws_kernel, args, triton.Config({}, num_warps=4), targets=(90,),
                         expect={90: ("wgmma", "cp.async.bulk.tensor", "mbarrier")},
                         options={"maxnreg": matmul_ws.MAXNREG})


def ws_fp8_example(scaling="tensor", *, use_fast_accum=False, out_dtype=torch.bfloat16, tile=None, size=512,
                   splits=1, name=None) -> KernelExample:
    """``scaled_mm`` as it runs on Hopper: the warp-specialized kernel with e4m3 operands (b
    column-major), promoting every 128 (or never, ``use_fast_accum``), the scales of ``scaling``,
    in ``tile`` (a ``matmul_ws.FP8_CONFIGS`` name; None: 128 x 128 block-wise, else 128 x 256);
    ``splits`` > 1: split-K units, as ``ws_example``'s."""
    x = torch.zeros(size, size)
    ga, gb = fp8.granularities(scaling)
    a, sa = fp8.quantize_fp8(x, ga)
    b, sb = fp8.quantize_fp8(x.t(), gb)
    c = torch.zeros(size, size, dtype=out_dtype)
    tile = tile or ("128x128" if scaling == "block" else "128x256")
    config, promote = matmul_ws.fp8_config(size, size, scaling, use_fast_accum=use_fast_accum,
                                           out_bytes=0 if splits > 1 else c.element_size(), tile=tile)
    workspace = None
    if splits > 1:  # sizes do not enter the compile
        workspace = (torch.zeros(8, dtype=torch.float32), torch.zeros(8, dtype=torch.int32))
    args = matmul_ws._kernel_args(a, b, c, None, None, config, activation=None, scales=(sa, sb, scaling, promote),
                                  splits=splits, workspace=workspace)
    name = name or (f"scaled_mm[warp-specialized {tile}, e4m3, {scaling}, {'promote 128' if promote else 'fast'}"
                    f"{', split units' if splits > 1 else ''}]")
    return KernelExample(name, matmul_ws._matmul_ws_kernel, args, triton.Config({}, num_warps=4), targets=(90,),
                         expect={90: ("wgmma", "cp.async.bulk.tensor", "mbarrier")},
                         options={"maxnreg": matmul_ws.MAXNREG})


def ws_examples():
    """The warp-specialized kernel (Gluon), both schedules: cooperative on an nn.Linear weight
    (B^T) with bias+GELU, and ping-pong on row-major operands."""
    return [ws_example(b_col_major=True, activation="gelu", has_bias=True),
            ws_example(schedule="pingpong")]


def all_examples() -> list[KernelExample]:
    """Every kernel's examples, in teaching order."""
    return [*matmul_examples(), *persistent_examples(), *streamk_examples(), *splitk_examples(), *grouped_examples(), *moe_examples(),
            *fp8_examples(), *ws_examples(), ws_fp8_example(), ws_fp8_example("block")]


def registered_examples() -> list[KernelExample]:
    """Every ``KernelExample`` of the package's kernels (this module's; compile_view knows none)."""
    return all_examples()


def compile_all_kernels(target="sm_90") -> dict[str, CompileView]:
    """Compile every registered example that supports ``target`` (one worker process); name -> CompileView.

    Raises RuntimeError naming the example when one does not compile."""
    capability = parse_target(target)
    examples = [ex for ex in registered_examples() if capability in ex.targets]
    views = compile_view.compile_many([ex.request(capability) for ex in examples])
    return {ex.name: view for ex, view in zip(examples, views)}
