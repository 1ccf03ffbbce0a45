"""gemm_kernels.lab.blackwell: an mxfp8 GEMM and a warp-specialized K loop compiled for sm_100 and
sm_90 on a machine without a GPU, and what the summaries read from the compiled stages.  The
compiles run in the compile view's worker (a few batches for the file, cached per process)."""

import re

import pytest
import torch

from gemm_kernels import runtime
from gemm_kernels.lab import blackwell, compile_view
from gemm_kernels.lab.blackwell import BLOCK, SCALE_GROUP

#: tcgen05.mma kind::mxf8f6f4 consumes 32 values of K per instruction: BLOCK_K / 32 per K step
MMAS_PER_STEP = BLOCK // 32


@pytest.fixture(scope="module")
def scaled():
    """scales layout -> target -> block_scaled_summary (two worker batches)."""
    return {scales: blackwell.block_scaled_comparison(scales) for scales in blackwell.SCALE_LAYOUTS}


@pytest.fixture(scope="module")
def ws():
    """warp_specialize_comparison for 4 and 8 warps (one worker batch)."""
    return blackwell.warp_specialize_comparison((4, 8))


# ----------------------------------------------------------------------------- block-scaled MMA
@pytest.mark.parametrize("scales", blackwell.SCALE_LAYOUTS)
def test_sm100_multiplies_with_block_scaled_tcgen05_mma_from_tensor_memory(scaled, scales):
    found = scaled[scales]["sm_100"]
    assert found["target"] == "sm_100" and found["scales"] == scales
    assert found["mma"] and all(op.startswith("tcgen05.mma.") and "kind::mxf8f6f4" in op and ".block_scale" in op
                                for op in found["mma"]), found["mma"]
    # Triton 3.9 spells one scale per 32 values .block32, Triton 3.6 .scale_vec::1X
    assert all(op.endswith((".block32", ".scale_vec::1X")) for op in found["mma"]), found["mma"]
    assert found["block_scaled_mma"] == sum(found["mma"].values()) > 0
    assert found["block_scaled_mma"] % MMAS_PER_STEP == 0 and found["wgmma"] == 0
    tmem = found["tensor_memory"]
    assert tmem["tcgen05.alloc"] == 1 and tmem["tcgen05.dealloc"] == 1 and tmem["tcgen05.ld"] >= 1
    assert tmem["tcgen05.mma"] == found["block_scaled_mma"] and tmem["columns"] >= BLOCK
    # the fp32 accumulator (128 x 128) and each tile's scales (128 rows x 4 groups) live in tensor memory
    assert found["tmem_allocs"] == [f"{BLOCK}x{BLOCK}xf32 #tmem", f"{BLOCK}x{BLOCK // SCALE_GROUP}xi8 #tmem_scales"]
    assert set(found["tmem_layouts"]) == {"#tmem", "#tmem_scales"}
    assert "blockM = 128" in found["tmem_layouts"]["#tmem"]
    assert found["upcasts"] == 0 and found["partitions"] == []
    assert found["scale_path"][-1].startswith("the MMA reads both scale tiles from tensor memory")
    assert found["shared"] > 0 and found["num_warps"] == 4


def test_tcgen05_scales_go_through_shared_memory_and_tcgen05_cp(scaled):
    found = scaled["tcgen05"]["sm_100"]
    assert found["tensor_memory"]["tcgen05.cp"] > 0
    assert [step.split(":")[0].split(" (")[0] for step in found["scale_path"]] == [
        "global -> shared memory by TMA, in 512-byte [32, 16] chunks",
        "chunks put in row order as a view of shared memory",
        "shared memory -> tensor memory",
        "the MMA reads both scale tiles from tensor memory"]
    layout = found["scale_layout"]
    assert layout["where"] == "shared memory" and layout["shape"] == [BLOCK, BLOCK // SCALE_GROUP]
    assert layout["definition"].startswith("#ttg.shared_linear")
    # byte offset bits 0-1: the K group; bits 2-3: rows +32, +64; bits 4-8: rows +1 ... +16 (to_tcgen05_scales)
    assert layout["bases"]["offset"] == [[0, 1], [0, 2], [32, 0], [64, 0], [1, 0], [2, 0], [4, 0], [8, 0], [16, 0]]


def test_row_scales_go_through_registers_and_tcgen05_st(scaled):
    found = scaled["rows"]["sm_100"]
    assert found["tensor_memory"].get("tcgen05.cp", 0) == 0 and found["tensor_memory"]["tcgen05.st"] > 1
    assert found["scale_path"][:2] == ["global -> registers by pointer loads (tt.load)",
                                       "registers -> tensor memory: ttng.tmem_alloc of a register tensor (tcgen05.st)"]
    layout = found["scale_layout"]
    assert layout["where"] == "registers" and layout["shape"] == [BLOCK, BLOCK // SCALE_GROUP]
    # the same arrangement as in shared memory: a lane holds rows i, i+32, i+64, i+96, 4 groups each
    assert layout["bases"]["register"] == [[0, 1], [0, 2], [32, 0], [64, 0]]
    assert layout["bases"]["lane"] == [[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]]


@pytest.mark.parametrize("scales", blackwell.SCALE_LAYOUTS)
def test_sm90_upcasts_to_bf16_and_multiplies_with_wgmma(scaled, scales):
    found = scaled[scales]["sm_90"]
    assert found["mma"] and all(op.startswith("wgmma.mma_async") and op.endswith(".f32.bf16.bf16")
                                for op in found["mma"]), found["mma"]
    assert found["wgmma"] == sum(found["mma"].values()) > 0 and found["block_scaled_mma"] == 0
    assert found["tensor_memory"] == {"columns": 0}  # no tcgen05 instruction at all
    assert found["tmem_allocs"] == [] and found["tmem_layouts"] == {} and found["scale_layout"] is None
    assert found["upcasts"] == 2  # A and B: e4m3 -> bf16
    steps = [step.split(":")[0] for step in found["scale_path"]]
    assert steps[-3:] == ["each e4m3 operand upcast to bf16", "each e8m0 byte widened to 16 bits and shifted left 7 "
                          "(arith.extui, arith.shli)", "the bf16 scale, broadcast over its 32 values, multiplied into "
                          "the operand (arith.mulf) before the MMA"]
    if scales == "tcgen05":  # the tcgen05 order is undone in registers on Hopper
        assert "chunks put in row order in registers (ttg.local_load, then tt.reshape, tt.trans)" in steps


def test_summary_counts_are_the_ptx_counts_and_stage_lines_show_them(scaled):
    view = blackwell.compile_mxfp8("sm_100", scales="tcgen05")  # cached: the fixture compiled it
    found = scaled["tcgen05"]["sm_100"]
    ptx = view.ptx
    for op, n in found["mma"].items():
        assert len(re.findall(rf"\b{re.escape(op)}\s", ptx)) == n
    for family in ("tcgen05.cp", "tcgen05.alloc", "tcgen05.ld", "tcgen05.st"):
        assert found["tensor_memory"][family] == len(re.findall(rf"^\s*(?:@%\w+\s+)?{re.escape(family)}[.:]", ptx,
                                                                 flags=re.MULTILINE))
    assert found["shared"] == view.shared and found["registers"] == view.num_regs
    lines = blackwell.stage_lines(view, r"tcgen05\.cp", limit=2, width=60)
    assert len(lines) == 2 and all("tcgen05.cp" in line and len(line) <= 60 for line in lines)
    ttgir = blackwell.stage_lines(view, r"ttng\.tmem_copy", stage="ttgir", limit=10, width=400)
    assert ttgir and all("loc(" not in line and "#tmem_scales" in line for line in ttgir)
    assert blackwell.stage_lines(view, r"no such instruction") == []


def test_compiles_are_cached_within_the_process(scaled, monkeypatch):
    def no_worker(*args, **kwargs):
        raise AssertionError("compiled again instead of using the cache")

    monkeypatch.setattr(compile_view.subprocess, "run", no_worker)
    assert blackwell.block_scaled_summary("sm_100", "tcgen05") == scaled["tcgen05"]["sm_100"]
    assert blackwell.block_scaled_comparison("rows") == scaled["rows"]


def test_bad_arguments_are_refused_before_compiling():
    with pytest.raises(ValueError, match="scales must be one of"):
        blackwell.compile_mxfp8("sm_100", scales="columns")
    with pytest.raises(ValueError, match="compute capability"):
        blackwell.compile_mxfp8("sm_42")


# ----------------------------------------------------------------------------- warp specialization
def test_passes_are_read_from_the_installed_compiler():
    assert blackwell.warp_specialize_passes("sm_100") == ["add_warp_specialize"]
    assert blackwell.warp_specialize_passes(90) == ["add_hopper_warpspec"]
    assert blackwell.warp_specialize_passes("sm_80") == ["add_hopper_warpspec"]  # the sm_8x/9x branch
    assert blackwell.warp_specialize_passes("sm_75") == []


def test_warp_specialize_splits_the_loop_on_sm100_at_any_num_warps(ws):
    for warps in (4, 8):
        found = ws["sm_100"][warps]
        assert found["passes"] == ["add_warp_specialize"]
        assert found["warp_specialize_ops"] == 1 and found["partitions"] == 2 and found["partition_warps"] == [1, 2]
        regions = {r["region"]: r for r in found["regions"]}
        assert regions["partition0"]["ops"] == ["ttng.tc_gen5_mma"]  # one warp issues the MMAs
        assert regions["partition1"]["ops"] == ["ttng.async_tma_copy_global_to_local"]  # two warps load
        assert regions["default"]["num_warps"] is None and found["requested_registers"]
        assert found["total_warps"] > warps and not found["ptx_identical_without"]


def test_warp_specialize_changes_nothing_on_sm90_with_8_warps(ws):
    found = ws["sm_90"][8]
    assert found["passes"] == ["add_hopper_warpspec"]
    assert found["warp_specialize_ops"] == 0 and found["partitions"] == 0 and found["regions"] == []
    assert found["total_warps"] == 8 and found["ptx_identical_without"]  # as tests/test_claims.py for matmul_tma


def test_hopper_pass_splits_a_4_warp_loop_into_consumer_warpgroups(ws):
    found = ws["sm_90"][4]
    assert found["warp_specialize_ops"] == 1 and found["partitions"] == 2 and found["partition_warps"] == [4, 4]
    regions = {r["region"]: r for r in found["regions"]}
    assert regions["default"]["ops"] == ["ttng.async_tma_copy_global_to_local"]  # the kernel's own 4 warps load
    for name in ("partition0", "partition1"):
        assert "ttng.warp_group_dot" in regions[name]["ops"]
    assert found["total_warps"] == 12 and not found["ptx_identical_without"]


def test_block_scaled_loop_warp_specializes_on_sm100_and_fails_to_on_sm90():
    found = blackwell.block_scaled_summary("sm_100", "tcgen05", warp_specialize=True)
    ops = [op for region in found["partitions"] for op in region["ops"]]
    assert "ttng.tc_gen5_mma_scaled" in ops and "ttng.async_tma_copy_global_to_local" in ops
    with pytest.raises(RuntimeError, match="NVGPUWarpSpecialization"):
        blackwell.compile_mxfp8("sm_90", scales="tcgen05", warp_specialize=True)


def test_partitions_reads_regions_of_a_warp_specialize_op():
    ttgir = """
    %0 = arith.constant 0 : i32 loc(#loc1)
    ttg.warp_specialize(%a, %b) attributes {requestedRegisters = array<i32: 24, 48>} loc(#loc2)
    default {
      ttg.warp_yield loc(#loc3)
    }
    partition0(%x: i32 loc("x"(#loc4)), %y: !ttg.memdesc<1xi64, #shared, #smem> loc("y")) num_warps(1) {
      scf.for %i = %c0 to %c4 step %c1 : i32 {
        %r = ttng.tc_gen5_mma %p, %q {is_async} : !ttg.memdesc<1xi64> loc(#loc5)
      } loc(#loc6)
      ttg.warp_return loc(#loc7)
    }
    partition1(%x: i32 loc("x")) num_warps(2) {
      ttng.async_tma_copy_global_to_local %d[%x] %m, %bar, %t : !tt.tensordesc<128x64xf16> loc(#loc8)
      ttg.warp_return
    } : (i32, i32) -> () loc(#loc9)
    tt.store %p, %v : tensor<128x128x!tt.ptr<f16>> loc(#loc10)
    """
    assert blackwell.partitions(ttgir) == [
        {"region": "default", "num_warps": None, "ops": []},
        {"region": "partition0", "num_warps": 1, "ops": ["ttng.tc_gen5_mma"]},
        {"region": "partition1", "num_warps": 2, "ops": ["ttng.async_tma_copy_global_to_local"]}]
    assert blackwell.partitions("tt.func @f() {\n  tt.return\n}") == []


# ----------------------------------------------------------------------------- host side
def test_to_tcgen05_scales_puts_128_rows_by_4_groups_in_each_512_bytes():
    torch.manual_seed(0)
    scale = torch.randint(0, 256, (256, 8), dtype=torch.uint8)  # 256 rows, K = 256
    packed = blackwell.to_tcgen05_scales(scale)
    assert packed.shape == (2, 2, 32, 16) and packed.is_contiguous()
    for rc in range(2):
        for kc in range(2):
            for i in range(32):
                for j in range(4):
                    for g in range(4):
                        assert packed[rc, kc, i, j * 4 + g] == scale[rc * 128 + j * 32 + i, kc * 4 + g]
    with pytest.raises(ValueError, match="multiple of 128"):
        blackwell.to_tcgen05_scales(scale[:100])


def _mx_inputs(M=128, N=256, K=256, device="cpu"):
    torch.manual_seed(0)
    a = (torch.randn(M, K) * 3).to(torch.float8_e4m3fn).to(device)
    b = (torch.randn(N, K) * 3).to(torch.float8_e4m3fn).to(device)
    a_scale = torch.randint(120, 134, (M, K // SCALE_GROUP), dtype=torch.uint8).to(device)
    b_scale = torch.randint(120, 134, (N, K // SCALE_GROUP), dtype=torch.uint8).to(device)
    return a, a_scale, b, b_scale


def test_mxfp8_matmul_refuses_bad_inputs():
    a, a_scale, b, b_scale = _mx_inputs()
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        blackwell.mxfp8_matmul(a.to(torch.float16), a_scale, b, b_scale)
    with pytest.raises(ValueError, match="multiples of 128"):
        blackwell.mxfp8_matmul(a[:, :96].contiguous(), a_scale[:, :3].contiguous(), b[:, :96].contiguous(),
                               b_scale[:, :3].contiguous())
    with pytest.raises(ValueError, match=r"\[M, K/32\]"):
        blackwell.mxfp8_matmul(a, b_scale, b, b_scale)


@pytest.mark.parametrize("tcgen05_scales", [False, True])
def test_mxfp8_matmul_matches_the_reference(tcgen05_scales):
    if runtime.on_gpu() and not runtime.supports_tma():
        pytest.skip("mxfp8_matmul reads through TMA: an sm_90 or newer GPU")
    device = "cuda" if runtime.on_gpu() else "cpu"
    a, a_scale, b, b_scale = _mx_inputs(device=device)
    if runtime.interpreted() and not blackwell._interpreter_has_dot_scaled():  # Triton 3.6's interpreter
        with pytest.raises(NotImplementedError, match="interpreter has no dot_scaled"):
            blackwell.mxfp8_matmul(a, a_scale, b, b_scale, tcgen05_scales=tcgen05_scales)
        return
    ref = blackwell.mxfp8_reference(a, a_scale, b, b_scale)
    out = blackwell.mxfp8_matmul(a, a_scale, b, b_scale, tcgen05_scales=tcgen05_scales)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    out = out.double()
    # one bf16 step (the interpreter truncates fp32 -> bf16) plus fp32 accumulation
    assert ((out - ref).abs() <= 2.0 ** -7 * ref.abs() + 1e-5 * ref.abs().max()).all()
    wrong = blackwell.mxfp8_matmul(a, a_scale, b, b_scale.flip(0).contiguous(), tcgen05_scales=tcgen05_scales)
    assert not torch.allclose(wrong.double(), ref, rtol=0.05)
