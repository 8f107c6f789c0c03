"""Read one torch-profiler Chrome trace (one TP rank) into GPU time per step by kernel class.

Input: the JSON (or gzipped JSON) `torch.profiler.profile(...).export_chrome_trace()` writes and
SGLang's `/start_profile` leaves as `<profile_id>-TP-<rank>[-<stage>].trace.json.gz`. Used from it:
GPU events (`cat` kernel, gpu_memcpy, gpu_memset: name, ts and dur in microseconds, pid = device)
and CUDA-graph launches (`cat` cuda_runtime, name cudaGraphLaunch*, with `args.correlation`, which
the kernels a graph replay ran carry too).

Steps: a decode step of SGLang's CUDA-graph runner is one graph replay, so each graph launch that
ran kernels starts a step on the GPU timeline (at its first kernel); a step runs to the next
step's start (the last one to the last kernel), so the eager work after a replay (sampling) counts
with its step. A decode batch above the captured size runs eagerly (no graph launch), and 0.5.23
runs a prefill as breakable CUDA graphs (one launch per segment, several a step): so a trace
without graph launches, and an EXTEND or MIXED trace whenever the caller gives the step count (the
ProfileReq's `num_steps`), is split into that many equal windows of its GPU time instead; then
there is no per-step spread.

Per step: the summed duration of each class's kernels (`moe_tui.explain.rules`), and "idle": the
part of the step when no kernel ran (launch overhead, host gaps). Kernels that overlap on several
streams are each counted in full; `overlap_ms` says how much that adds.

Why not Holistic Trace Analysis: it pulls pandas, plotly and a trace-directory layout of its own,
classifies kernels only as compute/communication/memory (the MoE classes would still need this
table), and needs `distributedInfo` that SGLang's traces do not always carry; what is needed here
(interval union and a grouping by class) is a few lines on the events.

Pure: bytes in, records out; trace text is untrusted (validated; names kept as data).
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_tui.explain.rules import CLASSES, IDLE, classify
from moe_tui.records import FreeForm
from moe_tui.trust import open_regular

# torch.profiler's Chrome-trace JSON as SGLang's /start_profile wrote it: a foreign payload, read into
# TraceEvent records here and nowhere else.
ChromeTrace = FreeForm

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
GRAPH_LAUNCH = re.compile(r"^cudaGraphLaunch")
SEGMENTED_STAGES = frozenset({"EXTEND", "MIXED"})  # prefill: breakable CUDA graphs, several launches a step
MAX_TRACE_BYTES = 512 * 1024 * 1024  # decompressed; a bounded profile is far smaller
TRACE_NAME = re.compile(r"^(?:(?P<prefix>.+)-)??(?P<profile_id>[^/]+?)-TP-(?P<tp>\d+)"
                        r"(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
                        r"(?:-(?P<stage>EXTEND|DECODE|IDLE|MIXED|TARGET_VERIFY|DRAFT_EXTEND))?"
                        r"\.trace\.json(?:\.gz)?$")


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class TraceFileName:
    profile_id: str
    tp_rank: int
    stage: str | None  # EXTEND / DECODE with profile_by_stage, else None
    dp_rank: int | None = None
    ep_rank: int | None = None


def parse_trace_name(name: str) -> TraceFileName | None:
    """The parts of an SGLang trace file name (profiler_manager's naming), None if it is not one."""
    m = TRACE_NAME.match(Path(name).name)
    if m is None:
        return None
    dp, ep = m.group("dp"), m.group("ep")
    return TraceFileName(m.group("profile_id"), int(m.group("tp")), m.group("stage"),
                         int(dp) if dp else None, int(ep) if ep else None)


@dataclass(frozen=True)
class KernelTotal:
    name: str
    kernel_class: str
    total_ms: float  # over the counted steps
    count: int


@dataclass(frozen=True)
class RankProfile:
    """One rank's trace: per-step class times (ms) and its kernels."""

    source: str
    rank: int
    stage: str | None
    steps: tuple[Mapping[str, float], ...]  # one dict per step: class -> ms (IDLE included)
    kernels: tuple[KernelTotal, ...]  # by total time, descending
    step_source: str  # "graph launches" or "given"
    overlap_ms: float = 0.0
    skipped_events: int = 0  # malformed GPU events left out

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def class_ms(self) -> dict[str, float]:
        """Mean ms per step of each class."""
        return {c: statistics.fmean(s.get(c, 0.0) for s in self.steps) for c in CLASSES}

    def step_ms(self) -> float:
        return statistics.fmean(sum(s.values()) for s in self.steps)


@dataclass
class _Event:
    name: str
    ts: float
    end: float
    correlation: int | None
    dur: float  # as written: `end - ts` loses bits when ts is a Unix time in microseconds (~1.8e15)
    kernel_class: str = field(default="")


def load_trace(path: str | Path, *, max_bytes: int = MAX_TRACE_BYTES) -> ChromeTrace:
    """The trace's JSON object; TraceError naming the file for unreadable, oversized or
    malformed input."""

    p = Path(path)
    try:
        # A named pipe or a device where a trace should be (planted, or a wrong path) is refused at
        # once, not read until someone writes to it or memory runs out.
        with os.fdopen(open_regular(p), "rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
            fh.seek(0)
            source: Any = gzip.GzipFile(fileobj=fh, mode="rb") if gzipped else fh
            raw = source.read(max_bytes + 1)
    except (OSError, EOFError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise TraceError(f"{p}: cannot read the trace: {why}") from None
    if len(raw) > max_bytes:
        raise TraceError(f"{p}: more than {max_bytes} bytes once decompressed; profile fewer steps")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{p}: not JSON: {exc}") from None
    except RecursionError:  # 100,000 nested brackets: no Kineto trace is shaped like that
        raise TraceError(f"{p}: JSON nested too deeply to be a Chrome trace") from None
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{p}: not a Chrome trace (no 'traceEvents' list)")
    return data


# A profiler time is microseconds since some epoch (Unix time: ~1.8e15); a kernel runs well under
# a day. Beyond these a value is not a time (1e308 would make every sum infinite): the event is malformed.
MAX_TS_US = 1e17
MAX_DUR_US = 1e11


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) and abs(f) <= MAX_TS_US else None


def _gpu_events(events: Sequence[Any]) -> tuple[list[_Event], list[tuple[float, int]], int]:
    """GPU events (sorted by start), graph launches (host ts, correlation), malformed count."""
    gpu: list[_Event] = []
    launches: list[tuple[float, int]] = []
    bad = 0
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat, name = ev.get("cat"), ev.get("name")
        args = ev.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        corr = corr if isinstance(corr, int) and not isinstance(corr, bool) else None
        if cat == "cuda_runtime" and isinstance(name, str) and GRAPH_LAUNCH.match(name):
            ts = _number(ev.get("ts"))
            if ts is not None and corr is not None:
                launches.append((ts, corr))
            continue
        if cat not in GPU_CATEGORIES:
            continue
        ts, dur = _number(ev.get("ts")), _number(ev.get("dur"))
        if not isinstance(name, str) or ts is None or dur is None or not 0 <= dur <= MAX_DUR_US:
            bad += 1
            continue
        gpu.append(_Event(name, ts, ts + dur, corr, dur))
    gpu.sort(key=lambda e: (e.ts, e.end))
    launches.sort()
    return gpu, launches, bad


def _union_ms(spans: Sequence[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total / 1000.0


def _step_starts(gpu: Sequence[_Event], launches: Sequence[tuple[float, int]]) -> list[float]:
    first_by_corr: dict[int, float] = {}
    for ev in gpu:
        if ev.correlation is not None and ev.correlation not in first_by_corr:
            first_by_corr[ev.correlation] = ev.ts
    return sorted(first_by_corr[c] for _, c in launches if c in first_by_corr)


def profile_rank(data: Mapping[str, Any], *, source: str = "trace", rank: int = 0, stage: str | None = None,
                 steps: int | None = None) -> RankProfile:
    """One rank's per-step class times. `steps`: the step count when the trace has no graph
    launches (else ignored, the launches tell). TraceError when nothing can be counted."""
    gpu, launches, bad = _gpu_events(data.get("traceEvents") or ())
    if not gpu:
        raise TraceError(f"{source}: no GPU kernel events (was the profile's activities GPU?)")
    for ev in gpu:
        ev.kernel_class = classify(ev.name)
    segmented = stage in SEGMENTED_STAGES and bool(steps)  # graph launches are segments, not steps
    starts = [] if segmented else _step_starts(gpu, launches)
    if starts:
        bounds = starts + [max(e.end for e in gpu)]
        step_source = "graph launches"
    elif steps and steps > 0:
        begin, end = gpu[0].ts, max(e.end for e in gpu)
        bounds = [begin + (end - begin) * i / steps for i in range(steps + 1)]
        step_source = "given"
    else:
        raise TraceError(f"{source}: no CUDA-graph launches to count decode steps by, and no step count "
                         f"given (the profile's num_steps)")
    per_step: list[dict[str, float]] = [dict.fromkeys(CLASSES, 0.0) for _ in range(len(bounds) - 1)]
    spans: list[list[tuple[float, float]]] = [[] for _ in per_step]
    totals: dict[str, list[float]] = {}
    overlap = 0.0
    for ev in gpu:
        if ev.ts < bounds[0]:
            continue  # before the first counted step: a partial step
        i = min(bisect.bisect_right(bounds, ev.ts) - 1, len(per_step) - 1)
        dur_ms = ev.dur / 1000.0
        per_step[i][ev.kernel_class] += dur_ms
        spans[i].append((ev.ts, min(ev.end, bounds[i + 1])))
        t = totals.setdefault(ev.name, [0.0, 0])
        t[0] += dur_ms
        t[1] += 1
    for i, step in enumerate(per_step):
        window = (bounds[i + 1] - bounds[i]) / 1000.0
        busy = _union_ms(spans[i])
        step[IDLE] = max(0.0, window - busy)
        overlap += max(0.0, sum(v for k, v in step.items() if k != IDLE) - busy)
    kernels = tuple(sorted((KernelTotal(n, classify(n), t[0], int(t[1])) for n, t in totals.items()),
                           key=lambda k: -k.total_ms))
    return RankProfile(source, rank, stage, tuple(per_step), kernels, step_source, overlap, bad)


def read_rank(path: str | Path, *, steps: int | None = None, max_bytes: int = MAX_TRACE_BYTES) -> RankProfile:
    """`profile_rank` of one file; rank and stage from its SGLang name (rank 0 when it has none)."""
    p = Path(path)
    parts = parse_trace_name(p.name)
    return profile_rank(load_trace(p, max_bytes=max_bytes), source=p.name,
                        rank=parts.tp_rank if parts else 0, stage=parts.stage if parts else None, steps=steps)
