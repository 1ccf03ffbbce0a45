"""``python -m gemm_kernels.bench``: time our kernels against cuBLAS, torch._grouped_mm and the seed's.

Suites (``--suite``, comma-separated or ``all``):

* ``square``: single square GEMMs, fp16 and bf16, 256..8192 plus points of the seed notes' sweep;
* ``order``: row-major vs grouped program order (GROUP_SIZE_M 4/8/16);
* ``fusion``: matmul + activation (+ bias) fused vs torch.matmul then the activation;
* ``stream-k``: few-tile, long-K shapes, cuBLAS vs ``matmul_tma`` vs ``matmul_streamk``, timed from
  CUDA graphs (GPU time);
* ``seed-grouped``: the seed tutorial 08's two tables, with the seed's own kernels (``--seed-tutorial``);
* ``moe``: ragged MoE expert GEMMs of eight public MoE models, forward and forward+backward
  (``python -m gemm_kernels.bench.moe_host``: grouped_mm's host time per call);
* ``llm``: dense projections (QKV, O, gate/up, down) of Llama-3-8B/70B, Qwen3-32B,
  Mistral-Small-24B and DeepSeek-V3, ``x @ W^T``, fp16 and bf16, with the cuBLAS kernel's name.
* ``decode``: M = 1..64 rows against bf16 weights (b = W.t()), cuBLAS vs ``matmul_decode`` and
  ``matmul_auto``, timed from CUDA graphs.

Every cell is checked against a float64 reference once and, on a CUDA GPU, timed (``do_bench``
median: CUDA events around each call, an L2-flushing write queued before it, which hides host
time only up to about a 60 µs wait, notebook 09b; ``stream-k`` replays CUDA graphs) and the vendor baseline's
kernel named (``torch.profiler``).  Outputs in ``--out`` (default ``bench-results/``): CSV, plot,
``results.md``, ``meta.json``; ``--commit`` copies them to ``images/bench/``, ``--publish DIR...``
copies (and merges the ``--shard I/N`` parts of) earlier runs there; ``--resume`` continues a run
that ``--time-budget`` ended.

On a machine without a CUDA GPU nothing can be timed; ``--quick`` still runs every suite's
kernels at tiny sizes in Triton's interpreter and checks them (CI runs this).

Exit status: 0 all correct; 1 one of our kernels was wrong or raised; 2 usage; 3 a CUDA
error that poisons the context stopped the run (partial results are written).
"""

from __future__ import annotations

import argparse
import os
import datetime as _dt
import platform
import shlex
import sys
import time
from pathlib import Path

import torch

from .. import runtime
from ..results import BENCH_DIR, META_JSON, RESULTS_MD, extract_section, read_text, section_heading
from . import report
from .core import (DTYPES, FatalBenchError, Row, Skip, Stopwatch, TimingSettings, dense_peak_tflops, dtype_name,
                   gemm_flops, gemm_min_bytes, measure_ceilings, non_negative_int, number_arg, peak_entry,
                   positive_float, positive_int, run_case, tflops)
from .suites import CUDA_GRAPH_SUITES, SUITES, SuiteSettings

__all__ = ["main", "SUITES", "dense_peak_tflops", "gemm_flops", "gemm_min_bytes", "tflops", "run_suite"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = "bench-results"
#: a case's seed is ``seed * 1_000_003 + k``: an int32 base keeps it inside torch's int64 seeds
SEED_ARG = number_arg(int, -2**31, 2**31 - 1)
NO_GPU_MESSAGE = (
    "No CUDA GPU here ({reason}).\n"
    "Timings need a CUDA GPU: nothing is timed on this machine."
)


def _parse_suites(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:  # --suite '' ran nothing and reported success
        raise argparse.ArgumentTypeError(f"no suite given; choose from {', '.join(SUITES)}, all")
    unknown = [n for n in names if n not in SUITES and n != "all"]  # all,typo: the typo is still named
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown suite {', '.join(unknown)}; choose from {', '.join(SUITES)}, all")
    return list(SUITES) if "all" in names else names


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes I/N (e.g. 0/2), got {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"--shard {text}: I must be in 0..N-1 and N >= 1")
    return i, n


def shown_bench_dir() -> str:
    """The committed copy's folder as help shows it: relative to the repository when inside it,
    else as given (``GEMM_KERNELS_RESULTS_DIR`` may name any folder, a relative one too)."""
    try:
        return str(BENCH_DIR.relative_to(REPO_ROOT))
    except ValueError:
        return str(BENCH_DIR)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gemm_kernels.bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=_parse_suites, default=list(SUITES),
                   help=f"comma-separated: {', '.join(SUITES)}, or all (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="a short smoke run (a few sizes on a GPU; tiny sizes, correctness only, on a CPU)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT}/)")
    p.add_argument("--commit", action="store_true",
                   help=f"also copy the results into {shown_bench_dir()}/ (full GPU runs only)")
    p.add_argument("--publish", metavar="DIR", nargs="+",
                   help=f"copy an earlier run's results from DIR into {shown_bench_dir()}/ and exit; "
                        "several DIRs: the shards of one run (--shard), merged")
    p.add_argument("--shard", type=_parse_shard, metavar="I/N",
                   help="run shard I of N of each suite (0 <= I < N; cases dealt 0..N-1, N-1..0, ...): one shard per GPU")
    p.add_argument("--resume", action="store_true",
                   help="keep the cases already in --out's CSVs (same GPU, same shard) and run the rest")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="run every suite in this dtype (default: per suite)")
    p.add_argument("--seed-tutorial", metavar="PATH",
                   help="the saved page of Triton's tutorial 08 (the seed); default: $GEMM_BENCH_SEED_TUTORIAL, "
                        "seeds/ or ../shared/seeds/")
    p.add_argument("--seed", type=SEED_ARG, default=0, help="base of the random seeds (default 0)")
    p.add_argument("--warmup", type=non_negative_int, default=25, help="do_bench warm-up, ms (default 25)")
    p.add_argument("--rep", type=positive_int, default=100, help="do_bench repetition time, ms (default 100)")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="time each case's providers this many times, interleaved; report medians (default 3)")
    p.add_argument("--time-budget", type=positive_float, metavar="SECONDS",
                   help="start no new case after this many seconds (what ran is kept and reported as incomplete)")
    p.add_argument("--list", action="store_true",
                   help="list the cases a GPU run would time (with --quick: the quick ones), and exit")
    return p


def _versions() -> dict:
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()}


def _progress(iterable, total: int, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # progress is a nicety: print a line per case instead
        def plain():
            for i, item in enumerate(iterable, 1):
                print(f"[{desc}] {i}/{total}", file=sys.stderr, flush=True)
                yield item
        return plain()
    return tqdm(iterable, total=total, desc=desc, unit="case", file=sys.stderr, dynamic_ncols=True)


def _setup_row(case, exc: Exception) -> Row:
    """A row standing for a case that could not be set up: skipped (Skip) or failed (anything else)."""
    if isinstance(exc, Skip):
        ok, note = None, f"case skipped: {exc}"
    else:
        ok, note = False, "case set-up failed: " + f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return Row(case.suite, case.panel, case.label, case.x, dtype_name(case.dtype), "(setup)", case.baseline,
               ours=True, ok=ok, flops=case.flops, min_bytes=case.min_bytes, note=note)


def run_suite(suite: str, settings: SuiteSettings, timing: TimingSettings | None, csv_path: Path | None = None,
              deadline: float | None = None, shard: tuple[int, int] = (0, 1),
              kept: list[Row] | None = None) -> tuple[list[Row], str | None, str | None]:
    """Run one suite (the cases of shard ``shard[0]`` of ``shard[1]``, :func:`report.shard_of`).
    Returns its rows, the CUDA error that stopped it (or None) and why it stopped early (or
    None).  With ``csv_path`` the CSV is rewritten after every case, so a run killed from
    outside keeps what it measured; past ``deadline`` (time.monotonic()) no new case starts.
    ``kept``: rows of an earlier run of the same shard (``--resume``); their cases are not run
    again."""
    cases = [c for k, c in enumerate(SUITES[suite](settings)) if report.shard_of(k, shard[1]) == shard[0]]
    rows: list[Row] = list(kept or [])
    done_cases = {(r.panel, r.case) for r in rows}
    todo = [c for c in cases if (c.panel, c.label) not in done_cases]
    if len(done_cases) + len(todo) != len(cases):
        raise ValueError(f"--resume: {csv_path} holds cases this shard of {suite} does not have: "
                         "resume with the same --suite, --shard, --dtype and --seed")
    gpu = runtime.gpu_name()
    progress = _progress(todo, len(todo), suite)
    for done, case in enumerate(progress):
        if deadline is not None and time.monotonic() > deadline:
            return rows, None, f"time budget reached: {len(cases) - len(todo) + done} of {len(cases)} cases run"
        if hasattr(progress, "set_postfix_str"):
            progress.set_postfix_str(f"{case.panel} {case.label}"[:60])
        try:
            rows += run_case(case, timing, dense_peak_tflops(gpu, case.dtype) if timing else None)
        except FatalBenchError as exc:
            return rows, str(exc), None
        except Exception as exc:  # set-up failures (API mismatch, out of memory) land in the table
            rows.append(_setup_row(case, exc))
            if runtime.on_gpu():
                torch.cuda.empty_cache()
        if csv_path is not None:
            report.write_csv(rows, csv_path)
    return rows, None, None


def _cannot_resume(earlier: dict, run_info: dict, shard: tuple[int, int]) -> str | None:
    """Why an earlier run's rows cannot be continued by this one (None: they can)."""
    if not earlier:
        return "no meta.json entry for it: it was not written by a run of this command"
    def same(key, info):  # a suite timed from CUDA graphs adds its "method" to the run's timing
        value = info.get(key)
        return {k: v for k, v in value.items() if k != "method"} if key == "timing" and value else value

    for key in ("device", "torch", "triton", "timing", "autotune", "seed"):
        if same(key, earlier) != same(key, run_info):
            return f"the earlier run had {key} = {earlier.get(key)!r}, this one {run_info.get(key)!r}"
    if list(earlier.get("shard", [0, 1])) != list(shard):
        return f"the earlier run was shard {earlier.get('shard', [0, 1])}, this one {list(shard)}"
    return None


#: what --resume needs of an earlier run's meta.json entry, to tell whether it was measured alike
_ENTRY_REQUIRED = ("device", "torch", "triton", "timing", "autotune", "seed")


def _entry_problem(entry: dict) -> str | None:
    """What is wrong with a meta.json suite entry that --resume reads (None: nothing)."""
    return report.entry_problem(entry, _ENTRY_REQUIRED)


def _read_out(out: Path, suites: list[str], resume: bool, run_info: dict,
              shard: tuple[int, int]) -> dict[str, tuple[list[Row], dict]]:
    """Check, before any work, what this run will read back from ``out``: meta.json, the CSVs of
    the other suites there (results.md is rebuilt from them) and, with ``resume``, each suite's
    earlier rows and meta.json entry.  Returns {suite: (rows kept, earlier entry)} to resume;
    ValueError naming the file and what is wrong."""
    meta = report.read_meta(out)
    for other in report.suites_present(out):
        if other not in suites:
            report.read_csv(out / f"{other}.csv", suite_csv=True)
    if (out / "l2.md").exists():  # results.md takes it in: not UTF-8 text, it would fail after the work
        read_text(out / "l2.md")
    results_md = out / RESULTS_MD
    if results_md.exists() and not results_md.is_file():
        raise ValueError(f"{results_md} is not a file, and the run writes it: move it away")
    kept = {}
    for suite in suites if resume else []:
        csv_path = out / f"{suite}.csv"
        if not csv_path.is_file():
            continue
        earlier = meta["suites"].get(suite, {})
        wrong = _entry_problem(earlier) if earlier else None
        if wrong:
            raise ValueError(f"--resume {suite}: the {suite} entry of {out / META_JSON} is corrupt ({wrong}): "
                             "run without --resume (its cases run again)")
        problem = _cannot_resume(earlier, run_info, shard)
        if problem:
            raise ValueError(f"--resume {suite}: {problem}")
        rows, cut = report.read_csv_to_resume(csv_path)
        if cut:
            print(f"[{suite}] {cut}")
        kept[suite] = ([Row(**r) for r in rows], earlier)
    return kept


def _unwritable_at(path: Path) -> str | None:
    """Why a directory cannot be made at ``path`` (its first existing ancestor is a file or cannot
    be written), or None."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if existing != path.absolute() and not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written"
    return None


def _list_cases(suites: list[str], settings: SuiteSettings) -> None:
    for suite in suites:
        cases = SUITES[suite](settings)
        print(f"{suite}: {len(cases)} cases")
        for c in cases:
            print(f"  [{c.panel}] {c.label}: {c.flops / 1e9:.3g} GFLOP, >= {c.min_bytes / 1e6:.3g} MB, "
                  f"{dtype_name(c.dtype)}, baseline {c.baseline}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if Path(args.out).exists() and not Path(args.out).is_dir():  # found before any work, not as a traceback
        parser.error(f"--out {args.out} is an existing file; --out names a directory (created if missing)")
    blocked = _unwritable_at(Path(args.out))
    if blocked and not (args.publish or args.list):
        parser.error(f"--out {args.out}: {blocked}")
    command = "python -m gemm_kernels.bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                  else sys.argv[1:]))
    if args.publish:
        try:
            if len(args.publish) == 1:
                copied = report.publish(Path(args.publish[0]), BENCH_DIR)
            else:
                copied = report.publish_shards([Path(d) for d in args.publish], BENCH_DIR)
        except (ValueError, OSError) as exc:  # OSError: a destination that cannot be written
            print(f"error: {exc}")
            return 2
        print(f"published {', '.join(copied) or 'nothing'} from {' '.join(args.publish)} into {BENCH_DIR}")
        return 0
    if args.commit and args.shard and args.shard[1] > 1:
        parser.error("--commit takes a whole run: commit the shards together with --publish DIR0 DIR1 ...")

    info = runtime.describe()
    print(f"gemm_kernels.bench: {info['mode']} on {info['gpu']} (torch {info['torch']}, triton {info['triton']})")
    on_gpu = runtime.on_gpu()
    if not on_gpu:
        print(NO_GPU_MESSAGE.format(reason=runtime.RUNTIME.reason))
        if args.commit:
            print("--commit needs a full run on a CUDA GPU: refusing to commit correctness-only results.")
            return 2
        if not args.quick and not args.list:
            print("`--quick` runs every suite's kernels at tiny sizes in Triton's interpreter and checks them "
                  "(correctness only).")
            return 2
        print("--quick: every suite's kernels run at tiny sizes in Triton's interpreter and are checked "
              "against float64 references; the CSV/markdown hold correctness only.")
    elif args.commit and args.quick:
        print("--commit needs the full run: refusing to commit --quick results.")
        return 2
    autotune = getattr(runtime, "autotune_enabled", runtime.on_gpu)()
    if on_gpu and not autotune:
        print("WARNING: autotuning is off (GEMM_KERNELS_AUTOTUNE=0): our kernels run one fixed config each, "
              "so their timings are not tuned.")
        if args.commit:
            print("--commit needs tuned kernels: unset GEMM_KERNELS_AUTOTUNE.")
            return 2

    from .seed import SeedError, find_seed_tutorial

    try:
        seed_path = find_seed_tutorial(args.seed_tutorial, REPO_ROOT)
    except SeedError as exc:
        print(f"error: {exc}")
        return 2
    settings = SuiteSettings(quick=args.quick, dtype=DTYPES[args.dtype] if args.dtype else None, seed=args.seed,
                             seed_tutorial=seed_path)
    if args.list:  # the GPU sizes, also on a CPU (to plan a GPU run)
        settings.size_override = "quick" if args.quick else "full"
        _list_cases(args.suite, settings)
        return 0
    if "seed-grouped" in args.suite:
        print(f"seed tutorial: {seed_path}" if seed_path else
              "seed tutorial not found: the seed's kernels are skipped (pass --seed-tutorial PATH)")

    gpu = runtime.gpu_name()
    timing = TimingSettings(args.warmup, args.rep, args.rounds) if on_gpu else None
    run_info = {
        "device": gpu, "mode": info["mode"], "compute_capability": info["compute_capability"],
        "num_sms": info["num_sms"], **_versions(), "command": command,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick, "seed": args.seed, "autotune": autotune,
        "timing": {"do_bench_warmup_ms": args.warmup, "do_bench_rep_ms": args.rep, "return_mode": "median",
                   "rounds": args.rounds, "reported": "median of the rounds, providers interleaved"}
        if on_gpu else None,
        "peak_entry": peak_entry(gpu) if on_gpu else None,
    }
    out = Path(args.out)
    shard = args.shard or (0, 1)
    try:
        resumed = _read_out(out, args.suite, args.resume, run_info, shard)
        out.mkdir(parents=True, exist_ok=True)
    except (ValueError, OSError) as exc:  # a corrupt file, rows of another run, no directory: before any GPU time
        print(f"error: {exc}")
        return 2
    if on_gpu:
        entry = peak_entry(gpu)
        print(f"dense fp16/bf16 peak: {dense_peak_tflops(gpu, torch.float16)} TFLOP/s ({entry})" if entry else
              f"dense peak of '{gpu}' unknown: % of peak is left empty")
        run_info["ceilings"] = measure_ceilings(timing)
        print(f"measured ceilings: {run_info['ceilings']}")

    failures, fatal, incomplete = [], None, []
    deadline = time.monotonic() + args.time_budget if args.time_budget is not None else None
    for suite in args.suite:
        watch = Stopwatch()  # a spent time budget still writes the suite's (empty) CSV: --resume runs it
        kept, earlier = resumed.get(suite, ([], {}))
        if suite in resumed:
            print(f"[{suite}] resuming: {len({(r.panel, r.case) for r in kept})} cases kept from {out}")
        try:
            rows, fatal, stopped = run_suite(suite, settings, timing, out / f"{suite}.csv", deadline, shard, kept)
        except ValueError as exc:  # --resume over another suite's or shard's rows
            print(f"error: {exc}")
            return 2
        elapsed = watch.seconds() + (earlier.get("elapsed_s") or 0)
        report.write_csv(rows, out / f"{suite}.csv")
        suite_info = {**run_info, "suite": suite, "elapsed_s": round(elapsed, 1),
                      "dtypes": sorted({r.dtype for r in rows})}
        if earlier:
            suite_info["resumed"] = earlier.get("resumed", 0) + 1
            suite_info["date"] = earlier.get("date", suite_info["date"])
        if shard[1] > 1:
            suite_info["shard"] = list(shard)
        if suite in CUDA_GRAPH_SUITES and suite_info.get("timing"):
            suite_info["timing"] = {**suite_info["timing"], "method": "triton.testing.do_bench_cudagraph "
                                    "(back-to-back calls replayed from a CUDA graph: GPU time, no L2 flush)"}
        if stopped:
            suite_info["incomplete"] = stopped
            incomplete.append(suite)
            print(f"[{suite}] {stopped}")
        if suite == "seed-grouped" and not isinstance(settings.seed_kernels, (str, type(None))):
            suite_info["seed_notes"] = settings.seed_kernels.notes
        report.update_meta(out, suite, suite_info)
        dict_rows = report.read_csv(out / f"{suite}.csv")
        peak = dense_peak_tflops(gpu, dict_rows[0]["dtype"] and DTYPES[dict_rows[0]["dtype"]]) \
            if on_gpu and dict_rows else None
        png = None
        try:
            png = report.plot_suite(suite, dict_rows, out / f"{suite}.png",
                                    f"{suite} on {gpu} ({run_info['date']})", peak)
        except ImportError as exc:
            print(f"[{suite}] no plot: {exc}")
        failures += [r for r in rows if r.ours and r.failed]
        print(f"[{suite}] {len(rows)} rows in {elapsed:.0f} s -> {out / (suite + '.csv')}"
              + (f", {png}" if png else ""))
        if fatal:
            print(f"[{suite}] stopped by a CUDA error: {fatal}")
            break

    text = report.render_markdown(out)
    print()
    for suite in args.suite:  # this run's tables, then the targets last (they end the output)
        section = extract_section(text, suite)
        if section is not None:
            print(section_heading(suite) + "\n\n" + section + "\n")
    targets = extract_section(text, "targets")
    if targets is not None:
        print(section_heading("targets") + "\n\n" + targets + "\n")
    print(f"full markdown: {out / 'results.md'}")
    if args.commit and not fatal:
        complete = [s for s in args.suite if s not in incomplete]
        copied = report.publish(out, BENCH_DIR, complete) if complete else []
        print(f"committed copy updated: {', '.join(copied) or 'nothing'} -> {BENCH_DIR}"
              + (f" (incomplete, not committed: {', '.join(incomplete)})" if incomplete else ""))
    if incomplete:
        print(f"incomplete suites (time budget): {', '.join(incomplete)}; run them again with --suite")
    if failures:
        print(f"{len(failures)} of our kernel runs were WRONG or raised:")
        for r in failures:
            err = f"rel err {r.rel_err:.3g} > {r.tol:g}" if r.rel_err is not None else r.note
            print(f"  {r.suite} [{r.panel}] {r.case} {r.provider}: {err}")
    print(f"results in {out.resolve()}")
    if fatal:
        return 3
    return 1 if failures else 0
