"""nbgrader_judge grades its snapshot of what students handed in, taken before nbgrader autograde runs
their code as the grader, and refuses to grade without a sandbox (issue 48, a teacher's review: H6 and
H7; the whole flow under nbgrader is in tests/test_teach.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gemm_kernels.lab import _sandbox, nbgrader_judge


def test_nbgrader_judge_refuses_without_a_sandbox_too(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(_sandbox.ENV, "0")
    (tmp_path / "submitted").mkdir()
    with pytest.raises(SystemExit) as stop:
        nbgrader_judge.main(["week1", "--course", str(tmp_path)])
    assert stop.value.code == 2 and "--no-sandbox" in capsys.readouterr().err


def _hand_in(course: Path, student: str, text: str = '{"cells": []}') -> Path:
    folder = course / "submitted" / student / "week1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00_start_here.ipynb").write_text(text)
    return folder / "00_start_here.ipynb"


def test_the_snapshot_is_what_was_handed_in_or_nothing(tmp_path):
    """H6, H7: autograde runs student code as the grader, which rewrote submitted/ before the judge read
    it.  The judge grades its snapshot, taken before: missing, it is refused (saying when to take
    it); a file changed since is refused; a forger who rewrites a file and the manifest alike is
    caught by the digest the snapshot printed; once autograde has run, a changed or new student is
    left out unless retaken; a copy of a source notebook is reported."""
    course = tmp_path / "course"
    _hand_in(course, "alice")
    bob = _hand_in(course, "bob")
    with pytest.raises(nbgrader_judge.SnapshotError, match="before nbgrader autograde"):
        nbgrader_judge.read_snapshot(course, "week1")
    taken = nbgrader_judge.snapshot(course, "week1")
    assert taken["taken"] == ["alice", "bob"] and taken["notebooks"] == 2 and not taken["marked"]
    store = nbgrader_judge.store_folder(course, "week1")
    assert [s for s, _ in nbgrader_judge.read_snapshot(course, "week1", digest=taken["digest"])] == ["alice", "bob"]

    bob.write_text("rewritten")  # submitted/ changes: the snapshot does not
    assert (store / "bob" / "00_start_here.ipynb").read_text() == '{"cells": []}'
    (course / "autograded" / "bob" / "week1").mkdir(parents=True)  # autograde has run
    _hand_in(course, "carol")
    again = nbgrader_judge.snapshot(course, "week1")
    assert again["refused"] == ["bob", "carol"] and again["unchanged"] == ["alice"]
    assert again["digest"] == taken["digest"]
    retaken = nbgrader_judge.snapshot(course, "week1", retake={"carol"})
    assert retaken["taken"] == ["carol"] and retaken["refused"] == ["bob"]

    copy = store / "alice" / "00_start_here.ipynb"
    copy.write_text("### BEGIN SOLUTION")
    with pytest.raises(nbgrader_judge.SnapshotError, match="changed since the snapshot"):
        nbgrader_judge.read_snapshot(course, "week1")
    manifest = json.loads((store / "manifest.json").read_text())  # a forger who knows the format
    manifest["files"]["alice/00_start_here.ipynb"] = hashlib.sha256(copy.read_bytes()).hexdigest()
    manifest["digest"] = nbgrader_judge._digest(manifest["files"])
    (store / "manifest.json").write_text(json.dumps(manifest))
    assert len(nbgrader_judge.read_snapshot(course, "week1")) == 3  # without the digest: not caught
    with pytest.raises(nbgrader_judge.SnapshotError, match="not the one whose digest you gave"):
        nbgrader_judge.read_snapshot(course, "week1", digest=retaken["digest"])

    other = tmp_path / "other"
    _hand_in(other, "dan", "### BEGIN SOLUTION\n")
    assert nbgrader_judge.snapshot(other, "week1")["marked"] == ["dan/00_start_here.ipynb"]


def test_the_snapshot_command_says_what_it_left_out(tmp_path, capsys):
    course = tmp_path / "course"
    _hand_in(course, "alice")
    (course / "autograded" / "alice" / "week1").mkdir(parents=True)
    assert nbgrader_judge.main(["week1", "--course", str(course), "--snapshot"]) == 1
    out = capsys.readouterr().out
    assert "left out: alice" in out and "--retake alice" in out
    assert nbgrader_judge.main(["week1", "--course", str(course), "--snapshot", "--retake", "alice"]) == 0
    assert "its digest: " in capsys.readouterr().out
