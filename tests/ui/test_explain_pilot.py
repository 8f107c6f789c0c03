"""Pilot tests of the explain key: `x` on a compare-grid cell opens the breakdown screen over a
real store; with no profiled runs it says so and `y` queues one a side as an explain campaign;
with profiled runs whose traces are kept (here the real H200 traces of tests/data) it shows the
per-class breakdown side by side."""

from __future__ import annotations

import shutil
from pathlib import Path

from textual.widgets import Static

from moe_tui.explain.store import enqueue_explain, explain_records, plan_explain, traces_dir
from moe_tui.grids.pair import build_grid
from moe_tui.store.queue import RunQueue
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.explain import ExplainScreen
from tests.support.pilot import SIZE, emit, press, press_to
from tests.ui.test_investigate_pilot import A, B, StoreBackedAdapter, open_from_cell
from tests.ui.test_investigate_pilot import store as investigate_store

store = investigate_store  # the same fixture: the demo runs in a real store

DATA = Path(__file__).parents[1] / "data"


class ExplainAdapter(StoreBackedAdapter):
    def queue_explain(self, baseline, candidate, concurrency):
        self._record("queue_explain", baseline, candidate, concurrency)
        campaign_id, items = enqueue_explain(RunQueue(self.store), self.explain_plan(baseline, candidate, concurrency))
        return {"campaign_id": campaign_id, "item_ids": [i.id for i in items]}


async def test_x_without_profiled_runs_offers_to_queue_them(make_app, store):
    adapter = ExplainAdapter(store)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_from_cell(pilot, app, 10, "x", ExplainScreen)
        assert screen.cell == (A, B, 10)
        assert "no profiled runs of concurrency 10 yet" in str(screen.query_one("#explain-body", Static).render())
        await press(pilot, app, "y")
        assert ("queue_explain", A, B, 10) in adapter.calls
        assert "profiled runs queued" in str(screen.query_one("#explain-body", Static).render())
        await press_to(pilot, app, CompareScreen, "escape")
    (record,) = explain_records(store)
    assert record.definition["concurrency"] == 10 and len(record.items) == 2
    assert {i.spec.max_concurrency for i in record.items} == {10}


async def test_x_shows_the_breakdown_of_kept_traces(make_app, store):
    grid = build_grid(store, A, B)
    queue = RunQueue(store)
    enqueue_explain(queue, plan_explain(grid, 10))
    for item, trace in zip(queue.items(), ("real-A-TP-0.trace.json.gz", "real-B-TP-0.trace.json.gz"), strict=True):
        (run_id,) = store.import_runs([dict(profile_name=item.profile_name, spec_json=item.spec.canonical_json(),
                                            fingerprint=item.fingerprint, client="moe-tui", summary={},
                                            provenance={}, profile={}, started_at=1.0, finished_at=2.0,
                                            source="moe-tui")])
        claimed = queue.claim_next()
        assert claimed is not None and claimed.id == item.id
        queue.attach_run(item.id, run_id)
        queue.finish(item.id, "done", run_id=run_id)
        shutil.copy(DATA / trace, traces_dir(run_id) / trace)
    adapter = ExplainAdapter(store)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_from_cell(pilot, app, 10, "x", ExplainScreen)
        body = str(screen.query_one("#explain-body", Static).render())
        assert "MoE GEMM" in body and "attention" in body and "idle gaps + launch" in body
        assert "kernels that moved most" in body
        assert "MoE GEMM +0.011 ms/step moved beyond its noise" in body
    assert build_grid(store, A, B).cells == grid.cells  # the profiled runs stay out of the cell


async def test_the_breakdown_reads_again_when_a_run_finishes(make_app, store):
    from moe_tui.events import RunFinished

    adapter = ExplainAdapter(store)
    reads: list[tuple] = []
    explain_cell = adapter.explain_cell
    adapter.explain_cell = lambda *a, **k: reads.append(a) or explain_cell(*a, **k)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_from_cell(pilot, app, 10, "x", ExplainScreen)
        await press(pilot, app, "y")
        assert screen.view is not None and screen.view.get("state") == "pending"
        before = len(reads)
        await emit(pilot, app, RunFinished(run_id=99, queue_item_id=1, profile=A, status="complete"))
        assert len(reads) == before + 1  # read again without `r`
