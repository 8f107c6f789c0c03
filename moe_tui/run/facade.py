"""The controller's queue facade (a part of `moe_tui.run.controller.Controller`): campaigns and item edits,
forwarded to `run.ops.QueueOps`.

Planning never runs on the controller's loop (issue 34): that loop also drives the benchmark in flight,
and a plan of the largest campaign the bounds allow (`run.bounds`, 999,424 items) takes seconds to
build. `plan_campaign` builds it in a worker thread and answers with at most `PLAN_ITEMS_SHOWN` items
(the counts and the short cells are over all of them), so neither the loop nor the control socket
carries a million items.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from moe_tui.run.ops import QueueOps

PLAN_ITEMS_SHOWN = 2000  # items listed in a plan's answer; `item_count` says how many there are


def capped_plan(plan: dict[str, Any], shown: int = PLAN_ITEMS_SHOWN) -> dict[str, Any]:
    """`plan` (QueueOps.plan_campaign's answer) with its items listed up to `shown`, their count and the
    cells whose prompts are fewer than their concurrency (over every item) beside them."""
    items = plan["items"]
    short = sorted({(int(i["concurrency"]), int(i["num_prompts"])) for i in items
                    if int(i["num_prompts"]) < int(i["concurrency"])})
    return {**plan, "items": items[:shown], "item_count": len(items), "items_truncated": len(items) > shown,
            "short_cells": [list(c) for c in short]}


class QueueFacade:
    """Campaigns and queue edits of the controller (mixed into Controller, which sets `_ops`)."""

    _ops: QueueOps

    async def plan_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                            spec: dict[str, Any] | None = None, policy: str = "abba",
                            prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                            control: bool = True) -> dict[str, Any]:
        """What adding the campaign would queue (items, control, server starts per policy), built off the loop."""
        profiles, concurrencies = list(profiles), list(concurrencies)

        def plan() -> dict[str, Any]:
            return capped_plan(self._ops.plan_campaign(profiles, concurrencies, repeats, spec, policy,
                                                       prompts_per_concurrency, warmup_pass, control))

        return await asyncio.to_thread(plan)

    def add_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                     spec: dict[str, Any] | None = None, policy: str = "abba",
                     prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                     name: str | None = None, control: bool = True) -> dict[str, Any]:
        return self._ops.add_campaign(profiles, concurrencies, repeats, spec, policy, prompts_per_concurrency,
                                      warmup_pass, name, control)

    def add_investigation(self, plan: dict[str, Any]) -> dict[str, Any]:
        return self._ops.add_investigation(plan)

    def add_explain(self, plan: dict[str, Any]) -> dict[str, Any]:
        return self._ops.add_explain(plan)

    def queue_items(self, states: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return self._ops.queue_items(states)

    def move_item(self, item_id: int, direction: str) -> dict[str, Any]:
        return self._ops.move_item(item_id, direction)

    def skip_item(self, item_id: int) -> dict[str, Any]:
        return self._ops.skip_item(item_id)

    def cancel_item(self, item_id: int) -> dict[str, Any]:
        return self._ops.cancel_item(item_id)

    def retry_item(self, item_id: int) -> dict[str, Any]:
        return self._ops.retry_item(item_id)

    def delete_item(self, item_id: int) -> dict[str, Any]:
        return self._ops.delete_item(item_id)

    def clear_queue(self, finished_only: bool = False) -> int:
        return self._ops.clear_queue(finished_only)
