"""Planning off the runner's loop (issue 34 part 4): `plan_campaign` is built in a worker process, so the
loop that drives a benchmark keeps its pace (and its GIL), and its answer lists a capped number of items
with the count and the short cells over all of them (a campaign at the size limit does not cross the
socket whole): the same plan the op built on the loop before."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from moe_tui.control.api import CampaignRequest
from moe_tui.control.reads import campaign_preview
from moe_tui.run.controller import Controller
from moe_tui.run.facade import PLAN_ITEMS_SHOWN, capped_plan
from moe_tui.store.db import Store

DEMO = Path(__file__).resolve().parent.parent / "server_profiles" / "demo"
A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


@pytest.mark.integration  # the planner is a process of its own
def test_a_large_plan_is_built_off_the_loop_and_answered_capped(tmp_path):
    concs = [1, 2, 4, 8, 16, 32]
    args = {"profiles": [A, B], "concurrencies": concs, "repeats": 500, "spec": {"num_prompts": 3}}  # 6000 items
    with Store(tmp_path / "s.sqlite3") as store:
        c = Controller(store, DEMO, data_dir=tmp_path, telemetry=False, use_lock=False)

        async def scenario():
            try:
                return await c.call("plan_campaign", **args)
            finally:
                await c.shutdown("test over")

        plan = asyncio.run(scenario())
        on_loop = capped_plan(c._ops.plan_campaign(**args))  # as the op built it before, capped alike
    assert plan.pop("planner_pid") != os.getpid()
    assert plan == on_loop
    assert plan["item_count"] >= 2 * 6 * 500 and plan["items_truncated"] is True
    assert len(plan["items"]) == PLAN_ITEMS_SHOWN
    assert [tuple(s) for s in plan["short_cells"]] == [(4, 3), (8, 3), (16, 3), (32, 3)]
    request = CampaignRequest(name="", profiles=(A, B), concurrencies=(1, 2, 4, 8, 16, 32), repeats=500,
                              spec={"num_prompts": 3}, policy="abba")
    preview = campaign_preview(request, plan)
    assert preview.items == plan["item_count"] and preview.short_cells == ((4, 3), (8, 3), (16, 3), (32, 3))


def test_a_small_plan_is_built_in_a_thread_of_this_process(tmp_path):
    with Store(tmp_path / "s.sqlite3") as store:
        c = Controller(store, DEMO, data_dir=tmp_path, telemetry=False, use_lock=False)
        plan = asyncio.run(c.call("plan_campaign", profiles=[A, B], concurrencies=[2, 64], repeats=3))
    assert plan["planner_pid"] == os.getpid() and plan["item_count"] == len(plan["items"]) >= 12
    assert plan["items_truncated"] is False and c._planner is None


def test_add_campaign_from_the_control_channel_writes_its_items_off_the_loop(tmp_path):
    """The `add_campaign` op (the TUI's form, the socket) plans and writes in a worker thread: the store's
    change listener fires on another thread than the loop's, and what it queued is what the op answers."""
    with Store(tmp_path / "s.sqlite3") as store:
        c = Controller(store, DEMO, data_dir=tmp_path, telemetry=False, use_lock=False)
        writers: list[int] = []
        c.queue.subscribe(lambda reason: writers.append(threading.get_ident()))

        async def scenario():
            added = await c.call("add_campaign", profiles=[A, B], concurrencies=[2, 64], repeats=2)
            return added, threading.get_ident()

        added, loop_thread = asyncio.run(scenario())
        queued = [i.id for i in c.queue.items()]
    assert writers and loop_thread not in writers
    assert added["item_ids"] == queued and len(queued) >= 8
