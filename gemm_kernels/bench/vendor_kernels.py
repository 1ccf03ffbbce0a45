"""Which kernel the vendor baseline ran, per case: ``python -m gemm_kernels.bench.vendor_kernels``.

A full benchmark run records it itself (``core.run_case`` fills the ``vendor_kernel`` column of
every baseline row on a GPU).  This module does only that part, without timing anything: it sets
up each case of the chosen suites, profiles one call of the baseline (``core.vendor_kernel_of``)
and writes ``vendor_kernels.csv`` (suite, case, dtype, provider, vendor_kernel).  ``--merge CSV``
then writes those names into the committed suite CSVs under ``images/bench/`` (the baseline row
of each matching case) and rebuilds ``results.md``; the timings are left as they are.

    python -m gemm_kernels.bench.vendor_kernels --suite square,fusion,stream-k --out vk   # on a GPU
    python -m gemm_kernels.bench.vendor_kernels --merge vk/vendor_kernels.csv             # anywhere
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

FIELDS = ("suite", "case", "dtype", "provider", "vendor_kernel")


def profile_suites(suites: list[str], quick: bool = False) -> list[dict]:
    """One row per case of ``suites``: the kernels one call of its baseline launches (GPU only)."""
    import torch

    from .. import runtime
    from .core import dtype_name, vendor_kernel_of
    from .suites import SUITES, SuiteSettings

    if not runtime.on_gpu():
        raise RuntimeError("naming the vendor's kernels needs a CUDA GPU (torch.profiler's CUDA activity)")
    rows = []
    for suite in suites:
        for case in SUITES[suite](SuiteSettings(quick=quick)):
            data = case.setup()
            baseline = next(p for p in data.providers if p.name == case.baseline)
            rows.append({"suite": suite, "case": case.label, "dtype": dtype_name(case.dtype),
                         "provider": baseline.name, "vendor_kernel": vendor_kernel_of(baseline.fn)})
            print(f"[{suite}] {case.label} {rows[-1]['dtype']}: {rows[-1]['vendor_kernel']}", flush=True)
            del data, baseline
            torch.cuda.empty_cache()
    return rows


def write(rows: list[dict], path: Path) -> None:
    from .report import atomic_write

    with atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def merge(names_csv: Path, bench_dir: Path, provenance: dict | None = None) -> dict[str, int]:
    """Write the names of ``names_csv`` into ``bench_dir``'s suite CSVs (baseline rows of the same
    suite, case and dtype), keeping every other cell as written, record ``provenance`` (device,
    date, torch, command of the profiling run) as ``meta.json``'s ``suites.<suite>.vendor_kernel``,
    and rebuild results.md there.  Returns how many rows of each suite got a name."""
    from . import report
    from .core import COLUMNS, short_kernel_name

    def short(label: str) -> str:  # names profiled before a shortening rule existed get it too
        return " + ".join(short_kernel_name(part) for part in label.split(" + "))

    with Path(names_csv).open(newline="") as f:
        names = {(r["suite"], r["case"], r["dtype"], r["provider"]): short(r["vendor_kernel"])
                 for r in csv.DictReader(f)}
    filled: dict[str, int] = {}
    for suite in sorted({key[0] for key in names}):
        path = Path(bench_dir) / f"{suite}.csv"
        if not path.is_file():
            continue
        with path.open(newline="") as f:
            raw = list(csv.DictReader(f))
        filled[suite] = 0
        for row in raw:
            name = names.get((suite, row["case"], row["dtype"], row["provider"]))
            row["vendor_kernel"] = name if name is not None else row.get("vendor_kernel", "")
            filled[suite] += name is not None
        with report.atomic_write(path, newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows({c: row.get(c, "") for c in COLUMNS} for row in raw)
        if provenance and filled[suite]:
            meta = report.read_meta(Path(bench_dir))
            if suite in meta.get("suites", {}):
                report.update_meta(Path(bench_dir), suite, {**meta["suites"][suite], "vendor_kernel": provenance})
    report.render_markdown(Path(bench_dir))
    return filled


def main(argv: list[str] | None = None) -> int:
    from ..results import BENCH_DIR

    p = argparse.ArgumentParser(prog="python -m gemm_kernels.bench.vendor_kernels",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="square,fusion,stream-k", help="comma-separated suites to profile")
    p.add_argument("--quick", action="store_true", help="the quick run's cases only")
    p.add_argument("--out", default="bench-results", help="directory for vendor_kernels.csv")
    p.add_argument("--merge", metavar="CSV", help=f"write a vendor_kernels.csv into {BENCH_DIR} and exit")
    p.add_argument("--device", help="with --merge: the GPU the names were profiled on (provenance)")
    p.add_argument("--date", help="with --merge: when they were profiled (provenance)")
    p.add_argument("--torch", help="with --merge: the torch version they were profiled with (provenance)")
    args = p.parse_args(argv)
    if args.merge:
        provenance = {k: v for k, v in {"device": args.device, "date": args.date, "torch": args.torch,
                                         "command": f"python -m gemm_kernels.bench.vendor_kernels"}.items() if v}
        filled = merge(Path(args.merge), BENCH_DIR, provenance if args.device else None)
        print(", ".join(f"{s}: {n} rows named" for s, n in filled.items()) or "nothing merged")
        return 0
    rows = profile_suites([s.strip() for s in args.suite.split(",") if s.strip()], args.quick)
    out = Path(args.out) / "vendor_kernels.csv"
    write(rows, out)
    print(f"{len(rows)} cases -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
