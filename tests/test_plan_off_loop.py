"""Planning off the runner's loop (issue 34 part 4): `plan_campaign` is built in a worker thread, so the
loop that drives a benchmark keeps its pace, and its answer lists a capped number of items with the
count and the short cells over all of them (a campaign at the size limit does not cross the socket whole)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from moe_tui.control.api import CampaignRequest
from moe_tui.control.reads import campaign_preview
from moe_tui.run.controller import Controller
from moe_tui.run.facade import PLAN_ITEMS_SHOWN
from moe_tui.store.db import Store

DEMO = Path(__file__).resolve().parent.parent / "server_profiles" / "demo"
A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


def test_a_large_plan_is_built_off_the_loop_and_answered_capped(tmp_path, monkeypatch):
    with Store(tmp_path / "s.sqlite3") as store:
        c = Controller(store, DEMO, data_dir=tmp_path, telemetry=False, use_lock=False)
        planned_on: list[int] = []
        real = c._ops.plan_campaign

        def spy(*args, **kwargs):
            planned_on.append(threading.get_ident())
            return real(*args, **kwargs)

        monkeypatch.setattr(c._ops, "plan_campaign", spy)

        async def scenario():
            concs = [1, 2, 4, 8, 16, 32]
            plan = await c.call("plan_campaign", profiles=[A, B], concurrencies=concs, repeats=400,
                                spec={"num_prompts": 3})
            return threading.get_ident(), plan

        loop_thread, plan = asyncio.run(scenario())
    assert planned_on and planned_on[0] != loop_thread
    assert plan["item_count"] >= 2 * 6 * 400 and plan["items_truncated"] is True
    assert len(plan["items"]) == PLAN_ITEMS_SHOWN
    assert [tuple(s) for s in plan["short_cells"]] == [(4, 3), (8, 3), (16, 3), (32, 3)]
    request = CampaignRequest(name="", profiles=(A, B), concurrencies=(1, 2, 4, 8, 16, 32), repeats=400,
                              spec={"num_prompts": 3}, policy="abba")
    preview = campaign_preview(request, plan)
    assert preview.items == plan["item_count"] and preview.short_cells == ((4, 3), (8, 3), (16, 3), (32, 3))
