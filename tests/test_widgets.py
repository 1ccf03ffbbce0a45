"""Explorers driven through widget state, no browser: move a control, the model result and
the picture change; a bad combination shows a message instead of raising."""

import numpy as np
import pytest

import gemm_kernels
from gemm_kernels.viz import widgets
from gemm_kernels.models import tiles
from gemm_kernels.viz.widgets import (
    GroupedScheduleExplorer, PointerExplorer, ScheduleExplorer, grouped_schedule_explorer, parse_problems,
    pointer_explorer, schedule_explorer,
)


def test_one_line_each_from_the_package():
    for name in ("schedule_explorer", "pointer_explorer", "grouped_schedule_explorer"):
        assert name in gemm_kernels.__all__
        assert callable(getattr(gemm_kernels, name))


def test_schedule_explorer_reproduces_the_seed_example_and_reacts():
    ex = schedule_explorer()
    assert ex.error is None and ex.message.value == ""
    assert ex.image.value[:4] == b"\x89PNG"
    assert ex.traffic.upto(0)["misses"] == 54 and ex.traffic.upto(0)["c_writes"] == 9
    picture, counters = ex.image.value, ex.counters.value

    ex.order.value = "row_major"
    assert ex.traffic.upto(0)["misses"] == 90
    assert ex.image.value != picture and ex.counters.value != counters

    picture, counters, schedule = ex.image.value, ex.counters.value, ex.schedule
    ex.wave.value = 4
    assert ex.schedule is schedule  # stepping reuses the model
    assert ex.image.value != picture and ex.counters.value != counters
    assert "wave 4 of 9" in ex.counters.value


def test_group_size_changes_model_and_picture():
    ex = ScheduleExplorer()
    before_tiles, picture = ex.schedule.table.copy(), ex.image.value
    ex.group_size_m.value = 4
    assert not np.array_equal(ex.schedule.table, before_tiles)
    np.testing.assert_array_equal(ex.schedule.table[:, 4:], tiles.program_tiles(1152, 1152, 128, 128, "grouped", 4))
    assert ex.image.value != picture


def test_l2_size_changes_hits_not_the_schedule():
    ex = ScheduleExplorer(M=4096, N=4096, K=4096, block_k=64, group_size_m=8, programs_in_flight=132, l2_mib=50)
    schedule, misses, picture = ex.schedule, ex.traffic.totals()["misses"], ex.image.value
    ex.wave.value = 1
    picture = ex.image.value
    ex.l2_mib.value = 1.0
    assert ex.schedule is schedule
    assert ex.traffic.totals()["misses"] > misses
    assert ex.image.value != picture  # reads turn from green to red


def test_play_steps_the_wave():
    ex = ScheduleExplorer()
    count = ex.redraw_count
    ex.play.value = 3
    assert ex.wave.value == 3 and ex.redraw_count == count + 1
    assert ex.play.max == ex.wave.max == ex.schedule.num_waves - 1


def test_wave_is_clamped_when_the_launch_shrinks():
    ex = ScheduleExplorer()
    ex.wave.value = 8
    ex.programs_in_flight.value = 81  # one wave now
    assert ex.error is None and ex.wave.value == 0 and ex.schedule.num_waves == 1


def test_persistent_mode_is_the_persistent_schedule():
    ex = ScheduleExplorer(M=1000, N=700, block_m=64, block_n=64, group_size_m=4, programs_in_flight=12)
    ex.order.value = "persistent"
    assert ex.programs_in_flight.description == "NUM_SM"
    np.testing.assert_array_equal(ex.schedule.table, tiles.persistent_schedule(1000, 700, 64, 64, 12, "grouped", 4))


@pytest.mark.parametrize("control,value,words", [
    ("block_m", 256, "BLOCK_M = 256 is larger than M = 200"),
    ("block_n", 256, "BLOCK_N = 256 is larger than N = 200"),
    ("block_k", 256, "BLOCK_K = 256 is larger than K = 200"),
    ("group_size_m", 9, "GROUP_SIZE_M = 9 is larger than the 7 tile rows"),
])
def test_invalid_combinations_show_a_message(control, value, words):
    ex = ScheduleExplorer(M=200, N=200, K=200, block_m=32, block_n=32, block_k=32, group_size_m=2)
    good = ex.image.value
    getattr(ex, control).value = value  # must not raise
    assert words in ex.error and words in ex.message.value
    assert "Traceback" not in ex.message.value
    assert ex.image.layout.display == "none" and ex.counters.value == ""
    getattr(ex, control).value = {"block_m": 32, "block_n": 32, "block_k": 32, "group_size_m": 2}[control]
    assert ex.error is None and ex.message.value == "" and ex.image.layout.display is None
    assert ex.image.value == good


def test_too_many_tiles_is_a_message_not_a_hang():
    ex = ScheduleExplorer(block_m=16, block_n=16)
    ex.M.value = ex.N.value = 16384
    assert "tiles is more than this explorer draws" in ex.error


def test_unexpected_errors_become_messages(monkeypatch):
    ex = ScheduleExplorer()
    monkeypatch.setattr(ex.view, "update", lambda *a, **k: 1 / 0)
    ex.wave.value = 1
    assert ex.error.startswith("ZeroDivisionError")


def test_pointer_explorer_offsets_and_layouts():
    ex = pointer_explorer()
    rows, cols = ex.rows.value, ex.cols.value
    r0, c0 = ex.pid_r.value * ex.block_rows.value, ex.pid_c.value * ex.block_cols.value
    i = r0 + np.arange(ex.block_rows.value)[:, None]
    j = c0 + np.arange(ex.block_cols.value)[None, :]
    np.testing.assert_array_equal(ex.offsets, i * cols + j)
    np.testing.assert_array_equal(ex.mask, (i < rows) & (j < cols))
    picture = ex.image.value

    ex.layout_choice.value = "transposed"
    assert (ex.stride0.value, ex.stride1.value) == (1, rows) and ex.stride0.disabled
    np.testing.assert_array_equal(ex.offsets, i + j * rows)
    assert ex.image.value != picture

    picture = ex.image.value
    ex.use_mask.value = False
    assert ex.image.value != picture and "without a mask" in ex.counters.value

    ex.layout_choice.value = "custom"
    assert not ex.stride0.disabled
    ex.stride1.value = 3
    np.testing.assert_array_equal(ex.offsets, i * ex.stride0.value + j * 3)


def test_pointer_explorer_clamps_the_block_to_the_matrix():
    ex = PointerExplorer(rows=16, cols=16, block_rows=4, block_cols=4, pid_r=3, pid_c=3)
    ex.rows.value = 5  # two blocks of 4 rows now
    assert ex.error is None and ex.pid_r.value == 1 and ex.pid_r.max == 1


def test_grouped_explorer_reacts_to_num_sms_and_problems():
    ex = grouped_schedule_explorer()
    assert ex.error is None and ex.traffic is not None
    picture, steps = ex.image.value, ex.schedule.num_waves
    ex.num_sms.value = 4
    assert ex.schedule.programs_in_flight == 4 and ex.schedule.num_waves > steps
    assert ex.image.value != picture
    np.testing.assert_array_equal(
        ex.schedule.table, tiles.multi_problem_schedule(parse_problems(ex.problems.value), 128, 128, 4, "grouped", 8))

    ex.problems.value = "300x200, 0x128, 64x64"  # no K: schedule yes, L2 counts no
    assert ex.error is None and ex.traffic is None and "give every problem a K" in ex.counters.value
    assert ex.schedule.num_problems == 3

    ex.problems.value = "128x12y8"
    assert "could not read '128x12y8'" in ex.error
    ex.problems.value = "0x128x64"
    assert "no output tiles" in ex.error


def test_grouped_explorer_step_and_play():
    ex = GroupedScheduleExplorer(num_sms=8)
    picture = ex.image.value
    ex.play.value = 2
    assert ex.wave.value == 2 and ex.image.value != picture


def test_parse_problems():
    assert parse_problems(" 128x64x32; 0*16 , 5X6x7 ") == [(128, 64, 32), (0, 16), (5, 6, 7)]
    for bad, words in [("", "no problems"), ("12", "need two or three"), ("1x2x3x4", "need two or three"),
                       ("-1x4", "need two or three"), ("axb", "could not read")]:
        with pytest.raises(ValueError, match=words):
            parse_problems(bad)


@pytest.mark.parametrize("make, error, message", [
    (lambda: widgets.ScheduleExplorer(dpi=0), ValueError, r"dpi must be in \[1, 600\], got 0"),
    (lambda: widgets.ScheduleExplorer(dpi="72"), TypeError, r"dpi must be a number, got str"),
    (lambda: widgets.ScheduleExplorer(block_m=48), ValueError, r"block_m must be one of \[16, 32, 64, 128, 256\], got 48"),
    (lambda: widgets.ScheduleExplorer(order="foo"), ValueError,
     r"order must be one of \['row_major', 'grouped', 'persistent'\], got 'foo'"),
    (lambda: widgets.ScheduleExplorer(element_bytes=3), ValueError, r"element_bytes must be one of \[2, 4, 1\], got 3"),
    (lambda: widgets.ScheduleExplorer(M=100000), ValueError, r"M must be in \[1, 16384\], got 100000"),
    (lambda: widgets.ScheduleExplorer(programs_in_flight=0), ValueError, r"programs_in_flight must be in \[1, 1024\]"),
    (lambda: widgets.ScheduleExplorer(K=64.5), TypeError, r"K must be an int, got float"),
    (lambda: widgets.ScheduleExplorer(l2_mib=-1), ValueError, r"l2_mib must be in \[0, 512\], got -1"),
    (lambda: widgets.PointerExplorer(dpi=0), ValueError, r"dpi must be in"),
    (lambda: widgets.PointerExplorer(block_rows=3), ValueError, r"block_rows must be one of \[1, 2, 4, 8, 16, 32, 64\]"),
    (lambda: widgets.PointerExplorer(rows=65), ValueError, r"rows must be in \[1, 64\], got 65"),
    (lambda: widgets.PointerExplorer(layout="diagonal"), ValueError, r"layout must be one of"),
    (lambda: widgets.GroupedScheduleExplorer(dpi=0), ValueError, r"dpi must be in"),
    (lambda: widgets.GroupedScheduleExplorer(num_sms=1000), ValueError, r"num_sms must be in \[1, 264\], got 1000"),
    (lambda: widgets.GroupedScheduleExplorer(order="persistent"), ValueError, r"order must be one of \['row_major', 'grouped'\]"),
    (lambda: widgets.GroupedScheduleExplorer(problems=[(64, 64)]), TypeError, r"problems must be a str"),
])
def test_bad_arguments_name_the_argument_and_what_it_may_be(make, error, message):
    """dpi=0 crashed; block_m=48, order="foo", element_bytes=3 gave TraitErrors naming no control;
    M=100000 was clamped to the slider's range without a word."""
    with pytest.raises(error, match=message):
        make()


def test_a_model_too_large_for_a_redraw_is_computed_on_request():
    """16384^3 in 64x64 tiles, one program in flight: 65,536 waves.  The L2 model took 0.3-1.3 s on
    every change; now the redraw draws the schedule and says so, and the button computes the model."""
    from gemm_kernels.models.l2model import l2_traffic

    ex = widgets.ScheduleExplorer(M=16384, N=16384, K=16384, block_m=64, block_n=64, block_k=64,
                                  programs_in_flight=1, group_size_m=8)
    assert ex.error is None and ex.schedule.num_waves == 256 * 256
    assert widgets.model_size(ex.schedule) == 65536 * 512 > widgets.MODEL_BUDGET
    assert ex.traffic is None and "L2 model not computed" in ex.counters.value
    assert not ex.compute_l2.disabled
    ex.wave.value = 77  # stepping stays cheap: still no model
    assert ex.traffic is None and ex.error is None
    ex.compute_l2.click()
    assert ex.error is None and ex.compute_l2.disabled
    expected = l2_traffic(ex.schedule, block_k=64, l2_bytes=ex.l2_mib.value * 2**20)
    assert ex.traffic.totals() == expected.totals()
    assert "whole launch: hit rate" in ex.counters.value
    ex.group_size_m.value = 4  # a new schedule: over the budget again, so not recomputed unasked
    assert ex.traffic is None and "L2 model not computed" in ex.counters.value
