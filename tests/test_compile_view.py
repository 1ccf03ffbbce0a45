"""Every kernel of the package compiles for real GPUs (sm_90, and sm_80 where it applies), on a
machine without one: a kernel that cannot be built for a GPU fails here, not on the GPU.  The
compiles run in the compile view's worker process, two batches (one per target) for the file."""

import re

import pytest
import torch
import triton

import gemm_kernels
from gemm_kernels.lab import compile_examples, compile_view
from gemm_kernels import _triton_compat
from gemm_kernels.lab.compile_examples import registered_examples
from gemm_kernels.lab.compile_view import HIGHLIGHTS, compile_for, compile_many, parse_target

#: largest shared memory one program may use (opt-in maximum per block): H100 227 KiB, A100 163 KiB
MAX_SHARED = {90: 232448, 89: 101376, 80: 166912}
EXAMPLES = registered_examples()
CASES = [pytest.param(ex, cap, id=f"{ex.name}-sm_{cap}") for ex in EXAMPLES for cap in ex.targets]


@pytest.fixture(scope="module")
def views():
    """Every example compiled once, in one worker process per target (sm_89: fp8 on Ada)."""
    cache = {}
    for capability in sorted({cap for ex in EXAMPLES for cap in ex.targets}, reverse=True):
        examples = [ex for ex in EXAMPLES if capability in ex.targets]
        for ex, view in zip(examples, compile_many([ex.request(capability) for ex in examples])):
            cache[(ex.name, capability)] = view
    return lambda example, capability: cache[(example.name, capability)]


def test_every_kernel_module_registers_examples():
    names = [ex.name for ex in EXAMPLES]
    assert len(names) == len(set(names)), "example names must be unique"
    assert any(n.startswith("matmul[") for n in names)
    assert any(n.startswith("matmul_persistent[") for n in names)
    assert any(n.startswith("matmul_tma[") for n in names)
    for ex in EXAMPLES:
        assert set(ex.expect) <= set(ex.targets), f"{ex.name}: expectations for targets it is not built for"


@pytest.mark.parametrize("example,capability", CASES)
def test_compiles_for_target(example, capability, views):
    view = views(example, capability)
    found = view.highlights()
    for name in example.expect.get(capability, ()):
        assert found[name] > 0, f"{example.name} on sm_{capability}: expected {name} in the PTX, found {found}"
    if capability < 90:  # Hopper-only instructions must not leak into Ampere code
        assert found["wgmma"] == 0 and found["cp.async.bulk.tensor"] == 0, found
    assert 0 < view.shared <= MAX_SHARED.get(capability, MAX_SHARED[80]), (
        f"{example.name}: {view.shared} bytes of shared memory do not fit sm_{capability}")
    if view.num_regs is not None:
        assert 0 < view.num_regs <= 255
    assert view.stages == (compile_view.STAGES[1:] if view.gluon else compile_view.STAGES)  # Gluon starts at ttgir
    for stage in view.stages:
        assert getattr(view, stage).strip(), f"empty {stage}"


def test_gluon_kernels_compile_without_a_gpu_and_say_they_have_no_ttir(views):
    ws = [ex for ex in EXAMPLES if ex.name.startswith("matmul_ws[")]
    assert {"cooperative", "pingpong"} <= {ex.name.split(", ")[1] for ex in ws}
    for ex in ws:
        view = views(ex, 90)
        assert view.gluon and "ttg.warp_specialize" in view.ttgir and "no TTIR" in view.ttir
        assert ex.options == {"maxnreg": 168}


def test_tma_kernel_uses_tma_and_wgmma_on_hopper(views):
    tma = [ex for ex in EXAMPLES if ex.name.startswith("matmul_tma[")]
    assert tma
    for ex in tma:
        found = views(ex, 90).highlights()
        assert found["cp.async.bulk.tensor"] > 0 and found["mbarrier"] > 0 and found["wgmma"] > 0, found


def test_pointer_kernels_use_wgmma_on_hopper_and_mma_sync_on_ampere(views):
    for ex in EXAMPLES:
        if ex.name.startswith(("matmul[", "matmul_persistent[")):
            assert views(ex, 90).highlights()["wgmma"] > 0
            sm80 = views(ex, 80).highlights()
            assert sm80["mma.sync"] > 0 and sm80["wgmma"] == 0


def test_summary_and_html_report_what_matters(views):
    ex = next(ex for ex in EXAMPLES if ex.name.startswith("matmul_tma["))
    view = views(ex, 90)
    text = view.summary()
    assert ex.name in text and "sm_90" in text and f"shared memory {view.shared} bytes" in text
    assert "cp.async.bulk.tensor: " in text
    page = view._repr_html_()
    assert "<table>" in page and "cp.async.bulk.tensor" in page and HIGHLIGHTS["wgmma"][1][:20] in page
    excerpt = view.excerpt("cp.async.bulk.tensor")
    assert ">" in excerpt and "cp.async.bulk.tensor" in excerpt
    assert "tt.descriptor_load" in view.ttir or "descriptor_load" in view.ttir


def test_parse_target():
    assert parse_target("sm_90") == parse_target("sm_90a") == parse_target(90) == parse_target("90") == 90
    assert parse_target("SM_80") == 80
    for bad in ("hopper", "sm_9", 9, "sm_900", None, 90.0):
        with pytest.raises(ValueError, match="CUDA compute capability"):
            parse_target(bad)


def test_bad_target_fails_before_compiling(monkeypatch):
    ex = EXAMPLES[0]
    monkeypatch.setattr(compile_view, "compile_many", lambda requests: pytest.fail("compiled"))
    with pytest.raises(ValueError, match="sm_9"):
        compile_for(ex.kernel, ex.args, target="sm_9", config=ex.config)


@pytest.mark.parametrize("internals", ["1", "0"])
def test_specialisation_follows_the_launcher(monkeypatch, internals):
    """Aligned pointers and multiples of 16 get divisibility hints; ints equal to 1 become
    constants; the public fallback gives the same answers as Triton's own helper."""
    monkeypatch.setenv(_triton_compat.INTERNALS_ENV, internals)
    aligned = torch.zeros(64, dtype=torch.float16)
    assert _triton_compat.specialize(aligned) == ("*fp16", "D")
    assert _triton_compat.specialize(aligned[1:])[0] == "*fp16" and not _triton_compat.specialize(aligned[1:])[1]
    assert _triton_compat.specialize(256) == ("i32", "D")
    assert _triton_compat.specialize(255)[0] == "i32" and not _triton_compat.specialize(255)[1]
    assert _triton_compat.specialize(1) == ("constexpr", 1)
    assert _triton_compat.specialize(2**40)[0] == "i64"


def test_python_function_behind_any_wrapper():
    from gemm_kernels.kernels import persistent

    fn = compile_view._python_function(persistent._persistent_tuned)
    assert fn.__name__ == "_matmul_persistent_kernel"
    assert compile_view._python_function(persistent._matmul_persistent_kernel) is fn
    with pytest.raises(TypeError, match="expected a @triton.jit kernel"):
        compile_view._python_function(3)


def test_bad_arguments_are_named():
    ex = EXAMPLES[0]
    args = dict(ex.args)
    args.pop("M")
    with pytest.raises(RuntimeError, match=r"needs values for \['M'\]"):
        compile_for(ex.kernel, args, config=ex.config)
    with pytest.raises(ValueError, match=r"no parameters named \['not_a_param'\]"):
        compile_for(ex.kernel, dict(ex.args, not_a_param=3), config=ex.config)


def test_compile_all_kernels_skips_tma_for_ampere(monkeypatch):
    compiled = []

    def fake_compile_many(requests):
        compiled.extend((r["name"], r["capability"]) for r in requests)
        return [r["name"] for r in requests]

    monkeypatch.setattr(compile_view, "compile_many", fake_compile_many)
    views = compile_examples.compile_all_kernels("sm_80")
    assert all(80 in ex.targets for ex in EXAMPLES if ex.name in views)
    assert not any(name.startswith("matmul_tma[") for name in views)
    assert {n for n, _ in compiled} == set(views) and {t for _, t in compiled} == {80}


def _b_load_widths(M, N, K, b_row_stride):
    """Byte widths of the cp.async copies in matmul's sm_90 PTX for a row-major B with this row stride."""
    import re

    from gemm_kernels.kernels import matmul as matmul_module

    a = torch.zeros(M, K, dtype=torch.float16)
    b = torch.zeros(K, b_row_stride, dtype=torch.float16)[:, :N]
    c = torch.zeros(M, N, dtype=torch.float16)
    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=c, trace_ptr=c, M=M, N=N, K=K,
                stride_am=a.stride(0), stride_ak=1, stride_bk=b.stride(0), stride_bn=1,
                stride_cm=c.stride(0), stride_cn=1, GROUPED=True, GROUP_SIZE_M=8,
                HAS_BIAS=False, ACTIVATION=None, WIDEN=False, TRACE=False)
    cfg = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=3, num_warps=8)
    ptx = compile_for(matmul_module._matmul_kernel, args, target="sm_90", config=cfg).asm["ptx"]
    return set(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]+\], \[[^\]]+\], (0x[0-9a-f]+)", ptx))


def test_wrapped_offsets_vectorize_only_where_it_is_true():
    """Sizes that are multiples of 16: 16-byte async copies (fast).  N = 1003 with 16-byte-aligned
    rows: no 16-byte copies, because after the % N wrap a block is not contiguous; a false
    tl.max_contiguous hint would emit them and fault on the GPU ('misaligned address')."""
    assert "0x10" in _b_load_widths(4096, 4096, 4096, 4096)
    # K = 520: A's row stride is not a multiple of 16 elements, so A's loads cannot be 16-byte
    # copies either and any 16-byte copy left would be one of B's
    assert "0x10" not in _b_load_widths(1000, 1003, 520, 1008)


def test_compiling_leaves_the_interpreter_alone():
    """The compile runs in another process: interpreted launches before and after it work, and
    nothing in this process's triton.language is touched (notebook 05 runs kernels, then compiles)."""
    import triton.language as tl

    from gemm_kernels.testing import random_matrix

    a, b = random_matrix(33, 17, torch.float16), random_matrix(17, 40, torch.float16)
    gemm_kernels.matmul_persistent(a, b)
    before = dict(vars(tl.core))
    example = next(ex for ex in EXAMPLES if ex.name.startswith("matmul_persistent["))
    compile_for(example.kernel, example.args, config=example.config, num_stages=2)  # a fresh request
    assert {k: v for k, v in vars(tl.core).items() if before.get(k) is not v} == {}
    c = gemm_kernels.matmul_persistent(a, b)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)


def test_compile_view_imports_no_triton_internals():
    """The compile view itself patches and rebuilds nothing of Triton's (issue: internals live in
    _triton_compat only)."""
    import inspect

    source = inspect.getsource(compile_view)
    for internal in ("triton.runtime.interpreter", "knobs.runtime.interpret", "native_specialize_impl",
                     "InterpretedFunction"):
        assert internal not in source


def test_grouped_mm_offs_check_adds_no_call_to_the_kernel(views):
    """The default call's kernel reports a bad offs with plain stores and a system-scope fence
    into pinned host memory: no function call (a tl.device_assert's __assertfail call made ptxas
    serialise the wgmma pipeline, PERF_NOTES 22), and as many wgmma as the unchecked kernel."""
    from gemm_kernels.lab.compile_examples import moe_examples

    by_name = {e.name: e for e in moe_examples()}
    checked = views(by_name["grouped_mm[bf16, tma, offs checked on the device]"], 90).ptx
    plain = views(by_name["grouped_mm[bf16, tma, w as [E, N, K]]"], 90).ptx
    assert "__assertfail" not in checked and not re.search(r"^\s*call", checked, re.M)
    assert "fence.sc.sys" in checked and "fence.sc.sys" not in plain
    assert checked.count("wgmma.mma_async") == plain.count("wgmma.mma_async")
