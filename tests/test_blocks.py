"""Notebook 01's block-copy kernel (gemm_kernels.lab.blocks) and what the compile view says
about its loads: the claims of notebook 01's last section, checked on the compiled code."""

from __future__ import annotations

import pytest
import torch

from gemm_kernels import DEVICE
from gemm_kernels.lab.blocks import blocks_kernel, blocks_of
from gemm_kernels.lab.compile_view import compile_for


def expected_blocks(x: torch.Tensor, bm: int, bn: int, other: float) -> torch.Tensor:
    M, N = x.shape
    gm, gn = -(-M // bm), -(-N // bn)
    padded = torch.full((gm * bm, gn * bn), other, dtype=x.dtype)
    padded[:M, :N] = x.cpu()
    return padded.reshape(gm, bm, gn, bn).permute(0, 2, 1, 3)


@pytest.mark.parametrize("make", [
    lambda base: base,
    lambda base: base.t(),
    lambda base: base[:, ::2],
    lambda base: base[1:, 3:],
    lambda base: -base[:1, :1],
], ids=["contiguous", "transposed", "every other column", "sliced", "1x1 negated"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_blocks_of_returns_every_block_padded_with_other(make, dtype):
    base = torch.randn(13, 22, generator=torch.Generator().manual_seed(0)).to(DEVICE, dtype)
    x = make(base)
    got = blocks_of(x, 4, 8, other=-7.0)
    torch.testing.assert_close(got.cpu(), expected_blocks(x, 4, 8, -7.0), rtol=0, atol=0)


@pytest.mark.parametrize("args, error, match", [
    ((torch.zeros(3), 2, 2), TypeError, "2-D"),
    (("x", 2, 2), TypeError, "2-D torch.Tensor, got str"),
    ((torch.zeros(3, 3), 3, 2), ValueError, "powers of 2"),
    ((torch.zeros(3, 3), 0, 2), ValueError, "block_m must be >= 1"),
    ((torch.zeros(3, 3), 2.0, 2), TypeError, "block_m must be an int"),
    ((torch.zeros(0, 3), 2, 2), ValueError, "empty"),
])
def test_blocks_of_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        blocks_of(*args)


def _load_layout(stride_m: int, stride_n: int) -> tuple[dict, str]:
    cell = torch.empty(16, dtype=torch.float16)
    view = compile_for(blocks_kernel, {"x_ptr": cell, "out_ptr": cell, "M": 8192, "N": 8192,
                                       "stride_m": stride_m, "stride_n": stride_n},
                       target="sm_90", OTHER=-1.0, BLOCK_M=64, BLOCK_N=64)
    (load,) = view.op_layouts("tt.load")
    return load, view.ttgir


def test_a_transposed_view_is_loaded_down_its_columns_then_converted():
    """Notebook 01: with stride 1 known at compile time, each thread's 8 fp16 elements (16 bytes)
    run along the contiguous dimension in both cases, and the transposed block is converted to
    the store's row-major layout (one ttg.convert_layout)."""
    row, row_ir = _load_layout(8192, 1)
    col, col_ir = _load_layout(1, 8192)
    assert row["order"] == [1, 0] and row["size_per_thread"] == [1, 8]
    assert col["order"] == [0, 1] and col["size_per_thread"] == [8, 1]
    assert "ttg.convert_layout" not in row_ir
    assert "ttg.convert_layout" in col_ir
