"""A timeline model of the warp-specialized kernel (``matmul_ws``) on one SM: when the producer
loads, and when each consumer warpgroup runs its main loops and epilogues.

Its output has the columns ``trace_ws_tiles`` measures on a GPU (``start``, ``mainloop_end``,
``end`` per (tile, consumer)), so a measured trace can check it (``tests/test_ws_timeline.py``
against ``images/bench/ws_trace.csv``) and the notebook can draw both side by side.

The rules, one program (= one SM), its tiles in step order:

* **Ring.**  K block ``q`` of the program (counting across tiles) goes to slot ``q % stages``.
  The producer loads the K blocks in order; load ``q`` starts when the previous load is done
  (one copy engine: ``load_ns`` per K block is the SM's share of the bandwidth) and slot
  ``q % stages`` is free (position ``q - stages`` released); it lands ``latency_ns`` later.
* **Tensor cores.**  One pipe per SM: a K block's wgmma starts when its operands have landed,
  its warpgroup is in its main loop, and the previous wgmma (of either warpgroup) is done; it
  takes ``flops / rate``.  A slot is released when the wgmma reading it is done.
* **pingpong.**  Consumer ``c`` takes steps ``c, c + 2, ...`` (128 x 128 tiles).  It starts a
  main loop when the other consumer has issued the last wgmma of the previous step (the turn
  barrier) and its own previous epilogue is done.  So an epilogue runs beside the other
  consumer's main loop.
* **cooperative.**  Both consumers work on every tile (64 rows each, one pipe): a main loop
  starts when the previous tile's epilogue is done; the producer keeps loading meanwhile.

Numbers in: ``rate`` (FLOP per ns per SM: the datasheet's 989.4 TFLOP/s over 132 SMs, 7495
FLOP/ns = 7.5 TFLOP/s, is the ceiling), ``epilogue_ns`` (measured: a TMA store issued ~0.3-1 µs, bias+GELU ~4 µs on an H100),
``load_ns``, ``latency_ns``.  No Triton, no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: H100 SXM dense fp16/bf16 peak (datasheet, TFLOP/s) over its 132 SMs: FLOP per ns per SM
H100_RATE_PER_SM = 989.4e12 / 132 / 1e9
#: tile shapes of matmul_ws' two schedules: (rows per tile, BLOCK_N, BLOCK_K, STAGES)
TILES = {"pingpong": (128, 128, 64, 5), "cooperative": (128, 256, 64, 4)}
#: columns of :func:`ws_timeline`'s rows (TRACE_FIELDS' step, consumer and times)
FIELDS = ("step", "consumer", "start_ns", "mainloop_end_ns", "end_ns")


@dataclass(frozen=True)
class WsTimeline:
    """One program's timeline: ``rows`` [n, 5] float (:data:`FIELDS`, one per (step, consumer)),
    ``loads`` [q, 2] (start, landed) of every K block, and the settings used."""

    schedule: str
    rows: np.ndarray
    loads: np.ndarray
    k_blocks: int
    kblock_ns: float

    @property
    def span_ns(self) -> float:
        return float(self.rows[:, 4].max() - self.rows[:, 2].min()) if len(self.rows) else 0.0

    def consumer(self, c: int) -> np.ndarray:
        return self.rows[self.rows[:, 1] == c]


def kblock_flops(schedule: str) -> int:
    """FLOPs of one K block of one tile (both consumers' halves for cooperative)."""
    rows, block_n, block_k, _ = TILES[schedule]
    return 2 * rows * block_n * block_k


def ws_timeline(schedule: str, tiles: int, k_blocks: int, *, rate: float = H100_RATE_PER_SM,
                epilogue_ns: float = 1000.0, load_ns: float = 0.0, latency_ns: float = 700.0,
                stages: int | None = None) -> WsTimeline:
    """The timeline of one program that computes ``tiles`` tiles of ``k_blocks`` K blocks each
    (see the module docstring for the rules).  ``rate``: FLOP/ns of the SM's tensor cores;
    ``stages``: ring depth (default: the schedule's)."""
    if schedule not in TILES:
        raise ValueError(f"schedule must be one of {tuple(TILES)}, got {schedule!r}")
    for name, value in (("tiles", tiles), ("k_blocks", k_blocks)):
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if k_blocks == 0 and tiles:
        raise ValueError("k_blocks must be >= 1 when there are tiles")
    for name, value in (("rate", rate), ("epilogue_ns", epilogue_ns), ("load_ns", load_ns),
                        ("latency_ns", latency_ns)):
        if not np.isfinite(value) or value < 0 or (name == "rate" and value == 0):
            raise ValueError(f"{name} must be a finite number {'> 0' if name == 'rate' else '>= 0'}, got {value!r}")
    stages = TILES[schedule][3] if stages is None else stages
    if not isinstance(stages, (int, np.integer)) or stages < 1:
        raise ValueError(f"stages must be an int >= 1, got {stages!r}")

    kb_ns = kblock_flops(schedule) / rate
    n = tiles * k_blocks
    load_start, landed, released = np.zeros(n), np.zeros(n), np.zeros(n)
    copy_free = 0.0  # the producer's copy engine
    pipe_free = 0.0  # the tensor cores
    rows = []
    consumer_free = [0.0, 0.0]   # end of each consumer's last epilogue
    last_issue = 0.0             # when the previous step's last wgmma was issued (pingpong's turn)
    previous_end = 0.0           # cooperative: the previous tile's epilogue done

    def load(q: int) -> None:
        nonlocal copy_free
        slot_free = released[q - stages] if q >= stages else 0.0
        load_start[q] = max(copy_free, slot_free)
        copy_free = load_start[q] + load_ns
        landed[q] = copy_free + latency_ns

    for step in range(tiles):
        consumer = step % 2 if schedule == "pingpong" else 0
        if schedule == "pingpong":
            start = max(last_issue if step else 0.0, consumer_free[consumer])
        else:
            start = previous_end
        ready = start
        for kk in range(k_blocks):
            q = step * k_blocks + kk
            load(q)  # in time it may start long before this consumer gets here: the producer runs ahead
            issue = max(ready, landed[q])  # the consumer waits on the ready barrier, then issues
            begin = max(issue, pipe_free)
            pipe_free = begin + kb_ns
            released[q] = pipe_free
            ready = issue
        last_issue = ready
        mainloop_end = pipe_free
        end = mainloop_end + epilogue_ns
        if schedule == "pingpong":
            consumer_free[consumer] = end
            rows.append((step, consumer, start, mainloop_end, end))
        else:
            previous_end = end
            rows += [(step, 0, start, mainloop_end, end), (step, 1, start, mainloop_end, end)]
    return WsTimeline(schedule, np.array(rows, dtype=float).reshape(-1, 5), np.stack([load_start, landed], 1),
                      k_blocks, kb_ns)


def fit_rate(mainloop_ns: float, schedule: str, k_blocks: int) -> float:
    """The tensor-core rate (FLOP/ns) at which one steady-state main loop of ``k_blocks`` K
    blocks takes ``mainloop_ns`` (its operands already loaded: the producer ran ahead): the
    model's one fitted number."""
    if not mainloop_ns > 0:
        raise ValueError(f"mainloop_ns must be > 0, got {mainloop_ns!r}")
    return kblock_flops(schedule) * k_blocks / mainloop_ns


def overlap_fraction(rows: np.ndarray) -> float:
    """Of consecutive steps of one program, the fraction where step s+1 starts before step s
    ends (pingpong: the epilogue of s runs beside the main loop of s+1); rows as :data:`FIELDS`."""
    by_step = {}
    for r in rows:
        by_step.setdefault(int(r[0]), r)
    steps = sorted(by_step)
    pairs = list(zip(steps, steps[1:]))
    if not pairs:
        return 0.0
    return sum(by_step[b][2] < by_step[a][4] for a, b in pairs) / len(pairs)
