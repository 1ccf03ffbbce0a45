"""gemm_kernels.grouped_matmul: ragged problem lists against float64, the kernel's schedule against
the numpy mirror, TMA layouts, and every bad input the launcher must explain."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from gemm_kernels import DEVICE, grouped_matmul, grouped_matmul_ref, runtime
from gemm_kernels.kernels import grouped, tma
from gemm_kernels.lab.traces import trace_grouped_schedule
from gemm_kernels.testing import assert_close, random_matrix
from gemm_kernels.kernels.tiles import locate_problem, locate_problem_in_ends
from gemm_kernels.models.tiles import locate_problem_np, multi_problem_schedule, problem_tile_starts

DTYPES = [torch.float16, torch.bfloat16]


def padded(rows, cols, dtype, *, transposed=False, generator=None):
    """A rows x cols view whose storage rows are padded to 16 bytes: what TMA can read for any size.
    ``transposed``: a column-major view (the transpose of a padded row-major matrix)."""
    if transposed:
        return padded(cols, rows, dtype, generator=generator).t()
    width = -(-max(cols, 1) // 16) * 16
    return torch.randn(rows, width, generator=generator).to(DEVICE, dtype)[:, :cols]


def random_problems(rng, count):
    """Ragged (M, N, K): empty, tiny, primes, non-multiples of the 32-wide interpreter blocks."""
    pool = [0, 1, 2, 7, 13, 31, 33, 47, 64, 71]
    shapes = [tuple(int(v) for v in rng.choice(pool, 3)) for _ in range(count)]
    shapes[int(rng.integers(count))] = (0, int(rng.choice(pool[1:])), 5)  # always one empty problem
    return shapes


def make_group(shapes, dtype, layouts, generator):
    """A and B per problem in the given layouts: 'row' (contiguous), 'col' (transposed view),
    'strided' (every other row of a bigger matrix), 'padded_row' / 'padded_col' (TMA-readable)."""
    def one(rows, cols, layout):
        if layout == "row":
            return random_matrix(rows, cols, dtype, generator=generator)
        if layout == "col":
            return random_matrix(rows, cols, dtype, transposed=True, generator=generator)
        if layout == "strided":
            return random_matrix(2 * rows, cols + 3, dtype, generator=generator)[::2, 1:1 + cols]
        return padded(rows, cols, dtype, transposed=layout == "padded_col", generator=generator)

    group_a = [one(M, K, layouts[0]) for M, _, K in shapes]
    group_b = [one(K, N, layouts[1]) for _, N, K in shapes]
    return group_a, group_b


def check_group(group_a, group_b, dtype, **kwargs):
    out = grouped_matmul(group_a, group_b, **kwargs)
    ref = grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)
    assert len(out) == len(ref)
    for i, (c, r) in enumerate(zip(out, ref)):
        assert c.dtype == dtype and c.shape == r.shape, f"problem {i}"
        if c.numel():
            assert_close(c, r, dtype, what=f"problem {i} {tuple(group_a[i].shape)} @ {tuple(group_b[i].shape)}")
    return out


# ---------------------------------------------------------------- correctness
POINTER_LAYOUTS = [("row", "row"), ("col", "strided"), ("strided", "col"), ("padded_col", "padded_col")]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", range(len(POINTER_LAYOUTS)))
def test_random_ragged_groups_pointer_path(seed, dtype):
    """Any strides; padded_col makes the launcher state 'col' layouts (unit stride along M / K)."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    shapes = random_problems(rng, 5)
    group = make_group(shapes, dtype, POINTER_LAYOUTS[seed], gen)
    if seed == 3:
        c = [torch.empty(M, N, dtype=dtype, device=DEVICE) for M, N, _ in shapes]
        facts, _ = grouped._plan(*group, c, shapes, tma=False)
        assert facts["A_LAYOUT"] == facts["B_LAYOUT"] == "col"
    check_group(*group, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layouts", [("padded_row", "padded_row"), ("padded_row", "padded_col"),
                                     ("padded_col", "padded_row")], ids="-".join)
def test_random_ragged_groups_tma(layouts, dtype):
    """TMA reads padded storage of any logical size: the descriptor's shape bounds the ragged edge."""
    rng = np.random.default_rng(10)
    gen = torch.Generator().manual_seed(10)
    check_group(*make_group(random_problems(rng, 5), dtype, layouts, gen), dtype, tma=True)


def test_fp32_both_paths():
    shapes = [(33, 40, 17), (5, 8, 64)]
    gen = torch.Generator().manual_seed(3)
    group = make_group(shapes, torch.float32, ("padded_row", "padded_row"), gen)
    check_group(*group, torch.float32)
    check_group(*group, torch.float32, tma=True)


def test_c_stored_through_descriptor_when_rows_are_aligned():
    """N_i multiples of 8 (fp16): C goes out through a TMA store, ragged M is clipped by it."""
    shapes = [(37, 40, 24), (1, 8, 8), (70, 16, 72)]
    gen = torch.Generator().manual_seed(4)
    group_a, group_b = make_group(shapes, torch.float16, ("row", "row"), gen)
    facts, _ = grouped._plan(group_a, group_b, [torch.empty(M, N, dtype=torch.float16, device=DEVICE)
                                                for M, N, _ in shapes], shapes, tma=True)
    assert facts["C_LAYOUT"] == "row" and facts["A_LAYOUT"] == facts["B_LAYOUT"] == "row"
    check_group(group_a, group_b, torch.float16, tma=True)


@pytest.mark.parametrize("tma", [False, True])
def test_empty_dimensions(tma):
    """M_i = 0 / N_i = 0: empty outputs; K_i = 0: zeros (an empty sum), like torch."""
    shapes = [(0, 8, 8), (8, 0, 8), (9, 8, 0), (0, 0, 0), (3, 8, 16)]
    group_a = [padded(M, K, torch.float16) for M, _, K in shapes]
    group_b = [padded(K, N, torch.float16) for _, N, K in shapes]
    out = check_group(group_a, group_b, torch.float16, tma=tma)
    assert [tuple(c.shape) for c in out] == [(M, N) for M, N, _ in shapes]
    assert torch.equal(out[2].float().cpu(), torch.zeros(9, 8))


def test_group_without_any_tile_returns_empty_outputs():
    out = grouped_matmul([random_matrix(0, 4), random_matrix(3, 4)], [random_matrix(4, 5), random_matrix(4, 0)])
    assert [tuple(c.shape) for c in out] == [(0, 5), (3, 0)]


def test_many_small_problems_one_launch():
    """More problems than programs and than tiles per program: the binary search has depth."""
    gen = torch.Generator().manual_seed(5)
    shapes = [(1 + 3 * i % 17, 1 + 5 * i % 23, 1 + 7 * i % 19) for i in range(25)]
    check_group(*make_group(shapes, torch.float16, ("row", "row"), gen), torch.float16)


# ---------------------------------------------------------------- the schedule: kernel == mirror
@triton.jit
def _record_locate(starts_ptr, num_problems, ends_ptr, out_ptr, E_PAD: tl.constexpr):
    tile = tl.program_id(0)
    problem, local = locate_problem(tile, starts_ptr, num_problems)
    lanes = tl.arange(0, E_PAD)
    ends = tl.load(ends_ptr + lanes, mask=lanes < num_problems, other=2**30)
    problem_v, local_v = locate_problem_in_ends(tile, ends)
    tl.store(out_ptr + 4 * tile, problem)
    tl.store(out_ptr + 4 * tile + 1, local)
    tl.store(out_ptr + 4 * tile + 2, problem_v)
    tl.store(out_ptr + 4 * tile + 3, local_v)


@pytest.mark.parametrize("tiles_per_problem", [[3], [0, 2, 0, 0, 5, 1, 0], [1] * 9, [4, 0, 0, 0, 0, 0, 0, 0, 0, 2]])
def test_device_lookups_equal_numpy_mirror(tiles_per_problem):
    """Both device helpers (binary search over memory; counting in registers) == locate_problem_np."""
    starts = np.concatenate([[0], np.cumsum(tiles_per_problem)]).astype(np.int64)
    total, count = int(starts[-1]), len(tiles_per_problem)
    out = torch.full((total, 4), -1, dtype=torch.int32, device=DEVICE)
    # ends padded with a huge value: padding lanes are never "ended" (the kernel pads with the total)
    _record_locate[(total,)](torch.tensor(starts, dtype=torch.int32, device=DEVICE), count,
                             torch.tensor(starts[1:], dtype=torch.int32, device=DEVICE), out,
                             E_PAD=triton.next_power_of_2(count))
    problem, local = locate_problem_np(np.arange(total), starts)
    expected = np.stack([problem, local, problem, local], axis=1)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("shapes,num_programs,group", [
    ([(70, 40, 8), (0, 9, 8), (33, 100, 8), (1, 1, 8)], None, None),   # the launcher's defaults
    ([(70, 40, 8), (0, 9, 8), (33, 100, 8), (1, 1, 8)], 3, 2),
    ([(130, 8, 16), (8, 70, 16)], 1, 8),                               # one program walks everything
    ([(9, 9, 16)], 7, 1),                                              # more programs than tiles
])
def test_kernel_schedule_equals_mirror(shapes, num_programs, group, tma):
    """The trace comes from _grouped_matmul_kernel itself: (program, problem, pid_m, pid_n) per tile."""
    group_a = [padded(M, K, torch.float16) for M, _, K in shapes]
    group_b = [padded(K, N, torch.float16) for _, N, K in shapes]
    out, trace = trace_grouped_schedule(group_a, group_b, tma=tma, num_programs=num_programs, group_size_m=group)
    blocks = grouped.configs.grouped_configs()[0].kwargs
    programs = num_programs or min(runtime.num_sms(), int(problem_tile_starts(shapes, 32, 32)[-1]))
    mirror = multi_problem_schedule([(M, N) for M, N, _ in shapes], blocks["BLOCK_M"], blocks["BLOCK_N"],
                                    programs, "grouped", group or blocks["GROUP_SIZE_M"])
    np.testing.assert_array_equal(trace.numpy(), mirror[:, [1, 3, 4, 5]])
    for i, (c, r) in enumerate(zip(out, grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64))):
        if c.numel():
            assert_close(c, r, torch.float16, what=f"traced problem {i}")


# ---------------------------------------------------------------- what the launcher proves for the kernel
def test_plan_states_only_facts_true_for_every_problem():
    a_row, a_col = random_matrix(32, 64), random_matrix(32, 64, transposed=True)
    b = random_matrix(64, 48)
    c = [torch.empty(32, 48, dtype=torch.float16, device=DEVICE)] * 2
    shapes = [(32, 48, 64)] * 2
    facts, _ = grouped._plan([a_row, a_row], [b, b], c, shapes, tma=False)
    assert (facts["A_LAYOUT"], facts["M_ALIGN"], facts["N_ALIGN"], facts["K_ALIGN"]) == ("row", 16, 16, 16)
    facts, _ = grouped._plan([a_col, a_col], [b, b], c, shapes, tma=False)
    assert facts["A_LAYOUT"] == "col"
    facts, _ = grouped._plan([a_row, a_col], [b, b], c, shapes, tma=False)
    assert facts["A_LAYOUT"] == "any"  # no common layout: general strides, still correct
    facts, _ = grouped._plan([a_row, a_row], [b, b], c, [(32, 48, 64), (33, 48, 64)], tma=False)
    assert facts["M_ALIGN"] == 1


def test_size_one_dimension_needs_no_aligned_stride():
    """A 1 x K row sliced out of a matrix with an odd row stride is still TMA-readable."""
    a = random_matrix(3, 45)[:1, :40]  # row stride 45 elements (90 bytes), but only one row
    assert tma.descriptor_layouts(a)["row"] == (40, 1)  # an aligned stand-in (40 * 2 bytes)
    check_group([a], [padded(40, 24, torch.float16)], torch.float16, tma=True)


# ---------------------------------------------------------------- bad input -> clear errors
def _pair(M=8, N=8, K=8, dtype=torch.float16):
    return random_matrix(M, K, dtype), random_matrix(K, N, dtype)


@pytest.mark.parametrize("make,exc,pattern", [
    (lambda: ([], []), ValueError, "at least one problem"),
    (lambda: ([_pair()[0]] * 2, [_pair()[1]]), ValueError, "group_a has 2 matrices but group_b has 1"),
    (lambda: ([_pair()[0], random_matrix(8, 9)], [_pair()[1]] * 2), ValueError,
     r"problem 1: A is 8x9 but B is 8x8: the inner dimensions must match \(9 != 8\)"),
    (lambda: ([_pair()[0]] * 2, [_pair()[1], _pair(dtype=torch.bfloat16)[1]]), TypeError,
     r"group_b\[1\] has dtype bfloat16 but group_a\[0\] has float16"),
    (lambda: (_pair()[0], _pair()[1]), TypeError, "group_a must be a list"),
    (lambda: ([[1.0]], [_pair()[1]]), TypeError, r"group_a\[0\] must be a torch.Tensor"),
    (lambda: ([torch.zeros(2, 3, 4, dtype=torch.float16)], [_pair()[1]]), ValueError, r"group_a\[0\] must be 2-D"),
    (lambda: ([torch.ones(8, 8, dtype=torch.int32)], [_pair()[1]]), TypeError, "dtype int32"),
])
def test_bad_groups(make, exc, pattern):
    group_a, group_b = make()
    with pytest.raises(exc, match=pattern):
        grouped_matmul(group_a, group_b)


@pytest.mark.skipif(runtime.on_gpu(), reason="on a GPU the cpu/cuda case below covers this")
def test_device_mix_is_named():
    a, b = _pair()
    with pytest.raises(ValueError, match=r"group_b\[1\] is on meta"):
        grouped_matmul([a, a], [b, b.to("meta")])


@pytest.mark.gpu
def test_device_mix_is_named_on_gpu():
    a, b = _pair()
    with pytest.raises(ValueError, match=r"group_a\[1\] is on cpu"):
        grouped_matmul([a, a.cpu()], [b, b])


@pytest.mark.parametrize("make,pattern", [
    # row stride 9 fp16 elements = 18 bytes: not a multiple of 16
    (lambda: ([random_matrix(8, 9)], [padded(9, 8, torch.float16)]), r"group_a\[0\].*strides \(9, 1\)"),
    (lambda: ([padded(8, 16, torch.float16)] * 2, [padded(16, 8, torch.float16), random_matrix(16, 5)]),
     r"group_b\[1\].*cannot be read through a tensor descriptor"),
    # a base one element past an aligned address
    (lambda: ([padded(8, 17, torch.float16)[:, 1:]], [padded(16, 8, torch.float16)]),
     r"group_a\[0\].*data_ptr % 16 = 2"),
    # layouts differ between problems: the descriptor layout is a compile-time choice
    (lambda: ([padded(8, 16, torch.float16), padded(8, 16, torch.float16, transposed=True)],
              [padded(16, 8, torch.float16)] * 2), r"group_a\[1\] can only be read col-major.*share one layout"),
])
def test_tma_rejects_what_tma_cannot_read(make, pattern):
    group_a, group_b = make()
    with pytest.raises(ValueError, match=pattern):
        grouped_matmul(group_a, group_b, tma=True)
    check_group(group_a, group_b, torch.float16, tma=False)  # the pointer path takes any strides


def test_tma_option_must_be_bool():
    with pytest.raises(TypeError, match="tma must be True or False"):
        grouped_matmul(*map(lambda t: [t], _pair()), tma="yes")


def test_tma_without_hardware_says_why(monkeypatch):
    monkeypatch.setattr(runtime, "supports_tma", lambda: False)
    with pytest.raises(RuntimeError, match=r"needs the Tensor Memory Accelerator.*sm_90.*tma=False"):
        grouped_matmul(*map(lambda t: [t], _pair()), tma=True)


def test_autotune_key_is_small_and_pointer_free():
    shapes = [(100, 200, 300), (5, 6, 7)]
    key = grouped._autotune_key(shapes)
    assert key == {"num_problems_bucket": 2, "max_k_bucket": 512,
                   "work_bucket": int(np.log2(2 * (100 * 200 * 300 + 5 * 6 * 7))) // 2}
    # the keyed kernel arguments are all small ints or constexprs: no data pointers
    assert all(name not in grouped._grouped_matmul_tuned.keys for name in ("problems_ptr", "tile_starts_ptr"))


# ---------------------------------------------------------------- real sizes on the GPU
SEED_SQUARE = [(n, n, n) for n in (128, 256, 512, 1024)]
SEED_BATCHES = [(m, 8192, 8192) for m in (128, 256, 512, 1024)]


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SEED_SQUARE + SEED_BATCHES, ids=lambda s: "M{}-N{}-K{}".format(*s))
def test_gpu_seed_table_shapes(shape, dtype, tma):
    """The seed's two benchmark tables (groups of 4 equal problems), B transposed for TMA as the seed."""
    M, N, K = shape
    group_a = [random_matrix(M, K, dtype) for _ in range(4)]
    group_b = [random_matrix(K, N, dtype, transposed=tma) for _ in range(4)]
    check_group(group_a, group_b, dtype, tma=tma)


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_ragged_real_sizes(dtype, tma):
    shapes = [(1000, 1003, 520), (0, 4096, 4096), (1, 8192, 1024), (3000, 24, 2056), (4096, 4096, 0),
              (777, 1537, 4104), (129, 257, 8)]
    group_a = [padded(M, K, dtype) for M, _, K in shapes]
    group_b = [padded(K, N, dtype) for _, N, K in shapes]
    check_group(group_a, group_b, dtype, tma=tma)


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
def test_gpu_trace_equals_mirror(tma):
    shapes = [(1000, 1000, 64), (0, 64, 64), (300, 2000, 64), (64, 8, 64)]
    group_a = [padded(M, K, torch.float16) for M, _, K in shapes]
    group_b = [padded(K, N, torch.float16) for _, N, K in shapes]
    _, trace = trace_grouped_schedule(group_a, group_b, tma=tma)
    blocks = grouped.configs.grouped_configs()[0].kwargs
    total = int(problem_tile_starts(shapes, blocks["BLOCK_M"], blocks["BLOCK_N"])[-1])
    mirror = multi_problem_schedule([(M, N) for M, N, _ in shapes], blocks["BLOCK_M"], blocks["BLOCK_N"],
                                    min(runtime.num_sms(), total), "grouped", blocks["GROUP_SIZE_M"])
    np.testing.assert_array_equal(trace.numpy(), mirror[:, [1, 3, 4, 5]])


@pytest.mark.parametrize("tma", [False, True])
def test_plan_runs_again_on_updated_inputs_into_the_same_outputs(tma):
    """GroupedMatmulPlan: host work once, then each run recomputes from the inputs' current values."""
    _check_plan_reruns(tma, cuda_graph=False)


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
def test_graph_plan_replays_on_updated_inputs_into_the_same_outputs(tma):
    """cuda_graph=True: the recorded launch, replayed, sees the inputs' current values."""
    _check_plan_reruns(tma, cuda_graph=True)


def test_graph_plan_needs_a_gpu_and_a_bool():
    a, b = [torch.randn(4, 5).to(DEVICE, torch.float16)], [torch.randn(5, 3).to(DEVICE, torch.float16)]
    with pytest.raises(TypeError, match=r"cuda_graph must be True or False, got 1"):
        grouped.GroupedMatmulPlan(a, b, cuda_graph=1)
    if not runtime.on_gpu():
        with pytest.raises(ValueError, match=r"cuda_graph=True needs a CUDA GPU"):
            grouped.GroupedMatmulPlan(a, b, cuda_graph=True)


def _check_plan_reruns(tma, cuda_graph):
    if tma and not runtime.supports_tma():
        pytest.skip("TMA needs sm_90+")
    gen = torch.Generator().manual_seed(11)
    shapes = [(37, 40, 24), (0, 16, 8), (5, 72, 48), (64, 8, 1)]
    layouts = ("padded_row", "padded_row") if tma else ("row", "col")
    group_a, group_b = make_group(shapes, torch.float16, layouts, gen)
    plan = grouped.GroupedMatmulPlan(group_a, group_b, tma=tma, cuda_graph=cuda_graph)
    assert plan.shapes == shapes
    for c in plan.outputs:
        c.fill_(float("nan"))  # poison: every element must be written by run()
    first = plan.run()
    assert first is plan.outputs
    for c, r in zip(first, grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)):
        if c.numel():
            assert_close(c, r, torch.float16)
    for a in group_a:  # new values, same storage: the next run must see them
        a.copy_(torch.randn(a.shape, generator=gen).to(a.device, a.dtype))
    for c in plan.outputs:
        c.fill_(float("nan"))
    second = plan.run()
    for c, r in zip(second, grouped_matmul_ref(group_a, group_b, out_dtype=torch.float64)):
        if c.numel():
            assert_close(c, r, torch.float16)


@pytest.mark.parametrize("cuda_graph", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_plan_with_no_tiles_returns_empty_outputs(cuda_graph):
    group_a = [torch.randn(0, 5).to(DEVICE, torch.float16), torch.randn(3, 5).to(DEVICE, torch.float16)]
    group_b = [torch.randn(5, 4).to(DEVICE, torch.float16), torch.randn(5, 0).to(DEVICE, torch.float16)]
    out = grouped.GroupedMatmulPlan(group_a, group_b, cuda_graph=cuda_graph).run()
    assert [tuple(c.shape) for c in out] == [(0, 4), (3, 0)]


def test_plan_validates_like_grouped_matmul():
    a = torch.randn(4, 5).to(DEVICE, torch.float16)
    with pytest.raises(ValueError, match="inner dimensions"):
        grouped.GroupedMatmulPlan([a], [torch.randn(6, 3).to(DEVICE, torch.float16)])


@pytest.mark.parametrize("change,field", [
    (lambda t: setattr(t, "data", torch.ones(64, 64, dtype=t.dtype, device=t.device)), "address, shape, strides"),
    (lambda t: t.resize_(64, 64), "address, shape, strides"),
    (lambda t: t.resize_(8, 24), "shape"),  # shrinking keeps the storage: same address, other shape
    (lambda t: t.set_(torch.zeros(37, 24, dtype=t.dtype, device=t.device)), "address"),
])
def test_plan_refuses_inputs_whose_storage_changed(change, field):
    """`a.data = ...` and `a.resize_(...)` left the plan reading freed memory (values ~4e17)."""
    gen = torch.Generator().manual_seed(3)
    group_a, group_b = make_group([(37, 40, 24), (5, 16, 8)], torch.float16, ("row", "row"), gen)
    plan = grouped.GroupedMatmulPlan(group_a, group_b)
    plan.run()
    change(group_a[0])
    with pytest.raises(ValueError, match=rf"^group_a\[0\] changed since this GroupedMatmulPlan was built "
                                         rf"\({field}(, dtype)?; .*Build a new plan"):
        plan.run()
    # a new plan for the changed tensors is right again (when their shapes still multiply)
    if group_a[0].shape[1] == group_b[0].shape[0]:
        out = grouped.GroupedMatmulPlan(group_a, group_b).run()
        assert_close(out[0], group_a[0].double() @ group_b[0].double(), torch.float16)
