"""Batch invariance: a row of ``matmul_auto(a, b)`` keeps its bits whatever M (the rows beside it)
only with ``batch_invariant=True``.

By default the launcher, the split of K and the tuned config are picked from M, so the same row
summed beside other rows can come out with other bits (shown here on a CPU, where few rows go to
split-K and many to the TMA kernel).  The batch-invariant mode runs one kernel in one config for
every M; on a CPU it is checked bit for bit in the interpreter, on a GPU compiled for every M from
1 to 4096 (``-m gpu``; its cost: ``tests/gpu_batch_invariance.py``).
"""

from __future__ import annotations

import pytest
import torch

import gemm_kernels as gk
from gemm_kernels.kernels import configs
from gemm_kernels.kernels.dispatch import matmul_auto, pick_launcher

# on a CPU (4 stand-in SMs) 257+ rows make three 128-row tiles: the TMA kernel; fewer are split along K
CPU_ROWS = (1, 2, 3, 5, 8, 13, 31, 32, 33, 64, 100, 257, 300)


def operands(M, N, K, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=gen).to(gk.DEVICE, dtype)
    b = torch.randn(K, N, generator=gen).to(gk.DEVICE, dtype)
    return a, b


def rows_that_differ(out, ref) -> int:
    return int((out.view(torch.int32 if out.dtype == torch.float32 else torch.int16)
                != ref.view(torch.int32 if ref.dtype == torch.float32 else torch.int16)).any(dim=1).sum())


@pytest.mark.skipif(gk.on_gpu(), reason="the CPU's launchers: the GPU test below covers a GPU's")
def test_default_dispatch_changes_a_rows_bits_with_m():
    """The same rows of a, with and without others beside them: by default the bits differ."""
    a, b = operands(300, 32, 512, torch.float32)
    full = matmul_auto(a, b)
    assert pick_launcher(a, b)[0] != pick_launcher(a[:5], b)[0]  # the launcher itself depends on M
    assert rows_that_differ(matmul_auto(a[:5], b), full[:5]) > 0


@pytest.mark.skipif(gk.on_gpu(), reason="interpreter sizes; the GPU test below covers every M to 4096")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_batch_invariant_rows_have_the_same_bits_for_every_m(dtype):
    a, b = operands(max(CPU_ROWS), 32, 512, dtype)
    with torch.no_grad():
        full = matmul_auto(a, b, batch_invariant=True)
        for M in CPU_ROWS:
            assert rows_that_differ(matmul_auto(a[:M], b, batch_invariant=True), full[:M]) == 0, M
    ref = a.double() @ b.double()
    assert ((full.double() - ref).norm() / ref.norm()).item() < (1e-6 if dtype == torch.float32 else 2e-3)


def test_batch_invariant_mode_picks_one_config_and_no_split():
    a, b = operands(8, 32, 64, torch.float32)
    name, why = pick_launcher(a, b, batch_invariant=True)
    assert name == "matmul" and "no split of K" in why
    assert len(configs.batch_invariant_configs()) == 1
    if not gk.interpreted():
        (config,) = configs.batch_invariant_configs()
        assert (config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.kwargs["BLOCK_K"]) == \
            configs.BATCH_INVARIANT_BLOCKS


def test_batch_invariant_mode_refuses_what_it_cannot_do():
    a, b = operands(4, 32, 64, torch.float32)
    with pytest.raises(TypeError, match="batch_invariant must be True or False"):
        matmul_auto(a, b, batch_invariant=1)
    with pytest.raises(ValueError, match="forward pass only"):
        matmul_auto(a.requires_grad_(), b, batch_invariant=True)
    with torch.no_grad():  # the epilogue is still applied, and the launcher's checks still run
        out = matmul_auto(a, b, batch_invariant=True, activation="relu")
        assert (out >= 0).all()
        with pytest.raises(ValueError):
            matmul_auto(a, b[:10], batch_invariant=True)


def fp8_operands(M, N, K, scaling, seed=0):
    """e4m3 a [M, K] and b [K, N] (``W.t()``) with per-tensor or per-row/column scales."""
    from gemm_kernels.kernels import fp8

    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(M, K, generator=gen).to(gk.DEVICE), torch.randn(N, K, generator=gen).to(gk.DEVICE)
    a, sa = fp8.quantize_fp8(x, "tensor" if scaling == "tensor" else "row")
    b, sb = fp8.quantize_fp8(w.t(), "tensor" if scaling == "tensor" else "column")
    return a, b, sa, sb


def scaled_rows(a, b, sa, sb, M, scaling, **kw):
    from gemm_kernels.kernels import fp8

    return fp8.scaled_mm(a[:M], b, sa if scaling == "tensor" else sa[:M], sb, out_dtype=torch.float32, **kw)


@pytest.mark.skipif(gk.on_gpu() or not gk.supports_fp8(), reason="interpreter sizes; the GPU test covers a GPU's")
def test_scaled_mm_batch_invariant_rows_keep_their_bits():
    a, b, sa, sb = fp8_operands(100, 32, 256, "tensor")
    full = scaled_rows(a, b, sa, sb, 100, "tensor", batch_invariant=True)
    for M in (1, 3, 17, 64, 100):
        assert rows_that_differ(scaled_rows(a, b, sa, sb, M, "tensor", batch_invariant=True), full[:M]) == 0, M
    with pytest.raises(TypeError, match="batch_invariant must be True or False"):
        scaled_rows(a, b, sa, sb, 4, "tensor", batch_invariant="yes")


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_scaled_mm_batch_invariant_on_a_gpu_for_every_m_to_4096(scaling):
    if not gk.supports_fp8():
        pytest.skip("no fp8 on this GPU")
    a, b, sa, sb = fp8_operands(4096, 512, 4096, scaling)
    full = scaled_rows(a, b, sa, sb, 4096, scaling, batch_invariant=True)
    changed = [M for M in range(1, 4097)
               if rows_that_differ(scaled_rows(a, b, sa, sb, M, scaling, batch_invariant=True), full[:M])]
    assert not changed, f"scaled_mm(batch_invariant=True) changed bits at M = {changed[:20]}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_batch_invariant_on_a_gpu_for_every_m_to_4096(dtype):
    """Compiled: every M from 1 to 4096, each a prefix of the same 4096 rows, against the full
    product's rows, bit for bit; and the default mode, which must differ for some M (else this
    demonstrates nothing on this GPU)."""
    if dtype == torch.bfloat16 and not gk.supports_bf16():
        pytest.skip("no bf16 on this GPU")
    N, K = 512, 4096
    a, b = operands(4096, N, K, dtype)
    with torch.no_grad():
        full = matmul_auto(a, b, batch_invariant=True)
        default_full = matmul_auto(a, b)
        changed, default_changed = [], []
        for M in range(1, 4097):
            if rows_that_differ(matmul_auto(a[:M], b, batch_invariant=True), full[:M]):
                changed.append(M)
            if M in (1, 2, 8, 16, 64, 128, 256, 512, 1024, 2048) and rows_that_differ(matmul_auto(a[:M], b),
                                                                                     default_full[:M]):
                default_changed.append(M)
    assert not changed, f"batch_invariant=True changed bits at M = {changed[:20]}"
    assert default_changed, "the default dispatch kept every row's bits here: nothing to show"
