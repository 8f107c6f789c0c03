"""Evidence checks behind a cell, per run: which server start measured it, what it generated, how many
requests a percentile rests on, which backend the servers reported, and when the runs were made.

- `start_key`: the server start a run came from. A start, not a run, is the unit of evidence (runs
  on one start share its speed offset). moe-tui's own runs carry the store's start id; an import
  gets one from `moe-tui import --server-start NAME` (or the record's own `server_start`), else from its
  `server_info` (pid, with a start time where the record holds one); an import with neither is `None`
  (the cell says unverified); a run of our own from before starts were
  recorded counts as its own start (the old, per-run model).
- `start_means`: a side's values averaged within each start, in start order: the samples.
- `output_tokens_problem`: output tokens per request differ between the sides beyond 1%.
- `percentile_problem`: a percentile metric from too few requests a run (`PERCENTILE_MIN_REQUESTS`).
- `same_backend`: both sides' servers report one MoE backend (the compared setting did not change).
- `overlap_problem`: the sides' runs do not overlap in time (grouped order, or days apart).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from moe_tui import judgement as J
from moe_tui.compare.memo import derived
from moe_tui.compare.runs import PROVENANCE_FIELDS, Run, dig

# Keys of an imported `server_info` that name the start: the process id, and a start time if any.
PID_KEYS = ("pid", "server_pid", "process_id")
START_TIME_KEYS = ("start_time", "server_start_time", "launch_time", "started_at", "startup_time")


def is_import(run: Run) -> bool:
    return "source_file" in run.provenance or "content_sha256" in run.provenance


def start_key(run: Run) -> tuple[Any, ...] | None:
    """The run's server start identity; None for an import that records none."""
    if run.server_start_id is not None:  # the store's own record of the start (not the provenance copy)
        return ("start", run.server_start_id)
    named = run.provenance.get("server_start")  # `moe-tui import --server-start NAME`, or a record's own
    if isinstance(named, str) and named:
        return ("named-start", named)
    if is_import(run):
        info = run.provenance.get("server_info")
        info = info if isinstance(info, Mapping) else {}
        pid = next((info[k] for k in PID_KEYS if info.get(k) not in (None, "")), None)
        if pid is None:
            return None
        when = next((info[k] for k in START_TIME_KEYS if info.get(k) not in (None, "")), None)
        return ("import", str(pid), str(when))
    return ("run", run.id)


def start_means(runs: Sequence[Run], metric: str) -> list[float]:
    """Per start (first-seen order): the mean of its runs' finite values of `metric`."""
    return list(start_mean_map(runs, metric).values())


def start_mean_map(runs: Sequence[Run], metric: str) -> dict[Any, float]:
    """start key -> the mean of that start's runs' finite values of `metric` (first-seen order). Runs
    whose start is unknown (an import without one) are left out: they pair with nothing. Once per build,
    runs object and metric (`compare.memo`: a cell's runs and the control's are asked by every test)."""
    return derived(f"start_means:{metric}", (runs,), lambda: _start_mean_map(runs, metric))


def _start_mean_map(runs: Sequence[Run], metric: str) -> dict[Any, float]:
    groups: dict[Any, list[float]] = {}
    for r in runs:
        v = r.summary.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            groups.setdefault(start_key(r), []).append(float(v))
    return {k: sum(v) / len(v) for k, v in groups.items()}


def tokens_per_request(run: Run) -> float | None:
    total, done = run.summary.get("total_output_tokens"), run.summary.get("completed")
    if isinstance(total, (int, float)) and isinstance(done, (int, float)) and done > 0 and total >= 0:
        return float(total) / float(done)
    return None


def output_tokens_problem(a: Sequence[Run], b: Sequence[Run], names: tuple[str, str]) -> str | None:
    """Words when the sides' output tokens per request differ beyond the tolerance (every run counts);
    once per build and cell (every metric asks)."""
    return derived("output_tokens", (a, b, names), lambda: _output_tokens_problem(a, b, names))


def _output_tokens_problem(a: Sequence[Run], b: Sequence[Run], names: tuple[str, str]) -> str | None:
    ta = [t for t in (tokens_per_request(r) for r in a) if t is not None]
    tb = [t for t in (tokens_per_request(r) for r in b) if t is not None]
    if not ta or not tb:
        return None
    ma, mb = sum(ta) / len(ta), sum(tb) / len(tb)
    if ma <= 0:
        return None
    pct = (mb - ma) / ma * 100.0
    if abs(pct) <= J.OUTPUT_TOKENS_TOLERANCE_PCT:
        return None
    return (f"output tokens per request differ: {names[0]} {ma:.1f} vs {names[1]} {mb:.1f} ({pct:+.1f}%, "
            f"beyond {J.OUTPUT_TOKENS_TOLERANCE_PCT:g}%): the sides did not do the same work, so neither speed nor "
            "latency compares")


def percentile_problem(metric: str, runs: Sequence[Run], name: str) -> str | None:
    """Words when a percentile metric rests on too few requests in some run."""
    need = next((n for p, n in J.PERCENTILE_MIN_REQUESTS.items() if metric.startswith(p + "_")), None)
    if need is None:
        return None
    short = [(r.id, r.summary.get("completed")) for r in runs
             if isinstance(r.summary.get("completed"), (int, float)) and r.summary["completed"] < need]
    if not short:
        return None
    listed = ", ".join(f"run {i}: {c:g}" for i, c in short[:4])
    return (f"{name}: {metric.split('_')[0]} from too few requests ({listed}); the rule is at least {need} "
            "completed requests a run")


def same_backend(a: Sequence[Run], b: Sequence[Run], vary: frozenset[str]) -> str | None:
    """Words when both sides' servers report one MoE backend (once per build and cell: every metric asks)."""
    return derived("same_backend", (a, b, vary), lambda: _same_backend(a, b, vary))


def _same_backend(a: Sequence[Run], b: Sequence[Run], vary: frozenset[str]) -> str | None:
    """Words when the compared setting is the MoE backend and both sides' servers report the same one."""
    if "moe_runner_backend" not in vary:
        return None
    ba = {_resolved_backend(r) for r in a} - {None}
    bb = {_resolved_backend(r) for r in b} - {None}
    if len(ba) == 1 and ba == bb:
        return (f"the compared setting did not change: both sides' servers report moe_runner_backend "
                f"{next(iter(ba))}")
    return None


_BACKEND_PATHS = dict(PROVENANCE_FIELDS)["resolved_backend"]


def import_gaps(run: Run, vary: frozenset[str]) -> list[str]:
    """What an imported record does not show that a verdict rests on: the resolved MoE backend (when it is
    the compared setting) and any launch setting beyond the start's identity and the compared setting. Missing evidence is never
    agreement: such a run's cells say unverified. Runs moe-tui measured itself: []."""
    if not is_import(run):
        return []
    gaps = []
    if "moe_runner_backend" in vary and resolved_backend(run) is None:
        gaps.append("the MoE backend the server resolved")
    info = run.provenance.get("server_info")
    identity = set(PID_KEYS) | set(START_TIME_KEYS) | {"version", "status"}
    settings = {k for k in info if k not in identity and not J.varied(k, vary)} if isinstance(info, Mapping) else set()
    if not run.profile and not settings:
        gaps.append("the launch settings (no /server_info beyond the start's identity, no profile)")
    return gaps


def output_length_unknown(runs: Sequence[Run]) -> list[int]:
    """Ids of imported runs that do not say how many tokens they generated (no total_output_tokens or
    completed): an early stop cannot be ruled out, so their throughput is not evidence of speed. moe-tui's
    own runs always record both (its client counts them)."""
    return [r.id for r in runs if is_import(r) and tokens_per_request(r) is None]


def resolved_backend(run: Run) -> str | None:
    return _resolved_backend(run)


def _resolved_backend(run: Run) -> str | None:
    value = next((v for v in (dig(run.provenance, p) for p in _BACKEND_PATHS) if v), None)
    return str(value) if value else None


def overlap_problem(a: Sequence[Run], b: Sequence[Run]) -> str | None:
    """Words when one side's timed runs all precede the other's (drift and the setting cannot be told
    apart). Runs whose measurement time is unknown are left out of the judgement, never a reason to skip
    it (`time_unknown` says so); a side with no timed run cannot be judged: None."""
    ta = [r.measured_at for r in a if r.measured_at is not None]
    tb = [r.measured_at for r in b if r.measured_at is not None]
    if not ta or not tb or len(ta) + len(tb) < 3:
        return None
    if max(ta) < min(tb) or max(tb) < min(ta):
        first, later = ("baseline", "candidate") if max(ta) < min(tb) else ("candidate", "baseline")
        gap = max(min(tb) - max(ta), min(ta) - max(tb))
        return (f"the sides' runs do not overlap in time: every {first} run ended before the first {later} run "
                f"({_stamp(max(ta) if first == 'baseline' else max(tb))} vs "
                f"{_stamp(min(tb) if first == 'baseline' else min(ta))}, {_span(gap)} apart); drift and the "
                "compared setting cannot be told apart (interleave the profiles)")
    return None


def time_unknown(a: Sequence[Run], b: Sequence[Run], names: tuple[str, str]) -> str | None:
    """Words when some runs carry no measurement time (imports without times): said, not skipped."""
    parts = []
    for runs, name in ((a, names[0]), (b, names[1])):
        untimed = [r.id for r in runs if r.measured_at is None]
        if untimed:
            parts.append(f"{name} {len(untimed)} of {len(runs)}")
    if not parts:
        return None
    none_timed = all(r.measured_at is None for r in (*a, *b))
    return (f"time unknown: run(s) without a measurement time ({'; '.join(parts)}); "
            + ("none has a time, so drift between the sides cannot be checked" if none_timed
               else "the sides' order in time is judged on the timed runs only"))


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _span(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"
