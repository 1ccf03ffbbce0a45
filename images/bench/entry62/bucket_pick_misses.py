"""PERF_NOTES 62: where entry 40's bucket picks missed the 2% target, from its two runs
(``entry40/first_call.json``, ``first_call_rerun.json``; ``tests/gpu_first_call.py`` (c)).

For each M that is one row past a multiple of 128 (a last row of tiles holding one row of A), each
``matmul_tma`` candidate's time there over its time at another M of the same bucket with the same
count of 128- and 256-row tiles (the 64-row candidate has 15 rows of tiles at 897, 16 at 1024).  ``python bucket_pick_misses.py``"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = [HERE.parent / "entry40" / name for name in ("first_call.json", "first_call_rerun.json")]
#: (N, M one row past a multiple of 128, an M with as many 128- and 256-row tiles)
PAIRS = [(14336, 257, 320), (14336, 897, 1024)]
CONFIGS = ["128x256", "128x256 subtiled", "128x256 flat, subtiled", "256x128 subtiled", "128x128", "64x128",
           "128x64"]  # configs.tma_configs()'s order, which (c)'s times_us follow


def main():
    for run in RUNS:
        rows = {(r["N"], r["M"]): r for r in json.loads(run.read_text())["bucket_picks"]
                if r["launcher"] == "matmul_tma"}
        print(run.name)
        for N, m_odd, m_even in PAIRS:
            odd, even = rows[(N, m_odd)]["times_us"], rows[(N, m_even)]["times_us"]
            ratios = ", ".join(f"{name} {o / e:.2f}" for name, o, e in zip(CONFIGS, odd, even))
            print(f"  N={N}: M={m_odd} over M={m_even}: {ratios}")
        misses = [(r["M"], r["N"], r["pick_over_best"]) for r in json.loads(run.read_text())["bucket_picks"]
                  if r["pick_over_best"] > 1.02]
        print("  picks over 2% from the best:", ", ".join(f"M={m} N={n} {x:.3f}x" for m, n, x in misses))


if __name__ == "__main__":
    main()
