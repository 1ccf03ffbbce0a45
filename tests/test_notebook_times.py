"""python -m gemm_kernels.bench.notebooks (make test-gpu-notebooks): each notebook alone, timed,
with a record; on the CPU it runs the interpreter path of the same notebooks."""

import json

import pytest

from gemm_kernels import runtime
from gemm_kernels.bench import notebooks


def _notebook(path, source: str) -> None:
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                           "source": source}],
                                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                            "language": "python"}},
                                "nbformat": 4, "nbformat_minor": 5}))


#: a notebook that fails unless the tool ran it with the arch switch it was asked for
CHECKS_ITS_RUN = "import os\nassert os.environ['GEMM_KERNELS_ARCH'] == 'sm_86', os.environ.get('GEMM_KERNELS_ARCH')\n"


def test_one_notebook_alone_is_run_timed_and_recorded(tmp_path, monkeypatch):
    """The tool's bookkeeping on a one-cell notebook (the course's notebooks run under nbmake in `make test`)."""
    _notebook(tmp_path / "00_start_here.ipynb", CHECKS_ITS_RUN)
    monkeypatch.setattr(notebooks, "NOTEBOOKS_DIR", tmp_path)
    out = tmp_path / "times.json"
    assert notebooks.main(["--only", "00_start_here", "--arch", "sm_86", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    (row,) = record["notebooks"]
    assert row["notebook"] == "00_start_here.ipynb" and row["passed"] and row["seconds"] > 0
    assert record["mode"] == f"{runtime.ARCH_ENV}=sm_86" and "cold Triton cache" in record["timing"]


def test_a_failing_notebook_is_recorded_with_its_output(tmp_path, monkeypatch):
    bad = tmp_path / "bad.ipynb"
    _notebook(bad, "raise ValueError('broken on purpose')")
    monkeypatch.setattr(notebooks, "NOTEBOOKS_DIR", tmp_path)
    out = tmp_path / "times.json"
    assert notebooks.main(["--json", str(out)]) == 1
    (row,) = json.loads(out.read_text())["notebooks"]
    assert not row["passed"] and "broken on purpose" in row["tail"]


@pytest.mark.parametrize("args", [["--arch", "sm_99"], ["--memory-gb", "0"], ["--timeout", "0"], ["--jobs", "0"]])
def test_bad_options_are_refused(args):
    with pytest.raises((SystemExit, ValueError)):
        notebooks.main([*args, "--only"])


def test_notebooks_at_once_each_alone_in_its_process(tmp_path, monkeypatch):
    for name in ("00_start_here", "01_pointer_arithmetic"):
        _notebook(tmp_path / f"{name}.ipynb", CHECKS_ITS_RUN)
    monkeypatch.setattr(notebooks, "NOTEBOOKS_DIR", tmp_path)
    out = tmp_path / "times.json"
    assert notebooks.main(["--only", "00_start_here", "01_pointer_arithmetic", "--jobs", "2", "--arch", "sm_86",
                           "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [r["notebook"] for r in record["notebooks"]] == ["00_start_here.ipynb", "01_pointer_arithmetic.ipynb"]
    assert all(r["passed"] for r in record["notebooks"])
    assert "2 notebooks at once" in record["timing"] and "not a timing" in record["timing"]
