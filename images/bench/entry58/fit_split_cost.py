"""PERF_NOTES 58: fit the split's cost to the timed sweep (``fp8_split_sweep.json``), least squares
over every case (both scalings, every split count), in the terms ``tiles.fp8_ws_splits`` uses:

    time = c0 + t_block * waves * K blocks per unit + [split] (unit * waves + per_mb * pieces * M*N*4/1e6)

K blocks are of the 128 x 256 tile (a 128 x 128 tile's count as 0.5 / 0.91 of one: FP8_WS_TILES).
Prints the fit, each case's measured and modelled best count, and the constants in K blocks
(``FP8_SPLIT_UNIT_K_BLOCKS``, ``FP8_SPLIT_K_BLOCKS_PER_PARTIAL_MB``) with the rule's predictions
for RULE_CHECK's shapes (the next sweep: ``fp8_split_sweep.py OUT.json --rule-check``).

    python fit_split_cost.py [fp8_split_sweep.json]
"""
import json
import sys
from pathlib import Path

import numpy as np

from gemm_kernels.models import tiles as T

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from fp8_split_sweep import RULE_CHECK  # noqa: E402


def features(M, N, K, tile, splits, sms):
    rows, cols = T.FP8_WS_TILES[tile][:2]
    weight = T.fp8_block_weight(tile)
    k_tiles = T.cdiv(K, T.FP8_BLOCK_K)
    pieces = T.whole_pieces(k_tiles, splits)
    waves = T.cdiv(T.cdiv(M, rows) * T.cdiv(N, cols) * pieces, sms)
    split = pieces > 1
    return [waves * T.cdiv(k_tiles, pieces) * weight, waves * weight * split, split * pieces * M * N * 4 / 1e6, 1.0]


def fit(path):
    data = json.loads(Path(path).read_text())
    sms, splits = data["num_sms"], data["splits"]
    X, y = [], []
    for r in data["rows"]:
        for s in splits:
            X.append(features(r["M"], r["N"], r["K"], r["tile"], s, sms))
            y.append(r[f"split_{s}_us"])
    coef, *_ = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)
    rel = np.abs(np.array(X) @ coef / np.array(y) - 1)
    return data, coef, rel


def main(path=HERE / "fp8_split_sweep.json"):
    data, (t_block, unit, per_mb, c0), rel = fit(path)
    print(f"t_block {t_block:.3f} µs, unit {unit:.2f} µs, per partial MB {per_mb:.3f} µs, c0 {c0:.2f} µs; "
          f"|model/measured - 1| median {np.median(rel):.2f}, max {rel.max():.2f} over {len(rel)} timings")
    print(f"in K blocks: unit {unit / t_block:.1f} (FP8_SPLIT_UNIT_K_BLOCKS = {T.FP8_SPLIT_UNIT_K_BLOCKS}), "
          f"per partial MB {per_mb / t_block:.2f} (FP8_SPLIT_K_BLOCKS_PER_PARTIAL_MB = "
          f"{T.FP8_SPLIT_K_BLOCKS_PER_PARTIAL_MB})")
    for r in data["rows"]:
        print(f"{r['scaling']:6s} {r['case']:36s} measured best {r['best']}, rule "
              f"{T.fp8_ws_splits(r['M'], r['N'], r['K'], r['tile'], num_sms=data['num_sms'])}")
    model = lambda *f: float(np.dot(features(*f), (t_block, unit, per_mb, c0)))  # noqa: E731
    print("rule check (modelled µs):")
    for label, M, N, K, tile, s, one, cut in rule_check(data["num_sms"], model):
        print(f"  {label:36s} {tile} rule {s}: {one:.1f} -> {cut:.1f} µs ({1 - cut / one:+.0%} time saved)")


def rule_check(sms, model):
    """RULE_CHECK's shapes on ``sms`` SMs: (label, M, N, K, the tile scaled_mm picks there, the rule's
    count, the modelled µs of one K loop and of the rule's count)."""
    for label, M, N, K in RULE_CHECK:
        tile = T.ws_default_tile(M, N, num_sms=sms, tiles=T.FP8_WS_TILES)  # fp8_tile's, on that GPU
        s = T.fp8_ws_splits(M, N, K, tile, num_sms=sms)
        yield label, M, N, K, tile, s, model(M, N, K, tile, 1, sms), model(M, N, K, tile, s, sms)


if __name__ == "__main__":
    main(*sys.argv[1:])
