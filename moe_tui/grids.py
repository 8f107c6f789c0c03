"""The comparison grid as the CLI, the exports and the control client ask for it: read from the store.

`compare` is pure (runs in, grid out); this service reads what it needs (both profiles' runs, the
queue's planned repeats per cell) and attaches the extras that need stored data of their own (the
roofline % per concurrency and the correctness gate, `grid_extras`). One function, so every reader
of a grid sees the same grid.
"""

from __future__ import annotations

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
from moe_tui.grid_extras import apply_gate, build_extras
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
    grid = build_grid_from_runs(
        store.runs(profile_name=baseline, statuses=RUN_STATUSES), store.runs(profile_name=candidate, statuses=RUN_STATUSES),
        baseline_name=baseline, candidate_name=candidate, fingerprint=fingerprint, metrics=metrics,
        settings=settings, plan=plan_counts(RunQueue(store).plan_rows()))
    return apply_gate(grid, build_extras(store, baseline, candidate)) if extras else grid
