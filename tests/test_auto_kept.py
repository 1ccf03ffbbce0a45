"""``matmul_auto``'s repeated call runs the kept launch its first call ran or kept (issue 51,
item 2: one call key per call instead of two, and no second launcher's Python).  The listening
(``launches.kept_during``) and the choice of what to keep are checked on a CPU; on a GPU every
launcher ``matmul_auto`` picks is run again on fresh tensors with its launcher refusing to be
called."""

from unittest import mock

import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import runtime
from gemm_kernels.kernels import dispatch, launches
from gemm_kernels.kernels.matmul import matmul_ref
from gemm_kernels.testing import assert_close, random_matrix


def test_kept_during_hears_the_one_launch_a_call_ran_or_kept():
    cache = launches.LaunchCache()
    first, second = object(), object()
    assert launches.kept_during(lambda: cache.keep(("k",), first)) == (None, first)
    assert launches.kept_during(lambda: 7) == (7, None)  # nothing kept or run
    both = launches.kept_during(lambda: (cache.keep(("a",), first), cache.keep(("b",), second)))[1]
    assert both is None  # several: nothing to run straight
    assert launches.kept_during(lambda: cache.keep(None, first))[1] is None  # no key: never kept
    cache.keep(("c",), second)  # not listening: nothing is heard, nothing grows
    assert launches._HEARD.launches is None and not launches._HEARD.listening


def test_kept_during_nests_and_stops_listening_after_an_error():
    cache = launches.LaunchCache()
    inner_launch, outer_launch = object(), object()

    def outer():
        inner = launches.kept_during(lambda: cache.keep(("i",), inner_launch))
        cache.keep(("o",), outer_launch)
        return inner

    (inner_result, inner_heard), heard = launches.kept_during(outer)
    assert inner_heard is inner_launch and heard is outer_launch
    with pytest.raises(ZeroDivisionError):
        launches.kept_during(lambda: 1 / 0)
    assert not launches._HEARD.listening


def test_direct_runs_a_kept_launch_a_plan_or_the_launcher():
    a, b, bias = object(), object(), object()
    kept = mock.Mock(spec=launches.KeptLaunch)
    dispatch._direct(kept, None, "gelu")(a, b, bias)
    assert kept.call_count == 1 and kept.call_args.args == () and kept.call_args.kwargs == dict(a=a, b=b, bias=bias)
    plan = mock.Mock()
    dispatch._direct(plan, None, "gelu")(a, b, bias)
    plan.assert_called_once_with(a, b, bias, None)
    launcher = mock.Mock()
    dispatch._direct(None, launcher, "gelu")(a, b, bias)
    launcher.assert_called_once_with(a, b, activation="gelu", bias=bias)


def test_with_keeping_on_and_no_kept_launch_the_launcher_runs_each_call(monkeypatch):
    """In the interpreter nothing is bound, so nothing is heard: the launcher is kept and runs."""
    monkeypatch.setattr(launches, "keeping", lambda: True)
    monkeypatch.setattr(dispatch, "_PICKS", launches.LaunchCache())
    for _ in range(2):
        a, b = random_matrix(40, 24, torch.float16), random_matrix(24, 32, torch.float16)
        bias = random_matrix(1, 32, torch.float16)[0]
        out = gk.matmul_auto(a, b, activation="relu", bias=bias)
        assert_close(out, matmul_ref(a, b, activation="relu", bias=bias, out_dtype=torch.float64), torch.float16)
    assert len(dispatch._PICKS) == 1


#: (M, N, K, dtype, b as W.t()) whose picks cover the launchers matmul_auto calls on an H100:
#: few tiles (split-K or matmul_ws's split units), many tiles (matmul_ws), fp32 (matmul_tma)
GPU_SHAPES = [(192, 192, 320, torch.float16, False), (64, 512, 8192, torch.bfloat16, True),
              (2048, 2048, 512, torch.float16, True), (300, 520, 264, torch.float32, False)]


@pytest.mark.gpu
@pytest.mark.usefixtures("seed")
@pytest.mark.parametrize("autotune", ["1", "0"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_gpu_a_repeated_call_runs_the_kept_launch_straight(shape, autotune, monkeypatch):
    M, N, K, dtype, linear = shape
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, autotune)
    monkeypatch.setattr(dispatch, "_PICKS", launches.LaunchCache())

    def inputs():
        a = random_matrix(M, K, dtype)
        b = random_matrix(N, K, dtype).t() if linear else random_matrix(K, N, dtype)
        return a, b, random_matrix(1, N, dtype)[0]

    a, b, bias = inputs()
    gk.matmul_auto(a, b, activation="gelu", bias=bias)  # checks, tunes, keeps
    keys = []
    real_key = launches.call_key
    monkeypatch.setattr(launches, "call_key", lambda *args: keys.append(1) or real_key(*args))
    for calls in (1, 2):
        a, b, bias = inputs()
        out = gk.matmul_auto(a, b, activation="gelu", bias=bias)
        assert_close(out, matmul_ref(a, b, activation="gelu", bias=bias, out_dtype=torch.float64), dtype)
        assert len(keys) == calls  # matmul_auto's key only: the launcher's own path is not run
    a, b, bias = inputs()  # another activation: another key, through the launcher again
    out = gk.matmul_auto(a, b, activation="relu", bias=bias)
    assert_close(out, matmul_ref(a, b, activation="relu", bias=bias, out_dtype=torch.float64), dtype)
    assert len(keys) == 4


def test_perf_notes_40_quotes_the_cpu_record():
    """PERF_NOTES 40's CPU numbers are those of ``tests/cpu_host_path.py``'s committed output."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    record = (root / "images" / "bench" / "entry40" / "host_path_cpu.txt").read_text()
    before, now, empty = re.findall(r"([\d.]+) us per call", record)[:3]
    text = " ".join((root / "gemm_kernels" / "bench" / "PERF_NOTES.md").read_text().split())
    assert (f"takes {before} µs per call the way it went before and {now} µs now; `torch.empty` alone {empty} µs"
            in text)
    assert float(now) < float(before)
