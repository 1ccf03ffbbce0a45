"""The decode kernel (``kernels/decode.py``) against the float64 reference, and the rule that makes
``matmul_auto`` pick it (``dispatch.decode_launcher``).

In the interpreter every launch is one 32-column, 32-deep config, so K = 130 is 5 K blocks: a
split of 3 cuts them 2 + 2 + 1, a split of 7 leaves pieces empty.  Outputs are NaN-poisoned
(``conftest.py``): an element no program wrote fails the comparison."""

import pytest
import torch

from gemm_kernels import matmul_ref, pick_launcher, runtime
from gemm_kernels.kernels import dispatch
from gemm_kernels.kernels.decode import (DECODE_MAX_ROWS, FMA_MAX_ROWS, decode_method, decode_rows, decode_splits,
                                         matmul_decode)
from gemm_kernels.testing import assert_close, random_matrix

# ragged N and K (not multiples of the 32-wide blocks), 1 row to DECODE_MAX_ROWS
SHAPES = [(1, 37, 45), (1, 70, 130), (3, 33, 64), (4, 50, 99), (5, 40, 130), (16, 33, 31), (21, 65, 70)]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _ref(a, b, **epilogue):
    return matmul_ref(a, b, out_dtype=torch.float64, **epilogue)


def _weight_t(N, K, dtype):
    """b = W.t(): nn.Linear's weight, strides (1, K)."""
    return random_matrix(N, K, dtype).t()


@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}-N{}-K{}".format(*s))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["W.t()", "contiguous"])
def test_both_methods_both_layouts(shape, dtype, layout):
    M, N, K = shape
    a = random_matrix(M, K, dtype)
    b = _weight_t(N, K, dtype) if layout == "W.t()" else random_matrix(K, N, dtype)
    for method in ("fma", "dot") if M <= FMA_MAX_ROWS else ("dot",):
        assert_close(matmul_decode(a, b, method=method), _ref(a, b), dtype, what=method)


@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("split_k", [1, 3, 7, 100])
@pytest.mark.parametrize("method", ["fma", "dot"])
def test_every_split_with_the_epilogue(split_k, method):
    """The epilogue runs once, on the whole sum: a split that ran it per piece would add the bias
    ``split_k`` times and put GELU inside the sum."""
    M, N, K = 3, 40, 130
    a, b = random_matrix(M, K), _weight_t(N, K, torch.float16)
    bias = random_matrix(1, N)[0]
    out = matmul_decode(a, b, method=method, split_k=split_k, bias=bias, activation="gelu")
    assert_close(out, _ref(a, b, bias=bias, activation="gelu"))


@pytest.mark.usefixtures("seed")
def test_the_split_is_deterministic():
    """Pieces are added in split order: the same bits on every run, whatever piece came last."""
    a, b = random_matrix(2, 300, torch.float32), _weight_t(48, 300, torch.float32)
    first = matmul_decode(a, b, split_k=5)
    assert all(torch.equal(first, matmul_decode(a, b, split_k=5)) for _ in range(3))


@pytest.mark.usefixtures("seed")
def test_any_strides():
    """A column-major a, a row-sliced a, a b with gaps between its columns."""
    M, N, K = 4, 36, 70
    a = random_matrix(M, K, transposed=True)
    a_rows = random_matrix(2 * M, K)[::2]
    b_gaps = random_matrix(N, 2 * K)[:, ::2].t()
    for x, w in ((a, _weight_t(N, K, torch.float16)), (a_rows, random_matrix(K, N)), (a, b_gaps)):
        assert_close(matmul_decode(x, w), _ref(x, w))


def only_orientation(monkeypatch, swap: bool):
    """matmul_decode's tl.dot configs cut to one orientation (SWAP_AB), its tuned kernels forgotten."""
    from gemm_kernels.kernels import decode
    every = decode.decode_configs

    def configs(rows, method, gpu=None):
        kept = [c for c in every(rows, method, gpu) if c.kwargs["SWAP_AB"] == swap]
        if not kept:  # the interpreter's one config: the same blocks, turned
            kept = [decode._cfg(rows, c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_stages, c.num_warps, swap=swap)
                    for c in every(rows, method, gpu)]
        return kept
    monkeypatch.setattr(decode, "decode_configs", configs)
    monkeypatch.setattr(decode, "_TUNED", {})
    monkeypatch.setattr(decode, "_KEPT", decode.launches.LaunchCache())


@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("swap", [True, False], ids=["C^T tile", "C tile"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_both_dot_orientations(swap, dtype, monkeypatch):
    """tl.dot as C's tile or as C^T's (SWAP_AB, the GPU's first configs): ragged shapes, both layouts
    of b, a column-major a, split and unsplit, with bias and GELU."""
    only_orientation(monkeypatch, swap)
    for M, N, K in ((1, 37, 45), (5, 70, 130), (17, 33, 99), (64, 40, 64)):
        a = random_matrix(M, K, dtype, transposed=M == 5)
        bias = random_matrix(1, N, dtype)[0]
        for b in (_weight_t(N, K, dtype), random_matrix(K, N, dtype)):
            for split_k in (None, 3):
                out = matmul_decode(a, b, split_k=split_k, bias=bias, activation="gelu")
                assert_close(out, _ref(a, b, bias=bias, activation="gelu"), dtype, what=f"{M}x{N}x{K} split {split_k}")


def test_the_gpu_tries_the_turned_tile_first():
    """On a GPU the first dot configs (GEMM_KERNELS_AUTOTUNE=0 runs the first) compute C^T's tile with
    64 weight columns on the MMA's wide side; the FMA configs never turn (PERF_NOTES 57)."""
    from gemm_kernels.kernels.decode import decode_configs
    for rows in (16, 32, 64):
        dot = decode_configs(rows, "dot", gpu=True)
        assert dot[0].kwargs["SWAP_AB"] and dot[0].kwargs["BLOCK_N"] == 64
        assert {c.kwargs["SWAP_AB"] for c in dot} == {True, False}  # the tuner keeps whichever is faster
    assert not any(c.kwargs["SWAP_AB"] for rows in (1, 2, 4) for c in decode_configs(rows, "fma", gpu=True))


def test_empty_and_zero_k():
    a, b = random_matrix(0, 8), random_matrix(8, 5)
    assert matmul_decode(a, b).shape == (0, 5)
    bias = random_matrix(1, 5)[0]
    out = matmul_decode(random_matrix(2, 0), random_matrix(0, 5), bias=bias, activation="relu")
    assert_close(out, torch.relu(bias.double()).expand(2, 5))


def test_nan_stays_in_its_row():
    a, b = random_matrix(4, 64), _weight_t(40, 64, torch.float16)
    a[2, 10] = float("nan")
    out = matmul_decode(a, b, split_k=2)
    assert torch.isnan(out[2]).all() and not torch.isnan(out[torch.arange(4) != 2]).any()


def test_bad_inputs_are_named():
    a, b = random_matrix(2, 8), random_matrix(8, 4)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_decode(a, random_matrix(9, 4))
    with pytest.raises(TypeError, match="dtype"):
        matmul_decode(a, b.float())
    with pytest.raises(ValueError, match="at most 64 rows"):
        matmul_decode(random_matrix(DECODE_MAX_ROWS + 1, 8), b)
    with pytest.raises(ValueError, match="method"):
        matmul_decode(a, b, method="wgmma")
    with pytest.raises(ValueError, match="at most 4 rows"):
        matmul_decode(random_matrix(FMA_MAX_ROWS + 1, 8), b, method="fma")
    with pytest.raises(TypeError, match="split_k"):
        matmul_decode(a, b, split_k=2.0)
    with pytest.raises(ValueError, match="split_k"):
        matmul_decode(a, b, split_k=0)
    with pytest.raises(ValueError, match="activation"):
        matmul_decode(a, b, activation="tanh")
    with pytest.raises(ValueError, match="requires grad"):
        matmul_decode(a.requires_grad_(), b)


def test_rows_method_and_split_rules():
    assert [decode_rows(m, "fma") for m in (1, 2, 3, 4)] == [1, 2, 4, 4]
    assert [decode_rows(m, "dot") for m in (1, 8, 16, 17, 64)] == [16, 16, 16, 32, 64]
    assert {decode_method(m) for m in range(1, DECODE_MAX_ROWS + 1)} == {"dot"}  # FMAs: no faster (PERF_NOTES 44)
    assert decode_splits(n_blocks=64, k_blocks=16, num_sms=132) == 2  # 128 programs: within one per SM
    assert decode_splits(n_blocks=32, k_blocks=6, num_sms=132) == 3  # each piece at least 2 K blocks
    assert decode_splits(n_blocks=67, k_blocks=64, num_sms=132) == 1  # half the SMs: no split
    assert decode_splits(n_blocks=1, k_blocks=3, num_sms=132) == 1


def test_the_dispatch_picks_decode_for_a_few_rows_against_a_large_weight():
    for M in (1, 8, 16, 32, 64):
        for N, K in ((2048, 2048), (4096, 14336), (14336, 4096), (16384, 16384)):
            name, why = dispatch.decode_launcher(M, N, K, num_sms=132)
            assert name == "matmul_decode" and "decode" in why
    assert dispatch.decode_launcher(65, 4096, 4096, num_sms=132) is None  # a GEMM tile wastes nothing
    assert dispatch.decode_launcher(4096, 4096, 4096, num_sms=132) is None
    assert dispatch.decode_launcher(8, 512, 512, num_sms=132) is None  # a launch's worth of bytes: the old rule


def test_pick_launcher_names_decode_for_tensors():
    """On tensors (never multiplied here): forward-only calls of a few rows take the decode kernel;
    one that needs gradients, or a batch-invariant one, does not."""
    a, b = random_matrix(8, 1024), _weight_t(1024, 1024, torch.float16)
    assert pick_launcher(a, b)[0] == "matmul_decode"
    assert pick_launcher(random_matrix(65, 1024), b)[0] != "matmul_decode"
    assert pick_launcher(a.clone().requires_grad_(), b)[0] != "matmul_decode"
    assert pick_launcher(a, b, batch_invariant=True)[0] == "matmul"


@pytest.mark.usefixtures("seed")
def test_matmul_auto_runs_decode(monkeypatch):
    """A small weight stands in for a large one (the rule's floor lowered): matmul_auto's answer
    is the decode kernel's, bit for bit."""
    monkeypatch.setattr(dispatch, "DECODE_MIN_WEIGHT", 1)
    monkeypatch.setattr(dispatch, "_PICKS", dispatch.launches.LaunchCache())
    a, b = random_matrix(2, 70), _weight_t(40, 70, torch.bfloat16 if runtime.supports_bf16() else torch.float16)
    a = a.to(b.dtype)
    assert pick_launcher(a, b)[0] == "matmul_decode"
    out = dispatch.matmul_auto(a, b, activation="relu")
    assert torch.equal(out, matmul_decode(a, b, activation="relu"))
    assert_close(out, _ref(a, b, activation="relu"))


# ------------------------------------------------------------------------------ on a GPU (compiled kernels)

GPU_SHAPES = [(1, 4096, 4096), (3, 1000, 2050), (8, 4096, 14336), (33, 14336, 4096), (64, 2048, 2048)]


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("autotune", ["1", "0"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "M{}-N{}-K{}".format(*s))
def test_gpu_decode_against_float64(shape, autotune, monkeypatch):
    """Compiled, tuned (or the first config: GEMM_KERNELS_AUTOTUNE=0), both layouts of b, and
    matmul_auto's pick, twice (the second call is the kept launch); outputs NaN-poisoned."""
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, autotune)
    monkeypatch.setattr(dispatch, "_PICKS", dispatch.launches.LaunchCache())
    M, N, K = shape
    a = random_matrix(M, K, torch.bfloat16)
    for b in (_weight_t(N, K, torch.bfloat16), random_matrix(K, N, torch.bfloat16)):
        ref = _ref(a, b)
        assert pick_launcher(a, b)[0] == "matmul_decode"
        for _ in range(2):
            assert_close(dispatch.matmul_auto(a, b), ref, torch.bfloat16, what="matmul_auto")
            assert_close(matmul_decode(a, b, split_k=3), ref, torch.bfloat16, what="split 3")


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("M", [5, 32, 64])
def test_gpu_every_dot_config_against_float64(M, monkeypatch):
    """Each tl.dot config on its own (both orientations, every block shape the tuner may keep),
    compiled: both layouts of b, split by the rule and in 3, with bias and GELU; NaN-poisoned."""
    from gemm_kernels.kernels import decode
    every = decode.decode_configs(decode.decode_rows(M, "dot"), "dot", gpu=True)
    N, K = 1000, 2050
    a = random_matrix(M, K, torch.bfloat16)
    bias = random_matrix(1, N, torch.bfloat16)[0]
    weights = (_weight_t(N, K, torch.bfloat16), random_matrix(K, N, torch.bfloat16))
    refs = [_ref(a, b, bias=bias, activation="gelu") for b in weights]
    for config in every:
        monkeypatch.setattr(decode, "decode_configs", lambda rows, method, gpu=None: [config])
        monkeypatch.setattr(decode, "_TUNED", {})
        monkeypatch.setattr(decode, "_KEPT", decode.launches.LaunchCache())
        for b, ref in zip(weights, refs):
            for split_k in (None, 3):
                out = matmul_decode(a, b, split_k=split_k, bias=bias, activation="gelu")
                assert_close(out, ref, torch.bfloat16, what=f"{config} split {split_k}")


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
def test_gpu_split_decode_in_a_cuda_graph_replays_right_with_no_memset(tmp_path):
    """A split decode call captured in a CUDA graph: its arrival counts are a slice of a pool zeroed
    before the capture (runtime._captured_zeros), so the graph holds no memset node, and replays with
    new inputs stay right (each launch leaves its counts zero for the next replay)."""
    M, N, K = 4, 2048, 2048
    a, b = random_matrix(M, K, torch.bfloat16), _weight_t(N, K, torch.bfloat16)
    assert_close(matmul_decode(a, b, split_k=4), _ref(a, b), torch.bfloat16)  # compile, and the pool
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph(keep_graph=True)  # its nodes kept for debug_dump (instantiated at the first replay)
    graph.enable_debug_mode()
    with torch.cuda.graph(graph):
        out = matmul_decode(a, b, split_k=4)
    dump = tmp_path / "graph.dot"
    graph.debug_dump(str(dump))
    nodes = dump.read_text().lower()  # cudaGraphDebugDotPrint's DOT: a node per kernel, memset, copy...
    assert "decode" in nodes and "memset" not in nodes, nodes[:3000]
    for replay in range(3):
        a.copy_(random_matrix(M, K, torch.bfloat16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, _ref(a, b), torch.bfloat16, what=f"replay {replay}")


@pytest.mark.gpu
def test_gpu_a_captures_split_calls_share_one_slice_and_replay_right():
    """The driver's capture id: none outside a capture, one per capture (a side stream forked into it
    shares it).  A graph of many split decode calls on one stream takes as much of the pool as a graph
    of one call; a call on a forked side stream, which may run beside them, takes a slice of its own;
    and the graphs replay right, one after the other, with new inputs."""
    assert runtime._capture_id(torch.cuda.current_stream().cuda_stream) is None
    M, N, K, calls = 4, 2048, 2048, 50
    a = random_matrix(M, K, torch.bfloat16)
    weights = [_weight_t(N, K, torch.bfloat16) for _ in range(3)]
    assert_close(matmul_decode(a, weights[0], split_k=4), _ref(a, weights[0]), torch.bfloat16)  # compile; the pool
    torch.cuda.synchronize()
    pool = runtime._CAPTURE_ZEROS[torch.cuda.current_device()]
    graphs, outs, ids, taken = [], [], [], []
    for n_calls, on_side in ((1, False), (calls, False), (calls, True)):
        free = pool.free
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            capturing = torch.cuda.current_stream()
            ids.append(runtime._capture_id(capturing.cuda_stream))
            out = [(matmul_decode(a, weights[i % 3], split_k=4), weights[i % 3]) for i in range(n_calls)]
            if on_side:
                side = torch.cuda.Stream()
                side.wait_stream(capturing)  # forked into the capture
                with torch.cuda.stream(side):
                    assert runtime._capture_id(side.cuda_stream) == ids[-1]
                    out += [(matmul_decode(a, w, split_k=4), w) for w in weights[1:]]  # beside the main stream's
                capturing.wait_stream(side)
        taken.append(pool.free - free)
        graphs.append(graph)
        outs.append(out)
    assert None not in ids and len(set(ids)) == 3
    assert taken[0] > 0 and taken[1] == taken[0] and taken[2] == 2 * taken[0], taken  # a slice per capture and stream
    for replay in range(2):
        a.copy_(random_matrix(M, K, torch.bfloat16))
        for out in outs:
            for o, _ in out:
                o.fill_(float("nan"))
        for graph in graphs:
            graph.replay()
        torch.cuda.synchronize()
        for g, out in enumerate(outs):
            for i, (o, w) in enumerate(out):
                assert_close(o, _ref(a, w), torch.bfloat16, what=f"graph {g} call {i} replay {replay}")


# ------------------------------------------------------------------------------ the committed GPU runs

def test_perf_notes_44_quotes_the_committed_runs():
    """PERF_NOTES 44's ratios are those of ``images/bench/entry44`` (both H100 runs)."""
    import csv
    import math
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    notes = (root / "gemm_kernels" / "bench" / "PERF_NOTES.md").read_text(encoding="utf-8")
    entry = notes[notes.index("## 44. Decode"):]
    weights = [(2048, 2048), (4096, 4096), (8192, 8192), (16384, 16384), (4096, 14336), (14336, 4096)]
    for name, with_before in (("decode_first.csv", False), ("decode.csv", True)):
        with open(root / "images" / "bench" / "entry44" / name, newline="") as f:
            rows = {(r["layout"], int(r["M"]), int(r["N"]), int(r["K"]), r["provider"]): r for r in csv.DictReader(f)}
        assert not any(r["error"] for r in rows.values())
        assert {r["gpu"] for r in rows.values()} == {"NVIDIA H100 80GB HBM3"}

        def ratios(M, provider):
            return [float(rows["W.t()", M, N, K, provider]["vs_cublas"]) for N, K in weights]

        auto = []
        for M in (1, 8, 16, 32, 64):
            auto += ratios(M, "matmul_auto")
            quoted = f"M = {M}: " + ", ".join(f"{x:.3f}" for x in ratios(M, "matmul_auto"))
            if with_before:
                quoted += " | " + ", ".join(f"{x:.3f}" for x in ratios(M, "previous default"))
            assert quoted in entry, quoted
        geomean = math.exp(sum(map(math.log, auto)) / len(auto))
        assert f"{sum(x >= 0.95 for x in auto)} of 30 at >= 0.95, geomean {geomean:.3f}" in entry
    before = [float(r["vs_cublas"]) for k, r in rows.items() if k[0] == "W.t()" and k[4] == "previous default"]
    assert f"the previous default's {math.exp(sum(map(math.log, before)) / len(before)):.3f}" in entry
