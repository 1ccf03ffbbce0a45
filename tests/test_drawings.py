"""Drawings: pure functions returning figures, deterministic pictures, and pointer
arithmetic that agrees with torch's own strides."""

import io

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from PIL import Image

from gemm_kernels.viz import drawings as d
from gemm_kernels.viz import images
from gemm_kernels.models.l2model import reuse_profile
from gemm_kernels.models.schedule import grouped_gemm_schedule, tile_schedule
from gemm_kernels.models.tiles import streamk_segments


def png_pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("layout", ["row_major", "transposed", "sliced"])
@pytest.mark.parametrize("rows,cols,block,start", [(6, 7, 4, (4, 4)), (5, 3, 2, (0, 2)), (9, 9, 8, (8, 0))])
def test_block_pointers_match_torch_storage(layout, rows, cols, block, start):
    # fill the storage with 0, 1, 2, ... so an element's value is its address
    if layout == "row_major":
        x = torch.arange(rows * cols).reshape(rows, cols)
    elif layout == "transposed":
        x = torch.arange(rows * cols).reshape(cols, rows).t()
    else:  # every other column of a wider matrix, starting at an offset
        x = torch.arange(3 + rows * 2 * cols).as_strided((rows, cols), (2 * cols, 2), 3)
    offs, mask = d.block_pointers(*start, block, block, x.stride(0), x.stride(1), rows, cols, base=x.storage_offset())
    i = start[0] + np.arange(block)[:, None] + 0 * np.arange(block)[None, :]
    j = start[1] + np.arange(block)[None, :] + 0 * np.arange(block)[:, None]
    np.testing.assert_array_equal(mask, (i < rows) & (j < cols))
    np.testing.assert_array_equal(offs[mask], x.numpy()[i[mask], j[mask]])
    assert d.storage_size(rows, cols, x.stride(0), x.stride(1), x.storage_offset()) == int(x.max()) + 1


def test_tile_colors_follow_waves():
    s = tile_schedule(9, 9, 1, 1, "grouped", 3, programs_in_flight=9)
    rgba = d.tile_colors(s, "wave", current_wave=1)
    waves = s.wave_grid()
    grey = d._UNLAUNCHED
    assert np.allclose(rgba[waves > 1], grey)
    assert not np.allclose(rgba[waves == 1], grey)
    # earlier waves are faded towards white, not grey, and differ from the current wave
    assert (rgba[waves == 0][:, :3].mean() > rgba[waves == 1][:, :3].mean())
    with pytest.raises(ValueError, match="color_by"):
        d.tile_colors(s, "rainbow")


def test_operand_colors_show_hits_and_misses():
    s = tile_schedule(9, 9, 1, 1, "grouped", 3, programs_in_flight=9)
    profile = reuse_profile(s, 1, K=9)
    a, b = d.operand_colors(s, 0, profile, None)  # cold cache: the first reads all miss
    assert np.allclose(a[:3], d._MISS) and np.allclose(b[:3], d._MISS)
    assert np.allclose(a[3:], d._UNTOUCHED) and np.allclose(b[3:], d._UNTOUCHED)
    a, b = d.operand_colors(s, 1, profile, None)  # wave 1 reuses A rows 0-2, new B columns 3-5
    assert np.allclose(a[:3], d._HIT) and np.allclose(b[3:6], d._MISS)
    a, _ = d.operand_colors(s, 1, profile, 0)  # no cache at all: the reuse misses too
    assert np.allclose(a[:3], d._MISS)
    a, _ = d.operand_colors(s, 0)  # no L2 model: touched blocks are simply marked
    assert np.allclose(a[:3], d._READ)


def test_views_repaint_in_place():
    s = tile_schedule(64 * 128, 64 * 128, 128, 128, "grouped", 8, programs_in_flight=132)
    view = d.ScheduleView()
    first = view.update(s, 0, k_cols=16)
    one = view.raster.png()
    assert view.update(s, 5, k_cols=16) is first  # same figure object, new pixels
    five = view.raster.png()
    assert one != five
    assert png_pixels(five).shape[:2] == (view.raster.height, view.raster.width)


def test_stamped_labels_are_painted_only_where_they_fit():
    px = np.ones((40, 40, 4), dtype=np.float32)
    assert d.stamp_cell_labels(px, [["7", "8"], ["9", "10"]], 0, 0, 20, 20)
    assert px[:, :, :3].min() < 0.5  # dark digits on white
    tiny = np.ones((8, 8, 4), dtype=np.float32)
    assert not d.stamp_cell_labels(tiny, [["123"]], 0, 0, 8, 8)
    assert tiny.min() == 1.0


@pytest.mark.parametrize("make", [
    lambda: d.draw_order_comparison(),
    lambda: d.draw_grouped_ordering(5, 4, 2, 4),
    lambda: d.draw_one_block_computation(k_blocks=5, pid_m=1, pid_n=2, num_pid_m=3, num_pid_n=4),
    lambda: d.draw_pointer_layouts(),
    lambda: d.draw_pointer_block(5, 9, block_rows=4, block_cols=8, row_start=4, col_start=8, use_mask=False),
    lambda: d.draw_schedule(tile_schedule(300, 200, 32, 32, "persistent", 2, programs_in_flight=5), 2,
                            color_by="program"),
    lambda: d.draw_tile_order(tile_schedule(100, 70, 16, 16, "grouped", 3, programs_in_flight=4), show_groups=True),
    lambda: d.draw_grouped_gemm(grouped_gemm_schedule([(64, 64, 32), (0, 64, 32), (200, 90, 16)], 32, 32, 4), 1),
    lambda: d.draw_l2_curve({"rm": tile_schedule(512, 512, 64, 64, "row_major", programs_in_flight=8)}, 32, 512,
                            l2_sizes=[2**16, 2**18, 2**20]),
    lambda: d.draw_streamk_segments(streamk_segments(6, 8, 4, sk_tiles=2), 8),
], ids=["order", "grouping", "one_block", "pointers", "no_mask", "persistent", "tile_order", "grouped_gemm", "l2",
        "stream_k"])
def test_draw_functions_return_deterministic_figures(make):
    first, second = make(), make()
    assert isinstance(first, Figure)
    a, b = d.png_bytes(first), d.png_bytes(second)
    assert a == b
    pixels = png_pixels(a)
    assert pixels.std() > 10  # a picture, not a blank page


def test_streamk_timeline_ends_every_program_together():
    """6 tiles of 8 iterations on 4 programs, the last 2 split: every program runs 12 iterations,
    so the busiest-vs-idlest title reads 12 / 12, and the 2 segments that start mid-tile are hatched."""
    fig = d.draw_streamk_segments(streamk_segments(6, 8, 4, sk_tiles=2), 8)
    ax = fig.axes[0]
    assert "busiest 12, idlest 12" in ax.get_title()
    assert sum(1 for p in ax.patches if p.get_hatch()) == 2  # two segments start mid-tile
    assert ax.get_xlim()[1] >= 12


def test_one_block_rejects_a_tile_outside_the_grid():
    with pytest.raises(ValueError, match="outside"):
        d.draw_one_block_computation(pid_m=9)


def test_images_are_generated_deterministically(tmp_path):
    seed_figures = {"order_row_major_vs_grouped", "grouped_ordering_num_pid_in_group", "one_block_computation"}
    assert seed_figures <= set(images.PICTURES)
    names = ["order_row_major_vs_grouped", "pointer_arithmetic_no_mask"]
    first = [p.read_bytes() for p in images.generate(tmp_path / "a", names)]
    second = [p.read_bytes() for p in images.generate(tmp_path / "b", names)]
    assert first == second
    assert all(data[:8] == b"\x89PNG\r\n\x1a\n" for data in first)


def test_figures_display_as_pictures_in_ipython():
    from types import SimpleNamespace

    from IPython.core.formatters import DisplayFormatter

    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    fig = d.draw_tile_order(tile_schedule(64, 64, 32, 32, "grouped", 2, programs_in_flight=2))
    assert "image/png" not in shell.display_formatter.format(fig)[0]  # what a notebook got before
    assert d.enable_notebook_display(shell)
    data, _ = shell.display_formatter.format(fig)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert not d.enable_notebook_display(SimpleNamespace())  # not IPython: nothing to do
