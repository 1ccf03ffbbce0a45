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
    def stop(*_):  # not TimeoutError: an OSError, which a test's pytest.raises(OSError) would take
        raise AssertionError(f"still blocked after {seconds} s")

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


def _socket_at(path: Path):
    """A Unix socket's node at ``path``: no regular file, made without privileges (a device stands in
    for none here: a test that failed would move the system's own device aside)."""
    import socket

    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
    except OSError as exc:  # a path too long for a socket's address
        sock.close()
        pytest.skip(f"no socket at {path}: {exc}")
    return sock


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_a_socket_at_the_progress_path_is_never_replaced(progress_env):
    with contextlib.closing(_socket_at(progress_env)):
        with pytest.warns(RuntimeWarning, match="progress.json is a socket"):
            progress.record(START_HERE, "axpy", "correct")  # before: warned, then replaced by a new record
        assert progress_env.is_socket() and sorted(p.name for p in progress_env.parent.iterdir()) == ["progress.json"]


def test_a_device_is_named_by_the_shared_reader_without_a_write():
    assert _files.regular_file_problem(os.devnull) == "a device"  # read-only: only stat is called
    with pytest.raises(_files.NotRegularFile, match=f"{os.devnull} is a device"):
        _files.read_bytes(os.devnull)


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


# ----------------------------------------------------------------------------- 2: FIFOs handed to the grade command
def _never_grade(monkeypatch):
    """The grade command, stopped if it gets as far as grading a notebook (none of these may)."""
    def judged(items, **_):
        assert not items, f"graded {items}"
        return []

    monkeypatch.setattr(grade, "grade_notebooks", judged)
    monkeypatch.setattr(grade, "sandbox_refusal", lambda no_sandbox: None)  # (nothing is graded: none needed)


@needs_fifo
def test_a_fifo_handed_in_is_an_error_row_naming_it(tmp_path, monkeypatch, capsys):
    _never_grade(monkeypatch)
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "bob").mkdir()
    os.mkfifo(subs / "alice" / "x.ipynb")  # known by its imports: read (before: waited for a writer)
    os.mkfifo(subs / "bob" / "00_start_here.ipynb")  # known by its name: its copies ranked, then judged
    (subs / "carol_00_start_here.ipynb").mkdir()  # a folder named as a notebook
    with no_hang():
        assert grade.course_notebook(subs / "alice" / "x.ipynb") is None
        assert grade.main([str(subs), "--out", str(tmp_path / "g.csv")]) == 0
    rows = {r["student"]: r for r in csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8"))}
    assert rows["alice"]["status"] == rows["bob"]["status"] == "error"
    assert "x.ipynb is a FIFO" in rows["alice"]["message"] and "00_start_here.ipynb is a FIFO" in rows["bob"]["message"]
    assert gradebook.pick_copies([("bob", subs / "bob" / "00_start_here.ipynb", "00_start_here")])[0]


@needs_fifo
@pytest.mark.parametrize("option", ["--roster", "--config"])
def test_a_fifo_as_the_roster_or_config_is_refused_by_name(option, tmp_path, monkeypatch, capsys):
    _never_grade(monkeypatch)
    (tmp_path / "subs").mkdir()
    os.mkfifo(tmp_path / "input")
    with no_hang(), pytest.raises(SystemExit) as stop:
        grade.main([str(tmp_path / "subs"), option, str(tmp_path / "input"), "--out", str(tmp_path / "g.csv")])
    assert stop.value.code == 2 and f"{tmp_path / 'input'} is a FIFO" in capsys.readouterr().err


@needs_fifo
def test_a_fifo_among_a_teachers_notebooks_is_refused_by_name(tmp_path, capsys):
    from gemm_kernels.lab import nbgrader_markup

    os.mkfifo(tmp_path / "01_pointer_arithmetic.ipynb")
    with no_hang():
        with pytest.raises(OSError, match="01_pointer_arithmetic.ipynb is a FIFO"):
            student.write_student_copies(tmp_path, tmp_path / "copies")  # SRC_DIR's notebooks (before: blocked)
        with pytest.raises(SystemExit):
            nbgrader_markup.main([str(tmp_path / "01_pointer_arithmetic.ipynb")])
    assert "01_pointer_arithmetic.ipynb is a FIFO" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 3, 4: outputs checked before grading
@pytest.fixture
def class_folder(tmp_path, monkeypatch):
    """A submissions folder, a roster and a config; grading itself is a failure here."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(grade, "grade_class", lambda *a, **k: pytest.fail("grading began before the outputs' check"))
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "roster.csv").write_text("id,name\nalice,Alice\n")
    (tmp_path / "config.json").write_text('{"notebooks": ["00_start_here"]}')
    (tmp_path / "a folder").mkdir()
    return tmp_path


@pytest.mark.parametrize("extra, option, says", [
    (["--out", "roster.csv"], "--out", "is the --roster file"),
    (["--gradebook", "./roster.csv"], "--gradebook", "is the --roster file"),
    (["--json", "config.json"], "--json", "is the --config file"),
    (["--canvas", "subs/alice/canvas.csv"], "--canvas", "inside the submissions folder"),
    (["--out", "x.csv", "--gradebook", "x.csv"], "--gradebook", "the file --out writes too"),
    (["--out", "gradebook.csv"], "--gradebook (default: beside --out)", "the file --out writes too"),
    (["--json", "same.json", "--canvas", "same.json"], "--canvas", "the file --json writes too"),
    (["--out", "nodir/grades.csv"], "--out", "the folder nodir does not exist"),
    (["--out", "a folder"], "--out", "is a folder"),
    (["--json", "nodir/x.json"], "--json", "the folder nodir does not exist"),
    (["--canvas", "roster.csv/c.csv"], "--canvas", "roster.csv is not a folder"),
])
def test_outputs_are_checked_before_grading(class_folder, extra, option, says, capsys):
    roster = (class_folder / "roster.csv").read_bytes()
    with pytest.raises(SystemExit) as stop:
        grade.main(["subs", "--roster", "roster.csv", "--config", "config.json", *extra])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"error: {option}" in err and says in err, err
    assert (class_folder / "roster.csv").read_bytes() == roster
    assert not (class_folder / "grades.csv").exists()


def test_a_hard_link_to_the_roster_is_the_roster(class_folder, capsys):
    os.link(class_folder / "roster.csv", class_folder / "linked.csv")
    with pytest.raises(SystemExit):
        grade.main(["subs", "--roster", "roster.csv", "--out", "linked.csv"])
    assert "is the --roster file" in capsys.readouterr().err


@needs_fifo
def test_a_fifo_or_socket_as_an_output_is_refused(class_folder, capsys):
    os.mkfifo(class_folder / "out.fifo")
    with contextlib.closing(_socket_at(class_folder / "out.sock")):
        for given in ("out.fifo", "out.sock"):
            with no_hang(), pytest.raises(SystemExit):
                grade.main(["subs", "--json", given])
            assert "not a file to write" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 5: names that are no UTF-8
def test_names_that_are_no_utf8_are_written_escaped(tmp_path, monkeypatch, capsys):
    _never_grade(monkeypatch)
    subs = tmp_path / "subs"
    subs.mkdir()
    try:
        os.mkdir(os.path.join(os.fsencode(subs), b"j\xfcrgen"))
        (subs / os.fsdecode(b"caf\xe9_notes.ipynb")).write_text("{}")
    except (OSError, UnicodeError):
        pytest.skip("this file system takes UTF-8 names only")
    (subs / os.fsdecode(b"j\xfcrgen") / "foo.ipynb").write_text("{}")
    out = tmp_path / "g.csv"
    assert grade.main([str(subs), "--out", str(out), "--json", str(tmp_path / "g.json"),
                       "--canvas", str(tmp_path / "c.csv")]) == 0  # before: UnicodeEncodeError, a header only
    students = [r["student"] for r in csv.DictReader(open(out, encoding="utf-8"))]
    assert students == ["caf\\xe9_notes", "j\\xfcrgen"]
    assert "caf\\xe9_notes" in (tmp_path / "gradebook.csv").read_text(encoding="utf-8")
    assert "j\\xfcrgen" in (tmp_path / "c.csv").read_text(encoding="utf-8")
    data = json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))
    assert [g["student"] for g in data["grades"]] == students
    assert "j\\xfcrgen: 0 of 0 points" in capsys.readouterr().out


def test_a_failed_write_keeps_the_old_file_whole(tmp_path):
    out = tmp_path / "grades.csv"
    out.write_text("the old grades\n")
    row = grade.Grade("alice", "00_start_here", "axpy", "correct", 1, "", "a.ipynb")
    with pytest.raises(TypeError):
        grade.write_csv([row, object()], out)  # the second row cannot be written
    assert out.read_text() == "the old grades\n" and sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]
    assert _files.shown_name(os.fsdecode(b"caf\xe9")) == "caf\\xe9" and _files.shown_name("\ud800x") == "\\ud800x"


# ----------------------------------------------------------------------------- 6: the config's shape
@pytest.mark.parametrize("text, key", [
    ('{"notebooks": 5}', "'notebooks'"),
    ('{"notebooks": null}', "'notebooks'"),
    ('{"notebooks": ["00_start_here", ["x"]]}', "'notebooks'"),
    ('{"notebooks": ["00_start_here", "00_start_here"]}', "'notebooks'"),
    ('{"assignment": 5}', "'assignment'"),
    ('{"weights": null}', "'weights'"),
    ('{"weights": {"00_start_here": [1]}}', "weights for"),
    ('{"weights": {"00_start_here": {"axpy": 1' + "0" * 400 + '}}}', "00_start_here:axpy (in 'weights')"),
    ('{"predictions": "1"}', "'predictions'"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ('{"notebooks": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
])
def test_a_config_of_the_wrong_shape_names_the_file_and_key(text, key, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(gradebook.GradebookError) as info:  # before: TypeError, RecursionError, OverflowError
        gradebook.read_config(path)
    assert str(path) in str(info.value) and key in str(info.value) and len(str(info.value)) < 600


# ----------------------------------------------------------------------------- 9: environment spellings
HUGE = "x" * 100_000


@pytest.mark.parametrize("read", [
    lambda v: _env.parse_flag(v, "GEMM_KERNELS_EXAM", False),
    lambda v: _env.parse_path_or_off(v, "GEMM_KERNELS_PROGRESS"),
    lambda v: _env.parse_number(v, "GEMM_KERNELS_MEMORY_GB"),
    runtime.parse_arch,
], ids=["flag", "path", "number", "arch"])
@pytest.mark.parametrize("value", [HUGE, "1" * 100_000 + "x", "~" + "u" * 100_000], ids=["letters", "digits", "user"])
def test_an_error_echoes_a_long_value_trimmed(read, value):
    try:
        read(value)
    except ValueError as exc:
        message = str(exc)
    else:
        return  # a path: a ~user with such a name is refused below, other values are paths
    assert "GEMM_KERNELS_" in message and len(message) < 400, len(message)  # before: 100 kB
    assert "100001 characters" in message or "100000 characters" in message


def test_a_huge_number_is_out_of_range_not_no_number(monkeypatch):
    for value in ("1" * 100_000, "1e999", "-" + "9" * 400):
        with pytest.raises(ValueError, match="is out of range") as info:
            _env.parse_number(value, "GEMM_KERNELS_MEMORY_GB")
        assert len(str(info.value)) < 400
    monkeypatch.setenv(runtime.MEMORY_GB_ENV, "1" * 100_000)
    with pytest.raises(ValueError, match=f"{runtime.MEMORY_GB_ENV}=.*out of range"):
        runtime._cap_memory()  # before: "is not a number"
    assert _env.parse_number(" 0.5 ", "X") == 0.5 and _env.parse_number("1e3", "X") == 1000.0
    assert _env.parse_number(".5", "X") == 0.5 and _env.parse_number("", "X") is None


@pytest.mark.parametrize("digits", ["٩٠", "९०", "９０", "9٠"], ids=["arabic-indic", "devanagari", "fullwidth", "mixed"])
def test_only_ascii_digits_are_digits(digits):
    for value in (f"sm_{digits}", digits, f"{digits[0]}.{digits[1]}"):
        with pytest.raises(ValueError, match="GEMM_KERNELS_ARCH"):
            runtime.parse_arch(value)  # before: sm_٩٠ was sm_90
    with pytest.raises(ValueError, match="is not a number"):
        _env.parse_number(digits, "GEMM_KERNELS_MEMORY_GB")  # before: float() read 90
    with pytest.raises(ValueError, match="yes/no"):
        _env.parse_flag(digits[0], "GEMM_KERNELS_EXAM", False)
    assert runtime.parse_arch("sm_90") == runtime.parse_arch("9.0") == (9, 0)


@pytest.mark.parametrize("value", ["1_000", "0x10", "nan", "-inf", "8GB", "1e", "."])
def test_a_number_is_decimal_digits(value):
    with pytest.raises(ValueError, match="is not a number"):
        _env.parse_number(value, "GEMM_KERNELS_MEMORY_GB")


# ----------------------------------------------------------------------------- 8: a results folder outside the repository
@pytest.mark.parametrize("given", ["elsewhere/bench", "/somewhere/else/bench"], ids=["relative", "outside"])
def test_the_bench_help_shows_a_results_folder_outside_the_repository(given, tmp_path):
    package = str(Path(results.__file__).resolve().parents[1])  # this checkout's, not an installed copy
    env = {**os.environ, results.RESULTS_DIR_ENV: given,
           "PYTHONPATH": os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "gemm_kernels.bench", "--help"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-500:]  # before: "... is not in the subpath of ..."
    assert f"into {given}/" in " ".join(run.stdout.split())


def test_the_bench_help_shows_the_committed_copy_relative_to_the_repository():
    from gemm_kernels import bench

    if not bench.BENCH_DIR.is_relative_to(bench.REPO_ROOT):
        pytest.skip(f"{results.RESULTS_DIR_ENV} or an installed copy: the committed copy is elsewhere")
    assert bench.shown_bench_dir() == str(bench.BENCH_DIR.relative_to(bench.REPO_ROOT))


# ----------------------------------------------------------------------------- 7: hand-edited committed records
def _copy_csv(name: str, dest: Path, edit) -> Path:
    """``images/bench/<name>`` copied to ``dest`` with each row passed through ``edit`` (None drops it)."""
    source = results.BENCH_DIR / name
    rows = list(csv.DictReader(open(source, newline="", encoding="utf-8")))
    rows = [r for r in (edit(dict(r)) for r in rows) if r is not None]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return dest


def _where(row: dict, case: str, dtype: str, column: str, value):
    if row.get("case") == case and row.get("dtype") == dtype:
        row[column] = value
    return row


@pytest.mark.parametrize("edit, says", [
    (lambda r: _where(r, "4096x4096x4096", "fp16", "time_ms", "fast"), r"line \d+, column 'time_ms': 'fast' is not"),
    (lambda r: _where(r, "4096x4096x4096", "fp16", "time_ms", "0"), r"column 'time_ms': '0' is not a positive"),
    (lambda r: _where(r, "4096x4096x4096", "fp16", "time_ms", "١٢"), r"column 'time_ms': '١٢' is not"),
    (lambda r: _where(r, "4096x4096x4096", "fp16", "baseline_spread", "wide"), r"column 'baseline_spread'"),
    (lambda r: {k: v for k, v in r.items() if k != "dtype"}, r"line \d+, column 'dtype': missing"),
    (lambda r: {k: v for k, v in r.items() if k != "ours"}, r"column 'ours': missing"),
], ids=["time-word", "time-zero", "time-arabic", "spread", "no-dtype", "no-ours"])
def test_the_readme_table_names_the_file_row_and_column(edit, says, tmp_path):
    path = _copy_csv("square.csv", tmp_path / "square.csv", edit)
    with pytest.raises(results.ResultsFileError, match=says) as info:  # before: ValueError, KeyError naming nothing
        results.readme_table(tmp_path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text, says", [
    ("provider,kernel\nx,y\n", "line 2, column 'case': missing"),
    ("case,provider,kernel,gpu__time_duration.sum\nc,p,k,12 us\n", "column 'gpu__time_duration.sum': '12 us' is not"),
    ("case,provider,kernel,launch__cluster_dim_x\nc,p,k,1.5\n", "column 'launch__cluster_dim_x': '1.5' is not a whole"),
    ("case,provider,kernel,sm__cycles_active.avg,sm__cycles_active.max\nc,p,k,nan,1\n", "sm__cycles_active.avg"),
])
def test_the_counters_table_names_the_file_row_and_column(text, says, tmp_path):
    (tmp_path / "counters.csv").write_text(text, encoding="utf-8")
    with pytest.raises(results.ResultsFileError, match=says) as info:  # before: KeyError, ValueError
        results.counters_table("", tmp_path)
    assert str(tmp_path / "counters.csv") in str(info.value)


def _json_record(name: str, dest: Path, edit) -> Path:
    data = json.loads((results.BENCH_DIR / f"{name}.json").read_text(encoding="utf-8"))
    edit(data)
    path = dest / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("name, read, edit, says", [
    ("clocks", results.clocks_table, lambda d: d.pop("device"), "key 'device': missing"),
    ("clocks", results.clocks_table, lambda d: d["rows"][1].update(us="12 us"), r"rows\[1\], key 'us': '12 us' is not"),
    ("clocks", results.clocks_table, lambda d: d.update(rows={"a": 1}), "key 'rows': .* is not a list"),
    ("measuring", lambda directory: results.two_ways_table(directory=directory),
     lambda d: d["two_ways"][0].pop("kernel"), r"two_ways\[0\], key 'kernel': missing"),
    ("measuring", lambda directory: results.two_ways_table(directory=directory),
     lambda d: [r.update(cuda_graph_us=0) for r in d["two_ways"]], "key 'cuda_graph_us': 0 is not a positive"),
    ("moe_host", results.host_time_table, lambda d: d.update(host_us=[1, 2]), r"key 'host_us': \[1, 2\] is not an object"),
    ("moe_host", results.host_time_table, lambda d: d["host_us"].update(x=[1]), r"in 'host_us', key 'x': \[1\] is not"),
    ("moe_host", results.host_time_table, lambda d: d["gpu"].update(x=5), r"in 'gpu', key 'x': 5 is not an object"),
], ids=["clocks-device", "clocks-us", "clocks-rows", "two-ways-kernel", "two-ways-zero", "host-list", "host-value",
        "host-gpu"])
def test_a_hand_edited_json_record_names_the_file_entry_and_key(name, read, edit, says, tmp_path):
    path = _json_record(name, tmp_path, edit)
    with pytest.raises(results.ResultsFileError, match=says) as info:  # before: KeyError, TypeError, AttributeError
        read(directory=tmp_path) if name != "measuring" else read(tmp_path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("edit, says", [
    (lambda r: None if r["provider"] == "auto" else r, "no shape of the unseen part has a timed auto row"),
    (lambda r: {**r, "ms": "fast"} if r["provider"] == "auto" else r, r"line \d+, column 'ms': 'fast' is not"),
    (lambda r: None if r["provider"] == "cuBLAS" else r, "no cuBLAS row"),
    (lambda r: {**r, "M": "1e400"}, r"column 'M': '1e400' is not"),
], ids=["no-auto", "ms-word", "no-cublas", "M-huge"])
def test_the_dispatch_picks_name_the_file(edit, says, tmp_path):
    path = _copy_csv("entry33/ws_tiles.csv", tmp_path / "entry33" / "ws_tiles.csv", edit)
    with pytest.raises(results.ResultsFileError, match=says) as info:  # before: ValueError from min(), KeyError
        results.dispatch_picks(tmp_path)
    assert str(path) in str(info.value)


def test_the_committed_records_still_read_as_before():
    assert results.readme_table().count("\n") > 5 and results.counters_table("").startswith("case")
    assert results.dispatch_picks()["shapes"] > 0 and results.two_ways_table().startswith("one run on")
    assert results.clocks_table() and results.host_time_table()


def _suite_dirs(tmp_path):
    from gemm_kernels.bench import report

    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    (src / "fp8.csv").write_bytes((results.BENCH_DIR / "fp8.csv").read_bytes())
    committed = json.loads((results.BENCH_DIR / "meta.json").read_text(encoding="utf-8"))
    report.update_meta(src, "fp8", committed["suites"]["fp8"])  # publishing needs the run's provenance
    return report, src, dest


def test_render_markdown_names_a_suite_csv_without_time_ms(tmp_path):
    report, _, dest = _suite_dirs(tmp_path)
    (dest / "square.csv").write_text("case,provider\nx,y\n")
    with pytest.raises(ValueError, match=f"{dest / 'square.csv'} is corrupt .*header"):
        report.render_markdown(dest)  # before: KeyError 'time_ms'


@pytest.mark.parametrize("damage", ["kept suite", "published suite", "meta"])
def test_publish_checks_everything_before_copying(damage, tmp_path):
    report, src, dest = _suite_dirs(tmp_path)
    (src / "fp8.png").write_bytes(b"png")
    if damage == "kept suite":
        (dest / "square.csv").write_text("case,provider\nx,y\n")  # a committed suite hand-edited
    elif damage == "published suite":
        (src / "moe.csv").write_text("case,provider\nx,y\n")
    else:
        (dest / "meta.json").write_text("[")
    before = sorted(p.name for p in dest.iterdir())
    with pytest.raises(ValueError, match="is corrupt"):
        report.publish(src, dest)  # before: fp8.csv and .png copied, then KeyError 'time_ms'
    assert sorted(p.name for p in dest.iterdir()) == before


@needs_fifo
def test_a_fifo_in_the_committed_results_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "counters.csv")
    with no_hang(), pytest.raises(OSError, match="counters.csv is a FIFO"):
        results.counters_table("", tmp_path)
