"""The warp-specialized kernel over time: producer and consumer warpgroups of one SM.

``draw_ws_timeline(model, measured=None)`` draws a :class:`~gemm_kernels.models.ws_timeline.WsTimeline`
(lanes: the producer's TMA loads, consumer 0, consumer 1; a main loop is a bar in its tile's
colour, the epilogue after it a dark bar) and, below it on the same time axis, measured rows
of ``trace_ws_tiles`` (one program) when given.  ``ws_timeline_explorer()`` is the ipywidgets
view: schedule, tiles, K blocks, tensor-core efficiency, epilogue time and ring depth as
controls, the committed H100 trace (``images/bench/ws_trace.csv``) or, on a Hopper GPU, a live
trace as the measured half.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..models import ws_timeline as wt
from ..results import BENCH_DIR, ResultsFileError, read_csv
from .drawings import cycle_colors, fade, png_bytes

#: the committed H100 trace (``python tests/gpu_ws_host.py OUT trace``), found like every committed result
TRACE_CSV = BENCH_DIR / "ws_trace.csv"
_LANES = ("producer (TMA)", "consumer 0", "consumer 1")


def load_trace(path: Path | str = TRACE_CSV) -> dict:
    """The committed trace as {(trace, schedule): int64 array of [program, step, consumer, start_ns,
    mainloop_end_ns, end_ns]}; :func:`trace_meta` gives each trace's sizes."""
    out: dict = {}
    columns = ("program", "step", "consumer", "start_ns", "mainloop_end_ns", "end_ns")
    for line, r in enumerate(read_csv(Path(path)), start=2):
        try:
            out.setdefault((r["trace"], r["schedule"]), []).append([int(r[c]) for c in columns])
        except (KeyError, ValueError) as exc:
            raise ResultsFileError(f"{path}, line {line}: not a trace row ({type(exc).__name__}: {exc})") from None
    return {k: np.array(v, dtype=np.int64) for k, v in out.items()}


def trace_meta(path: Path | str = TRACE_CSV) -> dict:
    """{(trace, schedule): {M, N, K, num_programs, epilogue}} of the committed trace."""
    try:
        return {(r["trace"], r["schedule"]): {k: r[k] for k in ("M", "N", "K", "num_programs", "epilogue")}
                for r in read_csv(Path(path))}
    except KeyError as exc:
        raise ResultsFileError(f"{path} has no column {exc}: not a trace") from None


def _bars(ax, lane: int, rows: np.ndarray, scale: float, alpha: float = 1.0) -> None:
    """Main loops (tile colour) and epilogues (dark) of rows [step, consumer, start, mainloop_end, end]."""
    colors = cycle_colors(rows[:, 0].astype(int))
    for (step, consumer, start, main_end, end), color in zip(rows, colors):
        y = lane + int(consumer)
        ax.broken_barh([(start * scale, (main_end - start) * scale)], (y - 0.38, 0.76),
                       facecolors=[fade(color, 1 - alpha)], edgecolor="white", linewidth=0.5)
        ax.broken_barh([(main_end * scale, max(end - main_end, 1e-9) * scale)], (y - 0.38, 0.76),
                       facecolors=["#333333"], edgecolor="white", linewidth=0.5)
        if (main_end - start) * scale > 0:
            ax.text((start + main_end) / 2 * scale, y, str(int(step)), ha="center", va="center", fontsize=7,
                    color="white" if np.mean(color[:3]) < 0.6 else "black")


def draw_ws_timeline(model: wt.WsTimeline, measured: np.ndarray | None = None, title: str | None = None,
                     figsize=(9.0, 3.2), dpi: float = 80) -> Figure:
    """The model's lanes (and the measured program's, below, if given: rows of [step, consumer,
    start_ns, mainloop_end_ns, end_ns]).  Times in µs from the program's first start."""
    scale = 1e-3
    fig = Figure(figsize=(figsize[0], figsize[1] * (1.6 if measured is not None else 1.0)), dpi=dpi)
    ax = fig.add_subplot(111)
    lanes = list(_LANES)
    # producer: one thin bar per K block, from the load's start to its landing
    loads = model.loads
    k = max(model.k_blocks, 1)
    load_colors = cycle_colors(np.arange(len(loads)) // k)
    for (start, landed), color in zip(loads, load_colors):
        ax.broken_barh([(start * scale, max(landed - start, 1e-9) * scale)], (-0.25, 0.5),
                       facecolors=[fade(color, 0.35)], edgecolor="none")
    _bars(ax, 1, model.rows, scale)
    span = model.span_ns
    if measured is not None and len(measured):
        rows = np.asarray(measured, dtype=float).copy()
        rows[:, 2:] -= rows[:, 2].min()
        _bars(ax, 4, rows, scale)
        lanes += ["", "measured consumer 0", "measured consumer 1"]
        span = max(span, rows[:, 4].max())
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(lanes, fontsize=8)
    ax.set_ylim(len(lanes) - 0.5, -0.6)
    ax.set_xlim(0, span * scale * 1.02 if span else 1)
    ax.set_xlabel("µs (bars: main loop, numbered by step; dark: epilogue; top: TMA loads, coloured by tile)",
                  fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or f"{model.schedule}: model" + (" (top) vs measured (bottom)" if measured is not None else ""),
                 fontsize=9)
    fig.tight_layout()
    return fig


def summary(model: wt.WsTimeline) -> dict:
    """Span, tensor-core busy fraction and the epilogue time left exposed, of a model timeline."""
    busy = model.rows[:, 3] - model.rows[:, 2]
    if model.schedule == "cooperative":
        busy = busy[::2]
    span = model.span_ns
    mma = len(busy) and model.kblock_ns * model.k_blocks * len(busy)
    return {"span_us": span / 1e3, "tensor_busy": (mma / span) if span else 0.0,
            "exposed_us": (span - mma) / 1e3}


try:  # the explorer needs ipywidgets (a notebook extra); the drawing does not
    import ipywidgets as widgets

    from .widgets import _dropdown, _Explorer, _int_slider
except ImportError:  # pragma: no cover - exercised where ipywidgets is missing
    widgets = None


if widgets is not None:
    class WsTimelineExplorer(_Explorer):
        """Producer and consumers over time: model (controls) vs a measured program (committed
        H100 trace, or ``live=True`` on a Hopper GPU).  ``ex.model`` and ``ex.measured`` hold what
        is drawn; ``ex.counters`` the span and the tensor cores' busy fraction."""

        def __init__(self, schedule: str = "pingpong", tiles: int | None = None, k_blocks: int = 64, efficiency: int = 96,
                     epilogue_ns: int = 4300, stages: int | None = None, live: bool = False):
            self.trace = load_trace() if TRACE_CSV.is_file() else {}
            self.live_rows = self._live() if live else None
            self.schedule = _dropdown("schedule", list(wt.TILES), schedule)
            self.tiles = _int_slider("tiles (steps)", tiles or self.SAME_WORK[schedule], 1, 16)
            self.k_blocks = _int_slider("K blocks / tile", k_blocks, 1, 128)
            self.efficiency = _int_slider("tensor cores %", efficiency, 10, 100)
            self.epilogue = _int_slider("epilogue ns", epilogue_ns, 0, 20000, step=100)
            self.stages = _int_slider("ring slots", stages or wt.TILES[schedule][3], 1, 8)
            self.show_measured = _dropdown("measured", ["plain", "bias+GELU", "none"],
                                           "bias+GELU" if epilogue_ns > 2000 else "plain")
            controls = [widgets.HBox([self.schedule, self.show_measured]), widgets.HBox([self.tiles, self.k_blocks]),
                        widgets.HBox([self.efficiency, self.epilogue]), self.stages]
            self._last_schedule = schedule
            super().__init__(controls)
            self._watch(self.schedule, self.tiles, self.k_blocks, self.efficiency, self.epilogue, self.stages,
                        self.show_measured)
            self.redraw()

        @staticmethod
        def _live():
            """(step, consumer, start, mainloop_end, end) of program 0 for both schedules, measured here."""
            from ..kernels.matmul_ws import trace_ws_tiles

            out = {}
            for schedule in wt.TILES:
                for label, act, bias in (("plain", None, False), ("bias+GELU", "gelu", True)):
                    t = trace_ws_tiles(1024, 1024, 4096, schedule=schedule, num_programs=4, activation=act,
                                       bias=bias).numpy()
                    t = t[t[:, 1] == 0]
                    out[(label, schedule)] = t[:, [3, 2, 6, 7, 8]]
            return out

        def measured_rows(self):
            label, schedule = self.show_measured.value, self.schedule.value
            if label == "none":
                return None
            if self.live_rows is not None:
                return self.live_rows[(label, schedule)]
            key = ("few tiles" if label == "plain" else "few tiles, bias+GELU", schedule)
            if key not in self.trace:
                return None
            rows = self.trace[key]
            return rows[rows[:, 0] == 0][:, 1:]

        #: steps per program of the measured trace (1024 x 1024 on 4 programs): the same work
        SAME_WORK = {"pingpong": 16, "cooperative": 8}

        def _update(self) -> None:
            schedule = self.schedule.value
            if schedule != self._last_schedule:  # keep the work equal to the measured program's
                self._last_schedule = schedule
                self.tiles.value = self.SAME_WORK[schedule]
                self.stages.value = wt.TILES[schedule][3]
            rate = wt.H100_RATE_PER_SM * self.efficiency.value / 100
            self.model = wt.ws_timeline(schedule, self.tiles.value, self.k_blocks.value, rate=rate,
                                        epilogue_ns=float(self.epilogue.value), stages=self.stages.value)
            self.measured = self.measured_rows()
            source = "live, this GPU" if self.live_rows is not None else "H100, images/bench/ws_trace.csv"
            fig = draw_ws_timeline(self.model, self.measured,
                                   title=f"{schedule}: model (top)" + (f" vs measured program 0, 1024x1024x4096 "
                                                                      f"fp16 ({source})" if self.measured is not None
                                                                      else ""))
            self.image.value = png_bytes(fig)
            s = summary(self.model)
            rows = [("span", f"{s['span_us']:.1f} µs"), ("tensor cores busy", f"{100 * s['tensor_busy']:.0f}%"),
                    ("not multiplying", f"{s['exposed_us']:.1f} µs")]
            if self.measured is not None:
                m = np.asarray(self.measured, dtype=float)
                rows.append(("measured span", f"{(m[:, 4].max() - m[:, 2].min()) / 1e3:.1f} µs "
                                              f"({int(m[:, 0].max()) + 1} steps, K=4096: 64 blocks)"))
            self.counters.value = "<table>" + "".join(
                f"<tr><td>{html.escape(a)}</td><td><b>{html.escape(b)}</b></td></tr>" for a, b in rows) + "</table>"


def ws_timeline_explorer(**kwargs):
    """The timeline explorer (needs ipywidgets); see :class:`WsTimelineExplorer`."""
    if widgets is None:
        raise ImportError("ws_timeline_explorer needs ipywidgets (pip install ipywidgets); "
                          "draw_ws_timeline works without it")
    return WsTimelineExplorer(**kwargs)
