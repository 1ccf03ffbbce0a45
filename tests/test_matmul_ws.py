"""matmul_ws (warp-specialized Gluon GEMM): what it compiles to, its contract, its schedule, its results.

CPU-only machines run the compile-structure tests (sm_90 PTX and TTGIR built without a GPU by the
compile view, ``lab.compile_examples.ws_example``), the input
errors, the RuntimeError for a missing Hopper GPU and the schedule mirror.  The ``gpu`` tests
compare with a float64 reference on an sm_90 GPU; ``conftest`` fills every ``torch.empty`` with
NaN, so an output element the kernel never wrote fails.
"""


import numpy as np
import pytest
import torch

from gemm_kernels import DEVICE, matmul_ref, runtime
from gemm_kernels.models import tiles
from gemm_kernels.kernels import matmul_ws as ws
from gemm_kernels.kernels.tma import tma_aligned
from gemm_kernels.testing import assert_close, random_matrix

HOPPER = runtime.on_gpu() and runtime.RUNTIME.capability is not None and runtime.RUNTIME.capability[0] == 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="matmul_ws runs on an sm_90 (Hopper) GPU only")


# ----------------------------------------------------------------------------- compile structure (CPU)
def _structure(view) -> dict:
    """What the tests below count in one compile view of the kernel (PTX and TTGIR)."""
    ptx, ttgir = view.ptx, view.ttgir
    count = lambda s, text=ptx: text.count(s)  # noqa: E731
    return dict(
        shared=view.shared,
        wgmma=count("wgmma.mma_async.sync.aligned"),
        tma_load=count("cp.async.bulk.tensor.2d.shared::"),  # ::cluster on 3.6, ::cta on newer
        tma_store=count("cp.async.bulk.tensor.2d.global.shared"),
        mbarrier_wait=count("mbarrier.try_wait"),
        mbarrier_tx=count("mbarrier.arrive.expect_tx"),
        setmaxnreg=sorted(set(int(l.split()[-1].rstrip(";")) for l in ptx.splitlines() if "setmaxnreg" in l)),
        warp_specialize=count("ttg.warp_specialize", ttgir),
        partitions=[l.split("num_warps(")[1].split(")")[0] for l in ttgir.splitlines()
                    if l.strip().startswith("partition") and "num_warps(" in l],
        requested_regs=[l.split("requestedRegisters = array<i32: ")[1].split(">")[0] for l in ttgir.splitlines()
                        if "requestedRegisters" in l],
        st_global=count("st.global"),
        globaltimer=count("%globaltimer"),
        warpgroup_mma=count("ttng.warp_group_dot", ttgir),
        arrivals=count("atom.global.gpu.acq_rel.add"),
        count_resets=count("atom.global.gpu.relaxed.exch"),
        slot_loads=count("ld.global.cg"),
        barriers_before_arrival=[[l.split("bar.sync")[1].strip(" \t;") for l in before.splitlines()[-12:] if "bar.sync" in l]
                                 for before in ptx.split("atom.global.gpu.acq_rel.add")[:-1]],  # per arrival
        spill_bytes=view.spill_bytes,
    )


VARIANTS = {
    "pingpong": dict(schedule="pingpong"),
    "cooperative": dict(schedule="cooperative"),
    "pingpong_linear_gelu_bias": dict(schedule="pingpong", b_col_major=True, activation="gelu", has_bias=True,
                                      dtype="bfloat16"),
    "pingpong_a_t_ragged_c_trace": dict(schedule="pingpong", a_col_major=True, c_tma=False, trace=True),
    "cooperative_linear_relu": dict(schedule="cooperative", b_col_major=True, activation="relu", has_bias=True),
    "pingpong_64x256_split_gelu_bias": dict(schedule="pingpong_64x256", b_col_major=True, activation="gelu",
                                            has_bias=True, splits=4),
    "cooperative_split": dict(schedule="cooperative", splits=4),
}
SPLIT_VARIANTS = [name for name, kw in VARIANTS.items() if kw.get("splits", 1) > 1]


@pytest.fixture(scope="module")
def compiled():
    """Every VARIANTS entry compiled for sm_90 by the compile view (one worker process, a few
    seconds each): the examples of ``compile_examples.ws_example``."""
    from gemm_kernels.lab.compile_examples import ws_example
    from gemm_kernels.lab.compile_view import compile_many

    examples = [ws_example(**{**kw, "dtype": getattr(torch, kw.get("dtype", "float16"))}) for kw in VARIANTS.values()]
    views = compile_many([ex.request(90) for ex in examples])
    return {name: _structure(view) for name, view in zip(VARIANTS, views)}


@pytest.mark.parametrize("name", VARIANTS)
def test_compiles_to_warp_specialized_wgmma_and_tma(compiled, name):
    info = compiled[name]
    cfg = ws.CONFIGS[VARIANTS[name]["schedule"]]
    # one warp_specialize region: consumer 0 is the default partition (the kernel's 4 warps),
    # then consumer 1 (4 warps) and the producer (1 warp)
    assert info["warp_specialize"] == 1
    assert info["partitions"] == ["4", "1"]
    assert info["requested_regs"] == [f"{ws.CONSUMER_REGS}, {ws.PRODUCER_REGS}"]
    assert ws.CONSUMER_REGS in info["setmaxnreg"] and ws.PRODUCER_REGS in info["setmaxnreg"]
    # wgmma: per consumer and K block, (WG_M / 64) x (BLOCK_K / 16) instructions of m64 x BLOCK_N x k16
    per_consumer = cfg["WG_M"] // 64 * cfg["BLOCK_K"] // 16
    assert info["wgmma"] == 2 * per_consumer
    # TMA loads: A (one per consumer half when cooperative) and B, in the producer (ptxas input may
    # hold a copy more, depending on how the compiler laid out the loop)
    a_parts = 2 if cfg["SCHEDULE"] == "cooperative" else 1
    assert info["tma_load"] >= a_parts + 1
    assert info["mbarrier_tx"] >= 1 and info["mbarrier_wait"] >= 2  # ready (consumers), empty (producer)
    if name in SPLIT_VARIANTS:
        assert info["tma_store"] == 0 and info["st_global"] > 0  # slots and C through pointer stores
    elif VARIANTS[name].get("c_tma", True):
        assert info["tma_store"] == 2 * cfg["EPI_SPLIT"]  # per consumer, one per epilogue chunk
    else:
        assert info["tma_store"] == 0 and info["st_global"] > 0  # pointer stores for unaligned C rows
    assert info["globaltimer"] == (2 * 3 if VARIANTS[name].get("trace") else 0)  # start, main loop end, end per consumer
    assert info["shared"] <= 232448  # H100's 227 KiB per block
    assert info["arrivals"] == (2 if name in SPLIT_VARIANTS else 0)


@pytest.mark.parametrize("name", SPLIT_VARIANTS)
def test_split_units_add_their_pieces_in_the_kernel(compiled, name):
    """Each consumer stores its piece, then (after a barrier of its own 128 threads: a whole-CTA
    barrier would wait for the other partitions) bumps the tile's count with acquire-release at
    GPU scope, so the last piece sees every other's slot; it resets the count and reads the slots
    past L1 (``.cg``: another SM wrote them).  No spills, in the largest accumulator tiles too."""
    info = compiled[name]
    assert info["arrivals"] == 2 and info["count_resets"] == 2  # one per consumer
    assert len(info["barriers_before_arrival"]) == 2  # one per consumer partition, each after its own barrier
    assert all(bars and all(b.endswith(", 128") for b in bars) for bars in info["barriers_before_arrival"])
    assert info["slot_loads"] > 0
    if info["spill_bytes"] is None:
        pytest.skip("no cuobjdump beside ptxas: the compile view cannot count spills")
    assert info["spill_bytes"] == 0, info["spill_bytes"]


# ----------------------------------------------------------------------------- contract (CPU and GPU)
def _ab(M, N, K, dtype=torch.float16):
    return random_matrix(M, K, dtype), random_matrix(K, N, dtype)


@pytest.mark.parametrize("make,err,words", [
    (lambda: (torch.zeros(4, 4, 4, dtype=torch.float16), torch.zeros(4, 4, dtype=torch.float16)), ValueError, "a must be 2-D"),
    (lambda: _ab(16, 16, 16)[:1] + (random_matrix(24, 16),), ValueError, "inner dimensions"),
    (lambda: (random_matrix(16, 16), random_matrix(16, 16, torch.bfloat16)), TypeError, "share one dtype"),
    (lambda: (random_matrix(16, 16, torch.float32), random_matrix(16, 16, torch.float32)), TypeError, "use matmul_tma"),
    (lambda: (random_matrix(16, 24), random_matrix(24, 13)), ValueError, "b cannot be read by TMA"),
    (lambda: (random_matrix(16, 13), tma_aligned(random_matrix(13, 16))), ValueError, "a cannot be read by TMA"),
    (lambda: ([[1.0]], random_matrix(16, 16)), TypeError, "a must be a torch.Tensor"),
])
def test_input_errors_name_the_tensor(make, err, words):
    a, b = make()
    with pytest.raises(err, match=words):
        ws.matmul_ws(a, b)


def test_epilogue_argument_errors():
    a, b = _ab(16, 16, 16)
    with pytest.raises(ValueError, match="activation must be one of"):
        ws.matmul_ws(a, b, activation="swish")
    with pytest.raises(ValueError, match=r"bias must have shape \[N\] = \[16\]"):
        ws.matmul_ws(a, b, bias=torch.zeros(15, dtype=torch.float16, device=DEVICE))


@pytest.mark.skipif(HOPPER, reason="this machine has the sm_90 GPU matmul_ws needs")
def test_clear_runtime_error_without_hopper():
    a, b = _ab(64, 64, 64)
    with pytest.raises(RuntimeError, match=r"needs an sm_90 \(Hopper.*matmul_tma"):
        ws.matmul_ws(a, b)


# ----------------------------------------------------------------------------- schedule mirror (CPU)
@pytest.mark.parametrize("schedule", ws.SCHEDULES)
@pytest.mark.parametrize("M,N,programs", [(1000, 1000, 132), (4096, 4096, 132), (129, 257, 3), (1, 1, 132)])
def test_schedule_mirror_is_matmul_tma_order(schedule, M, N, programs):
    """Same tiles, programs, steps and grouped coordinates as tiles.persistent_schedule; pingpong
    hands a program's tiles to its consumers alternately, cooperative gives each tile to both."""
    cfg = ws.CONFIGS[schedule]
    rows = ws.ws_schedule(M, N, schedule=schedule, num_programs=programs)
    ref = tiles.persistent_schedule(M, N, ws._tile_m(cfg), cfg["BLOCK_N"], programs)
    per_tile = 1 if schedule == "pingpong" else 2
    assert rows.shape == (len(ref) * per_tile, 6)
    idx = [tiles.SCHEDULE_FIELDS.index(f) for f in ("tile", "program", "step", "pid_m", "pid_n")]
    np.testing.assert_array_equal(rows[::per_tile][:, [0, 1, 3, 4, 5]], ref[:, idx])
    if schedule == "pingpong":
        np.testing.assert_array_equal(rows[:, 2], rows[:, 3] % 2)
    else:
        np.testing.assert_array_equal(rows[:, 2], np.tile([0, 1], len(ref)))
    grid = np.zeros((tiles.cdiv(M, ws._tile_m(cfg)), tiles.cdiv(N, cfg["BLOCK_N"])), int)
    np.add.at(grid, (rows[:, 4], rows[:, 5]), 1)
    assert (grid == per_tile).all()


def test_schedule_mirror_uses_the_grouped_order():
    rows = ws.ws_schedule(1024, 2048, schedule="pingpong", num_programs=132)  # 8 x 16 tiles of 128 x 128: one group of 8 rows
    np.testing.assert_array_equal(rows[:10, 4], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1])
    np.testing.assert_array_equal(rows[:10, 5], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1])


# ----------------------------------------------------------------------------- GPU
SHAPES = [(1, 1, 1), (1, 257, 127), (127, 1, 257), (127, 127, 127), (257, 1000, 127), (1000, 257, 1000),
          (1000, 1000, 1000), (2049, 1031, 520), (384, 512, 4096)]
TILES = tuple(ws.CONFIGS)  # every tile config: the shape rule (tiles.ws_default_tile) picks among some


def _aligned(M, N, K, dtype):
    """Random a, b in 16-byte aligned rows (any M, N, K: TMA's stride rule, as in matmul_tma's tests)."""
    return tma_aligned(random_matrix(M, K, dtype)), tma_aligned(random_matrix(K, N, dtype))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("schedule", TILES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "M{}-N{}-K{}".format(*s))
@pytest.mark.usefixtures("seed")
def test_ragged_shapes(shape, dtype, schedule):
    a, b = _aligned(*shape, dtype)
    out = ws._launch(a, b, schedule=schedule)
    assert out.shape == shape[:2] and out.dtype == dtype and out.is_contiguous()
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64), dtype, what=f"{schedule} {shape}")


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("schedule", TILES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("activation", [None, "relu", "leaky_relu", "gelu"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.usefixtures("seed")
def test_fused_epilogue(activation, with_bias, dtype, schedule):
    M, N, K = 300, 520, 264
    a, b = _aligned(M, N, K, dtype)
    bias = torch.randn(N).to(DEVICE, dtype) if with_bias else None
    out = ws._launch(a, b, activation=activation, bias=bias, schedule=schedule)
    assert_close(out, matmul_ref(a, b, activation=activation, bias=bias, out_dtype=torch.float64), dtype)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("layout", ["b_t", "a_t", "both_t"])
@pytest.mark.parametrize("schedule", TILES)
@pytest.mark.usefixtures("seed")
def test_transposed_operands(layout, schedule):
    """b = weight.t() of an nn.Linear (weight [N, K]), and column-major A: TMA reads the transpose."""
    M, N, K, dtype = 328, 1000, 776, torch.bfloat16  # every row and column 16-byte aligned in bf16
    a = random_matrix(M, K, dtype, transposed=layout in ("a_t", "both_t"))
    b = random_matrix(K, N, dtype, transposed=layout in ("b_t", "both_t"))
    bias = torch.randn(N).to(DEVICE, dtype)
    out = ws._launch(a, b, activation="gelu", bias=bias, schedule=schedule)
    assert_close(out, matmul_ref(a, b, activation="gelu", bias=bias, out_dtype=torch.float64), dtype)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("n", [61, 127, 1001])  # rows of 122 / 254 / 2002 bytes: C goes out through pointer stores
def test_unaligned_c_rows(n):
    a = random_matrix(200, 128, torch.float16)
    w = random_matrix(n, 128, torch.float16)  # [N, K]: b = w.t() is TMA-readable for any N
    out = ws.matmul_ws(a, w.t(), activation="relu")
    assert_close(out, matmul_ref(a, w.t(), activation="relu", out_dtype=torch.float64))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("num_programs", [1, 3, 7, 1000])
@pytest.mark.parametrize("schedule", TILES)
def test_program_counts(num_programs, schedule):
    a, b = _aligned(700, 900, 136, torch.float16)
    out = ws._launch(a, b, num_programs=num_programs, schedule=schedule)
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("M,N,K", [(257, 4096, 520), (129, 3072, 264), (1000, 5120, 136), (2048, 4096, 64)])
@pytest.mark.usefixtures("seed")
def test_default_tile_follows_the_shape_rule(M, N, K):
    """matmul_ws at its defaults runs the tile tiles.ws_default_tile names for the shape."""
    a, w = random_matrix(M, K, torch.bfloat16), random_matrix(N, K, torch.bfloat16)
    out = ws.matmul_ws(a, w.t())
    assert_close(out, matmul_ref(a, w.t(), out_dtype=torch.float64), torch.bfloat16)
    config = ws.CONFIGS[tiles.ws_default_tile(M, N, num_sms=runtime.num_sms())]
    plan = ws._PLANS[ws._plan_key(a, w.t(), None, None, None, None, False)]
    assert plan.tile == (ws._tile_m(config), config["BLOCK_N"], config["SCHEDULE"])


def test_the_shape_rules_tiles_are_configs():
    """tiles.WS_TILES (numpy-only, for the rule) names CONFIGS entries with their tile's sides."""
    for name, (rows, cols, rate) in tiles.WS_TILES.items():
        assert (ws._tile_m(ws.CONFIGS[name]), ws.CONFIGS[name]["BLOCK_N"]) == (rows, cols) and 0 < rate <= 1


def test_an_unknown_schedule_is_named():
    """Checked first, on any machine: a name not in CONFIGS, or not a name at all."""
    a, b = random_matrix(8, 8, torch.float16), random_matrix(8, 8, torch.float16)
    with pytest.raises(ValueError, match="schedule must be one of .*got \\['cooperative'\\]"):
        ws._launch(a, b, schedule=["cooperative"])
    with pytest.raises(ValueError, match="schedule must be one of"):
        ws._launch(a, b, schedule="nope")


@pytest.mark.gpu
@needs_hopper
def test_empty_and_k0():
    a, b = _ab(0, 16, 16)
    assert ws.matmul_ws(a, b).shape == (0, 16)
    a, b = random_matrix(5, 0, torch.float16), random_matrix(0, 7, torch.float16)
    bias = torch.randn(7).to(DEVICE, torch.float16)
    out = ws.matmul_ws(a, b, bias=bias, activation="relu")
    torch.testing.assert_close(out, torch.relu(bias).expand(5, 7))


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("schedule", TILES)
@pytest.mark.parametrize("M,N,programs", [(1000, 1000, None), (129, 257, 3), (2048, 2048, 7)])
def test_trace_equals_mirror(schedule, M, N, programs):
    """The kernel's own record of (tile, program, consumer, step, pid_m, pid_n) == ws_schedule;
    and each warpgroup's tiles follow one another in time."""
    trace = ws.trace_ws_tiles(M, N, 256, schedule=schedule, num_programs=programs).numpy()
    ref = ws.ws_schedule(M, N, schedule=schedule, num_programs=programs or runtime.num_sms())
    np.testing.assert_array_equal(trace[:, :6], ref)
    assert (trace[:, 6] > 0).all() and (trace[:, 7] >= trace[:, 6]).all() and (trace[:, 8] >= trace[:, 7]).all()
    for (program, consumer) in {(int(r[1]), int(r[2])) for r in trace}:
        mine = trace[(trace[:, 1] == program) & (trace[:, 2] == consumer)]
        mine = mine[np.argsort(mine[:, 3])]
        assert (mine[1:, 6] >= mine[:-1, 8]).all()  # a warpgroup starts a tile after its previous one ended


# ----------------------------------------------------------------------------- split-K units
def test_split_k_argument_is_checked_on_every_machine():
    a, b = _ab(16, 16, 16)
    with pytest.raises(ValueError, match="split_k must be >= 1, got 0"):
        ws.matmul_ws(a, b, split_k=0)
    with pytest.raises(TypeError, match="split_k must be an int, got str"):
        ws.matmul_ws(a, b, split_k="4")


def _poison_split_workspaces():
    """NaN into every kept split-K workspace: a unit that stores nothing shows in C (a fresh one is
    NaN already, conftest's torch.empty)."""
    for (_, _, purpose), buffer in runtime._STREAM_BUFFERS.items():
        if purpose == "ws split-k pieces":
            buffer.fill_(float("nan"))


def _split_counts() -> torch.Tensor:
    """Every kept split-K arrival count, concatenated (empty when none is kept)."""
    counts = [buf for (_, _, purpose), buf in runtime._STREAM_BUFFERS.items() if purpose == "ws split-k counts"]
    return torch.cat(counts) if counts else torch.zeros(0, dtype=torch.int32)


def _split_plan(a, b, **kw):
    key = ws._plan_key(a, b, kw.get("activation"), kw.get("bias"), kw.get("schedule"), None, False, kw.get("split_k"))
    return ws._PLANS[key]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("schedule", TILES)
@pytest.mark.parametrize("split_k", [2, 3, 7])
@pytest.mark.parametrize("shape", [(1, 8, 2048), (200, 300, 3000), (512, 512, 16384), (129, 1000, 1064)],
                         ids=lambda s: "M{}-N{}-K{}".format(*s))
@pytest.mark.usefixtures("seed")
def test_gpu_split_units(shape, split_k, schedule):
    """Every tile cut into split_k pieces (K blocks not a multiple of split_k: the last piece
    runs past K on TMA's zeros), bf16, NaN-poisoned workspace and C."""
    a, b = _aligned(*shape, torch.bfloat16)
    _poison_split_workspaces()
    out = ws._launch(a, b, schedule=schedule, split_k=split_k)
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64), torch.bfloat16, what=f"{schedule} {shape} {split_k}")
    assert _split_plan(a, b, schedule=schedule, split_k=split_k).splits > 1
    assert not _split_counts().any()  # every count left zero for the next launch
    _poison_split_workspaces()
    again = ws._launch(a * -1, b, schedule=schedule, split_k=split_k)  # the kept plan, new tensors
    assert_close(again, -matmul_ref(a, b, out_dtype=torch.float64), torch.bfloat16)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("layout", ["b_t", "a_t", "both_t"])
@pytest.mark.parametrize("activation", [None, "leaky_relu", "gelu"])
@pytest.mark.parametrize("N", [1000, 1001])  # 1001: C's rows not 16-byte aligned (the last piece stores them masked)
@pytest.mark.usefixtures("seed")
def test_gpu_split_units_epilogue_and_layouts(layout, activation, N):
    """Bias and activation run after the pieces are added; A or B read transposed (b = W.t())."""
    M, K, dtype = 96, 8200, torch.float16  # C rows of 2000 or 2002 bytes, a ragged last tile of columns
    a = random_matrix(M, K, dtype, transposed=layout in ("a_t", "both_t"))
    b = random_matrix(K, N, dtype, transposed=layout in ("b_t", "both_t"))
    if layout == "a_t":
        b = tma_aligned(b)  # a row-major B of 1001 columns: rows padded to 16 bytes for TMA
    bias = torch.randn(N).to(DEVICE, dtype)[::1]
    out = ws.matmul_ws(a, b, bias=bias, activation=activation, split_k=5)
    assert_close(out, matmul_ref(a, b, activation=activation, bias=bias, out_dtype=torch.float64), dtype)
    strided = torch.randn(2 * N).to(DEVICE, dtype)[::2]  # a strided bias is copied, as unsplit
    out = ws.matmul_ws(a, b, bias=strided, activation=activation, split_k=5)
    assert_close(out, matmul_ref(a, b, activation=activation, bias=strided, out_dtype=torch.float64), dtype)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("M,N,K", [(512, 512, 16384), (257, 1024, 14336), (128, 2048, 8192), (16, 4096, 4096)])
@pytest.mark.usefixtures("seed")
def test_gpu_few_tiles_split_by_default(M, N, K):
    """At its defaults matmul_ws splits as tiles.ws_default_splits says: when its tiles would fill
    at most half the SMs and M and N are both at least 128 (not the 16-row decode)."""
    a, w = random_matrix(M, K, torch.bfloat16), random_matrix(N, K, torch.bfloat16)
    out = ws.matmul_ws(a, w.t())
    assert_close(out, matmul_ref(a, w.t(), out_dtype=torch.float64), torch.bfloat16)
    want = tiles.ws_default_splits(M, N, K, tiles.ws_default_tile(M, N, num_sms=runtime.num_sms()),
                                   num_sms=runtime.num_sms())
    plan = _split_plan(a, w.t())
    assert (want > 1) == (M >= 128) and plan.splits == want


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("num_programs", [1, 5])
def test_gpu_split_units_on_few_programs(num_programs):
    """Each program walks several units (pieces of different tiles): ring positions run on across them.
    Whichever piece of a tile comes last adds them in piece order: the bits of a launch with a
    program per unit, where the pieces finish in another order."""
    a, b = _aligned(300, 700, 2000, torch.float16)
    out = ws._launch(a, b, num_programs=num_programs, schedule="pingpong_64x128", split_k=3)
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64))
    assert torch.equal(out, ws._launch(a, b, schedule="pingpong_64x128", split_k=3))


@pytest.mark.gpu
@needs_hopper
def test_gpu_split_units_in_a_cuda_graph():
    """Captured, the workspace comes from the graph's pool; replays give the product of the inputs' current values."""
    a, b = _aligned(512, 512, 8192, torch.float16)
    ws.matmul_ws(a, b, split_k=4)  # compiled and kept before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ws.matmul_ws(a, b, split_k=4)
    a.copy_(random_matrix(512, 8192, torch.float16))
    graph.replay()
    eager = ws.matmul_ws(a, b, split_k=4)
    torch.cuda.synchronize()
    assert_close(out, matmul_ref(a, b, out_dtype=torch.float64))
    assert torch.equal(out, eager)  # pieces added in order: the same bits


# ----------------------------------------------------------------------------- host side: plans
def test_plan_keys_follow_what_the_checks_and_the_specialisation_read():
    a, b = random_matrix(64, 32, torch.float16), random_matrix(32, 48, torch.float16)
    key = ws._plan_key(a, b, "gelu", None, "cooperative", None, False)
    same_shape = ws._plan_key(a.clone(), b.clone(), "gelu", None, "cooperative", None, False)
    assert key == same_shape and hash(key) == hash(same_shape)  # new tensors, same plan
    assert key != ws._plan_key(a, b.t().contiguous().t(), "gelu", None, "cooperative", None, False)  # B^T layout
    assert key != ws._plan_key(a, b, "relu", None, "cooperative", None, False)
    assert key != ws._plan_key(a, b, "gelu", None, "pingpong", None, False)
    assert key != ws._plan_key(a.to(torch.bfloat16), b.to(torch.bfloat16), "gelu", None, "cooperative", None, False)
    bias = torch.zeros(96, dtype=torch.float16, device=DEVICE)
    assert ws._plan_key(a, b, None, bias[::2], "cooperative", None, False) != \
        ws._plan_key(a, b, None, bias[:48], "cooperative", None, False)  # strided bias: copied per call
    assert ws._plan_key(a, b, None, bias[1:49], "cooperative", None, False) != \
        ws._plan_key(a, b, None, bias[:48], "cooperative", None, False)  # bias address % 16
    # tensors whose checks depend on autograd's mode, and tensor subclasses, are never cached
    assert ws._plan_key(a.clone().requires_grad_(), b, None, None, "cooperative", None, False) is None
    # an nn.Parameter that needs no grad (inference weights) is checked like a tensor: kept
    assert ws._plan_key(torch.nn.Parameter(a, requires_grad=False), b, None, None, "cooperative", None, False) == \
        ws._plan_key(a, b, None, None, "cooperative", None, False)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.usefixtures("seed")
def test_gpu_plan_reruns_skip_tritons_launch_path(monkeypatch):
    """From the second call with a key, matmul_ws goes straight to the compiled kernel: Triton's
    JIT launch is made to fail, and fresh tensors (new values, new addresses, poisoned C) still
    come out right, the bias cast and copied per call as the checks would."""
    from gemm_kernels import _triton_compat

    M, N, K, dtype = 520, 776, 264, torch.bfloat16
    w = random_matrix(N, K, dtype)
    bias = torch.randn(2 * N).to(DEVICE, torch.float32)[::2]  # fp32 and strided: cast + copy each call
    ws.matmul_ws(random_matrix(M, K, dtype), w.t(), activation="gelu", bias=bias)
    plans = [p for k, p in ws._PLANS.items() if k[0][0] == (M, K) and k[3] == "gelu"]
    assert plans and all(isinstance(p.launch, _triton_compat.SpecializedLaunch) for p in plans)
    assert plans[0].launch.fast

    def refuse(*args, **kwargs):
        raise AssertionError("a planned call must not go through Triton's Python launch path")

    for kernel in (ws._matmul_ws_kernel, ws._matmul_ws_kernel_any_m):  # split or not: M specialised or not
        monkeypatch.setattr(kernel, "run", refuse)
    for _ in range(2):
        a, w2 = random_matrix(M, K, dtype), random_matrix(N, K, dtype)
        bias2 = torch.randn(2 * N).to(DEVICE, torch.float32)[::2]
        out = ws.matmul_ws(a, w2.t(), activation="gelu", bias=bias2)
        assert_close(out, matmul_ref(a, w2.t(), activation="gelu", bias=bias2.to(dtype), out_dtype=torch.float64),
                     dtype)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.usefixtures("seed")
def test_gpu_plan_expands_its_descriptors_and_keeps_a_weights_map(monkeypatch):
    """The plan expands the three descriptors itself (``DescriptorArguments``): a weight that
    stays put is encoded once, fresh A and C each call, results right; with a profiler hook set
    it launches through Triton's own path (the hook sees the launch)."""
    from triton import knobs

    M, N, K, dtype = 264, 392, 520, torch.float16
    w = random_matrix(N, K, dtype)
    ws.matmul_ws(random_matrix(M, K, dtype), w.t())
    plan = next(p for k, p in ws._PLANS.items() if k[0][0] == (M, K) and k[1][0] == (K, N))
    assert plan.descriptors is not None, "Triton 3.6's launcher wrapper is what this path relies on"
    for _ in range(3):
        a = random_matrix(M, K, dtype)
        assert_close(ws.matmul_ws(a, w.t()), matmul_ref(a, w.t(), out_dtype=torch.float64))
    weight_slot = plan.descriptors._slots[plan.descriptors.indices.index(1)]
    assert len(weight_slot[2]) == 1  # one CUtensorMap for the weight's one address
    seen = []
    hook = lambda metadata: seen.append(metadata)  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        a = random_matrix(M, K, dtype)
        assert_close(ws.matmul_ws(a, w.t()), matmul_ref(a, w.t(), out_dtype=torch.float64))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert seen


@pytest.mark.gpu
@needs_hopper
@pytest.mark.usefixtures("seed")
def test_gpu_plans_without_the_internals(monkeypatch):
    """The public fallbacks (kernel[grid] launches, descriptors through their constructor) give
    the same results."""
    from gemm_kernels import _triton_compat

    monkeypatch.setenv(_triton_compat.INTERNALS_ENV, "0")
    monkeypatch.setattr(ws, "_PLANS", {})
    a, b = _aligned(300, 264, 136, torch.float16)
    for _ in range(2):
        out = ws.matmul_ws(a, b, activation="relu")
        assert_close(out, matmul_ref(a, b, activation="relu", out_dtype=torch.float64))
    assert not next(iter(ws._PLANS.values())).launch.fast


@pytest.mark.gpu
@needs_hopper
def test_a_kept_plan_holds_none_of_its_callers_tensors():
    """Plans are kept per shape: they must not keep the first call's A, B and C (GPU memory) alive."""
    import gc
    import weakref

    a, b = _aligned(256, 384, 128, torch.float16)
    c = ws.matmul_ws(a, b, activation="relu", bias=torch.randn(384, device=DEVICE, dtype=torch.float16))
    refs = [weakref.ref(t) for t in (a, b, c)]
    del a, b, c
    gc.collect()
    assert all(r() is None for r in refs)
    a, b = _aligned(256, 384, 128, torch.float16)  # the kept plan, re-pointed at new tensors
    assert_close(ws.matmul_ws(a, b), matmul_ref(a, b, out_dtype=torch.float64), torch.float16)


# ----------------------------------------------------------------------------- lazily negated views
def _negated(t):
    view = torch._neg_view(t)
    assert view.is_neg()
    return view


def test_negated_views_are_resolved_before_the_plan(monkeypatch):
    """The kernel reads memory: a lazily negated a, b or bias must reach the plan as its values
    (and never share a kept plan with plain tensors).  Checked without a GPU: the plan is a stub."""
    a = _negated(tma_aligned(random_matrix(16, 12)))  # rows of 12 halves padded to 16: TMA-readable
    b = _negated(tma_aligned(random_matrix(12, 20)))
    bias = _negated(torch.randn(20).to(DEVICE, torch.float16))
    assert ws._plan_key(a, b, None, None, "cooperative", None, False) is None
    assert ws._plan_key(a.resolve_neg(), b, None, bias, "cooperative", None, False) is None
    seen = {}

    class Stub:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, a, b, bias, trace):
            seen.update(a=a, b=b, bias=bias)

    monkeypatch.setattr(ws, "_require_hopper", lambda: None)
    monkeypatch.setattr(ws, "_Plan", Stub)
    monkeypatch.setattr(ws, "_PLANS", {})
    ws.matmul_ws(a, b, bias=bias)
    for name, given in (("a", a), ("b", b), ("bias", bias)):
        assert not seen[name].is_neg() and torch.equal(seen[name], given.resolve_neg()), name
    assert seen["a"].stride() == a.stride() and seen["b"].stride() == b.stride()  # still TMA-readable


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("schedule", TILES)
@pytest.mark.usefixtures("seed")
def test_gpu_negated_views_keep_their_sign(schedule):
    """A negated padded a, a negated column-major b and a negated bias: the right answer, also
    when a kept plan of the same layout exists."""
    M, N, K, dtype = 200, 136, 72, torch.float16
    a = tma_aligned(random_matrix(M, K + 3, dtype))[:, :K]
    b = random_matrix(N, K, dtype).t()
    bias = torch.randn(N).to(DEVICE, dtype)
    ws._launch(a, b, bias=bias, activation="relu", schedule=schedule)  # keeps a plan for this layout
    na, nb, nbias = _negated(a), _negated(b), _negated(bias)
    out = ws._launch(na, nb, bias=nbias, activation="relu", schedule=schedule)
    ref = matmul_ref(na.resolve_neg(), nb.resolve_neg(), activation="relu", bias=nbias.resolve_neg(),
                     out_dtype=torch.float64)
    assert_close(out, ref, dtype)
