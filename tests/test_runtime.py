"""The runtime decides once: interpreter on a CPU-only machine (never touching CUDA), forceable on a GPU."""

import os
import subprocess
import sys

import pytest

import gemm_kernels
from gemm_kernels import runtime


def _run(code, **env):
    full_env = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_describe_reports_every_fact():
    info = gemm_kernels.describe()
    for key in ("mode", "device", "gpu", "num_sms", "supports_tma", "torch", "triton"):
        assert key in info
    assert info["num_sms"] == gemm_kernels.num_sms() >= 1
    assert str(gemm_kernels.DEVICE) == info["device"]


def test_interpreter_matches_environment():
    assert os.environ.get("TRITON_INTERPRET") == ("1" if runtime.interpreted() else os.environ.get("TRITON_INTERPRET"))
    if runtime.interpreted():
        assert gemm_kernels.DEVICE.type == "cpu"
        assert gemm_kernels.num_sms() == runtime.INTERPRETER_NUM_SMS


def test_forcing_the_interpreter_switches_triton_before_kernels_exist():
    code = (
        "import gemm_kernels, torch\n"
        "from gemm_kernels.kernels.matmul import _matmul_kernel\n"
        "print(gemm_kernels.interpreted(), type(_matmul_kernel).__name__, gemm_kernels.DEVICE)\n"
        "a = torch.randn(5, 7, dtype=torch.float16); b = torch.randn(7, 3, dtype=torch.float16)\n"
        "print(float((gemm_kernels.matmul(a, b).float() - a.float() @ b.float()).abs().max()) < 1e-2)\n"
    )
    out = _run(code, GEMM_KERNELS_INTERPRET="1").splitlines()
    assert out[0] == "True InterpretedFunction cpu"
    assert out[1] == "True"


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the CPU-only path")
def test_cpu_import_and_run_never_initialise_cuda():
    code = (
        "import torch, gemm_kernels\n"
        "a = torch.randn(20, 9, dtype=torch.bfloat16); b = torch.randn(9, 11, dtype=torch.bfloat16)\n"
        "gemm_kernels.matmul(a, b)\n"
        "print(torch.cuda.is_initialized())\n"
    )
    assert _run(code) == "False"


@pytest.mark.gpu
def test_gpu_runtime_facts():
    import torch

    assert runtime.on_gpu() and gemm_kernels.DEVICE.type == "cuda"
    props = torch.cuda.get_device_properties(0)
    assert gemm_kernels.num_sms() == props.multi_processor_count
    assert gemm_kernels.supports_tma() == (props.major >= 9)
    assert gemm_kernels.gpu_name() == props.name


@pytest.mark.parametrize("length, itemsize, expected", [
    (0, 2, 8), (1, 2, 8), (8, 2, 8), (9, 2, 16), (3, 4, 4), (5, 4, 8), (1, 8, 2), (0, 16, 1), (3, 16, 3), (7, 1, 16),
])
def test_tma_row_length_is_the_smallest_whole_number_of_16_byte_units(length, itemsize, expected):
    got = runtime.tma_row_length(length, itemsize)
    assert got == expected
    assert got >= max(length, 1) and got * itemsize % runtime.TMA_ALIGN_BYTES == 0


def test_require_tma_names_what_needs_it_the_gpu_and_the_alternative(monkeypatch):
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)
    monkeypatch.setattr(runtime, "RUNTIME", runtime.Runtime(
        interpreted=False, device=runtime.DEVICE, gpu_name="A100-SXM4-80GB", capability=(8, 0), num_sms=108, reason="test"))
    with pytest.raises(RuntimeError, match=r"^my_kernel needs the Tensor Memory Accelerator.*A100-SXM4-80GB is sm_80\. "
                                           r"Use the other one\.$"):
        runtime.require_tma("my_kernel", "Use the other one.")
    monkeypatch.setattr(runtime, "supports_tma", lambda: True)
    runtime.require_tma("my_kernel", "unused")  # no error where TMA exists


_EVERY_KERNEL_RUNS = (
    "import gemm_kernels, torch, triton, triton.language as tl\n"
    "from gemm_kernels.testing import rel_err\n"
    "a = torch.randn(40, 64); b = torch.randn(64, 48); ref = (a.double() @ b.double())\n"
    "errs = [rel_err(f(a, b), ref) for f in (gemm_kernels.matmul, gemm_kernels.matmul_persistent,\n"
    "        gemm_kernels.matmul_tma, gemm_kernels.matmul_streamk)]\n"
    "errs += [rel_err(c, ref) for c in gemm_kernels.grouped_matmul([a, a], [b, b])]\n"
    "@triton.jit\n"
    "def blocks_kernel(out_ptr, n):  # a learner's kernel, defined after the import, calling tl.cdiv\n"
    "    tl.store(out_ptr, tl.cdiv(n, 32))\n"
    "out = torch.zeros(1, dtype=torch.int32); blocks_kernel[(1,)](out, 100)\n"
    "print(gemm_kernels.describe()['mode'], max(errs) < 1e-5, int(out))\n"
)


@pytest.mark.parametrize("first", ["import triton", "import torch._dynamo", "import triton.language as tl"])
def test_triton_imported_before_the_package_still_interprets(first):
    """Triton decorated its library helpers (tl.cdiv, ...) as compiled functions when it was imported
    before gemm_kernels set TRITON_INTERPRET: every kernel failed with "Cannot call @triton.jit'd
    outside of the scope of a kernel".  The package switches them to the interpreter."""
    env = {"GEMM_KERNELS_INTERPRET": "1"}
    env_without_interpret = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", f"{first}\n{_EVERY_KERNEL_RUNS}"], capture_output=True, text=True,
                         env={**env_without_interpret, **env}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "interpreter (CPU) True 4"


@pytest.fixture
def fake_streams(monkeypatch):
    """stream_buffer(s) on a CPU: counted capture checks and stream look-ups (``state`` says what
    they answer), CPU buffers for "cuda" ones, an empty set of kept buffers."""
    import torch

    state = {"capturing": False, "stream": 11, "device": 0, "captures": 0, "streams": 0, "capture_id": None}

    def capturing():
        state["captures"] += 1
        return state["capturing"]

    def stream(index):
        state["streams"] += 1
        return state["stream"]

    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", capturing, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", stream, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: state["device"], raising=False)
    def fresh(numel, dtype, index, zeroed):
        return (torch.zeros if zeroed else torch.empty)(numel, dtype=dtype)

    monkeypatch.setattr(runtime, "_fresh_buffer", fresh)
    monkeypatch.setattr(runtime, "_STREAM_BUFFERS", {})
    monkeypatch.setattr(runtime, "_CAPTURE_ZEROS", {})
    monkeypatch.setattr(runtime, "_CAPTURE_SLICES", {})
    monkeypatch.setattr(runtime, "_capture_id", lambda stream: state["capture_id"])
    monkeypatch.setattr(runtime, "_capture_zeros_pool",
                        lambda index: torch.zeros(runtime._CAPTURE_ZEROS_BYTES, dtype=torch.uint8))
    return state


def test_stream_buffers_are_stream_buffers_for_one_capture_check_and_one_stream_look_up(fake_streams):
    import torch

    requests = (("test partials", 8, torch.float32, False), ("test flags", 5, torch.int32, True))
    partials, flags = runtime.stream_buffers(0, requests)
    assert (fake_streams["captures"], fake_streams["streams"]) == (1, 1)
    assert partials.dtype == torch.float32 and partials.numel() >= 8 and flags.dtype == torch.int32
    assert int(flags.abs().sum()) == 0  # zeroed
    assert runtime.stream_buffer("test partials", 8, torch.float32, 0) is partials
    assert runtime.stream_buffer("test flags", 3, torch.int32, 0, zeroed=True) is flags
    again = runtime.stream_buffers(0, requests)
    assert again[0] is partials and again[1] is flags
    assert runtime.stream_buffers(1, requests)[0] is not partials  # another device
    fake_streams["stream"] = 12  # another stream
    on_other = runtime.stream_buffers(0, requests)
    assert on_other[0] is not partials and on_other[1] is not flags
    bigger = runtime.stream_buffers(0, (("test partials", 64, torch.float32, False),))[0]
    assert bigger.numel() >= 64 and runtime.stream_buffer("test partials", 8, torch.float32, 0) is bigger


def test_stream_buffers_are_fresh_while_a_graph_is_captured(fake_streams):
    import torch

    requests = (("test partials", 8, torch.float32, False), ("test flags", 5, torch.int32, True))
    kept = runtime.stream_buffers(0, requests)
    fake_streams["capturing"], fake_streams["streams"] = True, 0
    first, again = runtime.stream_buffers(0, requests), runtime.stream_buffers(0, requests)
    assert not {id(t) for t in first + again} & {id(t) for t in kept} and first[0] is not again[0]
    assert int(first[1].abs().sum()) == 0 and fake_streams["streams"] == 0
    assert runtime.stream_buffer("test flags", 5, torch.int32, 0, zeroed=True) is not kept[1]
    assert {id(t) for t in runtime._STREAM_BUFFERS.values()} == {id(t) for t in kept}  # none kept for the capture


def test_a_capture_takes_its_zeroed_buffers_from_a_pool_zeroed_before_it(fake_streams, monkeypatch):
    """Under capture, a request whose kernels always leave it zero is a fresh slice of the device's pool
    (zero, so the graph records no memset node): one slice per call, never handed out twice.  Before any
    uncaptured call made the pool, or once it is spent (one warning), the capture gets torch.zeros; so
    does a plain zeroed request (Stream-K's flags: a wait that ran out leaves one raised)."""
    import torch

    requests = (("test partials", 8, torch.float32, False), ("test counts", 5, torch.int32, runtime.ALWAYS_LEFT_ZERO),
                ("test flags", 3, torch.int32, True))
    fake_streams["capturing"] = True
    before = runtime.stream_buffers(0, requests)[1]
    assert 0 not in runtime._CAPTURE_ZEROS and int(before.abs().sum()) == 0  # no pool yet: torch.zeros
    fake_streams["capturing"] = False
    runtime.stream_buffers(0, requests[2:])  # a plain zeroed request makes no pool
    assert 0 not in runtime._CAPTURE_ZEROS
    runtime.stream_buffers(0, requests)  # an uncaptured call makes device 0's pool, once
    pool = runtime._CAPTURE_ZEROS[0].zeros
    runtime.stream_buffers(0, requests)
    assert runtime._CAPTURE_ZEROS[0].zeros is pool
    fake_streams["capturing"] = True
    inside = lambda t: pool.data_ptr() <= t.data_ptr() < pool.data_ptr() + pool.numel()  # noqa: E731
    first, second = runtime.stream_buffers(0, requests), runtime.stream_buffers(0, requests)
    for _, counts, flags in (first, second):
        assert counts.dtype == torch.int32 and counts.numel() == 5 and int(counts.abs().sum()) == 0 and inside(counts)
        assert flags.numel() == 3 and int(flags.abs().sum()) == 0 and not inside(flags)
    assert second[1].data_ptr() - first[1].data_ptr() == 256  # its own aligned slice
    assert first[0].data_ptr() != second[0].data_ptr()
    runtime._CAPTURE_ZEROS[0].free = pool.numel() - 16  # spent
    with pytest.warns(UserWarning, match="are spent"):
        spent = runtime.stream_buffers(0, requests)[1]
    assert not inside(spent) and int(spent.abs().sum()) == 0
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runtime.stream_buffers(0, requests)  # warned once


def test_the_calls_of_one_capture_on_one_stream_share_their_slice_of_the_pool(fake_streams):
    """With the driver's capture id, a capture's calls on one stream (which run one after another and
    leave the counts zero) share one slice per purpose, so a graph of thousands of split calls holds a
    few slices; a larger request, another purpose, another stream or another capture gets its own."""
    import torch

    counts = ("test counts", 5, torch.int32, runtime.ALWAYS_LEFT_ZERO)
    runtime.stream_buffers(0, (counts,))  # makes the pool
    pool = runtime._CAPTURE_ZEROS[0]
    fake_streams["capturing"], fake_streams["capture_id"] = True, 7
    first = runtime.stream_buffers(0, (counts,))[0]
    for _ in range(1000):
        again = runtime.stream_buffers(0, (("test partials", 8, torch.float32, False), counts))
        assert again[1].data_ptr() == first.data_ptr() and again[1].numel() == 5
        assert int(again[1].abs().sum()) == 0
    assert pool.free == 256  # one slice for 1001 calls
    fewer = runtime.stream_buffers(0, (("test counts", 3, torch.int32, runtime.ALWAYS_LEFT_ZERO),))[0]
    assert fewer.data_ptr() == first.data_ptr() and fewer.numel() == 3
    larger = runtime.stream_buffers(0, (("test counts", 100, torch.int32, runtime.ALWAYS_LEFT_ZERO),))[0]
    assert larger.data_ptr() != first.data_ptr() and larger.numel() == 100 and pool.free == 256 + 512
    assert runtime.stream_buffers(0, (counts,))[0].data_ptr() == larger.data_ptr()  # the larger one from now on
    other_purpose = runtime.stream_buffers(0, (("test other counts", 5, torch.int32, runtime.ALWAYS_LEFT_ZERO),))[0]
    assert other_purpose.data_ptr() not in (first.data_ptr(), larger.data_ptr())
    fake_streams["stream"] = 12  # a side stream of the same capture: its calls may run beside these
    side = runtime.stream_buffers(0, (counts,))[0]
    assert side.data_ptr() not in (first.data_ptr(), larger.data_ptr(), other_purpose.data_ptr())
    fake_streams["stream"], fake_streams["capture_id"] = 11, 8  # the next capture (graphs may run at once)
    taken = {first.data_ptr(), larger.data_ptr(), other_purpose.data_ptr(), side.data_ptr()}
    assert runtime.stream_buffers(0, (counts,))[0].data_ptr() not in taken
    assert len(runtime._CAPTURE_SLICES) == 2  # one entry per stream, the last capture's


def test_the_capture_id_is_none_where_the_driver_cannot_tell(monkeypatch):
    """No CUDA driver (this CPU machine, or a driver without the entry point): no id, so each captured
    call takes a slice of its own, as before the ids."""
    monkeypatch.setattr(runtime, "_GET_CAPTURE_INFO", None)
    monkeypatch.setattr(runtime, "_driver_capture_info", lambda: False)
    assert runtime._capture_id(11) is None and runtime._GET_CAPTURE_INFO is False
    monkeypatch.setattr(runtime, "_GET_CAPTURE_INFO", lambda stream, status, capture_id: 1)  # an error
    assert runtime._capture_id(11) is None

    def driver(state, capture, result=0):  # what cuStreamGetCaptureInfo writes through its out-pointers
        def get(stream, status, capture_id):
            status._obj.value, capture_id._obj.value = state, capture
            return result
        return get

    for state, capture, expected in ((1, 5, 5), (0, 5, None), (2, 5, None), (1, 0, None)):  # 2: invalidated
        monkeypatch.setattr(runtime, "_GET_CAPTURE_INFO", driver(state, capture))
        assert runtime._capture_id(11) == expected, (state, capture)


def test_split_k_counts_are_the_ones_a_capture_may_take_from_the_pool():
    """The kernels whose arrival counts are left zero on every path ask for the pool; Stream-K's flags,
    which a wait that ran out leaves raised, do not."""
    import inspect

    from gemm_kernels.kernels import matmul_ws, splitk, streamk

    assert "runtime.ALWAYS_LEFT_ZERO" in inspect.getsource(splitk._workspace)
    assert "runtime.ALWAYS_LEFT_ZERO" in inspect.getsource(matmul_ws._split_workspace)
    assert "ALWAYS_LEFT_ZERO" not in inspect.getsource(streamk)


def test_tma_scratch_keys_on_the_stream_triton_hands_it(fake_streams):
    """Triton passes the stream it launches on (the current one): no second look-up of it."""
    import torch

    scratch = runtime.tma_scratch(256, 128, 11)
    assert fake_streams["streams"] == 0 and scratch.dtype == torch.uint8 and scratch.numel() >= 256
    assert runtime.stream_buffer("tma scratch", 256, torch.uint8, 0) is scratch  # the current stream is 11
    assert runtime.tma_scratch(128, 128, 12) is not scratch  # another stream
    fake_streams["capturing"] = True
    assert runtime.tma_scratch(256, 128, 11) is not scratch


def test_the_kept_buffers_start_over_past_their_cap(fake_streams, monkeypatch):
    import torch

    monkeypatch.setattr(runtime, "_MAX_STREAM_BUFFERS", 2)
    first = runtime.stream_buffers(0, (("one", 4, torch.float32, False), ("two", 4, torch.float32, False)))
    assert len(runtime._STREAM_BUFFERS) == 2
    runtime.stream_buffer("three", 4, torch.float32, 0)
    assert len(runtime._STREAM_BUFFERS) == 1
    assert runtime.stream_buffer("one", 4, torch.float32, 0) is not first[0]


@pytest.mark.gpu
def test_gpu_stream_buffers_are_the_stream_buffers_zeroed_and_fresh_in_a_capture():
    """runtime.stream_buffers on a GPU: the same buffers as stream_buffer for (device, stream,
    purpose), a zeroed one at zero, others on another stream, fresh ones while a graph is captured
    (their zeroing a node of the graph) and none kept for the capture."""
    import torch

    index = torch.cuda.current_device()
    for purpose in ("test many partials", "test many flags"):
        runtime.reset_stream_buffers(purpose)
    requests = (("test many partials", 8, torch.float32, False), ("test many flags", 5, torch.int32, True))
    partials, flags = runtime.stream_buffers(index, requests)
    assert partials.device == flags.device == torch.device("cuda", index)
    assert partials.numel() >= 8 and flags.numel() >= 5 and int(flags.abs().sum()) == 0
    assert runtime.stream_buffer("test many partials", 8, torch.float32, index) is partials
    assert runtime.stream_buffer("test many flags", 5, torch.int32, index, zeroed=True) is flags
    scratch = runtime.tma_scratch(256, 128, torch._C._cuda_getCurrentRawStream(index))
    assert runtime.stream_buffer("tma scratch", 256, torch.uint8, index) is scratch
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = runtime.stream_buffers(index, requests)
    assert on_side[0].data_ptr() != partials.data_ptr() and on_side[1].data_ptr() != flags.data_ptr()
    kept = {key: t.data_ptr() for key, t in runtime._STREAM_BUFFERS.items()}
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = runtime.stream_buffers(index, requests)
        captured[1].add_(3)  # replays: zeroed, then 3
    assert {key: t.data_ptr() for key, t in runtime._STREAM_BUFFERS.items()} == kept
    assert not {t.data_ptr() for t in captured} & set(kept.values())
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert captured[1].tolist()[:5] == [3] * 5
