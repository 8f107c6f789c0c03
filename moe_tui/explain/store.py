"""Explanations in the store: queueing the profiled runs of a cell, finding them, reading their traces.

- `plan_explain(grid, concurrency, steps)`: one profiled item per side with the cell's workload
  (`profiled_spec`: the cell's spec with one wave of requests and another seed, so the item has
  its own fingerprint: it never counts as one of the cell's planned repeats), queued as one
  campaign named `explain:<A>-vs-<B>:c=<C>` whose definition says `kind: explain` (the
  controller's cue to profile, `moe_tui.run.profiled`);
- the runs made so are marked `profiled` on the run by the store (`store_schema`'s trigger on the
  explain campaign's items), and `grids.build_grid` leaves them out of every cell (the profiler
  slows the server);
- `latest_explain(store, A, B, C)`: the newest explain campaign of the cell with its items;
  `side_files(store, run_id)`: the kept traces (DECODE stage) and expert dump of a profiled run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from moe_tui.judgement import run_time_scale
from moe_tui.records import ExplainDefinitionJson, ExplainPlanItemJson, ExplainPlanJson, SpecJson
from moe_tui.records.grid import ExplainExtrasJson

if TYPE_CHECKING:
    from moe_tui.compare.model import ComparisonGrid
    from moe_tui.explain.breakdown import SideBreakdown
    from moe_tui.store.db import Store
    from moe_tui.store.queue import QueueItem, RunQueue

    # (the side's breakdown, its run id, its expert-load dumps)
    ProfiledSide = tuple[SideBreakdown, int, list[Path]]

KIND = "explain"
POLICY = "explain"
DEFAULT_STEPS = 12
MAX_STEPS = 200
PROFILE_SEED_OFFSET = 7919  # another seed: the same workload shape, another fingerprint


class ExplainQueueError(ValueError):
    """The cell cannot be profiled (no such concurrency, no spec both sides ran); says why."""


def campaign_name(baseline: str, candidate: str, concurrency: int) -> str:
    return f"explain:{baseline}-vs-{candidate}:c={concurrency}"


def profiled_spec(spec: Mapping[str, Any]) -> SpecJson:
    """The cell's spec for a profiled run: one wave of requests (the run is stopped once the traces
    are in) and another seed (so its fingerprint is its own)."""
    out = dict(spec)
    out["num_prompts"] = int(out.get("max_concurrency") or 1)
    out["seed"] = int(out.get("seed") or 0) + PROFILE_SEED_OFFSET
    return cast(SpecJson, out)  # the grid's spec: a canonical one, read back from the store


def plan_explain(grid: ComparisonGrid, concurrency: int, *, steps: int = DEFAULT_STEPS, prefill: bool = False) -> ExplainPlanJson:
    """What to queue for explaining the cell (a plain dict: `enqueue_explain` takes it). With
    `prefill` the profile starts with the benchmark, so the first wave's prefill (EXTEND) is
    profiled too; the decode steps then begin while the batch still fills on a real server."""
    if not 1 <= steps <= MAX_STEPS:
        raise ExplainQueueError(f"steps must be 1..{MAX_STEPS}, got {steps}")
    if concurrency not in grid.concurrencies:
        raise ExplainQueueError(f"no cell at concurrency {concurrency}: measured concurrencies "
                                f"{', '.join(map(str, grid.concurrencies)) or 'none'}")
    fps = {side: grid.point(side, concurrency).fingerprint for side in ("baseline", "candidate")}
    if not fps["baseline"] or fps["baseline"] != fps["candidate"] or fps["baseline"] not in grid.specs:
        raise ExplainQueueError(f"concurrency {concurrency}: the two sides ran no common spec, so there is no one "
                                f"workload to profile both with (queue both sides with one spec first)")
    spec = profiled_spec(grid.specs[fps["baseline"]])
    items: list[ExplainPlanItemJson] = [{"side": side, "profile": name, "spec": spec}
             for side, name in (("baseline", grid.baseline_name), ("candidate", grid.candidate_name))]
    return {"name": campaign_name(grid.baseline_name, grid.candidate_name, concurrency), "kind": KIND,
            "baseline": grid.baseline_name, "candidate": grid.candidate_name, "concurrency": concurrency,
            "cell_fingerprint": fps["baseline"], "steps": steps, "items": items,
            "stages": ["DECODE", "EXTEND"] if prefill else ["DECODE"]}


def enqueue_explain(queue: RunQueue, plan: Mapping[str, Any], *,
                    profiles_dir: str | None = None) -> tuple[int, list[QueueItem]]:
    """One campaign: the baseline's profiled item, then the candidate's. Nothing is added when a
    spec is invalid."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.queue import PlannedItem

    planned = [PlannedItem(str(i["profile"]), BenchmarkSpec.from_dict(i["spec"], f"explain item ({i['side']})"),
                           0, True, False) for i in plan["items"]]
    definition: ExplainDefinitionJson = {
        "name": plan["name"], "kind": plan["kind"], "baseline": plan["baseline"], "candidate": plan["candidate"],
        "concurrency": plan["concurrency"], "cell_fingerprint": plan["cell_fingerprint"], "steps": plan["steps"],
        "stages": list(plan.get("stages") or ["DECODE"]), "sides": [i["side"] for i in plan["items"]],
        "profiles_dir": profiles_dir}
    return queue.add_planned_campaign(str(plan["name"]), POLICY, definition, planned)


def explain_definition(queue: RunQueue, item: QueueItem) -> ExplainDefinitionJson | None:
    """The explain campaign's definition when `item` belongs to one (the controller's cue)."""
    if item.campaign_id is None:
        return None
    d = (queue.campaign(item.campaign_id) or {}).get("definition") or {}
    return cast(ExplainDefinitionJson, dict(d)) if d.get("kind") == KIND else None  # written by enqueue_explain


@dataclass(frozen=True)
class ExplainRecord:
    campaign_id: int
    name: str
    definition: Mapping[str, Any]
    items: tuple[QueueItem, ...]  # baseline first

    @property
    def open(self) -> bool:
        return any(i.state in ("pending", "running") for i in self.items)

    def run_id(self, side: str) -> int | None:
        sides = list(self.definition.get("sides") or ("baseline", "candidate"))
        item = self.items[sides.index(side)] if side in sides and sides.index(side) < len(self.items) else None
        return item.run_id if item is not None else None


def explain_records(store: Store) -> list[ExplainRecord]:
    from moe_tui.store.queue import RunQueue

    queue = RunQueue(store)
    out = []
    for camp in queue.campaigns():
        d = camp["definition"] or {}
        if d.get("kind") == KIND:
            items = tuple(sorted(queue.items(campaign_id=camp["id"]), key=lambda i: i.id))
            out.append(ExplainRecord(camp["id"], camp["name"], d, items))
    return out


def latest_explain(store: Store, baseline: str, candidate: str, concurrency: int) -> ExplainRecord | None:
    name = campaign_name(baseline, candidate, concurrency)
    found = [r for r in explain_records(store) if r.name == name]
    return found[-1] if found else None


def traces_dir(run_id: int) -> Path:
    """Where a profiled run's files are kept: owner-only, under the data dir."""
    from moe_tui import paths

    return paths.private_dir(paths.data_dir() / "traces" / f"run-{run_id}", what="traces dir")


def side_files(run_id: int, stage: str = "DECODE") -> tuple[list[Path], list[Path]]:
    """(that stage's traces, expert dumps) kept for a profiled run (a trace without a stage in its
    name counts as DECODE: a profile not split by stage)."""
    from moe_tui.explain.trace import parse_trace_name

    folder = traces_dir(run_id)
    traces = [p for p in sorted(folder.glob("*.trace.json.gz"))
              if (parts := parse_trace_name(p.name)) is not None and (parts.stage or "DECODE") == stage]
    return traces, sorted(folder.glob("expert_distribution_recorder_*.pt"))


# -- the view: the cell's explanation as the CLI, the exports and the TUI show it ------------------
@dataclass(frozen=True)
class CellExplanation:
    state: str  # "none", "pending", "failed", "ready"
    message: str
    # explain.Explanation when ready. Any, not `Explanation | None`: control.reads passes it on unchecked
    # (left to that package's owner; narrowing it there makes this field exact).
    explanation: Any = None
    extras: tuple[str, ...] = ()  # roofline and expert-load lines
    data: Mapping[str, Any] | None = None  # the JSON extras (roofline, expert load, run ids)


def grid_run_cv(grid: ComparisonGrid, metric: str = "output_throughput") -> float | None:
    """The median per-side relative spread (std/mean) of the grid's cells with 2+ runs a side."""
    import statistics

    cvs = sorted(abs(s.std / s.mean) for c in grid.cells if c.metric == metric
                 for s in (c.baseline, c.candidate) if s.n >= 2 and s.std is not None and s.mean)
    return statistics.median(cvs) if cvs else None


def explain_cell(store: Store, grid: ComparisonGrid, concurrency: int, stage: str = "DECODE") -> CellExplanation:
    """The latest profiled pair of the cell, read and compared (or why not). `stage` EXTEND reads
    the prefill traces (kept when the runs were queued with prefill)."""
    from moe_tui.explain import TraceError, compare_sides, read_rank, side_breakdown
    from moe_tui.explain.breakdown import DEFAULT_RUN_CV, ExplainError

    rec = latest_explain(store, grid.baseline_name, grid.candidate_name, concurrency)
    if rec is None:
        return CellExplanation("none", f"no profiled runs of concurrency {concurrency} yet: `moe-tui explain "
                                       f"{grid.baseline_name} {grid.candidate_name} -c {concurrency} --yes` queues them")
    if rec.open:
        ids = ", ".join(f"#{i.id} {i.state}" for i in rec.items)
        return CellExplanation("pending", f"profiled runs queued ({ids}): `moe-tui run` works them")
    sides: list[ProfiledSide] = []
    for side in ("baseline", "candidate"):
        run_id = rec.run_id(side)
        item = rec.items[0 if side == "baseline" else 1]
        if run_id is None or item.state != "done":
            return CellExplanation("failed", f"the {side}'s profiled run did not finish ({item.state}: "
                                             f"{item.error or 'no run'}); queue again with --again")
        traces, dumps = side_files(run_id, stage)
        if not traces:
            why = " (queue with --prefill to profile the prefill)" if stage == "EXTEND" else ""
            if stage == "DECODE" and side_files(run_id, "MIXED")[0]:
                why = (" (a prefill batch past the step count ended its decode capture, so SGLang named it EXTEND; "
                       "kept as MIXED: queue again without --prefill for a decode-only capture)")
            return CellExplanation("failed", f"the {side}'s profiled run (run {run_id}) kept no {stage} trace" + why)
        try:  # prefill runs eagerly (no graph replays to count): the ProfileReq's step count
            ranks = [read_rank(p, steps=int(rec.definition.get("steps") or DEFAULT_STEPS)) for p in traces]
            label = grid.baseline_name if side == "baseline" else grid.candidate_name
            sides.append((side_breakdown(label, ranks), run_id, dumps))
        except (TraceError, ExplainError) as exc:
            return CellExplanation("failed", f"the {side}'s traces (run {run_id}) cannot be read: {exc}")
    cv = grid_run_cv(grid)
    expl = compare_sides(sides[0][0], sides[1][0], run_cv=cv if cv is not None else DEFAULT_RUN_CV)
    extras, data = _extras(store, sides, concurrency)
    if cv is None:
        extras.append(f"the grid has no repeats to measure run-to-run spread: {DEFAULT_RUN_CV * 100:.0f}% assumed")
    data["run_ids"] = {"baseline": sides[0][1], "candidate": sides[1][1]}
    data["run_cv"] = cv
    return CellExplanation("ready", "", expl, tuple(extras), data)


def _extras(store: Store, sides: list[ProfiledSide], concurrency: int) -> tuple[list[str], ExplainExtrasJson]:
    from moe_tui.explain import moe_gemm_roofline
    from moe_tui.explain.expert_load import ExpertLoadError, expert_load

    lines: list[str] = []
    data = ExplainExtrasJson(roofline={}, expert_load={})
    for breakdown, run_id, dumps in sides:
        floor = _moe_floor_ms(store, run_id, concurrency)
        if floor is not None:
            r = moe_gemm_roofline(breakdown, floor[0], floor[1])
            data["roofline"][breakdown.label] = r
            if r["x_roofline"] is not None:
                lines.append(f"{breakdown.label}: MoE GEMM {r['moe_gemm_ms']:.3f} ms/step = {r['x_roofline']:.1f}x its "
                             f"roofline ({r['roofline_ms']:.3f} ms: the routed experts a step touches, read once at HBM "
                             f"speed)")
        if not dumps:
            from moe_tui.explain.recorder import why_not_recorded

            lines.append(f"{breakdown.label}: {why_not_recorded(breakdown.label)}")
            continue
        try:
            load = expert_load(dumps[-1])
        except ExpertLoadError as exc:
            lines.append(f"{breakdown.label}: expert load unreadable: {exc}")
            continue
        data["expert_load"][breakdown.label] = load.to_dict()
        worst = load.worst
        if worst is not None and load.mean_imbalance is not None:
            lines.append(f"{breakdown.label}: expert load max/mean {load.mean_imbalance:.2f} on average over "
                         f"{load.moe_layers} MoE layers, worst layer {worst.layer} (model layer index) at {worst.imbalance:.2f}")
    return lines, data


def _moe_floor_ms(store: Store, run_id: int, concurrency: int) -> tuple[float, float] | None:
    """(routed-expert bytes one step reads, box HBM bytes/s), modelled time for the emulator."""
    from dataclasses import replace

    from moe_tui.roofline.inputs import RooflineInputError, mean_decode_context, roofline_setup

    run = store.run(run_id)
    if run is None or not run.profile:
        return None
    try:
        spec = run.spec or {}
        context = mean_decode_context(int(spec.get("input_len", 1024)), int(spec.get("output_len", 1024)))
        setup = roofline_setup(run.profile, context=context)
        scale = run_time_scale(run.profile, run.provenance)  # a slowed cell's own clock
        gpu = replace(setup.gpu, hbm_gbps=setup.gpu.hbm_gbps / scale)  # traces hold modelled time
        roof = replace(setup, gpu=gpu).at(concurrency)
    except (RooflineInputError, ValueError, OSError):
        return None
    return roof.weight_bytes.get("routed_experts", 0.0), gpu.hbm_gbps * 1e9 * setup.gpu_count
