"""The emulator's performance model and its batch scheduler, both pure (no I/O, no wall clock).

- `BackendPerf`: one MoE runner backend's cost model, read from `backends.toml` (data, not code):
  decode step time as a function of batch size (log-log interpolation between measured-looking
  points, log-log extrapolation beyond them) plus a prefill cost per prompt token.
- `BatchScheduler`: SGLang-style continuous batching in *step* units: a FIFO wait queue, a cap on
  running requests, chunked prefill (a per-step prompt-token budget), one token per running
  request per decode step; a request's first token comes out of its prefill step.
- `predict_steady_state`: runs that same scheduler in virtual time against a closed-loop client
  (bench_serving's `--max-concurrency C` over `num_prompts` fixed-length prompts) and returns
  the output throughput and mean TPOT the emulator should show. Assumptions: no noise, drift,
  JIT stalls or HTTP overhead; a client re-submits one step after its previous request finished
  (the server plans the next step before the new request arrives); durations in modelled
  seconds divided by `time_scale`.

The server (`moe_tui.sim.server`) drives `BatchScheduler` against the wall clock.
"""

from __future__ import annotations

import heapq
import math
import tomllib
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

BACKENDS_FILE = Path(__file__).with_name("backends.toml")
DEFAULT_ROW = "default"


@dataclass(frozen=True)
class BackendPerf:
    """Cost model of one backend: decode step ms vs batch size, prefill ms per prompt token."""

    name: str
    points: tuple[tuple[float, float], ...]  # (batch_size, decode_step_ms), batch ascending
    prefill_ms_per_token: float
    prefill_overhead_ms: float = 0.0
    description: str = ""
    workspace_gib: float = 1.0  # the MoE runner's own GPU workspace: it shrinks the KV pool (sim/memory.py)

    def decode_ms(self, batch: int) -> float:
        """Decode step time for `batch` running requests (log-log interpolation)."""
        if batch <= 0:
            return 0.0
        pts = self.points
        if len(pts) == 1:
            return pts[0][1]
        xs = [p[0] for p in pts]
        i = bisect_left(xs, batch)
        if i < len(xs) and xs[i] == batch:
            return pts[i][1]
        # Pick the segment to interpolate in, or the end segment to extrapolate along.
        i = min(max(i, 1), len(pts) - 1)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        slope = (math.log(y1) - math.log(y0)) / (math.log(x1) - math.log(x0))
        return math.exp(math.log(y0) + slope * (math.log(batch) - math.log(x0)))

    def step_ms(self, decode_batch: int, prefill_tokens: int) -> float:
        """One engine step: decode of `decode_batch` requests plus `prefill_tokens` of prefill."""
        ms = self.decode_ms(decode_batch)
        if prefill_tokens > 0:
            ms += self.prefill_overhead_ms + self.prefill_ms_per_token * prefill_tokens
        return ms


def load_backends(path: str | Path | None = None) -> dict[str, BackendPerf]:
    """Read the backend table; raises ValueError naming the file and row on bad data."""
    path = Path(path) if path is not None else BACKENDS_FILE
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    rows = data.get("backends")
    if not isinstance(rows, dict) or DEFAULT_ROW not in rows:
        raise ValueError(f"{path}: needs a [backends.{DEFAULT_ROW}] table")
    out: dict[str, BackendPerf] = {}
    for name, row in rows.items():
        where = f"{path}: [backends.{name}]"
        try:
            points = tuple(sorted((float(b), float(ms)) for b, ms in row["points"]))
            prefill = float(row["prefill_ms_per_token"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: needs points = [[batch, ms], ...] and "
                             f"prefill_ms_per_token ({exc})") from None
        if not points or any(b <= 0 or ms <= 0 for b, ms in points) or prefill < 0:
            raise ValueError(f"{where}: batch sizes and step ms must be > 0, prefill >= 0")
        workspace = row.get("moe_workspace_gib", 1.0)
        if isinstance(workspace, bool) or not isinstance(workspace, (int, float)) or not 0 <= workspace < 64:
            raise ValueError(f"{where}: moe_workspace_gib must be a number of GiB in [0, 64)")
        out[name] = BackendPerf(name, points, prefill, float(row.get("prefill_overhead_ms", 0.0)),
                                str(row.get("description", "")), float(workspace))
    return out


def perf_for(backend: str, backends: dict[str, BackendPerf] | None = None) -> BackendPerf:
    """The cost model of `backend`; backends without a row use the `default` row."""
    backends = backends if backends is not None else load_backends()
    return backends.get(backend) or backends[DEFAULT_ROW]


@dataclass(eq=False)
class SeqState:
    """One request inside the scheduler, in step units."""

    rid: str
    prompt_len: int
    max_new_tokens: int
    prefill_left: int = 0
    first_token_step: int = -1  # step whose end produced the first token
    finish_step: int = -1
    aborted: bool = False
    cached_tokens: int = 0  # leading prompt tokens found in the prefix cache (not prefilled)
    payload: object = None  # the server's per-request state

    def __post_init__(self) -> None:
        self.prefill_left = self.prompt_len

    def tokens_at(self, step: int) -> int:
        """Tokens generated by the end of `step`."""
        if self.first_token_step < 0 or step < self.first_token_step:
            return 0
        return min(step - self.first_token_step + 1, self.max_new_tokens)


@dataclass
class StepPlan:
    """What one step does: who decodes, how much prefill, who got a first token, who finished."""

    index: int
    decode_batch: int
    prefill_tokens: int
    first_token: list[SeqState] = field(default_factory=list)
    finished: list[SeqState] = field(default_factory=list)


class BatchScheduler:
    """Continuous batching in step units (see the module docstring)."""

    def __init__(self, max_running: int, chunked_prefill_size: int) -> None:
        self.max_running = max_running
        # SGLang: a chunked prefill size <= 0 disables chunking.
        self.prefill_budget = chunked_prefill_size if chunked_prefill_size > 0 else math.inf
        self.waiting: deque[SeqState] = deque()
        self.prefilling: deque[SeqState] = deque()
        self.decoding: dict[int, SeqState] = {}
        self._finish_heap: list[tuple[int, int, SeqState]] = []
        self.step_index = 0

    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.decoding)

    def add(self, seq: SeqState) -> None:
        self.waiting.append(seq)

    def abort(self, seq: SeqState) -> None:
        """Drop a request wherever it is (client went away, fault injection)."""
        if seq.aborted:
            return
        seq.aborted = True
        for queue in (self.waiting, self.prefilling):
            try:
                queue.remove(seq)
                return
            except ValueError:
                pass
        self.decoding.pop(id(seq), None)  # its heap entry is skipped lazily

    def plan(self) -> StepPlan:
        """Advance one step and return what it did."""
        k = self.step_index
        self.step_index += 1
        while self.waiting and self.num_running < self.max_running:
            self.prefilling.append(self.waiting.popleft())
        plan = StepPlan(k, len(self.decoding), 0)
        budget = self.prefill_budget
        while self.prefilling and budget > 0:
            seq = self.prefilling[0]
            take = int(min(budget, seq.prefill_left))  # budget may be math.inf (no chunking)
            seq.prefill_left -= take
            budget -= take
            plan.prefill_tokens += take
            if seq.prefill_left > 0:
                break
            self.prefilling.popleft()
            seq.first_token_step = k
            seq.finish_step = k + max(seq.max_new_tokens, 1) - 1
            plan.first_token.append(seq)
            if seq.finish_step == k:
                plan.finished.append(seq)
            else:
                self.decoding[id(seq)] = seq
                heapq.heappush(self._finish_heap, (seq.finish_step, id(seq), seq))
        heap = self._finish_heap
        while heap and heap[0][0] <= k:
            _, key, seq = heapq.heappop(heap)
            if self.decoding.pop(key, None) is not None:
                plan.finished.append(seq)
        return plan

    def quiet_steps(self) -> int:
        """How many coming steps are pure decode of an unchanged batch (for fast-forwarding)."""
        if self.prefilling or (self.waiting and self.num_running < self.max_running):
            return 0
        heap = self._finish_heap
        while heap and id(heap[0][2]) not in self.decoding:
            heapq.heappop(heap)
        if not heap:
            return 0
        return max(heap[0][0] - self.step_index, 0)

    def skip(self, steps: int) -> None:
        self.step_index += steps


@dataclass(frozen=True)
class SteadyStatePrediction:
    """What bench_serving should report against the emulator (no noise, drift or stalls)."""

    backend: str
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    duration_s: float
    output_throughput: float  # output tok/s
    mean_tpot_ms: float
    mean_ttft_ms: float
    mean_e2e_ms: float


def mean_or_zero(xs: list[float]) -> float:
    """The mean of `xs`, 0.0 for none."""
    return (sum(xs) / len(xs)) if xs else 0.0


def default_num_prompts(concurrency: int) -> int:
    """The calibration workload's prompt count: four full waves, at least 10 prompts."""
    return max(4 * concurrency, 10)


def predict_steady_state(
    backend: str,
    concurrency: int,
    input_len: int,
    output_len: int,
    time_scale: float = 1.0,
    num_prompts: int | None = None,
    max_running_requests: int = 1024,
    chunked_prefill_size: int = 8192,
    backends: dict[str, BackendPerf] | None = None,
) -> SteadyStatePrediction:
    """Simulate a closed-loop benchmark in virtual time (see the module docstring)."""
    if concurrency < 1 or input_len < 1 or output_len < 1 or time_scale <= 0:
        raise ValueError("concurrency, input_len, output_len must be >= 1 and time_scale > 0")
    perf = perf_for(backend, backends)
    n = num_prompts if num_prompts is not None else default_num_prompts(concurrency)
    sched = BatchScheduler(max_running_requests, chunked_prefill_size)
    submitted = 0
    submit_time: dict[int, float] = {}
    ttft: list[float] = []
    e2e: list[float] = []
    tpot: list[float] = []
    now = 0.0
    first_at: dict[int, float] = {}

    def submit(at: float) -> None:
        nonlocal submitted
        seq = SeqState(str(submitted), input_len, output_len)
        submitted += 1
        submit_time[id(seq)] = at
        sched.add(seq)

    for _ in range(min(concurrency, n)):
        submit(0.0)
    arrivals: list[float] = []
    while sched.has_work() or arrivals:
        quiet = sched.quiet_steps()
        if quiet > 0 and not arrivals:
            now += quiet * perf.decode_ms(len(sched.decoding)) / 1000.0
            sched.skip(quiet)
            continue
        plan = sched.plan()
        now += perf.step_ms(plan.decode_batch, plan.prefill_tokens) / 1000.0
        # Requests whose predecessors finished last step arrive while this step runs.
        for at in arrivals:
            submit(at)
        arrivals = []
        for seq in plan.first_token:
            first_at[id(seq)] = now
        for seq in plan.finished:
            start = submit_time.pop(id(seq))
            first = first_at.pop(id(seq))
            ttft.append(first - start)
            e2e.append(now - start)
            if seq.max_new_tokens > 1:
                tpot.append((now - first) / (seq.max_new_tokens - 1))
            if submitted + len(arrivals) < n:
                arrivals.append(now)
    duration = now / time_scale
    return SteadyStatePrediction(
        backend=backend, concurrency=concurrency, num_prompts=n, input_len=input_len,
        output_len=output_len, duration_s=duration,
        output_throughput=(n * output_len / duration) if duration > 0 else 0.0,
        mean_tpot_ms=mean_or_zero(tpot) * 1000.0 / time_scale,
        mean_ttft_ms=mean_or_zero(ttft) * 1000.0 / time_scale,
        mean_e2e_ms=mean_or_zero(e2e) * 1000.0 / time_scale,
    )
