"""Checks for appendix 09b (measuring): what ``do_bench`` reads for a call with host work
(:func:`check_do_bench_reading`), and a same-run verdict on two kernels' interleaved timings
(:func:`check_timing_verdict`).  Both are plain Python, compared with the references here on
cases that include the edges (host work just under and over what the flush hides; ratios just
inside and outside the noise)."""

from __future__ import annotations

import statistics

from . import _kernel_checks as kc
from ._core import Hints, call, fmt, shown, unseen_cases


# ----------------------------------------------------------------------------- exercise 1
@kc.reference
def do_bench_reading_ref(host_us: float, kernel_us: float, hidden_us: float, events_us: float) -> float:
    """What do_bench reads: the two events and the kernel, plus the host work the flush did not hide."""
    return events_us + kernel_us + max(0.0, host_us - hidden_us)


#: (host_us, kernel_us, hidden_us, events_us): the appendix's H100 fit (65 µs hidden, 3.4 µs of
#: events), host work under, at and over it, a long kernel, a flush that hides nothing
READING_CASES = [(0, 1.2, 65, 3.4), (40, 1.2, 65, 3.4), (65, 1.2, 65, 3.4), (100, 1.2, 65, 3.4),
                 (400, 1.2, 65, 3.4), (30, 500, 65, 3.4), (10, 2.0, 0, 3.0), (250, 0.5, 120, 2.5)]


def _why_reading(got, host_us, kernel_us, hidden_us, events_us) -> str:
    if got == events_us + kernel_us + host_us - hidden_us:
        return " (host work shorter than the flush is hidden completely: it never makes the reading smaller)"
    if got == events_us + kernel_us + host_us:
        return " (the flush hides the first hidden_us of host work: only what sticks out past it shows)"
    if got == max(kernel_us, host_us - hidden_us) + events_us:
        return " (the kernel runs after the host has launched it: its time adds to the host work that shows)"
    if got == kernel_us + max(0.0, host_us - hidden_us):
        return " (the two events themselves cost events_us, even around an empty call)"
    return ""


@kc.plain_exercise("do_bench_reading", hints=Hints(
    nudge="the GPU reaches the start event only after the flush; by then, how much of the host's work is over?",
    approach="the reading is the events' own cost, plus the kernel, plus only the part of the host work that lasts "
             "longer than what the flush hides (never less than zero)",
    solution="return events_us + kernel_us + max(0.0, host_us - hidden_us)"))
def check_do_bench_reading(do_bench_reading):
    problems = _reading_problems(do_bench_reading, READING_CASES)
    return problems or _reading_problems(do_bench_reading, unseen_cases(lambda rng: (
        round(rng.uniform(0, 500), 1), round(rng.uniform(0.1, 600), 2), round(rng.uniform(0, 150), 1),
        round(rng.uniform(1, 6), 2))))


def _reading_problems(do_bench_reading, cases) -> list[str]:
    problems = []
    for case in cases:
        expected = do_bench_reading_ref(*case)
        got = call(do_bench_reading, *case)
        try:
            value = float(got)
        except (TypeError, ValueError, OverflowError):
            return [f"do_bench_reading{case}: expected a number of µs, got {shown(got)}"]
        if abs(value - expected) > 1e-6 * max(1.0, abs(expected)):
            host_us, kernel_us, hidden_us, events_us = case
            problems.append(f"host {fmt(host_us)} µs, kernel {fmt(kernel_us)} µs, hidden {fmt(hidden_us)} µs, events "
                            f"{fmt(events_us)} µs: expected {fmt(expected)} µs, got {fmt(value)}"
                            + _why_reading(value, *case))
    return problems


# ----------------------------------------------------------------------------- exercise 2
@kc.reference
def timing_verdict_ref(baseline_us, ours_us, noise_pct: float) -> str:
    """'faster', 'slower' or 'noise': the median of the per-round ratios baseline / ours, against
    twice the noise (the standard deviation of an A/A ratio, in percent)."""
    ratio = statistics.median(b / o for b, o in zip(baseline_us, ours_us))
    if ratio > 1 + 2 * noise_pct / 100:
        return "faster"
    if ratio < 1 - 2 * noise_pct / 100:
        return "slower"
    return "noise"


#: (baseline rounds, our rounds, noise %): clear wins and losses, a 1.5% edge inside 2 x 1.1%,
#: one wild round the median must ignore, rounds whose medians disagree with their ratios' median
VERDICT_CASES = [
    ([100, 101, 99], [90, 91, 89], 1.1),
    ([100, 101, 99], [110, 111, 109], 1.1),
    ([100, 100, 100], [98.5, 98.6, 98.4], 1.1),
    ([100, 100, 100, 100, 100], [95, 95, 95, 95, 300], 1.0),
    ([100, 120, 100], [97, 116, 97], 1.0),
    ([100, 110, 120], [96, 119, 115], 1.0),
    ([50, 50, 50], [49.5, 49.5, 49.5], 0.2),
    ([200, 202], [205, 207], 0.5),
]


def _why_verdict(got, baseline, ours, noise_pct) -> str:
    ratio_of_medians = statistics.median(baseline) / statistics.median(ours)
    mean_ratio = statistics.fmean(b / o for b, o in zip(baseline, ours))
    for ratio, what in ((ratio_of_medians, "the ratio of the two medians"), (mean_ratio, "the mean of the ratios")):
        verdict = "faster" if ratio > 1 + 2 * noise_pct / 100 else "slower" if ratio < 1 - 2 * noise_pct / 100 else "noise"
        if verdict == got:
            return f" (that follows {what}; take the median of the per-round ratios baseline / ours)"
    if got in ("faster", "slower"):
        return (" (a difference within twice the noise is no verdict: compare |ratio - 1| with "
                "2 * noise_pct / 100)")
    return ""


@kc.plain_exercise("timing_verdict", hints=Hints(
    nudge="each round timed both kernels one after the other: which number per round compares them fairly?",
    approach="per round, baseline / ours; the median of those ratios; 'faster' or 'slower' only when it lies further "
             "from 1 than twice the noise (noise_pct is in percent)",
    solution="ratio = statistics.median(b / o for b, o in zip(baseline_us, ours_us)); return 'faster' if ratio > 1 + "
             "2 * noise_pct / 100 else 'slower' if ratio < 1 - 2 * noise_pct / 100 else 'noise'"))
def check_timing_verdict(timing_verdict):
    problems = _verdict_problems(timing_verdict, VERDICT_CASES)
    return problems or _verdict_problems(timing_verdict, unseen_cases(_draw_rounds))


def _draw_rounds(rng) -> tuple:
    """(baseline rounds, our rounds, noise %) as VERDICT_CASES lists them: 2 to 9 rounds of a kernel of
    10 to 500 µs, ours about 0.9 to 1.1 times as long, each round a little off."""
    rounds, base, speed = rng.randint(2, 9), rng.uniform(10, 500), rng.uniform(0.9, 1.1)
    baseline = [round(base * rng.uniform(0.97, 1.03), 2) for _ in range(rounds)]
    ours = [round(b * speed * rng.uniform(0.99, 1.01), 2) for b in baseline]
    return baseline, ours, round(rng.uniform(0.2, 3.0), 1)


def _verdict_problems(timing_verdict, cases) -> list[str]:
    problems = []
    for baseline, ours, noise in cases:
        expected = timing_verdict_ref(baseline, ours, noise)
        got = call(timing_verdict, list(baseline), list(ours), noise)
        if got not in ("faster", "slower", "noise"):
            return [f"timing_verdict({baseline}, {ours}, {noise}): expected 'faster', 'slower' or 'noise', got {shown(got)}"]
        if got != expected:
            problems.append(f"baseline {baseline} µs, ours {ours} µs, noise {noise}%: expected {expected!r}, got {got!r}"
                            + _why_verdict(got, baseline, ours, noise))
    return problems
