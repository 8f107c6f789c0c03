"""Pilot tests of the investigation flow: `i` on a compare-grid cell opens the proposal screen
(reasons and costs from the real planner over a real store), `y` queues the selected proposals as
one campaign in that store; escape backs out and queues nothing."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, SelectionList, Static

from moe_tui.control.reads import StoreReads
from moe_tui.investigate.store import enqueue_plan, investigations
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.investigate import InvestigateScreen
from tests.support.pilot import SIZE, S, press, press_to, settle
from tests.support.stores import store_of
from tests.ui.fakes import RecordingAdapter, demo_runs

A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


class StoreBackedAdapter(StoreReads, RecordingAdapter):
    """The recording adapter, but the grid and the plan come from a real store holding the demo
    runs, and queueing writes a real campaign into it (what the controller's op does)."""

    def __init__(self, store: Store) -> None:
        RecordingAdapter.__init__(self)
        self.store = store
        self.profiles = []

    def compared_profiles(self):
        return [A, B]

    def queue_investigation(self, plan):
        self._record("queue_investigation", plan.name)
        campaign_id, items = enqueue_plan(RunQueue(self.store), plan)
        return {"campaign_id": campaign_id, "item_ids": [i.id for i in items]}


@pytest.fixture
def store(tmp_path):
    a, b = demo_runs(control_starts=2)  # the control too thin to agree: investigate proposes it
    with store_of(tmp_path, a + b) as s:
        yield s


async def open_cell(pilot, app, concurrency: int) -> CompareScreen:
    screen = await press_to(pilot, app, CompareScreen, "3")
    screen.query_one("#compare-baseline").value = A
    screen.query_one("#compare-candidate").value = B
    await settle(pilot, app)
    table = screen.query_one("#compare-grid", DataTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(f"{concurrency}/output_throughput"))
    await settle(pilot, app)
    return screen


async def open_from_cell(pilot, app, concurrency: int, key: str, kind: type[S]) -> S:
    """The compare grid's A-vs-B cell at `concurrency`, then `key`: the screen it opens over the cell."""
    await settle(pilot, app)
    await open_cell(pilot, app, concurrency)
    return await press_to(pilot, app, kind, key)


async def test_key_opens_proposals_and_confirm_queues_them(make_app, store):
    adapter = StoreBackedAdapter(store)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_from_cell(pilot, app, 10, "i", InvestigateScreen)
        assert screen.cell == (A, B, 10, "output_throughput")
        options = screen.query_one("#investigate-proposals", SelectionList)
        kinds = [options.get_option_at_index(i).value for i in range(options.option_count)]
        # 2 runs a side (0.5% spread) settle +57%, so no repeats; each start measured concurrency 2 beside
        # the cell, so no control is proposed; 2 (+0.3%) -> 10 (+57%) crosses the 2% minimum effect;
        # cutedsl compiles per shape. No prefix pair: the repeats never shared a server start.
        assert kinds == ["bisect", "cold_warm"], kinds
        detail = str(screen.query_one("#investigate-detail", Static).render())
        assert "why:" in detail and "concurrency 4 (their geometric midpoint" in detail
        total = str(screen.query_one("#investigate-total", Static).render())
        plan = screen.plan
        assert f"selected: {len(plan.items)} runs, {plan.server_starts} server starts" in total
        bisect = plan.proposals[0]
        assert "JIT" not in detail  # the highlighted (first) proposal's reason is shown

        await press(pilot, app, "down")
        assert "JIT" in str(screen.query_one("#investigate-detail", Static).render())
        await press(pilot, app, "space")  # keep only the bisection
        assert (f"selected: {len(bisect.items)} runs, {bisect.server_starts} server starts"
                in str(screen.query_one("#investigate-total", Static).render()))
        await press(pilot, app, "y")
        assert ("queue_investigation", f"investigate:{A}-vs-{B}:c=10:output_throughput") in adapter.calls
        assert "queued: campaign" in str(screen.query_one("#investigate-state", Static).render())

    (record,) = investigations(store, A, B)
    assert record.state == "under investigation"
    assert len(record.items) == len(bisect.items) and {i.spec.max_concurrency for i in record.items} == {4}
    assert [p["kind"] for p in record.definition["proposals"]] == ["bisect"]
    # +57% judged against concurrency 2 on its own two starts a side: the verdict stands before it
    assert record.definition["before"]["verdict"] == "better"


async def test_escape_backs_out_and_queues_nothing(make_app, store):
    adapter = StoreBackedAdapter(store)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        await open_from_cell(pilot, app, 10, "i", InvestigateScreen)
        await press_to(pilot, app, CompareScreen, "escape")
    assert not [c for c in adapter.calls if c[0] == "queue_investigation"]
    assert investigations(store, A, B) == []


async def test_the_dialogs_keys_are_on_screen_at_80x24(make_app, store):
    """At 80x24 the reasons pushed the totals and their key line (space, y, esc) below the dialog."""
    adapter = StoreBackedAdapter(store)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_from_cell(pilot, app, 1, "i", InvestigateScreen)
        dialog = screen.query_one("#investigate-dialog")
        total = screen.query_one("#investigate-total", Static)
        assert "y queues" in str(total.render())
        assert total.region.height >= 1 and dialog.content_region.contains_region(total.region), \
            (dialog.content_region, total.region)
