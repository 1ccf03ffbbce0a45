"""matmul_streamk against the float64 reference; its schedule against tiles.streamk_segments.

The interpreter has 4 "SMs" and 32x32 blocks, so small ragged problems already have a partial
last wave, tiles cut between two or more programs, and programs with an empty share.
"""

import dataclasses

import numpy as np
import pytest
import torch
import triton

from gemm_kernels import DEVICE, matmul_ref, runtime
from gemm_kernels.kernels import configs
from gemm_kernels.models import tiles
from gemm_kernels.kernels import streamk
from gemm_kernels.kernels.streamk import MAX_PROGRAMS_PER_SM, _streamk_tuned, matmul_streamk
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.lab.traces import trace_streamk_segments
from gemm_kernels.testing import assert_close, random_matrix

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
BLOCKS = configs.INTERPRETER_BLOCKS
# ragged against the 32-blocks; split by default only (30, 50, 2050): 2 tiles for 4 programs, 65 K
# blocks (tiles.streamk_default_tiles); the others run matmul_tma's schedule unless sk_tiles says
SHAPES = [(1, 1, 1), (37, 61, 45), (97, 89, 301), (65, 33, 16), (2, 131, 67), (70, 40, 999), (30, 50, 2050)]


def _ids(shape):
    return "M{}-N{}-K{}".format(*shape)


def _inputs(M, N, K, dtype):
    return tma_aligned(random_matrix(M, K, dtype)), tma_aligned(random_matrix(K, N, dtype))


def _config(**extra):
    return triton.Config({**BLOCKS, **extra}, num_warps=4, num_stages=1)


def _ref(a, b, **epi):
    return matmul_ref(a, b, out_dtype=torch.float64, **epi)


@pytest.mark.parametrize("num_programs", [1, 3, 4, 5, 7, 64])
@pytest.mark.parametrize("sk_tiles", [None, 0, 1, "max"])
def test_every_split(num_programs, sk_tiles):
    """From no split (plain persistent) to every program sharing tiles, 1 to 64 programs."""
    M, N, K = 97, 89, 301  # 12 tiles of 10 K blocks
    if sk_tiles == "max":
        sk_tiles = min(12, num_programs)
    a, b = _inputs(M, N, K, torch.float16)
    bias = torch.randn(N).to(DEVICE, torch.float16)
    out = matmul_streamk(a, b, bias=bias, activation="gelu", num_programs=num_programs, config=_config(),
                         sk_tiles=sk_tiles)
    assert_close(out, _ref(a, b, bias=bias, activation="gelu"))


@pytest.mark.parametrize("activation", [None, "relu", "leaky_relu", "gelu"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_epilogue_on_split_tiles(activation, with_bias):
    """The epilogue runs once, after the partial sums are added (gelu of a partial sum would be wrong)."""
    M, N, K = 70, 67, 400
    a, b = _inputs(M, N, K, torch.float16)
    bias = torch.randn(N).to(DEVICE, torch.float16) if with_bias else None
    out = matmul_streamk(a, b, activation=activation, bias=bias, num_programs=4, config=_config(), sk_tiles=4)
    assert_close(out, _ref(a, b, activation=activation, bias=bias))


@pytest.mark.parametrize("layout", ["a_t", "b_t", "both_t"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_column_major_inputs(layout, dtype):
    M, N, K = 45, 70, 130
    a = tma_aligned(random_matrix(K, M, dtype)).t() if layout in ("a_t", "both_t") else tma_aligned(random_matrix(M, K, dtype))
    b = tma_aligned(random_matrix(N, K, dtype)).t() if layout in ("b_t", "both_t") else tma_aligned(random_matrix(K, N, dtype))
    assert_close(matmul_streamk(a, b, num_programs=5), _ref(a, b), dtype)


@pytest.mark.parametrize("n", [64, 61])  # 64: TMA stores C; 61 (122-byte rows): masked pointer stores
@pytest.mark.parametrize("subtile", [False, True])
def test_store_paths(n, subtile):
    a, b = _inputs(70, n, 200, torch.float16)
    out = matmul_streamk(a, b, activation="relu", num_programs=3, config=_config(EPILOGUE_SUBTILE=subtile), sk_tiles=3)
    assert_close(out, _ref(a, b, activation="relu"))


def _launch_raw(a, b, partials, flags, record, num_programs, sk_tiles, spin_limit=1 << 22):
    """The kernel launched with given buffers, as the autotuner and a CUDA graph replay do: no reset."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.full((M, N), float("nan"), device=DEVICE, dtype=a.dtype)
    args = streamk._tma_args(a, b, c, None, None, order="grouped", group_size_m=8, num_programs=num_programs,
                             activation=None)
    args.update(partial_ptr=partials, flag_ptr=flags, error_ptr=record, spin_limit=spin_limit,
                sk_tiles_requested=sk_tiles, SYSTEM_FENCE=runtime.on_gpu())
    streamk._matmul_streamk_kernel[(num_programs,)](**args, **configs.explicit_config_kwargs(_config(), "tma"))
    return c


def test_repeated_launches_on_one_buffer_need_no_reset():
    """The autotuner times a config by replaying one launch, buffers and all (notebook 05b hung the
    GPU when the ticket counter was zeroed only per call): every launch leaves flags and ticket at zero."""
    a, b = _inputs(97, 89, 301, torch.float16)
    partials = torch.empty(7 * 32 * 32, dtype=torch.float32, device=DEVICE)
    flags = torch.zeros(8, dtype=torch.int32, device=DEVICE)
    record = torch.zeros(8, dtype=torch.int32, device=DEVICE)
    for _ in range(3):
        assert_close(_launch_raw(a, b, partials, flags, record, num_programs=7, sk_tiles=7), _ref(a, b))
        assert flags.tolist() == [0] * 8 and record.tolist() == [0] * 8


def _dirty_workspace(monkeypatch, counter):
    """Make the launcher's flag buffer start with the ticket counter at ``counter`` (a buffer a
    failed launch left dirty)."""
    real_workspace = streamk._workspace

    def dirty(num_programs, tile_elements, device, reduction="deterministic"):
        partials, flags = real_workspace(num_programs, tile_elements, device, reduction)
        flags[num_programs] = counter
        return partials, flags

    monkeypatch.setattr(streamk, "_workspace", dirty)
    return real_workspace


@pytest.mark.parametrize("counter,pattern", [
    # tickets 2..6, then the reset, then 0 and 1: in the interpreter ticket 2 waits for ticket 1,
    # whose program runs last, so the wait runs out of polls
    (2, r"share 2 waited 50 polls for the partial sum of share 1"),
    (7, r"drew ticket \d+ of 7: the flag buffer was not zero"),  # every ticket past the last share
])
def test_a_wait_that_never_ends_is_bounded_and_reported(monkeypatch, counter, pattern):
    """A flag buffer left dirty: the launch still ends (every wait is bounded), and the next call
    raises a RuntimeError naming the kernel and the wait, then runs clean."""
    a, b = _inputs(97, 89, 301, torch.float16)
    monkeypatch.setattr(streamk, "SPIN_LIMIT", 50)
    real_workspace = _dirty_workspace(monkeypatch, counter)
    with pytest.raises(RuntimeError, match=r"matmul_streamk: a launch of _matmul_streamk_kernel \(7 programs\) "
                                           r"stopped early: .*" + pattern):
        matmul_streamk(a, b, num_programs=7, config=_config(), sk_tiles=5)
    monkeypatch.setattr(streamk, "_workspace", real_workspace)
    assert_close(matmul_streamk(a, b, num_programs=7, config=_config(), sk_tiles=5), _ref(a, b))


# ---------------------------------------------------------------- schedule: kernel == mirror, mirror's properties
@pytest.mark.parametrize("M,N,K,num_programs,sk_tiles", [
    (97, 89, 301, 4, None), (97, 89, 301, 4, 4), (97, 89, 301, 7, 5), (97, 89, 301, 3, 0),
    (37, 61, 1000, 5, None), (37, 30, 2100, 5, None), (150, 100, 64, 4, None), (1, 1, 1, 4, None),
    (33, 250, 330, 64, None), (33, 40, 330, 7, None),
])
def test_trace_equals_mirror(M, N, K, num_programs, sk_tiles):
    trace = trace_streamk_segments(M, N, K, num_programs=num_programs, sk_tiles=sk_tiles)
    num_tiles = tiles.cdiv(M, BLOCKS["BLOCK_M"]) * tiles.cdiv(N, BLOCKS["BLOCK_N"])
    mirror = tiles.streamk_segments(num_tiles, tiles.cdiv(K, BLOCKS["BLOCK_K"]), num_programs, sk_tiles)
    np.testing.assert_array_equal(trace.numpy(), mirror)


@pytest.mark.parametrize("num_tiles,k_tiles,num_programs,sk_tiles", [
    (512, 64, 132, None), (512, 64, 132, 116), (2048, 128, 132, 68), (1, 64, 132, None), (8, 128, 132, None),
    (20, 1, 4, None), (13, 10, 4, 1), (5, 3, 7, 5), (3, 3, 7, None), (0, 4, 4, None), (66, 64, 132, None),
])
def test_mirror_covers_every_iteration_once_and_balances(num_tiles, k_tiles, num_programs, sk_tiles):
    seg = tiles.streamk_segments(num_tiles, k_tiles, num_programs, sk_tiles)
    seg = seg[seg[:, 0] >= 0]
    covered = np.zeros((num_tiles, k_tiles), dtype=int)
    for _, tile, k_first, k_end in seg:
        covered[tile, k_first:k_end] += 1
    assert (covered == 1).all()
    sk = tiles.streamk_default_tiles(num_tiles, num_programs, k_tiles) if sk_tiles is None else sk_tiles
    dp = num_tiles - sk
    # Stream-K shares differ by at most one iteration; no program waits on a higher pid
    shares = np.zeros(num_programs, dtype=int)
    for program, tile, k_first, k_end in seg[seg[:, 1] >= dp]:
        shares[program] += k_end - k_first
    assert shares.max() - shares.min() <= 1
    for tile in range(dp, num_tiles):
        rows = seg[seg[:, 1] == tile]
        owner = rows[rows[:, 2] == 0]
        assert len(owner) == 1 and (rows[:, 0] <= owner[0, 0]).all()
    # each program leaves at most one partial sum (its workspace slot is its pid)
    partials = seg[(seg[:, 2] > 0)]
    assert len(np.unique(partials[:, 0])) == len(partials)


def test_default_splits_only_few_tile_problems():
    assert tiles.streamk_default_tiles(32, 132, 128) == 32  # 1024 x 1024 x 8192 in 128 x 256 x 64: all split
    assert tiles.streamk_default_tiles(66, 132, 64) == 66
    assert tiles.streamk_default_tiles(50, 132, 20) == 0  # 1280^3: K too short to pay for the hand-over
    assert tiles.streamk_default_tiles(67, 132, 128) == 0  # one wave, over half full: little to gain
    assert tiles.streamk_default_tiles(512, 132, 64) == 0  # 4096^3: the tail split is measured slower
    assert tiles.streamk_default_tiles(0, 132, 64) == 0


def test_splitting_the_tail_of_4096_cubed_evens_out_the_work():
    """The notebook's numbers: 128x256 tiles at 4096^3 on 132 SMs, the 116-tile tail split."""
    seg = tiles.streamk_segments(512, 64, 132, sk_tiles=116)
    work = np.zeros(132, dtype=int)
    for program, _, k_first, k_end in seg[seg[:, 0] >= 0]:
        work[program] += k_end - k_first
    assert work.max() == 3 * 64 + 57  # persistent: 4 * 64 = 256 K iterations on the busiest SM
    assert work.min() == 3 * 64 + 56


@pytest.mark.parametrize("args,pattern", [
    (dict(num_tiles=4, k_tiles=4, num_programs=4, sk_tiles=5), r"sk_tiles must be in \[0, min\(num_tiles, num_programs\)\] = \[0, 4\], got 5"),
    (dict(num_tiles=4, k_tiles=0, num_programs=4), r"k_tiles >= 1"),
    (dict(num_tiles=4, k_tiles=4, num_programs=0), r"num_programs >= 1"),
])
def test_mirror_rejects_bad_arguments(args, pattern):
    with pytest.raises(ValueError, match=pattern):
        tiles.streamk_segments(**args)


# ---------------------------------------------------------------- bad input
def test_sk_tiles_needs_a_config_and_a_valid_count():
    a, b = _inputs(97, 89, 64, torch.float16)
    with pytest.raises(ValueError, match=r"sk_tiles needs an explicit config"):
        matmul_streamk(a, b, sk_tiles=2)
    with pytest.raises(ValueError, match=r"sk_tiles=13 is more than min\(tiles, num_programs\) = min\(12, 64\)"):
        matmul_streamk(a, b, sk_tiles=13, num_programs=64, config=_config())
    with pytest.raises(ValueError, match=r"sk_tiles must be >= 0, got -1"):
        matmul_streamk(a, b, sk_tiles=-1, config=_config())
    with pytest.raises(TypeError, match=r"sk_tiles must be an int, got bool"):
        matmul_streamk(a, b, sk_tiles=True, config=_config())


def test_bad_inputs_get_matmul_tma_errors():
    a = random_matrix(16, 45)  # 90-byte rows: TMA cannot read them
    b = tma_aligned(random_matrix(45, 32))
    with pytest.raises(ValueError, match=r"^a cannot be read by TMA: its row stride is 90 bytes"):
        matmul_streamk(a, b)
    with pytest.raises(ValueError, match=r"inner dimensions"):
        matmul_streamk(tma_aligned(random_matrix(16, 48)), b)
    with pytest.raises(ValueError, match=r"activation"):
        matmul_streamk(tma_aligned(random_matrix(16, 45)), b, activation="swish")


def test_needs_hopper_on_a_gpu(monkeypatch):
    old_gpu = dataclasses.replace(runtime.RUNTIME, interpreted=False, gpu_name="NVIDIA A100", capability=(8, 0))
    monkeypatch.setattr(runtime, "RUNTIME", old_gpu)
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)
    a, b = _inputs(16, 16, 16, torch.float16)
    with pytest.raises(RuntimeError, match=r"matmul_streamk needs the Tensor Memory Accelerator.*sm_80.*matmul_persistent"):
        matmul_streamk(a, b)


def test_autotune_key_holds_the_epilogue_and_layouts():
    assert _streamk_tuned.keys == [*configs.SINGLE_GEMM_KEY, "A_COL_MAJOR", "B_COL_MAJOR", "REDUCTION",
                                   "sk_tiles_requested"]  # a pick per reduction mode and split rule
    for config in configs.streamk_configs(gpu=True):
        assert not config.kwargs["FLATTEN"] and not config.kwargs["WARP_SPECIALIZE"]


# ---------------------------------------------------------------- real sizes on the GPU
@pytest.mark.gpu
def test_gpu_every_config_and_split_is_correct():
    a, b = _inputs(1000, 1003, 1000, torch.float16)
    ref = _ref(a, b, activation="relu")
    for config in configs.streamk_configs():
        num_tiles = tiles.cdiv(1000, config.kwargs["BLOCK_M"]) * tiles.cdiv(1003, config.kwargs["BLOCK_N"])
        for sk_tiles in sorted({0, 1, min(num_tiles, runtime.num_sms()), None} - {None}) + [None]:
            try:
                out = matmul_streamk(a, b, activation="relu", config=config, sk_tiles=sk_tiles)
            except triton.runtime.OutOfResources:
                continue
            assert_close(out, ref, what=f"streamk with {config}, sk_tiles={sk_tiles}")


@pytest.mark.gpu
def test_gpu_trace_equals_mirror_at_real_block_sizes():
    trace = trace_streamk_segments(1000, 1003, 640, block_m=128, block_n=128, block_k=64)
    mirror = tiles.streamk_segments(8 * 8, 10, runtime.num_sms())
    np.testing.assert_array_equal(trace.numpy(), mirror)
    trace = trace_streamk_segments(500, 300, 64 * 70, block_m=128, block_n=128, block_k=64)  # 12 tiles: split
    mirror = tiles.streamk_segments(4 * 3, 70, runtime.num_sms())
    assert (mirror[:, 2] > 0).any()
    np.testing.assert_array_equal(trace.numpy(), mirror)


_GPU_SCRIPT = """
import sys, torch, triton, gemm_kernels
from gemm_kernels.kernels.streamk import MAX_PROGRAMS_PER_SM, matmul_streamk
from gemm_kernels.testing import assert_close
from gemm_kernels.kernels.tma import tma_aligned
torch.manual_seed(0)
a = torch.randn(512, 16384, device="cuda", dtype=torch.float16)
b = torch.randn(16384, 512, device="cuda", dtype=torch.float16)
ref = a.double() @ b.double()
config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "FLATTEN": False, "WARP_SPECIALIZE": False,
                        "EPILOGUE_SUBTILE": False}, num_warps=8, num_stages=3)
programs = MAX_PROGRAMS_PER_SM * gemm_kernels.num_sms()
if sys.argv[1] == "busy":  # another stream keeps every SM busy for a while as Stream-K starts
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for _ in range(30):
            x @ x
    programs = 4 * gemm_kernels.num_sms()
for _ in range(3):  # 16 tiles, each split over all programs: thousands of waits per launch
    out = matmul_streamk(a, b, num_programs=programs, config=config, sk_tiles=16)
    torch.cuda.synchronize()
    assert_close(out, ref, what=f"{programs} programs")
print("ok", programs)
"""


_DEFAULT_PATH_SCRIPT = """
import sys, torch, gemm_kernels as gk
from gemm_kernels.kernels import streamk
from gemm_kernels.testing import assert_close
torch.manual_seed(0)
mode = sys.argv[1]
a = torch.randn(1024, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 1024, device="cuda", dtype=torch.float16)
ref = a.double() @ b.double()
if mode == "notebook":  # notebook 05b's call: default arguments, autotuning on
    for _ in range(3):
        assert_close(gk.matmul_streamk(a, b), ref, what="default call")
elif mode == "graph":  # captured once, replayed 50 times
    gk.matmul_streamk(a, b)  # tunes outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gk.matmul_streamk(a, b)
    for i in range(50):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, ref, what=f"replay {i}")
elif mode == "streams":  # two streams at once, back-to-back launches on each
    gk.matmul_streamk(a, b)
    a2, b2 = a[:512].contiguous(), b[:, :512].contiguous()
    ref2 = a2.double() @ b2.double()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    outs = []
    for _ in range(10):
        with torch.cuda.stream(s1):
            outs.append((gk.matmul_streamk(a, b), ref))
        with torch.cuda.stream(s2):
            outs.append((gk.matmul_streamk(a2, b2), ref2))
    torch.cuda.synchronize()
    for out, r in outs:
        assert_close(out, r, what="two streams")
elif mode == "dirty":  # a flag buffer left dirty: reported, bounded, and the next call is clean
    import triton
    config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3)
    P = gk.num_sms()
    partials, flags = streamk._workspace(P, 128 * 128, a.device)
    flags[P] = P  # every ticket past the last share
    try:
        gk.matmul_streamk(a, b, config=config, sk_tiles=64)
        torch.cuda.synchronize()
        streamk.raise_pending_streamk_error()
    except RuntimeError as e:
        assert "not zero" in str(e), e
    else:
        raise AssertionError("no RuntimeError for a dirty flag buffer")
    assert_close(gk.matmul_streamk(a, b, config=config, sk_tiles=64), ref, what="after the reset")
torch.cuda.synchronize()
streamk.raise_pending_streamk_error()
print("ok", mode)
"""


def _run_gpu_script(mode, script=_GPU_SCRIPT, autotune=False, timeout=300):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GEMM_KERNELS_AUTOTUNE"}
    if not autotune:
        env["GEMM_KERNELS_AUTOTUNE"] = "0"
    try:
        out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, env=env,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"matmul_streamk ({mode}) did not finish in {timeout} s: a spin-wait never ended")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["notebook", "graph", "streams", "dirty"])
def test_gpu_default_path_finishes_and_is_correct(mode):
    """With autotuning on (the learner's default): the autotuner replays one launch many times,
    a captured graph is replayed 50 times, two streams launch at once.  Each run is bounded: a
    hang fails the test instead of the GPU."""
    _run_gpu_script(mode, _DEFAULT_PATH_SCRIPT, autotune=True)


@pytest.mark.gpu
def test_gpu_more_programs_than_fit_on_the_gpu_finish_correctly():
    """16 programs per SM (the most a call may ask), far more than are resident at once: with the
    waits ordered by pid a late-starting low pid could be waited for by every resident program."""
    _run_gpu_script("many")


@pytest.mark.gpu
def test_gpu_another_stream_holding_sms_does_not_stall_the_waits():
    _run_gpu_script("busy")
