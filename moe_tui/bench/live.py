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
  request percentile needs 100 requests in the grid). That one event is not dropped in silence:
  `remeasure_reasons` words it, the run carries `judgement.FLAG_CLIENT_LAG_ONCE` (shown, not
  excluding: the run counts) and the words say to re-measure it;
- client CPU > 85 % of one core over the timed phase: one Python thread is nearly saturated;
- dispatch lag p99 > 10 ms (finite request rate only): arrivals were released late;
- achieved rate < 90 % of the requested rate while the concurrency cap was never full.
A client-bound run's last reason is `client_bound_advice`: what to change (fewer concurrent
requests, a faster client host, or on the emulator a slower time scale).

Why one late wake-up was common (issue #31: 17 of 28 short runs on an H200 host, each ONE wake-up
50-73 ms late "from the client's own work"): the benchmark runs in its own process
(`moe_tui.bench.process`), so nothing of the runner shares its loop or its GIL; what stalled it
was its own cyclic garbage collector. A fresh `moe-tui bench` process holds ~41,000 objects after
its imports (aiohttp, numpy), and the first full (generation 2) collection, which the stream
parsing and the progress events' JSON bring on within a few seconds, walks all of them: 33-64 ms
on the 2-core box, measured with `gc.callbacks` (benches/client_gc.py). Whether it falls inside the
timed phase depends on how much the run allocated before, hence "one late wake-up, sometimes".
`QuietGc` keeps it out: every object alive at the start of the timed phase is frozen
(`gc.freeze`: out of the collector's reach for good) and automatic collection is off until the
phase ends; the garbage of one run is collected after it. The self-check records what ran
(`gc_timed`, and any collection seen during the phase with its longest pause).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

from moe_tui.judgement import (
    FLAG_CLIENT_BOUND,
    FLAG_CLIENT_LAG_ONCE,
    is_simulated,
    run_time_scale,
    sim_time_scale_of_server,
)
from moe_tui.metrics import split_chunk_gaps
from moe_tui.records import FreeForm

# The client's self-check of a run: an open set of named figures (lag, CPU, dispatch rate, connection
# pool, collector, stall, advice: this module's doc and moe_tui.bench.engine's name them), stored as
# the run's selfcheck. Free-form by design: each check adds its own fields, and a stored run keeps
# whatever the version that measured it wrote.
SelfCheck = FreeForm


class ProgressFigures(TypedDict):
    """`LiveStats.snapshot`: the live fields of a `moe_tui.events.BenchProgress`."""

    completed: int
    total: int
    errors: int
    elapsed_s: float
    output_tok_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    in_flight: int
    client_lag_ms: float | None
    phase: str


class GcSummary(TypedDict):
    """`QuietGc.summary`: what the collector did during the timed phase (self-check fields)."""

    gc_timed: str
    gc_collections_timed: int
    gc_pause_max_ms: float


WINDOW_S = 5.0
RECENT_SAMPLES = 2000
ITL_CHUNKS_PER_REQUEST = 50

LAG_P99_LIMIT_MS = 10.0
# ... or this share of the run's median ITL, where that is more. Every decode step sends one chunk
# per running request, all at once: at concurrency 256-1024 that burst is 10-30 ms of parsing on one
# thread whatever the host (measured on the 2-core box: own-lag p99 10-14 ms at 256, 17-28 ms at
# 1024, with the client's CPU at 5-8%). A client that finishes each burst within a tenth of the step
# never sets the pace: throughput counts tokens (the run's end moves by one burst at most), an ITL
# is a difference of two timestamps taken at like places in their bursts, and a TTFT carries half a
# burst on average, the same absolute amount on both sides of a cell (same concurrency, same chunks).
LAG_ITL_FRACTION = 0.10
LAG_P99_MIN_SAMPLES = 100
# One late wake-up in a short run is a re-measure, not client-bound, up to this lateness: a
# collector pause or a page fault storm is tens of milliseconds; a loop held a quarter second in a
# run of a few seconds moved its numbers, and is client-bound on its own.
LAG_SINGLE_LIMIT_MS = 250.0
CPU_LIMIT = 0.85
DISPATCH_LAG_P99_LIMIT_MS = 10.0
# ... or this share of the run's median ITL, where that is more. Every decode step sends one chunk
# per running request, all at once: at concurrency 256-1024 that burst is 10-30 ms of parsing on one
# thread whatever the host (measured on the 2-core box: own-lag p99 10-14 ms at 256, 17-28 ms at
# 1024, with the client's CPU at 5-8%). A client that finishes each burst within a tenth of the step
# never sets the pace: throughput counts tokens (the run's end moves by one burst at most), an ITL
# is a difference of two timestamps taken at like places in their bursts, and a TTFT carries half a
# burst on average, the same absolute amount on both sides of a cell (same concurrency, same chunks).
LAG_ITL_FRACTION = 0.10
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

    def snapshot(self, loop_lag_ms: float | None = None) -> ProgressFigures:
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

    def summary(self, since: int = 0, limit_ms: float = LAG_P99_LIMIT_MS) -> dict[str, float | None]:
        """The lag figures from wake-up `since` on; `*_late` count the wake-ups over `limit_ms`."""
        lags, own = self.lags[since:], self.own[since:]
        if not lags:
            return {"loop_lag_p50_ms": None, "loop_lag_p99_ms": None, "loop_lag_max_ms": None, "loop_lag_samples": 0,
                    "loop_lag_late": 0, "loop_own_lag_p99_ms": None, "loop_own_lag_max_ms": None, "loop_own_lag_late": 0}
        arr, mine = np.asarray(lags) * 1000, np.asarray(own) * 1000
        return {"loop_lag_p50_ms": float(np.percentile(arr, 50)), "loop_lag_p99_ms": float(np.percentile(arr, 99)),
                "loop_lag_max_ms": float(arr.max()), "loop_lag_samples": len(lags),
                "loop_lag_late": int((arr > limit_ms).sum()), "loop_lag_limit_ms": limit_ms,
                "loop_own_lag_p99_ms": float(np.percentile(mine, 99)), "loop_own_lag_max_ms": float(mine.max()),
                "loop_own_lag_late": int((mine > limit_ms).sum())}


def lag_limit_ms(median_itl_ms: float | None) -> float:
    """The loop-lag limit of a run with this median ITL: `LAG_P99_LIMIT_MS`, or `LAG_ITL_FRACTION`
    of the median ITL where that is more."""
    return max(LAG_P99_LIMIT_MS, LAG_ITL_FRACTION * (median_itl_ms or 0.0))


def _limit(check: Mapping[str, Any]) -> float:
    """The limit the run's late counts were taken against (a check stored before: 10 ms)."""
    return float(check.get("loop_lag_limit_ms") or LAG_P99_LIMIT_MS)


def _judged_lag(check: Mapping[str, Any]) -> tuple[str, str, float, float, int, int | None] | None:
    """(field prefix, words, p99, worst, samples, late count) of a run whose judged lag (the own
    share where the run recorded it; a check stored before that share was measured is judged by the
    whole lateness) went over its limit; None when it did not."""
    own = "loop_own_lag" if check.get("loop_own_lag_p99_ms") is not None else "loop_lag"
    lag = check.get(f"{own}_p99_ms")
    if lag is None or lag <= _limit(check):
        return None
    what = "event-loop lag from the client's own work" if own == "loop_own_lag" else "event-loop lag"
    late = check.get(f"{own}_late")
    return (own, what, float(lag), float(check.get(f"{own}_max_ms") or 0.0), int(check.get("loop_lag_samples") or 0),
            None if late is None else int(late))


def _one_event(judged: tuple[str, str, float, float, int, int | None]) -> bool:
    """One late wake-up, not too late: an event, not a tail. A p99 over a few hundred wake-ups (or
    the largest of a short run's) can rest on that one sample alone."""
    _own, _what, _lag, worst, _samples, late = judged
    return late == 1 and worst <= LAG_SINGLE_LIMIT_MS


def selfcheck_flags(check: Mapping[str, Any]) -> list[str]:
    """Reasons the client may have been the limit; empty when it kept up."""
    reasons = []
    judged = _judged_lag(check)
    if judged is not None and not _one_event(judged):
        _own, what, lag, worst, samples, late = judged
        limit = _limit(check)
        if samples >= LAG_P99_MIN_SAMPLES or late is None:
            reasons.append(f"{what} p99 {lag:.1f} ms > {limit:.3g} ms")
        else:
            reasons.append(f"{what}: {late} of {samples} wake-ups later than {limit:.3g} ms "
                           f"(the latest {worst:.1f} ms; too few for a p99)")
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


def remeasure_reasons(check: Mapping[str, Any]) -> list[str]:
    """Why a run that is NOT client-bound should still be measured again: exactly one wake-up was
    late (at most `LAG_SINGLE_LIMIT_MS`) and that alone put its lag over the limit. One event is no
    tail, so the run is kept and counts; but the requests in flight then carry up to that much in
    their timestamps, so a verdict resting on this run is worth a second measurement."""
    judged = _judged_lag(check)
    if judged is None or not _one_event(judged) or selfcheck_flags(check):
        return []
    _own, what, _lag, worst, samples, _late = judged
    return [f"one wake-up of {samples} {worst:.1f} ms late ({what}; one event, not a tail): the requests "
            f"in flight then carry up to {worst:.0f} ms in their timestamps; re-measure this run (a second "
            "late wake-up would have made it client-bound)"]


def judge_client(check: SelfCheck) -> list[str]:
    """Fill a finished run's self-check with `client_bound_reasons`, `client_bound` and
    `remeasure_reasons`; the run flags they earn (`client_bound`, or else `client_lag_once`)."""
    check["client_bound_reasons"] = selfcheck_flags(check)
    check["client_bound"] = bool(check["client_bound_reasons"])
    check["remeasure_reasons"] = remeasure_reasons(check)
    if check["client_bound"]:
        return [FLAG_CLIENT_BOUND]
    return [FLAG_CLIENT_LAG_ONCE] if check["remeasure_reasons"] else []


def client_bound_advice(check: Mapping[str, Any], *, concurrency: int | None = None, simulated: bool = False,
                        time_scale: float | None = None) -> str:
    """What to change so that a client-bound run (or one to re-measure) measures the server: a
    plain sentence from the run's self-check, its concurrency and, on the emulator, its time scale.
    Empty when the run is neither client-bound nor to be re-measured. Investigate and the grid
    show it as is."""
    reasons = selfcheck_flags(check)
    if not reasons:
        return "re-measure this run: one late wake-up is one event, not a tail" if remeasure_reasons(check) else ""
    conc = concurrency or check.get("max_concurrency")
    fewer = f"fewer concurrent requests than {conc}" if conc else "fewer concurrent requests"
    steps = [f"{fewer} per client", "a faster (or less loaded) client host"]
    if simulated:
        scale = f" than {time_scale:g}" if time_scale else ""
        steps.append(f"on the emulator a slower time scale{scale} (fewer tokens per real second for the "
                     "client to parse; the runner picks one per concurrency, judgement.sim_cell_time_scale)")
    return "what to change: " + ", or ".join(steps)


def attach_advice(check: SelfCheck, concurrency: int | None, server_info: object) -> None:
    """Put the advice in a finished run's self-check (`client_bound_advice`), and as the last of
    a client-bound run's reasons, so the grid's flag text says what to change. The server's
    /server_info says whether it is the emulator and at what time scale."""
    if not (check.get("client_bound") or check.get("remeasure_reasons")):
        return
    info = server_info if isinstance(server_info, dict) else {}
    advice = client_bound_advice(check, concurrency=concurrency, simulated=bool(info.get("simulated")),
                                 time_scale=sim_time_scale_of_server(info))
    check["client_bound_advice"] = advice
    if check.get("client_bound") and advice:
        check["client_bound_reasons"] = [*check["client_bound_reasons"], advice]


def client_advice_for_run(selfcheck: Mapping[str, Any], spec: Mapping[str, Any], profile: Mapping[str, Any],
                          provenance: Mapping[str, Any] | None = None) -> str:
    """`client_bound_advice` for a stored run (its self-check, canonical spec, profile snapshot and
    provenance, for the clock it ran at): the function investigate calls to propose the re-measure
    of a client-bound cell."""
    simulated = is_simulated(profile=profile, provenance=provenance)
    return client_bound_advice(selfcheck, concurrency=spec.get("max_concurrency"), simulated=simulated,
                               time_scale=run_time_scale(profile, provenance) if simulated else None)


# -- the collector, out of the timed phase ------------------------------------------------------
# `MOE_TUI_BENCH_GC=auto` leaves Python's automatic collection as it is during the timed phase: the
# "before" side of benches/client_gc.py's side-by-side measurement. Not for use otherwise.
GC_ENV = "MOE_TUI_BENCH_GC"


class QuietGc:
    """Freeze what is alive and switch automatic collection off for the timed phase; count (and
    time) any collection that runs anyway. `summary()` is the self-check's `gc_*` fields."""

    def __init__(self) -> None:
        self.mode = "auto" if os.environ.get(GC_ENV) == "auto" else "frozen"
        self.collections = 0
        self.pause_max_ms = 0.0
        self._started: float | None = None
        self._was_enabled = gc.isenabled()

    def _watch(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.collections += 1
            self.pause_max_ms = max(self.pause_max_ms, (time.perf_counter() - self._started) * 1000)
            self._started = None

    def __enter__(self) -> QuietGc:
        if self.mode == "frozen":
            gc.freeze()  # what the imports and the setup made stays out of every later collection
            gc.disable()
        gc.callbacks.append(self._watch)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watch in gc.callbacks:
            gc.callbacks.remove(self._watch)
        if self.mode == "frozen":
            gc.unfreeze()  # a process that runs benchmarks one after another must still collect them
        if self._was_enabled:
            gc.enable()

    def summary(self) -> GcSummary:
        return {"gc_timed": self.mode, "gc_collections_timed": self.collections,
                "gc_pause_max_ms": round(self.pause_max_ms, 3)}
