"""The comparison grid as the CLI, the exports and the control client ask for it: read from the store.

`compare` is pure (runs in, grid out); this service reads what it needs (both profiles' runs, the
queue's planned repeats per cell) and attaches the extras that need stored data of their own (the
roofline % per concurrency and the correctness gate, `grid_extras`). One function, so every reader
of a grid sees the same grid.

Months of data (issue 26): every read here is an indexed read of the two compared profiles (their
run summaries, `store.summaries`; their queue counts and campaigns, `RunQueue.campaign_plan`), so a
grid's cost grows with those runs, never with the store; no provenance, telemetry or per-request
JSON is decoded; the roofline takes the runs the grid averaged (one read, the same runs); and a
grid is built once per change of the store (`Store.generation`), then served from a small cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from moe_tui import judgement as J
from moe_tui.compare import BASELINE, METRICS, CompareSettings, ComparisonGrid, Confounder, MetricDef, PlanCount
from moe_tui.compare.build import build_grid_from_sources, plan_counts, unknown_profiles
from moe_tui.compare.memo import Kept
from moe_tui.grids.extras import apply_gate, build_extras
from moe_tui.grids.rows import RUN_STATUSES, ProfileRows  # noqa: F401  (re-exported)
from moe_tui.investigate.model import describe_cell
from moe_tui.investigate.report import report
from moe_tui.investigate.store import evidence_from_grid, under_investigation
from moe_tui.store import grid_rows
from moe_tui.store.db import Store

CACHED_GRIDS = 8  # per store handle: the pairs a session flips between
CACHED_PROFILES = 8  # per store handle: the profiles whose grid rows are kept up to date
FREEZE_ABOVE_RUNS = 5000  # runs held whole, from which a build freezes what it leaves (`frozen_gc`)

_rows_lock = threading.RLock()  # one grid read at a time per process (the rows are refreshed in place)
_rows: weakref.WeakKeyDictionary[Store, dict[str, ProfileRows]] = weakref.WeakKeyDictionary()
_kept: weakref.WeakKeyDictionary[Store, Kept] = weakref.WeakKeyDictionary()  # per-run derivations, between builds

_cache_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Store, dict[tuple[Any, ...], ComparisonGrid]] = weakref.WeakKeyDictionary()


def build_grid(store: Store, baseline: str, candidate: str, *, fingerprint: str | None = None,
               metrics: Sequence[MetricDef] = METRICS, settings: CompareSettings | None = None,
               extras: bool = True, queued: Sequence[str] = ()) -> ComparisonGrid:
    """The grid for two profile names: their runs, the queue's plan, roofline and gate extras.
    Raises CompareError naming a profile without runs (with a did-you-mean) unless `queued` names it
    (a campaign's profile before its first run: its cells say so). Served from the cache while
    nothing was committed to the store since the same grid was built."""
    generation = store.generation()
    key = (generation, baseline, candidate, fingerprint, tuple(metrics), settings, extras, tuple(queued))
    with _cache_lock:
        cached = _cache.get(store, {}).get(key)
    if cached is not None:
        return cached
    grid = _build_grid(store, baseline, candidate, fingerprint=fingerprint, metrics=metrics,
                       settings=settings, extras=extras, queued=queued)
    with _cache_lock:
        grids = _cache.setdefault(store, {})
        for old in [k for k in grids if k[0] != generation]:  # built before the latest change
            del grids[old]
        while len(grids) >= CACHED_GRIDS:
            del grids[next(iter(grids))]
        grids[key] = grid
    return grid


def _build_grid(store: Store, baseline: str, candidate: str, *, fingerprint: str | None,
                metrics: Sequence[MetricDef], settings: CompareSettings | None, extras: bool,
                queued: Sequence[str] = ()) -> ComparisonGrid:
    error = unknown_profiles([*store.profile_names_with_runs(), *queued], (baseline, candidate), str(store.path))
    if error is not None:
        raise error
    # The pair's run summaries (`store.summaries`), nothing else: no provenance, telemetry or samples.
    # Cold runs of an investigation (no warmup pass, on purpose) are evidence about warmup, and profiled
    # runs (`explain`) ran under the profiler: marked on the run (`diagnostic`), they are left out here.
    # Only what the grid judges is read whole (issue 34): each profile's cell rows come from an index
    # (`store.grid_rows`), kept per store and brought up to date by what changed (`grids.rows`); the
    # runs of the spec chosen at each concurrency are then read whole, once, and kept while unchanged.
    # No provenance, telemetry or samples. Cold runs of an investigation (no warmup pass, on purpose)
    # and profiled runs (`explain`) are marked on the run (`diagnostic`) and left out.
    # The evidence of a cell is the pair's own campaigns (those with items of both profiles: interleaved,
    # overlapping in time): the baseline measured against another candidate months ago is not read.
    pair = (baseline, candidate)
    with _rows_lock, frozen_gc() as freeze:
        rows = {name: _profile_rows(store, name) for name in dict.fromkeys(pair)}
        own = grid_rows.pair_campaigns(store, baseline, candidate)
        keep = None if own is None else own.run_ids
        apart = separate_concurrencies([rows[name] for name in pair], keep)
        if keep is not None and apart:  # the seed's c=10: judged (a spec drift named), never given a verdict
            keep = keep | {rid for r in rows.values() for rid, row in r.rows.items() if row.concurrency in apart}
        sources = {name: rows[name].source(store, keep) for name in rows}
        grid = build_grid_from_sources(
            sources[baseline], sources[candidate], baseline_name=baseline, candidate_name=candidate,
            fingerprint=fingerprint, metrics=metrics, settings=settings, plan=plan_of(store, pair),
            kept=_kept.setdefault(store, Kept()))
        every = {name: list(rows[name].summaries.values()) for name in rows}  # what the points may name
        freeze[0] = sum(len(r.runs) for r in rows.values()) >= FREEZE_ABOVE_RUNS
        left_out = sum(r.counted(keep) for r in rows.values())
    note = campaigns_note(own, left_out)
    if note:
        grid = dataclasses.replace(grid, warnings=(*grid.warnings, note))
    if keep is not None and apart:
        grid = confound_separate(grid, apart)
    grid = mark_investigations(store, grid)
    if not extras:
        return grid
    gated: ComparisonGrid = apply_gate(grid, build_extras(store, baseline, candidate, runs=averaged_runs(grid, every)))
    return gated


def campaigns_note(own: grid_rows.PairCampaigns | None, left_out: int) -> str:
    """Where the grid's runs came from when it is not simply the pair's own campaigns, in words ('' when it is)."""
    if own is None:
        return "no campaign measured both profiles: runs from separate campaigns (or none) compared"
    if not left_out:
        return ""
    return (f"{left_out} run{'s' if left_out != 1 else ''} from campaigns that did not measure both: not used (the "
            f"{own.campaigns} campaign{'s' if own.campaigns != 1 else ''} that measured both are compared)")


def separate_concurrencies(sides: Sequence[ProfileRows], keep: frozenset[int] | None) -> frozenset[int]:
    """Concurrencies both profiles measured, but only in campaigns that did not measure both (the pair's
    own campaigns never reached them): their cells are built from those runs, so a spec drift between
    them is still named, and confounded (`confound_separate`), never given a delta."""
    if keep is None:
        return frozenset()
    measured = [{r.concurrency for r in side.rows.values()} for side in sides]
    paired = {r.concurrency for side in sides for rid, r in side.rows.items() if rid in keep}
    return frozenset(c for c in set.intersection(*measured) - paired if c is not None)


SEPARATE = Confounder(field="measured in separate campaigns, never interleaved: queue both profiles in one "
                            "campaign at this concurrency for a verdict", baseline="", candidate="", source="campaign")


def confound_separate(grid: ComparisonGrid, apart: frozenset[int]) -> ComparisonGrid:
    """The cells at `apart` concurrencies as confounded by their campaigns (what else they are refused for,
    a different spec first, stays said): each side's runs were measured at other times, between other
    comparisons, so their difference is not the compared setting's alone."""
    cells = []
    for cell in grid.cells:
        if cell.concurrency not in apart:
            cells.append(cell)
        elif cell.verdict in (J.REFUSED, J.NO_DATA, J.CONFOUNDED):
            cells.append(dataclasses.replace(cell, reasons=(*cell.reasons, SEPARATE.describe())))
        else:
            cells.append(dataclasses.replace(
                cell, verdict=J.CONFOUNDED, verdict_text=J.VERDICT_WORDS[J.CONFOUNDED], confounders=(SEPARATE,),
                reasons=(SEPARATE.describe(),), delta=None, delta_pct=None, delta_text="", ci_low=None,
                ci_high=None, ci_low_pct=None, ci_high_pct=None, ci_text="", p_value=None, p_adjusted=None,
                repeats_needed=None, provisional="", uncontrolled="", control_relative_pct=None,
                control_relative_ci_pct=None, ci_too_wide=False))
    return dataclasses.replace(grid, cells=tuple(cells))


def _profile_rows(store: Store, profile: str) -> ProfileRows:
    """The profile's grid rows for this store handle, brought up to date (`grids.rows`)."""
    held = _rows.setdefault(store, {})
    rows = held.pop(profile, None) or ProfileRows(profile)
    held[profile] = rows  # most recently used last
    while len(held) > CACHED_PROFILES:
        del held[next(iter(held))]
    rows.refresh(store)
    return rows


@contextlib.contextmanager
def frozen_gc() -> Iterator[list[bool]]:
    """The cyclic collector off during a build, and what the build left frozen after it (`gc.freeze`).
    A build allocates many small objects and frees none of them in cycles: the collector's passes over
    them were about 45% of a grid's CPU (issue 34), and the full collection the kept runs set off after
    the build ran on whichever thread allocated next, the UI's loop among them (a 75 ms stall at 100k
    runs; 12-17 ms frozen, benches/scale.py). Frozen objects are still freed by their reference counts;
    only a cycle among them would be kept, and a grid makes none. The build says whether to freeze
    (`freeze[0] = True`: it holds `FREEZE_ABOVE_RUNS` runs or more; a small grid leaves the collector be)."""
    was = gc.isenabled()
    freeze = [False]
    gc.disable()
    try:
        yield freeze
    finally:
        if freeze[0]:
            gc.freeze()
        if was:
            gc.enable()


def averaged_runs(grid: ComparisonGrid, runs: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Per profile, the runs the grid averaged at each concurrency (its points' run ids): the roofline
    lines are computed from these, so a flagged, refused or cold run the grid left out is left out there too."""
    by_id = {r.id: r for side in runs.values() for r in side}
    out: dict[str, list[Any]] = {name: [] for name in runs}
    for (side, _), point in sorted(grid.points.items()):
        name = grid.baseline_name if side == BASELINE else grid.candidate_name
        out.setdefault(name, []).extend(by_id[i] for i in point.run_ids if i in by_id)
    return out


def plan_of(store: Store, profiles: Sequence[str]) -> dict[tuple[str, str], PlanCount]:
    """The queue's plan per (profile, requested fingerprint) for `profiles` (`RunQueue.campaign_plan`)."""
    from moe_tui.store.queue import RunQueue

    return plan_counts(*RunQueue(store).campaign_plan(profiles))


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
