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


# ----------------------------------------------------------------------------- the ring, barrier by barrier
# ws_timeline plays the ring in time; simulate_ring plays the same ring in order, with the
# mbarriers' phases, to check a consumer's main loop (notebook 08, exercise 2).  The same rules:
# ring position q of a program is slot q % stages on lap q // stages, and the producer refills a
# slot once position q - stages is released, here when empty[slot] completes a phase (every
# consumer arrived).  The producer is matmul_ws' (``_producer``): it waits on empty[s] for parity
# ((q // stages) & 1) ^ 1, then ``expect``s ready[s] and starts the TMA loads, which complete
# ready[s]'s phase when they land.  The consumers are given as the steps their main loops took.


@dataclass(frozen=True)
class RingOp:
    """One step of a consumer's main loop, for :func:`simulate_ring`.

    ``kind``: ``"wait"`` (on ``barrier``\\ [``index``] for parity ``value``), ``"arrive"`` (on
    ``barrier``\\ [``index``], ``value`` counts), ``"mma"`` (a wgmma reading the slot of the
    consumer's next ring position; ``is_async``), ``"mma_wait"`` (at most ``value`` wgmmas left in
    flight) or ``"return"`` (the loop hands its accumulator to the epilogue).  ``tile``, ``kblock``:
    where in the loop (a wait: the K block of the wgmma after it; other steps: of the last wgmma,
    -1 before the first); ``where``: the learner's line, for the messages."""

    kind: str
    barrier: str = ""
    index: int = 0
    value: int = 0
    is_async: bool = True
    tile: int = 0
    kblock: int = 0
    where: str = ""


@dataclass(frozen=True)
class RingFault:
    """What went wrong in a simulated ring: ``kind`` (one of :data:`RING_FAULTS`) and a
    ``message`` that names the step."""

    kind: str
    message: str


#: the kinds of :class:`RingFault`, the most telling first (a deadlock is often the echo of an
#: arrive that came too early or twice, which another schedule shows as an early refill)
RING_FAULTS = ("barrier", "parity", "stale read", "in flight", "early refill", "deadlock")

#: the order in which :func:`simulate_ring` lets the parties move when several can: the consumers
#: as far ahead as the barriers let them (a wait that passes too early shows), or the producer
#: (a slot given back too early shows); an int is the seed of a random order
RING_SCHEDULES = ("consumers first", "producer first", 1, 2, 3, 4)


class _Barrier:
    """An mbarrier: ``count`` arrivals (and every expected TMA byte) complete a phase; a wait for
    parity p passes once the phase of that parity has completed (a fresh barrier: parity 1)."""

    def __init__(self, name: str, index: int, count: int):
        self.name, self.index, self.count = name, index, count
        self.pending, self.completed, self.tx = count, 0, 0
        self.arrivals: list = []  # (who, RingOp or None, count) of the phase in progress
        self.phases: list = []    # the arrivals of each completed phase

    @property
    def label(self) -> str:
        return f"{self.name}[{self.index}]"

    def passes(self, parity: int) -> bool:
        return (self.completed & 1) != parity

    def arrive(self, who, op=None, count: int = 1, tx: int = 0) -> None:
        self.arrivals.append((who, op, count))
        self.pending -= count
        self.tx += tx
        self._settle()

    def land(self) -> None:
        self.tx -= 1
        self._settle()

    def _settle(self) -> None:
        while self.pending <= 0 and self.tx == 0:
            self.phases.append(self.arrivals)
            self.arrivals = []
            self.completed += 1
            self.pending += self.count


class _Consumer:
    def __init__(self, number: int, ops):
        self.number, self.ops = number, list(ops)
        self.pc = 0
        self.read = 0              # ring positions whose wgmma was issued (the next one reads position `read`)
        self.in_flight: list = []  # (position, RingOp) of wgmmas not yet retired
        self.waits: list = []      # waits since the last wgmma
        self.name = f"consumer {number}"

    @property
    def done(self) -> bool:
        return self.pc >= len(self.ops)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _step_label(op: RingOp, k_tiles: int) -> str:
    if op.kind == "wait":
        when = f"before the wgmma of K block {op.kblock}" if op.kblock < k_tiles else "after the last wgmma"
    elif op.kind == "return":
        when = "where the loop returns"
    else:
        when = f"after the wgmma of K block {op.kblock}" if op.kblock >= 0 else "before the first wgmma"
    return f"tile {op.tile}, {when}" + (f", {op.where}" if op.where else "")


def _arrivers(arrivals, k_tiles: int) -> str:
    parts = []
    for who, op, count in arrivals:
        text = who if op is None else f"{who} at {_step_label(op, k_tiles)}"
        parts.append(text + (f" with count={count}" if count != 1 else ""))
    return "; ".join(parts) if parts else "no arrives"


def simulate_ring(consumers, *, tiles: int, k_tiles: int, stages: int, schedule="consumers first") -> RingFault | None:
    """Play one program of ``tiles`` tiles of ``k_tiles`` K blocks: matmul_ws' producer, the TMA,
    and the ``consumers`` (one list of :class:`RingOp` per consumer warpgroup, covering all the
    tiles; every consumer reads every slot, so empty barriers count one arrive per consumer).
    Returns the first :class:`RingFault` (a wgmma reading a slot that does not hold its K block,
    a slot refilled before every consumer is done with it, a wait that never passes, a loop that
    returns with a wgmma in flight, a barrier outside the ring) or None.  ``schedule``: one of
    :data:`RING_SCHEDULES`."""
    import random

    positions = tiles * k_tiles
    parties = [_Consumer(c, ops) for c, ops in enumerate(consumers)]
    bars = {(name, i): _Barrier(name, i, 1 if name == "ready" else len(parties))
            for name in ("ready", "empty") for i in range(stages)}
    fills: dict[int, tuple[int, bool]] = {}  # slot -> (ring position it holds or is being filled with, landed)
    landing: list[int] = []                  # ring positions whose TMA loads are on their way (in order)
    produced = 0
    rng = random.Random(schedule) if isinstance(schedule, int) else None

    def position_label(c: _Consumer, j: int) -> str:
        return f"tile {j // k_tiles}, K block {j % k_tiles} (ring position {j}, slot {j % stages})"

    def bad_barrier(c: _Consumer, op: RingOp) -> RingFault | None:
        if op.barrier not in ("ready", "empty"):
            return RingFault("barrier", f"{c.name} at {_step_label(op, k_tiles)} uses {op.barrier}, not a barrier")
        if not 0 <= op.index < stages:
            sign = (" (in a kernel, % keeps the sign of the left side: (x - 1) % STAGES is -1 when x is 0; "
                    "add STAGES before taking % to stay in the ring)") if op.index < 0 else ""
            return RingFault("barrier", f"{c.name} at {_step_label(op, k_tiles)} uses {op.barrier}_bars.index("
                             f"{op.index}): the ring has {stages} {op.barrier} barriers, 0 to {stages - 1}{sign}")
        if op.kind == "wait" and op.value not in (0, 1):
            return RingFault("parity", f"{c.name} at {_step_label(op, k_tiles)} waits on {op.barrier}[{op.index}] "
                             f"with phase {op.value}: mbarrier.wait takes a parity, 0 or 1 (the lap's & 1)")
        return None

    def can_move(party) -> bool:
        if party == "producer":
            if produced >= positions:
                return False
            return bars[("empty", produced % stages)].passes(((produced // stages) & 1) ^ 1)
        if party == "tma":
            return bool(landing)
        if party.done:
            return False
        op = party.ops[party.pc]
        if op.kind == "wait":
            return bad_barrier(party, op) is not None or bars[(op.barrier, op.index)].passes(op.value)
        return True

    def stale(c: _Consumer, op: RingOp, j: int) -> RingFault:
        s = j % stages
        fill = fills.get(s)
        if fill is None:
            state = f"it has not been filled yet (the producer has not loaded ring position {j})"
        elif fill[0] < j:
            state = f"it still holds ring position {fill[0]}'s data, not position {j}'s"
        elif fill[0] == j:
            state = f"the TMA is still writing ring position {j}'s data into it"
        else:
            state = f"it already holds ring position {fill[0]}'s data: it was refilled before this wgmma read it"
        lap, ready = j // stages, bars[("ready", s)]
        need = lap & 1
        on_slot = [w for w in c.waits if w.barrier == "ready" and w.index == s]
        if not c.waits:
            why = (f"There is no mbarrier.wait before this wgmma: wait on ready_bars.index({s}), the ready barrier "
                   "of the slot it reads, so that it reads the slot only once the TMA has filled it.")
        elif not on_slot:
            w = c.waits[-1]
            why = (f"The wait before it ({_step_label(w, k_tiles)}) is on {w.barrier}[{w.index}], not on ready[{s}], "
                   "the ready barrier of the slot the wgmma reads"
                   + (": empty_bars are the producer's to wait on." if w.barrier == "empty" else "."))
        elif on_slot[-1].value != need:
            w = on_slot[-1]
            before = ("a fresh barrier counts as having completed parity 1" if lap == 0 else
                      f"phase {lap - 1}, the previous lap's fill, completed it")
            why = (f"It waits on ready[{s}] with parity {w.value} ({_step_label(w, k_tiles)}), but the producer's "
                   f"{_ordinal(lap + 1)} fill of slot {s} (ring position {j}) completes phase {lap} of ready[{s}], "
                   f"parity {need}; parity {w.value} had completed already ({before}), so the wait passes at once "
                   "and the wgmma would read stale data.")
        else:
            strays = [(who, o, n) for phase in ready.phases + [ready.arrivals] for who, o, n in phase
                      if who != "producer"]
            why = (f"It waits on ready[{s}] for parity {need}, right for this lap, but ready[{s}]'s phases "
                   "completed without the data" + (f": arrives on ready[{s}] by {_arrivers(strays, k_tiles)}. "
                                                   "A consumer gives a slot back on empty_bars; ready_bars are "
                                                   "completed by the producer's expect and the TMA" if strays else "")
                   + ".")
        return RingFault("stale read", f"{c.name}, {position_label(c, j)}: the wgmma ({op.where}) reads slot {s}, "
                                       f"but {state}. {why}")

    def refill_fault(q: int) -> RingFault | None:
        s = q % stages
        empty = bars[("empty", s)]
        let_through = empty.phases[-1] if empty.phases else []
        for c in parties:
            for j, op in c.in_flight:
                if j % stages == s:
                    return RingFault("early refill", (
                        f"the producer refills slot {s} with ring position {q} while {c.name}'s wgmma of ring "
                        f"position {j} ({_step_label(op, k_tiles)}) is still reading it: empty[{s}] completed after "
                        f"{_arrivers(let_through, k_tiles)}. Give a slot back only once a warpgroup_mma_wait has "
                        "retired the wgmma that read it (warpgroup_mma_wait(1) leaves only the newest in flight: "
                        "the previous slot is then free)."))
        if q < stages:
            return None
        for c in parties:
            if c.read <= q - stages:
                counts: dict = {}
                for who, _, _ in let_through:
                    counts[who] = counts.get(who, 0) + 1
                twice = [who for who, n in counts.items() if n > 1]
                if twice:
                    why = (f"{twice[0]} arrived {counts[twice[0]]} times: each consumer gives each slot back once "
                           "per lap")
                elif any(n > 1 for _, _, n in let_through):
                    why = "an arrive with count > 1 counts for more than one consumer: each arrives once, count=1"
                else:
                    why = (f"an arrive on empty[{s}] tells the producer 'this slot has been read': it must come "
                           "after that consumer's wgmma on the slot has finished")
                return RingFault("early refill", (
                    f"the producer refills slot {s} with ring position {q} before {c.name} has read ring position "
                    f"{q - stages} from it: empty[{s}] completed its phase after {_arrivers(let_through, k_tiles)}; "
                    f"{why}."))
        return None

    def deadlock() -> RingFault:
        stuck = [c for c in parties if not c.done]
        for c in stuck:  # a wait that asks for the wrong parity of the slot it is about to read
            op = c.ops[c.pc]
            j = c.read
            s = j % stages
            if op.barrier == "ready" and op.index == s and fills.get(s) == (j, True):
                ready = bars[("ready", s)]
                strays = [(who, o, n) for phase in ready.phases + [ready.arrivals] for who, o, n in phase
                          if who != "producer"]
                if strays:
                    return RingFault("deadlock", (
                        f"{c.name} waits forever before the wgmma of {position_label(c, j)}: ready[{s}] has "
                        f"completed {ready.completed} phases where the producer's fills completed "
                        f"{j // stages + 1}, because of arrives on ready[{s}] by {_arrivers(strays, k_tiles)}. "
                        "A consumer gives a slot back on empty_bars; ready_bars are completed by the producer's "
                        "expect and the TMA."))
                return RingFault("deadlock", (
                    f"{c.name} waits forever before the wgmma of {position_label(c, j)}: slot {s} holds that "
                    f"position's data (ready[{s}] completed phase {ready.completed - 1}, parity "
                    f"{(ready.completed - 1) & 1}), but the wait ({_step_label(op, k_tiles)}) asks for parity "
                    f"{op.value}, a phase that completes only after slot {s} is refilled, and that needs this "
                    "consumer to give it back first."))
        for c in stuck:
            op = c.ops[c.pc]
            s = c.read % stages
            if not (op.barrier == "ready" and op.index == s):
                what = ("the producer waits on empty_bars; a consumer waits on ready_bars" if op.barrier == "empty"
                        else f"its next wgmma (ring position {c.read}) reads slot {s}, announced by ready[{s}]")
                return RingFault("deadlock", f"{c.name} waits forever on {op.barrier}[{op.index}] for parity "
                                             f"{op.value} ({_step_label(op, k_tiles)}): {what}.")
        if produced < positions:
            q = produced
            s, lap = q % stages, q // stages
            empty = bars[("empty", s)]
            if empty.completed > lap:  # more phases than laps: arrives that came twice, or counted double
                extra = [a for phase in empty.phases[lap - 1:] for a in phase] + empty.arrivals
                return RingFault("deadlock", (
                    f"the producer waits forever for empty[{s}] before refilling slot {s} with ring position {q}: "
                    f"empty[{s}] has completed {empty.completed} phases while the consumers read slot {s} on "
                    f"{lap} lap(s), so the parity the producer waits for has gone by: arrives on empty[{s}] since "
                    f"ring position {q - stages}: {_arrivers(extra, k_tiles)}. Each consumer gives each slot "
                    "back once per lap, with count=1."))
            got = empty.arrivals
            text = (f"the producer waits forever for empty[{s}] before refilling slot {s} with ring position {q}: "
                    f"empty[{s}] completes a phase after {empty.count} arrives (one per consumer, each once its "
                    f"wgmma on the slot has finished), and for ring position {q - stages} it got {len(got)}"
                    + (f" ({_arrivers(got, k_tiles)})" if got else ""))
            arrived = {(c.number, op.barrier) for c in parties for op in c.ops[:c.pc] if op.kind == "arrive"}
            if not any(b == "empty" for _, b in arrived):
                elsewhere = [op for c in parties for op in c.ops[:c.pc] if op.kind == "arrive"]
                text += ": your loop never arrives on empty_bars"
                if elsewhere:
                    text += (f" (it arrives on {elsewhere[0].barrier}[{elsewhere[0].index}] at "
                             f"{_step_label(elsewhere[0], k_tiles)})")
            else:
                missing = [c.name for c in parties if not any(who == c.name for who, _, _ in got)]
                if missing:
                    text += (f": {' and '.join(missing)} never gave slot {s} back after reading ring position "
                             f"{q - stages}; every K block's slot is given back once (in the loop the previous "
                             "slot, after the loop the last one)")
            return RingFault("deadlock", text + ".")
        c = stuck[0]
        op = c.ops[c.pc]
        return RingFault("deadlock", f"{c.name} waits forever on {op.barrier}[{op.index}] for parity {op.value} "
                                     f"({_step_label(op, k_tiles)}): no phase of that parity comes.")

    order = (parties + ["producer", "tma"] if schedule == "consumers first" else ["producer", "tma"] + parties)
    while True:
        movable = [p for p in order if can_move(p)]
        if not movable:
            if all(c.done for c in parties) and produced >= positions:
                return None
            return deadlock()
        party = rng.choice(movable) if rng is not None else movable[0]
        if party == "producer":
            fault = refill_fault(produced)
            if fault:
                return fault
            s = produced % stages
            bars[("ready", s)].arrive("producer", None, 1, tx=1)
            fills[s] = (produced, False)
            landing.append(produced)
            produced += 1
            continue
        if party == "tma":
            q = landing.pop(0)
            fills[q % stages] = (q, True)
            bars[("ready", q % stages)].land()
            continue
        c = party
        op = c.ops[c.pc]
        c.pc += 1
        if op.kind in ("wait", "arrive"):
            fault = bad_barrier(c, op)
            if fault:
                return fault
            if op.kind == "wait":
                c.waits.append(op)
            else:
                bars[(op.barrier, op.index)].arrive(c.name, op, op.value)
        elif op.kind == "mma":
            j = c.read
            if fills.get(j % stages) != (j, True):
                return stale(c, op, j)
            c.read += 1
            c.waits = []
            if op.is_async:
                c.in_flight.append((j, op))
        elif op.kind == "mma_wait":
            keep = max(op.value, 0)
            c.in_flight = c.in_flight[len(c.in_flight) - keep:] if keep < len(c.in_flight) else c.in_flight
        elif op.kind == "return" and c.in_flight:
            return RingFault("in flight", (
                f"{c.name} returns from tile {op.tile} ({op.where}) with {len(c.in_flight)} wgmma(s) still in "
                "flight: the epilogue would read an accumulator the tensor cores are still writing, and the "
                "slot it reads could not be given back safely. End the loop with warpgroup_mma_wait(0, "
                "deps=(acc,)), then give back the last slot."))
