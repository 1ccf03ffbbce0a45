"""Committed GPU benchmark results, for readers without a GPU.

``python -m gemm_kernels.bench --commit`` (``make bench``) writes, under ``images/bench/``:

* ``<suite>.csv`` and ``<suite>.png`` per suite (``square``, ``order``, ``fusion``,
  ``seed-grouped``, ``moe``; ``l2`` from ``python -m gemm_kernels.bench.l2``);
* ``results.md``: one ``## <suite>`` section per suite, each a markdown table;
* ``meta.json``: per suite, where and when it was measured (GPU, date, torch/triton
  versions, the command line).

``show_committed(suite)`` shows one suite's plot, provenance and table in a notebook (or
prints them in a terminal).  This module reads files only: it needs neither torch nor a GPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

#: where the committed copy lives: <repository>/images/bench
BENCH_DIR = Path(__file__).resolve().parents[1] / "images" / "bench"
RESULTS_MD = "results.md"
META_JSON = "meta.json"


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
    return per_suite.get(suite) or {k: v for k, v in meta.items() if k != "suites"}


def provenance_line(info: dict) -> str:
    """'NVIDIA H100 80GB HBM3, 2026-11-22, torch 2.x, triton 3.x' from a meta entry."""
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
    table = extract_section(md_path.read_text(), suite) if md_path.is_file() else None
    meta = suite_meta(json.loads(meta_path.read_text()), suite) if meta_path.is_file() else {}
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


def known_result_sets() -> list:
    """The names :func:`show_committed` knows: every benchmark suite (``python -m
    gemm_kernels.bench``) and ``l2`` (the L2 model beside Nsight Compute, ``python -m
    gemm_kernels.bench.l2 --run``)."""
    from .bench.suites import SUITES

    return [*SUITES, "l2"]


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
    if _in_notebook():
        from IPython.display import Image, Markdown, display

        display(Markdown(f"**{header}**" + (f"  \n`{command}`" if command else "")))
        if found["png"] is not None:
            display(Image(filename=str(found["png"])))
        display(Markdown(table))
    else:
        print(header)
        if command:
            print(f"command: {command}")
        if found["png"] is not None:
            print(f"plot: {found['png']}")
        print(table)
    return found
