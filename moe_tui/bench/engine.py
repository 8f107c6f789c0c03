"""The native load generator: `run_benchmark(spec, base_url)` -> `BenchResult`, in this process.

Phases, as sglang.bench_serving 0.5.23 runs them:
1. warmup: `warmup_requests` copies of request 0 with at most 32 output tokens, under the same
   concurrency cap; excluded from results. If every warmup request fails the run is "failed".
2. optional `POST /flush_cache?timeout=60`, then a 1 s pause (bench_serving sleeps 1 s too).
   Then the connection pool is opened to min(concurrency, prompts) connections
   (`client.open_connections`: concurrent GET /v1/models), so the timed phase measures the
   server and not TCP setup; not part of the spec (it changes no server work), recorded in the
   self-check (`connections_preopen_*`, and `connections_opened_timed`: what the timed phase
   still had to open). Done last, just before the timed phase: SGLang's uvicorn closes
   connections idle for 5 s (`timeout_keep_alive=5`), so with spread arrivals some idle ones may
   be closed and reopened on demand anyway, which that count shows.
3. timed phase: requests released at their arrival times (all at once for rate inf), each waits
   for a slot of the concurrency cap (an asyncio semaphore), then streams. Duration = from the
   start of this phase until every request ended and the arrival process finished.
Records of the timed phase go through `moe_tui.metrics.calculate_metrics`.

Status: "complete" (every timed request succeeded), "incomplete" (some failed or the run was
stopped: partial results kept, never shown as clean), "failed" (nothing completed, warmup failed,
or the server was unreachable). After `ABORT_AFTER_CONNECT_ERRORS` consecutive connection failures
with nothing succeeding in between the server is taken as gone and the remaining requests are
marked "aborted" instead of being sent.

Per-request limits: `request_timeout` (whole request, `default_request_timeout`) and
`stall_timeout` (silence, default `client.DEFAULT_STALL_TIMEOUT_S` = 120 s); both are in the
self-check as `request_timeout_s` / `stall_timeout_s`.

Use `run_benchmark_subprocess` (moe_tui.bench.process) from a UI: it runs this in its own process.
"""

from __future__ import annotations

import asyncio
import math
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import aiohttp

from moe_tui.bench.client import (
    DEFAULT_STALL_TIMEOUT_S, RequestOutcome, build_payload, open_connections, open_session, stream_request,
)
from moe_tui.bench.live import LiveStats, LoopLagProbe, selfcheck_flags
from moe_tui.bench.workload import WorkItem, Workload, WorkloadError, build_workload, resolve_vocab_size
from moe_tui.events import BenchProgress
from moe_tui.metrics import calculate_metrics, split_chunk_gaps
from moe_tui.spec import BenchmarkSpec

CLIENT_NAME = "moe-tui"
ABORT_AFTER_CONNECT_ERRORS = 10
FLUSH_CACHE_TIMEOUT_S = 60.0  # bench_serving's default --flush-cache timeout
WARMUP_PAUSE_S = 1.0
PROGRESS_INTERVAL_S = 0.25
CONTROL_TIMEOUT = aiohttp.ClientTimeout(total=10.0)
# What a control call (/model_info, /v1/models, /flush_cache, /server_info) may raise.
HTTP_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
STATUSES = ("complete", "incomplete", "failed")

ProgressCallback = Callable[[BenchProgress], Awaitable[None] | None]


def default_request_timeout(spec: BenchmarkSpec) -> float:
    """Generous per-request limit: 600 s, or 50 ms per prompt+output token if that is longer."""
    return max(600.0, 0.05 * (spec.input_len + spec.output_len))


@dataclass
class BenchResult:
    """The outcome of one benchmark run. `requests` match `Store.finish_run(requests=...)`."""

    status: str
    summary: dict[str, Any] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    selfcheck: dict[str, Any] = field(default_factory=dict)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error: str = ""
    flags: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = ""
    client: str = CLIENT_NAME
    client_version: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    server_info: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BenchResult":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if known.get("status") not in STATUSES:
            raise ValueError(f"benchmark result has status {known.get('status')!r}, expected one of {STATUSES}")
        return cls(**known)


def _client_version() -> str:
    from moe_tui import __version__

    return __version__


def native_spec(spec: BenchmarkSpec) -> BenchmarkSpec:
    """`spec` as this client runs it: client "moe-tui" and this moe-tui's version filled in.

    The controller should store runs under this spec's fingerprint (the result carries the same).
    Raises SpecError when the spec names another client or another moe-tui version.
    """
    from moe_tui.spec import SpecError

    version = _client_version()
    if spec.client != CLIENT_NAME:
        raise SpecError("client", f"this is the {CLIENT_NAME} client; the spec is for {spec.client!r}")
    if spec.client_version and spec.client_version != version:
        raise SpecError("client_version", f"the spec is for moe-tui {spec.client_version}, this is {version}")
    return spec if spec.client_version == version else spec.replace(client_version=version)


def _record(o: RequestOutcome, wall_anchor: float, perf_anchor: float) -> dict[str, Any]:
    """Store-ready dict; sent_at in epoch seconds; itl is the per-token list (bench_serving's)."""
    sent = None if o.sent_at is None else wall_anchor + (o.sent_at - perf_anchor)
    queued = None
    if o.sent_at is not None and o.dispatched_at is not None:
        queued = max(0.0, o.sent_at - o.dispatched_at)
    return {
        "idx": o.idx, "ok": o.ok, "sent_at": sent, "prompt_len": o.prompt_len, "output_len": o.output_len,
        "ttft": o.ttft, "latency": o.latency, "itl": split_chunk_gaps(o.chunks) if o.chunks else [],
        "finish_reason": o.finish_reason, "error": o.error, "error_kind": o.error_kind,
        "http_status": o.http_status, "queued_s": queued,
        "chunks": len(o.chunks),
    }


async def _emit(callback: ProgressCallback | None, event: BenchProgress) -> None:
    if callback is None:
        return
    value = callback(event)
    if asyncio.iscoroutine(value):
        await value


async def run_benchmark(
    spec: BenchmarkSpec,
    base_url: str,
    *,
    on_progress: ProgressCallback | None = None,
    request_timeout: float | None = None,
    stall_timeout: float | None = None,
    vocab_size: int | None = None,
    tokenizer: str | None = None,
    run_id: int | None = None,
    stop: asyncio.Event | None = None,
    warmup_pause_s: float = WARMUP_PAUSE_S,
    progress_interval_s: float = PROGRESS_INTERVAL_S,
    preopen_connections: bool = True,
) -> BenchResult:
    """Run `spec` against the server at `base_url` in this event loop. Never raises for server
    trouble: that becomes the result's status and error. `stop` ends the run early (incomplete).
    Raises SpecError if the spec is not for this client (see `native_spec`)."""
    base_url = base_url.rstrip("/")
    spec = native_spec(spec)
    result = BenchResult(status="failed", spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                         client_version=_client_version(), started_at=time.time())
    timeout = request_timeout or default_request_timeout(spec)
    stall = stall_timeout or DEFAULT_STALL_TIMEOUT_S
    slots = spec.max_concurrency
    url = f"{base_url}/generate" if spec.api == "generate" else f"{base_url}/v1/completions"
    stop = stop or asyncio.Event()
    live = LiveStats(spec.warmup_requests, "warmup")
    probe = LoopLagProbe()
    probe.start()

    async def reporter() -> None:
        while True:
            await asyncio.sleep(progress_interval_s)
            await _emit(on_progress, BenchProgress(run_id=run_id, **live.snapshot(probe.recent_ms())))

    reporter_task = asyncio.create_task(reporter()) if on_progress is not None else None
    async with open_session(slots) as session:
        try:
            await _run_phases(spec, base_url, url, session, result, live, probe, slots, timeout, stall, stop,
                              vocab_size, tokenizer, warmup_pause_s, preopen_connections)
        finally:
            if reporter_task is not None:
                reporter_task.cancel()
                try:
                    await reporter_task
                except asyncio.CancelledError:
                    pass
            await probe.stop()
        if on_progress is not None:
            await _emit(on_progress, BenchProgress(run_id=run_id, **live.snapshot(probe.recent_ms())))
        try:
            async with session.get(f"{base_url}/server_info", timeout=CONTROL_TIMEOUT) as response:
                if response.status == 200:
                    result.server_info = await response.json(content_type=None)
        except (*HTTP_ERRORS, ValueError):
            pass
    result.finished_at = time.time()
    return result


async def _run_phases(
    spec: BenchmarkSpec, base_url: str, url: str, session: aiohttp.ClientSession, result: BenchResult,
    live: LiveStats, probe: LoopLagProbe, slots: int, timeout: float, stall: float, stop: asyncio.Event,
    vocab_size: int | None, tokenizer: str | None, warmup_pause_s: float, preopen: bool,
) -> None:
    # -- workload ------------------------------------------------------------------------------
    try:
        if vocab_size is None:
            vocab_size, vocab_source = await resolve_vocab_size(session, base_url, tokenizer)
        else:
            vocab_source = "given"
        workload = build_workload(spec, vocab_size)
    except WorkloadError as exc:
        result.error = str(exc)
        result.errors_by_kind = {"setup": 1}
        return
    except HTTP_ERRORS as exc:
        result.error = f"server unreachable at {base_url}: {type(exc).__name__}: {exc}"
        result.errors_by_kind = {"connect": 1}
        return
    result.selfcheck.update(vocab_size=vocab_size, vocab_source=vocab_source, request_timeout_s=timeout,
                            stall_timeout_s=stall)

    # The concurrency cap, as bench_serving's asyncio.Semaphore (FIFO: waiters are woken in order).
    cap = asyncio.Semaphore(slots)
    model = None
    if spec.api == "completions":
        try:
            async with session.get(f"{base_url}/v1/models", timeout=CONTROL_TIMEOUT) as response:
                model = ((await response.json(content_type=None)).get("data") or [{}])[0].get("id")
        except (*HTTP_ERRORS, ValueError, AttributeError, IndexError):
            model = None

    consecutive_connect = 0
    aborted = False
    in_flight_peak = 0

    async def one(item: WorkItem, outcome: RequestOutcome) -> RequestOutcome:
        nonlocal consecutive_connect, aborted, in_flight_peak
        await cap.acquire()
        try:
            if aborted or stop.is_set():
                outcome.fail("aborted" if aborted else "cancelled",
                             "not sent: " + ("server unreachable" if aborted else "run stopped"))
                return outcome
            payload = build_payload(spec.api, item.input_ids(), item.output_len, temperature=spec.temperature,
                                    ignore_eos=spec.ignore_eos, model=model)
            live.in_flight += 1
            in_flight_peak = max(in_flight_peak, live.in_flight)
            await stream_request(session, url, spec.api, payload, outcome, timeout_s=timeout,
                                 stall_timeout_s=stall, on_tokens=live.on_tokens)
            live.on_done(outcome.ok, outcome.ttft, outcome.chunks)
        finally:
            cap.release()
        if outcome.error_kind == "connect":
            consecutive_connect += 1
            if consecutive_connect >= ABORT_AFTER_CONNECT_ERRORS:
                aborted = True
        elif outcome.ok:
            consecutive_connect = 0
        return outcome

    # -- warmup --------------------------------------------------------------------------------
    if spec.warmup_requests > 0:
        w = workload.warmup_item()
        warm = [RequestOutcome(w.idx, w.prompt_len, w.output_len, phase="warmup")
                for _ in range(spec.warmup_requests)]
        await asyncio.gather(*(one(w, o) for o in warm))
        if not any(o.ok for o in warm):
            first = warm[0]
            kind = first.error_kind or "warmup"
            result.errors_by_kind = {kind: len(warm)}
            result.error = f"warmup failed ({len(warm)} of {len(warm)} requests): {first.error}"
            if kind == "connect":
                result.error = f"server unreachable at {base_url}: {first.error}"
            return
        consecutive_connect = 0
    if spec.flush_cache:
        try:
            async with session.post(f"{base_url}/flush_cache", params={"timeout": str(FLUSH_CACHE_TIMEOUT_S)},
                                    timeout=aiohttp.ClientTimeout(total=FLUSH_CACHE_TIMEOUT_S + 10)) as response:
                if response.status != 200:
                    text = (await response.read()).decode("utf-8", "replace")
                    result.error = f"POST /flush_cache answered HTTP {response.status}: {text[:200]}"
                    result.errors_by_kind = {"flush_cache": 1}
                    return
        except HTTP_ERRORS as exc:
            result.error = f"POST /flush_cache failed: {type(exc).__name__}: {exc}"
            result.errors_by_kind = {"flush_cache": 1}
            return
    if warmup_pause_s > 0:
        await asyncio.sleep(warmup_pause_s)
    if preopen and not stop.is_set():
        result.selfcheck.update(await open_connections(session, base_url, min(slots, spec.num_prompts)))
    connector = session.connector
    opened_before = getattr(connector, "opened", None)

    # -- timed phase ---------------------------------------------------------------------------
    live.reset(spec.num_prompts, "timed")
    lag_mark = probe.mark()
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    outcomes = [RequestOutcome(it.idx, it.prompt_len, it.output_len) for it in workload.items]
    tasks: list[asyncio.Task] = []
    wall_anchor, perf_anchor = time.time(), time.perf_counter()
    t0 = perf_anchor
    finite_rate = not math.isinf(spec.request_rate)
    stopped = False
    for item, outcome, arrival in zip(workload.items, outcomes, workload.arrivals):
        due = t0 + arrival
        if finite_rate:
            delay = due - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except TimeoutError:
                    pass
        if stop.is_set() or aborted:
            stopped = stopped or stop.is_set()
            break
        outcome.scheduled_at = due
        outcome.dispatched_at = time.perf_counter()
        tasks.append(asyncio.create_task(one(item, outcome)))
    try:
        if finite_rate and not (stop.is_set() or aborted):
            # bench_serving's arrival generator sleeps the gap after the last request too
            delay = t0 + workload.tail_s - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except TimeoutError:
                    pass
        if tasks:
            pending = set(tasks)
            stop_wait = asyncio.create_task(stop.wait())
            while pending:
                done, pending = await asyncio.wait(pending | {stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if stop_wait in done:
                    stopped = True
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    break
                pending.discard(stop_wait)
            stop_wait.cancel()
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise
    t_end = time.perf_counter()
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    if opened_before is not None:
        result.selfcheck["connections_opened_timed"] = getattr(connector, "opened") - opened_before
    duration = t_end - t0

    for outcome, task in zip(outcomes, tasks):
        if task.cancelled():
            outcome.fail("cancelled", "run stopped before this request finished")
    for outcome in outcomes[len(tasks):]:
        outcome.fail("aborted" if aborted else "cancelled",
                     "not sent: " + ("server unreachable" if aborted else "run stopped"))

    records = [_record(o, wall_anchor, perf_anchor) for o in outcomes]
    result.requests = records
    result.summary = calculate_metrics(records, duration)
    kinds = Counter(o.error_kind for o in outcomes if not o.ok)
    result.errors_by_kind = dict(sorted(kinds.items()))
    completed = result.summary["completed"]

    # -- self-check ----------------------------------------------------------------------------
    cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    check: dict[str, Any] = dict(result.selfcheck)
    check.update(probe.summary(lag_mark))
    check.update(
        client_cpu_s=cpu_s, client_cpu_fraction=cpu_s / duration if duration > 0 else None,
        max_concurrency=spec.max_concurrency, peak_in_flight=in_flight_peak,
        achieved_concurrency=result.summary["concurrency"],
        requested_rate=None if not finite_rate else spec.request_rate,
    )
    dispatched = [o for o in outcomes if o.dispatched_at is not None]
    if finite_rate and dispatched:
        lags = sorted((o.dispatched_at - o.scheduled_at) * 1000 for o in dispatched)
        check["dispatch_lag_p99_ms"] = lags[min(len(lags) - 1, int(0.99 * len(lags)))]
        check["dispatch_lag_max_ms"] = lags[-1]
        span = dispatched[-1].dispatched_at - dispatched[0].dispatched_at
        check["achieved_rate"] = (len(dispatched) - 1) / span if span > 0 and len(dispatched) > 1 else None
    queued = [r["queued_s"] for r in records if r["queued_s"] is not None]
    check["client_queue_wait_mean_ms"] = sum(queued) / len(queued) * 1000 if queued else None
    check["client_bound_reasons"] = selfcheck_flags(check)
    check["client_bound"] = bool(check["client_bound_reasons"])
    result.selfcheck = check
    if check["client_bound"]:
        result.flags.append("client-bound")

    # -- status --------------------------------------------------------------------------------
    failed = len(outcomes) - completed
    if completed == 0:
        result.status = "failed"
        first = next((o for o in outcomes if o.error), None)
        result.error = ("server unreachable: " if kinds.get("connect") or aborted else "no request completed: ") + (
            first.error if first else "")
    elif failed or stopped:
        result.status = "incomplete"
        parts = ", ".join(f"{n} {k}" for k, n in result.errors_by_kind.items())
        result.error = f"{failed} of {len(outcomes)} requests failed ({parts})"
        if aborted:
            result.error += "; server stopped answering, the rest were not sent"
        if stopped:
            result.error += "; run stopped early"
    else:
        result.status = "complete"
    if result.status != "complete":
        result.flags.append(result.status)
