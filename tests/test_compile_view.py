"""Every kernel of the package compiles for real GPUs (sm_90, and sm_80 where it applies), on a
machine without one: a kernel that cannot be built for a GPU fails here, not on the GPU."""

import pytest
import torch
import triton

import gemm_kernels
from gemm_kernels import compile_view
from gemm_kernels.compile_view import (
    HIGHLIGHTS, as_jit_function, build_source, compile_for, parse_target, registered_examples,
)

#: largest shared memory one program may use (opt-in maximum per block): H100 227 KiB, A100 163 KiB
MAX_SHARED = {90: 232448, 80: 166912}
EXAMPLES = registered_examples()
CASES = [pytest.param(ex, cap, id=f"{ex.name}-sm_{cap}") for ex in EXAMPLES for cap in ex.targets]


@pytest.fixture(scope="module")
def views():
    """Compiled once per worker process (Triton's on-disk cache makes repeats cheap anyway)."""
    cache = {}

    def get(example, capability):
        key = (example.name, capability)
        if key not in cache:
            cache[key] = example.compile(capability)
        return cache[key]

    return get


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
    for stage in compile_view.STAGES:
        assert getattr(view, stage).strip(), f"empty {stage}"


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
    with pytest.raises(ValueError, match="target must look like 'sm_90'"):
        parse_target("hopper")


def test_specialisation_follows_the_launcher():
    """Aligned pointers and multiples of 16 get divisibility hints; ints equal to 1 become constants."""
    ex = next(ex for ex in EXAMPLES if ex.name.startswith("matmul_persistent["))
    src = build_source(ex.kernel, ex.args, ex.config.kwargs)
    jit_fn = as_jit_function(ex.kernel)
    index = {p.name: i for i, p in enumerate(jit_fn.params)}
    assert src.signature["a_ptr"] == "*fp16" and (index["a_ptr"],) in src.attrs
    assert src.signature["stride_am"] == "i32" and (index["stride_am"],) in src.attrs  # 256
    assert src.signature["stride_ak"] == "constexpr" and src.constants[(index["stride_ak"],)] == 1
    misaligned = dict(ex.args, a_ptr=torch.zeros(300, dtype=torch.float16)[1:257].view(16, 16), M=255)
    src = build_source(ex.kernel, misaligned, ex.config.kwargs)
    assert (index["a_ptr"],) not in src.attrs and (index["M"],) not in src.attrs


def test_as_jit_function_gives_compilable_functions():
    ex = next(ex for ex in EXAMPLES if ex.name.startswith("matmul_persistent["))
    jit_fn = as_jit_function(ex.kernel)
    assert isinstance(jit_fn, triton.runtime.JITFunction)
    assert as_jit_function(jit_fn) is jit_fn
    with pytest.raises(TypeError, match="expected a @triton.jit kernel"):
        as_jit_function(lambda x: x)


def test_bad_arguments_are_named():
    ex = EXAMPLES[0]
    args = dict(ex.args)
    args.pop("M")
    with pytest.raises(ValueError, match=r"needs values for \['M'\]"):
        compile_for(ex.kernel, args, config=ex.config)
    with pytest.raises(ValueError, match=r"no parameters named \['not_a_param'\]"):
        compile_for(ex.kernel, dict(ex.args, not_a_param=3), config=ex.config)


def test_compile_all_kernels_skips_tma_for_ampere(monkeypatch):
    compiled = []

    def fake_compile(self, target):
        compiled.append((self.name, target))
        return self.name

    monkeypatch.setattr(compile_view.KernelExample, "compile", fake_compile)
    views = compile_view.compile_all_kernels("sm_80")
    assert all(80 in ex.targets for ex in EXAMPLES if ex.name in views)
    assert not any(name.startswith("matmul_tma[") for name in views)
    assert {n for n, _ in compiled} == set(views) and {t for _, t in compiled} == {80}


def _b_load_widths(M, N, K, b_row_stride):
    """Byte widths of the cp.async copies in matmul's sm_90 PTX for a row-major B with this row stride."""
    import importlib
    import re

    matmul_module = importlib.import_module("gemm_kernels.matmul")  # the package's `matmul` is the function

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


@pytest.mark.skipif(not gemm_kernels.interpreted(), reason="the leftovers come from Triton's interpreter")
def test_compiles_after_interpreted_launches_with_a_cold_cache(monkeypatch, tmp_path):
    """An interpreted launch that calls tl.cdiv leaves triton.language.core patched (Triton 3.x);
    the compile view undoes that, so notebook 05 can run kernels and then compile them."""
    import triton.language as tl

    from gemm_kernels.testing import random_matrix

    original_add = tl.core.add
    a, b = random_matrix(33, 17, torch.float16), random_matrix(17, 40, torch.float16)
    gemm_kernels.matmul_persistent(a, b)  # interpreted; its kernel calls tl.cdiv
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # nothing cached: a real compile
    example = next(ex for ex in EXAMPLES if ex.name.startswith("matmul_persistent["))
    view = example.compile(90)
    assert view.highlights()["wgmma"] > 0
    assert tl.core.add is original_add
    assert compile_view.undo_interpreter_leftovers() == 0
    c = gemm_kernels.matmul_persistent(a, b)  # the interpreter still works afterwards
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
    assert any(tmp_path.iterdir()), "the compile did not go through the temporary cache"
