"""The comparison grid as the CLI, the exports and the control client ask for it: read from the store.

`compare` is pure (runs in, grid out); this service reads what it needs (both profiles' runs, the
queue's planned repeats per cell) and attaches the extras that need stored data of their own (the
roofline % per concurrency and the correctness gate, `grid_extras`). One function, so every reader
of a grid sees the same grid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from moe_tui.compare import (
    METRICS,
    CompareSettings,
    ComparisonGrid,
    MetricDef,
    build_grid_from_runs,
    plan_counts,
    unknown_profiles,
)
from moe_tui.explain_store import profiled_run_ids
from moe_tui.grid_extras import apply_gate, build_extras
from moe_tui.investigate_report import describe_cell, report
from moe_tui.investigate_store import diagnostic_run_ids, evidence_from_grid, under_investigation
from moe_tui.queue import RunQueue
from moe_tui.store import Store

RUN_STATUSES = ("complete", "incomplete", "failed")


def build_grid(store: Store, baseline: str, candidate: str, *, fingerprint: str | None = None,
               metrics: Sequence[MetricDef] = METRICS, settings: CompareSettings | None = None,
               extras: bool = True) -> ComparisonGrid:
    """The grid for two profile names: their runs, the queue's plan, roofline and gate extras.
    Raises CompareError naming an unknown profile (with a did-you-mean)."""
    error = unknown_profiles(store.profile_names_with_runs(), (baseline, candidate), str(store.path))
    if error is not None:
        raise error
    # Cold runs of an investigation (no warmup pass, on purpose) are evidence about warmup, not about
    # the backends: they never enter a cell's mean (the investigation's report reads them itself).
    # Profiled runs (`explain`) ran under the profiler, which slows the server: never in a cell.
    cold = diagnostic_run_ids(store) | profiled_run_ids(store)
    runs = {name: [r for r in store.runs(profile_name=name, statuses=RUN_STATUSES) if r.id not in cold]
            for name in (baseline, candidate)}
    grid = build_grid_from_runs(
        runs[baseline], runs[candidate], baseline_name=baseline, candidate_name=candidate,
        fingerprint=fingerprint, metrics=metrics, settings=settings, plan=plan_counts(RunQueue(store).plan_rows()))
    grid = mark_investigations(store, grid)
    return apply_gate(grid, build_extras(store, baseline, candidate)) if extras else grid


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
        cells.append(dataclasses.replace(cell, investigation=words))
    return dataclasses.replace(grid, cells=tuple(cells))
