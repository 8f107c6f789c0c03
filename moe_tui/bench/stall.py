"""Server stalls, read from the stream itself: stretches with requests in flight and no token
arriving on any of them.

A server frozen mid-run (SIGSTOP, a hung NCCL collective, a GC pause of the scheduler) leaves
every stream silent at once. Requests still finish after it resumes, so the run can look complete
while its throughput is half the real one. `find_stalls` sweeps the timed phase's outcomes:
progress is a token arriving, or the client going from idle to busy (an idle client is no stall);
a gap in progress longer than `judgement.stall_threshold_s(median ITL)` while at least one request
was in flight is a stall. The run gets `judgement.FLAG_SERVER_STALL` and the self-check keeps the
longest stall's start (epoch seconds) and length, how many there were and their total.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from moe_tui.judgement import stall_threshold_s


def _timeline(outcomes: Iterable[Any]) -> list[tuple[float, int]]:
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


def find_stalls(outcomes: Iterable[Any], threshold_s: float) -> list[tuple[float, float]]:
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


def stall_check(outcomes: list[Any], median_itl_ms: float | None, wall_anchor: float,
                perf_anchor: float) -> dict[str, Any]:
    """Self-check fields: `stall_threshold_s` and `server_stall` (None, or the longest stall's
    `start` in epoch seconds and `length_s`, with `count` and `total_s` of all of them)."""
    threshold = stall_threshold_s(median_itl_ms)
    stalls = find_stalls(outcomes, threshold)
    check: dict[str, Any] = {"stall_threshold_s": threshold, "server_stall": None}
    if stalls:
        start, length = max(stalls, key=lambda s: s[1])
        check["server_stall"] = {"start": wall_anchor + (start - perf_anchor), "length_s": round(length, 3),
                                 "count": len(stalls), "total_s": round(sum(s[1] for s in stalls), 3)}
    return check
