"""The timeline drawing and explorer (viz/timeline.py), driven without a browser."""

import numpy as np
import pytest

from gemm_kernels.models import ws_timeline as wt
from gemm_kernels.viz import timeline


def test_drawing_has_the_model_lanes_and_the_measured_ones():
    model = wt.ws_timeline("pingpong", 4, 8)
    fig = timeline.draw_ws_timeline(model)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["producer (TMA)", "consumer 0", "consumer 1"]
    measured = np.array([[0, 0, 0, 900, 1000], [1, 1, 800, 1700, 1800]])
    fig = timeline.draw_ws_timeline(model, measured)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[-2:] == ["measured consumer 0", "measured consumer 1"]


def test_committed_trace_loads_with_every_schedule():
    trace = timeline.load_trace()
    for key in [("few tiles", "pingpong"), ("few tiles", "cooperative"), ("few tiles, bias+GELU", "pingpong")]:
        rows = trace[key]
        assert rows.shape[1] == 6 and (rows[:, 5] >= rows[:, 4]).all() and (rows[:, 4] >= rows[:, 3]).all()
        assert timeline.trace_meta()[key]["K"] == "4096"


def test_explorer_redraws_and_keeps_the_measured_work():
    pytest.importorskip("ipywidgets")
    ex = timeline.ws_timeline_explorer()
    assert ex.error is None and ex.image.value[:4] == b"\x89PNG"
    assert ex.tiles.value == 16 and ex.measured is not None and int(ex.measured[:, 0].max()) == 15
    ex.schedule.value = "cooperative"  # same work as the measured program: 8 tiles twice the size
    assert ex.error is None and ex.tiles.value == 8 and ex.stages.value == 4
    span_plain = timeline.summary(ex.model)["span_us"]
    ex.epilogue.value = 10000
    assert timeline.summary(ex.model)["span_us"] == pytest.approx(span_plain + 8 * (10 - 4.3), rel=0.01)
    ex.show_measured.value = "none"
    assert ex.measured is None and ex.error is None
