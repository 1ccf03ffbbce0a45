"""Regenerate the pictures under ``images/`` from :mod:`gemm_kernels.viz.drawings`.

    python -m gemm_kernels.viz.images            # writes images/*.png (or: make images)
    python -m gemm_kernels.viz.images --check    # exit 1 if a committed picture is out of date

Deterministic: the same package versions give byte-identical PNGs (no timestamps, no
software tag), so a changed picture in a diff means the drawing or the model changed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from . import drawings as d
from ..models.l2model import H100_L2_BYTES, H100_NUM_SMS, reuse_profile
from ..models.schedule import grouped_gemm_schedule, tile_schedule

IMAGES_DIR = Path(__file__).resolve().parents[2] / "images"

# The H100-sized example of notebooks 03 and 05: 8192^2 fp16, 128x128 tiles, BLOCK_K 64.
_BIG = dict(M=8192, N=8192, block_m=128, block_n=128)
_BIG_K, _BIG_BLOCK_K = 8192, 64
# Triton tutorial 08's first benchmark: four square problems, 128 .. 1024.
_TUTORIAL_08_PROBLEMS = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024)]


def _big(order, group=8):
    return tile_schedule(_BIG["M"], _BIG["N"], _BIG["block_m"], _BIG["block_n"], order, group,
                         programs_in_flight=H100_NUM_SMS, K=_BIG_K)


def _h100_waves():
    schedules = {"row-major": _big("row_major"), "grouped, GROUP_SIZE_M=8": _big("grouped")}
    fig = d.Figure(figsize=(10, 5.2), dpi=100)
    for i, (name, s) in enumerate(schedules.items()):
        ax = fig.add_subplot(1, 2, i + 1)
        d.draw_tile_order(s, "wave", ax=ax, title=f"{name}: {s.num_waves} waves of {H100_NUM_SMS} programs")
    fig.suptitle("8192 x 8192 C in 128 x 128 tiles (64 x 64), colour = wave", fontsize=11)
    return fig


def _h100_l2_wave(wave=1):
    schedules = {"row-major": _big("row_major"), "grouped, GROUP_SIZE_M=8": _big("grouped")}
    profiles = {k: reuse_profile(s, _BIG_BLOCK_K, _BIG_K) for k, s in schedules.items()}
    notes = {}
    for k, p in profiles.items():
        t = p.traffic(H100_L2_BYTES)
        notes[k] = (f"wave {wave}: {int(t.misses[wave]):,} of {int(t.loads[wave]):,} block loads miss in a 50 MiB L2\n"
                    f"(read blocks: red = fetched from DRAM, green = L2 hit)\n"
                    f"whole launch: {t.totals()['dram_read_bytes'] / 2**30:.2f} GiB read from DRAM")
    titles = {k: f"{k}, wave {wave}" for k in schedules}
    return d.draw_side_by_side({titles[k]: s for k, s in schedules.items()}, wave,
                               {titles[k]: p for k, p in profiles.items()}, H100_L2_BYTES, k_cols=16,
                               notes={titles[k]: n for k, n in notes.items()})


def _l2_curve():
    return d.draw_l2_curve({"row-major": _big("row_major"), "grouped, GROUP_SIZE_M=8": _big("grouped"),
                            "grouped, GROUP_SIZE_M=4": _big("grouped", 4)},
                           _BIG_BLOCK_K, _BIG_K, mark_bytes=H100_L2_BYTES)


def _persistent():
    s = tile_schedule(8 * 64, 10 * 64, 64, 64, "persistent", 4, programs_in_flight=12)
    fig = d.draw_tile_order(s, "program", figsize=(5.6, 5), title=(
        "persistent: 12 programs, tile t -> program t % 12, step t // 12\n"
        "(number = tile index in grouped order, colour = program)"))
    return fig


# name -> function returning a Figure
PICTURES = {
    "order_row_major_vs_grouped": d.draw_order_comparison,
    "grouped_ordering_num_pid_in_group": d.draw_grouped_ordering,
    "one_block_computation": d.draw_one_block_computation,
    "pointer_arithmetic_row_major_vs_transposed": d.draw_pointer_layouts,
    "pointer_arithmetic_no_mask": lambda: d.draw_pointer_block(6, 7, block_rows=4, block_cols=4, row_start=4,
                                                              col_start=4, use_mask=False, name="row-major A"),
    "schedule_waves_8192_h100": _h100_waves,
    "l2_hits_wave1_8192_h100": _h100_l2_wave,
    "l2_dram_reads_vs_capacity_8192": _l2_curve,
    "persistent_schedule_12_programs": _persistent,
    "grouped_gemm_tutorial08_16_programs": lambda: d.draw_grouped_gemm(
        grouped_gemm_schedule(_TUTORIAL_08_PROBLEMS, 128, 128, num_programs=16)),
}


def generate(out_dir: Path = IMAGES_DIR, names=None) -> list[Path]:
    """Write ``<name>.png`` for every picture (or those in ``names``) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or PICTURES:
        path = out_dir / f"{name}.png"
        path.write_bytes(d.png_bytes(PICTURES[name]()))
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="regenerate images/*.png from gemm_kernels.viz.drawings")
    parser.add_argument("--out", type=Path, default=IMAGES_DIR)
    parser.add_argument("--check", action="store_true", help="compare with the committed pictures instead of writing")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            stale = [p.name for p in generate(Path(tmp))
                     if not (args.out / p.name).exists() or (args.out / p.name).read_bytes() != p.read_bytes()]
        if stale:
            print("out of date (run `make images`):", ", ".join(stale))
            return 1
        print(f"all {len(PICTURES)} pictures in {args.out} are up to date")
        return 0
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
