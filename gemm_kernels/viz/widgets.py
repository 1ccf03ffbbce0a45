"""Explorers: thin ipywidgets views over the schedule model, the L2 model and the drawings.

One line each in a notebook::

    from gemm_kernels import schedule_explorer, pointer_explorer, grouped_schedule_explorer
    schedule_explorer()            # tile order, waves, A/B reads, L2 hits and misses
    pointer_explorer()             # base + i*stride0 + j*stride1 of one block load, with masks
    grouped_schedule_explorer()    # grouped GEMM: problems laid end to end, NUM_SM programs

Each explorer is an ``ipywidgets.VBox`` whose controls are attributes
(``ex.M.value = 4096``, ``ex.order.value = "row_major"``, ``ex.wave.value = 3``); the
picture is an ``ipywidgets.Image`` (``ex.image``, PNG bytes), the numbers an
``ipywidgets.HTML`` (``ex.counters``), and a bad combination of controls is explained in
``ex.message`` instead of raising.  The model results behind the picture are attributes
too (``ex.schedule``, ``ex.traffic``), so tests drive an explorer with no browser.

Arguments are checked when an explorer is built: a value outside a control's range or choices
is a ValueError naming the argument and what it may be (never silently clamped).

``python -m gemm_kernels.viz.widgets --time`` prints the median redraw time of each explorer
at 64x64 tiles.  A redraw stays interactive (well under 100 ms on one core) because the only
costly part, the L2 reuse model, grows with waves x blocks: past :data:`MODEL_BUDGET` the
explorer draws the schedule, says how large the model would be, and computes it only when
asked (``ex.compute_l2`` button, or ``ex.compute_l2_model()``).

With ``GEMM_KERNELS_STATIC_WIDGETS=1`` (set by the book build, ``gemm_kernels.book``) an explorer
that is displayed also leaves a static picture of its state as an ordinary output
(:meth:`_Explorer.static_picture`), so a page read without a running kernel still shows it.
"""

from __future__ import annotations

import base64
import html
import os
import time

import ipywidgets as widgets
import numpy as np

from . import drawings
from .._env import flag
from ..models.l2model import H100_L2_BYTES, H100_NUM_SMS, ReuseProfile, reuse_profile
from ..models.schedule import grouped_gemm_schedule, tile_schedule
from ..models.tiles import cdiv

BLOCK_SIZES = (16, 32, 64, 128, 256)
#: ``=1``: a displayed explorer also shows a static picture first (the book's pages have no kernel)
STATIC_PICTURE_ENV = "GEMM_KERNELS_STATIC_WIDGETS"
#: Explorers refuse launches with more tiles than this (drawing and the model stay interactive).
MAX_TILES = 256 * 256
#: Largest L2 model (waves x A/B blocks) computed on every redraw.  A new model costs about 130 ns
#: per entry on one core (``python -m gemm_kernels.viz.widgets --time``: 4096 waves x 128 blocks
#: redraw in ~70 ms), so this keeps a redraw under 100 ms.
MODEL_BUDGET = 600_000
_MiB = 2**20


def _check_number(name, value, lo, hi, integer=True):
    """An explorer argument: an int (or any real number) in [lo, hi]; TypeError/ValueError naming it."""
    numbers = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, numbers):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _check_choice(name, value, options):
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    if isinstance(value, bool) or not any(type(value) is type(v) and value == v for v in values):
        raise ValueError(f"{name} must be one of {values}, got {value!r}")
    return value


def _check_dpi(dpi):
    _check_number("dpi", dpi, 1, 600, integer=False)


def model_size(schedule) -> int:
    """Work of the L2 reuse model of ``schedule``: waves x (A row-blocks + B column-blocks)."""
    blocks = sum(sum(schedule.tile_grid(g)) for g in range(schedule.num_problems))
    return schedule.num_waves * blocks


class InvalidSetting(ValueError):
    """A combination of controls the explorer explains instead of drawing."""


class _Explorer(widgets.VBox):
    """Shared plumbing: observe controls, redraw into an Image, show errors as text."""

    def __init__(self, controls: list, extra: list | None = None):
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.counters = widgets.HTML()
        self.message = widgets.HTML()
        self.redraw_count = 0
        self.last_redraw_ms = float("nan")
        self.error: str | None = None
        self._quiet = False
        super().__init__([*controls, *(extra or []), self.message, widgets.HBox([self.image, self.counters])])

    def _watch(self, *controls):
        for c in controls:
            c.observe(self._changed, names="value")

    def _changed(self, change=None):
        if not self._quiet:
            self.redraw()

    def redraw(self) -> None:
        """Recompute what changed and redraw the picture; never raises for bad settings."""
        start = time.perf_counter()
        try:
            self._quiet = True
            try:
                self._update()
            finally:
                self._quiet = False
            self.error = None
            self.message.value = ""
            self.image.layout.display = None
        except Exception as exc:  # every failure becomes a readable message, never a traceback
            self.error = str(exc) if isinstance(exc, (InvalidSetting, ValueError)) else f"{type(exc).__name__}: {exc}"
            self.message.value = (f"<div style='color:#b00020;font-weight:bold;padding:4px'>"
                                  f"{html.escape(self.error)}</div>")
            self.image.layout.display = "none"
            self.counters.value = ""
        self.redraw_count += 1
        self.last_redraw_ms = (time.perf_counter() - start) * 1000

    def _update(self) -> None:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        """The widget, as always; under ``GEMM_KERNELS_STATIC_WIDGETS=1`` its static picture is displayed first."""
        if flag(STATIC_PICTURE_ENV, False):
            from IPython.display import display

            display(self.static_picture(), raw=True)
        return super()._repr_mimebundle_(**kwargs)

    def static_picture(self) -> dict:
        """A mime bundle (HTML, PNG, text) of what the explorer shows now: its picture and numbers, or its
        message; with a note that moving the controls needs a running kernel."""
        name = html.escape(type(self).__name__)
        png = None if self.error is not None or not self.image.value else base64.b64encode(self.image.value).decode()
        if png is None:
            body = f"<div class='gk-explorer-message'>{self.message.value or html.escape(str(self.error))}</div>"
        else:
            body = (f"<img src='data:image/png;base64,{png}' alt='{name}: static picture of its first state'>"
                    f"<div class='gk-explorer-counters'>{self.counters.value}</div>")
        note = ("<p class='gk-explorer-note'><i>A static picture of the explorer as the cell above sets it up. "
                "Its controls redraw only with a running Python kernel: open the notebook in Colab, on Binder, "
                "or on your machine.</i></p>")
        box = "display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start"
        bundle = {"text/html": f"<div class='gk-explorer-static' style='{box}'>{body}</div>{note}",
                  "text/plain": f"{name}: static picture of its first state"}
        if png is not None:
            bundle["image/png"] = png
        return bundle


def _int_slider(description, value, lo, hi, step=1, width="320px", arg=None):
    if arg is not None:
        _check_number(arg, value, lo, hi)
    return widgets.IntSlider(value=value, min=lo, max=hi, step=step, description=description, continuous_update=False,
                             style={"description_width": "110px"}, layout=widgets.Layout(width=width))


def _dropdown(description, options, value, arg=None):
    if arg is not None:
        _check_choice(arg, value, options)
    return widgets.Dropdown(options=options, value=value, description=description,
                            style={"description_width": "110px"}, layout=widgets.Layout(width="240px"))


def _fmt(n: float) -> str:
    return f"{int(n):,}"


def _table(rows: list, header: list) -> str:
    th = "".join(f"<th style='padding:2px 8px;text-align:right'>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 8px;text-align:right'>{c}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table style='border-collapse:collapse;font-family:monospace;font-size:12px'><tr>{th}</tr>{body}</table>"


def _counter_rows(traffic, wave: int) -> list:
    this = {k: int(getattr(traffic, k)[wave]) for k in ("a_loads", "b_loads", "a_misses", "b_misses", "c_writes")}
    this["dram_read_bytes"] = float(traffic.dram_read_bytes[wave])
    sofar, total = traffic.upto(wave), traffic.totals()
    rows = []
    for name, d in (("this wave", this), (f"waves 0..{wave}", sofar), ("whole launch", total)):
        loads = d["a_loads"] + d["b_loads"]
        misses = d["a_misses"] + d["b_misses"]
        rows.append([name, _fmt(loads), _fmt(loads - misses), _fmt(misses),
                     f"{_fmt(d['a_misses'])} / {_fmt(d['b_misses'])}", _fmt(d["c_writes"]),
                     f"{d['dram_read_bytes'] / _MiB:,.1f}"])
    return rows


_COUNTER_HEADER = ["", "block loads", "L2 hits", "misses (DRAM)", "misses A / B", "C writes", "DRAM MiB"]


class ScheduleExplorer(_Explorer):
    """Tile schedule explorer: which C tiles run in each wave, which A row-blocks and B
    column-blocks they read, and how many of those block loads hit in L2.

    Controls (attributes, set ``.value``): ``M``, ``N``, ``K``, ``block_m``, ``block_n``,
    ``block_k``, ``order`` (``row_major`` / ``grouped`` / ``persistent``), ``group_size_m``,
    ``programs_in_flight`` (NUM_SM for ``persistent``), ``l2_mib`` (L2 capacity, MiB),
    ``element_bytes``, ``wave`` (the step shown) and ``play`` (steps through the waves).
    Model results: ``schedule`` (:class:`~gemm_kernels.models.schedule.Schedule`), ``profile``
    (:class:`~gemm_kernels.models.l2model.ReuseProfile`), ``traffic``
    (:class:`~gemm_kernels.models.l2model.L2Traffic` at the current L2 size).

    In the picture, tiles of the current wave are in full colour, earlier waves faded,
    later ones grey; A/B blocks the wave reads are green (all K blocks hit in L2) to red
    (all miss).  Defaults: the seed notes' example (9x9 tiles of 128, K = 9 blocks, 9
    programs in flight, GROUP_SIZE_M = 3).
    """

    def __init__(self, M: int = 1152, N: int = 1152, K: int = 1152, block_m: int = 128, block_n: int = 128,
                 block_k: int = 128, order: str = "grouped", group_size_m: int = 3, programs_in_flight: int = 9,
                 l2_mib: float = H100_L2_BYTES / _MiB, element_bytes: int = 2, dpi: float = 72):
        _check_dpi(dpi)
        _check_number("l2_mib", l2_mib, 0, 512, integer=False)
        self.M = _int_slider("M", M, 1, 16384, arg="M")
        self.N = _int_slider("N", N, 1, 16384, arg="N")
        self.K = _int_slider("K", K, 1, 16384, arg="K")
        self.block_m = _dropdown("BLOCK_M", BLOCK_SIZES, block_m, arg="block_m")
        self.block_n = _dropdown("BLOCK_N", BLOCK_SIZES, block_n, arg="block_n")
        self.block_k = _dropdown("BLOCK_K", BLOCK_SIZES, block_k, arg="block_k")
        orders = ["row_major", "grouped", "persistent"]
        self.order = widgets.ToggleButtons(options=orders, value=_check_choice("order", order, orders),
                                           description="order", style={"description_width": "110px",
                                                                       "button_width": "90px"})
        self.group_size_m = _int_slider("GROUP_SIZE_M", group_size_m, 1, 64, arg="group_size_m")
        self.programs_in_flight = _int_slider("in flight", programs_in_flight, 1, 1024, arg="programs_in_flight")
        self.l2_mib = widgets.FloatSlider(value=l2_mib, min=0, max=512, step=0.5, description="L2 (MiB)",
                                          continuous_update=False, style={"description_width": "110px"},
                                          layout=widgets.Layout(width="320px"))
        self.element_bytes = _dropdown("dtype", [("fp16 / bf16", 2), ("fp32", 4), ("fp8", 1)], element_bytes,
                                       arg="element_bytes")
        self.wave = _int_slider("wave", 0, 0, 0)
        self.play = widgets.Play(value=0, min=0, max=0, step=1, interval=500, description="play")
        widgets.link((self.play, "value"), (self.wave, "value"))
        self.h100 = widgets.Button(description="H100: 132 SMs, 50 MiB", layout=widgets.Layout(width="200px"))
        self.h100.on_click(lambda _: self._set_h100())
        self.compute_l2 = widgets.Button(description="compute L2 model", layout=widgets.Layout(width="160px"))
        self.compute_l2.on_click(lambda _: self.compute_l2_model())
        self.view = drawings.ScheduleView(figsize=(6.4, 5.6), dpi=dpi)
        self.schedule = self.profile = self.traffic = None
        self._model_key = None
        self._profile_key = self._forced_key = None
        controls = [
            widgets.HBox([widgets.VBox([self.M, self.N, self.K]),
                          widgets.VBox([self.block_m, self.block_n, self.block_k]),
                          widgets.VBox([self.group_size_m, self.programs_in_flight, self.l2_mib])]),
            widgets.HBox([self.order, self.element_bytes, self.h100, self.compute_l2]),
            widgets.HBox([self.play, self.wave]),
        ]
        super().__init__(controls)
        self._watch(self.M, self.N, self.K, self.block_m, self.block_n, self.block_k, self.order, self.group_size_m,
                    self.programs_in_flight, self.l2_mib, self.element_bytes, self.wave)
        self.redraw()

    def compute_l2_model(self) -> None:
        """Compute the L2 model of the current settings even when it is over :data:`MODEL_BUDGET`, and redraw."""
        self._forced_key = self._model_key
        self.redraw()

    def _set_h100(self):
        self._quiet = True
        self.programs_in_flight.value = H100_NUM_SMS
        self.l2_mib.value = H100_L2_BYTES / _MiB
        self._quiet = False
        self.redraw()

    def _check(self) -> tuple:
        M, N, K = self.M.value, self.N.value, self.K.value
        bm, bn, bk = self.block_m.value, self.block_n.value, self.block_k.value
        problems = []
        if bm > M:
            problems.append(f"BLOCK_M = {bm} is larger than M = {M}: choose BLOCK_M <= M")
        if bn > N:
            problems.append(f"BLOCK_N = {bn} is larger than N = {N}: choose BLOCK_N <= N")
        if bk > K:
            problems.append(f"BLOCK_K = {bk} is larger than K = {K}: choose BLOCK_K <= K")
        num_pid_m, num_pid_n = cdiv(M, bm), cdiv(N, bn)
        if self.order.value != "row_major" and self.group_size_m.value > num_pid_m:
            problems.append(f"GROUP_SIZE_M = {self.group_size_m.value} is larger than the {num_pid_m} tile rows of C "
                            f"(M / BLOCK_M = {M} / {bm}): choose GROUP_SIZE_M <= {num_pid_m}")
        if num_pid_m * num_pid_n > MAX_TILES:
            problems.append(f"{num_pid_m} x {num_pid_n} = {num_pid_m * num_pid_n:,} tiles is more than this explorer "
                            f"draws ({MAX_TILES:,}): use larger blocks or a smaller matrix")
        if problems:
            raise InvalidSetting("; ".join(problems))
        return M, N, K, bm, bn, bk

    def _update(self) -> None:
        M, N, K, bm, bn, bk = self._check()
        order, group, in_flight = self.order.value, self.group_size_m.value, self.programs_in_flight.value
        self.programs_in_flight.description = "NUM_SM" if order == "persistent" else "in flight"
        key = (M, N, K, bm, bn, bk, order, group, in_flight, self.element_bytes.value)
        if key != self._model_key:  # the schedule: cheap (numpy over the tiles)
            self.schedule = tile_schedule(M, N, bm, bn, order, group, programs_in_flight=in_flight, K=K)
            self._model_key = key
            last = self.schedule.num_waves - 1
            self.wave.max = self.play.max = last
            self.wave.value = min(self.wave.value, last)
        size = model_size(self.schedule)
        model_wanted = size <= MODEL_BUDGET or self._forced_key == key
        self.compute_l2.disabled = model_wanted
        if not model_wanted:  # too big to redo on every change: say so, compute on request
            self.profile = self.traffic = None
        elif self._profile_key != key:  # the expensive part; L2 size and wave changes skip it
            self.profile = reuse_profile(self.schedule, bk, element_bytes=self.element_bytes.value)
            self._profile_key = key
        l2 = self.l2_mib.value * _MiB
        if self.profile is not None and (self.traffic is None or self.traffic.profile is not self.profile
                                         or self.traffic.l2_bytes != l2):
            self.traffic = self.profile.traffic(l2)
        w = self.wave.value
        rows = self.schedule.wave_rows(w)
        self.view.update(self.schedule, w, self.profile, l2 if self.profile is not None else None,
                         k_cols=min(cdiv(K, bk), 16), color_by="program" if order == "persistent" else "wave")
        self.image.value = self.view.raster.png()
        a_rows, b_cols = self.schedule.wave_footprint(w)
        s = self.schedule
        head = (f"<b>{html.escape(s.describe())}</b><br>wave {w} of {s.num_waves}: tiles {rows.start}..{rows.stop - 1}, "
                f"{rows.stop - rows.start} programs read "
                f"{len(a_rows)} row-blocks of A and {len(b_cols)} column-blocks of B, {cdiv(K, bk)} K blocks each; "
                f"L2 {self.l2_mib.value:g} MiB (LRU model, see gemm_kernels.models.l2model)<br>")
        if self.traffic is None:
            self.counters.value = head + (
                f"<i>L2 model not computed: {s.num_waves:,} waves x {size // s.num_waves:,} blocks = {size:,} "
                f"entries, over the {MODEL_BUDGET:,} a redraw computes. Press "
                "'compute L2 model' to compute it for these settings; reads are drawn yellow until then.</i>")
            return
        t = self.traffic.totals()
        foot = (f"<br>whole launch: hit rate {self.traffic.hit_rate:.1%}; each block once would be "
                f"{_fmt(t['compulsory_misses'])} misses, no reuse at all {_fmt(t['no_reuse_misses'])}")
        self.counters.value = head + _table(_counter_rows(self.traffic, w), _COUNTER_HEADER) + foot


class PointerExplorer(_Explorer):
    """Pointer-arithmetic explorer: the addresses ``base + i*stride0 + j*stride1`` that one
    ``BLOCK_R x BLOCK_C`` load touches, in the matrix and in memory, with its mask.

    Controls: ``rows``, ``cols`` (matrix shape), ``layout_choice`` (``row_major``: strides
    ``(cols, 1)``; ``transposed``: the matrix is ``B.T`` of a row-major ``cols x rows`` B,
    strides ``(1, rows)``; ``custom``: set ``stride0`` / ``stride1``), ``block_rows``,
    ``block_cols`` (powers of two, as ``tl.arange`` needs), ``pid_r``, ``pid_c`` (which
    block: offsets ``pid_r * BLOCK_R``, ``pid_c * BLOCK_C``), ``base``, ``use_mask``.
    Model results: ``offsets`` and ``mask`` (``[BLOCK_R, BLOCK_C]`` arrays).
    """

    def __init__(self, rows: int = 6, cols: int = 7, layout: str = "row_major", block_rows: int = 4,
                 block_cols: int = 4, pid_r: int = 1, pid_c: int = 1, base: int = 0, use_mask: bool = True,
                 dpi: float = 72):
        _check_dpi(dpi)
        if not isinstance(use_mask, bool):
            raise TypeError(f"use_mask must be True or False, got {use_mask!r}")
        self.rows = _int_slider("rows", rows, 1, 64, arg="rows")
        self.cols = _int_slider("cols", cols, 1, 64, arg="cols")
        self.layout_choice = _dropdown("layout", ["row_major", "transposed", "custom"], layout, arg="layout")
        self.stride0 = _int_slider("stride0", cols, 0, 4096)
        self.stride1 = _int_slider("stride1", 1, 0, 4096)
        powers = (1, 2, 4, 8, 16, 32, 64)
        self.block_rows = _dropdown("BLOCK_R", powers, block_rows, arg="block_rows")
        self.block_cols = _dropdown("BLOCK_C", powers, block_cols, arg="block_cols")
        self.pid_r = _int_slider("pid_r", pid_r, 0, 64, arg="pid_r")
        self.pid_c = _int_slider("pid_c", pid_c, 0, 64, arg="pid_c")
        self.base = _int_slider("base", base, 0, 64, arg="base")
        self.use_mask = widgets.Checkbox(value=use_mask, description="mask = (i < rows) & (j < cols)",
                                         style={"description_width": "initial"})
        self.view = drawings.PointerView(figsize=(9, 4.4), dpi=dpi)
        self.offsets = self.mask = None
        controls = [widgets.HBox([widgets.VBox([self.rows, self.cols, self.layout_choice]),
                                  widgets.VBox([self.stride0, self.stride1, self.base]),
                                  widgets.VBox([self.block_rows, self.block_cols, self.use_mask]),
                                  widgets.VBox([self.pid_r, self.pid_c])])]
        super().__init__(controls)
        self._watch(self.rows, self.cols, self.layout_choice, self.stride0, self.stride1, self.block_rows,
                    self.block_cols, self.pid_r, self.pid_c, self.base, self.use_mask)
        self.redraw()

    def _update(self) -> None:
        rows, cols = self.rows.value, self.cols.value
        layout = self.layout_choice.value
        if layout != "custom":  # strides follow the layout; the sliders show them
            self.stride0.value, self.stride1.value = (cols, 1) if layout == "row_major" else (1, rows)
        self.stride0.disabled = self.stride1.disabled = layout != "custom"
        s0, s1 = self.stride0.value, self.stride1.value
        br, bc = self.block_rows.value, self.block_cols.value
        grid_r, grid_c = cdiv(rows, br), cdiv(cols, bc)
        self.pid_r.max, self.pid_c.max = grid_r - 1, grid_c - 1  # the slider clamps pid to the grid
        problems = []
        if self.pid_r.value >= grid_r:
            problems.append(f"pid_r = {self.pid_r.value} but a {rows}-row matrix has only {grid_r} blocks of "
                            f"{br} rows (pid_r = 0..{grid_r - 1}): no program would load this block")
        if self.pid_c.value >= grid_c:
            problems.append(f"pid_c = {self.pid_c.value} but {cols} columns make only {grid_c} blocks of {bc} "
                            f"(pid_c = 0..{grid_c - 1})")
        if problems:
            raise InvalidSetting("; ".join(problems))
        r0, c0 = self.pid_r.value * br, self.pid_c.value * bc
        self.offsets, self.mask = drawings.block_pointers(r0, c0, br, bc, s0, s1, rows, cols, self.base.value)
        self.view.update(rows, cols, s0, s1, br, bc, r0, c0, self.base.value, self.use_mask.value)
        self.image.value = self.view.raster.png()
        code = (f"offs_r = {self.pid_r.value} * {br} + tl.arange(0, {br})<br>"
                f"offs_c = {self.pid_c.value} * {bc} + tl.arange(0, {bc})<br>"
                f"ptrs = x_ptr + {self.base.value} + offs_r[:, None] * {s0} + offs_c[None, :] * {s1}<br>"
                + (f"mask = (offs_r[:, None] < {rows}) & (offs_c[None, :] < {cols})<br>tl.load(ptrs, mask=mask, other=0.0)"
                   if self.use_mask.value else "tl.load(ptrs)  # no mask"))
        n_out = int((~self.mask).sum())
        self.counters.value = (f"<pre style='font-size:12px'>{code}</pre>lanes: {self.mask.size}, in bounds: "
                               f"{self.mask.size - n_out}, past the edge: {n_out}"
                               + ("" if self.use_mask.value or not n_out else
                                  " <b style='color:#b00020'>(read without a mask: wrong data or a fault)</b>"))


def parse_problems(text: str) -> list:
    """``"128x128x64, 256x512x64, 0x512x64"`` -> ``[(128, 128, 64), (256, 512, 64), (0, 512, 64)]``.

    Each problem is ``MxN`` or ``MxNxK`` (``*`` also works), separated by commas or
    semicolons.  Raises ``ValueError`` naming the piece it could not read."""
    out = []
    for piece in text.replace(";", ",").split(","):
        piece = piece.strip()
        if not piece:
            continue
        parts = piece.lower().replace("*", "x").replace("×", "x").split("x")
        try:
            dims = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"could not read {piece!r}: write each problem as MxN or MxNxK, separated by commas") from None
        if len(dims) not in (2, 3) or min(dims) < 0:
            raise ValueError(f"could not read {piece!r}: need two or three sizes >= 0 (MxN or MxNxK)")
        out.append(tuple(dims))
    if not out:
        raise ValueError("no problems given: write e.g. 128x128x128, 256x256x256")
    return out


class GroupedScheduleExplorer(_Explorer):
    """Grouped-GEMM schedule explorer: several problems' tiles laid end to end, ``NUM_SM``
    programs striding over them (Triton tutorial 08's static schedule).

    Controls: ``problems`` (text, e.g. ``"128x128x128, 256x256x256"``; ``MxN`` or ``MxNxK``,
    ``M`` may be 0), ``block_m``, ``block_n``, ``block_k``, ``num_sms``, ``order``
    (per-problem tile order), ``group_size_m``, ``l2_mib``, ``wave`` (step) and ``play``.
    Model results: ``schedule`` and, when every problem has a K, ``traffic``.
    """

    def __init__(self, problems: str = "128x128x128, 256x256x256, 512x512x512, 1024x1024x1024",
                 block_m: int = 128, block_n: int = 128, block_k: int = 64, num_sms: int = 16,
                 order: str = "grouped", group_size_m: int = 8, l2_mib: float = H100_L2_BYTES / _MiB, dpi: float = 72):
        _check_dpi(dpi)
        _check_number("l2_mib", l2_mib, 0, 512, integer=False)
        if not isinstance(problems, str):
            raise TypeError(f"problems must be a str such as '128x128x64, 256x256x64', got {type(problems).__name__}")
        self.problems = widgets.Text(value=problems, description="problems", continuous_update=False,
                                     style={"description_width": "110px"}, layout=widgets.Layout(width="640px"))
        self.block_m = _dropdown("BLOCK_M", BLOCK_SIZES, block_m, arg="block_m")
        self.block_n = _dropdown("BLOCK_N", BLOCK_SIZES, block_n, arg="block_n")
        self.block_k = _dropdown("BLOCK_K", BLOCK_SIZES, block_k, arg="block_k")
        self.num_sms = _int_slider("NUM_SM", num_sms, 1, 264, arg="num_sms")
        self.order = _dropdown("tile order", ["row_major", "grouped"], order, arg="order")
        self.group_size_m = _int_slider("GROUP_SIZE_M", group_size_m, 1, 64, arg="group_size_m")
        self.l2_mib = widgets.FloatSlider(value=l2_mib, min=0, max=512, step=0.5, description="L2 (MiB)",
                                          continuous_update=False, style={"description_width": "110px"},
                                          layout=widgets.Layout(width="320px"))
        self.wave = _int_slider("step", 0, 0, 0)
        self.play = widgets.Play(value=0, min=0, max=0, step=1, interval=500, description="play")
        widgets.link((self.play, "value"), (self.wave, "value"))
        self.view = drawings.GroupedView(figsize=(9, 6), dpi=dpi)
        self.schedule = self.profile = self.traffic = None
        self._model_key = None
        controls = [self.problems,
                    widgets.HBox([widgets.VBox([self.block_m, self.block_n, self.block_k]),
                                  widgets.VBox([self.num_sms, self.group_size_m, self.l2_mib]), self.order]),
                    widgets.HBox([self.play, self.wave])]
        super().__init__(controls)
        self._watch(self.problems, self.block_m, self.block_n, self.block_k, self.num_sms, self.order,
                    self.group_size_m, self.l2_mib, self.wave)
        self.redraw()

    def _update(self) -> None:
        shapes = parse_problems(self.problems.value)
        bm, bn, bk = self.block_m.value, self.block_n.value, self.block_k.value
        total = sum(cdiv(s[0], bm) * cdiv(s[1], bn) for s in shapes)
        if total > MAX_TILES:
            raise InvalidSetting(f"{total:,} tiles is more than this explorer draws ({MAX_TILES:,}): use larger blocks")
        if len(shapes) > 32:
            raise InvalidSetting(f"{len(shapes)} problems: the explorer draws at most 32")
        key = (tuple(shapes), bm, bn, bk, self.num_sms.value, self.order.value, self.group_size_m.value)
        if key != self._model_key:
            self.schedule = grouped_gemm_schedule(shapes, bm, bn, self.num_sms.value, self.order.value,
                                                  self.group_size_m.value)
            has_k = all(len(s) == 3 and s[2] > 0 for s in shapes)
            # over the budget the counters say so (below) instead of stalling every redraw
            self.profile = reuse_profile(self.schedule, bk) if has_k and model_size(self.schedule) <= MODEL_BUDGET else None
            self._model_key = key
            last = self.schedule.num_waves - 1
            self.wave.max = self.play.max = last
            self.wave.value = min(self.wave.value, last)
        l2 = self.l2_mib.value * _MiB
        self.traffic = self.profile.traffic(l2) if self.profile is not None else None
        s, w = self.schedule, self.wave.value
        self.view.update(s, w)
        self.image.value = self.view.raster.png()
        per_program = np.bincount(s.program, minlength=s.programs_in_flight)
        busy = int((s.wave == s.num_waves - 1).sum())
        lines = [f"<b>{s.num_tiles} tiles</b> in {s.num_problems} problems; {s.programs_in_flight} programs "
                 f"walk them in {s.num_waves} steps",
                 f"tiles per program: {per_program.min()}..{per_program.max()}; last step: {busy} of "
                 f"{s.programs_in_flight} programs busy",
                 "tiles per problem: " + ", ".join(f"P{g} {cdiv(M, bm) * cdiv(N, bn)}"
                                                   for g, (M, N, _) in enumerate(s.problem_shapes))]
        if self.traffic is not None:
            lines.append(_table(_counter_rows(self.traffic, w), _COUNTER_HEADER))
        elif all(p[2] is not None and p[2] > 0 for p in s.problem_shapes):
            lines.append(f"L2 model not computed: {model_size(s):,} waves x blocks is over the {MODEL_BUDGET:,} a "
                         "redraw computes; use more programs (NUM_SM) or larger blocks, or call "
                         "gemm_kernels.l2_traffic(ex.schedule, ...) once")
        else:
            lines.append("give every problem a K (MxNxK) to see L2 loads, hits and misses")
        self.counters.value = "<br>".join(lines)


def schedule_explorer(**kwargs) -> ScheduleExplorer:
    """The tile-schedule explorer (see :class:`ScheduleExplorer` for controls and defaults).

    ``schedule_explorer(M=8192, N=8192, K=8192, block_k=64, programs_in_flight=132, group_size_m=8)``
    starts on an H100-sized problem."""
    return ScheduleExplorer(**kwargs)


def pointer_explorer(**kwargs) -> PointerExplorer:
    """The pointer-arithmetic explorer (see :class:`PointerExplorer`)."""
    return PointerExplorer(**kwargs)


def grouped_schedule_explorer(**kwargs) -> GroupedScheduleExplorer:
    """The grouped-GEMM schedule explorer (see :class:`GroupedScheduleExplorer`)."""
    return GroupedScheduleExplorer(**kwargs)


# =============================================================================== timing
def _median_ms(explorer, changes, repeat: int) -> float:
    times = []
    for i in range(repeat):
        for control, values in changes:
            control.value = values[i % len(values)]
            if explorer.error:
                raise RuntimeError(f"benchmark setting is invalid: {explorer.error}")
            times.append(explorer.last_redraw_ms)
    return float(np.median(times))


def time_redraws(repeat: int = 15) -> dict:
    """Median redraw time (ms) of each explorer at 64x64 tiles, per kind of change."""
    out = {}
    ex = ScheduleExplorer(M=8192, N=8192, K=8192, block_m=128, block_n=128, block_k=64, group_size_m=8,
                          programs_in_flight=H100_NUM_SMS)
    out["schedule_explorer: step wave (64x64 tiles)"] = _median_ms(ex, [(ex.wave, list(range(1, 31)))], repeat)
    out["schedule_explorer: change L2 size"] = _median_ms(ex, [(ex.l2_mib, [40.0, 50.0, 60.0])], repeat)
    out["schedule_explorer: change order/GROUP_SIZE_M (new model)"] = _median_ms(
        ex, [(ex.group_size_m, [4, 8, 16]), (ex.order, ["row_major", "grouped", "persistent"])], repeat)
    ex.programs_in_flight.value = 1
    out["schedule_explorer: 1 program in flight (4096 waves, new model)"] = _median_ms(
        ex, [(ex.group_size_m, [4, 8, 16])], max(3, repeat // 3))
    ex = ScheduleExplorer(M=16384, N=16384, K=16384, block_m=64, block_n=64, block_k=64, group_size_m=8,
                          programs_in_flight=1)
    out["schedule_explorer: 16384^3, 64x64 tiles, 1 in flight (65,536 waves): step wave"] = _median_ms(
        ex, [(ex.wave, list(range(1, 31)))], repeat)
    out["schedule_explorer: 16384^3, 64x64 tiles, 1 in flight: change GROUP_SIZE_M (model over budget)"] = _median_ms(
        ex, [(ex.group_size_m, [4, 8, 16])], max(3, repeat // 3))
    px = PointerExplorer(rows=64, cols=64, block_rows=64, block_cols=64, pid_r=0, pid_c=0)
    out["pointer_explorer: 64x64 matrix, 64x64 block"] = _median_ms(
        px, [(px.layout_choice, ["transposed", "row_major"]), (px.use_mask, [False, True])], repeat)
    px = PointerExplorer()
    out["pointer_explorer: 6x7 matrix, labelled"] = _median_ms(px, [(px.pid_c, [0, 1]), (px.use_mask, [False, True])],
                                                               repeat)
    gx = GroupedScheduleExplorer(problems="4096x4096x4096, 4096x4096x4096, 4096x4096x4096, 4096x4096x4096",
                                 num_sms=H100_NUM_SMS)
    out["grouped_schedule_explorer: step (4 x 32x32 = 64x64 tiles)"] = _median_ms(gx, [(gx.wave, list(range(1, 31)))],
                                                                                  repeat)
    out["grouped_schedule_explorer: change NUM_SM (new model)"] = _median_ms(gx, [(gx.num_sms, [100, 132, 114])], repeat)
    return out


def main(argv=None) -> None:
    import argparse
    import os

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time", action="store_true", help="print the median redraw time of each explorer")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    if not args.time:
        parser.print_help()
        return
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one CPU core, as promised
    print("median redraw time (ms), one CPU core:")
    for name, ms in time_redraws(args.repeat).items():
        print(f"  {ms:7.1f}  {name}")


if __name__ == "__main__":
    main()
