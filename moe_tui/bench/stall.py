"""Server stalls, read from the stream itself: stretches with requests in flight and no token
arriving on any of them.

A server frozen mid-run (SIGSTOP, a hung NCCL collective, a GC pause of the scheduler) leaves
every stream silent at once. Requests still finish after it resumes, so the run can look complete
while its throughput is half the real one. `find_stalls` sweeps the timed phase's outcomes:
progress is a token arriving, or the client going from idle to busy (an idle client is no stall);
a gap in progress longer than `judgement.stall_threshold_s(median ITL)` while at least one request
was in flight is a stall. Shorter gaps (over `pause_threshold_s`) are pauses: many of them adding
up past a limit is a stall too (`cumulative`). The run gets `judgement.FLAG_SERVER_STALL` and the
self-check keeps the longest stall's start (epoch seconds) and length, how many there were and
their total.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypedDict

from moe_tui.judgement import stall_threshold_s

if TYPE_CHECKING:
    from moe_tui.bench.client import RequestOutcome


class Pauses(TypedDict):
    threshold_s: float
    count: int
    total_s: float
    total_limit_s: float


class ServerStall(TypedDict):
    start: float  # epoch seconds
    length_s: float
    count: int
    total_s: float
    cumulative: bool


class StallCheck(TypedDict):
    """`stall_check`'s self-check fields."""

    stall_threshold_s: float
    server_stall: ServerStall | None
    pauses: Pauses


def _timeline(outcomes: Iterable[RequestOutcome]) -> list[tuple[float, int]]:
    """(perf time, kind) events; kind 0 = request start, 1 = token, 2 = request end. Ends sort
    after tokens at the same instant, starts before."""
    events: list[tuple[float, int]] = []
    for o in outcomes:
        if o.sent_at is None:
            continue
        events.append((o.sent_at, 0))
        events.extend((o.sent_at + offset, 1) for offset, _tokens in o.chunks)
        last = o.chunks[-1][0] if o.chunks else 0.0
        events.append((o.sent_at + max(o.latency or 0.0, last), 2))
    events.sort()
    return events


def find_stalls(outcomes: Iterable[RequestOutcome], threshold_s: float) -> list[tuple[float, float]]:
    """(start, length) in perf-counter seconds of every progress gap over `threshold_s` with
    requests in flight."""
    stalls: list[tuple[float, float]] = []
    in_flight, last_progress = 0, None
    for t, kind in _timeline(outcomes):
        if kind == 0:
            if in_flight == 0:
                last_progress = t  # idle -> busy: the clock starts here, not in the idle time
            in_flight += 1
            continue
        if last_progress is not None and in_flight > 0 and t - last_progress > threshold_s:
            stalls.append((last_progress, t - last_progress))
        if kind == 1:
            last_progress = t
        else:
            in_flight -= 1
            last_progress = t if in_flight else None
    return stalls


# Short freezes add up: a gap in progress over PAUSE_MIN_S (or PAUSE_ITL_MULTIPLE x median ITL)
# counts as a pause, and pauses totalling over max(PAUSE_TOTAL_MIN_S, PAUSE_TOTAL_FRACTION of the run)
# flag the run even when none of them reaches the single-stall threshold (five 3 s freezes under a
# 5 s floor cost a run 37% and were stored clean). The per-pause floor sits well under a second:
# with a 1 s floor, 25 freezes of 0.8-0.9 s cost a run 44% and none of them counted. Legitimate gaps
# (a prefill between decode steps, a scheduling hiccup) are tens of milliseconds and a run needs
# PAUSE_TOTAL_MIN_S of them in all; a slow server's own rhythm is covered by 10x its median ITL.
PAUSE_MIN_S = 0.5
PAUSE_ITL_MULTIPLE = 10.0
PAUSE_TOTAL_FRACTION = 0.02
PAUSE_TOTAL_MIN_S = 3.0


def pause_threshold_s(median_itl_ms: float | None) -> float:
    return max(PAUSE_MIN_S, PAUSE_ITL_MULTIPLE * (median_itl_ms or 0.0) / 1000.0)


def stall_check(outcomes: list[RequestOutcome], median_itl_ms: float | None, wall_anchor: float,
                perf_anchor: float, duration_s: float | None = None) -> StallCheck:
    """Self-check fields: `stall_threshold_s`, `pauses` (threshold, count, total and the limit
    on the total) and `server_stall` (None, or the longest stall's `start` in epoch seconds and
    `length_s`, with `count` and `total_s` of all of them, and `cumulative` true when it is the
    pauses' total, not one stall, that crossed its limit)."""
    threshold = stall_threshold_s(median_itl_ms)
    stalls = find_stalls(outcomes, threshold)
    pause_s = min(pause_threshold_s(median_itl_ms), threshold)
    pauses = find_stalls(outcomes, pause_s)
    total_limit = max(PAUSE_TOTAL_MIN_S, PAUSE_TOTAL_FRACTION * (duration_s or 0.0))
    pause_total = sum(p[1] for p in pauses)
    check: StallCheck = {"stall_threshold_s": threshold, "server_stall": None,
                         "pauses": {"threshold_s": pause_s, "count": len(pauses), "total_s": round(pause_total, 3),
                                    "total_limit_s": round(total_limit, 3)}}
    cumulative = not stalls and pause_total > total_limit
    found = stalls or (pauses if cumulative else [])
    if found:
        start, length = max(found, key=lambda s: s[1])
        check["server_stall"] = {"start": wall_anchor + (start - perf_anchor), "length_s": round(length, 3),
                                 "count": len(found), "total_s": round(sum(s[1] for s in found), 3),
                                 "cumulative": cumulative}
    return check
