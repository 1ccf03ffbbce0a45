"""The first call of a new shape, and the host time of a repeated call (issue 51, items 1 and 2).

    export PYTHONPATH=$PWD; OUT=DIR python tests/gpu_first_call.py      # GPU only, about 3-4 minutes

Fresh Triton and tuning caches (temporary directories) at the start, so every number says what
it paid.  fp16, b = W.t() (an nn.Linear weight); every output is checked against float64 first.
(a) In-process first calls: ms of one synchronised call for a new bucket, then a new M in that
    bucket (N, K, dtype and layout seen), against the launcher's repeated call and torch's; with
    the host's part (until the call returns, before the sync) and the caching allocator's new
    segments (cudaMalloc calls) during the call, which a new size of C may need.
(b) A fresh process with the tuning cache warm (a new M in a bucket tuned by (a)), and one with
    it empty (Triton's compile cache warm in both): first-call ms and tuning runs.
(c) Per bucket, each M's time under the bucket's pick (tuned at the bucket's first M) against
    the best config for that M, every candidate timed from a CUDA graph (``core.median_ms``).
(d) Host µs per repeated call at 192 x 192 x 320 (``core.host_ms``, 5 interleaved rounds),
    ``matmul_auto``, ``matmul_ws`` and ``torch.matmul``, with cProfile's top lines.
(e) cProfile of 31 first calls of new Ms, each in a tuned bucket (``matmul_auto`` and torch's).
Writes ``$OUT/first_call.json``; prints a summary last.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__" and "--child" not in sys.argv:  # before triton is imported: fresh caches
    _CACHES = tempfile.mkdtemp(prefix="first_call_")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHES, "triton")
    os.environ["GEMM_KERNELS_TUNING_CACHE"] = os.path.join(_CACHES, "tuning")

import torch  # noqa: E402

import gemm_kernels as gk  # noqa: E402
from gemm_kernels.bench.core import TimingSettings, host_ms, host_profile, median_ms  # noqa: E402
from gemm_kernels.kernels import configs, matmul_ws, persistent, splitk  # noqa: E402
from gemm_kernels.kernels.dispatch import pick_launcher  # noqa: E402
from gemm_kernels.kernels.matmul import matmul_ref  # noqa: E402
from gemm_kernels.testing import assert_close  # noqa: E402

DTYPE = torch.float16
LAUNCHERS = {"matmul_auto": gk.matmul_auto, "matmul_ws": matmul_ws.matmul_ws, "matmul_tma": gk.matmul_tma,
             "matmul_splitk": gk.matmul_splitk, "torch.matmul": torch.matmul}
#: (a) and (b): (N, K) and the Ms called in turn: a new bucket, a new M in it, another new bucket
FIRST_CALLS = {"llm 4096x4096": (4096, 4096, (1000, 950, 1023, 2000)),
               "few tiles 1024x4096": (1024, 4096, (100, 120, 70, 200))}
#: (c): launcher, (N, K), buckets as lists of M (the first one tunes)
BUCKET_PICKS = [("matmul_tma", (4096, 4096), ((600, 577, 640), (1650, 1537, 1792), (3800, 3585, 4096))),
                ("matmul_tma", (14336, 4096), ((257, 300, 320), (1000, 897, 1024))),
                ("matmul_splitk", (1024, 4096), ((16, 1, 64), (160, 129, 192), (300, 257, 320)))]
CANDIDATES = {"matmul_tma": configs.tma_configs, "matmul_splitk": configs.splitk_configs}
HOST_SHAPE = (192, 192, 320)


def _inputs(M, N, K):
    return torch.randn(M, K, device="cuda", dtype=DTYPE), torch.randn(N, K, device="cuda", dtype=DTYPE).t()


def _sync_ms(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def _first_call_parts(fn) -> tuple[float, float, int]:
    """ms of one synchronised call, ms until it returned (the host's part), and the segments the
    caching allocator took from the driver meanwhile (each a cudaMalloc)."""
    torch.cuda.synchronize()
    segments = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    start = time.perf_counter()
    fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return wall * 1e3, host * 1e3, torch.cuda.memory_stats().get("segment.all.allocated", 0) - segments


def _counting_tuning():
    """Count tuning runs of every TunedKernel (a list that grows by one per run)."""
    runs = []
    real = configs.TunedKernel._tune

    def counted(self, *args, **kwargs):
        runs.append(getattr(self.fn, "__name__", "?"))
        return real(self, *args, **kwargs)
    configs.TunedKernel._tune = counted
    return runs


def _tuning_dir(name) -> str:
    return os.path.join(os.environ["GEMM_KERNELS_TUNING_CACHE"], name.replace(".", "_"))


def _fresh_state(name) -> None:
    """Forget every tuned pick, kept launch and plan of this process (compiled kernels stay), and
    keep picks from now on in ``name``'s own directory: each launcher's first calls pay their own way."""
    from gemm_kernels.kernels import dispatch, launches, matmul

    tuned = [persistent._tma_tuned, persistent._persistent_tuned, splitk._splitk_tuned,
             splitk._splitk_tuned_rows_specialised, matmul._matmul_tuned, matmul._matmul_tuned_rows_specialised]
    for t in tuned:
        t.chosen.clear()
        t.autotuner.cache.clear()
        t.disk = type(t.disk)(t.fn, t.configs, t.disk._variant)
    os.environ["GEMM_KERNELS_TUNING_CACHE"] = _tuning_dir(name)
    for cache in (dispatch._PICKS, matmul._KEPT, splitk._KEPT, *persistent._KEPT.values()):
        cache.clear()
    matmul_ws._PLANS.clear()
    assert launches.keeping()


def first_calls(runs) -> list[dict]:
    """(a): per family and launcher, each M's first call, then that M's repeated call."""
    rows = []
    root = os.environ["GEMM_KERNELS_TUNING_CACHE"]
    for family, (N, K, ms) in FIRST_CALLS.items():
        for name, call in LAUNCHERS.items():
            os.environ["GEMM_KERNELS_TUNING_CACHE"] = root
            _fresh_state(name)
            seen_buckets = set()
            for M in ms:
                a, b = _inputs(M, N, K)
                before = len(runs)
                first, first_host, mallocs = _first_call_parts(lambda: call(a, b))
                assert_close(call(a, b), matmul_ref(a, b, out_dtype=torch.float64), DTYPE)
                repeated = statistics.median(_sync_ms(lambda: call(a, b)) for _ in range(20))
                bucket = configs.row_bucket(M, 64)
                rows.append({"family": family, "launcher": name, "M": M, "N": N, "K": K, "bucket_64": bucket,
                             "bucket_seen": bucket in seen_buckets, "first_ms": round(first, 3),
                             "repeated_ms": round(repeated, 4), "first_over_repeated": round(first / repeated, 2),
                             "first_host_ms": round(first_host, 3), "cuda_mallocs": mallocs,
                             "tuning_runs": len(runs) - before})
                seen_buckets.add(bucket)
                print(f"(a) {family:20} {name:14} M={M:5} {'known' if rows[-1]['bucket_seen'] else 'new  '} bucket: "
                      f"first {first:9.2f} ms ({first_host:.3f} ms host, {mallocs} cudaMalloc), repeated {repeated:.4f} ms, "
                      f"tuned {rows[-1]['tuning_runs']}x", flush=True)
    os.environ["GEMM_KERNELS_TUNING_CACHE"] = root
    return rows


def child(name, M, N, K) -> None:
    """(b)'s fresh process: one first call, then the repeated call; prints one JSON line."""
    runs = _counting_tuning()
    start = time.perf_counter()
    a, b = _inputs(M, N, K)
    torch.cuda.synchronize()
    setup = (time.perf_counter() - start) * 1e3
    call = LAUNCHERS[name]
    first = _sync_ms(lambda: call(a, b))
    assert_close(call(a, b), matmul_ref(a, b, out_dtype=torch.float64), DTYPE)
    repeated = statistics.median(_sync_ms(lambda: call(a, b)) for _ in range(20))
    print(json.dumps({"first_ms": round(first, 3), "repeated_ms": round(repeated, 4), "tuning_runs": len(runs),
                      "cuda_setup_ms": round(setup, 1)}))


def fresh_processes() -> list[dict]:
    """(b): a new M in a bucket (a) tuned, in a new process, with the tuning cache warm and empty."""
    rows = []
    empty = tempfile.mkdtemp(prefix="empty_tuning_")
    for family, (N, K, ms) in FIRST_CALLS.items():
        M = ms[1] + 1  # a new M in (a)'s first bucket
        for name in ("matmul_auto", "matmul_tma", "torch.matmul"):
            for cache in (("warm", "empty") if name != "torch.matmul" else ("warm",)):
                env = {**os.environ, "GEMM_KERNELS_TUNING_CACHE": _tuning_dir(name) if cache == "warm" else empty}
                out = subprocess.run([sys.executable, __file__, "--child", name, str(M), str(N), str(K)], env=env,
                                     capture_output=True, text=True, timeout=120)
                if out.returncode != 0:
                    raise RuntimeError(f"child {name} M={M} failed:\n{out.stderr[-3000:]}")
                row = {"family": family, "launcher": name, "M": M, "N": N, "K": K, "tuning_cache": cache,
                       **json.loads(out.stdout.strip().splitlines()[-1])}
                rows.append(row)
                print(f"(b) {family:20} {name:14} M={M:5} tuning cache {cache:5}: first {row['first_ms']:9.2f} ms, "
                      f"repeated {row['repeated_ms']:.4f} ms, tuned {row['tuning_runs']}x", flush=True)
    return rows


def bucket_picks() -> list[dict]:
    """(c): each M of a bucket under the bucket's pick against the best candidate for that M."""
    timing = TimingSettings(warmup_ms=5, rep_ms=20, rounds=1)
    tuned_of = {"matmul_tma": persistent._tma_tuned, "matmul_splitk": splitk._splitk_tuned}
    rows = []
    _fresh_state("bucket_picks")
    for name, (N, K), buckets in BUCKET_PICKS:
        call, tuned = LAUNCHERS[name], tuned_of[name]
        candidates = CANDIDATES[name]()
        for ms in buckets:
            a, b = _inputs(ms[0], N, K)
            known = set(tuned.chosen)
            call(a, b)  # tunes the bucket at its first M
            (new_key,) = set(tuned.chosen) - known  # a bucket (a) did not tune
            pick = tuned.chosen[new_key]
            for M in ms:
                a, b = _inputs(M, N, K)
                ref = matmul_ref(a, b, out_dtype=torch.float64)
                times = []
                for config in candidates:
                    assert_close(call(a, b, config=config), ref, DTYPE)
                    times.append(median_ms(lambda: call(a, b, config=config), timing, cuda_graph=True))
                picked = next(t for c, t in zip(candidates, times) if c.all_kwargs() == pick.all_kwargs())
                best = min(times)
                rows.append({"launcher": name, "M": M, "N": N, "K": K, "tuned_at_M": ms[0], "bucket": new_key[0],
                             "pick": str(pick.all_kwargs()), "best": str(candidates[times.index(best)].all_kwargs()),
                             "pick_us": round(picked * 1e3, 2), "best_us": round(best * 1e3, 2),
                             "pick_over_best": round(picked / best, 4),
                             "times_us": [round(t * 1e3, 2) for t in times]})
                print(f"(c) {name:14} {M:5}x{N}x{K} (tuned at M={ms[0]}): pick {picked * 1e3:8.2f} us, "
                      f"best {best * 1e3:8.2f} us, {picked / best:.3f}x", flush=True)
    return rows


def host_times() -> dict:
    """(d): host µs per repeated call, 5 interleaved rounds; cProfile's top lines of each."""
    M, N, K = HOST_SHAPE
    a = torch.randn(M, K, device="cuda", dtype=DTYPE)
    b = torch.randn(K, N, device="cuda", dtype=DTYPE)
    calls = {"torch.matmul": lambda: torch.matmul(a, b), "matmul_auto": lambda: gk.matmul_auto(a, b),
             "matmul_ws": lambda: matmul_ws.matmul_ws(a, b)}
    for fn in calls.values():
        assert_close(fn(), matmul_ref(a, b, out_dtype=torch.float64), DTYPE)
    rounds = {name: [] for name in calls}
    for i in range(5):
        for name, fn in (calls.items() if i % 2 == 0 else reversed(calls.items())):
            rounds[name].append(host_ms(fn) * 1e3)
    out = {"shape": HOST_SHAPE, "matmul_auto_calls": pick_launcher(a, b)[0],
           "us_rounds": {n: [round(t, 2) for t in ts] for n, ts in rounds.items()},
           "us_median": {n: round(statistics.median(ts), 2) for n, ts in rounds.items()},
           "profile": {n: host_profile(fn, 500, top=12) for n, fn in calls.items()}}
    base = out["us_median"]["torch.matmul"]
    out["over_torch"] = {n: round(t / base, 3) for n, t in out["us_median"].items()}
    print(f"(d) host us per repeated call at {M}x{N}x{K}: " +
          ", ".join(f"{n} {t} ({out['over_torch'][n]}x)" for n, t in out["us_median"].items()), flush=True)
    return out


def first_call_profile() -> dict:
    """(e): cProfile of first calls of new Ms in tuned buckets (few tiles, 1024 x 4096): where the
    host time of a first call goes, by own time.  Each profiled M (odd, 65..125) follows a call at
    M + 1, which shares its bucket (a bucket's top is a multiple of its step, at least 16, so
    never odd) and its launcher (M and M + 1 both under 128 rows, ``tiles.default_launcher``'s
    line): the profile holds no tuning run, and says so (``tuning_runs``)."""
    import cProfile
    import pstats

    N, K = 1024, 4096
    _fresh_state("profile")
    a, b = _inputs(128, N, K)
    profiled = range(65, 127, 2)
    out = {}
    for name in ("matmul_auto", "torch.matmul"):
        call = LAUNCHERS[name]
        for M in profiled:  # the first call tunes the bucket(s); each keeps its launch, at M + 1
            call(a[:M + 1], b)
        torch.cuda.synchronize()
        runs = _counting_tuning()
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        for M in profiled:  # new Ms, each in a bucket tuned above: row views of one A
            call(a[:M], b)
        profiler.disable()
        torch.cuda.synchronize()
        per_call_us = (time.perf_counter() - start) / len(profiled) * 1e6
        rows = sorted(pstats.Stats(profiler).stats.items(), key=lambda kv: -kv[1][2])[:16]
        out[name] = {"us_per_call_profiled": round(per_call_us, 1), "calls": len(profiled), "tuning_runs": len(runs),
                     "launchers": sorted({pick_launcher(a[:M], b)[0] for M in profiled}) if name != "torch.matmul" else [],
                     "top_own_time": [f"{own / len(profiled) * 1e6:7.2f} us own, {cum / len(profiled) * 1e6:7.2f} us "
                                      f"cumulative: {fn} ({file.rsplit('/', 2)[-1]}:{line})"
                                      for (file, line, fn), (_, _, own, cum, _) in rows]}
        print(f"(e) {name}: {per_call_us:.1f} us per first call of a new M (under cProfile), "
              f"{len(runs)} tuning runs", flush=True)
    return out


def main() -> int:
    out_dir = os.environ.get("OUT")
    if not out_dir:
        sys.exit("set OUT to a directory for first_call.json")
    if not torch.cuda.is_available():
        sys.exit("gpu_first_call.py needs a GPU")
    os.makedirs(out_dir, exist_ok=True)
    started = time.perf_counter()
    runs = _counting_tuning()
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "commit": os.environ.get("GEMM_KERNELS_COMMIT"),
              "row_buckets_per_octave": configs.ROW_BUCKETS_PER_OCTAVE}
    path = os.path.join(out_dir, "first_call.json")
    for part, fn in (("host", host_times), ("first_calls", lambda: first_calls(runs)),
                     ("fresh_processes", fresh_processes), ("bucket_picks", bucket_picks),
                     ("first_call_profile", first_call_profile)):
        result[part] = fn()
        result["seconds"] = round(time.perf_counter() - started, 1)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    _summary(result)
    return 0


def _summary(r) -> None:
    print(f"\n== {r['gpu']}, torch {r['torch']}, Triton {r['triton']}, {r['seconds']} s")
    print("(d) host us: " + ", ".join(f"{n} {t} ({r['host']['over_torch'][n]}x torch)"
                                     for n, t in r["host"]["us_median"].items()))
    for row in r["first_calls"]:
        if row["bucket_seen"]:
            print(f"(a) new M, known bucket: {row['family']:20} {row['launcher']:14} M={row['M']:5} "
                  f"{row['first_over_repeated']:8.2f}x its repeated call ({row['first_ms']:.2f} ms, "
                  f"{row['first_host_ms']:.2f} ms host, {row['cuda_mallocs']} cudaMalloc)")
    for row in r["fresh_processes"]:
        print(f"(b) fresh process, tuning cache {row['tuning_cache']:5}: {row['family']:20} {row['launcher']:14} "
              f"first {row['first_ms']:9.2f} ms, tuned {row['tuning_runs']}x")
    ratios = [row["pick_over_best"] for row in r["bucket_picks"]]
    print(f"(c) bucket pick / best over {len(ratios)} shapes: max {max(ratios):.3f}, "
          f"geomean {statistics.geometric_mean(ratios):.4f}, within 2%: {sum(x <= 1.02 for x in ratios)}")


if __name__ == "__main__":
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        child(sys.argv[i + 1], *(int(x) for x in sys.argv[i + 2:i + 5]))
    else:
        sys.exit(main())
