"""Adversarial review, round 4 (issue 50), defects D6-D10: environment variables read one way per
kind (flag, path-or-off, number) and never silently misread; the tuning cache survives a deeply
nested file and keeps every valid pick beside a bad one; ``results.read_csv`` names the file of a
csv error; student copies skip (and name) a folder, FIFO or broken link where a copy goes."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import triton

from gemm_kernels import _env, results, runtime
from gemm_kernels.kernels import tuning_cache
from gemm_kernels.lab import _grade_judge, exam, student

progress = importlib.import_module("gemm_kernels.lab.progress")  # the package's ``progress`` is a function

OFF_WORDS = ["off", "0", "no", "none", "false", "disabled", " FALSE ", "Disabled", "None"]
ON_WORDS = ["1", "true", "yes", "on", " TRUE ", "On"]


# ----------------------------------------------------------------------------- D6: the environment
@pytest.mark.parametrize("value", OFF_WORDS)
def test_every_off_word_switches_a_path_variable_off(value, monkeypatch):
    assert _env.parse_path_or_off(value, "X") == "off"
    monkeypatch.setenv(tuning_cache.ENV, value)
    monkeypatch.setenv(progress.ENV, value)
    assert tuning_cache.cache_directory() is None
    assert progress.progress_path() is None and not progress.recording()


@pytest.mark.parametrize("value", ON_WORDS)
def test_an_on_word_where_a_path_goes_is_refused_by_name(value, monkeypatch):
    for env, read in ((tuning_cache.ENV, tuning_cache.cache_directory), (progress.ENV, progress.progress_path)):
        monkeypatch.setenv(env, value)
        with pytest.raises(ValueError, match=f"{env}=.*give a path"):
            read()


def test_a_path_variable_takes_a_path_and_blank_is_unset(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning_cache.ENV, f"  {tmp_path}  ")
    assert tuning_cache.cache_directory() == tmp_path
    assert _env.parse_path_or_off("  ", "X") is None and _env.parse_path_or_off(None, "X") is None


@pytest.mark.parametrize("value", ["2", "enabled", "flase", "y"])
def test_exam_mode_refuses_an_unknown_spelling(value):
    with pytest.raises(ValueError, match=exam.ENV):
        exam.enabled(value)
    code = "import gemm_kernels.lab.exam as e; print(e.ON)"
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, exam.ENV: value},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and f"{exam.ENV}={value!r}" in run.stderr


@pytest.mark.parametrize("value, on", [(" TRUE ", True), ("on", True), ("0", False), ("", False)])
def test_exam_mode_reads_the_flag_spellings(value, on):
    assert exam.enabled(value) is on


def test_a_blank_results_dir_is_unset(monkeypatch):
    monkeypatch.delenv(results.RESULTS_DIR_ENV, raising=False)
    default = results._bench_dir()
    monkeypatch.setenv(results.RESULTS_DIR_ENV, "   ")
    assert results._bench_dir() == default


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "4GB", "-1", "0"])
def test_a_memory_cap_that_is_no_number_is_refused_by_name(value, monkeypatch):
    monkeypatch.setenv(runtime.MEMORY_GB_ENV, value)
    with pytest.raises(ValueError, match=runtime.MEMORY_GB_ENV):
        runtime._cap_memory()


@pytest.mark.parametrize("value", ["2", "-1", "maybe"])
def test_a_bad_autotune_value_is_named_on_any_machine(value, monkeypatch):
    """Adversarial round 7: on a CPU, GEMM_KERNELS_AUTOTUNE=2 and a memory cap of -1 passed
    silently (autotuning is off there), and failed only once the notebook met a GPU."""
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, value)
    with pytest.raises(ValueError, match=runtime.AUTOTUNE_ENV):
        runtime.autotune_enabled()


@pytest.mark.parametrize("value, mode", [("full", "full"), (" FULL ", "full"), ("small", "small"), ("off", "off"),
                                         ("1", "full")])
def test_the_autotune_modes_by_name_are_taken(value, mode, monkeypatch):
    """``full`` is a mode's own name (``set_autotune("full")``): refused on a CPU by round 7's first
    fix, which its review caught."""
    monkeypatch.setenv(runtime.AUTOTUNE_ENV, value)
    assert runtime.autotune_mode() == mode
    runtime.autotune_enabled()


def test_jupyterlabs_port_is_checked(capsys):
    from gemm_kernels.lab import student

    for port in ("0", "65536", "99999", "http"):
        with pytest.raises(SystemExit):
            student.main(["--lab", "--port", port])
        assert "argument --port" in capsys.readouterr().err


def test_the_grade_sandbox_switch_is_a_flag(monkeypatch):
    monkeypatch.setenv("GEMM_KERNELS_GRADE_SANDBOX", "false")
    assert _grade_judge.sandbox_prefix([]) is None
    monkeypatch.setenv("GEMM_KERNELS_GRADE_SANDBOX", "flase")
    with pytest.raises(ValueError, match="GEMM_KERNELS_GRADE_SANDBOX"):
        _grade_judge.sandbox_prefix([])


# ----------------------------------------------------------------------------- D7, D8: the tuning cache
def _disk_picks(tmp_path, monkeypatch):
    from gemm_kernels.kernels.matmul import _matmul_kernel

    monkeypatch.setenv(tuning_cache.ENV, str(tmp_path))
    cfgs = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=2)]
    return tuning_cache.DiskPicks(_matmul_kernel, cfgs, "-adv"), cfgs


def test_a_deeply_nested_tuning_file_is_warned_about_not_a_crash(tmp_path, monkeypatch):
    picks, cfgs = _disk_picks(tmp_path, monkeypatch)
    picks.path().write_text("[" * 200_000 + "]" * 200_000)
    with pytest.warns(RuntimeWarning, match=str(picks.path())):
        assert picks.get(("k",), cfgs) is None
    picks.put(("k",), cfgs[0])  # re-tuned: the file is rewritten as a valid one
    assert picks.get(("k",), cfgs) is cfgs[0]


@pytest.mark.parametrize("bad", [5, "x", None, [1, 2]])
def test_one_bad_pick_costs_that_pick_only(bad, tmp_path, monkeypatch):
    picks, cfgs = _disk_picks(tmp_path, monkeypatch)
    good_name = tuning_cache._pick_name(runtime.autotune_mode(), ("good",))
    picks.path().write_text(json.dumps({"picks": {good_name: cfgs[0].all_kwargs(), "full|bad": bad}}))
    with pytest.warns(RuntimeWarning, match=f"{picks.path()}.*'full\\|bad'"):
        assert picks.get(("good",), cfgs) is cfgs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        picks.put(("new",), cfgs[0])
    kept = json.loads(picks.path().read_text())["picks"]
    assert set(kept) == {good_name, tuning_cache._pick_name(runtime.autotune_mode(), ("new",))}


# ----------------------------------------------------------------------------- D9: results CSV
@pytest.mark.parametrize("text, line", [("a,b\n" + "x" * 200_000 + ",1\n", 2), ("a,b\n1,2\n3," + "y" * 200_000 + "\n", 3)])
def test_a_csv_error_names_the_file_and_line(text, line, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text(text)
    with pytest.raises(results.ResultsFileError, match=rf"{path}, line {line}: not a CSV row"):
        results.read_csv(path)


# ----------------------------------------------------------------------------- D10: student copies
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_what_is_no_regular_file_where_a_copy_goes_is_named_and_skipped(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    paths = student.notebook_paths(student.REPO_ROOT / "notebooks")[:5]
    for path in paths:
        shutil.copy(path, src / path.name)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / paths[0].name).mkdir()
    (dest / paths[1].name).symlink_to(dest / "nowhere")
    os.mkfifo(dest / paths[2].name)  # read_bytes would wait for a writer forever
    (dest / paths[3].name).symlink_to(dest / paths[3].name)  # a loop
    assert student.main([str(src), str(dest)]) == 1
    err = capsys.readouterr().err
    for path in paths[:4]:
        assert f"no copy written at {dest / path.name}" in err
    assert "folder" in err and "dangling" in err
    assert nbformat_ok(dest / paths[4].name)  # the one after them is still written
    done = student.write_student_copies(src, dest)
    assert set(done.blocked) == {dest / p.name for p in paths[:4]} and list(done) == [dest / paths[4].name]


def nbformat_ok(path) -> bool:
    import nbformat

    return path.is_file() and bool(nbformat.read(path, as_version=4).cells)
