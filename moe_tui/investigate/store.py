"""Investigations in the store: the evidence adapter, queueing a plan, and the before/after record.

- `evidence_from_grid(grid, store)`: the ONE adapter from the comparison grid (today's
  `moe_tui.compare.ComparisonGrid`) and the store (run durations, server starts) to the planner's
  plain `GridEvidence`. Re-point this function when the grid's model changes; nothing else here
  reads the grid.
- `enqueue_plan(queue, plan)`: an investigation is one campaign named
  `investigate:<A>-vs-<B>:c=<C>:<metric>`; its definition holds the cell as it stood ("before"),
  the proposals with their reasons, and each item's role (by insertion order). Its items carry the
  cell's own spec, so their results land in that cell.
- `investigations(store, A, B)` lists the records; `report(store, record, evidence)` says what
  changed: the cell's interval and verdict before and after, the control, the bisection points,
  and the cold/warm and prefix-cache pairs (a warmup or cache effect flagged when they differ).
  `under_investigation(store, A, B)` maps (concurrency, metric) -> record for the grid's marker.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moe_tui import judgement
from moe_tui.investigate.model import (
    SIDES,
    CellEvidence,
    GridEvidence,
    InvestigationPlan,
    SideEvidence,
)

if TYPE_CHECKING:
    from moe_tui.compare.model import ComparisonGrid, GridCell
    from moe_tui.store.db import Store
    from moe_tui.store.queue import QueueItem, RunQueue

KIND = "investigation"
POLICY = "investigation"
PENDING_STATES = frozenset({"pending", "running"})

# today's compare.py verdict strings -> the judgement vocabulary


# -- the adapter from the grid --------------------------------------------------------------------
def evidence_from_grid(grid: ComparisonGrid, store: Store) -> GridEvidence:
    """The planner's evidence from the ComparisonGrid (its verdict codes and control state are
    judgement's vocabulary, taken as they are) and the store it was built from."""
    from moe_tui.store.grid_rows import evidence_rows

    # One batched read of the few fields used (issue 34: a whole run read per run id was most of a grid's time).
    runs = evidence_rows(store, (rid for point in grid.points.values() for rid in point.run_ids))
    cells = []
    for c in grid.cells:
        sides = {}
        for side in SIDES:
            point, stats = grid.point(side, c.concurrency), getattr(c, side)
            recs = [runs[r] for r in point.run_ids if r in runs]
            bound, advice = _client_bound(store, point.flagged_run_ids)
            sides[side] = SideEvidence(
                client_bound_runs=bound, client_advice=advice,
                profile=grid.baseline_name if side == "baseline" else grid.candidate_name,
                n=stats.n, mean=stats.mean, std=stats.std, run_ids=tuple(point.run_ids),
                server_start_ids=tuple(r.server_start_id for r in recs),
                warmup_pass=tuple(judgement.FLAG_NO_WARMUP_PASS not in set(r.flags) for r in recs),
                run_seconds=_mean([r.finished_at - r.started_at for r in recs if r.finished_at and r.started_at]),
                warmup_seconds=_mean([r.warmup_s for r in recs if r.warmup_s]),
            )
        ci = (c.ci_low_pct, c.ci_high_pct) if c.ci_low_pct is not None and c.ci_high_pct is not None else None
        # The spec both sides ran, whatever the verdict: an unreliable or confounded cell is the
        # one most worth re-running (only a refused cell has no shared spec).
        fp_a, fp_b = grid.point("baseline", c.concurrency).fingerprint, grid.point("candidate", c.concurrency).fingerprint
        shared = fp_a if fp_a and fp_a == fp_b else None
        cells.append(CellEvidence(
            concurrency=c.concurrency, metric=c.metric, higher_is_better=c.higher_is_better,
            verdict=c.verdict, baseline=sides["baseline"],
            candidate=sides["candidate"], delta_pct=_planning_delta(c), ci_pct=ci, planned_repeats=c.repeats_needed,
            spec=dict(grid.specs[shared]) if shared is not None and shared in grid.specs else None,
            fingerprint=shared,
            flags={s: tuple(f) for s, f in (("baseline", c.baseline_flags), ("candidate", c.candidate_flags)) if f},
            control_starts=c.control_starts,
        ))
    # The grid's own equivalence test decides the control state (agrees needs 3+ runs a side).
    control_conc = grid.control.concurrency
    state = grid.control.state
    profiles = {"baseline": grid.baseline_profile, "candidate": grid.candidate_profile}
    return GridEvidence(
        baseline=grid.baseline_name, candidate=grid.candidate_name, concurrencies=tuple(grid.concurrencies),
        control_state=state, control_concurrency=control_conc, cells=tuple(cells),
        start_seconds={n: s for n in (grid.baseline_name, grid.candidate_name)
                       if (s := _start_seconds(store, n)) is not None},
        jit_sides=tuple(s for s in SIDES if judgement.compiles_per_shape(profiles[s].get("moe_runner_backend"))),
        radix_cache_sides=tuple(s for s in SIDES if profiles[s]
                                and "--disable-radix-cache" not in (profiles[s].get("extra_args") or [])),
        simulated=bool(grid.simulated),
    )


def _mean(values: Sequence[float]) -> float | None:
    return float(statistics.fmean(values)) if values else None


def _start_seconds(store: Store, profile: str) -> float | None:
    """Mean start-to-ready seconds of the profile's recorded server starts."""
    spans = [ready - s["started_at"] for s in store.server_starts(profile, limit=20)
             if (ready := s["ready_at"]) and s["started_at"]]
    return _mean(spans)


# -- queueing ---------------------------------------------------------------------------------------
def enqueue_plan(queue: RunQueue, plan: InvestigationPlan, *,
                 profiles_dir: str | None = None) -> tuple[int, list[QueueItem]]:
    return enqueue_plan_dict(queue, plan.to_dict(), profiles_dir=profiles_dir)


def enqueue_plan_dict(queue: RunQueue, plan: Mapping[str, Any], *,
                      profiles_dir: str | None = None) -> tuple[int, list[QueueItem]]:
    """One campaign for the plan (as `InvestigationPlan.to_dict()` gives it); nothing is added
    when any item's spec is invalid (QueueError/SpecError names it)."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.queue import PlannedItem, QueueError

    planned: list[PlannedItem] = []
    roles: list[dict[str, Any]] = []
    for p in plan.get("proposals") or ():
        for item in p.get("items") or ():
            where = f"investigation item {len(planned) + 1} ({p.get('kind')}, {item.get('profile')})"
            spec = BenchmarkSpec.from_dict(item["spec"], where)
            planned.append(PlannedItem(str(item["profile"]), spec, int(item.get("repeat_index", 0)),
                                       bool(item.get("warmup", True)), bool(item.get("fresh_start", False))))
            roles.append({"kind": p.get("kind"), "role": item.get("role"), "side": item.get("side"),
                          "concurrency": spec.max_concurrency, "fingerprint": spec.fingerprint})
    if not planned:
        raise QueueError(f"{plan.get('name')}: the plan proposes nothing to run")
    definition = {
        "kind": KIND, "baseline": plan["baseline"], "candidate": plan["candidate"],
        "concurrency": int(plan["concurrency"]), "metric": plan["metric"], "before": plan.get("before") or {},
        "proposals": [{k: p.get(k) for k in ("kind", "reason", "server_starts", "minutes", "expect")}
                      for p in plan.get("proposals") or ()],
        "notes": list(plan.get("notes") or ()), "cap": plan.get("cap"), "min_effect_pct": plan.get("min_effect_pct"),
        "spread_pct": plan.get("spread_pct"),
        "item_roles": roles, "profiles_dir": profiles_dir,
        "server_starts": plan.get("server_starts"), "minutes": plan.get("minutes"),
    }
    return queue.add_planned_campaign(str(plan["name"]), POLICY, definition, planned)


# -- the record -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InvestigationRecord:
    campaign_id: int
    name: str
    created_at: float
    definition: Mapping[str, Any]
    items: tuple[QueueItem, ...]  # in insertion order, matching definition["item_roles"]

    @property
    def concurrency(self) -> int:
        return int(self.definition["concurrency"])

    @property
    def metric(self) -> str:
        return str(self.definition["metric"])

    @property
    def open(self) -> bool:
        return any(i.state in PENDING_STATES for i in self.items)

    @property
    def state(self) -> str:
        if self.open:
            return "under investigation"
        done = sum(1 for i in self.items if i.state == "done")
        return "complete" if done == len(self.items) else f"ended ({done} of {len(self.items)} items done)"

    def roles(self) -> list[tuple[Mapping[str, Any], QueueItem]]:
        return list(zip(self.definition.get("item_roles") or (), self.items))


def investigations(store: Store, baseline: str | None = None, candidate: str | None = None) -> list[InvestigationRecord]:
    """Every investigation record (newest last), optionally only those of one pair (in either order)."""
    from moe_tui.store.queue import RunQueue

    queue = RunQueue(store)
    out = []
    for camp in queue.campaigns(policy=POLICY):  # indexed: never a scan of every campaign
        d = camp["definition"] or {}
        if d.get("kind") != KIND:
            continue
        # A cell is the same cell in either order: the investigation made as B vs A is found from A vs B.
        if baseline is not None and {d.get("baseline"), d.get("candidate")} != {baseline, candidate}:
            continue
        items = tuple(sorted(queue.items(campaign_id=camp["id"]), key=lambda i: i.id))
        out.append(InvestigationRecord(camp["id"], camp["name"], camp["created_at"], d, items))
    return out


def under_investigation(store: Store, baseline: str, candidate: str) -> dict[tuple[int, str], InvestigationRecord]:
    """(concurrency, metric) -> the latest investigation of that cell (open or finished): the
    grid's marker ("under investigation" while open, before -> after once complete)."""
    return {(r.concurrency, r.metric): r for r in investigations(store, baseline, candidate)}


def diagnostic_run_ids(store: Store, profiles: Sequence[str] | None = None) -> set[int]:
    """Runs made on purpose without a warmup pass (cold runs): evidence about warmup, not about
    the backends; a grid should leave them out of a cell's mean. They are marked on the run itself
    (`runs.diagnostic`, set when the investigation's item gets its run), so clearing the queue
    cannot put them back; an indexed read of the marked runs (of `profiles` when given)."""
    return set(store.diagnostic_run_ids(profiles))


def _client_bound(store: Store, run_ids: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    """The flagged runs the client could not drive, and what to change (the first run's advice)."""
    from moe_tui.bench.live import client_advice_for_run

    bound: list[int] = []
    advice = ""
    for rid in run_ids:
        rec = store.run(rid)
        if rec is None or judgement.FLAG_CLIENT_BOUND not in {judgement.normalise_flag(f) for f in rec.flags}:
            continue
        bound.append(rid)
        advice = advice or client_advice_for_run(dict(rec.selfcheck or {}), dict(rec.spec or {}), dict(rec.profile or {}))
    return tuple(bound), advice


def _planning_delta(cell: GridCell) -> float | None:
    """What an investigation plans from: the grid's delta where it gave a verdict, else the raw
    difference of the two means (the grid shows no delta without a verdict, but a cell without one
    is exactly what an investigation sizes its repeats and bisections from). None where the two
    columns are not the same measurement (no data, refused, confounded)."""
    if cell.delta_pct is not None:
        return float(cell.delta_pct)
    if cell.verdict in (judgement.NO_DATA, judgement.REFUSED, judgement.CONFOUNDED) or not cell.comparable:
        return None
    a, b = cell.baseline.mean, cell.candidate.mean
    return (b - a) / a * 100.0 if a and b is not None else None  # a side's metric may be unreported
