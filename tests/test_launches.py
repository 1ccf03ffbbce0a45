"""Kept launches (``kernels.launches``): the key, the cache, and on a GPU every single-GEMM
launcher's repeated call going straight to its compiled kernel with the new call's tensors."""

import gc
import weakref

import pytest
import torch
import triton

import gemm_kernels as gk
from gemm_kernels import DEVICE, matmul_ref, runtime
from gemm_kernels.kernels import fp8, launches, matmul, persistent, splitk, streamk
from gemm_kernels.testing import assert_close, random_matrix


def test_the_key_reads_layout_dtype_device_and_alignment_not_values():
    a = torch.randn(8, 16)
    assert launches.tensor_key(a) == launches.tensor_key(torch.randn(8, 16))
    assert launches.tensor_key(a) != launches.tensor_key(torch.randn(16, 8).t())  # strides
    assert launches.tensor_key(a) != launches.tensor_key(a.half())  # dtype
    assert launches.tensor_key(a[:, 1:]) != launches.tensor_key(a[:, :-1])  # 16-byte alignment of the base
    assert launches.tensor_key(torch.nn.Parameter(a, requires_grad=False)) == launches.tensor_key(a)


def test_tensors_the_checks_must_see_every_call_have_no_key():
    a = torch.randn(4, 4)
    assert launches.tensor_key(a.clone().requires_grad_()) is None  # autograd decides the route
    with torch.no_grad():
        assert launches.tensor_key(a.clone().requires_grad_()) is not None
    assert launches.tensor_key(torch.randn(4, 4, dtype=torch.complex64).conj().imag) is None  # lazily negated

    class Sub(torch.Tensor):
        pass

    assert launches.tensor_key(a.as_subclass(Sub)) is None
    assert launches.call_key((a, None), (["not", "hashable"],)) is None
    assert launches.call_key((a, "not a tensor"), ()) is None
    assert launches.call_key((a, None), ("gelu",)) == launches.call_key((torch.randn(4, 4), None), ("gelu",))


def test_the_cache_is_bounded_and_nothing_is_kept_off_the_gpu(monkeypatch):
    cache = launches.LaunchCache(size=3)
    for i in range(7):
        cache.keep(("k", i), object())
    assert 1 <= len(cache) <= 3 and cache.get(("k", 6)) is not None and cache.get(None) is None
    cache.keep(None, object())
    assert len(cache) <= 3
    monkeypatch.setattr(launches, "_keep", launches._keep)  # restored after the test
    assert launches.set_keeping(False) is True
    assert not launches.keeping()
    launches.set_keeping(True)
    assert launches.keeping() == runtime.on_gpu()


def test_a_config_key_names_every_setting():
    one = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3)
    other = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8, num_stages=3)
    assert launches.config_key(None) is None
    assert launches.config_key(one) != launches.config_key(other)
    assert launches.config_key(one) == launches.config_key(
        triton.Config({"BLOCK_K": 32, "BLOCK_N": 64, "BLOCK_M": 64}, num_warps=4, num_stages=3))


class _RecordedBound:
    """Stands in for a ``BoundLaunch`` (GPU only): records the argument list each launch gets."""

    scratch_allocator = None
    owns_scratch = False

    def __init__(self, names):
        self.names = list(names)
        self.arguments = [f"bound {n}" for n in names]
        self.launched = []

    def forget(self, *names):
        for n in names:
            self.arguments[self.names.index(n)] = None
        return self

    def slot(self, name):
        return self.names.index(name)

    def launch(self, arguments):
        self.launched.append(dict(zip(self.names, arguments)))


def test_a_kept_launch_hands_each_parameter_its_tensor():
    """The tensors of the call by source, C for the output and for a missing tensor, a strided bias
    copied contiguous (as the checks copy it), the workspace per call, the other arguments kept."""
    bound = _RecordedBound(["a_ptr", "b_ptr", "c_ptr", "bias_ptr", "ws_ptr", "M"])
    buffer = torch.zeros(4)
    kept = launches.KeptLaunch(bound, (2, 3), torch.float16, {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out",
                                                             "bias_ptr": "bias"}, workspace=lambda: {"ws_ptr": buffer})
    a, b, bias = torch.randn(2, 5), torch.randn(5, 3), torch.randn(6)[::2]
    cache = launches.LaunchCache()
    cache.keep(("key",), kept)
    assert cache.run(None, a=a, b=b) is None and cache.run(("other",), a=a, b=b) is None
    out = cache.run(("key",), a=a, b=b, bias=bias)
    assert out.shape == (2, 3) and out.dtype == torch.float16
    got = bound.launched[-1]
    assert got["a_ptr"] is a and got["b_ptr"] is b and got["c_ptr"] is out and got["ws_ptr"] is buffer
    assert got["M"] == "bound M"
    assert got["bias_ptr"].is_contiguous() and torch.equal(got["bias_ptr"], bias)
    out = kept(a=a, b=b, bias=None)
    assert bound.launched[-1]["bias_ptr"] is out  # no bias: C stands in, never read
    contiguous = torch.randn(3)
    kept(a=a, b=b, bias=contiguous)
    assert bound.launched[-1]["bias_ptr"] is contiguous  # no copy when none is needed


# ----------------------------------------------------------------------------- on a GPU
def _fp8_inputs(M, N, K):
    a, sa = fp8.quantize_fp8(torch.randn(M, K, device=DEVICE), "row")
    w, sw = fp8.quantize_fp8(torch.randn(N, K, device=DEVICE), "row")
    return a, w.t(), sa, sw.t()


#: launcher name -> (call(a, b, bias), its cache, its TunedKernel, needs)
def _launchers():
    table = {
        "matmul": (lambda a, b, bias: gk.matmul(a, b, bias=bias, activation="gelu"), matmul._KEPT,
                   matmul._matmul_tuned, None),
        "matmul_persistent": (lambda a, b, bias: gk.matmul_persistent(a, b, bias=bias, activation="gelu"),
                              persistent._KEPT["persistent"], persistent._persistent_tuned, None),
        "matmul_tma": (lambda a, b, bias: gk.matmul_tma(a, b, bias=bias, activation="gelu"),
                       persistent._KEPT["tma"], persistent._tma_tuned, "tma"),
        "matmul_streamk": (lambda a, b, bias: gk.matmul_streamk(a, b, bias=bias, activation="gelu"),
                           streamk._KEPT, streamk._streamk_tuned, "tma"),
        "matmul_splitk": (lambda a, b, bias: gk.matmul_splitk(a, b, bias=bias, activation="gelu"),
                          splitk._KEPT, splitk._splitk_tuned, None),
    }
    return table


LAUNCHERS = list(_launchers())


def _refuse(*args, **kwargs):
    raise AssertionError("a kept call must not go through Triton's Python launch path")


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("name", LAUNCHERS)
def test_gpu_a_repeated_call_launches_the_kept_kernel_with_its_own_tensors(name, monkeypatch):
    """From the second call with a key, each launcher goes straight to its compiled kernel
    (Triton's launch path is made to fail): fresh tensors, new values and addresses, NaN-poisoned
    C, a strided bias copied per call as the checks would, all come out right."""
    call, cache, tuned, needs = _launchers()[name]
    if needs == "tma" and not runtime.supports_tma():
        pytest.skip("needs TMA (sm_90+)")
    M, N, K, dtype = 96, 136, 2056, torch.float16  # few tiles and a long K: Stream-K and split-K split
    w = random_matrix(N, K, dtype)
    bias = torch.randn(2 * N, device=DEVICE).to(dtype)[::2]
    call(random_matrix(M, K, dtype), w.t(), bias)  # checks, tunes, keeps
    kept = len(cache)
    assert kept >= 1
    monkeypatch.setattr(tuned.fn, "run", _refuse)
    for _ in range(2):
        a, w2 = random_matrix(M, K, dtype), random_matrix(N, K, dtype)
        bias2 = torch.randn(2 * N, device=DEVICE).to(dtype)[::2]
        out = call(a, w2.t(), bias2)
        assert_close(out, matmul_ref(a, w2.t(), activation="gelu", bias=bias2, out_dtype=torch.float64), dtype)
    assert len(cache) == kept


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("name", LAUNCHERS)
def test_gpu_another_alignment_or_layout_is_checked_and_kept_apart(name):
    """A view whose base is not 16-byte aligned, or a transposed b, is a new key: checked, and
    right (the kept launch was specialised on the aligned pointer)."""
    call, cache, _, needs = _launchers()[name]
    if needs == "tma" and not runtime.supports_tma():
        pytest.skip("needs TMA (sm_90+)")
    M, N, K, dtype = 64, 72, 264, torch.bfloat16
    a, b = random_matrix(M, K + 8, dtype), random_matrix(K, N, dtype)
    for view in (a[:, :K], a[:, 8:], a[:, 8:]):  # aligned, then a 16-byte shifted base (8 bf16), twice
        assert_close(call(view, b, None), matmul_ref(view, b, activation="gelu", out_dtype=torch.float64), dtype)
    if needs != "tma":  # a 2-byte shifted base: pointer kernels only (TMA refuses it by name)
        view = a[:, 1:K + 1]
        assert_close(call(view, b, None), matmul_ref(view, b, activation="gelu", out_dtype=torch.float64), dtype)
        assert_close(call(view, b, None), matmul_ref(view, b, activation="gelu", out_dtype=torch.float64), dtype)
    bt = random_matrix(N, K, dtype).t()
    for _ in range(2):
        assert_close(call(a[:, :K], bt, None), matmul_ref(a[:, :K], bt, activation="gelu", out_dtype=torch.float64),
                     dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("name", LAUNCHERS)
def test_gpu_kept_launches_hold_none_of_the_callers_tensors(name):
    call, _, _, needs = _launchers()[name]
    if needs == "tma" and not runtime.supports_tma():
        pytest.skip("needs TMA (sm_90+)")
    a, b = random_matrix(80, 144, torch.float16), random_matrix(144, 88, torch.float16)
    bias = random_matrix(1, 88, torch.float16)[0]
    first, again = call(a, b, bias), call(a, b, bias)
    refs = [weakref.ref(t) for t in (a, b, bias, first, again)]
    del a, b, bias, first, again
    gc.collect()
    assert all(r() is None for r in refs)


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
def test_gpu_bad_input_after_a_kept_call_still_gets_its_error():
    """A key is made only from what was checked: a call that differs in anything checked (a
    mismatched K, a tensor that needs grad, another device type) takes the checks again."""
    a, b = random_matrix(64, 128, torch.float16), random_matrix(128, 64, torch.float16)
    gk.matmul_persistent(a, b)
    gk.matmul_persistent(a, b)
    with pytest.raises(ValueError, match="inner dimensions"):
        gk.matmul_persistent(a, random_matrix(127, 64, torch.float16))
    with pytest.raises(ValueError, match="requires grad"):
        gk.matmul_persistent(a.clone().requires_grad_(), b)
    with pytest.raises(ValueError, match="kernels run"):
        gk.matmul_persistent(a.cpu(), b.cpu())


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
def test_gpu_nothing_is_kept_when_switched_off(monkeypatch):
    monkeypatch.setattr(launches, "_keep", False)
    monkeypatch.setattr(matmul, "_KEPT", launches.LaunchCache())
    a, b = random_matrix(40, 72, torch.float16), random_matrix(72, 56, torch.float16)
    for _ in range(2):
        assert_close(gk.matmul(a, b), matmul_ref(a, b, out_dtype=torch.float64))
    assert len(matmul._KEPT) == 0


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("bias_kind", [None, "strided"])
def test_gpu_scaled_mm_repeats_through_its_kept_launch(bias_kind, monkeypatch):
    if not runtime.supports_fp8():
        pytest.skip("needs fp8 (sm_89+)")
    M, N, K = 72, 264, 512
    bias = None if bias_kind is None else torch.randn(2 * N, device=DEVICE).to(torch.bfloat16)[::2]
    gk.scaled_mm(*_fp8_inputs(M, N, K), bias=bias)
    monkeypatch.setattr(fp8._scaled_mm_tuned.fn, "run", _refuse)
    for _ in range(2):
        a, b, sa, sb = _fp8_inputs(M, N, K)
        out = gk.scaled_mm(a, b, sa, sb, bias=bias)
        assert_close(out, fp8.scaled_mm_ref(a, b, sa, sb, bias=bias, out_dtype=torch.float64), torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
def test_gpu_scaled_grouped_mm_repeats_through_its_kept_launch(monkeypatch):
    if not runtime.supports_fp8():
        pytest.skip("needs fp8 (sm_89+)")
    from gemm_kernels.kernels import moe

    counts = [5, 0, 70, 33]
    offs = torch.tensor(counts, device=DEVICE).cumsum(0).to(torch.int32)

    def inputs():
        x, sx = fp8.quantize_fp8(torch.randn(sum(counts), 256, device=DEVICE), "row")
        w, sw = fp8.quantize_experts(torch.randn(4, 256, 128, device=DEVICE))
        return x, w, sx[:, 0], sw

    gk.scaled_grouped_mm(*inputs(), offs)
    monkeypatch.setattr(moe._grouped_mm_kernel, "run", _refuse)
    for _ in range(2):
        x, w, sx, sw = inputs()
        out = gk.scaled_grouped_mm(x, w, sx, sw, offs)
        assert_close(out, fp8.scaled_grouped_mm_ref(x, w, sx, sw, offs, out_dtype=torch.float64), torch.bfloat16)
