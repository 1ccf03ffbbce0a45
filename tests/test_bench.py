"""The benchmark harness: CPU --quick run, peaks, arithmetic, seed loading, reports, L2 parsing.

The GPU-only paths (timing, ratios, plots, targets) are exercised here with a fake timer, so a
CPU machine proves the code the lead runs on the GPU at least adds up."""

import json
import re
import math
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gemm_kernels as gk
from gemm_kernels import results, runtime
from gemm_kernels.bench import core, l2, report, seed, suites
from gemm_kernels.testing import rel_err

ROOT = Path(__file__).resolve().parents[1]
SEED_PAGE = ROOT.parent / "shared" / "seeds" / seed.SEED_TUTORIAL_NAME
SUITE_NAMES = tuple(suites.SUITES)


def _bench(*args, timeout=240):
    env = {k: v for k, v in os.environ.items() if k not in ("GEMM_KERNELS_INTERPRET",)}
    return subprocess.run([sys.executable, "-m", "gemm_kernels.bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------ the CPU run


@pytest.mark.skipif(runtime.on_gpu(), reason="checks the CPU (interpreter) path; a GPU runs the timed suites")
def test_quick_cpu_run_checks_every_suite_and_writes_correctness_only(tmp_path):
    proc = _bench("--quick", "--out", str(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Timings need a CUDA GPU" in out
    for suite in SUITE_NAMES:
        rows = report.read_csv(tmp_path / f"{suite}.csv")
        assert rows, f"{suite}: no rows"
        ran = [r for r in rows if r["ok"] is not None]
        assert ran, f"{suite}: nothing was checked"
        assert all(r["ok"] for r in ran), [(r["provider"], r["rel_err"], r["note"]) for r in ran if not r["ok"]]
        assert all(r["time_ms"] is None and r["tflops"] is None for r in rows), "a CPU run must not time"
        assert all(r["rel_err"] is not None and r["rel_err"] <= r["tol"] for r in ran)
        assert not (tmp_path / f"{suite}.png").exists()  # no timings, no plot
    ours = {r["provider"] for s in SUITE_NAMES for r in report.read_csv(tmp_path / f"{s}.csv")
            if r["ours"] and r["ok"]}
    assert {"row_major", "grouped", "persistent", "tma", "stream_k", "grouped_matmul", "grouped_mm"} <= ours
    seed_rows = report.read_csv(tmp_path / "seed-grouped.csv")
    seed_checked = {r["provider"] for r in seed_rows if r["ok"]}
    if SEED_PAGE.is_file():  # found through ../shared/seeds without --seed-tutorial
        assert {"seed triton", "seed triton+tma"} <= seed_checked
        assert "gropup_c_ptrs" in out  # the patch is announced
    md = (tmp_path / "results.md").read_text()
    for suite in SUITE_NAMES:
        assert results.extract_section(md, suite) is not None
    assert "Not timed (no CUDA GPU)" in md
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert set(meta["suites"]) == set(SUITE_NAMES)
    assert meta["suites"]["square"]["mode"].startswith("interpreter")


@pytest.mark.skipif(runtime.on_gpu(), reason="the CPU refusals only")
def test_cpu_without_quick_or_with_commit_refuses_clearly(tmp_path, capsys):
    from gemm_kernels.bench import main

    assert main(["--suite", "square", "--out", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "Timings need a CUDA GPU" in out and "--quick" in out
    assert main(["--quick", "--commit", "--out", str(tmp_path)]) == 2
    assert "refusing" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.csv"))


def test_list_shows_the_gpu_cases(capsys):
    from gemm_kernels.bench import main

    assert main(["--list", "--suite", "square,moe"]) == 0
    out = capsys.readouterr().out
    assert "[fp16] 8192x8192x8192" in out and "[bf16] 4096x4096x4096" in out and "18944" in out
    assert "DeepSeek-V3 up T=32768 skewed" in out and "Qwen3-30B-A3B down T=512 uniform fwd+bwd" in out


def test_unknown_suite_is_a_usage_error():
    from gemm_kernels.bench import main

    with pytest.raises(SystemExit):
        main(["--suite", "squares"])


@pytest.mark.parametrize("argv, message", [
    (["--suite", "", "--quick"], r"no suite given; choose from square, "),
    (["--suite", " , ", "--quick"], r"no suite given"),
])
def test_an_empty_suite_list_is_a_usage_error(argv, message, capsys):
    """--suite '' wrote an empty report and exited 0."""
    from gemm_kernels.bench import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    import re

    assert re.search(message, capsys.readouterr().err)


def test_out_naming_an_existing_file_is_a_usage_error(tmp_path, capsys):
    """--out naming a file gave a traceback (mkdir on a file) after the GPU set-up."""
    from gemm_kernels.bench import main

    existing = tmp_path / "results.txt"
    existing.write_text("keep me")
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--suite", "square", "--out", str(existing)])
    assert exit_info.value.code == 2
    assert f"--out {existing} is an existing file; --out names a directory" in capsys.readouterr().err
    assert existing.read_text() == "keep me"


# ------------------------------------------------------------------------------ shards and resumed runs


def _quick(*args):
    from gemm_kernels.bench import main

    return main(["--quick", *map(str, args)])


def _case_order(rows):
    return [(r["panel"], r["case"], r["provider"]) for r in rows]


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs stand in for the GPU shards")
def test_shards_merge_back_into_the_suites_order(tmp_path, capsys):
    suites_arg = "stream-k,llm"
    assert _quick("--suite", suites_arg, "--out", tmp_path / "whole") == 0
    assert _quick("--suite", suites_arg, "--shard", "1/2", "--out", tmp_path / "s1") == 0
    assert _quick("--suite", suites_arg, "--shard", "0/2", "--out", tmp_path / "s0") == 0
    capsys.readouterr()
    for suite in ("stream-k", "llm"):
        whole = report.read_csv(tmp_path / "whole" / f"{suite}.csv")
        halves = [report.read_csv(tmp_path / d / f"{suite}.csv") for d in ("s0", "s1")]
        assert all(halves) and sum(map(len, halves)) == len(whole)
        rows, info = report.merge_shards([tmp_path / "s1", tmp_path / "s0"], suite)  # any order of DIRs
        assert _case_order(rows) == _case_order(whole)
        assert info["shards"] == 2 and "shard" not in info and "--shard 0/2" in info["command"]

    with pytest.raises(ValueError, match=r"shards 1/2 missing"):
        report.merge_shards([tmp_path / "s0"], "llm")
    with pytest.raises(ValueError, match=r"shard 0/2 of llm given twice"):
        report.merge_shards([tmp_path / "s0", tmp_path / "s0", tmp_path / "s1"], "llm")
    with pytest.raises(ValueError, match=r"was not a shard"):
        report.merge_shards([tmp_path / "whole", tmp_path / "s1"], "llm")
    meta = json.loads((tmp_path / "s1" / "meta.json").read_text())
    meta["suites"]["llm"]["device"] = "another GPU"
    (tmp_path / "s1" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"has device = 'another GPU'.*measured alike"):
        report.merge_shards([tmp_path / "s0", tmp_path / "s1"], "llm")
    # a CPU run holds no timings: publishing its shards is refused like publishing it whole
    from gemm_kernels.bench import main

    assert main(["--publish", str(tmp_path / "s0"), str(tmp_path / "s1")]) == 2
    assert "error:" in capsys.readouterr().out


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
def test_resume_finishes_what_a_time_budget_left(tmp_path, capsys):
    out = tmp_path / "run"
    assert _quick("--suite", "stream-k", "--shard", "1/2", "--time-budget", "1e-9", "--out", out) == 0
    assert "time budget reached: 0 of" in capsys.readouterr().out
    with pytest.raises(ValueError, match="incomplete"):
        report.merge_shards([out, out], "stream-k")
    assert _quick("--suite", "stream-k", "--shard", "0/2", "--resume", "--out", out) == 2  # another shard's rows
    assert "the earlier run was shard [1, 2], this one [0, 2]" in capsys.readouterr().out

    assert _quick("--suite", "stream-k", "--shard", "1/2", "--resume", "--out", out) == 0
    first = report.read_csv(out / "stream-k.csv")
    meta = json.loads((out / "meta.json").read_text())["suites"]["stream-k"]
    assert first and "incomplete" not in meta and meta["resumed"] == 1 and meta["shard"] == [1, 2]
    assert _quick("--suite", "stream-k", "--shard", "1/2", "--resume", "--out", out) == 0
    assert "resuming: 1 cases kept" in capsys.readouterr().out
    assert _case_order(report.read_csv(out / "stream-k.csv")) == _case_order(first)  # nothing run twice


def test_resume_compares_timing_without_the_graph_suites_method():
    """A CUDA-graph suite's meta adds its timing "method": resuming it must not call that a change."""
    from gemm_kernels.bench import _cannot_resume

    run = {"device": "GPU", "torch": "2", "triton": "3", "autotune": True, "seed": 0,
           "timing": {"rounds": 3, "return_mode": "median"}}
    graph_suite = {**run, "timing": {**run["timing"], "method": "triton.testing.do_bench_cudagraph"}}
    assert _cannot_resume(graph_suite, run, (0, 1)) is None
    assert "timing" in _cannot_resume({**graph_suite, "timing": {"rounds": 1, "method": "x"}}, run, (0, 1))
    assert "shard" in _cannot_resume({**run, "shard": [1, 2]}, run, (0, 2))
    assert "no meta.json entry" in _cannot_resume({}, run, (0, 1))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_shards_share_alternating_cases_fairly(n):
    """The moe suite alternates forward and forward+backward cases: dealing them 0, 1, 0, 1 would
    give one GPU every backward; 0, 1, 1, 0 does not."""
    cases = range(8 * n)
    owners = [report.shard_of(k, n) for k in cases]
    for i in range(n):
        mine = [k for k in cases if owners[k] == i]
        assert len(mine) == 8
        assert sum(k % 2 for k in mine) == 4  # as many odd (fwd+bwd) cases as even ones


@pytest.mark.parametrize("argv", [["--shard", "2/2"], ["--shard", "1"], ["--shard", "0/2", "--commit"]])
def test_bad_shard_arguments_are_usage_errors(argv, capsys):
    from gemm_kernels.bench import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--suite", "order", *argv])
    assert exit_info.value.code == 2
    assert "--shard" in capsys.readouterr().err


# ------------------------------------------------------------------------------ peaks and arithmetic


@pytest.mark.parametrize("name, dtype, peak", [
    ("NVIDIA H100 80GB HBM3", torch.float16, 989.4),
    ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.4),
    ("NVIDIA H100 PCIe", torch.bfloat16, 756.0),
    ("NVIDIA H200", torch.float16, 989.4),
    ("NVIDIA A100-SXM4-80GB", torch.float16, 312.0),
    ("NVIDIA A100 80GB PCIe", torch.bfloat16, 312.0),
    ("NVIDIA H100 NVL", torch.float16, None),       # not in the table: unknown, never guessed
    ("Tesla T4", torch.float16, None),
    ("NVIDIA H100 80GB HBM3", torch.float32, None),  # only fp16/bf16 peaks are tabled
    ("CPU (Triton interpreter)", torch.float16, None),
], ids=lambda v: str(v).replace(" ", "_"))
def test_dense_peak_table(name, dtype, peak):
    assert core.dense_peak_tflops(name, dtype) == peak


def test_tflops_and_bytes_arithmetic():
    assert core.gemm_flops([(4096, 4096, 4096)]) == 2 * 4096**3
    assert core.gemm_flops([(2, 3, 4), (5, 6, 7)]) == 2 * 2 * 3 * 4 + 2 * 5 * 6 * 7
    assert core.tflops(2 * 4096**3, 0.2) == pytest.approx(687.19476736)
    assert core.tflops(10**12, 1000.0) == pytest.approx(1.0)
    assert core.gemm_min_bytes([(2, 3, 4)], 2) == (2 * 4 + 4 * 3 + 2 * 3) * 2
    with pytest.raises(ValueError):
        core.tflops(1, 0.0)


def test_rel_err_lists_matches_testing_rel_err_and_catches_nan():
    gen = torch.Generator().manual_seed(1)
    refs = [torch.randn(5, 7, generator=gen), torch.randn(3, 4, generator=gen)]
    outs = [(r + 1e-3 * torch.randn(r.shape, generator=gen)).half() for r in refs]
    flat_out = torch.cat([o.flatten() for o in outs])[None]
    flat_ref = torch.cat([r.flatten() for r in refs])[None]
    assert core.rel_err_lists(outs, refs) == pytest.approx(rel_err(flat_out, flat_ref))
    with pytest.MonkeyPatch.context() as mp:  # in chunks (a big output is never copied whole)
        mp.setattr(core, "REL_ERR_CHUNK", 4)
        assert core.rel_err_lists(outs, refs) == pytest.approx(rel_err(flat_out, flat_ref))
        outs[1][2, 3] = float("nan")  # in the last chunk
        assert core.rel_err_lists(outs, refs) == math.inf
        outs[1][2, 3] = 0.0
    outs[1][0, 0] = float("nan")
    assert core.rel_err_lists(outs, refs) == math.inf
    with pytest.raises(ValueError, match="shape"):
        core.rel_err_lists([torch.zeros(2, 2)], [torch.zeros(2, 3)])
    assert len(core.as_tensor_list(torch.zeros(3, 2, 2))) == 3


def test_rel_err_counts_fp16_subnormals_against_the_smallest_normal():
    """A 1 x 1 fp16 result deep in the GELU tail (a kernel's -2.4438e-6 for -2.3589e-6: a subnormal,
    1.4 of its 6e-8 steps and 3.6% off) passes the fp16 tolerance; a wrong or unwritten result still fails."""
    from gemm_kernels.testing import TOLERANCES, assert_close

    ref = torch.tensor([[-2.3589e-06]], dtype=torch.float64)
    out = torch.tensor([[-2.4438e-06]]).half()
    assert_close(out, ref)
    assert abs(out.double() / ref - 1).item() > 0.03  # what the plain ratio says
    for wrong in (torch.zeros(1, 1), torch.full((1, 1), -1e-4), torch.full((1, 1), float("nan"))):
        assert rel_err(wrong.half(), torch.tensor([[-2e-4]], dtype=torch.float64)) > TOLERANCES[torch.float16]
    big = torch.randn(64, 64, dtype=torch.float64)
    assert rel_err(big.half(), big) == pytest.approx(float((big.half().double() - big).norm() / big.norm()))


def test_poisoned_empty_fills_nan_and_restores():
    before = torch.empty
    with core.poisoned_empty():
        assert torch.isnan(torch.empty(4, dtype=torch.float16)).all()
        assert torch.empty(3, dtype=torch.int64).shape == (3,)
    assert torch.empty is before


# ------------------------------------------------------------------------------ the timed path, faked


@pytest.fixture
def fake_timer(monkeypatch):
    """do_bench stand-in: runs fn once, returns a time per provider (the baseline ~1 ms)."""
    calls = []

    def median_ms(fn, settings, cuda_graph=False):
        calls.append(fn)
        fn()
        return 1.0 if len(calls) == 1 else 0.5 + 0.1 * len(calls)

    monkeypatch.setattr(core, "median_ms", median_ms)
    return calls


def test_run_case_times_checks_and_derives_ratios(fake_timer):
    case = suites.square_suite(suites.SuiteSettings(dtype=torch.float16))[0]
    rows = core.run_case(case, core.TimingSettings(1, 1, rounds=1), peak=989.4)
    by = {r.provider: r for r in rows}
    assert set(by) >= {"cuBLAS", "row_major", "grouped", "persistent", "tma"}
    timed = [r for r in rows if r.time_ms is not None]
    assert len(fake_timer) == len(timed)  # one round: each checked provider timed once
    base = by["cuBLAS"]
    assert base.time_ms == pytest.approx(1.0) and base.baseline_spread is None  # one round: no spread
    for r in timed:
        assert r.ok and r.rel_err <= r.tol
        assert r.tflops == pytest.approx(core.tflops(case.flops, r.time_ms))
        assert r.pct_peak == pytest.approx(100 * r.tflops / 989.4)
        assert r.speedup == pytest.approx(base.time_ms / r.time_ms)
        assert r.gb_s == pytest.approx(case.min_bytes / (r.time_ms * 1e-3) / 1e9)


def test_rounds_interleave_providers_and_take_medians(monkeypatch):
    """Three rounds, the first provider rotating: each provider's time is the median of its three
    samples and the baseline's spread is (max - min) / median of its samples."""
    order, samples = [], {"base": [3.0, 1.0, 2.0], "mine": [0.5, 0.9, 0.7], "other": [5.0, 5.0, 5.0]}

    def median_ms(fn, settings, cuda_graph=False):
        name = fn()
        order.append(name)
        return samples[name][sum(1 for n in order if n == name) - 1]

    monkeypatch.setattr(core, "median_ms", median_ms)

    def setup():
        providers = [core.Provider(n, lambda n=n: n, lambda: torch.ones(2, 2), ours=n != "base")
                     for n in ("base", "mine", "other")]
        return core.CaseData(providers, lambda: [torch.ones(2, 2)])

    case = core.Case("t", "p", "2^3", 2, torch.float32, [(2, 2, 2)], "base", setup)
    by = {r.provider: r for r in core.run_case(case, core.TimingSettings(1, 1, rounds=3), None)}
    assert order == ["base", "mine", "other", "mine", "other", "base", "other", "base", "mine"]
    assert by["base"].time_ms == 2.0 and by["mine"].time_ms == 0.7 and by["other"].time_ms == 5.0
    assert by["mine"].speedup == pytest.approx(2.0 / 0.7)
    assert all(r.baseline_spread == pytest.approx((3.0 - 1.0) / 2.0) for r in by.values())


def test_a_wrong_kernel_is_reported_not_hidden(fake_timer):
    def setup():
        a = torch.randn(8, 8).half()
        b = torch.randn(8, 8).half()
        return core.CaseData([core.Provider("ref", lambda: a @ b, ours=False),
                              core.Provider("broken", lambda: (a @ b) * 1.1),
                              core.Provider("unwritten", lambda: torch.empty(8, 8, dtype=torch.float16)),
                              core.Provider("raises", lambda: 1 / 0),
                              core.Provider("absent", None, skip="not here")],
                             lambda: [(a.double() @ b.double()).float()])

    case = core.Case("t", "p", "8^3", 8, torch.float16, [(8, 8, 8)], "ref", setup)
    by = {r.provider: r for r in core.run_case(case, core.TimingSettings(1, 1), None)}
    assert by["ref"].ok
    assert by["broken"].ok is False and by["broken"].rel_err > 0.05
    assert by["unwritten"].ok is False and by["unwritten"].rel_err == math.inf  # NaN poison caught it
    assert by["raises"].ok is False and "ZeroDivisionError" in by["raises"].note
    assert by["absent"].ok is None and by["absent"].time_ms is None and "not here" in by["absent"].note
    assert by["broken"].failed and not by["absent"].failed


def _synthetic_rows(suite, cases, providers, baseline, times, dtype="fp16", panel="fp16"):
    rows = []
    for case, x in cases:
        for p in providers:
            t = times[(case, p)]
            rows.append(core.Row(suite, panel, case, x, dtype, p, baseline, ours=p != baseline, time_ms=t,
                                 tflops=core.tflops(10**12, t), speedup=times[(case, baseline)] / t,
                                 rel_err=1e-4, tol=2e-3, ok=True, flops=10**12, min_bytes=10**9,
                                 baseline_spread=0.01))
    return rows


def test_markdown_targets_plot_and_publish(tmp_path):
    cases = [("4096x4096x4096", 4096), ("8192x8192x8192", 8192)]
    times = {(c, p): t for c, _ in cases for p, t in (("cuBLAS", 1.0), ("grouped", 0.95), ("tma", 1.2))}
    rows = _synthetic_rows("square", cases, ["cuBLAS", "grouped", "tma"], "cuBLAS", times)
    rows[-1].ok, rows[-1].rel_err = False, 0.5  # a wrong cell must say so
    src = tmp_path / "run"
    report.write_csv(rows, src / "square.csv")
    report.update_meta(src, "square", {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-22", "torch": "2.x",
                                       "triton": "3.x", "command": "python -m gemm_kernels.bench"})
    back = report.read_csv(src / "square.csv")
    assert back[1]["time_ms"] == pytest.approx(0.95) and back[0]["ours"] is False and back[1]["ours"] is True
    md = report.render_markdown(src)
    section = results.extract_section(md, "square")
    assert "**1.05x**" in section and "WRONG" in section
    assert "grouped, 1.05x" in section  # best of ours
    targets = {t["target"]: t for t in report.targets({"square": back})}
    assert targets["square fp16 4096^3"]["status"] == "met"
    assert targets["square bf16 4096^3"]["status"] == "not measured"
    assert targets["moe grouped_mm vs torch._grouped_mm"]["status"] == "not measured"
    png = report.plot_suite("square", back, src / "square.png", "test", 989.4)
    assert png is not None and png.stat().st_size > 1000

    dest = tmp_path / "images"
    assert report.publish(src, dest) == ["square"]
    found = results.load_committed("square", dest)
    assert found["png"] is not None and "H100" in results.provenance_line(found["meta"])
    assert "WRONG" in found["table"]

    untimed = tmp_path / "cpu"
    rows[0].time_ms = None
    report.write_csv([core.Row("moe", "p", "c", 1, "bf16", "x", "x", ok=True, rel_err=0.0, tol=1.0)],
                     untimed / "moe.csv")
    with pytest.raises(ValueError, match="no timings"):
        report.publish(untimed, dest)


def _published_run(tmp_path, meta=True):
    """A timed square suite in ``tmp_path/run`` (with its meta.json entry unless ``meta`` is False)."""
    cases = [("4096x4096x4096", 4096)]
    rows = _synthetic_rows("square", cases, ["cuBLAS", "grouped"], "cuBLAS",
                           {(cases[0][0], "cuBLAS"): 1.0, (cases[0][0], "grouped"): 0.9})
    src = tmp_path / "run"
    report.write_csv(rows, src / "square.csv")
    if meta:
        report.update_meta(src, "square", {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-22", "torch": "2.x",
                                           "triton": "3.x", "command": "python -m gemm_kernels.bench"})
    return src


@pytest.mark.parametrize("entry, what", [
    (None, "no entry"), ({}, "no 'device'"),
    ({"device": 5, "date": "d", "torch": "t", "triton": "t", "command": "c"}, "'device' is 5"),
    ({"device": "g", "date": [1], "torch": "t", "triton": "t", "command": "c"}, "'date' is"),
    ({"device": "g", "date": "d", "torch": "t", "triton": "t", "command": "c", "dtypes": "fp16"}, "'dtypes' is")])
def test_publish_refuses_rows_without_their_provenance(tmp_path, entry, what):
    """Adversarial round 7: a suite with no meta.json entry was published under the destination's
    old entry (new numbers, an old GPU and date); a hand-edited entry overwrote a good one."""
    src = _published_run(tmp_path, meta=False)
    if entry is not None:
        report.update_meta(src, "square", entry)
    dest = _published_run(tmp_path / "committed")  # a good earlier publication
    before = (dest / "square.csv").read_text(), (dest / "meta.json").read_text()
    with pytest.raises(ValueError, match=f"square's entry: {re.escape(what)}"):
        report.publish(src, dest)
    assert ((dest / "square.csv").read_text(), (dest / "meta.json").read_text()) == before


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf"])
def test_publish_refuses_a_time_that_is_no_positive_number(tmp_path, value):
    src = _published_run(tmp_path)
    path = src / "square.csv"
    rows = report.read_csv(path)
    rows[1]["time_ms"] = float(value)
    report.write_dict_csv(rows, path)
    with pytest.raises(ValueError, match="time_ms = .* not a positive number"):
        report.publish(src, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_publish_names_a_missing_empty_or_same_directory(tmp_path, capsys, monkeypatch):
    import gemm_kernels.bench as bench

    main = bench.main
    dest = tmp_path / "committed"
    monkeypatch.setattr(bench, "BENCH_DIR", dest)  # read at import: never the repository's copy
    empty = tmp_path / "empty"
    empty.mkdir()
    src = _published_run(tmp_path)
    for argv, said in (([str(tmp_path / "typo")], "is not a directory of results"),
                       ([str(empty)], "holds no suite's results"),
                       ([str(src / "square.csv")], "is not a directory of results")):
        assert main(["--publish", *argv]) == 2
        assert said in capsys.readouterr().out
    assert main(["--publish", str(src)]) == 0
    assert main(["--publish", str(dest)]) == 2
    assert "is where results are published" in capsys.readouterr().out
    (tmp_path / "a_file").write_text("")
    monkeypatch.setattr(bench, "BENCH_DIR", tmp_path / "a_file")
    assert main(["--publish", str(src)]) == 2
    assert "is not a directory: results are published into one" in capsys.readouterr().out


def test_a_folder_where_meta_json_should_be_is_named_before_anything_is_copied(tmp_path):
    src = _published_run(tmp_path)
    dest = tmp_path / "dest"
    (dest / "meta.json").mkdir(parents=True)
    with pytest.raises(ValueError, match="meta.json is corrupt .not a readable file"):
        report.publish(src, dest)
    assert not (dest / "square.csv").exists()


@pytest.mark.parametrize("edit, what", [
    ({"shard": [0]}, "'shard' is [0]"), ({"shard": [0.0, 2.0]}, "'shard' is [0.0, 2.0]"),
    ({"shard": 5}, "'shard' is 5"), ({"shard": [-1, 2]}, "'shard' is [-1, 2]"),
    ({"date": None}, "'date' is None"), ({"elapsed_s": "10"}, "'elapsed_s' is '10'"),
    ({"dtypes": "fp16"}, "'dtypes' is 'fp16'"), ({"command": 3}, "'command' is 3"),
    ({"shard": [0, 10**12]}, "'shard' is [0, 1000000000000]"), ({"elapsed_s": 10**400}, "'elapsed_s' is 1000"),
    ({"elapsed_s": -5}, "'elapsed_s' is -5"), ({"resumed": -3}, "'resumed' is -3")])
def test_a_hand_edited_shard_entry_is_named(tmp_path, edit, what):
    """Adversarial round 7: merge_shards read shard entries unchecked (IndexError, KeyError,
    TypeError, or dtypes 'fp16' published as four one-letter dtypes)."""
    for i in range(2):
        src = _published_run(tmp_path / f"s{i}")
        info = {"device": "g", "date": "2026-12-08", "torch": "t", "triton": "t", "command": f"shard {i}",
                "shard": [i, 2], "elapsed_s": 1.0, "dtypes": ["fp16"]}
        report.update_meta(src, "square", {**info, **(edit if i == 0 else {})})
    with pytest.raises(ValueError, match=re.escape(what)):
        report.merge_shards([tmp_path / "s0" / "run", tmp_path / "s1" / "run"], "square")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_suite_csv_in_out_is_named_not_waited_on(tmp_path, capsys):
    """Adversarial round 7: the CSV reader opened it and waited for a writer forever."""
    os.mkfifo(tmp_path / "square.csv")
    assert _quick("--suite", "order", "--out", tmp_path) == 2
    assert f"{tmp_path / 'square.csv'} is a FIFO" in capsys.readouterr().out


def test_all_with_a_typo_names_the_typo(capsys):
    from gemm_kernels.bench import main

    with pytest.raises(SystemExit):
        main(["--suite", "all,bogus", "--list"])
    assert "unknown suite bogus" in capsys.readouterr().err


def test_an_out_under_a_file_is_a_usage_error(tmp_path, capsys):
    from gemm_kernels.bench import main

    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit):
        main(["--quick", "--suite", "order", "--out", str(tmp_path / "a_file" / "sub")])
    assert "is not a directory" in capsys.readouterr().err


def test_moe_targets_geomean_and_floor():
    times = {}
    cases = [("a", 1), ("b", 2)]
    for (c, _), ours in zip(cases, (0.8, 1.1)):
        times[(c, "torch._grouped_mm")] = 1.0
        times[(c, "grouped_mm")] = ours
    dict_rows = [r.as_dict() | {"ours": r.ours} for r in
                 _synthetic_rows("moe", cases, ["torch._grouped_mm", "grouped_mm"], "torch._grouped_mm", times)]
    t = {x["target"]: x for x in report.targets({"moe": dict_rows})}["moe grouped_mm vs torch._grouped_mm"]
    assert "geomean 1.066x" in t["measured"] and "min 0.909x" in t["measured"]
    assert t["status"] == "MISSED"  # the forward goal is a 1.10x geomean
    for (c, _), ours in zip(cases, (0.85, 0.95)):
        times[(c, "grouped_mm fwd+bwd")] = ours
        times[(c, "torch._grouped_mm fwd+bwd")] = 1.0
    dict_rows = [r.as_dict() | {"ours": r.ours} for r in
                 _synthetic_rows("moe", cases, ["torch._grouped_mm fwd+bwd", "grouped_mm fwd+bwd"],
                                 "torch._grouped_mm fwd+bwd", times)]
    t = {x["target"]: x for x in report.targets({"moe": dict_rows})}["moe grouped_mm fwd+bwd vs torch's fwd+bwd"]
    assert "geomean 1.113x" in t["measured"] and t["status"] == "met"


# ------------------------------------------------------------------------------ results.show_committed


def test_show_committed_names_an_unknown_suite(tmp_path):
    """show_committed("bogus") said "run make bench", as if a real suite had no results yet."""
    with pytest.raises(ValueError, match=r"^unknown suite: bogus \(known: square, order, .*\)$"):
        results.show_committed("bogus", tmp_path)
    with pytest.raises(ValueError, match=r"known: .*moe, llm, llm-linear, fp8, fp8-moe, host, decode, nn-linear, l2\)$"):
        results.show_committed("L2", tmp_path)
    assert results.show_committed("l2", tmp_path) is None  # known, nothing committed in tmp_path


def test_show_committed_without_results_says_how_to_make_them(tmp_path, capsys):
    assert results.show_committed("square", tmp_path) is None
    assert "no committed GPU results for square yet; run `make bench` on a GPU" in capsys.readouterr().out


def test_show_committed_prints_provenance_and_table(tmp_path, capsys):
    (tmp_path / "results.md").write_text("# R\n\n## square\n\n| a |\n|---|\n| 1 |\n\n## moe\n\nother\n")
    (tmp_path / "meta.json").write_text(json.dumps({"suites": {"square": {
        "device": "NVIDIA H100 80GB HBM3", "date": "2026-11-22", "torch": "2.11", "triton": "3.6"}}}))
    found = results.show_committed("square", tmp_path)
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3, 2026-11-22, torch 2.11, triton 3.6" in out
    assert "| 1 |" in out and "other" not in out
    assert found["png"] is None and found["table"].startswith("| a |")


# ------------------------------------------------------------------------------ the seed's kernels


def test_extract_code_cuts_prose_and_footer():
    page = "Group GEMM\nSome prose.\n  N cuBLAS\n# Copyright (c) someone\nimport math\nx = 1\n\n" \
           "Total running time of the script: 1 s\nGallery generated by Sphinx-Gallery\n"
    code = seed.extract_code(page)
    assert code.startswith("# Copyright") and "x = 1" in code
    assert "prose" not in code and "Total running time" not in code
    with pytest.raises(seed.SeedError):
        seed.extract_code("only prose here\n")


def test_keep_definitions_drops_module_level_runs():
    code = ("import torch\nN = 3\nCFG = [1, 2]\n\n@deco(CFG)\ndef f(x):\n    y = x\n    return y + N\n\n"
            "def num_sms():\n    return 1\n\nz = f(2)\nprint(z)\nfor i in range(3):\n    pass\n")
    kept, dropped = seed.keep_definitions(code)
    assert len(kept.splitlines()) == len(code.splitlines())  # line numbers preserved
    assert "def f" in kept and "N = 3" in kept and "CFG = [1, 2]" in kept and "@deco(CFG)" in kept
    assert "z = f(2)" not in kept and "print" not in kept and "for i" not in kept
    assert "def num_sms" not in kept  # shimmed with gemm_kernels.runtime
    assert len(dropped) == 4


@pytest.mark.skipif(not SEED_PAGE.is_file(), reason=f"seed page not present at {SEED_PAGE}")
def test_seed_page_loads_patched_and_its_kernels_compute_the_product():
    page = SEED_PAGE.read_text()
    code = seed.extract_code(page)
    assert "def grouped_matmul_tma_kernel" in code and "benchmark_batches.run" in code
    patched, fixed = seed.patch_autotune_key(code)
    assert fixed == 1 and seed.KEY_TYPO not in patched
    kept, _ = seed.keep_definitions(patched)
    assert "tma_configs = [" in kept and "benchmark_batches.run(" not in kept and "tri_out = " not in kept
    kernels = seed.load_seed_kernels(SEED_PAGE)
    assert any("gropup_c_ptrs" in n for n in kernels.notes)
    gen = torch.Generator().manual_seed(3)
    a = [torch.randn(32, 64, generator=gen).half().to(runtime.DEVICE) for _ in range(2)]
    b = [torch.randn(64, 32, generator=gen).half().to(runtime.DEVICE) for _ in range(2)]
    for tma in (False, True):
        c = [torch.empty(32, 32, dtype=torch.float16, device=runtime.DEVICE) for _ in a]
        b_in = [t.t().contiguous() for t in b] if tma else b
        _, check = suites._seed_launcher(kernels, tma, a, b_in, c)
        out = check()
        assert core.rel_err_lists(out, [(x.double() @ y.double()).float() for x, y in zip(a, b)]) < 2e-3


def test_missing_seed_page_is_a_clear_error(tmp_path):
    with pytest.raises(seed.SeedError, match="no such file"):
        seed.find_seed_tutorial(tmp_path / "nope.txt", ROOT)


# ------------------------------------------------------------------------------ L2 counters


NCU_CSV = '''==PROF== Connected to process 123
L2WORKER_JSON {"ok": true}
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","123","python","h","_matmul_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","1,456.25"
"0","123","python","h","_matmul_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sector_hit_rate.pct","%","88.5"
"0","123","python","h","_matmul_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sectors_op_read_lookup_hit.sum","sector","900"
"0","123","python","h","_matmul_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sectors_op_read_lookup_miss.sum","sector","100"
"1","123","python","h","_matmul_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","5"
'''


def test_parse_ncu_csv_units_separators_and_first_kernel():
    m = l2.parse_ncu_csv(NCU_CSV)
    assert m["dram__bytes_read.sum"] == pytest.approx(1456.25e6)  # Mbyte, thousands separator, first kernel
    assert m["lts__t_sector_hit_rate.pct"] == 88.5
    row = l2.make_row(8192, 8192, 8192, "grouped", {"programs_in_flight": 132, "model_hit_rate_pct": 91.5,
                      "model_dram_read_bytes": 1.4e9, "compulsory_read_bytes": 2.7e8, "model_waves": 32}, m, {})
    assert row["hw_read_hit_rate_pct"] == pytest.approx(90.0)  # hits / (hits + misses)
    assert l2.disagreements([row]) == []
    row["hw_read_hit_rate_pct"] = 60.0
    assert "hit rate measured 60.0% vs model 91.5%" in l2.disagreements([row])[0]
    with pytest.raises(ValueError):
        l2.parse_ncu_csv("==PROF== nothing\n")


def test_programs_per_sm_limits():
    # 128x128x64 fp16, 3 stages: ~96 KiB shared, 8 warps; registers decide at 168/thread
    assert l2.programs_per_sm(n_regs=168, shared_bytes=98304, num_warps=8) == 1
    assert l2.programs_per_sm(n_regs=96, shared_bytes=98304, num_warps=8) == 2   # shared memory: 2 x 97 KiB
    assert l2.programs_per_sm(n_regs=32, shared_bytes=0, num_warps=4) == 16     # warps: 64 / 4


def test_l2_worker_and_model_agree_on_shape(capsys):
    info = l2.worker(64, 96, 64, "grouped", dict(l2.CONFIG, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    assert info["ok"] and info["rel_err"] < 2e-3
    m = l2.model_prediction(8192, 8192, 8192, "row_major", 132, 50 * 2**20)
    g = l2.model_prediction(8192, 8192, 8192, "grouped", 132, 50 * 2**20)
    assert g["model_hit_rate_pct"] > m["model_hit_rate_pct"]  # the point of grouped order
    assert g["model_dram_read_bytes"] >= g["compulsory_read_bytes"]
    cmd = l2.ncu_command("ncu", "/tmp/x.csv", ["--M", "1"])
    assert cmd[:5] == ["ncu", "--clock-control", "base", "--metrics", ",".join(l2.METRICS)]
    assert "regex:_matmul_kernel" in cmd
    assert l2.ncu_command("ncu", "/tmp/x.csv", [], clock_control="none")[1:3] == ["--clock-control", "none"]
    assert cmd[-4:] == ["gemm_kernels.bench.l2", "--worker", "--M", "1"]


FAKE_NCU = '''#!{python}
"""Stands in for ncu: runs the profiled command, writes a CSV like ncu --csv --log-file."""
import subprocess, sys
args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
app = args[args.index("--log-file") + 2:]
proc = subprocess.run(app, capture_output=True, text=True)
sys.stdout.write(proc.stdout)
head = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
rows = ['"0","_matmul_kernel","{{}}","{{}}","{{}}"'.format(*m) for m in (
    ("dram__bytes_read.sum", "Kbyte", "120"), ("lts__t_sector_hit_rate.pct", "%", "75.5"))]
open(log, "w").write("\\n".join([head] + rows) + "\\n")
sys.exit(proc.returncode)
'''


def test_run_under_ncu_drives_the_worker_and_reads_the_log(tmp_path):
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    run = l2.run_under_ncu(str(ncu), 64, 96, 64, "grouped", timeout_s=200)
    assert run.metrics["dram__bytes_read.sum"] == pytest.approx(120e3)
    assert run.worker["ok"] and run.worker["M"] == 64 and run.worker["order"] == "grouped"
    assert run.worker["programs_per_sm"] >= 1


def test_median_ms_times_cuda_graph_suites_without_launch_overhead(monkeypatch):
    """core.median_ms: do_bench (L2 flushed) by default, do_bench_cudagraph for CUDA_GRAPH_SUITES."""
    import triton.testing

    from gemm_kernels.bench import core

    calls = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup=25, rep=100, return_mode="mean": calls.append(
        ("do_bench", {"warmup": warmup, "rep": rep, "return_mode": return_mode})) or 2.0)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph",
                        lambda fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean":
                        calls.append(("graph", {"rep": rep, "return_mode": return_mode})) or 1.0)
    settings = core.TimingSettings(warmup_ms=7, rep_ms=9, rounds=1)
    assert core.median_ms(lambda: None, settings) == 2.0
    assert core.median_ms(lambda: None, settings, cuda_graph=True) == 1.0
    assert calls == [("do_bench", {"warmup": 7, "rep": 9, "return_mode": "median"}),
                     ("graph", {"rep": 9, "return_mode": "median"})]
    cases = suites.SUITES["stream-k"](suites.SuiteSettings(size_override="full"))
    assert cases and all(c.cuda_graph for c in cases)
    assert not any(c.cuda_graph for c in suites.SUITES["square"](suites.SuiteSettings(size_override="full")))


# ------------------------------------------------------------------------------ which vendor kernel


@pytest.mark.parametrize("raw, short", [
    ("nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_NNT", "nvjet_sm90_hsh_128x64_64x8_1x2_h_bz_NNT"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::gelu_kernel"
     "(at::TensorIteratorBase&)::{lambda()#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)",
     "at::native::vectorized_elementwise_kernel"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_f16_64x64_32x6_tn_align8>"
     "(cutlass_80_tensorop_s16816gemm_f16_64x64_32x6_tn_align8::Params)",
     "cutlass_80_tensorop_s16816gemm_f16_64x64_32x6_tn_align8"),
    ("_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalI"
     "NS5_40KernelPtrArrayTmaWarpSpecializedPingpongEEENS9_4SM904GMMA28MMA_64x128x16_F32BF16BF16_SSILNSW_5MajorE0E",
     "cutlass GemmUniversal (KernelPtrArrayTmaWarpSpecializedPingpong, MMA_64x128x16_F32BF16BF16_SS)"),
])
def test_short_kernel_name_keeps_what_names_the_kernel(raw, short):
    assert core.short_kernel_name(raw) == short
    assert core.short_kernel_name(short) == short  # idempotent: merging short names again changes nothing


def test_vendor_kernel_label_orders_and_counts_repeats():
    assert core.vendor_kernel_label([]) == ""
    assert core.vendor_kernel_label(["nvjet_a_splitK", "void cublasLt::splitKreduce_kernel<float>(int)"]) == \
        "nvjet_a_splitK + cublasLt::splitKreduce_kernel"
    assert core.vendor_kernel_label(["nvjet_b"] * 4) == "nvjet_b x4"


@pytest.mark.skipif(runtime.on_gpu(), reason="the CPU answer; the GPU profiles for real (bench runs)")
def test_vendor_kernel_is_empty_off_the_gpu():
    assert core.vendor_kernel_of(lambda: None) == ""


def test_run_case_names_the_baselines_kernel_only(fake_timer, monkeypatch):
    monkeypatch.setattr(core, "vendor_kernel_of", lambda fn: "nvjet_fake_128x64")
    case = suites.square_suite(suites.SuiteSettings(dtype=torch.float16))[0]
    rows = core.run_case(case, core.TimingSettings(1, 1, rounds=1), peak=None)
    named = {r.provider: r.vendor_kernel for r in rows if r.vendor_kernel}
    assert named == {"cuBLAS": "nvjet_fake_128x64"}
    untimed = core.run_case(case, None, peak=None)  # correctness-only runs profile nothing
    assert not any(r.vendor_kernel for r in untimed)


def test_vendor_kernel_merge_fills_the_csv_meta_and_table(tmp_path):
    from gemm_kernels.bench import vendor_kernels

    cases = [("4096x4096x4096", 4096)]
    times = {("4096x4096x4096", p): t for p, t in (("cuBLAS", 1.0), ("tma", 0.98))}
    bench_dir = tmp_path / "bench"
    report.write_csv(_synthetic_rows("square", cases, ["cuBLAS", "tma"], "cuBLAS", times), bench_dir / "square.csv")
    report.update_meta(bench_dir, "square", {"device": "NVIDIA H100 80GB HBM3", "date": "d"})
    before = report.read_csv(bench_dir / "square.csv")
    assert all(r["vendor_kernel"] == "" for r in before)
    names = tmp_path / "vendor_kernels.csv"
    vendor_kernels.write([{"suite": "square", "case": "4096x4096x4096", "dtype": "fp16", "provider": "cuBLAS",
                           "vendor_kernel": "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT"}], names)
    filled = vendor_kernels.merge(names, bench_dir, {"device": "NVIDIA H100", "date": "d2"})
    assert filled == {"square": 1}
    after = report.read_csv(bench_dir / "square.csv")
    assert [r["vendor_kernel"] for r in after] == ["nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", ""]
    for key in ("time_ms", "speedup", "rel_err", "ok"):  # the timings stay as measured
        assert [r[key] for r in after] == [r[key] for r in before]
    assert report.read_meta(bench_dir)["suites"]["square"]["vendor_kernel"]["device"] == "NVIDIA H100"
    section = results.extract_section((bench_dir / "results.md").read_text(), "square")
    assert "cuBLAS ran" in section and "`nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT`" in section


# ------------------------------------------------------------------------------ Nsight Compute counters


def test_counters_parse_every_kernel_of_a_call_and_write_tables(tmp_path):
    from gemm_kernels.bench import counters

    text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
        '"0","1","python","h","nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN","1","7","(384, 1, 1)","(132, 1, 1)",'
        '"0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","1,234,567"',
        '"0","1","python","h","nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN","1","7","(384, 1, 1)","(132, 1, 1)",'
        '"0","9.0","Command line profiler metrics","sm__cycles_active.max","cycle","2000"',
        '"1","1","python","h","_assert_async_cuda_kernel","1","7","(1, 1, 1)","(1, 1, 1)",'
        '"0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","1500"',
        "program output in between",
    ])
    kernels = counters.parse_ncu_kernels(text)
    assert [k["kernel"] for k in kernels] == ["nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN", "_assert_async_cuda_kernel"]
    assert kernels[0]["gpu__time_duration.sum"] == 1234567.0 and kernels[0]["sm__cycles_active.max"] == 2000.0
    assert "sm__cycles_active.max" not in kernels[1]
    rows = [{"case": "c", "provider": p, **k} for p, k in zip(("cuBLAS", "grouped_mm"), kernels)]
    metrics = ["gpu__time_duration.sum", "sm__cycles_active.max"]
    counters.write_outputs(rows, metrics, tmp_path, ["header"])
    md = (tmp_path / "counters.md").read_text()
    assert "| c | cuBLAS | `nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNN` | 1.235e+06 | 2000 |" in md
    back = list(__import__("csv").DictReader((tmp_path / "counters.csv").open()))
    assert back[1]["kernel"] == "_assert_async_cuda_kernel" and back[1]["sm__cycles_active.max"] == ""


def test_counters_cases_and_providers_are_checked():
    from gemm_kernels.bench import counters

    assert len({c.name for c in counters.CASES}) == len(counters.CASES)
    with pytest.raises(ValueError, match="unknown counters case 'nope'; choose from: square 8192"):
        counters.case_named("nope")
    with pytest.raises(ValueError, match="has no provider 'cuBLAS'; it has torch._grouped_mm, grouped_mm"):
        counters.build_call(counters.case_named("moe Mixtral-8x7B up T=4096 uniform"), "cuBLAS")
    if not runtime.on_gpu():
        assert counters.main(["--out", "unused"]) == 2


def test_committed_counters_table_derives_idle_share_and_cluster(tmp_path):
    from gemm_kernels.results import counters_rows, counters_table

    with (tmp_path / "counters.csv").open("w") as f:
        f.write("case,provider,kernel,gpu__time_duration.sum,"
                "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,"
                "sm__cycles_active.max,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,"
                "launch__cluster_dim_x,launch__cluster_dim_y\n"
                "sq 1,cuBLAS,nvjet_x(int),2000000,93.5,970,1000,18,70,2,1\n"
                "sq 1,ws,void _k(int),1500000,90,750,1000,20,75,0,0\n"
                "moe 1,grouped_mm,_k,10,,,,,,,\n")
    rows = counters_rows("sq", tmp_path)
    assert [r["provider"] for r in rows] == ["cuBLAS", "ws"]
    assert rows[0]["µs"] == 2000.0 and rows[0]["idle %"] == pytest.approx(3.0) and rows[0]["cluster"] == "2x1"
    assert rows[1]["idle %"] == pytest.approx(25.0) and rows[1]["cluster"] == "none"
    text = counters_table("sq", tmp_path)
    assert "nvjet_x" in text and "_k" in text and "(int)" not in text and "void" not in text
    assert counters_rows("moe", tmp_path)[0]["idle %"] is None  # a row without the counters stays blank
    assert "no committed counters" in counters_table("nothing", tmp_path)
    # the committed run has the vendor kernel beside ours for every case
    committed = counters_rows()
    for case in {r["case"] for r in committed}:
        assert len({r["provider"] for r in committed if r["case"] == case}) >= 2, case


FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *-lms*) echo "1755, 455.20, 0x0000000000000000"; echo "[N/A], [N/A], [N/A]";
          echo "1605, 690.1, 0x0000000000000004"; echo "1590, 700.0, 0x0000000000000004";
          echo "345, 80.0, 0x0000000000000001"; sleep 30;;
  *) echo "1980 MHz, 75.00 W, 0x0000000000000001";;
esac
"""


def test_clock_sampler_reads_nvidia_smi_lines(tmp_path, monkeypatch):
    """bench.clocks: the sampler parses nvidia-smi's CSV lines (skipping unreadable ones), stops
    the poller on exit, and the clock-event bitmask is named; the idle samples are dropped."""
    import os
    import time

    from gemm_kernels.bench import clocks

    fake = tmp_path / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sampler = clocks.ClockSampler("0", period_ms=10)
    assert "clocks_throttle_reasons.active" in sampler.command[3]
    with sampler:
        deadline = time.time() + 10
        while len(sampler.samples) < 4 and time.time() < deadline:
            time.sleep(0.05)
    assert sampler.samples == [(1755.0, 455.2, 0), (1605.0, 690.1, 4), (1590.0, 700.0, 4), (345.0, 80.0, 1)]
    assert clocks.reasons_named(0x4) == "sw power cap" and clocks.reasons_named(0) == "none"
    assert clocks.reasons_named(0x84) == "sw power cap+hw power brake"


def test_clocks_refuses_unknown_cases_and_runs_only_on_a_gpu():
    from gemm_kernels.bench import clocks

    with pytest.raises(ValueError, match="unknown counters case 'nope'"):
        clocks.main(["--case", "square 8192^3 bf16", "--case", "nope"])
    if not runtime.on_gpu():
        with pytest.raises(SystemExit, match="on a CUDA GPU"):
            clocks.main(["--case", "square 8192^3 bf16"])


def test_counters_name_any_moe_suite_row():
    """counters/clocks take any moe suite row as 'moe <case label>', and refuse near misses."""
    from gemm_kernels.bench import counters

    case = counters.case_named("moe gpt-oss-120b down T=4096 skewed fwd+bwd")
    assert case.shape == ("gpt-oss-120b", "down", 4096, "skewed", "fwd+bwd") and case.kind == "moe"
    assert counters.case_named("moe Mixtral-8x7B up T=37 uniform").shape[2:] == (37, "uniform", "fwd")
    for bad in ("moe Mixtral-8x7B sideways T=512 uniform", "moe Nope-1B up T=512 uniform", "moe Mixtral-8x7B up T=0 uniform",
                "moe Mixtral-8x7B up T=512 uniform fwd", "moe Mixtral-8x7B up 512 uniform"):
        with pytest.raises(ValueError, match="or any moe suite row"):
            counters.case_named(bad)


def test_moe_configs_candidates_each_compute_the_product():
    """bench.moe_configs: every candidate launch (each config, offs check compiled in or not)
    writes the right rows; the autotuner's pick is marked; only forward moe rows are taken."""
    from gemm_kernels.bench import moe_configs
    from gemm_kernels.testing import assert_close

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(37, 32, generator=gen).to(gk.DEVICE, torch.bfloat16)
    w = torch.randn(4, 48, 32, generator=gen).to(gk.DEVICE, torch.bfloat16).transpose(1, 2)
    offs = torch.tensor([5, 5, 20, 30], dtype=torch.int32, device=gk.DEVICE)
    launches, picked, out = moe_configs.candidates(x, w, offs)
    names = [name for name, _ in launches]
    assert names[-1] == "torch._grouped_mm" and sum("(picked)" in n for n in names) == 2
    assert {n.rsplit(" ", 1)[1] for n in names[:-1]} == {"checked", "unchecked"} and picked is not None
    ref = gk.grouped_mm_ref(x, w, offs, out_dtype=torch.float64)
    for name, launch in launches[:-1]:
        out.fill_(float("nan"))
        launch()
        assert_close(out, ref, torch.bfloat16, what=name)  # the tail rows (offs[-1] < T) too: zeros
    with pytest.raises(ValueError, match="not a forward moe row"):
        moe_configs.measure("moe OLMoE-1B-7B down T=512 uniform fwd+bwd")
    launches, picked, out = moe_configs.candidates(x, w, offs, picked_only=True, switch="OUT_SHARED_DESC")
    names = [name for name, _ in launches]
    assert len(names) == 5 and all("(picked)" in n for n in names[:-1])
    assert sorted(n.rsplit(" ", 1)[1] for n in names[:-1]) == ["OUT_SHARED_DESC=False", "OUT_SHARED_DESC=False",
                                                                "OUT_SHARED_DESC=True", "OUT_SHARED_DESC=True"]
    for name, launch in launches[:-1]:
        out.fill_(float("nan"))
        launch()
        assert_close(out[:30], ref[:30], torch.bfloat16)


def test_tool_records_quote_their_command(tmp_path):
    """report.write_record: the --json record of clocks, moe_configs and moe_host names the command
    with its arguments quoted (case names hold spaces), the GPU, date and versions, then the fields."""
    path = tmp_path / "r.json"
    report.write_record(path, "clocks", ["--case", "moe Mixtral-8x7B up T=512 uniform", "--json", "r.json"],
                        rows=[{"us": 1.0}], timing="do_bench median")
    record = json.loads(path.read_text())
    assert record["command"] == "python -m gemm_kernels.bench.clocks --case 'moe Mixtral-8x7B up T=512 uniform' --json r.json"
    assert record["rows"] == [{"us": 1.0}] and record["timing"] == "do_bench median"
    assert {"device", "date", "torch", "triton"} <= set(record)


# ------------------------------------------------------------------------------ corrupt, cut and atomic outputs


def _full_quick_run(out):
    """A complete quick stream-k run (2 cases of 5 rows) in ``out``; returns its case order."""
    assert _quick("--suite", "stream-k", "--out", out) == 0
    return _case_order(report.read_csv(out / "stream-k.csv"))


def _meta_entry(out):
    return json.loads((out / "meta.json").read_text())["suites"]["stream-k"]


def _write_entry(out, **changes):
    meta = json.loads((out / "meta.json").read_text())
    entry = meta["suites"]["stream-k"]
    entry.update(changes)
    for key in [k for k, v in changes.items() if v is _DROP]:
        del entry[key]
    (out / "meta.json").write_text(json.dumps(meta))


_DROP = object()


def _read_raw(path):
    with open(path, newline="") as f:
        return f.read()


def _write_raw(path, text):
    with open(path, "w", newline="") as f:
        f.write(text)


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
@pytest.mark.parametrize("text, what", [
    ("{not json", "not JSON"),
    ("[]", "suites"),
    ('{"suites": []}', "suites"),
    ('{"suites": {"stream-k": "fast"}}', "stream-k"),
])
def test_resume_over_a_corrupt_meta_json_names_it(tmp_path, capsys, text, what):
    """--resume over a meta.json that is not JSON, or not {"suites": {suite: {...}}}, gave a traceback."""
    out = tmp_path / "run"
    _full_quick_run(out)
    (out / "meta.json").write_text(text)
    capsys.readouterr()
    assert _quick("--suite", "stream-k", "--resume", "--out", out) == 2
    said = capsys.readouterr().out
    assert f"error: {out / 'meta.json'} is corrupt" in said and what in said and "delete it" in said
    assert (out / "meta.json").read_text() == text  # nothing overwritten


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
@pytest.mark.parametrize("changes, what", [
    ({"device": _DROP}, "no 'device'"),
    ({"timing": "fast"}, "'timing'"),
    ({"elapsed_s": "long"}, "'elapsed_s'"),
    ({"shard": 3}, "'shard'"),
    ({"resumed": "twice"}, "'resumed'"),
])
def test_resume_over_a_corrupt_meta_entry_names_it(tmp_path, capsys, changes, what):
    """A meta.json entry missing a key or holding a wrong type gave a traceback (or a misleading
    "the earlier run had device = None")."""
    out = tmp_path / "run"
    _full_quick_run(out)
    _write_entry(out, **changes)
    capsys.readouterr()
    assert _quick("--suite", "stream-k", "--resume", "--out", out) == 2
    said = capsys.readouterr().out
    assert f"the stream-k entry of {out / 'meta.json'} is corrupt" in said and what in said
    assert "run without --resume" in said


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
@pytest.mark.parametrize("edit, what", [
    (lambda lines: lines[:3] + [lines[3].replace(",True,", ",True,extra,", 1)] + lines[4:], "line 4: 23 fields"),
    (lambda lines: lines[:2] + [lines[2].replace(",0.000", ",abc0.000", 1)] + lines[3:], "line 3: rel_err"),
    (lambda lines: lines[:5] + [lines[5].replace(",True,cuBLAS,", ",yes,cuBLAS,", 1)] + lines[6:], "line 6: ours"),
    (lambda lines: ["suite,panel,speed\r\n"] + lines[1:], "line 1: the header"),
    (lambda lines: ["\r\n"] + lines[1:], "line 1: the header"),
    (lambda lines: [lines[0].replace(",vendor_kernel", ",x_ms")] + lines[1:], "line 1: the header"),
])
def test_resume_over_a_corrupt_csv_names_the_file_and_line(tmp_path, capsys, edit, what):
    """A malformed row (wrong column count, unparsable number) or header gave a traceback, or
    was kept as a finished case."""
    out = tmp_path / "run"
    _full_quick_run(out)
    csv_path = out / "stream-k.csv"
    lines = _read_raw(csv_path).splitlines(keepends=True)
    _write_raw(csv_path, "".join(edit(lines)))
    with pytest.raises(ValueError, match=rf"{csv_path} is corrupt \({what}"):
        report.read_csv(csv_path, suite_csv=True)
    capsys.readouterr()
    assert _quick("--suite", "stream-k", "--resume", "--out", out) == 2
    said = capsys.readouterr().out
    assert f"error: {csv_path} is corrupt ({what}" in said and "delete it" in said


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
def test_a_corrupt_csv_of_another_suite_is_found_before_the_run(tmp_path, capsys):
    """results.md is rebuilt from every CSV in --out: a corrupt one gave a traceback at the end."""
    out = tmp_path / "run"
    _full_quick_run(out)
    (out / "square.csv").write_text("garbage\r\n1,2\r\n")
    capsys.readouterr()
    assert _quick("--suite", "stream-k", "--out", out) == 2
    said = capsys.readouterr().out
    assert f"error: {out / 'square.csv'} is corrupt" in said and "[stream-k]" not in said


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
@pytest.mark.parametrize("cut", ["mid-row", "after-case-column", "one-field", "cr-only"])
def test_resume_reruns_the_case_of_a_row_cut_mid_write(tmp_path, capsys, cut):
    """A CSV cut in the middle of its last row (killed while writing) was resumed as done: the
    half row counted as a finished case and the case's other providers were never run."""
    out = tmp_path / "run"
    whole = _full_quick_run(out)
    csv_path = out / "stream-k.csv"
    text = _read_raw(csv_path)
    last_start = text.rstrip("\r\n").rfind("\n") + 1
    last = text[last_start:]
    keep = {"mid-row": len(last) // 2, "after-case-column": len("stream-k,fp16,70x40x200,"),
            "one-field": len("stream-k,f"), "cr-only": len(last) - 1}[cut]
    _write_raw(csv_path, text[:last_start + keep])
    line = text[:last_start].count("\n") + 1
    with pytest.raises(ValueError, match=rf"{csv_path} is corrupt \(line {line}: cut off"):
        report.read_csv(csv_path)  # only --resume drops a cut case
    capsys.readouterr()
    assert _quick("--suite", "stream-k", "--resume", "--out", out) == 0
    said = capsys.readouterr().out
    assert "the last row of" in said and "was cut off" in said and "resuming: 1 cases kept" in said
    resumed = report.read_csv(csv_path)
    assert _case_order(resumed) == whole
    assert resumed[-1]["note"].startswith("sk_tiles=2")


@pytest.mark.skipif(runtime.on_gpu(), reason="quick CPU runs")
@pytest.mark.parametrize("cut", ["empty", "in-header"])
def test_resume_over_a_csv_cut_before_its_first_row_runs_every_case(tmp_path, capsys, cut):
    """A CSV emptied (the old writer truncated it first) or cut in its header: nothing was kept."""
    out = tmp_path / "run"
    whole = _full_quick_run(out)
    csv_path = out / "stream-k.csv"
    _write_raw(csv_path, {"empty": "", "in-header": "suite,panel,ca"}[cut])
    with pytest.raises(ValueError, match=rf"{csv_path} is corrupt \({'empty' if cut == 'empty' else 'line 1: cut off'}"):
        report.read_csv(csv_path)
    capsys.readouterr()
    assert _quick("--suite", "stream-k", "--resume", "--out", out) == 0
    said = capsys.readouterr().out
    assert "was cut off before its first row: every case runs again" in said and "resuming: 0 cases kept" in said
    assert _case_order(report.read_csv(csv_path)) == whole


class _Unwritable:
    """A row whose cells cannot be formatted: the write fails half-way through the file."""

    def as_dict(self):
        raise RuntimeError("killed mid-write")


def _row(**kw):
    return core.Row("square", "fp16", "c", 1, "fp16", "tma", "cuBLAS", ok=True, rel_err=0.0, tol=1.0, **kw)


def test_write_csv_failing_half_way_keeps_the_old_file(tmp_path):
    """write_csv truncated the CSV first: a write killed half-way lost the rows already measured."""
    path = tmp_path / "square.csv"
    report.write_csv([_row()], path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="killed mid-write"):
        report.write_csv([_row(), _row(), _Unwritable()], path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["square.csv"]  # no temporary left behind


def test_write_record_failing_half_way_keeps_the_old_file(tmp_path):
    path = tmp_path / "r.json"
    report.write_record(path, "clocks", [], rows=[1])
    before = path.read_bytes()
    with pytest.raises(TypeError):
        report.write_record(path, "clocks", [], rows=[1], bad=object())  # json.dump fails mid-file
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize("writer", ["write_csv", "write_dict_csv", "update_meta", "write_record", "render_markdown",
                                    "l2.write_outputs", "counters.write_outputs", "vendor_kernels.write"])
def test_result_files_are_replaced_atomically(tmp_path, monkeypatch, writer):
    """Every result file is written to a temporary in the same directory, flushed and fsync'ed,
    then renamed over the old one: a kill at any moment leaves the old file or the new one."""
    from gemm_kernels.bench import counters, vendor_kernels

    target, write = {
        "write_csv": ("square.csv", lambda: report.write_csv([_row()], tmp_path / "square.csv")),
        "write_dict_csv": ("square.csv", lambda: report.write_dict_csv([_row().as_dict()], tmp_path / "square.csv")),
        "update_meta": ("meta.json", lambda: report.update_meta(tmp_path, "square", {"device": "x"})),
        "write_record": ("r.json", lambda: report.write_record(tmp_path / "r.json", "clocks", [], rows=[])),
        "render_markdown": ("results.md", lambda: report.render_markdown(tmp_path)),
        "l2.write_outputs": ("l2.csv", lambda: l2.write_outputs([], tmp_path, {"device": "x"})),
        "counters.write_outputs": ("counters.csv", lambda: counters.write_outputs([], [], tmp_path, [])),
        "vendor_kernels.write": ("vendor_kernels.csv", lambda: vendor_kernels.write([], tmp_path / "vendor_kernels.csv")),
    }[writer]
    path = tmp_path / target
    if target != "meta.json":
        path.write_text("old")
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        name = os.readlink(f"/proc/self/fd/{fd}")
        synced.append((Path(name), path.read_text() if path.exists() else None))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    if writer == "l2.write_outputs":
        monkeypatch.setattr(l2, "plot_l2", lambda *a, **k: None)
    write()
    mine = [(name, seen) for name, seen in synced if name.parent == tmp_path and name.name.startswith(f".{target}.")]
    assert mine, f"{target} was not written through an fsync'ed temporary beside it: {synced}"
    assert all(seen == (None if target == "meta.json" else "old") for _, seen in mine)  # untouched until renamed
    assert path.read_text() != "old"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------------ numeric options


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "argument --rounds: must be an integer >= 1, got '0'"),
    (["--rounds", "-2"], "argument --rounds: must be an integer >= 1"),
    (["--rounds", "two"], "argument --rounds: must be an integer >= 1, got 'two'"),
    (["--rep", "0"], "argument --rep: must be an integer >= 1"),
    (["--rep", "-100"], "argument --rep: must be an integer >= 1"),
    (["--warmup", "-1"], "argument --warmup: must be an integer >= 0"),
    (["--time-budget", "0"], "argument --time-budget: must be a number > 0"),
    (["--time-budget", "-60"], "argument --time-budget: must be a number > 0"),
    (["--time-budget", "nan"], "argument --time-budget: must be a number > 0"),
    (["--seed", str(2**62)], "argument --seed: must be an integer in -2147483648..2147483647"),
])
def test_bad_numeric_options_are_usage_errors(argv, message, tmp_path, capsys):
    """--rounds -1, --rep 0, --time-budget 0 (no budget at all) or -5 were accepted."""
    from gemm_kernels.bench import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--suite", "order", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before any work


def test_edge_numeric_options_are_accepted():
    from gemm_kernels.bench import build_parser

    args = build_parser().parse_args(["--rounds", "1", "--rep", "1", "--warmup", "0", "--time-budget", "0.5",
                                      "--seed", "-3"])
    assert (args.rounds, args.rep, args.warmup, args.time_budget, args.seed) == (1, 1, 0, 0.5, -3)


@pytest.mark.parametrize("tool, argv, message", [
    ("clocks", ["--rounds", "0"], "argument --rounds: must be an integer >= 1"),
    ("clocks", ["--rep-ms", "-1"], "argument --rep-ms: must be an integer >= 1"),
    ("clocks", ["--period-ms", "0"], "argument --period-ms: must be an integer >= 1"),
    ("moe_configs", ["--case", "x", "--rounds", "-1"], "argument --rounds: must be an integer >= 1"),
    ("moe_configs", ["--case", "x", "--rep-ms", "0"], "argument --rep-ms: must be an integer >= 1"),
    ("l2", ["--model-only", "--programs-per-sm", "0"], "argument --programs-per-sm: must be an integer >= 1"),
    ("l2", ["--worker", "--M", "-4", "--N", "8", "--K", "8"], "argument --M: must be an integer >= 1"),
])
def test_bench_tools_reject_bad_numeric_options(tool, argv, message, capsys):
    import importlib

    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(f"gemm_kernels.bench.{tool}").main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_show_committed_in_a_notebook_folds_the_full_table(monkeypatch):
    """Issue 28: no notebook holds a full suite dump inline: the plot is shown, the table folded."""
    shown = []
    import IPython.display as display

    monkeypatch.setattr(results, "_in_notebook", lambda: True)
    monkeypatch.setattr(display, "display", lambda obj: shown.append(obj))
    found = results.show_committed("stream-k")
    assert found is not None
    (folded,) = [o for o in shown if isinstance(o, display.HTML)]
    assert folded.data.startswith("<details><summary>the full table (") and "<table>" in folded.data
    cases = {r["case"] for r in results.committed_rows("stream-k")}
    assert folded.data.count("<tr>") == len(cases) + 1  # the header, then a row per case
    assert f"the full table ({len(cases)} rows" in folded.data
    assert not any(isinstance(o, display.Markdown) and "|---" in o.data for o in shown)


def test_moe_plot_is_a_heat_map_of_the_committed_speedups(tmp_path):
    """moe's 64 cases are one heat map per pass (a row per model and projection, a column per
    token count), each cell the committed baseline time over the fastest of ours."""
    committed = results._bench_dir()
    rows = report.read_csv(committed / "moe.csv", suite_csv=True)
    passes, labels, xs, best = report.speedup_grid(rows)
    assert passes == ["fwd", "fwd+bwd"] and xs == [512, 4096, 32768]
    assert len(labels) * len(xs) * len(passes) == sum(1 for r in rows if r["provider"] == r["baseline"])
    for r in rows:  # every cell is a real same-case ratio of the CSV's times
        if r["provider"] == "grouped_mm":
            torch_ms = next(b["time_ms"] for b in rows if b["case"] == r["case"] and b["provider"] == r["baseline"])
            label = r["panel"].replace(", fwd)", ")")
            assert best["fwd", label][r["x"]] >= torch_ms / r["time_ms"] * (1 - 1e-4)
    for name in ("moe.csv", "meta.json"):
        shutil.copy(committed / name, tmp_path / name)
    png = report.replot_committed("moe", tmp_path)
    width, height = struct.unpack(">II", png.read_bytes()[16:24])  # the PNG header's size
    assert height < 2000 and width < 2000, (width, height)  # was 64 subplots, 4864 px tall


def test_host_timing_and_profile_of_a_call():
    """``core.host_ms`` times calls back to back; ``core.host_profile`` names where they spend it."""
    import time

    from gemm_kernels.bench import core

    def busy():
        end = time.perf_counter() + 2e-4
        while time.perf_counter() < end:
            pass

    assert 0.2 <= core.host_ms(busy, calls=20) < 50
    lines = core.host_profile(busy, calls=20, top=3)
    assert len(lines) == 3 and any("busy" in line and "1 calls" in line for line in lines), lines


def test_fp8_targets_speed_models_and_accuracy():
    """Issue 31's targets: the two big squares and the geomean per scaling against torch, the
    block-wise geomean, fp8-moe's geomean over >= 6 models, and accuracy no worse than the vendor's."""
    def row(panel, case, provider, baseline, ms, err):
        return {"panel": panel, "case": case, "provider": provider, "baseline": baseline, "time_ms": ms,
                "ok": True, "rel_err": err}

    fp8_rows = []
    for case, ours in (("4096^3", 0.9), ("8192^3", 0.95), ("M=1000", 1.2)):
        for panel in ("tensor", "row"):
            fp8_rows += [row(panel, case, "torch._scaled_mm", "torch._scaled_mm", 1.0, 1e-3),
                         row(panel, case, "scaled_mm", "torch._scaled_mm", ours, 1e-3)]
        fp8_rows += [row("block", case, "torch block-wise", "torch block-wise", 1.0, 1e-3),
                     row("block", case, "scaled_mm", "torch block-wise", 2.0, 2e-3 if case == "M=1000" else 1e-3)]
    moe_rows = [r for m in range(6) for r in (row(f"model{m} up (uniform)", "T=512", "torch._scaled_grouped_mm",
                                                  "torch._scaled_grouped_mm", 1.0, 1e-3),
                                              row(f"model{m} up (uniform)", "T=512", "scaled_grouped_mm",
                                                  "torch._scaled_grouped_mm", 0.9, 1e-3))]
    t = {x["target"]: x for x in report.targets({"fp8": fp8_rows, "fp8-moe": moe_rows})}
    big = t["fp8 scaled_mm tensor-wise 4096^3, 8192^3"]
    assert big["measured"] == "4096^3: 1.111x, 8192^3: 1.053x" and big["status"] == "met"
    every = t["fp8 scaled_mm row-wise, every shape"]
    assert every["measured"].startswith("geomean 0.991x over 3 rows, min 0.833x") and every["status"] == "MISSED"
    assert t["fp8 scaled_mm block-wise"]["status"] == "MISSED"
    moe = t["fp8-moe scaled_grouped_mm"]
    assert moe["measured"] == "geomean 1.111x over 6 rows of 6 models" and moe["status"] == "met"
    accuracy = t["fp8 accuracy"]
    assert accuracy["status"] == "MISSED" and "14 of 15 rows; worse: block M=1000" in accuracy["measured"]
    fewer = {x["target"]: x for x in report.targets({"fp8-moe": moe_rows[:10]})}["fp8-moe scaled_grouped_mm"]
    assert fewer["status"] == "MISSED"  # five models


def test_committed_tables_render_as_tables_with_their_marks():
    """A section with two tables (square: fp16 then bf16) becomes two HTML tables, not one whose
    second header is a data row; **bold** and `code` render instead of showing their marks."""
    from gemm_kernels import results

    text = results.load_committed("square")["table"]
    html = results._markdown_table_html(text)
    assert html.count("<table>") == sum(line.startswith("|---") for line in text.splitlines()) == 2
    assert "**" not in html and "`" not in html
    assert "<b>1.00x</b>" in html and "<code>nvjet_" in html
    assert "<td>case</td>" not in html  # no header row among the data


def test_host_first_call_rows_forget_every_kept_launch_and_stay_in_one_tuning():
    """The host suite's "a new M each call" row: its Ms share the case's launcher and every tuning
    bucket (``configs.row_bucket`` at granule 16 and above); before each timed call every kept
    launch is forgotten (``launches.forget_kept``: each LaunchCache and ``matmul_ws``'s plans), so
    each call is a first call; the check call is the full A's."""
    from gemm_kernels.kernels import configs, dispatch, launches, matmul_ws

    a, b = torch.randn(256, 320), torch.randn(320, 192)
    rows = suites._rows_of_one_tuning(a, b)
    assert rows[-1] == 256 and len(rows) > 8 and rows == list(range(rows[0], 257))
    for granule in (16, 32, 64, 128):
        assert {configs.row_bucket(m, granule) for m in rows} == {configs.row_bucket(256, granule)}
    assert {dispatch.pick_launcher(a[:m], b)[0] for m in rows} == {dispatch.pick_launcher(a, b)[0]}
    assert configs.row_bucket(rows[0] - 1, 16) != configs.row_bucket(256, 16)  # the bucket's first M
    real_pick = dispatch.pick_launcher
    try:  # a launcher that changes inside the bucket (as matmul_ws's line at M = 128 does) cuts the rows
        dispatch.pick_launcher = lambda x, y, *args, **kw: (("matmul_ws" if x.shape[0] >= 240 else "matmul_splitk"), "")
        assert suites._rows_of_one_tuning(a, b) == list(range(240, 257))
    finally:
        dispatch.pick_launcher = real_pick
    with pytest.raises(suites.Skip, match="its bucket's first"):
        suites._first_calls(lambda x, y: x @ y, a, b, [225])

    cache = launches.LaunchCache()
    seen = []

    def call(x, y):
        seen.append((x.shape[0], len(cache), len(matmul_ws._PLANS)))
        cache.keep(("k", x.shape[0]), object())
        matmul_ws._PLANS[("test", x.shape[0])] = object()
        return x @ y

    try:
        fn, check = suites._first_calls(call, a, b, rows)
        seen.clear()  # on a GPU, the pass over every M that compiles outside the timing
        for _ in range(len(rows) + 2):
            fn()
        assert [m for m, *_ in seen] == rows + rows[:2]  # cycling over the bucket's Ms
        assert all(kept == 0 and plans == 0 for _, kept, plans in seen)  # each call found nothing kept
        assert check().shape == (256, 192)
        # what a new M does not miss stays: the tuned picks (by bucket) of every TunedKernel
        from gemm_kernels.kernels import matmul as matmul_module

        tuned = matmul_module._matmul_tuned
        tuned.chosen[("test", "bucket")] = "pick"
        launches.forget_kept()
        assert tuned.chosen.pop(("test", "bucket")) == "pick"
    finally:
        matmul_ws._PLANS.clear()


def test_nn_linear_holds_48_projections_and_keeps_the_committed_rows():
    """Issue 51, item 4: at least 48 projections of at least 8 models, K-heavy ones included, odd
    token counts from 1 to 8191, both layouts; the rows of the committed run (36 projections) keep
    their token counts and layouts, the added models' rows coming after them."""
    import csv

    shapes = suites.nn_linear_shapes("full")
    assert len({(model, name) for model, name, *_ in shapes}) >= 48 and len({s[0] for s in shapes}) >= 8
    assert {m for _, _, m, *_ in shapes} == set(suites.NN_LINEAR_M) and all(m % 2 for m in suites.NN_LINEAR_M)
    assert {row_major for *_, row_major in shapes} == {True, False}
    assert max(k / n for _, _, _, n, k, _ in shapes) > 3  # K-heavy: Llama-3.1-405B's down, K = 53248
    committed = {(r["panel"], r["case"]) for r in csv.DictReader((ROOT / "images/bench/nn-linear.csv").open())}
    ours = {(model, f"{name} M={m}, {'b row-major' if rm else 'b = W.t()'}") for model, name, m, _, _, rm in shapes}
    assert len(committed) == 72 and committed <= ours
    added = {layer.model for layer in suites.NN_LINEAR_LAYERS_ADDED}
    assert [s[0] in added for s in shapes] == [False] * 72 + [True] * (len(shapes) - 72)
