"""What the GPU sweep scripts (``gpu_splitk_sweep.py``, ``gpu_ws_tiles_sweep.py``) share: one
timed row, checked against float64 first, and the CSV they write after every shape (which
``gpu_ws_nn_linear_tiles.py`` writes with too)."""

import csv

from triton.testing import do_bench_cudagraph


def timed_row(row: dict, fn, a, b, base_ms=None, rep=30):
    """Fill ``row`` (which names M, N, K) with ``fn``'s GPU time from a CUDA graph (ms: the mean of its
    replays, ``do_bench_cudagraph``'s default return_mode),
    TFLOP/s, relative error and speed-up over ``base_ms``; an exception goes into ``row["error"]``
    instead (one config may not fit shared memory).  Returns the time, or None."""
    row.setdefault("error", "")
    try:
        ref = a.double() @ b.double()
        err = float((fn().double() - ref).norm() / ref.norm())
        if not err < 1e-2:
            raise AssertionError(f"relative error {err:.2e}")
        ms = do_bench_cudagraph(fn, rep=rep)
    except Exception as exc:  # recorded, not fatal
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return None
    row.update(ms=ms, tflops=2 * row["M"] * row["N"] * row["K"] / ms * 1e-9, rel_err=err,
               vs_cublas=(base_ms / ms) if base_ms else 1.0)
    return ms


def write_rows(path, fields, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
