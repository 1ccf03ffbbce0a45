"""Adversarial review (issue 50), files and the environment: a FIFO, device or folder where a user's
file goes is refused by name, never waited on (``gemm_kernels._files``: one guard for every reader);
the grade command checks its outputs before grading, never writes over its inputs, and writes names
that are no UTF-8; a config of the wrong shape, a hand-edited committed record and an odd results
folder give errors naming the file, row and column; environment values are echoed trimmed, read in
ASCII digits only, and a huge number is out of range.  No grading runs here: the grade command is
stopped before it grades, or given an empty folder."""

from __future__ import annotations

import contextlib
import csv
import importlib
import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from gemm_kernels import _env, _files, results, runtime
from gemm_kernels.lab import grade, gradebook, student

progress = importlib.import_module("gemm_kernels.lab.progress")  # the package's ``progress`` is a function

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
START_HERE = "gemm_kernels.lab.exercises.start_here"


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """Fail (instead of waiting forever) when the code inside blocks on a FIFO."""
    def stop(*_):
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- 1: the progress file
@pytest.fixture
def progress_env(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    monkeypatch.setenv(progress.ENV, str(path))
    monkeypatch.setattr(progress, "_warned", set())
    return path


def _not_regular(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "loop":
        path.symlink_to(path)


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling", "loop"])
def test_a_progress_file_that_is_no_file_is_named_and_never_waited_on(progress_env, kind):
    _not_regular(progress_env, kind)
    with no_hang(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert progress.progress().passed == 0  # before: blocked forever on the FIFO
        progress.record(START_HERE, "axpy", "correct")  # a check's call: never raises, never blocks
    messages = [str(w.message) for w in caught]
    assert any(str(progress_env) in m and "showing no progress" in m for m in messages), messages
    assert any(str(progress_env) in m and "was not saved" in m for m in messages), messages
    assert os.path.lexists(progress_env) and not progress_env.is_file()  # left as it was, not replaced
    assert not list(progress_env.parent.glob("*.corrupt*"))


@needs_fifo
def test_a_fifo_at_the_progress_lock_is_refused(progress_env):
    os.mkfifo(progress_env.with_name(progress_env.name + ".lock"))
    with no_hang(), pytest.warns(RuntimeWarning, match=r"progress\.json\.lock is a FIFO"):
        progress.record(START_HERE, "axpy", "correct")  # before: open(lock, "a") waited for a reader


def test_the_device_at_the_progress_path_is_never_moved_aside(progress_env, monkeypatch):
    monkeypatch.setenv(progress.ENV, os.devnull)
    with pytest.warns(RuntimeWarning, match=f"{os.devnull} is a device"):
        progress.record(START_HERE, "axpy", "correct")  # before: read, judged corrupt, renamed aside
    assert Path(os.devnull).exists() and not Path(os.devnull + ".corrupt").exists()


@needs_fifo
def test_the_shared_reader_refuses_what_is_no_file_and_a_file_too_large(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 11)
    with no_hang():
        with pytest.raises(_files.NotRegularFile, match="fifo is a FIFO"):
            _files.read_bytes(tmp_path / "fifo")
    with pytest.raises(_files.NotRegularFile, match="is a folder"):
        _files.read_text(tmp_path)
    with pytest.raises(_files.TooLarge, match="larger than 10 bytes"):
        _files.read_bytes(tmp_path / "big", limit=10)
    assert _files.read_bytes(tmp_path / "big", limit=11) == b"x" * 11
    with pytest.raises(FileNotFoundError):
        _files.read_bytes(tmp_path / "missing")
