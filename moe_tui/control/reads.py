"""StoreReads: what both control clients read straight from the SQLite store (WAL: a reader
never waits for the runner) and turn into view rows: the queue, runs, the comparison grid,
exports, server log files. Shared by the in-process and the attached client. No SQL here (the
store and the queue own their tables' reads), no Textual.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from moe_tui import compare, paths
from moe_tui.control.api import QUEUE_PAGE, CampaignPreview, QueueRow, QueueWindow, RunView, ServerRow
from moe_tui.executors.nodes import NodeRow, read_node_rows
from moe_tui.export import formats as export
from moe_tui.grids import pair as grids
from moe_tui.judgement import is_simulated
from moe_tui.profiles import ServerProfile
from moe_tui.records import CampaignArgsJson, ExplainCellJson, ExplainPlanJson
from moe_tui.store import queue_page
from moe_tui.store.db import Store
from moe_tui.store.jobs import ExecutorJobs, JobRow
from moe_tui.store.queue import ORDER_POLICIES, RunQueue

# The default first (the campaign form preselects it): counterbalanced interleaving keeps repeats
# independent and no periodic disturbance in step with one side.
POLICY_TEXT = {
    "abba": "A, B, B, A sweeps, each its own server start (drift and periodic disturbances fall on both; "
            "the default)",
    "interleaved": "A sweep, B sweep, A sweep... (drift falls on both; a disturbance in step with A-then-B "
                   "does not)",
    "grouped": "each profile's items together (fewest server starts)",
    "alternating": "A, B, A, B item by item (most drift-proof, most starts)",
}
LOG_READ_BYTES = 512 * 1024


class StoreReads:
    store: Store
    profiles: list[ServerProfile]
    exports_dir: Path | None = None
    data_dir: Path | None = None  # where the user's compare direction is remembered

    def _queue(self) -> RunQueue:
        queue = getattr(self, "_run_queue", None)
        if queue is None:
            queue = self._run_queue = RunQueue(self.store)
        return queue

    def queue_rows(self) -> tuple[QueueRow, ...]:
        # Plain columns, no spec parsed per item: a queue of months is re-read on every change, and
        # only then (the same tuple while nothing was committed: one change often brings two reads,
        # and the screens skip a tuple they have already shown).
        generation = self.store.generation()
        cached: tuple[tuple[int, int], tuple[QueueRow, ...]] | None = getattr(self, "_queue_rows_cache", None)
        if cached is not None and cached[0] == generation:
            return cached[1]
        rows = tuple(_queue_row(i) for i in self._queue().light_items())
        self._queue_rows_cache = (generation, rows)
        return rows

    def queue_window(self, offset: int = 0, limit: int = QUEUE_PAGE, words: Sequence[str] = (),
                     around: int | None = None, current: int | None = None) -> QueueWindow:
        # One page read from the store (`store.queue_page`): the same cost at 100 items as at
        # 100,000. The same window object while nothing was committed and the same page is asked
        # for (a status tick re-reads nothing; the screens skip a window they already show).
        key = (self.store.generation(), offset, limit, tuple(words), around, current)
        cached: tuple[Any, QueueWindow] | None = getattr(self, "_queue_window_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        page = queue_page.read_page(self.store, offset=offset, limit=limit, words=words, around=around,
                                    current=current)
        # The page's batch jobs (issue 37): one indexed read for the page's items, as `queue list`.
        shown = [int(r["id"]) for r in page.rows] + ([int(page.current["id"])] if page.current is not None else [])
        jobs = ExecutorJobs(self.store).latest_for_items(shown) if shown else {}
        window = QueueWindow(offset=page.offset, total=page.total,
                             rows=tuple(_queue_row(r, jobs.get(int(r["id"]))) for r in page.rows),
                             counts=dict(page.counts), words=tuple(words),
                             current=_queue_row(page.current, jobs.get(int(page.current["id"])))
                             if page.current is not None else None)
        self._queue_window_cache = (key, window)
        return window

    def profile_names(self) -> list[str]:
        return [p.name for p in self.profiles]

    def policies(self) -> dict[str, str]:
        return {p: POLICY_TEXT.get(p, p) for p in sorted(ORDER_POLICIES, key=lambda p: p != "abba")}

    def compared_profiles(self) -> list[str]:
        """Profiles with runs, and those of the newest campaign before they have any: during a
        campaign's first sweep the candidate has no run yet, and the screen shows the pair with its
        cells in words (no run yet, queued) instead of nothing."""
        from moe_tui.control import direction

        with_runs = set(self.store.profile_names_with_runs())
        queued = direction.newest_campaign_profiles(self._queue().campaigns())
        named = with_runs | set(queued)
        ordered = [p.name for p in self.profiles if p.name in named]
        return ordered + [n for n in queued if n not in ordered] + sorted(with_runs - set(ordered) - set(queued))

    def compare_direction(self) -> tuple[str, str] | None:
        from moe_tui.control import direction

        names = self.compared_profiles()
        campaign = direction.campaign_order(self._queue().campaigns(), names)
        return direction.choose(names, direction.load_pick(self.data_dir), campaign)

    def remember_direction(self, baseline: str, candidate: str) -> None:
        from moe_tui.control import direction

        direction.save_pick(self.data_dir, baseline, candidate)

    def comparison(self, baseline: str, candidate: str, include_flagged: bool = False,
                   accept_uncontrolled: bool = False) -> compare.ComparisonGrid:
        from moe_tui.control import direction

        return grids.build_grid(self.store, baseline, candidate,
                                  settings=compare.CompareSettings(include_flagged=include_flagged,
                                                                   accept_uncontrolled=accept_uncontrolled),
                                  queued=direction.newest_campaign_profiles(self._queue().campaigns()))

    def investigation_plan(self, baseline: str, candidate: str, concurrency: int, metric: str) -> Any:
        from moe_tui.investigate.planner import plan_investigation
        from moe_tui.investigate.store import evidence_from_grid

        evidence = evidence_from_grid(grids.build_grid(self.store, baseline, candidate), self.store)
        return plan_investigation(evidence, concurrency, metric)

    def explain_cell(self, baseline: str, candidate: str, concurrency: int) -> ExplainCellJson:
        from moe_tui.explain.render import text_lines
        from moe_tui.explain.store import explain_cell

        grid = grids.build_grid(self.store, baseline, candidate)
        view = explain_cell(self.store, grid, concurrency)
        lines = text_lines(view.explanation, ["", *view.extras]) if view.state == "ready" else [view.message]
        return {"state": view.state, "message": view.message, "lines": lines, "simulated": bool(grid.simulated)}

    def explain_plan(self, baseline: str, candidate: str, concurrency: int) -> ExplainPlanJson:
        from moe_tui.explain.store import plan_explain

        return plan_explain(grids.build_grid(self.store, baseline, candidate), concurrency)

    def export(self, baseline: str, candidate: str, fmt: str) -> Path:
        if fmt not in ("markdown", "csv"):
            raise ValueError(f"export: format must be markdown or csv, got {fmt!r}")
        grid = self.comparison(baseline, candidate)
        directory = self.exports_dir or paths.exports_dir()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        written = export.export_comparison(grid, directory, generated_at=stamp)
        return written.markdown if fmt == "markdown" else written.csv

    def run_view(self, run_id: int) -> RunView | None:
        from moe_tui.grids.extras import run_roofline_terms

        run = self.store.run(run_id)
        if run is None:
            return None
        lat: dict[str, list[float]] = collections.defaultdict(list)
        for r in self.store.requests(run_id):
            if not r["ok"]:
                continue
            if (ttft := r["ttft"]) is not None:
                lat["ttft"].append(ttft * 1000.0)
            if (latency := r["latency"]) is not None:
                lat["latency"].append(latency * 1000.0)
            lat["itl"].extend(x * 1000.0 for x in r["itl"] or ())
        simulated = is_simulated(profile=run.profile, provenance=run.provenance, flags=run.flags)
        return RunView(id=run.id, profile=run.profile_name, status=run.status, fingerprint=run.fingerprint,
                       spec=run.spec, provenance=run.provenance, summary=run.summary, flags=tuple(run.flags),
                       error=run.error, simulated=simulated,
                       latencies_ms={k: tuple(v) for k, v in lat.items()},
                       roofline=run_roofline_terms(run))  # issue 15: grid_extras

    def node_rows(self) -> tuple[NodeRow, ...]:
        return tuple(read_node_rows(self.store))

    def log_lines(self, profile: str, limit: int = 2000) -> list[str]:
        starts = self.store.server_starts(profile, limit=1)
        if not starts:
            return []
        path = Path(starts[0]["log_path"])
        try:
            with path.open("rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - LOG_READ_BYTES))
                data = fh.read()
        except OSError:
            return []
        lines = data.decode(errors="replace").splitlines()
        return lines[-limit:]

    # -- servers: every profile, with what the core says about the live ones ----------------
    def server_rows(self, described: Iterable[Mapping[str, Any]]) -> tuple[ServerRow, ...]:
        from moe_tui.control import direction

        live = {d["profile"]: d for d in described}
        # The newest campaign's profiles first, in its order (baseline above candidate), then the rest as
        # the folder lists them (walk 2026-12-05, finding 13: the candidate was listed above the baseline).
        newest = self._queue().newest_campaign()
        first = direction.newest_campaign_profiles([newest]) if newest else []
        ordered = sorted(self.profiles, key=lambda p: first.index(p.name) if p.name in first else len(first))
        rows = []
        for p in ordered:
            d = live.get(p.name, {})
            state = d.get("state", "stopped")
            ready_since = None
            if state == "ready":
                starts = self.store.server_starts(p.name, limit=1)
                ready_since = starts[0].get("ready_at") if starts else None
            rows.append(ServerRow(
                profile=p.name, engine=p.engine, backend=p.moe_runner_backend, port=p.port, gpus=tuple(p.gpus),
                state=state, phase=d.get("phase") or "", pid=d.get("pid"),
                resolved_backend=d.get("resolved_backend"), backend_mismatch=bool(d.get("backend_mismatch")),
                ready_since=ready_since,
            ))
        return tuple(rows)


def _queue_row(i: Any, job: JobRow | None = None) -> QueueRow:
    """A queue item read by column name (`RunQueue.light_items`, `store.queue_page`) as a view row,
    with its newest batch job when an executor worked it."""
    return QueueRow(id=i["id"], position=i["position"], profile=i["profile_name"],
                    concurrency=int(i["concurrency"] or 0), repeat_index=i["repeat_index"],
                    fingerprint=i["fingerprint"], state=i["state"], attempts=i["attempts"], run_id=i["run_id"],
                    error=i["error"], campaign=i["campaign"] or "",
                    job_id=(job.job_id or "?") if job is not None else "", job_node=job.node if job else "",
                    job_state=job.state if job is not None else "")


def campaign_args(request: Any) -> CampaignArgsJson:
    """A CampaignRequest as the controller's add_campaign/plan_campaign keyword arguments."""
    args: CampaignArgsJson = {
        "profiles": list(request.profiles), "concurrencies": list(request.concurrencies),
        "repeats": request.repeats, "spec": dict(request.spec), "policy": request.policy,
    }
    if request.prompts_per_concurrency:
        args["prompts_per_concurrency"] = request.prompts_per_concurrency
    if request.name:
        args["name"] = request.name
    if not request.control:
        args["control"] = False
    return args


def campaign_preview(request: Any, plan: Mapping[str, Any]) -> CampaignPreview:
    """The plan_campaign op's answer for `request` as a CampaignPreview."""
    planned = list(plan.get("items") or ())
    # The runner lists at most `run.facade.PLAN_ITEMS_SHOWN` items, with the count and short cells over all.
    items = int(plan.get("item_count", len(planned)))
    short = sorted({(int(i["concurrency"]), int(i["num_prompts"])) for i in planned
                    if int(i["num_prompts"]) < int(i["concurrency"])}) if "short_cells" not in plan else \
        sorted((int(c), int(n)) for c, n in plan["short_cells"])
    grid = len(request.profiles) * len(request.concurrencies) * request.repeats
    control = plan.get("control") or {}
    return CampaignPreview(name=request.name or str(plan.get("name") or ""), items=items, grid_items=grid,
                           control_items=max(0, items - grid), control_concurrency=control.get("concurrency"),
                           control_why=str(control.get("why") or ""),
                           server_starts=dict(plan.get("server_starts") or {}), short_cells=tuple(short))


def sim_clock_note(grid: Any) -> str:
    """The emulator clock of a simulated grid in words ("" otherwise), for the line above the grid."""
    from moe_tui.export.text import sim_clock_note as note

    return note(grid)


def grid_extra_lines(grid: Any) -> list[str]:
    """The grid's extras (gate verdict, % of roofline) as the compact lines under the grid (issue 15)."""
    from moe_tui.grids.extras import extras_compact_lines

    return list(extras_compact_lines(getattr(grid, "extras", None)))
