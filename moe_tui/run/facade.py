"""The controller's queue facade (a part of `moe_tui.run.controller.Controller`): campaigns and item edits,
forwarded to `run.ops.QueueOps`.

Planning never runs on the controller's loop (issue 34): that loop also drives the benchmark in flight,
and a plan of the largest campaign the bounds allow (`run.bounds`, a million items) takes seconds to
build. `plan_campaign` checks the profile names on the loop, then builds the plan in a worker: a thread
for the form's usual sizes (up to `PLAN_IN_THREAD_MAX` items, milliseconds of work), a process of its
own above (a thread would hold the GIL the loop needs for seconds: the loop's lag p99 grew by 30 ms
during a 100k plan, benches/plan_stall.py), and answers with at most `PLAN_ITEMS_SHOWN` items (the count and the short cells are over all of
them), so neither the loop nor the control socket carries a million items. `add_campaign` from the control
channel builds its plan and writes its items in a worker thread too (`add_campaign_off_loop`).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

from moe_tui.records import (
    CampaignAddedJson,
    CappedPlanJson,
    DeletedJson,
    FreeForm,
    ItemStateJson,
    PlanAnswerJson,
    QueueItemJson,
    SpecOverrides,
)
from moe_tui.run.ops import PlanArgs, QueueOps, plan_answer

PLAN_ITEMS_SHOWN = 2000  # items listed in a plan's answer; `item_count` says how many there are
PLAN_IN_THREAD_MAX = 5000  # profiles x concurrencies x repeats up to which a thread builds the plan


def capped_plan(plan: PlanAnswerJson, shown: int = PLAN_ITEMS_SHOWN) -> CappedPlanJson:
    """`plan` (QueueOps.plan_campaign's answer) with its items listed up to `shown`, their count and the
    cells whose prompts are fewer than their concurrency (over every item) beside them."""
    items = plan["items"]
    short = sorted({(int(i["concurrency"]), int(i["num_prompts"])) for i in items
                    if int(i["num_prompts"]) < int(i["concurrency"])})
    return {"name": plan["name"], "definition": plan["definition"], "control": plan["control"],
            "server_starts": plan["server_starts"], "items": items[:shown], "item_count": len(items),
            "items_truncated": len(items) > shown, "short_cells": [list(c) for c in short]}


def plan_in_worker(args: PlanArgs) -> CappedPlanJson:
    """The capped answer, built in a worker thread or the planner process (`planner_pid` says which)."""
    answer = capped_plan(plan_answer(**args))
    answer["planner_pid"] = os.getpid()
    return answer


class QueueFacade:
    """Campaigns and queue edits of the controller (mixed into Controller, which sets `_ops`)."""

    _ops: QueueOps
    _planner: ProcessPoolExecutor | None = None

    def close_planner(self) -> None:
        """Stop the planner process (the controller's shutdown)."""
        if self._planner is not None:
            self._planner.shutdown(wait=False, cancel_futures=True)
            self._planner = None

    async def plan_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                            spec: SpecOverrides | None = None, policy: str = "abba",
                            prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                            control: bool = True) -> CappedPlanJson:
        """What adding the campaign would queue (items, control, server starts per policy), built in the
        planner process (started on first use, spawned: never a fork of a process with threads)."""
        args = self._ops.plan_args(list(profiles), concurrencies, repeats, spec, policy, prompts_per_concurrency,
                                   warmup_pass, control)
        if len(args["profiles"]) * len(args["concurrencies"]) * max(1, int(repeats)) <= PLAN_IN_THREAD_MAX:
            return await asyncio.to_thread(plan_in_worker, args)
        if self._planner is None:
            self._planner = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        answer: CappedPlanJson = await asyncio.get_running_loop().run_in_executor(self._planner, plan_in_worker, args)
        return answer

    def add_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                     spec: SpecOverrides | None = None, policy: str = "abba",
                     prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                     name: str | None = None, control: bool = True) -> CampaignAddedJson:
        """Queue a campaign here and now (in-process callers: scripts, tests); the control channel's
        `add_campaign` op is `add_campaign_off_loop`."""
        return self._ops.add_campaign(profiles, concurrencies, repeats, spec, policy, prompts_per_concurrency,
                                      warmup_pass, name, control)

    async def add_campaign_off_loop(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                                    spec: SpecOverrides | None = None, policy: str = "abba",
                                    prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                                    name: str | None = None, control: bool = True) -> CampaignAddedJson:
        """`add_campaign` as the TUI and the control socket send it (issue 34): the plan built and its items
        written in a worker thread, so the loop that drives the benchmark in flight goes on beating (the
        store's writes are serialised by its own lock; the queue's change event reaches the loop
        thread-safely, `RunContext.emit`)."""
        answer: CampaignAddedJson = await asyncio.to_thread(
            self._ops.add_campaign, list(profiles), list(concurrencies), repeats, spec, policy,
            prompts_per_concurrency, warmup_pass, name, control)
        return answer

    def add_investigation(self, plan: FreeForm) -> CampaignAddedJson:
        return self._ops.add_investigation(plan)

    def add_explain(self, plan: FreeForm) -> CampaignAddedJson:
        return self._ops.add_explain(plan)

    def queue_items(self, states: Iterable[str] | None = None) -> list[QueueItemJson]:
        return self._ops.queue_items(states)

    def move_item(self, item_id: int, direction: str) -> QueueItemJson:
        return self._ops.move_item(item_id, direction)

    def skip_item(self, item_id: int) -> QueueItemJson | ItemStateJson:
        return self._ops.skip_item(item_id)

    def cancel_item(self, item_id: int) -> QueueItemJson | ItemStateJson:
        return self._ops.cancel_item(item_id)

    def retry_item(self, item_id: int) -> QueueItemJson:
        return self._ops.retry_item(item_id)

    def delete_item(self, item_id: int) -> DeletedJson:
        return self._ops.delete_item(item_id)

    def clear_queue(self, finished_only: bool = False) -> int:
        return self._ops.clear_queue(finished_only)
