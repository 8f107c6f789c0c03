"""The comparison grid as the CLI, the exports and the control client ask for it: read from the store.

`compare` is pure (runs in, grid out); this service reads what it needs (both profiles' runs, the
queue's planned repeats per cell) and attaches the extras that need stored data of their own (the
roofline % per concurrency and the correctness gate, `grid_extras`). One function, so every reader
of a grid sees the same grid.

Months of data (issue 26): every read here is an indexed read of the two compared profiles (their
runs, their queue counts, their marked cold runs), so a grid's cost grows with those runs, never
with the store; both profiles' runs are read once (the extras take the same records); and a grid
is built once per change of the store (`Store.generation`), then served from a small cache.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from moe_tui.compare import (
    METRICS,
    CompareSettings,
    ComparisonGrid,
    MetricDef,
    PlanCount,
    build_grid_from_runs,
    plan_counts,
    unknown_profiles,
)
from moe_tui.grids.extras import apply_gate, build_extras
from moe_tui.investigate.model import describe_cell
from moe_tui.investigate.report import report
from moe_tui.investigate.store import diagnostic_run_ids, evidence_from_grid, under_investigation
from moe_tui.store.db import Store

RUN_STATUSES = ("complete", "incomplete", "failed")
CACHED_GRIDS = 8  # per store handle: the pairs a session flips between

_cache_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Store, dict[tuple[Any, ...], ComparisonGrid]] = weakref.WeakKeyDictionary()


def build_grid(store: Store, baseline: str, candidate: str, *, fingerprint: str | None = None,
               metrics: Sequence[MetricDef] = METRICS, settings: CompareSettings | None = None,
               extras: bool = True) -> ComparisonGrid:
    """The grid for two profile names: their runs, the queue's plan, roofline and gate extras.
    Raises CompareError naming an unknown profile (with a did-you-mean). Served from the cache
    while nothing was committed to the store since the same grid was built."""
    generation = store.generation()
    key = (generation, baseline, candidate, fingerprint, tuple(metrics), settings, extras)
    with _cache_lock:
        cached = _cache.get(store, {}).get(key)
    if cached is not None:
        return cached
    grid = _build_grid(store, baseline, candidate, fingerprint=fingerprint, metrics=metrics,
                       settings=settings, extras=extras)
    with _cache_lock:
        grids = _cache.setdefault(store, {})
        for old in [k for k in grids if k[0] != generation]:  # built before the latest change
            del grids[old]
        while len(grids) >= CACHED_GRIDS:
            del grids[next(iter(grids))]
        grids[key] = grid
    return grid


def _build_grid(store: Store, baseline: str, candidate: str, *, fingerprint: str | None,
                metrics: Sequence[MetricDef], settings: CompareSettings | None, extras: bool) -> ComparisonGrid:
    error = unknown_profiles(store.profile_names_with_runs(), (baseline, candidate), str(store.path))
    if error is not None:
        raise error
    # Cold runs of an investigation (no warmup pass, on purpose) are evidence about warmup, not about
    # the backends: they never enter a cell's mean (the investigation's report reads them itself).
    # Profiled runs (`explain`) ran under the profiler, which slows the server: marked 'profiled'.
    # They are marked on the run (`runs.diagnostic`), so the store leaves them out of this read.
    pair = (baseline, candidate)
    every = {name: store.runs(profile_name=name, statuses=RUN_STATUSES, exclude_diagnostic=True)
             for name in dict.fromkeys(pair)}
    grid = build_grid_from_runs(
        every[baseline], every[candidate], baseline_name=baseline, candidate_name=candidate,
        fingerprint=fingerprint, metrics=metrics, settings=settings,
        plan=plan_of(store, pair))
    grid = mark_investigations(store, grid)
    if not extras:
        return grid
    # The extras' roofline reads the same profiles' complete runs (cold ones included, as before):
    # the records read above, plus the few marked cold ones, instead of a second full read.
    cold = [r for r in map(store.run, sorted(diagnostic_run_ids(store, pair))) if r is not None and r.diagnostic == "cold"]
    complete = {name: sorted([r for r in every[name] if r.status == "complete"]
                             + [r for r in cold if r.profile_name == name and r.status == "complete"],
                             key=lambda r: r.id) for name in every}
    gated: ComparisonGrid = apply_gate(grid, build_extras(store, baseline, candidate, runs=complete))
    return gated


def plan_of(store: Store, profiles: Sequence[str]) -> dict[tuple[str, str], PlanCount]:
    """The queue's plan per (profile, requested fingerprint) for `profiles`, with what each campaign
    planned (its stored definition's `planned_items`) so that items cleared from the queue still
    count as cut. Reads only the compared profiles' items and the campaigns that name them."""
    import json

    names = list(dict.fromkeys(profiles))
    marks = ", ".join("?" for _ in names)
    rows = [{"campaign_id": r[0], "profile_name": r[1], "fingerprint": r[2], "state": r[3], "n": r[4]}
            for r in store.query("SELECT campaign_id, profile_name, fingerprint, state, COUNT(*) FROM queue_items "
                                 f"WHERE profile_name IN ({marks}) "
                                 "GROUP BY campaign_id, profile_name, fingerprint, state", tuple(names))]
    expected: dict[tuple[int, str, str], int] = {}
    named = " OR ".join("instr(definition_json, ?) > 0" for _ in names)
    for cid, definition in store.query(f"SELECT id, definition_json FROM campaigns WHERE {named}",
                                       tuple(json.dumps(n) for n in names)):
        try:
            planned = json.loads(definition).get("planned_items") or []
            for profile, fp, n in planned:
                expected[(int(cid), str(profile), str(fp))] = int(n)
        except (ValueError, TypeError, AttributeError):
            continue  # an older or foreign definition: its cleared items cannot be counted
    return plan_counts(rows, expected)


def mark_investigations(store: Store, grid: ComparisonGrid) -> ComparisonGrid:
    """Cells under investigation say so; a finished investigation shows the cell before and after."""
    marks = under_investigation(store, grid.baseline_name, grid.candidate_name)
    if not marks:
        return grid
    evidence = evidence_from_grid(grid, store)
    cells = []
    for cell in grid.cells:
        record = marks.get((cell.concurrency, cell.metric))
        if record is None:
            cells.append(cell)
            continue
        rep = report(store, record, evidence)
        if rep.state == "complete":
            words = f"investigated: {describe_cell(rep.before)} -> {describe_cell(rep.after)}"
            words += f"; {rep.settled}" if rep.settled else ""
        else:
            words = f"{rep.state} ({record.name})"
        if rep.flags:
            words += f"; {', '.join(rep.flags)}"
        if record.definition.get("baseline") != grid.baseline_name:  # 'before' was the other order's delta
            words += f" (investigated as {record.definition.get('baseline')} vs {record.definition.get('candidate')})"
        cells.append(dataclasses.replace(cell, investigation=words))
    return dataclasses.replace(grid, cells=tuple(cells))


def control_noise_pct(store: Store, profiles: Sequence[str]) -> float | None:
    """Start-to-start noise measured so far at the control concurrency (2) for these profiles: the
    relative spread of output throughput between server starts (log scale, each profile's own mean
    removed, pooled), in percent; None until some profile has two starts there. A plan sizes the
    control's starts from it (`queue_plan.CampaignPlan.control_noise_pct`)."""
    import math

    from moe_tui.compare.evidence import start_means
    from moe_tui.compare.runs import Run, concurrency_of, normalise
    from moe_tui.judgement import CONTROL_CONCURRENCIES

    ss, df = 0.0, 0
    for name in profiles:
        runs = [normalise(r, name) for r in store.runs(profile_name=name, statuses=("complete",))]
        control = [r for r in runs if concurrency_of(r) == CONTROL_CONCURRENCIES[0] and not r.flags]
        by_fp: dict[str, list[Run]] = {}
        for r in control:
            by_fp.setdefault(r.fingerprint, []).append(r)
        for group in by_fp.values():
            logs = [math.log(v) for v in start_means(group, "output_throughput") if v > 0]
            if len(logs) >= 2:
                mean = sum(logs) / len(logs)
                ss += sum((x - mean) ** 2 for x in logs)
                df += len(logs) - 1
    return math.sqrt(ss / df) * 100.0 if df >= 2 else None
