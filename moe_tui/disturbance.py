"""Was the server serving someone else during a run? Read from the server's own request counts.

The server manager scrapes SGLang's `/metrics` about once a second while a server is ready
(`ServerMetrics`: `sglang:num_running_reqs` + `sglang:num_queue_reqs`). During a timed run the
benchmark client never has more requests in flight than its concurrency cap (`min(max_concurrency,
num_prompts)`), so a server holding more than that is serving someone else (a small slack for
the server's lag in dropping finished requests, see `lag_slack`):
another user's streams on the port, a second benchmark, a stray script. Such a run measured a
shared server and is flagged `judgement.FLAG_FOREIGN_LOAD`, with the largest excess in its
self-check, whatever its numbers look like.

`ServerLoadWatch` is the collector a controller subscribes to the run's server for the timed phase;
`load_summary` and `load_flags` are pure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from moe_tui import judgement as J
from moe_tui.records import ServerLoadJson

# The server manager's own /health probe (a one-token generate in SGLang 0.5.23) is at most one request
# at the server beside the client's: not someone else.
HEALTH_PROBES_IN_FLIGHT = 1


def client_cap(max_concurrency: int | None, num_prompts: int) -> int:
    """The most requests the client can have at the server at once."""
    return min(max_concurrency, num_prompts) if max_concurrency else num_prompts


class ServerLoadWatch:
    """Keeps (time, running + queued) of every metrics sample of one server while a run lasts."""

    def __init__(self, profile: str, cap: int, allowance: int = 0):
        self.profile = profile
        self.cap = cap
        self.allowance = allowance  # requests of the runner's own beside the client's (its health probe)
        self.samples: list[tuple[float, float]] = []

    def __call__(self, event: Any) -> None:
        if type(event).__name__ != "ServerMetrics" or getattr(event, "profile", None) != self.profile:
            return
        running, queued = event.running_requests, event.queued_requests
        if running is None and queued is None:
            return
        self.samples.append((time.time(), float(running or 0.0) + float(queued or 0.0)))

    def summary(self) -> ServerLoadJson:
        return load_summary(self.samples, self.cap, self.allowance)


def load_summary(samples: list[tuple[float, float]], cap: int, allowance: int = 0) -> ServerLoadJson:
    """Self-check fields: the client's cap, how many samples were read, the server's largest
    running + queued count, and (when over the cap and the runner's own `allowance`) the excess over
    the client's cap and when it was seen."""
    out: ServerLoadJson = {"client_cap": cap, "samples": len(samples), "server_max_requests": None,
                           "foreign_requests_max": 0, "foreign_seen_at": None}
    if allowance:
        out["runner_requests_allowed"] = allowance
    if not samples:
        return out
    at, peak = max(samples, key=lambda s: s[1])
    limit = cap + allowance
    over = sum(1 for _t, n in samples if n > limit)
    out["server_max_requests"] = peak
    out["samples_over_cap"] = over
    if peak > limit + lag_slack(cap) or over >= max(OVER_CAP_MIN_SAMPLES, OVER_CAP_FRACTION * len(samples)):
        out["foreign_requests_max"] = peak - cap
        out["foreign_seen_at"] = at
    return out


# A request the client saw finish can still be counted by the server for a moment after (its
# removal from the running batch lags the last chunk), while the client already sent the next:
# a clean run at cap 2 showed 3 in 1 of 219 samples. So one sample a little over the cap is not
# someone else; many samples over it, or one far over it, are.
OVER_CAP_MIN_SAMPLES = 3
OVER_CAP_FRACTION = 0.25


def lag_slack(cap: int) -> int:
    return 1 + cap // 16


def load_flags(summary: Mapping[str, Any] | None) -> set[str]:
    return {J.FLAG_FOREIGN_LOAD} if summary and (summary.get("foreign_requests_max") or 0) > 0 else set()
