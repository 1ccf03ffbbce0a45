"""Kept launches (``kernels.launches``): the key, the cache, and on a GPU every single-GEMM
launcher's repeated call going straight to its compiled kernel with the new call's tensors."""

import ctypes
import gc
import types
import weakref

import pytest
import torch
import triton

import gemm_kernels as gk
from gemm_kernels import DEVICE, _triton_compat, matmul_ref, runtime
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
    for sparse in (a.to_sparse(), a.to_sparse_csr()):  # no strides to key (the checks name to_dense)
        assert launches.tensor_key(sparse) is None and launches.call_key((a, sparse), ()) is None
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


def test_the_call_key_is_each_tensors_key_then_the_options(monkeypatch):
    """call_key inlines tensor_key (host time): the same parts, None for an absent tensor, and
    grad mode read once per key, only when a tensor requires grad."""
    a, b, bias = torch.randn(8, 16), torch.randn(16, 8).t(), torch.randn(8)[1:]
    assert launches.call_key((a, b, bias, None), ("gelu", 8)) == (
        launches.tensor_key(a), launches.tensor_key(b), launches.tensor_key(bias), None, "gelu", 8, str, int)
    w = torch.nn.Parameter(torch.randn(8, 16))
    assert launches.call_key((a, w), ()) is None
    with torch.no_grad():
        assert launches.call_key((w, w), ()) == (launches.tensor_key(w), launches.tensor_key(w))
    reads = []

    def grad_off():
        reads.append(1)
        return False

    monkeypatch.setattr(torch, "is_grad_enabled", grad_off)
    assert launches.call_key((a, b), ()) is not None and reads == []
    assert launches.call_key((w, w, w), ()) is not None and reads == [1]


def test_only_the_fast_path_of_a_kernel_without_launch_metadata_takes_addresses():
    """SpecializedLaunch.takes_addresses: the C launcher reads an int as a pointer, the public
    ``kernel[grid]`` fallback would specialise it as an integer, and a kernel's launch_metadata
    function (called with the arguments while a profiler's hooks are set) may read tensors."""
    launch = object.__new__(_triton_compat.SpecializedLaunch)
    launch._kernel = types.SimpleNamespace(launch_metadata=None)
    launch.fast = False
    assert not launch.takes_addresses
    launch.fast = True
    assert launch.takes_addresses
    launch._kernel = types.SimpleNamespace(launch_metadata=lambda grid, metadata, args: {})
    assert not launch.takes_addresses


class _AddressBound(_RecordedBound):
    """A bound launch that takes addresses: each launch also runs ``on_launch(arguments)``."""

    takes_addresses = True
    on_launch = None

    def launch(self, arguments):
        super().launch(arguments)
        if self.on_launch is not None:
            self.on_launch(dict(zip(self.names, arguments)))


def test_a_kept_launch_hands_a_launch_that_takes_addresses_the_addresses():
    """Where the bound launch goes straight to the C launcher, a kept call passes each tensor's
    address (an int: the launcher asks the driver about none) and holds the tensors meanwhile: a
    strided bias's contiguous copy and fresh workspace buffers (as under a graph capture) are
    alive, with their values, while the launch runs."""
    names = ["a_ptr", "b_ptr", "c_ptr", "bias_ptr", "ws_ptr", "flag_ptr", "M"]
    bound = _AddressBound(names)
    made = []

    def workspace():  # fresh each call, held by nothing but the returned dict
        buffers = {"ws_ptr": torch.full((4,), 7.0), "flag_ptr": torch.zeros(2, dtype=torch.int32)}
        made.append([weakref.ref(t) for t in buffers.values()])
        return buffers

    seen = {}

    def on_launch(arguments):
        seen["alive"] = all(ref() is not None for ref in made[-1])
        seen["bias"] = list((ctypes.c_float * 3).from_address(arguments["bias_ptr"]))
        seen["ws"] = list((ctypes.c_float * 4).from_address(arguments["ws_ptr"]))

    bound.on_launch = on_launch
    kept = launches.KeptLaunch(bound, torch.Size([2, 3]), torch.float16,
                               {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out", "bias_ptr": "bias"}, workspace=workspace,
                               out_device=torch.device("cpu"))
    assert kept.addresses
    a, b, bias = torch.randn(2, 5), torch.randn(5, 3), torch.randn(6)[::2]
    out = kept(a=a, b=b, bias=bias)
    assert out.shape == (2, 3) and out.dtype == torch.float16 and out.device == torch.device("cpu")
    got = bound.launched[-1]
    assert all(type(got[n]) is int for n in names[:-1]) and got["M"] == "bound M"
    assert (got["a_ptr"], got["b_ptr"], got["c_ptr"]) == (a.data_ptr(), b.data_ptr(), out.data_ptr())
    assert got["bias_ptr"] != bias.data_ptr()  # the contiguous copy's address...
    assert seen["alive"] and seen["bias"] == bias.tolist() and seen["ws"] == [7.0] * 4  # ...alive meanwhile
    out = kept(a=a, b=b, bias=None)
    assert bound.launched[-1]["bias_ptr"] == out.data_ptr()  # no bias: C stands in, never read


def test_a_kept_launch_keeps_tensors_for_a_launch_that_takes_none():
    """A bound launch on the public fallback (takes_addresses False) gets the tensors themselves."""
    bound = _AddressBound(["a_ptr", "b_ptr", "c_ptr", "bias_ptr"])
    bound.takes_addresses = False
    kept = launches.KeptLaunch(bound, (2, 3), torch.float32, {"a_ptr": "a", "b_ptr": "b", "c_ptr": "out",
                                                             "bias_ptr": "bias"})
    a, b = torch.randn(2, 5), torch.randn(5, 3)
    out = kept(a=a, b=b, bias=None)
    got = bound.launched[-1]
    assert got["a_ptr"] is a and got["b_ptr"] is b and got["c_ptr"] is out and got["bias_ptr"] is out


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


def _spy_on_launches(monkeypatch) -> list:
    """(bound launch, its arguments) of every SpecializedLaunch.launch from now on."""
    launched = []
    real = _triton_compat.SpecializedLaunch.launch

    def spy(self, arguments, grid=None):
        launched.append((self, list(arguments)))
        return real(self, arguments, grid)

    monkeypatch.setattr(_triton_compat.SpecializedLaunch, "launch", spy)
    return launched


def _kept_of(cache, bound):
    (kept,) = [k for k in cache._launches.values() if k.bound is bound]
    return kept


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("name", LAUNCHERS)
def test_gpu_a_kept_call_hands_the_c_launcher_addresses(name, monkeypatch):
    """On the fast path a kept call gives the C launcher each tensor and workspace buffer as its
    address, an int (no driver query per pointer), and the result is right against torch in
    float64 (fresh tensors, NaN-poisoned C, a strided bias copied per call).  With the internals
    off (the public launch) the kernel gets the tensors."""
    call, cache, _, needs = _launchers()[name]
    if needs == "tma" and not runtime.supports_tma():
        pytest.skip("needs TMA (sm_90+)")
    M, N, K, dtype = 96, 136, 2056, torch.float16
    bias = torch.randn(2 * N, device=DEVICE).to(dtype)[::2]
    call(random_matrix(M, K, dtype), random_matrix(N, K, dtype).t(), bias)  # checks, tunes, keeps
    launched = _spy_on_launches(monkeypatch)
    a, w = random_matrix(M, K, dtype), random_matrix(N, K, dtype)
    out = call(a, w.t(), bias)
    assert_close(out, matmul_ref(a, w.t(), activation="gelu", bias=bias, out_dtype=torch.float64), dtype)
    ((bound, arguments),) = launched
    kept = _kept_of(cache, bound)
    assert kept.addresses == bound.takes_addresses == _triton_compat.internals_enabled("launcher")
    passed = [arguments[i] for i in (*(i for i, _ in kept.sources), *kept.workspace_slots.values())]
    assert all(isinstance(x, int if kept.addresses else torch.Tensor) for x in passed)
    addresses = {x if kept.addresses else x.data_ptr() for x in passed}
    assert {a.data_ptr(), out.data_ptr()} <= addresses


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("name", ["matmul", "matmul_tma"])
def test_gpu_a_kept_call_with_a_profiler_hook_set_is_seen_and_right(name, monkeypatch):
    """With a launch hook set (as proton sets one) a kept call takes Triton's launcher object with
    the launch's metadata, addresses among its arguments: the hook sees the kernel, C is right."""
    from triton import knobs

    call, _, tuned, needs = _launchers()[name]
    if needs == "tma" and not runtime.supports_tma():
        pytest.skip("needs TMA (sm_90+)")
    M, N, K, dtype = 64, 72, 264, torch.float16
    call(random_matrix(M, K, dtype), random_matrix(K, N, dtype), None)  # checks, tunes, keeps
    seen = []
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: seen.append(metadata.get()["name"]))
    a, b = random_matrix(M, K, dtype), random_matrix(K, N, dtype)
    out = call(a, b, None)
    torch.cuda.synchronize()
    assert seen == [tuned.fn.fn.__name__]
    assert_close(out, matmul_ref(a, b, activation="gelu", out_dtype=torch.float64), dtype)


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("name", ["matmul_tma", "matmul_streamk", "matmul_splitk"])
def test_gpu_a_kept_call_captured_in_a_graph_takes_fresh_buffers(name, monkeypatch):
    """A kept call captured in a CUDA graph takes fresh workspace buffers and descriptor scratch (a
    graph may be replayed on another stream while eager calls use the kept ones): none of the
    kept buffers is handed over and none is kept for the capture's stream.  Replays follow new
    values in the captured inputs; eager kept calls in between stay right."""
    call, cache, _, needs = _launchers()[name]
    if needs == "tma" and not runtime.supports_tma():
        pytest.skip("needs TMA (sm_90+)")
    M, N, K, dtype = 96, 136, 2056, torch.float16  # few tiles, a long K: Stream-K and split-K split
    a, w = random_matrix(M, K, dtype), random_matrix(N, K, dtype)
    bias = random_matrix(1, N, dtype)[0]
    call(a, w.t(), bias)  # checks, tunes, keeps
    call(a, w.t(), bias)  # a kept call: its per-stream buffers exist now
    torch.cuda.synchronize()
    kept_buffers = {key: t.data_ptr() for key, t in runtime._STREAM_BUFFERS.items()}
    launched = _spy_on_launches(monkeypatch)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(a, w.t(), bias)
    ((bound, arguments),) = launched
    kept = _kept_of(cache, bound)
    workspace = [arguments[i] for i in kept.workspace_slots.values()]
    assert len(workspace) == (0 if name == "matmul_tma" else 2)
    assert not {x if isinstance(x, int) else x.data_ptr() for x in workspace} & set(kept_buffers.values())
    assert {key: t.data_ptr() for key, t in runtime._STREAM_BUFFERS.items()} == kept_buffers
    for _ in range(2):
        a.copy_(random_matrix(M, K, dtype))
        w.copy_(random_matrix(N, K, dtype))
        out.fill_(float("nan"))
        graph.replay()
        x = random_matrix(M, K, dtype)
        eager = call(x, w.t(), bias)
        torch.cuda.synchronize()
        assert_close(out, matmul_ref(a, w.t(), activation="gelu", bias=bias, out_dtype=torch.float64), dtype)
        assert_close(eager, matmul_ref(x, w.t(), activation="gelu", bias=bias, out_dtype=torch.float64), dtype)


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
