"""Judging a run's telemetry: foreign GPU processes, `summarize_run` (pure: snapshots in, a
JSON-serialisable dict out) and `suspect_reasons` (the words the comparison grid shows)."""

from __future__ import annotations

import collections
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from moe_tui.records import ForeignProcessJson, GpuRunSummaryJson, TelemetrySummaryJson
from moe_tui.telemetry.data import (
    BUSY_UTIL_PCT,
    CLOCK_DROP_SUSPECT_PCT,
    SUSPECT_CLOCK_EVENTS,
    ForeignProcess,
    GpuSample,
    TelemetrySnapshot,
)

# --------------------------------------------------------------------------------------------
# Foreign processes
# --------------------------------------------------------------------------------------------


def expand_descendants(pids: Iterable[int]) -> set[int]:
    """The given PIDs plus every live descendant (SGLang's TP workers are the launcher's children,
    and they are the processes NVML lists), by judgement.server_family. Take it while the servers
    run."""
    from moe_tui.telemetry.ownership import descendants_of

    return descendants_of(pids)


def foreign_processes(
    snapshot: TelemetrySnapshot, our_pids: Iterable[int], *, include_descendants: bool = True
) -> list[ForeignProcess]:
    """GPU compute processes in `snapshot` that are not in `our_pids` (nor, by default, their
    live descendants). A PID we cannot see at all is reported too, with `name=None`: we cannot
    prove it is ours."""
    ours = expand_descendants(our_pids) if include_descendants else {int(p) for p in our_pids}
    return _foreign_in(snapshot, ours)


def _foreign_in(snapshot: TelemetrySnapshot, ours: set[int]) -> list[ForeignProcess]:
    found = []
    for gpu in snapshot.gpus:
        for proc in gpu.processes or ():
            if proc.pid not in ours:
                found.append(ForeignProcess(gpu.index, proc.pid, proc.used_memory_bytes, proc.name))
    return found


# --------------------------------------------------------------------------------------------
# Run summary
# --------------------------------------------------------------------------------------------


def _stats(values: list[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    return round(statistics.fmean(values), 2), min(values), max(values)


def _is_busy(gpu: GpuSample) -> bool:
    if gpu.clock_event_bits is not None and gpu.clock_event_bits & 0x001:
        return False
    return gpu.util_gpu_pct is not None and gpu.util_gpu_pct >= BUSY_UTIL_PCT


def _awake_clocks(samples: Sequence[GpuSample]) -> list[int]:
    """SM clocks of the samples NVML did not report idle (clock event bit 0x1, GpuIdle): a run's ramp and
    tail idle the GPU at its idle clock (345 MHz on an H200), which is no slowdown of the run and, listed as
    the run's minimum clock, read as one (walk 2026-12-05, finding 8). A run seen only idle keeps its idle
    clock (nothing else to say)."""
    clocks = [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None
              and not (g.clock_event_bits is not None and g.clock_event_bits & 0x001)]
    return clocks or [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None]


def _summarize_gpu(samples: list[GpuSample]) -> GpuRunSummaryJson:
    lost = sum(1 for g in samples if g.lost)
    util = [g.util_gpu_pct for g in samples if g.util_gpu_pct is not None]
    util_mem = [g.util_mem_pct for g in samples if g.util_mem_pct is not None]
    power = [g.power_w for g in samples if g.power_w is not None]
    clocks = [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None]
    awake = _awake_clocks(samples)
    busy_clocks = [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None and _is_busy(g)]
    rated = [g.sm_clock_max_mhz for g in samples if g.sm_clock_max_mhz]
    mem_used = [g.mem_used_bytes for g in samples if g.mem_used_bytes is not None]
    temps = [g.temperature_c for g in samples if g.temperature_c is not None]
    # The rated max is the reference; without it, the highest clock seen (a drop within the run).
    max_clock = max(rated) if rated else (max(clocks) if clocks else None)
    min_busy = min(busy_clocks) if busy_clocks else None
    drop = None
    if max_clock and min_busy is not None:
        drop = round(max(0.0, 100.0 * (max_clock - min_busy) / max_clock), 1)
    event_counts: collections.Counter[str] = collections.Counter()
    with_events = 0
    for g in samples:
        if g.clock_event_bits is not None:
            with_events += 1
            event_counts.update(g.clock_events)
    fractions = {k: round(v / with_events, 3) for k, v in sorted(event_counts.items())}
    util_mean, util_min, util_max = _stats(util)
    return {
        "name": next((g.name for g in samples if g.name), None),
        "uuid": next((g.uuid for g in samples if g.uuid), None),
        "samples": len(samples),
        "lost_samples": lost,
        "busy_samples": sum(1 for g in samples if _is_busy(g)),
        "util_gpu_mean": util_mean,
        "util_gpu_min": util_min,
        "util_gpu_max": util_max,
        "util_mem_mean": _stats(util_mem)[0],
        "sm_clock_min_mhz": min(awake) if awake else None,
        "sm_clock_max_seen_mhz": max(clocks) if clocks else None,
        "sm_clock_min_busy_mhz": min_busy,
        "sm_clock_max_mhz": max_clock,
        "sm_clock_drop_pct": drop,
        "clock_events_seen": sorted(event_counts),
        "clock_event_fraction": fractions,
        "suspect_clock_events": sorted(set(event_counts) & SUSPECT_CLOCK_EVENTS),
        "power_mean_w": _stats(power)[0],
        "power_max_w": max(power) if power else None,
        "mem_used_peak_bytes": max(mem_used) if mem_used else None,
        "mem_total_bytes": next((g.mem_total_bytes for g in samples if g.mem_total_bytes), None),
        "temperature_max_c": max(temps) if temps else None,
    }


def summarize_run(
    snapshots: Sequence[TelemetrySnapshot], our_pids: Iterable[int] | None = None
) -> TelemetrySummaryJson:
    """Summarise a run's telemetry into a JSON-serialisable dict (stored with the run).

    `our_pids` are the managed servers' PIDs *with their descendants* (`expand_descendants`, taken
    while the servers ran); None means "not judged" and leaves `foreign_processes` as None. Pure:
    no NVML, no psutil.
    """
    available = [s for s in snapshots if s.available]
    reasons = sorted({s.reason for s in snapshots if not s.available and s.reason})
    summary: TelemetrySummaryJson = {
        "available": bool(available),
        "reason": None if available else (reasons[0] if reasons else "no telemetry samples"),
        "snapshots": len(snapshots),
        "duration_s": round(snapshots[-1].t - snapshots[0].t, 3) if len(snapshots) > 1 else 0.0,
        "driver_version": next((s.driver_version for s in available if s.driver_version), None),
        "cuda_driver_version": next(
            (s.cuda_driver_version for s in available if s.cuda_driver_version), None
        ),
        "gpus": {},
        "overall": {},
        "foreign_processes": None,
        "simulated": any(s.simulated for s in available),
    }
    per_gpu: dict[int, list[GpuSample]] = collections.defaultdict(list)
    for snap in available:
        for gpu in snap.gpus:
            per_gpu[gpu.index].append(gpu)
    gpus = {str(i): _summarize_gpu(per_gpu[i]) for i in sorted(per_gpu)}
    summary["gpus"] = gpus

    all_samples = [g for i in sorted(per_gpu) for g in per_gpu[i]]
    util_mean, util_min, util_max = _stats(
        [g.util_gpu_pct for g in all_samples if g.util_gpu_pct is not None]
    )
    drops = [v["sm_clock_drop_pct"] for v in gpus.values() if v["sm_clock_drop_pct"] is not None]
    clocks = [g.sm_clock_mhz for g in all_samples if g.sm_clock_mhz is not None]
    awake = _awake_clocks(all_samples)
    peaks = [v["mem_used_peak_bytes"] for v in gpus.values() if v["mem_used_peak_bytes"] is not None]
    powers = [v["power_mean_w"] for v in gpus.values() if v["power_mean_w"] is not None]
    seen = sorted({e for v in gpus.values() for e in v["clock_events_seen"]})
    summary["overall"] = {
        "gpu_count": len(gpus),
        "util_gpu_mean": util_mean,
        "util_gpu_min": util_min,
        "util_gpu_max": util_max,
        "sm_clock_min_mhz": min(awake) if awake else None,
        "sm_clock_max_seen_mhz": max(clocks) if clocks else None,
        "sm_clock_drop_pct": max(drops) if drops else None,  # the worst GPU sets the pace in TP
        "clock_events_seen": seen,
        "suspect_clock_events": sorted(set(seen) & SUSPECT_CLOCK_EVENTS),
        "power_mean_w": round(statistics.fmean(powers), 2) if powers else None,  # per GPU
        "power_total_mean_w": round(sum(powers), 2) if powers else None,
        "mem_used_peak_bytes": max(peaks) if peaks else None,  # the fullest GPU
        "gpus_lost": sorted(int(i) for i, v in gpus.items() if v["lost_samples"]),
    }

    if our_pids is not None:
        ours = {int(p) for p in our_pids}
        seen_foreign: dict[tuple[int, int], ForeignProcessJson] = {}
        for snap in available:
            for fp in _foreign_in(snap, ours):
                entry = seen_foreign.setdefault(
                    (fp.gpu_index, fp.pid),
                    {"gpu": fp.gpu_index, "pid": fp.pid, "name": fp.name, "samples": 0,
                     "max_used_memory_bytes": None},
                )
                entry["samples"] += 1
                entry["name"] = entry["name"] or fp.name
                if fp.used_memory_bytes is not None:
                    prev = entry["max_used_memory_bytes"] or 0
                    entry["max_used_memory_bytes"] = max(prev, fp.used_memory_bytes)
        summary["foreign_processes"] = [seen_foreign[k] for k in sorted(seen_foreign)]
    return summary


def suspect_reasons(summary: Mapping[str, Any]) -> list[str]:
    """Human-readable reasons to distrust a run, from `summarize_run`'s dict; [] when none.

    Missing telemetry is not a suspect reason (the emulator has no GPU); the grid says that
    separately from `summary["available"]`.
    """
    reasons: list[str] = []
    for index, gpu in (summary.get("gpus") or {}).items():
        if gpu.get("lost_samples"):
            reasons.append(f"GPU {index} was lost (NVML: GPU is lost) in {gpu['lost_samples']} sample(s)")
        fractions = gpu.get("clock_event_fraction") or {}
        for event in gpu.get("suspect_clock_events") or ():
            share = fractions.get(event)
            when = f" in {share * 100:.0f}% of samples" if share is not None else ""
            reasons.append(f"GPU {index} throttled: {event}{when}")
        drop = gpu.get("sm_clock_drop_pct")
        if drop is not None and drop >= CLOCK_DROP_SUSPECT_PCT:
            reasons.append(
                f"GPU {index} SM clock dropped {drop:.0f}% under load "
                f"({gpu.get('sm_clock_min_busy_mhz')} of {gpu.get('sm_clock_max_mhz')} MHz)"
            )
    for proc in summary.get("foreign_processes") or ():
        who = proc.get("name") or "not visible here"
        mem = proc.get("max_used_memory_bytes")
        size = f", {mem / 2**30:.1f} GiB" if mem is not None else ""
        reasons.append(f"foreign GPU process on GPU {proc['gpu']}: pid {proc['pid']} ({who}{size})")
    return reasons
