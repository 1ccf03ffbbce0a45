"""``make test-gpu-smoke`` (gemm_kernels.bench.smoke): on a CPU it refuses to run and says why; the
parts of its record that need no GPU (junit counts, the checks' verdict lines) are read right."""

import json
import re

import pytest

from gemm_kernels import runtime
from gemm_kernels.bench import report, smoke


def test_refuses_without_a_gpu(capsys):
    if runtime.on_gpu():
        return
    assert smoke.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_junit_counts(tmp_path):
    junit = tmp_path / "r.xml"
    junit.write_text('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2">'
                     '<testcase classname="t" name="a"/><testcase classname="t" name="b"><failure/></testcase>'
                     '</testsuite></testsuites>')
    assert smoke._counts(junit) == {"passed": 2, "failed": 1, "errors": 0, "skipped": 2, "failing": ["t::b"]}
    assert smoke._counts(tmp_path / "missing.xml")["errors"] == 1


def test_verdict_lines(tmp_path):
    lines = tmp_path / "v.jsonl"
    rows = [{"notebook": "06_grouped_gemm", "check": "find_tile", "answer": "solution", "part": "check",
             "verdict": "correct: ..."},
            {"notebook": "06_grouped_gemm", "check": "find_tile", "answer": "mistake", "part": "gpu_branch",
             "verdict": "problem 1 ..."}]
    lines.write_text("\n".join(map(json.dumps, rows)) + "\nnot json\n")
    assert smoke._verdicts(lines) == {"find_tile": {"notebook": "06_grouped_gemm", "solution": "correct: ...",
                                                    "gpu_branch mistake": "problem 1 ..."}}


def test_commit_from_the_environment(monkeypatch):
    monkeypatch.setenv("GEMM_KERNELS_COMMIT", "abc1234")
    assert report.current_commit() == "abc1234"
    for bad in ("HEAD", "abc", "$(true)", "a" * 41, "abc1234\nx"):
        monkeypatch.setenv("GEMM_KERNELS_COMMIT", bad)
        with pytest.raises(ValueError, match="GEMM_KERNELS_COMMIT"):
            report.current_commit()
    monkeypatch.delenv("GEMM_KERNELS_COMMIT")
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", report.current_commit())


def _committed(name: str) -> dict:
    from gemm_kernels.results import committed_record

    return committed_record(name)


def _committed_commit() -> str | None:
    try:
        return _committed("gpu_smoke").get("commit")
    except Exception:  # noqa: BLE001  (no record: the test itself says so)
        return None


def _notebook_names() -> list[str]:
    from gemm_kernels.bench.notebooks import NOTEBOOKS_DIR

    return sorted(p.name for p in NOTEBOOKS_DIR.glob("*.ipynb"))


def test_committed_smoke_record_covers_every_notebook_check_and_launcher():
    """images/bench/gpu_smoke.json (make test-gpu-smoke on a GPU): every notebook passed, every
    discovered check called its solution correct and refused the learner's mistake, the part only
    a GPU runs too, and every test group passed."""
    import importlib

    record = _committed("gpu_smoke")
    assert record["passed"] and record["mode"] == "default" and ("H100" in record["device"] or "H200" in record["device"])
    assert sorted(r["notebook"] for r in record["notebooks"]) == _notebook_names()
    assert all(r["passed"] for r in record["notebooks"])
    titles = {e.title for e in importlib.import_module("gemm_kernels.lab.progress").exercises()}
    assert set(record["checks"]) == titles
    for title, verdicts in record["checks"].items():
        assert verdicts["solution"].startswith("correct") and verdicts["mistake"].startswith("wrong"), title
        if "gpu_branch solution" in verdicts or "gpu_branch mistake" in verdicts:
            assert verdicts["gpu_branch solution"] == "no problems", title
            assert verdicts["gpu_branch mistake"] != "no problems", title
    assert {t["group"] for t in record["tests"]} == set(smoke.GROUPS)
    assert all(t["passed_all"] and t["passed"] > 0 for t in record["tests"])


def test_committed_records_of_learners_gpus():
    """Every notebook passed on a GPU as a T4 (sm_75, 15 GB), an 8 GB RTX 30xx (sm_86) and an RTX 40xx (sm_89)."""
    for name, mode in (("notebook_times_sm75", "GEMM_KERNELS_ARCH=sm_75, GEMM_KERNELS_MEMORY_GB=15"),
                       ("notebook_times_sm86", "GEMM_KERNELS_ARCH=sm_86, GEMM_KERNELS_MEMORY_GB=8"),
                       ("notebook_times_sm89", "GEMM_KERNELS_ARCH=sm_89")):
        record = _committed(name)
        assert record["mode"] == mode and record["device"] != "CPU", name
        assert sorted(r["notebook"] for r in record["notebooks"]) == _notebook_names(), name
        assert all(r["passed"] for r in record["notebooks"]), name


def test_missing_verdicts_are_named():
    """A check whose GPU tests never ran (skipped, a crash) leaves no verdict: the smoke fails on it."""
    import importlib

    titles = [e.title for e in importlib.import_module("gemm_kernels.lab.progress").exercises()]
    full = {t: {"solution": "correct", "mistake": "wrong"} for t in titles}
    assert smoke._missing_verdicts(full) == []
    del full[titles[3]]["mistake"]
    assert smoke._missing_verdicts(full) == [titles[3]]


def test_a_run_past_its_time_is_stopped_with_its_children(tmp_path):
    """bench.notebooks.run_bounded kills the whole process group (nbmake's kernel, xdist's workers)."""
    import sys
    import time

    from gemm_kernels.bench import notebooks

    marker = tmp_path / "child_alive"
    script = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              f"\"import time; time.sleep(3); open({str(marker)!r}, 'w').write('x')\"]); time.sleep(60)")
    start = time.perf_counter()
    status, out = notebooks.run_bounded([sys.executable, "-c", script], env=None, timeout=1)
    assert status is None and "did not finish in 1 s" in out and time.perf_counter() - start < 30
    time.sleep(4)
    assert not marker.exists()  # the grandchild went with the group
