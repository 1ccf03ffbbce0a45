"""gemm_kernels.teaching (the deliberately unmasked tutorial-08-style kernel of notebook 06) and the
drawings notebooks 05-07 add: stray accesses are caught exactly, the masked run is right, the
kernel walks the mirrored schedule, and the pictures say what the data says."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import gemm_kernels as gk
from gemm_kernels.viz import drawings
from gemm_kernels.lab import traces
from gemm_kernels.lab import teaching
from gemm_kernels.models.tiles import multi_problem_schedule


@triton.jit
def _right_masks(rows, cols, ks, M, N, K):
    return ((rows[:, None] < M) & (ks[None, :] < K), (ks[:, None] < K) & (cols[None, :] < N),
            (rows[:, None] < M) & (cols[None, :] < N))


SHAPES = [(64, 64, 64), (40, 64, 64), (64, 64, 40), (20, 36, 40), (0, 32, 16)]


def test_pointer_arrays_hold_addresses_sizes_and_leading_dimensions():
    group = teaching.sentinel_group(SHAPES[:3])
    arrays = teaching.pointer_arrays(group.group_a, group.group_b, group.group_c)
    assert arrays["a_ptrs"].tolist() == [a.data_ptr() for a in group.group_a]
    assert arrays["c_ptrs"].tolist() == [c.data_ptr() for c in group.group_c]
    assert arrays["sizes"].tolist() == [[M, N, K] for M, N, K in SHAPES[:3]]
    pad = max(teaching.BLOCKS.values())
    assert arrays["lds"].tolist() == [[K + pad, N + pad, N + pad] for M, N, K in SHAPES[:3]]
    with pytest.raises(ValueError, match="contiguous"):
        teaching.pointer_arrays([group.group_a[0].t()], [group.group_b[0]], [group.group_c[0]])


def test_full_tiles_assumption_damage_is_reported_exactly():
    group = teaching.sentinel_group(SHAPES)
    teaching.pointer_array_matmul(group.group_a, group.group_b, group.group_c, num_programs=3)
    report = {d.shape: d for d in teaching.damage_report(group)}
    assert report[(64, 64, 64)].ok
    ragged_m = report[(40, 64, 64)]  # right values, one block row stored past C: 24 rows x 64 columns
    assert not ragged_m.wrong.any() and int(ragged_m.clobbered.sum()) == 24 * 64
    ragged_k = report[(64, 64, 40)]  # NaN padding read into every sum, nothing stored outside
    assert ragged_k.wrong.all() and not ragged_k.clobbered.any()
    assert "NaN: a sentinel was read" in ragged_k.describe()
    assert report[(0, 32, 16)].ok  # no tiles at all
    assert not any(d.reads_changed for d in report.values())


def test_contiguous_c_ragged_n_overwrites_c_itself():
    """ldc = N: the columns >= N of row i are row i + 1, so the unmasked stores of a ragged N land
    inside C (wrong values), where the padded buffers showed right values and clobbered neighbours."""
    M, N, K = 64, 50, 64
    padded = teaching.sentinel_group([(M, N, K)])
    contiguous = teaching.sentinel_group([(M, N, K)], contiguous=True)
    assert contiguous.group_c[0].stride() == (N, 1) and contiguous.group_a[0].stride() == (K, 1)
    for group in (padded, contiguous):
        teaching.pointer_array_matmul(group.group_a, group.group_b, group.group_c, num_programs=4)
    (kept,) = teaching.damage_report(padded)
    assert not kept.wrong.any() and kept.clobbered.any()
    (hit,) = teaching.damage_report(contiguous)
    spill = triton.cdiv(N, teaching.BLOCKS["BLOCK_N"]) * teaching.BLOCKS["BLOCK_N"] - N  # 14 columns past N
    rows, cols = np.nonzero(hit.wrong)
    assert len(rows) > 0 and rows.min() >= 1 and cols.max() < spill  # the next row's first 14 elements
    assert int(hit.clobbered.sum()) <= spill  # only the last row's spill leaves C
    assert "elements of C wrong" in hit.describe()


def test_contiguous_group_with_full_tiles_is_right():
    group = teaching.sentinel_group([(64, 64, 64), (32, 96, 32)], contiguous=True)
    teaching.pointer_array_matmul(group.group_a, group.group_b, group.group_c, num_programs=3)
    assert all(d.ok for d in teaching.damage_report(group))


def test_masks_fix_it_and_the_walk_is_the_mirror():
    group = teaching.sentinel_group(SHAPES, dtype=torch.bfloat16)
    _, trace = teaching.pointer_array_matmul(group.group_a, group.group_b, group.group_c, masks=_right_masks,
                                             num_programs=3, trace=True)
    assert all(d.ok for d in teaching.damage_report(group)), [d.describe() for d in teaching.damage_report(group)]
    bm, bn = teaching.BLOCKS["BLOCK_M"], teaching.BLOCKS["BLOCK_N"]
    mirror = multi_problem_schedule([(M, N) for M, N, K in SHAPES], bm, bn, 3, "row_major")
    np.testing.assert_array_equal(trace.numpy(), mirror[:, [1, 3, 4, 5]])


def test_record_masks_and_expected_masks_agree_for_right_masks():
    for case in [(0, 0, 0, 64, 64, 64), (32, 32, 32, 33, 40, 35)]:
        for got, want in zip(teaching.record_masks(_right_masks, *case), teaching.expected_masks(*case)):
            np.testing.assert_array_equal(got, want)


def test_sentinel_padding_must_cover_a_block():
    with pytest.raises(ValueError, match="at least one block"):
        teaching.sentinel_group([(8, 8, 8)], pad=4)


def test_reset_c_refills_the_sentinel():
    group = teaching.sentinel_group([(8, 8, 8)])
    group.c_buffers[0].zero_()
    group.reset_c()
    assert bool((group.c_buffers[0] == teaching.C_SENTINEL).all())


def test_lend_outputs_lets_grouped_matmul_store_into_the_sentinel_buffers():
    group = teaching.sentinel_group(SHAPES[:4])
    before = torch.empty
    with group.lend_outputs() as pending:
        outs = gk.grouped_matmul(group.group_a, group.group_b)
        other = torch.empty((3, 3), dtype=torch.float16)  # not a C shape: allocated as usual
    assert pending == [] and other.shape == (3, 3)
    assert [o.data_ptr() for o in outs] == [c.data_ptr() for c in group.group_c]
    assert all(d.ok for d in teaching.damage_report(group))
    assert torch.empty is before  # restored


def test_lend_outputs_exposes_stray_stores():
    group = teaching.sentinel_group([(40, 64, 64)])
    with group.lend_outputs():
        (c,) = [torch.empty((40, 64), dtype=torch.float16)]
    full = group.c_buffers[0][:64, :64]  # one whole block row past C, as an unmasked store writes it
    full.fill_(1.0)
    c.copy_(group.group_a[0].double().matmul(group.group_b[0].double()).half())
    (damage,) = teaching.damage_report(group)
    assert not damage.wrong.any() and int(damage.clobbered.sum()) == 24 * 64


# ----------------------------------------------------------------------------- drawings of notebooks 05-07
def test_program_timeline_marks_idle_slots_of_the_tail():
    schedule = gk.tile_schedule(9 * 32, 7 * 32, 32, 32, order="persistent", programs_in_flight=12)
    fig = drawings.draw_program_timeline(schedule)
    title = fig.axes[0].get_title()
    assert "63 tiles on 12 programs: 6 steps" in title and "last step 3 of 12 busy" in title


def test_sentinel_damage_panels_name_the_damage():
    group = teaching.sentinel_group(SHAPES[:2])
    teaching.pointer_array_matmul(group.group_a, group.group_b, group.group_c, num_programs=2)
    fig = drawings.draw_sentinel_damage(teaching.damage_report(group))
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].endswith("ok") and "0 wrong, 1536 clobbered" in titles[1]


def test_expert_load_from_the_kernel_trace_equals_the_mirror():
    counts = [50, 0, 13, 7, 0, 64, 1, 25]
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=gk.DEVICE)
    x = torch.randn(sum(counts), 32).to(gk.DEVICE, torch.float16)
    w = torch.randn(len(counts), 32, 40).to(gk.DEVICE, torch.float16)
    _, trace = traces.trace_moe_schedule(x, w, offs, block_m=16, block_n=16, num_programs=5)
    from_trace = drawings.expert_load(counts, 40, 16, 16, 5, trace=trace)
    mirror = drawings.expert_load(counts, 40, 16, 16, 5)
    np.testing.assert_array_equal(from_trace["tiles"], mirror["tiles"])
    assert from_trace["tiles_per_expert"].tolist() == [-(-c // 16) * 3 for c in counts]
    assert from_trace["tiles"].sum() == sum(from_trace["tiles_per_expert"])
    fig = drawings.draw_expert_load(counts, 40, 16, 16, 5, trace=trace)
    assert len(fig.axes) == 2


def test_expert_load_title_promises_only_what_the_bars_show():
    few = drawings.draw_expert_load([5, 0, 40, 9], N=64, block_m=16, block_n=32, num_programs=3)
    labels = [t.get_text() for t in few.axes[0].texts]
    assert "number on top" in few.axes[0].get_title() and labels == ["2", "0", "6", "2"]
    many = drawings.draw_expert_load([3] * 40 + [0] * 24, N=64, block_m=16, block_n=32, num_programs=8)
    assert not many.axes[0].texts  # 64 experts: no numbers on the bars...
    assert "number on top" not in many.axes[0].get_title()  # ...and the title does not promise them
    assert "80 tiles of 16x32 in all, at most 2 per expert" in many.axes[0].get_title()
