"""Results as data (CSV), a plot per suite, one markdown file and the provenance (meta.json).

Suites can be run in separate commands into one directory: each run writes its own
``<suite>.csv``/``.png`` and its ``meta.json`` entry, then ``results.md`` is rebuilt from
every CSV present.  The markdown layout (``## <suite>`` sections) is what
:func:`gemm_kernels.results.show_committed` reads back.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
from collections import OrderedDict
from pathlib import Path

from .. import _files
from .._files import atomic_write  # the one way a file is replaced whole (vendor_kernels imports it here)
from ..results import (META_JSON, RESULTS_MD, geomean, kernel_label, provenance_line, read_text, section_heading,
                       suite_meta)
from .core import COLUMNS, Row

SUITE_ORDER = ("square", "order", "fusion", "stream-k", "seed-grouped", "moe", "llm", "llm-linear", "fp8", "fp8-moe", "host",
               "decode", "nn-linear", "l2")
_NUMERIC = {"x", "time_ms", "tflops", "pct_peak", "speedup", "baseline_spread", "gb_s", "rel_err", "tol"}
_INTEGER = {"flops", "min_bytes"}


# ------------------------------------------------------------------------------ files


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


# ------------------------------------------------------------------------------ CSV


def _fmt_csv(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.6g}"
    return str(value)


def write_csv(rows: list[Row], path: Path) -> None:
    with atomic_write(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for r in rows:
            writer.writerow([_fmt_csv(v) for v in r.as_dict().values()])


_OPTIONAL = {"vendor_kernel"}  # CSVs written before the column existed lack it
_FLAGS = {"ok": {"True": True, "False": False, "": None}, "ours": {"True": True, "False": False}}


def _parse_row(header: list[str], fields: list[str]) -> dict:
    """One CSV record as a row dict (empty numbers -> None or 0); ValueError says what is wrong."""
    if len(fields) != len(header):
        raise ValueError(f"{len(fields)} fields, the header has {len(header)}")
    row = dict(zip(header, fields))
    for k in row.keys() & (_NUMERIC | _INTEGER | set(_FLAGS)):
        text = row[k]
        try:
            if k in _FLAGS:
                row[k] = _FLAGS[k][text]
            elif text == "":
                row[k] = None if k in _NUMERIC else 0
            else:
                row[k] = float(text) if k in _NUMERIC else int(float(text))
        except (ValueError, KeyError, OverflowError):
            raise ValueError(f"{k} = {text!r} is not " + ("True/False" if k in _FLAGS else "a number")) from None
    row.setdefault("ok", None)  # defaults of the columns a suite CSV may lack (and other CSVs do)
    row.setdefault("ours", True)
    row.setdefault("vendor_kernel", "")
    return row


def _read_csv(path: Path, suite_csv: bool, drop_cut_case: bool = False) -> tuple[list[dict], str | None]:
    """:func:`read_csv`; with ``drop_cut_case`` a last row cut off mid-write (the file does not
    end with a line break) is dropped with the rows of its case, so that the case runs again,
    and the second value says so."""
    path = Path(path)

    def corrupt(line: int | None, what: str) -> ValueError:
        where = f"line {line}: " if line else ""
        return ValueError(f"{path} is corrupt ({where}{what}): delete it and run its suite again")

    try:
        # the guarded reader: a FIFO or folder at its place is an OSError naming it, never waited on
        text = _files.read_bytes(path).decode("utf-8")
        reader = csv.reader(io.StringIO(text, newline=""))
        records = [(reader.line_num, fields) for fields in reader]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise corrupt(None, f"not a CSV: {exc}") from None
    cut = not text.endswith("\n")  # csv.writer ends every row with a line break; a killed write may not
    if cut and not drop_cut_case:
        raise corrupt(records[-1][0] if records else None, "cut off mid-row" if records else "empty")
    cut_record = records.pop()[1] if cut and records else []
    if not records:
        if cut:  # killed before its first row was whole: no case was kept
            return [], f"{path} was cut off before its first row: every case runs again"
        raise corrupt(None, "no header")
    header = records[0][1]
    if not header or "" in header or len(set(header)) != len(header) or suite_csv and (
            set(header) - set(COLUMNS) or set(COLUMNS) - set(header) - _OPTIONAL):
        raise corrupt(1, f"the header {','.join(header)[:200]!r} is not "
                         + (repr(",".join(COLUMNS)) if suite_csv else "distinct column names"))
    rows = []
    for line, fields in records[1:]:
        try:
            rows.append(_parse_row(header, fields))
        except ValueError as exc:
            raise corrupt(line, str(exc)) from None
    if not cut:
        return rows, None
    # the cut row's case: from its own cells when they reach past the case column, else the last
    # complete row's (the cut row may have been that case's next provider)
    at = (header.index("panel"), header.index("case"))
    key = tuple(cut_record[i] for i in at) if len(cut_record) > max(at) + 1 else None
    case = (rows[-1]["panel"], rows[-1]["case"]) if rows else None
    dropped = 1
    while rows and (rows[-1]["panel"], rows[-1]["case"]) == case and key in (None, case):
        rows.pop()
        dropped += 1
    return rows, f"the last row of {path} was cut off mid-write: {dropped} row(s) of its case dropped, the case runs again"


def read_csv(path: Path, suite_csv: bool = False) -> list[dict]:
    """Rows of a CSV with the numbers of a suite CSV's columns parsed (empty cells -> None,
    ok -> bool or None).  ValueError naming the file and line when a row has another number of
    fields than the header, such a number or flag does not parse, the last row was cut off
    mid-write, or (``suite_csv``) the header is not :data:`COLUMNS`."""
    return _read_csv(path, suite_csv)[0]


def read_csv_to_resume(path: Path) -> tuple[list[dict], str | None]:
    """A suite CSV's rows for ``--resume``: like :func:`read_csv`, but a last row cut off
    mid-write (a run killed while writing it) is dropped with the other rows of its case, so
    the case runs again; the second value says so (None: nothing was cut)."""
    return _read_csv(path, suite_csv=True, drop_cut_case=True)


# ------------------------------------------------------------------------------ markdown


def _cell(r: dict) -> str:
    """One provider on one case: time, TFLOP/s, speed-up over the baseline, correctness."""
    if r["ok"] is None:
        return "n/a"
    if r["ok"] is False and r["rel_err"] is None:
        return "error"
    parts = []
    if r["time_ms"] is not None:
        if r["tflops"] is None:  # a host-time row (the host suite): microseconds per call
            parts.append(f"{r['time_ms'] * 1e3:.3g} µs/call")
        else:
            parts.append(f"{r['time_ms']:.3g} ms · {r['tflops']:.3g} TF/s")
        if r["speedup"] is not None:
            parts.append(f"**{r['speedup']:.2f}x**")
    if r["ok"] is False:
        parts.append(f"WRONG (err {r['rel_err']:.2g})")
    elif r["time_ms"] is None:
        parts.append(f"ok ({r['rel_err']:.1g})")
    return " ".join(parts)


def _best_of_ours(rows: list[dict], ours: set[str]) -> str:
    timed = [r for r in rows if r["provider"] in ours and r["tflops"] is not None and r["ok"]]
    if not timed:
        return "n/a"
    best = max(timed, key=lambda r: r["tflops"])
    pct = f", {best['pct_peak']:.0f}% of peak" if best["pct_peak"] is not None else ""
    ratio = f", {best['speedup']:.2f}x" if best["speedup"] is not None else ""
    return f"{kernel_label(best)}{ratio}{pct}"


def suite_markdown(suite: str, rows: list[dict], meta: dict | None = None, ours: set[str] | None = None) -> str:
    """The ``## <suite>`` section: one table per panel, one row per case, one column per provider."""
    ours = ours if ours is not None else {r["provider"] for r in rows if r["ours"]}
    lines = [section_heading(suite), ""]
    if meta:
        lines += [f"Measured on {provenance_line(meta)}."
                  + (f" Command: `{meta['command']}`." if meta.get("command") else ""), ""]
        method = (meta.get("timing") or {}).get("method")
        if method:
            lines += [f"Timed with {method}.", ""]
        if meta.get("incomplete"):
            lines += [f"**Incomplete run**: {meta['incomplete']}.", ""]
        profiled = meta.get("vendor_kernel")
        if profiled:
            lines += [f"Vendor kernels named by `torch.profiler` over one call of the baseline on "
                      f"{provenance_line(profiled)}"
                      + (f" (`{profiled['command']}`)" if profiled.get("command") else "") + ".", ""]
    if not rows:
        return "\n".join(lines + ["(no rows)", ""])
    timed = any(r["time_ms"] is not None for r in rows)
    baseline = rows[0]["baseline"]
    if timed:
        lines += [f"Cells: median time · TFLOP/s · **speed-up over {baseline}** measured in the same run "
                  "(> 1 is faster). Correctness is checked once per cell against a float64 reference; "
                  "WRONG marks a result over tolerance.", ""]
    else:
        lines += ["Not timed (no CUDA GPU): cells give the relative error of each kernel against a float64 "
                  "reference on tiny sizes in Triton's interpreter.", ""]
    providers = list(OrderedDict.fromkeys(r["provider"] for r in rows))
    panels = list(OrderedDict.fromkeys(r["panel"] for r in rows))
    named = any(r.get("vendor_kernel") for r in rows)
    for panel in panels:
        in_panel = [r for r in rows if r["panel"] == panel]
        lines += [f"**{panel}**", ""]
        header = ["case", *providers] + (["best of ours", "baseline noise"] if timed else []) \
            + ([f"{baseline} ran"] if named else [])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for case in OrderedDict.fromkeys(r["case"] for r in in_panel):
            by_provider = {r["provider"]: r for r in in_panel if r["case"] == case}
            cells = [case] + [_cell(by_provider[p]) if p in by_provider else "" for p in providers]
            if timed:
                spread = next((r["baseline_spread"] for r in by_provider.values()
                               if r["baseline_spread"] is not None), None)
                cells += [_best_of_ours(list(by_provider.values()), ours),
                          f"{100 * spread:.1f}%" if spread is not None else "n/a"]
            if named:
                kernel = next((r["vendor_kernel"] for r in by_provider.values() if r.get("vendor_kernel")), "")
                cells.append(f"`{kernel}`" if kernel else "")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    notes = OrderedDict()
    for r in rows:
        if r.get("note"):
            notes.setdefault(f"{r['provider']}: {r['note']}", None)
    if notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ targets


def _speedups(rows, providers, cases=None, baseline_of=None):
    """Best speed-up among ``providers`` per case; baseline_of(case_rows) overrides the baseline."""
    out = {}
    by_case = OrderedDict()
    for r in rows:
        by_case.setdefault((r["panel"], r["case"]), []).append(r)
    for key, case_rows in by_case.items():
        if cases is not None and not cases(case_rows[0]):
            continue
        base_ms = baseline_of(case_rows) if baseline_of else next(
            (r["time_ms"] for r in case_rows if r["provider"] == r["baseline"] and r["time_ms"]), None)
        mine = [r for r in case_rows if r["provider"] in providers and r["time_ms"] and r["ok"]]
        if base_ms and mine:
            best = min(mine, key=lambda r: r["time_ms"])
            out[key] = (base_ms / best["time_ms"], best["provider"])
    return out


def _param(row, name):
    for part in (row.get("params") or "").split(";"):
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    return None


def _accuracy_pairs(rows) -> list[tuple[str, float, float]]:
    """(case, our relative error, the baseline's) for each fp8 row of ours at default arguments
    (``scaled_mm``, ``scaled_grouped_mm``) beside its baseline's row."""
    base = {(r["panel"], r["case"]): r["rel_err"] for r in rows if r["provider"] == r["baseline"]}
    return [(f"{r['panel']} {r['case']}", r["rel_err"], base[r["panel"], r["case"]]) for r in rows
            if r["provider"] in ("scaled_mm", "scaled_grouped_mm") and r["rel_err"] is not None
            and base.get((r["panel"], r["case"])) is not None]


def targets(all_rows: dict[str, list[dict]]) -> list[dict]:
    """The project's performance targets, each with its measured numbers and met / missed / not measured."""
    found = []

    def add(name, goal, measured, met):
        found.append({"target": name, "goal": goal, "measured": measured,
                      "status": "not measured" if met is None else ("met" if met else "MISSED")})

    square = all_rows.get("square", [])
    ours_single = {"row_major", "grouped", "persistent", "tma", "stream_k", "ws"}
    for dtype in ("fp16", "bf16"):
        for n in (4096, 8192):
            res = _speedups([r for r in square if r["dtype"] == dtype], ours_single,
                            cases=lambda r, n=n: r["case"] == f"{n}x{n}x{n}")
            val = next(iter(res.values()), None)
            add(f"square {dtype} {n}^3", ">= 1.00x cuBLAS (best of ours)",
                f"{val[0]:.3f}x ({val[1]})" if val else "n/a", None if val is None else val[0] >= 1.0)

    for dtype in ("fp16", "bf16"):  # issue 18: the warp-specialized kernel alone
        for n in (4096, 8192):
            res = _speedups([r for r in square if r["dtype"] == dtype], {"ws"},
                            cases=lambda r, n=n: r["case"] == f"{n}x{n}x{n}")
            val = next(iter(res.values()), None)
            add(f"matmul_ws square {dtype} {n}^3", ">= 1.05x cuBLAS",
                f"{val[0]:.3f}x" if val else "n/a", None if val is None else val[0] >= 1.05)

    fusion = [r for r in all_rows.get("fusion", []) if r["case"].startswith("4096^3")]
    ws_gelu = _speedups([r for r in fusion if "gelu" in r["case"] and "bias" in r["case"]], {"ws fused"})
    val = next(iter(ws_gelu.values()), None)
    add("matmul_ws fused bias+GELU 4096^3", ">= 1.10x torch addmm + gelu",
        f"{val[0]:.3f}x" if val else "n/a", None if val is None else val[0] >= 1.10)
    res = _speedups(fusion, {f"{k} fused" for k in ("row_major", "grouped", "persistent", "tma", "stream_k", "ws")})
    if res:
        worst = min(res.items(), key=lambda kv: kv[1][0])
        text = ", ".join(f"{k[1]}: {v[0]:.3f}x ({v[1]})" for k, v in res.items())
        add("fusion 4096^3", ">= 1.05x torch matmul + activation, every epilogue", text, worst[1][0] >= 1.05)
    else:
        add("fusion 4096^3", ">= 1.05x torch matmul + activation, every epilogue", "n/a", None)

    seed_rows = all_rows.get("seed-grouped", [])
    # launch-only plans against the seed's launch-only kernels and the cuBLAS loop, as the seed
    # compares them; the whole-call rows stay in the tables beside them
    ours_grouped = {"grouped_matmul", "grouped_matmul tma", "grouped_matmul plan", "grouped_matmul tma plan"}
    vs_cublas = _speedups(seed_rows, ours_grouped)

    def seed_tma_ms(case_rows):
        return next((r["time_ms"] for r in case_rows if r["provider"] == "seed triton+tma" and r["time_ms"]), None)

    vs_seed = _speedups(seed_rows, ours_grouped, baseline_of=seed_tma_ms)
    for name, res, bar in (("seed-grouped vs cuBLAS loop", vs_cublas, 1.0 + 1e-9),
                           ("seed-grouped vs seed Triton+TMA", vs_seed, 1.0)):
        goal = "> 1.00x on every row" if "cuBLAS" in name else ">= 1.00x on every row"
        if res:
            text = ", ".join(f"{k[1]}: {v[0]:.2f}x" for k, v in res.items())
            add(name, goal, text, all(v[0] >= bar for v in res.values()))
        else:
            add(name, goal, "n/a", None)

    def best_of_ours(name, suite, providers, geo_goal, low_goal, who="best of ours"):
        """A target on the best of ``providers`` per case: geomean and minimum against cuBLAS."""
        goal = f"{who}: geomean >= {geo_goal:.2f}x and every row >= {low_goal:.2f}x cuBLAS"
        res = _speedups(all_rows.get(suite, []), providers)
        if not res:
            add(name, goal, "n/a", None)
            return
        values = [v[0] for v in res.values()]
        geo, low = geomean(values), min(values)
        worst = min(res.items(), key=lambda kv: kv[1][0])[0]
        add(name, goal, f"geomean {geo:.3f}x over {len(values)} rows, min {low:.3f}x ({worst[0]} {worst[1]})",
            geo >= geo_goal and low >= low_goal)

    best_of_ours("llm projections", "llm", {"tma", "persistent", "stream_k", "ws"}, 1.00, 0.95)
    # issue 32: projections as nn.Linear calls them, token counts that are not powers of two
    best_of_ours("llm-linear projections", "llm-linear", {"grouped", "tma", "stream_k", "split_k", "ws"}, 1.02, 0.97)
    # the same rows through the default dispatch alone: what a user calling matmul_auto gets
    best_of_ours("llm-linear, matmul_auto", "llm-linear", {"auto"}, 1.02, 0.97, who="matmul_auto")
    # issue 51 item 4: models and odd token counts (1 to 8191) the rules were not tuned on, both layouts
    best_of_ours("nn-linear, matmul_auto", "nn-linear", {"auto"}, 1.00, 0.93, who="matmul_auto")
    # issue 32 part 2: few tiles and a long K (GPU time, CUDA graphs), through the default dispatch
    few_tiles = [r for r in all_rows.get("stream-k", []) if r["case"] in ("512x512x16384", "1024x1024x8192")]
    res = _speedups(few_tiles, {"auto"})
    goal = "matmul_auto >= 0.90x cuBLAS on every few-tile, long-K row"
    add("stream-k few tiles, long K", goal, ", ".join(f"{k[1]}: {v[0]:.3f}x" for k, v in res.items()) or "n/a",
        min(v[0] for v in res.values()) >= 0.90 if res else None)

    # issue 19's targets: forward and forward+backward at default arguments, same run
    for name, provider, geo_goal, low_goal in (("moe grouped_mm vs torch._grouped_mm", "grouped_mm", 1.10, 0.90),
                                               ("moe grouped_mm fwd+bwd vs torch's fwd+bwd", "grouped_mm fwd+bwd",
                                                1.00, 0.85)):
        goal = f"geomean >= {geo_goal:.2f}x and every row >= {low_goal:.2f}x"
        moe = _speedups(all_rows.get("moe", []), {provider})
        if moe:
            values = [v[0] for v in moe.values()]
            geo, low = geomean(values), min(values)
            worst = min(moe.items(), key=lambda kv: kv[1][0])[0][1]
            add(name, goal, f"geomean {geo:.3f}x over {len(values)} rows, min {low:.3f}x ({worst})",
                geo >= geo_goal and low >= low_goal)
        else:
            add(name, goal, "n/a", None)

    # issue 31's targets: scaled_mm at default arguments against torch in the same run (the
    # baseline of each fp8 row: torch._scaled_mm's precise mode, or torch's block-wise kernel)
    fp8_rows = all_rows.get("fp8", [])
    for panel in ("tensor", "row"):
        res = _speedups([r for r in fp8_rows if r["panel"] == panel], {"scaled_mm"})
        big = {k[1]: v[0] for k, v in res.items() if k[1] in ("4096^3", "8192^3")}
        add(f"fp8 scaled_mm {panel}-wise 4096^3, 8192^3", ">= 1.05x torch._scaled_mm",
            ", ".join(f"{c}: {v:.3f}x" for c, v in big.items()) or "n/a",
            min(big.values()) >= 1.05 if len(big) == 2 else None)
        values = [v[0] for v in res.values()]
        add(f"fp8 scaled_mm {panel}-wise, every shape", "geomean >= 1.00x torch._scaled_mm",
            f"geomean {geomean(values):.3f}x over {len(values)} rows, min {min(values):.3f}x" if values else "n/a",
            geomean(values) >= 1.0 if values else None)
    res = _speedups([r for r in fp8_rows if r["panel"] == "block"], {"scaled_mm"})
    values = [v[0] for v in res.values()]
    add("fp8 scaled_mm block-wise", "geomean >= 1.00x torch's block-wise scaled_mm",
        f"geomean {geomean(values):.3f}x over {len(values)} rows, max {max(values):.3f}x" if values else "n/a",
        geomean(values) >= 1.0 if values else None)
    res = _speedups(all_rows.get("fp8-moe", []), {"scaled_grouped_mm"})
    values = [v[0] for v in res.values()]
    models = {k[0].split(" ")[0] for k in res}
    add("fp8-moe scaled_grouped_mm", "geomean >= 1.05x torch._scaled_grouped_mm over >= 6 models",
        f"geomean {geomean(values):.3f}x over {len(values)} rows of {len(models)} models" if values else "n/a",
        geomean(values) >= 1.05 and len(models) >= 6 if values else None)
    pairs = [p for suite in ("fp8", "fp8-moe") for p in _accuracy_pairs(all_rows.get(suite, []))]
    worse = [p for p in pairs if p[1] > p[2] * 1.05 + 1e-6]
    add("fp8 accuracy", "relative error vs float64 <= the vendor's (x1.05) on the same inputs",
        f"{len(pairs) - len(worse)} of {len(pairs)} rows" + (f"; worse: {', '.join(w[0] for w in worse[:3])}" if worse else ""),
        not worse if pairs else None)

    # issue 32's host-time target: a repeated call of every public launcher (kept launch, the
    # default) within 1.2x torch's host time on the same host, same run
    host = [r for r in all_rows.get("host", []) if r["ours"] and r["speedup"] is not None
            and not r["provider"].endswith("checked every call")]
    goal = "host time per call <= 1.2x torch's (speed-up >= 0.83x), every launcher"
    if host:
        worst = min(host, key=lambda r: r["speedup"])
        add("host time of a repeated call", goal,
            f"worst {1 / worst['speedup']:.2f}x torch's ({worst['provider']}, {worst['case']}) over {len(host)} rows",
            all(r["speedup"] >= 1 / 1.2 for r in host))
    else:
        add("host time of a repeated call", goal, "n/a", None)
    return found


def targets_markdown(all_rows: dict[str, list[dict]]) -> str:
    lines = [section_heading("targets"), "",
             "The project's performance targets on the measured GPU, as same-run ratios (computed from the CSVs below).", "",
             "| target | goal | measured | status |", "|---|---|---|---|"]
    for t in targets(all_rows):
        lines.append(f"| {t['target']} | {t['goal']} | {t['measured']} | {t['status']} |")
    return "\n".join(lines + [""])


# ------------------------------------------------------------------------------ meta, files


def read_meta(directory: Path) -> dict:
    """``directory``'s meta.json, ``{"suites": {suite: {...}}}`` (none there: no suites).
    ValueError naming the file when it is not JSON or not of that shape, or not a file."""
    path = Path(directory) / META_JSON
    if not path.exists() and not path.is_symlink():
        return {"suites": {}}
    try:
        meta = json.loads(read_text(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        problem = f"not JSON: {exc}"
    except RecursionError:
        problem = "nested too deeply to be a record"
    except ValueError as exc:  # json's own limits, e.g. an integer of more than 4300 digits
        problem = f"not a record: {str(exc)[:200]}"
    except OSError as exc:  # a folder, FIFO or broken link where the file should be
        problem = f"not a readable file: {exc}"
    else:
        suites = meta.get("suites") if isinstance(meta, dict) else None
        bad = [s for s, entry in suites.items() if not isinstance(entry, dict)] if isinstance(suites, dict) else None
        if bad is None:
            problem = 'not {"suites": {<suite>: {...}}}'
        elif bad:
            problem = f"the entry of {', '.join(bad)} is not an object"
        else:
            return meta
    raise ValueError(f"{path} is corrupt ({problem}): delete it (the suites it describes lose their provenance: "
                     "run them again) or restore it")


#: what a meta.json suite entry's keys hold, where present (read back by --resume, --publish and
#: the shards' merge): key -> the types allowed
ENTRY_TYPES = {"device": str, "torch": str, "triton": str, "timing": (dict, type(None)), "autotune": bool,
               "seed": int, "date": str, "elapsed_s": (int, float, type(None)), "resumed": int, "shard": list,
               "command": str, "dtypes": list}


def entry_problem(entry: dict, required: tuple[str, ...]) -> str | None:
    """What is wrong with a meta.json suite entry (None: nothing): a key of ``required`` missing,
    a value of another type than :data:`ENTRY_TYPES` says, a shard other than two ints ``I/N``."""
    missing = [k for k in required if k not in entry]
    if missing:
        return "no " + ", ".join(map(repr, missing))
    for key, types in ENTRY_TYPES.items():
        value = entry.get(key)
        if key in entry and (not isinstance(value, types) or isinstance(value, bool) and bool not in
                             (types if isinstance(types, tuple) else (types,))):
            return f"{key!r} is {value!r}"
    elapsed = entry.get("elapsed_s")
    if elapsed is not None and not (0 <= elapsed <= MAX_ELAPSED_S):  # NaN fails both; 10**400 too
        return f"'elapsed_s' is {str(elapsed)[:40]}"
    if entry.get("resumed", 0) < 0:
        return f"'resumed' is {entry['resumed']!r}"
    if "dtypes" in entry and not all(isinstance(d, str) for d in entry["dtypes"]):
        return f"'dtypes' is {entry['dtypes']!r}"
    shard = entry.get("shard", [0, 1])
    if len(shard) != 2 or not all(type(v) is int for v in shard) or not 0 <= shard[0] < shard[1] <= MAX_SHARDS:
        return f"'shard' is {str(shard)[:40]}"
    return None


#: bounds of a sane entry: a run of at most a year, split at most this many ways (a hand-edited
#: 10**12 shards would have the merge list them all)
MAX_ELAPSED_S, MAX_SHARDS = 365 * 24 * 3600, 4096
#: what publishing needs of a suite's entry: the provenance results.md shows
PUBLISH_REQUIRED = ("device", "torch", "triton", "date", "command")


def update_meta(directory: Path, suite: str, info: dict) -> dict:
    meta = read_meta(directory)
    meta["suites"][suite] = info
    write_text_atomic(Path(directory) / META_JSON, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def suites_present(directory: Path) -> list[str]:
    present = {p.stem for p in Path(directory).glob("*.csv")}
    return [s for s in SUITE_ORDER if s in present and s != "l2"]


def _suite_rows(directory: Path) -> dict[str, list[dict]]:
    """Every suite CSV in ``directory`` read as one (:data:`COLUMNS` its header: ValueError naming
    the file and its header when a column the markdown reads is missing)."""
    return {s: read_csv(Path(directory) / f"{s}.csv", suite_csv=True) for s in suites_present(directory)}


def render_markdown(directory: Path) -> str:
    """Rebuild ``results.md`` in ``directory`` from every suite CSV and meta.json there."""
    directory = Path(directory)
    meta = read_meta(directory)
    all_rows = _suite_rows(directory)
    parts = ["# Benchmark results", "",
             "Generated by `python -m gemm_kernels.bench` from the CSV files beside this one; "
             "`gemm_kernels.results.show_committed(suite)` shows a suite in a notebook.", ""]
    if any(r["time_ms"] is not None for rows in all_rows.values() for r in rows):
        parts.append(targets_markdown(all_rows))
    for suite, rows in all_rows.items():
        parts.append(suite_markdown(suite, rows, suite_meta(meta, suite)))
    l2_md = directory / "l2.md"
    if l2_md.is_file():
        parts.append(read_text(l2_md))
    text = "\n".join(parts).rstrip() + "\n"
    write_text_atomic(directory / RESULTS_MD, text)
    return text


def publish(src: Path, dest: Path, suites: list[str] | None = None) -> list[str]:
    """Copy suites' CSV/PNG files and meta.json entries from ``src`` into ``dest`` (the committed
    copy) and rebuild ``dest/results.md``.  Returns the suites copied."""
    src, dest = Path(src), Path(dest)
    if not src.is_dir():
        raise ValueError(f"{src} is not a directory of results (what --out of a run names)")
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{dest} is not a directory: results are published into one")
    if dest.exists() and src.resolve() == dest.resolve():
        raise ValueError(f"{src} is where results are published: give the directory of a run (its --out)")
    src_meta = read_meta(src)
    read_meta(dest)  # a corrupt one refused now, not after the first suite is copied
    chosen = [s for s in suites or [p.stem for p in src.glob("*.csv")] if (src / f"{s}.csv").is_file()]
    if not chosen:
        raise ValueError(f"{src} holds no suite's results (no <suite>.csv)")
    for suite in chosen:  # every file read and checked before anything is copied
        csv_path = src / f"{suite}.csv"
        rows = read_csv(csv_path, suite_csv=suite != "l2")
        if suite == "l2":
            continue
        if not any(r.get("time_ms") is not None for r in rows):
            raise ValueError(f"{csv_path} holds no timings (a CPU or correctness-only run): not publishing it")
        for r in rows:  # what results.md shows: a time, its TFLOP/s and speed-up, each a positive number
            bad = [k for k in ("time_ms", "tflops", "speedup")
                   if r.get(k) is not None and not (math.isfinite(r[k]) and r[k] > 0)]
            if bad:
                raise ValueError(f"{csv_path}: {r['case']} / {r['provider']} has {bad[0]} = {r[bad[0]]!r}, "
                                 "not a positive number: not publishing it")
        entry = src_meta["suites"].get(suite)
        problem = "no entry" if entry is None else entry_problem(entry, PUBLISH_REQUIRED)
        if problem:
            raise ValueError(f"{src / META_JSON}: {suite}'s entry: {problem}; its rows would be published without "
                             "their GPU, date and command: publish the directory a run wrote")
    if dest.is_dir():  # the suites kept there are rendered beside the new ones: each must be one
        for suite in set(suites_present(dest)) - set(chosen):
            read_csv(dest / f"{suite}.csv", suite_csv=True)
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for suite in chosen:
        for ext in ("csv", "png", "md"):
            f = src / f"{suite}.{ext}"
            if f.is_file():
                shutil.copy2(f, dest / f.name)
        if suite in src_meta["suites"]:
            update_meta(dest, suite, src_meta["suites"][suite])
        copied.append(suite)
    render_markdown(dest)
    return copied


def _case_groups(rows: list[dict]) -> list[list[dict]]:
    """Rows split into runs of one case each, in order."""
    groups: list[list[dict]] = []
    for r in rows:
        if groups and (groups[-1][0]["panel"], groups[-1][0]["case"]) == (r["panel"], r["case"]):
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def shard_of(k: int, n: int) -> int:
    """The shard that runs case k of a suite split n ways: 0, 1, ..., n-1, then n-1, ..., 0, and
    so on, so that a suite whose cases alternate (forward, forward+backward) gives every shard
    a fair share of both."""
    k %= 2 * n
    return k if k < n else 2 * n - 1 - k


def merge_shards(sources: list[Path], suite: str) -> tuple[list[dict], dict]:
    """One suite's rows and meta entry from the N directories of a ``--shard I/N`` run.

    Shard i ran the cases k with ``shard_of(k, N) == i``, in order: the merged rows take case k
    from there, which is the suite's own order.  ValueError if a shard is missing, repeated,
    incomplete, or measured with other software, timing settings or another kind of GPU."""
    entries = {}
    for src in sources:
        info = read_meta(src).get("suites", {}).get(suite)
        if info is None or not (Path(src) / f"{suite}.csv").is_file():
            raise ValueError(f"{src}: no {suite} results (a {suite}.csv and its meta.json entry)")
        shard = info.get("shard")
        if not shard:
            raise ValueError(f"{src}: its {suite} run was not a shard (--shard I/N): publish it alone")
        problem = entry_problem(info, PUBLISH_REQUIRED)
        if problem:
            raise ValueError(f"{Path(src) / META_JSON}: {suite}'s entry: {problem}")
        if tuple(shard) in entries:
            raise ValueError(f"{src}: shard {shard[0]}/{shard[1]} of {suite} given twice")
        if info.get("incomplete"):
            raise ValueError(f"{src}: shard {shard[0]}/{shard[1]} of {suite} is incomplete ({info['incomplete']}): "
                             "finish it with --resume first")
        entries[tuple(shard)] = (src, info)
    n = next(iter(entries))[1]
    wanted = {(i, n) for i in range(n)}
    if set(entries) != wanted:
        missing = ", ".join(f"{i}/{n}" for i, _ in sorted(wanted - set(entries)))
        raise ValueError(f"{suite}: shards {missing or '(other N)'} missing: give every shard of one --shard I/{n} run")
    first = entries[(0, n)][1]
    for (i, _), (src, info) in entries.items():
        for key in ("device", "torch", "triton", "timing", "autotune", "seed", "quick", "num_sms"):
            if info.get(key) != first.get(key):
                raise ValueError(f"{src}: shard {i}/{n} of {suite} has {key} = {info.get(key)!r} but shard 0 has "
                                 f"{first.get(key)!r}: shards must be measured alike")
    groups = [_case_groups(read_csv(Path(entries[(i, n)][0]) / f"{suite}.csv")) for i in range(n)]
    total = sum(len(g) for g in groups)
    owners = [shard_of(k, n) for k in range(total)]
    if any(len(groups[i]) != owners.count(i) for i in range(n)):
        raise ValueError(f"{suite}: the shards hold {[len(g) for g in groups]} cases, which no one suite of "
                         f"{total} cases split {n} ways gives")
    taken = [0] * n
    rows = []
    for owner in owners:
        rows += groups[owner][taken[owner]]
        taken[owner] += 1
    infos = [entries[(i, n)][1] for i in range(n)]
    merged = {k: v for k, v in first.items() if k not in ("shard", "ceilings")}
    merged.update(shards=n, date=min(i["date"] for i in infos),
                  elapsed_s=round(sum(i.get("elapsed_s") or 0 for i in infos), 1),
                  command=" ; ".join(dict.fromkeys(i["command"] for i in infos)),
                  ceilings_per_shard=[i.get("ceilings") for i in infos],
                  dtypes=sorted({d for i in infos for d in i.get("dtypes", [])}))
    return rows, merged


def current_commit() -> str:
    """The commit the source tree is at: ``GEMM_KERNELS_COMMIT`` (for a copy without ``.git``, as on a
    machine the tree was copied to; 7 to 40 hex digits), else git's HEAD when this tree is the
    repository's top (not a copy inside another repository), else "unknown"."""
    import subprocess

    given = os.environ.get("GEMM_KERNELS_COMMIT", "").strip()
    if given:
        if not re.fullmatch(r"[0-9a-f]{7,40}", given):
            raise ValueError(f"GEMM_KERNELS_COMMIT={given[:60]!r}: give the commit's hash, 7 to 40 hex digits")
        return given
    root = Path(__file__).resolve().parents[2]
    try:
        def git(*args):
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            return "unknown"
        return git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_record(path, tool: str, argv: list[str] | None, **fields) -> None:
    """A bench tool's ``--json`` record (``python -m gemm_kernels.bench.<tool>``): the command that
    made it, arguments quoted (``argv`` None: this process's), the GPU, date and versions, then
    ``fields``.  ``images/bench/*.json`` are these; a ``code`` field naming the commit is added
    when one is committed."""
    import datetime
    import shlex
    import sys

    import torch
    import triton

    given = sys.argv[1:] if argv is None else list(argv)
    record = {"command": f"python -m gemm_kernels.bench.{tool} " + shlex.join(given),
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU",
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "torch": torch.__version__, "triton": triton.__version__, **fields}
    with atomic_write(path) as f:
        json.dump(record, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_dict_csv(rows: list[dict], path: Path) -> None:
    """Rows as read by :func:`read_csv`, written back in the same format."""
    write_csv([Row(**{c: r.get(c) for c in COLUMNS}) for r in rows], path)


def peak_of(rows: list[dict]) -> float | None:
    """The dense peak (TFLOP/s) a suite's rows were measured against, read back from TFLOP/s and % of peak."""
    return next((r["tflops"] / r["pct_peak"] * 100 for r in rows if r.get("pct_peak")), None)


def publish_shards(sources: list[Path], dest: Path) -> list[str]:
    """Merge the shards in ``sources`` suite by suite (:func:`merge_shards`), re-plot, and
    publish into ``dest`` like :func:`publish`.  Returns the suites published."""
    import tempfile

    suites = sorted({p.stem for src in sources for p in Path(src).glob("*.csv")},
                    key=lambda s: SUITE_ORDER.index(s) if s in SUITE_ORDER else len(SUITE_ORDER))
    with tempfile.TemporaryDirectory() as tmp:
        merged_dir = Path(tmp)
        for suite in suites:
            rows, info = merge_shards(sources, suite)
            write_dict_csv(rows, merged_dir / f"{suite}.csv")
            update_meta(merged_dir, suite, info)
            peak = peak_of(rows)
            try:
                plot_suite(suite, rows, merged_dir / f"{suite}.png",
                           f"{suite} on {info.get('device')} ({info['date']})", peak)
            except ImportError:  # no matplotlib: the table and CSV still publish
                pass
        return publish(merged_dir, dest, suites)


# ------------------------------------------------------------------------------ plots

PLOT_KIND = {"square": "line", "order": "bar", "fusion": "bar", "stream-k": "bar", "seed-grouped": "line", "moe": "heatmap",
             "llm": "bar", "llm-linear": "bar", "decode": "bar", "nn-linear": "bar"}
X_LABEL = {"square": "M = N = K", "seed-grouped": "N (square problems) or M", "moe": "tokens"}


def plot_suite(suite: str, rows: list[dict], path: Path, title: str, peak: float | None) -> Path | None:
    """TFLOP/s per provider, one panel per group of cases (a heat map of speed-ups for suites
    with many small panels, such as ``moe``); None when nothing was timed."""
    timed = [r for r in rows if r["tflops"] is not None]
    if not timed:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if PLOT_KIND.get(suite) == "heatmap":
        return _plot_speedup_heatmap(suite, timed, path, title, plt)

    panels = list(OrderedDict.fromkeys(r["panel"] for r in timed))
    providers = list(OrderedDict.fromkeys(r["provider"] for r in timed))
    cols = min(3 if len(panels) <= 12 else 4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    # at least 9 inches wide: a one-panel figure must still hold the title and the legend
    fig, axes = plt.subplots(nrows, cols, figsize=(max(5.5 * cols, 9), 3.8 * nrows), squeeze=False)
    colors = {p: plt.cm.tab10(i % 10) for i, p in enumerate(providers)}
    for ax, panel in zip(axes.flat, panels):
        in_panel = [r for r in timed if r["panel"] == panel]
        if PLOT_KIND.get(suite) == "line":
            for p in providers:
                pts = sorted((r["x"], r["tflops"]) for r in in_panel if r["provider"] == p)
                if pts:
                    style = "-" if any(r["ours"] for r in in_panel if r["provider"] == p) else "--"
                    ax.plot(*zip(*pts), style, marker="o", ms=3, label=p, color=colors[p])
            ax.set_xscale("log", base=2)
            ax.set_xlabel(X_LABEL.get(suite, "x"))
        else:
            cases = list(OrderedDict.fromkeys(r["case"] for r in in_panel))
            width = 0.8 / max(1, len(providers))
            for i, p in enumerate(providers):
                vals = {r["case"]: r["tflops"] for r in in_panel if r["provider"] == p}
                xs = [j + i * width for j, c in enumerate(cases) if c in vals]
                ax.bar(xs, [vals[c] for c in cases if c in vals], width, label=p, color=colors[p])
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
            ax.set_xticklabels(cases, rotation=20, ha="right", fontsize=7)
        if peak and max(r["tflops"] for r in in_panel) > 0.25 * peak:  # else it squashes the data
            ax.axhline(peak, color="gray", lw=0.8, ls=":")
        ax.set_title(panel, fontsize=9)
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    legend = {}  # every provider once, whichever panel drew it (moe: forward and fwd+bwd panels differ)
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=min(5, len(legend)), fontsize=8,
               frameon=False)
    height = fig.get_size_inches()[1]  # margins in inches, so a tall figure does not waste a fraction of itself
    fig.suptitle(title + (f"  (dense peak {peak:g} TFLOP/s: dotted where in range)" if peak else ""), fontsize=10,
                 y=1 - min(0.02, 0.12 / height))
    fig.tight_layout(rect=(0, min(0.15, 0.6 / height), 1, 1 - min(0.05, 0.45 / height)))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110 if len(panels) <= 12 else 80)
    plt.close(fig)
    return path


def speedup_grid(rows: list[dict]) -> tuple[list[str], list[str], list[float], dict]:
    """The heat map's data: passes (the ``pass=`` parameter), row labels (panels without the pass),
    the ``x`` values, and ``{(pass, label): {x: speed-up}}``, each the best of ours against the baseline."""
    best: dict = {}
    for r in rows:
        if r["ours"] and r["ok"] is not False and r["speedup"]:
            label = re.sub(r",\s*(fwd\+bwd|fwd|bwd)\)$", ")", r["panel"])
            cell = best.setdefault((_param(r, "pass") or "", label), {})
            cell[r["x"]] = max(cell.get(r["x"], 0.0), r["speedup"])
    passes = list(OrderedDict.fromkeys(p for p, _ in best))
    labels = list(OrderedDict.fromkeys(label for _, label in best))
    xs = sorted({x for cells in best.values() for x in cells})
    return passes, labels, xs, best


def _plot_speedup_heatmap(suite: str, timed: list[dict], path: Path, title: str, plt) -> Path | None:
    """One heat map per pass, a row per panel, a column per ``x``: the baseline's time over the
    fastest of ours (above 1: ours is faster).  Readable where 64 small line plots are not."""
    from matplotlib.colors import TwoSlopeNorm

    passes, labels, xs, best = speedup_grid(timed)
    if not best:
        return None
    values = [v for cells in best.values() for v in cells.values()]
    norm = TwoSlopeNorm(1.0, min(min(values), 0.99), max(max(values), 1.01))
    fig, axes = plt.subplots(1, len(passes), figsize=(4.2 + 2.2 * len(passes) + 0.9 * len(xs) * len(passes),
                                                      1.2 + 0.32 * len(labels)), squeeze=False, sharey=True,
                             layout="constrained")
    baseline = next((r["baseline"] for r in timed if r["ours"]), "baseline")
    for ax, pass_ in zip(axes.flat, passes):
        grid = [[best.get((pass_, label), {}).get(x, math.nan) for x in xs] for label in labels]
        image = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto")
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if abs(norm(v) - 0.5) > 0.35 else "black")
        ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs])
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel(X_LABEL.get(suite, "x"))
        ax.set_title(pass_ or suite, fontsize=9)
    fig.colorbar(image, ax=list(axes.flat), shrink=0.6, label=f"{baseline} time / ours (>1: ours faster)")
    fig.suptitle(title, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def replot_committed(suite: str, directory: Path | None = None) -> Path | None:
    """Redraw ``<suite>.png`` from the committed ``<suite>.csv`` and its meta.json entry (no GPU):
    for a change of the plot alone, so the picture never drifts from its data."""
    from ..results import _bench_dir

    directory = Path(directory) if directory is not None else _bench_dir()
    rows = read_csv(directory / f"{suite}.csv", suite_csv=True)
    info = suite_meta(read_meta(directory), suite)
    peak = peak_of(rows)
    return plot_suite(suite, rows, directory / f"{suite}.png", f"{suite} on {info.get('device')} ({info.get('date')})", peak)
