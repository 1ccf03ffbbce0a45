"""Pictures of tile schedules, block loads and pointer arithmetic (matplotlib).

Every ``draw_*`` function is pure: it takes model objects (:mod:`gemm_kernels.models.schedule`,
:mod:`gemm_kernels.models.l2model`) or plain sizes and returns a new
:class:`matplotlib.figure.Figure` (no pyplot state, so nothing is shown twice; a Figure
as the last expression of a notebook cell displays itself).  The ``*View`` classes
behind them keep their artists and redraw through ``set_data``; the widgets
(:mod:`gemm_kernels.viz.widgets`) hold one view each and update it on every slider move.

Colours: each wave (or group, or program) gets the next colour of a 10-colour cycle;
tiles not launched yet are light grey; earlier waves are faded, the current one is
full colour.  Blocks of A and B read by the current wave are shaded from green (every
K block hits in L2) to red (every one misses); without an L2 model they are yellow.
"""

from __future__ import annotations

import io
from functools import lru_cache

import numpy as np
from matplotlib import colormaps, font_manager
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image, ImageDraw, ImageFont

from ..models.schedule import Schedule

#: Grids with more tiles (or cells) than this get no per-cell text: it would be unreadable
#: and slow to draw.
MAX_LABELLED_CELLS = 256

_UNLAUNCHED = np.array(to_rgba("#e8e8e8"))
_UNTOUCHED = np.array(to_rgba("#f4f4f4"))
_READ = np.array(to_rgba("#f2c94c"))      # yellow: read, no L2 model given
_HIT = np.array(to_rgba("#2ca02c"))
_MISS = np.array(to_rgba("#d62728"))
_MASKED = np.array(to_rgba("#bdbdbd"))
_IN_BLOCK = np.array(to_rgba("#4c78a8"))
_STRAY = np.array(to_rgba("#d62728"))    # an unmasked out-of-bounds load
_PALETTE = np.array(colormaps["tab10"].colors)
_PALETTE20 = np.array(colormaps["tab20"].colors)


def cycle_colors(index: np.ndarray, palette: np.ndarray = _PALETTE) -> np.ndarray:
    """RGBA colour per integer (cycling through ``palette``); negative -> light grey."""
    index = np.asarray(index)
    rgba = np.ones(index.shape + (4,))
    rgba[..., :3] = palette[np.maximum(index, 0) % len(palette), :3]
    rgba[index < 0] = _UNLAUNCHED
    return rgba


def fade(rgba: np.ndarray, amount: float) -> np.ndarray:
    """Blend colours towards white (``amount`` 0 = unchanged, 1 = white)."""
    out = rgba.copy()
    out[..., :3] = out[..., :3] * (1 - amount) + amount
    return out


def png_bytes(fig: Figure, dpi: float | None = None) -> bytes:
    """Render a figure to PNG bytes, quickly and deterministically (no timestamp/version)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None}, pil_kwargs={"compress_level": 1})
    return buf.getvalue()


def enable_notebook_display(shell=None) -> bool:
    """Show a :class:`~matplotlib.figure.Figure` left as a cell's last expression as a picture.

    The figures here are made without pyplot, and IPython only knows how to render figures once
    a pyplot backend has registered itself (``%matplotlib inline``); without that a notebook shows
    ``<Figure size 500x400 with 1 Axes>``.  This registers a PNG formatter for ``Figure`` with the
    running IPython shell (``shell``: that shell, for tests).  Called when this module is imported;
    returns False outside IPython."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters or "image/png" not in formatters:
        return False
    formatters["image/png"].for_type(Figure, png_bytes)
    return True


enable_notebook_display()


def _bare(ax) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def _cell_grid(ax, rows: int, cols: int, x0: float = 0, y0: float = 0, color="white", lw=0.6) -> None:
    """Thin lines between cells of a ``rows x cols`` block of cells whose top-left is (x0, y0)
    (one artist; skipped on grids too fine to see them)."""
    if rows * cols > 4 * MAX_LABELLED_CELLS:
        return
    segs = [((x0, y0 + r), (x0 + cols, y0 + r)) for r in range(1, rows)]
    segs += [((x0 + c, y0), (x0 + c, y0 + rows)) for c in range(1, cols)]
    ax.add_collection(LineCollection(segs, colors=color, linewidths=lw))


def _text_color(rgba) -> str:
    return "black" if np.dot(rgba[:3], [0.299, 0.587, 0.114]) > 0.55 else "white"


# =============================================================================== rasters
# The views (used by the widgets) paint the whole figure as one pixel image: cells are
# numpy blocks, text is pasted glyph bitmaps (rendered once per string by PIL with
# matplotlib's own DejaVu Sans).  matplotlib only shows that image 1:1, so a redraw costs
# a set_data and a PNG encode: no per-cell artists, no Text layout (~2 ms per Text).
@lru_cache(maxsize=None)
def _font(size_px: int):
    return ImageFont.truetype(font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans")), size_px)


@lru_cache(maxsize=16384)
def _glyphs(text: str, size_px: int) -> np.ndarray:
    font = _font(size_px)
    left, top, right, bottom = font.getbbox(text)
    ascent, descent = font.getmetrics()
    # keep the full line height so texts of one size share a baseline
    img = Image.new("L", (max(right - left, 1), ascent + descent), 0)
    ImageDraw.Draw(img).text((-left, 0), text, fill=255, font=font)
    return np.asarray(img, dtype=np.float32) / 255.0


def text_width(text: str, size_px: int) -> int:
    """Width in pixels of ``text`` pasted at ``size_px``."""
    return _glyphs(text, size_px).shape[1]


def stamp_text(px: np.ndarray, text: str, x: float, y: float, size_px: int, color=None,
               ha: str = "center", va: str = "center") -> None:
    """Paint ``text`` (may hold newlines) into an RGBA float image at pixel ``(x, y)``,
    aligned by ``ha`` (left/center/right) and ``va`` (top/center/bottom); ``color`` ``None``:
    black or white, whichever reads better on the background.  Clipped to the image."""
    lines = text.split("\n")
    line_h = _glyphs("Ag", size_px).shape[0]
    y_top = y - {"top": 0, "center": 0.5, "bottom": 1}[va] * line_h * len(lines)
    for n, line in enumerate(lines):
        if not line:
            continue
        alpha = _glyphs(line, size_px)
        h, w = alpha.shape
        y0 = int(round(y_top + n * line_h))
        x0 = int(round(x - {"left": 0, "center": 0.5, "right": 1}[ha] * w))
        ys = slice(max(y0, 0), min(y0 + h, px.shape[0]))
        xs = slice(max(x0, 0), min(x0 + w, px.shape[1]))
        if ys.start >= ys.stop or xs.start >= xs.stop:
            continue
        region = px[ys, xs, :3]
        a = alpha[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0, None]
        c = color
        if c is None:
            c = (0.0, 0.0, 0.0) if region.mean(axis=(0, 1)) @ [0.299, 0.587, 0.114] > 0.55 else (1.0, 1.0, 1.0)
        region[:] = region * (1 - a) + np.asarray(to_rgba(c)[:3]) * a


def cells_to_pixels(cells: np.ndarray, cell_h: int, cell_w: int | None = None, lines: bool = False) -> np.ndarray:
    """Each cell of an ``[H, W, 4]`` RGBA array becomes a ``cell_h x cell_w`` block of pixels;
    ``lines``: a white line between cells (when cells are big enough to spare it)."""
    cell_w = cell_h if cell_w is None else cell_w
    H, W = cells.shape[:2]
    px = np.empty((H, cell_h, W, cell_w, 4), dtype=np.float32)
    px[:] = cells[:, None, :, None]
    px = px.reshape(H * cell_h, W * cell_w, 4)
    if lines and min(cell_h, cell_w) >= 6:
        px[cell_h - 1::cell_h, :, :3] = 1.0
        px[:, cell_w - 1::cell_w, :3] = 1.0
    return px


def outline(px: np.ndarray, y0: int, x0: int, h: int, w: int, color="black", width: int = 2) -> None:
    """A rectangle outline painted into the image (pixels), clipped to it."""
    H, W = px.shape[:2]
    y1, x1 = min(y0 + h, H), min(x0 + w, W)
    y0, x0 = max(y0, 0), max(x0, 0)
    c = np.asarray(to_rgba(color), dtype=np.float32)
    px[y0:min(y0 + width, y1), x0:x1] = c
    px[max(y1 - width, y0):y1, x0:x1] = c
    px[y0:y1, x0:min(x0 + width, x1)] = c
    px[y0:y1, max(x1 - width, x0):x1] = c


class RasterFigure:
    """A (sub)figure that is one pixel image, shown 1:1: views paint ``px`` then call ``show``.

    ``pt(points)`` converts a font size in points to pixels at the figure's dpi, so
    pictures saved at a higher dpi have proportionally larger, sharp text."""

    def __init__(self, fig):
        self.fig = fig
        self.width, self.height = int(round(fig.bbox.width)), int(round(fig.bbox.height))
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        self.px = np.ones((self.height, self.width, 4), dtype=np.float32)
        self.im = ax.imshow(np.full((self.height, self.width, 3), 255, dtype=np.uint8), aspect="auto",
                            interpolation="nearest", extent=(0, self.width, self.height, 0))

    def pt(self, points: float) -> int:
        return max(6, int(round(points * self.fig.dpi / 72)))

    def clear(self) -> None:
        self.px[:] = 1.0

    def fit(self, rows: int, cols: int, box, square: bool = True, max_cell: int = 48):
        """Largest whole-pixel cell so ``rows x cols`` cells fit in ``box = (x, y, w, h)`` (pixels);
        returns ``(y0, x0, cell_h, cell_w)`` with the grid centred horizontally, top-aligned."""
        x, y, w, h = box
        cell_w = max(1, min(max_cell, int(w // max(cols, 1))))
        cell_h = max(1, min(max_cell, int(h // max(rows, 1))))
        if square:
            cell_w = cell_h = min(cell_w, cell_h)
        return int(y), int(x + max(0, (w - cols * cell_w) // 2)), cell_h, cell_w

    def paste(self, block: np.ndarray, y0: int, x0: int) -> None:
        """Copy a pixel block into the image at ``(y0, x0)``, clipped."""
        h = min(block.shape[0], self.height - y0)
        w = min(block.shape[1], self.width - x0)
        if h > 0 and w > 0:
            self.px[y0:y0 + h, x0:x0 + w] = block[:h, :w]

    def text(self, text: str, x: float, y: float, points: float = 9, **kwargs) -> None:
        stamp_text(self.px, text, x, y, self.pt(points), **kwargs)

    def show(self) -> None:
        self._rgb = (self.px[..., :3] * 255 + 0.5).astype(np.uint8)  # alpha is always 1
        self.im.set_data(self._rgb)

    def png(self) -> bytes:
        """The painted image as PNG bytes, straight from the pixels (what ``savefig`` would
        give at the figure's dpi, minus matplotlib's resampling pass: ~4x faster)."""
        buf = io.BytesIO()
        Image.fromarray(self._rgb).save(buf, format="PNG", compress_level=1)
        return buf.getvalue()


def _label_size(cell_px: int) -> int:
    return int(np.clip(cell_px * 0.42, 7, 15))


def stamp_cell_labels(px, texts, top: int, left: int, cell_h: int, cell_w: int, size_px: int | None = None) -> bool:
    """Write ``texts[i][j]`` centred in cell ``(top + i, left + j)`` of a pixel image; nothing
    when the widest one would not fit its cell.  Returns whether the labels were written."""
    size_px = size_px or _label_size(min(cell_h, cell_w))
    widest = max((t for row in texts for t in row), key=len, default="")
    if not widest or min(cell_h, cell_w) < 12 or text_width(widest, size_px) > cell_w - 2:
        return False
    for i, row in enumerate(texts):
        for j, t in enumerate(row):
            if t:
                stamp_text(px, t, (left + j + 0.5) * cell_w - 0.5, (top + i + 0.5) * cell_h - 0.5, size_px)
    return True


# =============================================================================== schedules
def tile_colors(schedule: Schedule, color_by: str = "wave", current_wave: int | None = None,
                problem: int = 0) -> np.ndarray:
    """``[num_pid_m, num_pid_n, 4]`` RGBA of one problem's C tiles.

    ``color_by``: ``"wave"``, ``"group"`` (GROUP_SIZE_M row groups) or ``"program"``.
    ``current_wave``: tiles of later waves are grey, earlier waves faded; ``None`` shows all."""
    if color_by == "wave":
        rgba = cycle_colors(schedule.wave_grid(problem))
    elif color_by == "group":
        rgba = cycle_colors(schedule.group_grid(problem))
    elif color_by == "program":
        rgba = cycle_colors(schedule.program_grid(problem), _PALETTE20)
    else:
        raise ValueError(f"color_by must be 'wave', 'group' or 'program', got {color_by!r}")
    if current_wave is not None:
        waves = schedule.wave_grid(problem)
        rgba[waves < current_wave] = fade(rgba[waves < current_wave], 0.65)
        rgba[waves > current_wave] = _UNLAUNCHED
    return rgba


def operand_colors(schedule: Schedule, wave: int, profile=None, l2_bytes=None, problem: int = 0):
    """Colours of A's row-blocks and B's column-blocks for one wave: ``(a_rgba[num_pid_m, 4],
    b_rgba[num_pid_n, 4])``.  Untouched blocks are near-white; touched ones yellow, or,
    given an L2 :class:`~gemm_kernels.models.l2model.ReuseProfile`, green -> red with the fraction
    of their K blocks that miss."""
    num_pid_m, num_pid_n = schedule.tile_grid(problem)
    a = np.tile(_UNTOUCHED, (num_pid_m, 1))
    b = np.tile(_UNTOUCHED, (num_pid_n, 1))
    if profile is None:
        rows, cols = schedule.wave_footprint(wave, problem)
        a[rows], b[cols] = _READ, _READ
        return a, b
    sel = (profile.wave == wave) & (profile.problem == problem)
    miss = 1 - profile.hits(l2_bytes)[sel] / profile.k_blocks[sel]
    rgba = _HIT * (1 - miss[:, None]) + _MISS * miss[:, None]
    is_a = profile.operand[sel] == 0
    a[profile.index[sel][is_a]] = rgba[is_a]
    b[profile.index[sel][~is_a]] = rgba[~is_a]
    return a, b


class ScheduleView:
    """A (row-blocks x K blocks) on the left, B (K blocks x column-blocks) on top, C's tiles
    bottom-right, the classic picture of a GEMM; one wave's reads highlighted.

    Painted as one image (see :class:`RasterFigure`); ``update(schedule, wave, ...)``
    repaints it in place.  ``k_cols`` is how many K blocks to draw (display only: a
    row-block is always read whole)."""

    def __init__(self, fig=None, figsize=(6.4, 5.6), dpi: float = 72, title: str | None = None):
        self.fig = fig if fig is not None else Figure(figsize=figsize, dpi=dpi)
        self.raster = RasterFigure(self.fig)
        self.title = title

    def update(self, schedule: Schedule, wave: int = 0, profile=None, l2_bytes=None, k_cols: int = 9,
               color_by: str = "wave", note: str = "", labels: bool = True, problem: int = 0) -> Figure:
        """Repaint for ``wave`` of ``schedule`` (``profile``/``l2_bytes``: colour reads by hit/miss).

        ``labels``: number C's tiles in launch order where the cells are big enough."""
        R = self.raster
        R.clear()
        num_pid_m, num_pid_n = schedule.tile_grid(problem)
        gap = max(1, round(max(num_pid_m, num_pid_n) / 40))
        top = left = k_cols + gap  # C's first row / column, in cells
        H, W = top + num_pid_m, left + num_pid_n
        line = R.pt(11) + 4
        head = (self.title.count("\n") + 1) * line + 6 if self.title else 4

        def fit(head):
            return R.fit(H, W, (R.pt(10) + 10, head, R.width - R.pt(10) - 16, R.height - head - line - 4))

        y0, x0, cp, _ = fit(head)
        note_lines = note.split("\n") if note else []
        note_h = len(note_lines) * (R.pt(9) + 3)
        note_w = max((text_width(t, R.pt(9)) for t in note_lines), default=0)
        in_corner = note_w <= k_cols * cp - R.pt(10) - 12 and note_h <= k_cols * cp - 4
        if note and not in_corner:  # no room above A: give the note its own band under the title
            note_y = head
            y0, x0, cp, _ = fit(head + note_h + 4)

        cells = np.ones((H, W, 4))
        cells[top:, :k_cols] = operand_colors(schedule, wave, profile, l2_bytes, problem)[0][:, None]
        cells[:k_cols, left:] = operand_colors(schedule, wave, profile, l2_bytes, problem)[1][None, :]
        cells[top:, left:] = tile_colors(schedule, color_by, wave, problem)
        px = cells_to_pixels(cells, cp, lines=True)
        if labels and num_pid_m * num_pid_n <= 4 * MAX_LABELLED_CELLS and cp >= 12:
            stamp_cell_labels(px, schedule.launch_grid(problem).astype(str), top, left, cp, cp)
        R.paste(px, y0, x0)

        R.text("A", x0 - 5, y0 + (top + num_pid_m / 2) * cp, 10, ha="right")
        R.text("B", x0 + left * cp - 5, y0 + k_cols / 2 * cp, 10, ha="right")
        R.text("C", x0 + (left + num_pid_n / 2) * cp, y0 + H * cp + 2, 10, va="top")
        if note and in_corner:
            R.text(note, x0 + 2, y0 + 2, 9, color="black", ha="left", va="top")
        elif note:
            R.text(note, x0, note_y, 9, color="black", ha="left", va="top")
        if self.title:
            R.text(self.title, R.width / 2, 4, 11, color="black", va="top")
        R.show()
        return self.fig


def draw_schedule(schedule: Schedule, wave: int = 0, profile=None, l2_bytes=None, k_cols: int = 9,
                  color_by: str = "wave", title: str | None = None, note: str = "", figsize=(6.4, 5.6),
                  dpi: float = 100) -> Figure:
    """A, B and C with the blocks that ``wave`` of ``schedule`` reads.

    C's tiles are numbered in launch order (small grids) and coloured by ``color_by``
    (wave / group / program); later waves grey, earlier ones faded.  The A row-blocks and
    B column-blocks the wave reads are yellow, or green -> red by L2 miss fraction when
    ``profile`` (:func:`gemm_kernels.models.l2model.reuse_profile`) is given."""
    view = ScheduleView(figsize=figsize, dpi=dpi, title=title)
    return view.update(schedule, wave, profile, l2_bytes, k_cols, color_by, note)


def draw_tile_order(schedule: Schedule, color_by: str = "wave", current_wave: int | None = None,
                    show_groups: bool = False, labels: bool | None = None, title: str | None = None,
                    problem: int = 0, ax=None, figsize=(5, 5), dpi: float = 100) -> Figure:
    """C's tile grid numbered in launch order, coloured by wave, group or program.

    ``show_groups`` frames each GROUP_SIZE_M group of tile rows and notes
    ``num_pid_in_group``.  ``ax``: draw into an existing Axes (returns its figure)."""
    if ax is None:
        fig = Figure(figsize=figsize, dpi=dpi)
        ax = fig.add_subplot()
    fig = ax.figure
    num_pid_m, num_pid_n = schedule.tile_grid(problem)
    rgba = tile_colors(schedule, color_by, current_wave, problem)
    ax.imshow(rgba, interpolation="nearest", extent=(0, num_pid_n, num_pid_m, 0))
    _bare(ax)
    if labels is None:
        labels = num_pid_m * num_pid_n <= MAX_LABELLED_CELLS
    if labels:
        _cell_grid(ax, num_pid_m, num_pid_n)
        order = schedule.launch_grid(problem)
        for i in range(num_pid_m):
            for j in range(num_pid_n):
                ax.text(j + 0.5, i + 0.5, str(order[i, j]), ha="center", va="center", fontsize=8,
                        color=_text_color(rgba[i, j]))
    if show_groups and schedule.tile_order == "grouped":
        G = schedule.group_size_m
        for g, top in enumerate(range(0, num_pid_m, G)):
            rows = min(G, num_pid_m - top)
            ax.add_patch(Rectangle((0.03, top + 0.03), num_pid_n - 0.06, rows - 0.06, fill=False, ec="#c0392b", lw=2.2))
            ax.text(num_pid_n + 0.2, top + rows / 2, f"group {g}\n{rows} x {num_pid_n} = {rows * num_pid_n}\nprograms",
                    va="center", ha="left", fontsize=8, color="#c0392b")
    ax.set_xlim(0, num_pid_n + (3.2 if show_groups else 0))
    ax.set_ylim(num_pid_m, 0)
    ax.set_aspect("equal")
    if title:
        ax.set_title(title, fontsize=10)
    return fig


def draw_grouped_ordering(num_pid_m: int = 9, num_pid_n: int = 9, group_size_m: int = 3, programs_in_flight: int = 9,
                          dpi: float = 100) -> Figure:
    """Grouped launch order on a ``num_pid_m x num_pid_n`` tile grid: pids numbered, each group of
    ``group_size_m`` tile rows framed (it holds ``num_pid_in_group = group_size_m * num_pid_n``
    programs, walked column by column), colour = wave of ``programs_in_flight``."""
    s = _unit_schedule(num_pid_m, num_pid_n, "grouped", group_size_m, programs_in_flight)
    fig = Figure(figsize=(6.6, 5.4), dpi=dpi)
    ax = fig.add_subplot()
    draw_tile_order(s, "wave", show_groups=True, ax=ax)
    ax.set_title(f"grouped order, GROUP_SIZE_M = {group_size_m}: num_pid_in_group = {group_size_m} x {num_pid_n}"
                 f" = {group_size_m * num_pid_n}\n(number = pid, colour = wave of {programs_in_flight} programs)",
                 fontsize=10)
    return fig


def _unit_schedule(num_pid_m, num_pid_n, order, group_size_m, programs_in_flight):
    from ..models.schedule import tile_schedule
    return tile_schedule(num_pid_m, num_pid_n, 1, 1, order, group_size_m, programs_in_flight=programs_in_flight)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def draw_side_by_side(schedules: dict, wave: int = 0, profiles: dict | None = None, l2_bytes=None, k_cols: int = 9,
                      notes: dict | None = None, color_by: str = "wave", panel_size=(5.5, 5.4), dpi: float = 100) -> Figure:
    """Several schedules' :func:`draw_schedule` pictures in one row.

    ``schedules``: ``{title: Schedule}``; ``profiles`` / ``notes``: dicts with the same keys
    (an L2 :class:`~gemm_kernels.models.l2model.ReuseProfile` to colour reads by hit/miss; a text
    for the top-left corner)."""
    fig = Figure(figsize=(panel_size[0] * len(schedules), panel_size[1]), dpi=dpi)
    subs = fig.subfigures(1, len(schedules), wspace=0.02)
    subs = np.atleast_1d(subs)
    for panel, (title, s) in zip(subs, schedules.items()):
        ScheduleView(fig=panel, title=title).update(s, wave, (profiles or {}).get(title), l2_bytes, k_cols,
                                                    color_by, (notes or {}).get(title, ""))
    return fig


def draw_order_comparison(num_pid_m: int = 9, num_pid_n: int = 9, k_blocks: int = 9, group_size_m: int = 3,
                          programs_in_flight: int = 9, dpi: float = 100) -> Figure:
    """Row-major vs grouped order side by side: the first wave of ``programs_in_flight``
    programs, the A row-blocks and B column-blocks it reads, and the block reads that
    costs with a cold L2 (the seed notes' 9x9 example by default: 90 vs 54, 9 writes)."""
    from ..models.l2model import reuse_profile

    schedules, notes = {}, {}
    for order in ("row_major", "grouped"):
        s = _unit_schedule(num_pid_m, num_pid_n, order, group_size_m, programs_in_flight)
        first = reuse_profile(s, 1, K=k_blocks).traffic(None).upto(0)
        rows, cols = s.wave_footprint(0)
        name = "row-major order" if order == "row_major" else f"grouped order (GROUP_SIZE_M={group_size_m})"
        title = f"{name}: first {programs_in_flight} programs"
        schedules[title] = s
        notes[title] = (f"reads {_plural(len(rows), 'row-block')} of A\n+ {_plural(len(cols), 'column-block')} of B\n"
                        f"x {k_blocks} K blocks each\n= {first['misses']} block reads\n{first['c_writes']} block writes")
    return draw_side_by_side(schedules, 0, k_cols=k_blocks, notes=notes, dpi=dpi)


def draw_schedule_waves(schedule: Schedule, color_by: str = "wave", title: str | None = None,
                        figsize=(5, 5), dpi: float = 100) -> Figure:
    """The whole C grid coloured by wave (or program), no numbers on big grids: how
    a large problem's tiles are swept."""
    return draw_tile_order(schedule, color_by, title=title or schedule.describe().split(":")[0],
                           figsize=figsize, dpi=dpi)


def draw_l2_curve(schedules: dict, block_k: int, K: int, l2_sizes=None, element_bytes: int = 2,
                  mark_bytes: float | None = None, dpi: float = 100) -> Figure:
    """DRAM bytes read (A + B) against L2 capacity, one line per schedule.

    ``schedules``: ``{label: Schedule}``.  ``l2_sizes``: capacities in bytes (default 1..256
    MiB).  ``mark_bytes``: a vertical line (e.g. :data:`~gemm_kernels.models.l2model.H100_L2_BYTES`)."""
    from ..models.l2model import reuse_profile

    sizes = np.asarray(l2_sizes if l2_sizes is not None else np.geomspace(2**20, 2**28, 33))
    fig = Figure(figsize=(6.4, 4), dpi=dpi)
    ax = fig.add_subplot()
    for label, s in schedules.items():
        profile = reuse_profile(s, block_k, K, element_bytes)
        read = [profile.traffic(float(c)).dram_read_bytes.sum() / 2**20 for c in sizes]
        ax.plot(sizes / 2**20, read, marker=".", label=label)
    compulsory = reuse_profile(next(iter(schedules.values())), block_k, K, element_bytes).traffic(None)
    ax.axhline(compulsory.dram_read_bytes.sum() / 2**20, color="grey", ls=":", label="each byte once")
    if mark_bytes:
        ax.axvline(mark_bytes / 2**20, color="black", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("L2 capacity (MiB)")
    ax.set_ylabel("A + B read from DRAM (MiB)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


# =============================================================================== one block
def draw_one_block_computation(k_blocks: int = 9, pid_m: int = 3, pid_n: int = 5, num_pid_m: int = 9,
                               num_pid_n: int = 9, dpi: float = 100) -> Figure:
    """One program's work: row-block ``pid_m`` of A (K blocks, numbered 0..k_blocks-1) times
    column-block ``pid_n`` of B, the k-th pair multiplied and added into the accumulator
    that becomes C tile ``(pid_m, pid_n)``."""
    if not (0 <= pid_m < num_pid_m and 0 <= pid_n < num_pid_n):
        raise ValueError(f"tile ({pid_m}, {pid_n}) is outside the {num_pid_m}x{num_pid_n} tile grid")
    fig = Figure(figsize=(7.6, 6.2), dpi=dpi)
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.8))
    _bare(ax)
    gap = 1.0
    ramp = colormaps["viridis"](np.linspace(0.15, 0.95, k_blocks))
    # A on the left (x in [0, k_blocks)), B on top (y in [0, k_blocks)), C bottom-right
    ax0_x, ax0_y = k_blocks + gap, k_blocks + gap
    a = np.tile(_UNTOUCHED, (num_pid_m, k_blocks, 1))
    a[pid_m] = ramp
    b = np.tile(_UNTOUCHED, (k_blocks, num_pid_n, 1))
    b[:, pid_n] = ramp
    c = np.tile(_UNTOUCHED, (num_pid_m, num_pid_n, 1))
    c[pid_m, pid_n] = _READ
    ax.imshow(a, extent=(0, k_blocks, ax0_y + num_pid_m, ax0_y), interpolation="nearest")
    ax.imshow(b, extent=(ax0_x, ax0_x + num_pid_n, k_blocks, 0), interpolation="nearest")
    ax.imshow(c, extent=(ax0_x, ax0_x + num_pid_n, ax0_y + num_pid_m, ax0_y), interpolation="nearest")
    for rows, cols, x0, y0 in ((num_pid_m, k_blocks, 0, ax0_y), (k_blocks, num_pid_n, ax0_x, 0),
                               (num_pid_m, num_pid_n, ax0_x, ax0_y)):
        _cell_grid(ax, rows, cols, x0, y0, color="#999999", lw=0.4)
        ax.add_patch(Rectangle((x0, y0), cols, rows, fill=False, ec="black", lw=1))
    for k in range(k_blocks):
        color = _text_color(ramp[k])
        ax.text(k + 0.5, ax0_y + pid_m + 0.5, str(k), ha="center", va="center", fontsize=8, color=color)
        ax.text(ax0_x + pid_n + 0.5, k + 0.5, str(k), ha="center", va="center", fontsize=8, color=color)
    ax.text(ax0_x + pid_n + 0.5, ax0_y + pid_m + 0.5, "acc", ha="center", va="center", fontsize=8)
    ax.text(k_blocks / 2, ax0_y - 0.4, f"A: row-block {pid_m}", ha="center", va="bottom", fontsize=9)
    ax.text(ax0_x - 0.4, k_blocks / 2, f"B: column-block {pid_n}", ha="right", va="center", fontsize=9, rotation=90)
    ax.set_xlim(-0.5, ax0_x + num_pid_n + 0.5)
    ax.set_ylim(ax0_y + num_pid_m + 0.5, -0.5)
    ax.set_aspect("equal")
    fig.suptitle(f"one program, one C tile ({pid_m}, {pid_n}): for k in 0..{k_blocks - 1}:  "
                 f"acc += A[{pid_m}, k] @ B[k, {pid_n}]", fontsize=10)
    fig.text(0.5, 0.04, f"same number = loaded and multiplied in the same step; after {k_blocks} steps acc is "
             f"stored to C", ha="center", fontsize=9)
    return fig


# =============================================================================== pointers
def block_pointers(row_start: int, col_start: int, block_rows: int, block_cols: int,
                   stride0: int, stride1: int, rows: int, cols: int, base: int = 0):
    """The offsets and mask of a ``block_rows x block_cols`` load, as a Triton kernel builds them.

    ``offs = base + (row_start + arange(block_rows))[:, None] * stride0
                  + (col_start + arange(block_cols))[None, :] * stride1``
    ``mask = (i < rows) & (j < cols)`` for the same ``i``/``j``.  Returns ``(offs, mask)``,
    both ``[block_rows, block_cols]`` numpy arrays."""
    i = row_start + np.arange(block_rows)
    j = col_start + np.arange(block_cols)
    offs = base + i[:, None] * stride0 + j[None, :] * stride1
    mask = (i[:, None] < rows) & (j[None, :] < cols)
    return offs, mask


def storage_size(rows: int, cols: int, stride0: int, stride1: int, base: int = 0) -> int:
    """Elements of memory the ``rows x cols`` tensor spans: its largest address + 1."""
    return base + (rows - 1) * stride0 + (cols - 1) * stride1 + 1


class PointerView:
    """Left: the logical matrix, each element labelled with its address, the block being
    loaded framed; block elements past the edge are grey (masked) or red (loaded without
    a mask: they read whatever lies at that address).  Right: the same addresses in
    memory, ``row_width`` per line (faded: addresses no element of the tensor owns).
    ``update(...)`` repaints in place."""

    def __init__(self, fig=None, figsize=(9, 4.4), dpi: float = 72):
        self.fig = fig if fig is not None else Figure(figsize=figsize, dpi=dpi)
        self.raster = RasterFigure(self.fig)

    def update(self, rows: int, cols: int, stride0: int, stride1: int, block_rows: int, block_cols: int,
               row_start: int = 0, col_start: int = 0, base: int = 0, use_mask: bool = True,
               row_width: int | None = None, name: str = "X") -> Figure:
        R = self.raster
        R.clear()
        offs, mask = block_pointers(row_start, col_start, block_rows, block_cols, stride0, stride1, rows, cols, base)
        # pad the grid to whole blocks (and to this block, wherever it is)
        pad_r = max(-(-rows // block_rows) * block_rows, row_start + block_rows)
        pad_c = max(-(-cols // block_cols) * block_cols, col_start + block_cols)
        size = storage_size(rows, cols, stride0, stride1, base)
        mem_len = max(size, storage_size(pad_r, pad_c, stride0, stride1, base))
        width = row_width or int(min(32, max(8, 2 ** np.ceil(np.log2(max(cols, 1))))))
        mem_rows = -(-mem_len // width)
        head = 2 * (R.pt(10) + 6) + 8
        half = R.width // 2

        # logical matrix (and the padding past its edge)
        img = np.ones((pad_r, pad_c, 4))
        img[:rows, :cols] = _UNTOUCHED
        bi, bj = slice(row_start, row_start + block_rows), slice(col_start, col_start + block_cols)
        img[bi, bj] = np.where(mask[..., None], _IN_BLOCK, _MASKED if use_mask else _STRAY)
        y0, x0, cm, _ = R.fit(pad_r, pad_c, (6, head, half - 12, R.height - head - 6))
        px = cells_to_pixels(img, cm, lines=True)
        ii, jj = np.meshgrid(np.arange(pad_r), np.arange(pad_c), indexing="ij")
        inside = (ii < rows) & (jj < cols)
        inside[bi, bj] = True
        stamp_cell_labels(px, np.where(inside, (base + ii * stride0 + jj * stride1).astype(str), ""), 0, 0, cm, cm)
        outline(px, 0, 0, rows * cm, cols * cm, "#555555", 1)
        outline(px, row_start * cm, col_start * cm, block_rows * cm, block_cols * cm, "black", max(2, cm // 8))
        R.paste(px, y0, x0)

        # memory
        mem = np.ones((mem_rows * width, 4))
        owned = np.zeros(len(mem), dtype=bool)  # addresses that hold an element of the tensor
        owned[(base + np.arange(rows)[:, None] * stride0 + np.arange(cols)[None, :] * stride1).ravel()] = True
        mem[:mem_len] = fade(_UNTOUCHED[None], 0.6)
        mem[owned] = _UNTOUCHED
        mem[offs[mask]] = _IN_BLOCK
        if not use_mask:
            mem[offs[~mask]] = _STRAY
        y0, x0, cs, _ = R.fit(mem_rows, width, (half + 6, head, half - 12, R.height - head - 6))
        px = cells_to_pixels(mem.reshape(mem_rows, width, 4), cs, lines=True)
        numbers = np.arange(mem_rows * width).reshape(mem_rows, width)
        stamp_cell_labels(px, np.where(numbers < mem_len, numbers.astype(str), ""), 0, 0, cs, cs)
        R.paste(px, y0, x0)

        n_masked = int((~mask).sum())
        what = (f"{n_masked} of {mask.size} lanes masked off, not loaded" if use_mask and n_masked else
                f"no mask: {n_masked} lanes read addresses that are not theirs" if n_masked else
                "every lane in bounds")
        R.text(f"address = base + i*{stride0} + j*{stride1}" + (f"    mask = (i < {rows}) & (j < {cols})"
               if use_mask else "    (no mask)"), R.width / 2, 4, 10, color="black", va="top")
        sub_y = 4 + R.pt(10) + 8
        R.text(f"{name}: {rows}x{cols}, strides ({stride0}, {stride1}); block {block_rows}x{block_cols} at "
               f"({row_start}, {col_start})", half / 2, sub_y, 9, color="black", va="top")
        R.text(f"memory, {width} per line ({what})", half * 1.5, sub_y, 9, color="black", va="top")
        R.show()
        return self.fig


def draw_pointer_block(rows: int, cols: int, stride0: int | None = None, stride1: int | None = None,
                       block_rows: int = 4, block_cols: int = 4, row_start: int = 0, col_start: int = 0,
                       base: int = 0, use_mask: bool = True, name: str = "X", dpi: float = 100) -> Figure:
    """Addresses ``base + i*stride0 + j*stride1`` of one ``block_rows x block_cols`` load from a
    ``rows x cols`` matrix, in the matrix and in memory; lanes past the edge masked (or, with
    ``use_mask=False``, the stray addresses they would read).  Strides default to row-major
    (``cols, 1``)."""
    stride0 = cols if stride0 is None else stride0
    stride1 = 1 if stride1 is None else stride1
    return PointerView(figsize=(9, 4.4), dpi=dpi).update(rows, cols, stride0, stride1, block_rows, block_cols,
                                                         row_start, col_start, base, use_mask, name=name)


def draw_pointer_layouts(rows: int = 6, cols: int = 7, block: int = 4, row_start: int = 4, col_start: int = 4,
                         dpi: float = 100) -> Figure:
    """The same ``block x block`` load at a ragged corner of a ``rows x cols`` matrix stored
    row-major (strides ``(cols, 1)``) and as the transpose of a row-major ``cols x rows``
    matrix (strides ``(1, rows)``): same elements, different addresses, same mask."""
    fig = Figure(figsize=(9, 8.8), dpi=dpi)
    top, bottom = fig.subfigures(2, 1, hspace=0.04)
    PointerView(fig=top).update(rows, cols, cols, 1, block, block, row_start, col_start, name="row-major A")
    PointerView(fig=bottom).update(rows, cols, 1, rows, block, block, row_start, col_start, name="A = B.T (B row-major)")
    return fig


# =============================================================================== grouped GEMM
class GroupedView:
    """A grouped (multi-problem) GEMM schedule.  Top: each problem's C tiles side by side,
    coloured by the program that computes them (numbered by program where cells are big
    enough), tiles of later steps grey.  Bottom: step x program table, each cell coloured
    by the problem whose tile that program computes at that step (white: finished)."""

    def __init__(self, fig=None, figsize=(9, 6), dpi: float = 72, title: bool = True):
        self.fig = fig if fig is not None else Figure(figsize=figsize, dpi=dpi)
        self.raster = RasterFigure(self.fig)
        self.with_title = title

    def update(self, schedule: Schedule, wave: int | None = None, labels: bool = True) -> Figure:
        """Repaint; ``wave``: highlight that step (later tiles grey), ``None``: show all."""
        R = self.raster
        R.clear()
        line = R.pt(9) + 6
        y = 4
        if self.with_title:
            R.text(f"{schedule.num_problems} problems, {schedule.num_tiles} tiles of {schedule.block_m}x"
                   f"{schedule.block_n}, {schedule.programs_in_flight} programs, {schedule.num_waves} steps"
                   + ("" if wave is None else f"  (step {wave})"), R.width / 2, y, 10, color="black", va="top")
            y += R.pt(10) + 8

        # problems side by side, a band of 2 cells above them for their names
        grids = [schedule.tile_grid(g) for g in range(schedule.num_problems)]
        band = 2
        gap = max(1, round(0.04 * sum(max(c, 1) for _, c in grids)))
        offsets = np.concatenate([[0], np.cumsum([max(c, 1) + gap for _, c in grids])])[:-1]
        cells = np.ones((max(max(r for r, _ in grids), 1) + band, int(offsets[-1]) + max(grids[-1][1], 1), 4))
        for g, ((r, c), x0) in enumerate(zip(grids, offsets)):
            if r and c:
                cells[band:band + r, x0:x0 + c] = tile_colors(schedule, "program", wave, g)
        top_h = int(0.5 * (R.height - y)) - line
        py, px0, cp, _ = R.fit(*cells.shape[:2], (8, y, R.width - 16, top_h), max_cell=40)
        px = cells_to_pixels(cells, cp, lines=True)
        for g, ((r, c), x0) in enumerate(zip(grids, offsets)):
            color = _PALETTE[g % len(_PALETTE)]
            outline(px, band * cp, x0 * cp, max(r, 1) * cp, max(c, 1) * cp, color, max(2, cp // 6))
            if text_width(f"P{g}", R.pt(8)) <= (max(c, 1) + gap) * cp:
                stamp_text(px, f"P{g}", (x0 + max(c, 1) / 2) * cp, band * cp - 2, R.pt(8), color, va="bottom")
            if labels and r and c and cp >= 12:
                stamp_cell_labels(px, schedule.program_grid(g).astype(str), band, x0, cp, cp)
        R.paste(px, py, px0)
        y = py + cells.shape[0] * cp + 4
        shapes = "   ".join(f"P{g}: {M}x{N}" + ("" if K is None else f"x{K}")
                           for g, (M, N, K) in enumerate(schedule.problem_shapes[:8]))
        R.text(shapes + ("   ..." if schedule.num_problems > 8 else ""), R.width / 2, y, 8, color="black", va="top")
        y += line + 4

        # step x program table
        W, P = schedule.num_waves, schedule.programs_in_flight
        table = np.ones((W, P, 4))
        table[schedule.wave, schedule.program] = cycle_colors(schedule.problem)
        if wave is not None:
            table[:wave] = fade(table[:wave], 0.5)
            table[wave + 1:] = fade(table[wave + 1:], 0.8)
        margin = text_width(f"step {W - 1}", R.pt(8)) + 10
        y += line
        ty, tx, ch, cw = R.fit(W, P, (margin, y, R.width - margin - 8, R.height - y - 6), square=False, max_cell=40)
        px = cells_to_pixels(table, ch, cw, lines=True)
        if wave is not None:
            outline(px, wave * ch, 0, ch, P * cw, "black", 2)
        R.paste(px, ty, tx)
        R.text("program 0", tx, ty - 2, 8, color="black", ha="left", va="bottom")
        R.text(f"program {P - 1}", tx + P * cw, ty - 2, 8, color="black", ha="right", va="bottom")
        R.text("step 0", tx - 4, ty + ch / 2, 8, color="black", ha="right")
        if W > 1:
            R.text(f"step {W - 1}", tx - 4, ty + (W - 0.5) * ch, 8, color="black", ha="right")
        R.show()
        return self.fig


def draw_grouped_gemm(schedule: Schedule, wave: int | None = None, dpi: float = 100) -> Figure:
    """The multi-problem layout of a grouped GEMM (:func:`schedule.grouped_gemm_schedule`):
    which program computes which tile of which problem, and at which step."""
    return GroupedView(figsize=(9, 6), dpi=dpi).update(schedule, wave)


# =============================================================================== persistent programs over time
def draw_program_timeline(schedule: Schedule, labels: bool | None = None, title: str | None = None,
                          figsize=None, dpi: float = 100) -> Figure:
    """Who computes what, when: one row per program (or, for one program per tile, per slot of
    ``programs_in_flight`` resident programs), one column per wave/step; each cell is the tile it
    computes (its global index), coloured by problem, white where the program has nothing left
    to do.  The white cells of the last column are the *tail*: programs idle while the last
    tiles finish."""
    P, W = schedule.programs_in_flight, schedule.num_waves
    if schedule.kind in ("row_major", "grouped"):
        slot = np.arange(schedule.num_tiles) % P
    else:
        slot = schedule.program
    cells = np.full((P, W), -1, dtype=np.int64)
    cells[slot, schedule.wave] = schedule.table[:, 0]
    problem = np.full((P, W), -1, dtype=np.int64)
    problem[slot, schedule.wave] = schedule.problem
    rgba = cycle_colors(problem)
    rgba[cells < 0] = (1, 1, 1, 1)
    if figsize is None:
        figsize = (min(2.2 + 0.45 * W, 10), min(1.4 + 0.32 * P, 6))
    fig = Figure(figsize=figsize, dpi=dpi)
    ax = fig.add_subplot()
    ax.imshow(rgba, interpolation="nearest", extent=(0, W, P, 0), aspect="auto")
    if labels is None:
        labels = P * W <= MAX_LABELLED_CELLS
    if labels:
        _cell_grid(ax, P, W, color="#999999")
        for p in range(P):
            for w in range(W):
                text = str(cells[p, w]) if cells[p, w] >= 0 else "idle"
                ax.text(w + 0.5, p + 0.5, text, ha="center", va="center", fontsize=8,
                        color=_text_color(rgba[p, w]) if cells[p, w] >= 0 else "#999999")
    ax.add_patch(Rectangle((0, 0), W, P, fill=False, ec="#555555", lw=0.8))
    who = "program" if schedule.kind in ("persistent", "multi_problem") else "resident slot"
    step = "step" if schedule.kind in ("persistent", "multi_problem") else "wave"
    ticks_w = np.unique(np.linspace(0, W - 1, min(W, 12)).round().astype(int))
    ticks_p = np.unique(np.linspace(0, P - 1, min(P, 16)).round().astype(int))
    ax.set_xticks(ticks_w + 0.5, [str(t) for t in ticks_w], fontsize=8)
    ax.set_yticks(ticks_p + 0.5, [str(t) for t in ticks_p], fontsize=8)
    ax.set_xlabel(f"{step} (time →)", fontsize=9)
    ax.set_ylabel(who, fontsize=9)
    busy = int((schedule.wave == W - 1).sum()) if W else 0
    ax.set_title(title or (f"{schedule.num_tiles} tiles on {P} {who}s: {W} {step}s, "
                           f"last {step} {busy} of {P} busy"), fontsize=10)
    fig.tight_layout()
    return fig


def draw_streamk_segments(segments: np.ndarray, k_tiles: int, title: str | None = None, figsize=None,
                          dpi: float = 100) -> Figure:
    """Stream-K's schedule as a timeline: one row per program, one bar per segment it runs, as
    long as its K iterations (``tiles.streamk_segments`` rows ``(program, tile, k_first, k_end)``),
    coloured by tile.  A hatched bar is a partial sum left in the workspace for the program that
    finishes the tile; an outlined bar ends with the tile's epilogue (``k_first == 0``)."""
    rows = segments[segments[:, 0] >= 0]
    P = int(rows[:, 0].max()) + 1 if len(rows) else 1
    if figsize is None:
        figsize = (7.5, min(1.6 + 0.3 * P, 6))
    fig = Figure(figsize=figsize, dpi=dpi)
    ax = fig.add_subplot()
    clock = np.zeros(P, dtype=np.int64)  # K iterations each program has run so far (its time)
    colors = cycle_colors(rows[:, 1])
    for (program, tile, k_first, k_end), color in zip(rows, colors):
        length = k_end - k_first
        partial = k_first > 0
        ax.add_patch(Rectangle((clock[program], program + 0.1), length, 0.8, facecolor=color,
                               hatch="///" if partial else None, edgecolor="#333333", lw=0.4 if partial else 1.2))
        if length >= 0.06 * max(1, clock.max() + length):
            ax.text(clock[program] + length / 2, program + 0.5, str(tile), ha="center", va="center", fontsize=7,
                    color=_text_color(color))
        clock[program] += length
    ax.set_xlim(0, max(1, clock.max()) * 1.02)
    ax.set_ylim(P, 0)
    ax.set_xlabel("K iterations run (time →)", fontsize=9)
    ax.set_ylabel("program", fontsize=9)
    ticks_p = np.unique(np.linspace(0, P - 1, min(P, 16)).round().astype(int))
    ax.set_yticks(ticks_p + 0.5, [str(t) for t in ticks_p], fontsize=8)
    ax.axvline(clock.max(), color="#d62728", lw=0.8, ls=":")
    ax.set_title(title or (f"{len(np.unique(rows[:, 1]))} tiles of {k_tiles} K iterations on {P} programs: "
                           f"busiest {clock.max()}, idlest {clock.min()} iterations"), fontsize=10)
    fig.tight_layout()
    return fig


# =============================================================================== stray loads and stores
_WRONG = np.array(to_rgba("#d62728"))
_RIGHT = np.array(to_rgba("#9bd39b"))
_CLOBBERED = np.array(to_rgba("#ff7f0e"))
_SENTINEL = np.array(to_rgba("#eeeeee"))


def damage_colors(damage) -> np.ndarray:
    """RGBA of one C buffer (a :class:`gemm_kernels.lab.teaching.ProblemDamage`): right / wrong inside
    C, overwritten / untouched sentinels outside it."""
    M, N, _ = damage.shape
    rgba = np.tile(_SENTINEL, damage.clobbered.shape + (1,))
    rgba[damage.clobbered] = _CLOBBERED
    inside = np.where(damage.wrong[..., None], _WRONG, _RIGHT)
    rgba[:M, :N] = inside
    return rgba


def draw_sentinel_damage(report, title: str | None = None, panel_size: float = 2.6, dpi: float = 100) -> Figure:
    """One panel per problem of a :func:`gemm_kernels.lab.teaching.damage_report`: C's whole buffer,
    C itself framed; green = right, red = wrong, orange = a sentinel outside C that a stray store
    overwrote, grey = sentinel untouched."""
    n = len(report)
    fig = Figure(figsize=(panel_size * n + 0.4, panel_size + 1.0), dpi=dpi)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, dmg in zip(axes, report):
        M, N, K = dmg.shape
        rows, cols = dmg.clobbered.shape
        ax.imshow(damage_colors(dmg), interpolation="nearest", extent=(0, cols, rows, 0))
        ax.add_patch(Rectangle((0, 0), N, M, fill=False, ec="black", lw=1.5))
        _bare(ax)
        ax.add_patch(Rectangle((0, 0), cols, rows, fill=False, ec="#999999", lw=0.6))
        verdict = "ok" if dmg.ok else f"{int(dmg.wrong.sum())} wrong, {int(dmg.clobbered.sum())} clobbered"
        ax.set_title(f"P{dmg.problem}: {M}x{N}x{K}\n{verdict}", fontsize=9)
    handles = [Rectangle((0, 0), 1, 1, fc=c, ec="#777777") for c in (_RIGHT, _WRONG, _CLOBBERED, _SENTINEL)]
    fig.legend(handles, ["C right", "C wrong", "outside C, overwritten", "outside C, sentinel intact"],
               loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title or "C's buffers (C framed in black, sentinel padding around it)", fontsize=10)
    fig.subplots_adjust(left=0.02, right=0.98, top=0.78, bottom=0.12, wspace=0.15)
    return fig


# =============================================================================== MoE load
def expert_load(counts, N: int, block_m: int, block_n: int, num_programs: int, trace=None) -> dict:
    """Tiles per expert and per program of ``grouped_mm`` for rows-per-expert ``counts``.

    ``trace``: the ``[tiles, 4]`` (program, expert, pid_m, pid_n) table of
    :func:`gemm_kernels.kernels.moe.trace_moe_schedule`; without it, the numpy mirror
    (``tiles.multi_problem_schedule``, which the tests prove equal).  Returns ``{"rows",
    "tiles_per_expert", "tiles" ([programs, experts]: tiles of each expert each program computed)}``."""
    from ..models.tiles import multi_problem_schedule

    counts = np.asarray(counts, dtype=np.int64)
    E = len(counts)
    if trace is None:
        table = multi_problem_schedule([(int(c), N) for c in counts], block_m, block_n, num_programs)
        program, expert = table[:, 1], table[:, 3]
    else:
        trace = np.asarray(trace)
        program, expert = trace[:, 0], trace[:, 1]
    per = np.zeros((num_programs, E), dtype=np.int64)
    np.add.at(per, (program, expert), 1)
    per_expert = (-(-counts // block_m)) * (-(-N // block_n))
    return {"rows": counts, "tiles_per_expert": per_expert, "tiles": per}


def draw_expert_load(counts, N: int, block_m: int, block_n: int, num_programs: int, trace=None,
                     title: str | None = None, dpi: float = 100) -> Figure:
    """Load imbalance of a MoE grouped GEMM.  Left: rows routed to each expert, labelled with its
    tiles (``cdiv(rows, BLOCK_M) * cdiv(N, BLOCK_N)``) when there are at most 32 experts (the title
    gives the total and the largest otherwise).  Right: tiles each program computes,
    stacked by expert (same colours).  See :func:`expert_load` for ``trace``."""
    load = expert_load(counts, N, block_m, block_n, num_programs, trace)
    E = len(load["rows"])
    colors = cycle_colors(np.arange(E), _PALETTE20 if E > 10 else _PALETTE)
    fig = Figure(figsize=(11, 3.6), dpi=dpi)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    x = np.arange(E)
    bars = left.bar(x, load["rows"], color=colors, edgecolor="#555555", lw=0.5)
    if E <= 32:
        for bar, t in zip(bars, load["tiles_per_expert"]):
            left.annotate(f"{t}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                          va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
    if E <= 32:
        left.set_xticks(x)
    left.set_xlabel("expert", fontsize=9)
    left.set_ylabel("rows (routed tokens)", fontsize=9)
    tiles_note = (f"number on top: tiles of {block_m}x{block_n}" if E <= 32 else
                  f"{int(np.sum(load['tiles_per_expert']))} tiles of {block_m}x{block_n} in all, "
                  f"at most {int(np.max(load['tiles_per_expert'], initial=0))} per expert")
    left.set_title(f"rows per expert ({tiles_note})", fontsize=9)
    bottom = np.zeros(num_programs)
    p = np.arange(num_programs)
    for e in range(E):
        right.bar(p, load["tiles"][:, e], bottom=bottom, color=colors[e], width=0.85, lw=0)
        bottom += load["tiles"][:, e]
    mean = bottom.mean() if num_programs else 0
    right.axhline(mean, color="black", lw=0.8, ls="--")
    if num_programs <= 32:
        right.set_xticks(p)
    right.set_xlabel("program", fontsize=9)
    right.set_ylabel("tiles computed", fontsize=9)
    right.set_title(f"tiles per program, by expert: {int(bottom.min())}..{int(bottom.max())} "
                    f"(mean {mean:.1f}, dashed)", fontsize=9)
    for ax in (left, right):
        ax.tick_params(labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
