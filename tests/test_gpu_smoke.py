"""``make test-gpu-smoke`` (gemm_kernels.bench.smoke): on a CPU it refuses to run and says why; the
parts of its record that need no GPU (junit counts, the checks' verdict lines) are read right."""

import json

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
