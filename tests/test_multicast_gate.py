"""PERF_NOTES 60: the version-gated multicast cluster kernel (images/bench/entry60/multicast_gluon.py).
With Triton >= 3.7 it builds for sm_90 on this machine, with a plain TMA load of A and a multicast one of B (issued by cluster rank 0) and the
cluster barriers around it; with Triton 3.6 the gate says no and the script refuses clearly."""
import os
import subprocess
import sys
from pathlib import Path

import triton

SCRIPT = Path(__file__).resolve().parents[1] / "images" / "bench" / "entry60" / "multicast_gluon.py"
NEW_ENOUGH = tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 7)


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPT.parents[3]), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=900)


def test_the_gate_follows_the_triton_version():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import multicast_gluon
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert multicast_gluon.available() == NEW_ENOUGH
    assert hasattr(multicast_gluon, "cluster_matmul_kernel") == NEW_ENOUGH


def test_the_cluster_kernel_builds_with_one_multicast_load_or_refuses():
    proc = _run("ptx")
    if not NEW_ENOUGH:
        assert proc.returncode != 0 and "needs Triton >= 3.7" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    loads = [line for line in lines if "cp.async.bulk.tensor" in line and ".global.shared" not in line]  # not C's store
    multicast = [line for line in loads if "multicast::cluster" in line]
    assert len(loads) == 2 and len(multicast) == 1, loads  # per K step: A's own rows, B's shared tile
    assert "shared::cluster" in multicast[0] and "multicast" not in next(x for x in loads if x not in multicast)
    assert any("%cluster_ctarank" in line for line in lines)  # who issues B's load depends on the CTA's rank
    # after the barriers' init, after each K step, and before the exit
    assert sum("barrier.cluster.wait" in line for line in lines) >= 2


def test_perf_notes_60_quotes_the_kernel_s_tile():
    """PERF_NOTES 60's tile sizes are the script's BM, BN, BK (read from its source: any Triton)."""
    import re

    source = SCRIPT.read_text()
    bm, bn, bk = map(int, re.search(r"^    BM, BN, BK = (\d+), (\d+), (\d+)$", source, re.M).groups())
    notes = re.sub(r"\s+", " ", (SCRIPT.parents[3] / "gemm_kernels" / "bench" / "PERF_NOTES.md").read_text())
    entry = notes[notes.index("## 60."):]
    assert f"computes a {2 * bm} x {bn} tile of C: each CTA loads its own {bm} rows of A" in entry
    assert f"B's {bk} x {bn} tile is read from L2 once for both: CTA 0 loads it and multicasts it" in entry
    assert "MULTICAST_TRITON = (3, 7)" in source and "Triton 3.7 or newer" in entry
