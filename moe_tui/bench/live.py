"""Live figures of a running benchmark and the client's watch on itself.

`LiveStats` keeps cheap running state: a running token count (one integer add per chunk; the
live rate is taken over the snapshots of the last `WINDOW_S` seconds) and recent TTFT/ITL samples
(ITL from the last `ITL_CHUNKS_PER_REQUEST` chunks of each finished request), so a progress
snapshot every ~250 ms costs one small percentile. `LoopLagProbe` measures how late the event loop wakes a sleeper: when the loop is
busy parsing streams, every timestamp the client takes is late by about that much.

Client-bound thresholds (documented here, applied in `selfcheck_flags`):
- loop lag p99 > 10 ms from the client's own work (the loop thread's CPU while late; lateness
  while the host ran other processes is recorded as `loop_lag_*` but is not the client failing to
  keep up): timestamps are off by more than a typical decode step. A timed phase too
  short for a p99 (fewer than `LAG_P99_MIN_SAMPLES` wake-ups, ~5 s: an emulator at a fast time scale)
  needs more than one late wake-up, or one later than `LAG_SINGLE_LIMIT_MS`: there the "p99" is the
  largest sample, and one late wake-up is one event, not a tail (p99 needs 100 samples, as a
  request percentile needs 100 requests in the grid);
- client CPU > 85 % of one core over the timed phase: one Python thread is nearly saturated;
- dispatch lag p99 > 10 ms (finite request rate only): arrivals were released late;
- achieved rate < 90 % of the requested rate while the concurrency cap was never full.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import numpy as np

from moe_tui.metrics import split_chunk_gaps

WINDOW_S = 5.0
RECENT_SAMPLES = 2000
ITL_CHUNKS_PER_REQUEST = 50

LAG_P99_LIMIT_MS = 10.0
LAG_P99_MIN_SAMPLES = 100
LAG_SINGLE_LIMIT_MS = 50.0
CPU_LIMIT = 0.85
DISPATCH_LAG_P99_LIMIT_MS = 10.0
RATE_SHORTFALL = 0.9


class LiveStats:
    def __init__(self, total: int, phase: str = "timed") -> None:
        self._start(total, phase)

    def _start(self, total: int, phase: str) -> None:
        self.total = total
        self.phase = phase
        self.started = time.perf_counter()
        self.completed = 0
        self.errors = 0
        self.in_flight = 0
        self.tokens = 0  # output tokens received so far in this phase
        self._marks: deque[tuple[float, int]] = deque([(self.started, 0)])  # (snapshot time, tokens)
        self._ttft: deque[float] = deque(maxlen=RECENT_SAMPLES)
        self._itl: deque[float] = deque(maxlen=RECENT_SAMPLES)

    def reset(self, total: int, phase: str) -> None:
        self._start(total, phase)

    def on_tokens(self, now: float, tokens: int) -> None:
        self.tokens += tokens

    def on_done(self, ok: bool, ttft: float | None, chunks: list[tuple[float, int]]) -> None:
        """A request ended; `chunks` are its (arrival, new tokens), as RequestOutcome.chunks."""
        self.in_flight -= 1
        if ok:
            self.completed += 1
            if ttft is not None:
                self._ttft.append(ttft)
            if len(chunks) > 1:
                self._itl.extend(split_chunk_gaps(chunks[-ITL_CHUNKS_PER_REQUEST:]))
        else:
            self.errors += 1

    def snapshot(self, loop_lag_ms: float | None = None) -> dict[str, Any]:
        now = time.perf_counter()
        marks = self._marks
        marks.append((now, self.tokens))
        # the base is the newest snapshot at least WINDOW_S old (or the phase start)
        while len(marks) > 2 and marks[1][0] <= now - WINDOW_S:
            marks.popleft()
        base_t, base_tokens = marks[0]
        elapsed = now - self.started
        window = now - base_t
        tokens = self.tokens - base_tokens

        def pct(values: deque[float], q: float) -> float | None:
            return float(np.percentile(np.fromiter(values, float), q)) * 1000 if values else None

        return {
            "completed": self.completed, "total": self.total, "errors": self.errors,
            "elapsed_s": elapsed, "output_tok_s": tokens / window if window > 0 else 0.0,
            "ttft_p50_ms": pct(self._ttft, 50), "ttft_p99_ms": pct(self._ttft, 99),
            "itl_p50_ms": pct(self._itl, 50), "itl_p99_ms": pct(self._itl, 99),
            "in_flight": self.in_flight, "client_lag_ms": loop_lag_ms, "phase": self.phase,
        }


class LoopLagProbe:
    """Sleeps `interval` repeatedly and records how late each wake-up was (seconds), and how much of
    that lateness the loop's own work explains: the loop thread's CPU time while the sleeper waited
    (`time.thread_time`), at most the lateness. A loop busy parsing streams is late by its own work
    (client-bound); a loop the host did not schedule (other processes on the cores) is late with its
    CPU nearly idle: its timestamps are still late (`loop_lag_*`), but the client kept up."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.lags: list[float] = []
        self.own: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            due = time.perf_counter() + self.interval
            cpu = time.thread_time()
            await asyncio.sleep(self.interval)
            late = max(0.0, time.perf_counter() - due)
            self.own.append(min(late, time.thread_time() - cpu))
            self.lags.append(late)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def recent_ms(self) -> float | None:
        return self.lags[-1] * 1000 if self.lags else None

    def mark(self) -> int:
        return len(self.lags)

    def summary(self, since: int = 0) -> dict[str, float | None]:
        lags, own = self.lags[since:], self.own[since:]
        if not lags:
            return {"loop_lag_p50_ms": None, "loop_lag_p99_ms": None, "loop_lag_max_ms": None, "loop_lag_samples": 0,
                    "loop_lag_late": 0, "loop_own_lag_p99_ms": None, "loop_own_lag_max_ms": None, "loop_own_lag_late": 0}
        arr, mine = np.asarray(lags) * 1000, np.asarray(own) * 1000
        return {"loop_lag_p50_ms": float(np.percentile(arr, 50)), "loop_lag_p99_ms": float(np.percentile(arr, 99)),
                "loop_lag_max_ms": float(arr.max()), "loop_lag_samples": len(lags),
                "loop_lag_late": int((arr > LAG_P99_LIMIT_MS).sum()),
                "loop_own_lag_p99_ms": float(np.percentile(mine, 99)), "loop_own_lag_max_ms": float(mine.max()),
                "loop_own_lag_late": int((mine > LAG_P99_LIMIT_MS).sum())}


def selfcheck_flags(check: dict[str, Any]) -> list[str]:
    """Reasons the client may have been the limit; empty when it kept up."""
    reasons = []
    # The client's own share of the loop's lateness where the run recorded it; a check stored before
    # that share was measured is judged by the whole lateness.
    own = "loop_own_lag" if check.get("loop_own_lag_p99_ms") is not None else "loop_lag"
    lag = check.get(f"{own}_p99_ms")
    if lag is not None and lag > LAG_P99_LIMIT_MS:
        samples, late = check.get("loop_lag_samples") or 0, check.get(f"{own}_late")
        what = "event-loop lag from the client's own work" if own == "loop_own_lag" else "event-loop lag"
        if samples >= LAG_P99_MIN_SAMPLES or late is None:
            reasons.append(f"{what} p99 {lag:.1f} ms > {LAG_P99_LIMIT_MS:g} ms")
        elif late > 1 or (check.get(f"{own}_max_ms") or 0.0) > LAG_SINGLE_LIMIT_MS:
            reasons.append(f"{what}: {late} of {samples} wake-ups later than {LAG_P99_LIMIT_MS:g} ms "
                           f"(the latest {check.get(f'{own}_max_ms') or 0.0:.1f} ms; too few for a p99)")
    cpu = check.get("client_cpu_fraction")
    if cpu is not None and cpu > CPU_LIMIT:
        reasons.append(f"client CPU {cpu * 100:.0f}% of one core > {CPU_LIMIT * 100:.0f}%")
    dlag = check.get("dispatch_lag_p99_ms")
    if dlag is not None and dlag > DISPATCH_LAG_P99_LIMIT_MS:
        reasons.append(f"dispatch lag p99 {dlag:.1f} ms > {DISPATCH_LAG_P99_LIMIT_MS:g} ms")
    req, got = check.get("requested_rate"), check.get("achieved_rate")
    if (req is not None and got is not None and got < RATE_SHORTFALL * req
            and (check.get("peak_in_flight") or 0) < (check.get("max_concurrency") or 0)):
        reasons.append(f"achieved {got:.2f} req/s < {RATE_SHORTFALL:.0%} of requested {req:.2f} req/s "
                       "with the concurrency cap never reached")
    return reasons
