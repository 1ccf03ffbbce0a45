"""Committed GPU benchmark results, for readers without a GPU.

``python -m gemm_kernels.bench --commit`` (``make bench``) writes, under ``images/bench/``:

* ``<suite>.csv`` and ``<suite>.png`` per suite (``square``, ``order``, ``fusion``, ``stream-k``,
  ``seed-grouped``, ``moe``; ``l2`` from ``python -m gemm_kernels.bench.l2``);
* ``results.md``: one ``## <suite>`` section per suite, each a markdown table;
* ``meta.json``: per suite, where and when it was measured (GPU, date, torch/triton
  versions, the command line).

``show_committed(suite)`` shows one suite's plot, provenance and table in a notebook (or
prints them in a terminal).  ``committed_value(suite, column, **where)`` reads one measured
number, so prose that quotes a measurement can print it from the data (or a test can check
it, ``tests/test_prose_numbers.py``).  ``python -m gemm_kernels.results --readme-table`` prints
the README's results table, built from the same files.  This module reads files only: it needs
neither torch nor a GPU.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import sys
from pathlib import Path

from . import _env, _files  # the environment's parsers, the guarded reader: no torch, no Triton

#: set to a folder to read committed results from there instead
RESULTS_DIR_ENV = "GEMM_KERNELS_RESULTS_DIR"


def _bench_dir() -> Path:
    """Where the committed copy lives: $GEMM_KERNELS_RESULTS_DIR if set; the source checkout's
    images/bench (an editable install, the bench writing new results); else the copy a normal
    install puts under <prefix>/share/gemm-kernels/bench (pyproject.toml's data-files)."""
    given = (os.environ.get(RESULTS_DIR_ENV) or "").strip()
    if given:  # blank is unset: " " must not name a folder of that name
        return Path(given).expanduser()
    checkout = Path(__file__).resolve().parents[1] / "images" / "bench"
    installed = Path(sys.prefix) / "share" / "gemm-kernels" / "bench"
    return checkout if checkout.is_dir() or not installed.is_dir() else installed


BENCH_DIR = _bench_dir()
RESULTS_MD = "results.md"
META_JSON = "meta.json"


class ResultsFileError(ValueError):
    """A results file that cannot be read as what it should be (not UTF-8, not JSON, nested too
    deeply, truncated, hand-edited into another shape): the message names the file."""


def read_text(path: Path) -> str:
    """``path``'s text (UTF-8); ResultsFileError naming it when it is not text."""
    try:  # a FIFO or folder at its place: an OSError naming it, never waited on
        return _files.read_text(path)
    except UnicodeDecodeError as exc:
        raise ResultsFileError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}): restore it "
                               "(git checkout) or rerun the command that writes it") from None


def read_json(path: Path, kind=dict):
    """``path`` parsed as JSON, a ``kind`` at the top; ResultsFileError naming the file otherwise."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except RecursionError:
        raise ResultsFileError(f"{path} is nested too deeply to be a results record") from None
    except ValueError as exc:
        raise ResultsFileError(f"{path} is not valid JSON ({exc}): restore it (git checkout) or rerun the "
                               "command that writes it") from None
    if not isinstance(data, kind):
        raise ResultsFileError(f"{path} holds a JSON {type(data).__name__}, not the {kind.__name__} a results "
                               "record is")
    return data


def read_csv(path: Path) -> list[dict]:
    """``path``'s rows as dicts of strings; ResultsFileError naming the file when a row is not one
    (not UTF-8, a row longer or shorter than the header: truncated or hand-edited, a cell past
    csv's field limit or a stray NUL: csv.Error)."""
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    try:
        rows = list(reader)
    except csv.Error as exc:  # csv names no file: say which one, and where
        # csv stops before counting the line it failed in: that one is the next
        raise ResultsFileError(f"{path}, line {reader.line_num + 1}: not a CSV row ({exc})") from None
    for number, row in enumerate(rows, start=2):
        if None in row or None in row.values():
            raise ResultsFileError(f"{path}, line {number}: {len(row) - (None in row)} cells where the header "
                                   "names another number (truncated or hand-edited?)")
    return rows


class RecordRow(dict):
    """One row of a committed record (a CSV line, an object in a JSON record) read by its columns:
    a column that is missing or a cell that is not what the reader needs (a hand-edited ``time_ms``
    of ``fast``, ``12 us``, a list where a number goes) is a ResultsFileError naming the file, the
    row and the column; plain ``row["x"]`` reads raise it too.  Numbers are ASCII decimals
    (``_env.NUMBER``), finite."""

    def __init__(self, data: dict, path, where: str = "", field: str = "column"):
        super().__init__(data)
        self.path, self.where, self.field = path, where, field

    def problem(self, column, what: str) -> ResultsFileError:
        where = f", {self.where}" if self.where else ""
        return ResultsFileError(f"{self.path}{where}, {self.field} {_env.shown(column)}: {what} (hand-edited? "
                                "restore it (git checkout) or rerun the command that writes it)")

    def __missing__(self, column):
        raise self.problem(column, "missing")

    def text(self, column) -> str:
        value = self[column]
        if not isinstance(value, str):
            raise self.problem(column, f"{_env.shown(value)} is not text")
        return value

    def number(self, column, positive: bool = False) -> float:
        """The cell as a finite float (``positive``: above 0, as a time must be)."""
        value = cell = self[column]
        if isinstance(cell, str) and _env.NUMBER.fullmatch(cell.strip()):
            value = float(cell)
        try:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        except OverflowError:  # an integer past float's range
            ok = False
        if not ok or (positive and value <= 0):
            raise self.problem(column, f"{_env.shown(cell)} is not a {'positive ' if positive else ''}number")
        return float(value)

    def integer(self, column) -> int:
        value = self.number(column)
        if not value.is_integer():
            raise self.problem(column, f"{_env.shown(self[column])} is not a whole number")
        return int(value)

    def items_of(self, column) -> list:
        """The cell as a JSON list."""
        value = self[column]
        if not isinstance(value, list):
            raise self.problem(column, f"{_env.shown(value)} is not a list")
        return value

    def mapping(self, column) -> RecordRow:
        """The cell, a JSON object, read the same way (its keys named ``column.key``)."""
        value = self[column]
        if not isinstance(value, dict):
            raise self.problem(column, f"{_env.shown(value)} is not an object")
        return RecordRow(value, self.path, f"{self.where + ', ' if self.where else ''}in {column!r}", "key")

    def rows(self, column) -> list[RecordRow]:
        """The cell, a JSON list of objects (a record's rows), each read the same way."""
        found = []
        for i, value in enumerate(self.items_of(column)):
            if not isinstance(value, dict):
                raise self.problem(column, f"entry {i} ({_env.shown(value)}) is not an object")
            found.append(RecordRow(value, self.path, f"{column}[{i}]", "key"))
        return found


def record_rows(path: Path) -> list[RecordRow]:
    """:func:`read_csv`'s rows as :class:`RecordRow` (line 2 is the first row)."""
    return [RecordRow(row, path, f"line {n}") for n, row in enumerate(read_csv(path), start=2)]


def _warned_read(read, path: Path, instead):
    """``read(path)``, or ``instead`` with a warning naming the file: one damaged file of a suite
    does not hide the others (the plot and the CSV still show)."""
    try:
        return read(path)
    except (ResultsFileError, OSError) as exc:
        import warnings

        warnings.warn(f"gemm_kernels.results: {exc}; shown without it", RuntimeWarning, stacklevel=3)
        return instead


def section_heading(suite: str) -> str:
    """The heading that opens a suite's section in results.md (the bench writer uses it too)."""
    return f"## {suite}"


def extract_section(markdown: str, suite: str) -> str | None:
    """The body of ``## <suite>`` in ``markdown`` (up to the next ``## `` heading), or None."""
    pattern = rf"^{re.escape(section_heading(suite))}[ \t]*$"
    match = re.search(pattern, markdown, flags=re.MULTILINE)
    if match is None:
        return None
    rest = markdown[match.end():]
    following = re.search(r"^## ", rest, flags=re.MULTILINE)
    return (rest[: following.start()] if following else rest).strip("\n")


def suite_meta(meta: dict, suite: str) -> dict:
    """Provenance of one suite: ``meta["suites"][suite]`` where present, else the top level."""
    per_suite = meta.get("suites", {})
    found = per_suite.get(suite) if isinstance(per_suite, dict) else None
    return found if isinstance(found, dict) else {k: v for k, v in meta.items() if k != "suites"}


def provenance_line(info: dict) -> str:
    """'NVIDIA H100 80GB HBM3, <date>, torch 2.x, triton 3.x' from a meta entry."""
    parts = [info.get("device", "unknown device"), info.get("date", "unknown date")]
    parts += [f"{lib} {info[lib]}" for lib in ("torch", "triton") if info.get(lib)]
    return ", ".join(str(p) for p in parts)


def load_committed(suite: str, directory: str | Path | None = None) -> dict | None:
    """Everything committed for ``suite``, or None when there is nothing.

    Returns ``{"suite", "png", "csv", "meta", "table"}``: paths (None where the file is
    missing), the suite's provenance dict and its markdown section (None where missing).
    """
    directory = Path(directory) if directory is not None else BENCH_DIR
    png, csv = directory / f"{suite}.png", directory / f"{suite}.csv"
    meta_path, md_path = directory / META_JSON, directory / RESULTS_MD
    text = _warned_read(read_text, md_path, None) if md_path.is_file() else None
    table = extract_section(text, suite) if text is not None else None
    meta = suite_meta(_warned_read(read_json, meta_path, {}), suite) if meta_path.is_file() else {}
    found = {
        "suite": suite,
        "png": png if png.is_file() else None,
        "csv": csv if csv.is_file() else None,
        "meta": meta,
        "table": table,
    }
    if found["png"] is None and found["csv"] is None and table is None:
        return None
    return found


def missing_message(suite: str) -> str:
    return f"no committed GPU results for {suite} yet; run `make bench` on a GPU"


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


#: every benchmark suite's name (``python -m gemm_kernels.bench``), in ``bench.suites.SUITES``' order;
#: named here, below ``bench``, so that reading committed results needs no harness (tests/test_layers.py)
SUITE_NAMES = ("square", "order", "fusion", "stream-k", "seed-grouped", "moe", "llm", "llm-linear", "fp8", "fp8-moe",
               "host", "decode", "nn-linear")


def known_result_sets() -> list:
    """The names :func:`show_committed` knows: every benchmark suite (:data:`SUITE_NAMES`) and
    ``l2`` (the L2 model beside Nsight Compute, ``python -m gemm_kernels.bench.l2 --run``)."""
    return [*SUITE_NAMES, "l2"]


def show_committed(suite: str, directory: str | Path | None = None) -> dict | None:
    """Show the committed GPU results of ``suite``: plot, where/when measured, table.

    In a notebook the plot and table are rendered; elsewhere they are printed (the plot as
    its path).  When nothing is committed, prints a message saying how to make it; a name
    that is no suite is a ValueError listing the suites.
    Returns what :func:`load_committed` found (None when nothing).
    """
    known = known_result_sets()
    if suite not in known:  # a typo must not read as "run make bench"
        raise ValueError(f"unknown suite: {suite} (known: {', '.join(known)})")
    found = load_committed(suite, directory)
    if found is None:
        print(missing_message(suite))
        return None
    header = f"Committed GPU results for '{suite}' (measured on {provenance_line(found['meta'])})"
    command = found["meta"].get("command")
    table = found["table"] or "(no table for this suite in results.md)"
    if _in_notebook():  # the plot shown, the full table folded away (a course page, not a lab log)
        import html as _html

        from IPython.display import HTML, Image, Markdown, display

        display(Markdown(f"**{header}**" + (f"  \n`{command}`" if command else "")))
        if found["png"] is not None:
            display(Image(filename=str(found["png"])))
        rows = max(0, sum(line.lstrip().startswith("|") for line in table.splitlines()) - 2)
        display(HTML(f"<details><summary>the full table ({rows} rows, <code>images/bench/{_html.escape(suite)}.csv"
                     f"</code>)</summary>\n\n{_markdown_table_html(table)}\n</details>"))
    else:
        print(header)
        if command:
            print(f"command: {command}")
        if found["png"] is not None:
            print(f"plot: {found['png']}")
        print(table)
    return found


def _inline_html(text: str) -> str:
    """Escaped text with results.md's inline marks rendered: **bold** and `code`."""
    import html as _html
    import re as _re

    text = _html.escape(text.strip())
    text = _re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return _re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def _markdown_table_html(table: str) -> str:
    """The pipe-tables and notes of a results.md section as HTML (Markdown is not rendered inside
    <details>): each run of table lines its own table (fp16, then bf16), each other line a note."""
    import html as _html

    blocks: list[tuple[str, list[str]]] = []  # ("table" | "note", lines)
    for line in (ln.strip() for ln in table.strip().splitlines()):
        if not line:
            continue
        kind = "table" if line.startswith("|") else "note"
        if blocks and blocks[-1][0] == kind == "table":
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    if not any(kind == "table" and len(lines) >= 2 for kind, lines in blocks):
        return f"<pre>{_html.escape(table)}</pre>"
    out = []
    for kind, lines in blocks:
        if kind == "note" or len(lines) < 2:
            out += [f"<p>{_inline_html(line)}</p>" for line in lines]
            continue
        cells = [[_inline_html(c) for c in line.strip("|").split("|")] for line in lines]
        head, body = cells[0], cells[2:]  # cells[1] is the |---| rule
        out.append("<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr></thead><tbody>"
                   + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body)
                   + "</tbody></table>")
    return "".join(out)


# ------------------------------------------------------------------------------ single numbers


def committed_rows(suite: str, directory: str | Path | None = None) -> list[dict]:
    """The rows of ``<suite>.csv`` as dicts of strings (FileNotFoundError when it is not committed)."""
    path = (Path(directory) if directory is not None else BENCH_DIR) / f"{suite}.csv"
    return read_csv(path)


def committed_value(suite: str, column: str = "time_ms", directory: str | Path | None = None, **where):
    """One cell of a committed suite CSV: the ``column`` of the single row matching ``where``.

    ``committed_value("stream-k", case="1024x1024x8192", provider="tma 128x256")`` is that run's
    time in ms.  Numbers come back as float, other cells as str.  A filter that matches no row,
    or several, raises LookupError naming it: a quote must point at exactly one measurement."""
    rows = committed_rows(suite, directory)
    unknown = [k for k in where if rows and k not in rows[0]]
    if unknown or (rows and column not in rows[0]):
        raise KeyError(f"{suite}.csv has no column {', '.join(unknown or [column])}")
    found = [r for r in rows if all(r[k] == str(v) for k, v in where.items())]
    if len(found) != 1:
        raise LookupError(f"{suite}.csv: {len(found)} rows match {where} (need exactly one)")
    value = found[0][column]
    try:
        return float(value)
    except ValueError:
        return value


def committed_us(suite: str, directory: str | Path | None = None, **where) -> float:
    """A committed time in microseconds (the CSVs hold ms)."""
    return 1e3 * committed_value(suite, "time_ms", directory, **where)


def geomean(values) -> float:
    """Geometric mean of positive ratios (speed-ups), as the targets and notes quote them."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


#: providers that call one of our kernels by a rule (``matmul_auto``): where one is our fastest,
#: the tables name the launcher it picked (:func:`kernel_label`)
DISPATCH_PROVIDERS = frozenset({"auto"})


def dispatch_picks(directory: str | Path | None = None) -> dict:
    """``matmul_auto`` against the best of its candidates and cuBLAS on the shapes its rule was not
    drawn from: the ``unseen`` part of the tile sweep (``entry33/ws_tiles.csv``, GPU times per
    shape and layout; the candidates: the six tiles the sweep ran ``matmul_ws``'s kernel in, and
    ``matmul_splitk``).  The number of shapes, the geometric means and the worst shape."""
    path = Path(directory or BENCH_DIR) / "entry33" / "ws_tiles.csv"
    times = {}
    for r in record_rows(path):
        if r["ms"] and r["part"] == "unseen":
            name = f"ws {r['config']}" if r["provider"] == "ws" else r["provider"]
            shape = (r.integer("M"), r.integer("N"), r.integer("K"), r["layout"])
            times.setdefault(shape, {})[name] = r.number("ms", positive=True)
    of_best, vs_cublas = {}, []
    for shape, t in times.items():
        candidates = [v for p, v in t.items() if p not in ("cuBLAS", "auto")]
        if "auto" in t:
            if not candidates or "cuBLAS" not in t:
                raise ResultsFileError(f"{path}: the unseen shape {shape} has an auto row but "
                                       f"{'no cuBLAS row' if candidates else 'no candidate'} to compare it with")
            of_best[shape] = min(candidates) / t["auto"]
            vs_cublas.append(t["cuBLAS"] / t["auto"])
    if not of_best:
        raise ResultsFileError(f"{path}: no shape of the unseen part has a timed auto row: nothing to compare")
    worst = min(of_best, key=of_best.get)
    return {"shapes": len(of_best), "of_best_geo": geomean(of_best.values()), "of_best_min": of_best[worst],
            "worst": f"{worst[0]} × {worst[1]} × {worst[2]} with b {worst[3]}", "vs_cublas_geo": geomean(vs_cublas)}


#: Nsight Compute's units -> base units (bytes, ns, %), long names (CSV) and short ones (text output)
_UNIT_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
               "ns": 1, "us": 1e3, "ms": 1e6, "%": 1, "": 1}


def metric_value(row: dict) -> float | None:
    """An Nsight Compute metric row's value in base units (bytes, ns, %): thousands separators
    removed, scaled units (Kbyte, Mbyte, usecond...) converted; None when the value is not a number.
    Here, below ``bench``, because committed counters are read with it too."""
    try:
        value = float(row["Metric Value"].replace(",", "").strip())
    except ValueError:
        return None
    return value * _UNIT_SCALE.get(row.get("Metric Unit", "").strip().lower(), 1)


def cluster_probe_counters(directory: str | Path | None = None) -> dict:
    """Nsight Compute's counters of the cluster probe at 4096³ fp16, with and without the multicast
    of B (``entry33/ncu_probe_*.txt``, ``tests/gpu_cluster_probe/ncu_probe.py``): ``{True: {...},
    False: {...}}``, each metric in base units (bytes, ns, %; sectors counted as 32 bytes)."""
    out = {}
    for multicast, name in ((True, "ncu_probe_multicast.txt"), (False, "ncu_probe_no_multicast.txt")):
        text = read_text(Path(directory or BENCH_DIR) / "entry33" / name)
        out[multicast] = {}
        for m in re.finditer(r"^\s+([a-z0-9_]+__\S+)\s+(\S*?)\s+([\d,.]+)$", text, re.M):
            unit = m.group(2)
            value = metric_value({"Metric Value": m.group(3), "Metric Unit": "" if unit == "sector" else unit})
            out[multicast][m.group(1)] = value * (32 if unit == "sector" else 1)
    return out


# ------------------------------------------------------------------------------ the README's table

#: (suite, dtype, case): the rows of the README's table, one or two per suite
README_CASES = (
    ("square", "fp16", "4096x4096x4096"),
    ("square", "fp16", "8192x8192x8192"),
    ("square", "fp16", "1024x1024x1024"),
    ("fusion", "fp16", "4096^3 leaky_relu"),
    ("stream-k", "fp16", "512x512x16384"),
    ("stream-k", "fp16", "1024x1024x8192"),
    ("seed-grouped", "fp16", "4x 512x512x512"),
    ("seed-grouped", "fp16", "4x 1024x8192x8192"),
    ("moe", "bf16", "Mixtral-8x7B up T=4096 uniform"),
    ("moe", "bf16", "DeepSeek-V3 up T=4096 uniform"),
)
#: how each suite is timed, as the table says it
TIMING = {
    "stream-k": "CUDA graph (GPU time)",
    "decode": "CUDA graph (GPU time)",
    "nn-linear": "do_bench (events, L2 flushed); CUDA graph at M <= 64",
    "square": "do_bench (events, L2 flushed)",
    "fusion": "do_bench (events, L2 flushed)",
    "seed-grouped": "do_bench (events, L2 flushed)",
    "moe": "do_bench (events, L2 flushed)",
}


#: counters.csv's columns behind each column of :func:`counters_table`
COUNTER_COLUMNS = {
    "µs": "gpu__time_duration.sum",
    "tensor busy %": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "DRAM %": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "L2 hit %": "lts__t_sector_hit_rate.pct",
}


def counters_rows(case_prefix: str = "", directory: str | Path | None = None) -> list[dict]:
    """The committed Nsight Compute counters (``python -m gemm_kernels.bench.counters``), one dict
    per kernel of the cases whose name starts with ``case_prefix``, with the derived columns of
    :func:`counters_table` (``idle %`` = 1 - mean/max of ``sm__cycles_active``: the share of the
    run an average SM waited for the busiest one)."""
    out = []
    for r in record_rows((Path(directory) if directory is not None else BENCH_DIR) / "counters.csv"):
        if not r["case"].startswith(case_prefix):
            continue
        row = {"case": r["case"], "provider": r["provider"], "kernel": r["kernel"]}
        for name, column in COUNTER_COLUMNS.items():
            value = r.number(column) if r.get(column) else None
            row[name] = value / 1e3 if name == "µs" and value is not None else value
        avg, peak = (r.number(c) if r.get(c) else None for c in ("sm__cycles_active.avg", "sm__cycles_active.max"))
        row["idle %"] = 100 * (1 - avg / peak) if avg is not None and peak else None
        cluster = r.integer("launch__cluster_dim_x") if r.get("launch__cluster_dim_x") else 0
        height = r.integer("launch__cluster_dim_y") if r.get("launch__cluster_dim_y") else 1
        row["cluster"] = f"{cluster}x{height}" if cluster > 0 else "none"
        out.append(row)
    return out


def short_kernel(name: str, width: int = 70) -> str:
    """A profiled kernel's name for a table: no ``void``, no parameter list, at most ``width``
    characters (template arguments kept: for CUTLASS they say which GEMM it is)."""
    name = name.removeprefix("void ").split("(")[0]
    return name if len(name) <= width else name[:width - 1] + "…"


def counters_table(case_prefix: str = "", directory: str | Path | None = None, kernel_width: int = 48) -> str:
    """The committed counters of the cases starting with ``case_prefix`` as a text table."""
    rows = counters_rows(case_prefix, directory)
    if not rows:
        return f"(no committed counters for cases starting with {case_prefix!r})"
    columns = ["µs", "tensor busy %", "idle %", "DRAM %", "cluster"]
    lines = [f"{'case':40} {'provider':18} {'kernel':{kernel_width}} " + " ".join(f"{c:>13}" for c in columns)]
    for r in rows:
        name = short_kernel(r["kernel"], kernel_width)
        cells = [f"{r[c]:13.1f}" if isinstance(r[c], float) else f"{str(r[c]):>13}" for c in columns]
        lines.append(f"{r['case'][:40]:40} {r['provider'][:18]:18} {name:{kernel_width}} " + " ".join(cells))
    return "\n".join(lines)


def committed_record(name: str, directory: str | Path | None = None) -> RecordRow:
    """``images/bench/<name>.json``: what a bench tool wrote with ``--json`` (``moe_host``,
    ``clocks``, ``moe_configs``), with its command, device and the code it measured; read as a
    :class:`RecordRow` (a missing or malformed key names the file)."""
    path = Path(directory or BENCH_DIR) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no committed record {path}: run the command in PERF_NOTES.md that makes it")
    return RecordRow(read_json(path), path, field="key")


def two_ways_table(kernels=("cuBLAS", "matmul_tma"), sizes=(1280, 2048, 4096),
                   directory: str | Path | None = None) -> str:
    """The same kernels read by ``do_bench`` and from a CUDA graph in one run on one GPU
    (``measuring.json``'s ``two_ways``, ``python -m gemm_kernels.bench.measuring --only two_ways``)."""
    record = committed_record("measuring", directory)
    rows = {(r.integer("n"), r.text("kernel")): r for r in record.rows("two_ways")}
    added = record.rows("added_runs") if "added_runs" in record else []
    run = next((r for r in added if "two_ways" in r.items_of("experiments")), record)
    lines = [f"one run on {run['device']} ({run['date']}), µs: do_bench against a CUDA graph",
             f"{'M = N = K':>10} {'kernel':>17} {'do_bench':>9} {'graph':>7} {'ratio':>6} {'host per call':>14}"]
    for n in sizes:
        for kernel in kernels:
            if (n, kernel) not in rows:  # asked for what was never measured: a lookup, not a damaged file
                raise KeyError(f"{record.path}: 'two_ways' has no row of n={n} and kernel {kernel!r}")
            r = rows[n, kernel]
            do_bench, graph = r.number("do_bench_us"), r.number("cuda_graph_us", positive=True)
            lines.append(f"{n:>10} {kernel:>17} {do_bench:>9.1f} {graph:>7.1f} "
                         f"{do_bench / graph:>6.2f} {r.number('host_us_per_call'):>14.1f}")
    return "\n".join(lines)


def clocks_table(name: str = "clocks", directory: str | Path | None = None) -> str:
    """A committed ``python -m gemm_kernels.bench.clocks`` record as a text table: per row, our
    speed-up over the row's vendor provider (``do_bench`` medians of interleaved rounds) and the SM
    clock and power each ran at."""
    record = committed_record(name, directory)
    lines = [f"{record['device']}, {record['timing']}; code: {record.get('code', '?')}",
             f"{'case':44} {'provider':18} {'µs':>9} {'speed-up':>9} {'SM MHz':>7} {'W':>5}"]
    for r in record.rows("rows"):
        lines.append(f"{r.text('case')[:44]:44} {r.text('provider')[:18]:18} {r.number('us'):9.1f} "
                     f"{r.number('speedup'):8.3f}x {r.number('sm_mhz'):7.0f} {r.number('watts'):5.0f}")
    return "\n".join(lines)


def host_time_table(name: str = "moe_host", directory: str | Path | None = None) -> str:
    """A committed ``python -m gemm_kernels.bench.moe_host`` record: host µs per call, then GPU
    time by ``do_bench`` and from a CUDA graph."""
    record = committed_record(name, directory)
    lines = [f"{record['device']}, {record['problem']}; code: {record.get('code', '?')}"]
    host, gpu = record.mapping("host_us"), record.mapping("gpu")
    lines += [f"  host time per call, {call}: {host.number(call):.1f} µs" for call in host]
    lines += [f"  GPU time, {call}: do_bench {g.number('do_bench_us'):.1f} µs, CUDA graph {g['cuda_graph']}"
              for call, g in ((call, gpu.mapping(call)) for call in gpu)]
    return "\n".join(lines)


def short_gpu(device: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA H200' -> 'H200' (the model, for a table)."""
    words = [w for w in str(device).split() if w.upper() not in ("NVIDIA", "TESLA", "GEFORCE")]
    return words[0] if words else str(device)


def _us(ms: float) -> str:
    us = 1e3 * ms
    return f"{us:.0f} µs" if us >= 100 else f"{us:.1f} µs"


def kernel_label(row: dict) -> str:
    """A row's provider, and for the dispatch the launcher its note says it picked: ``auto (ws)``."""
    if row["provider"] not in DISPATCH_PROVIDERS:
        return row["provider"]
    picked = re.search(r"picked (matmul\w*)", row.get("note") or "")
    return f"{row['provider']} ({picked.group(1).removeprefix('matmul_')})" if picked else row["provider"]


def readme_table(directory: str | Path | None = None) -> str:
    """The README's results table: for a few cases per suite, the vendor baseline (and the kernel
    it ran, where profiled), our fastest kernel, and their same-run ratio, from the committed CSVs;
    a ratio nearer 1 than the baseline's spread over its rounds says so ("spread 88%")."""
    lines = ["| suite | case | GPU, timed with | vendor baseline | our fastest | ratio |",
             "|---|---|---|---|---|---|"]
    for suite, dtype, case in README_CASES:
        path = (Path(directory) if directory is not None else BENCH_DIR) / f"{suite}.csv"
        try:
            rows = [r for r in record_rows(path) if r["case"] == case and r["dtype"] == dtype]
        except FileNotFoundError:
            continue
        gpu = short_gpu((load_committed(suite, directory) or {}).get("meta", {}).get("device", "?"))
        base = next((r for r in rows if r["provider"] == r["baseline"] and r["time_ms"]), None)
        ours = [r for r in rows if r["ours"] == "True" and r["ok"] == "True" and r["time_ms"]]
        if base is None or not ours:
            continue
        best = min(ours, key=lambda r: r.number("time_ms", positive=True))
        kernel = f" (`{base['vendor_kernel']}`)" if base.get("vendor_kernel") else ""
        base_ms, best_ms = base.number("time_ms", positive=True), best.number("time_ms", positive=True)
        ratio = base_ms / best_ms
        spread = base.number("baseline_spread") if base["baseline_spread"] else 0.0
        noise = f" (spread {spread:.0%})" if spread > abs(ratio - 1) else ""  # the baseline's own rounds differ more
        lines.append(f"| {suite} | {case} {dtype} | {gpu}, {TIMING.get(suite, 'do_bench')} | {base['provider']} "
                     f"{_us(base_ms)}{kernel} | {kernel_label(best)} {_us(best_ms)} | {ratio:.2f}x{noise} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_kernels.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme-table", action="store_true", help="print the README's results table")
    parser.add_argument("suite", nargs="?", help="a suite to show (its provenance and table)")
    args = parser.parse_args(argv)
    if args.readme_table:
        sys.stdout.write(readme_table())
        return 0
    if args.suite:
        return 0 if show_committed(args.suite) is not None else 1
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
