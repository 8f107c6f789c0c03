"""Controller facade ops on the queue, and start-up recovery (parts of `moe_tui.run.controller.Controller`,
each made with the controller's `moe_tui.run.context.RunContext`).

`QueueOps`: plan and add campaigns, list and edit items, skip or cancel the running one (what the
TUI and the control socket call). `Recovery`: at start, spilled runs are stored, a dead runner's
orphans stopped, items and runs left `running` marked, servers recorded live outside this
controller reported (and stopped when the queue next needs the GPUs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, TypedDict

from moe_tui.judgement import LIVE_STATES
from moe_tui.records import (
    CampaignAddedJson,
    DeletedJson,
    FreeForm,
    ItemStateJson,
    PlanAnswerJson,
    QueueItemJson,
    ServerStartRow,
    SpecOverrides,
)
from moe_tui.run.context import RunContext
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.queue import CampaignPlan


class ControllerError(RuntimeError):
    """A controller operation was refused; the message says why."""


def make_plan(profiles: list[str], concurrencies: list[int], repeats: int, spec: SpecOverrides | None, policy: str,
              prompts_per_concurrency: int | None, warmup_pass: bool, control: bool,
              profiles_dir: str | None) -> CampaignPlan:
    from moe_tui.run.bounds import check_campaign_size

    check_campaign_size(len(profiles), len(concurrencies), int(repeats))  # before any item is built
    base = BenchmarkSpec.from_dict(spec or {}, "campaign spec")
    return CampaignPlan(profiles=tuple(profiles), concurrencies=tuple(int(c) for c in concurrencies),
                        repeats=int(repeats), base_spec=base, policy=policy,
                        prompts_per_concurrency=prompts_per_concurrency, warmup_pass=warmup_pass,
                        profiles_dir=profiles_dir, control=control)


class PlanArgs(TypedDict):
    """`plan_answer`'s arguments: plain data, so a worker process builds the plan (moe_tui.run.facade)."""

    profiles: list[str]
    concurrencies: list[int]
    repeats: int
    spec: SpecOverrides | None
    policy: str
    prompts_per_concurrency: int | None
    warmup_pass: bool
    control: bool
    profiles_dir: str | None
    running: str | None  # the profile whose server is up now (the policy's first start may be free)


def plan_answer(*, running: str | None, **args: Any) -> PlanAnswerJson:
    """The plan_campaign op's answer: name, definition, control, server starts per policy, every item."""
    plan = make_plan(**args)
    return {
        "name": plan.default_name(),
        "definition": plan.definition(),
        "control": plan.control_plan(),
        "server_starts": plan.start_costs(running),
        "items": [{"profile_name": p.profile_name, "concurrency": p.spec.max_concurrency,
                   "num_prompts": p.spec.num_prompts, "repeat_index": p.repeat_index,
                   "fingerprint": p.spec.fingerprint} for p in plan.items()],
    }


class QueueOps:
    """Campaigns and queue edits."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self.queue = ctx.queue

    def _profiles_dir(self) -> str | None:
        return str(self._ctx.profiles_dir.resolve()) if self._ctx.profiles_dir else None

    def _plan(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
              spec: SpecOverrides | None = None, policy: str = "abba",
              prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
              control: bool = True) -> CampaignPlan:
        return make_plan(list(profiles), list(concurrencies), repeats, spec, policy, prompts_per_concurrency,
                         warmup_pass, control, self._profiles_dir())

    def _check_profiles(self, names: Iterable[str]) -> None:
        known = self._ctx.profiles()
        for name in names:
            try:
                known.by_name(name)
            except KeyError as exc:
                raise ControllerError(exc.args[0]) from None

    def plan_args(self, profiles: list[str], concurrencies: Iterable[int], repeats: int = 1,
                  spec: SpecOverrides | None = None, policy: str = "abba",
                  prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                  control: bool = True) -> PlanArgs:
        """`plan_answer`'s arguments for a campaign of known profiles (plain data: a worker process builds it)."""
        self._check_profiles(profiles)
        running = next((s.name for s in self._ctx.servers.live() if s.state == "ready"), None)
        return {"profiles": profiles, "concurrencies": list(concurrencies), "repeats": repeats, "spec": spec,
                "policy": policy, "prompts_per_concurrency": prompts_per_concurrency, "warmup_pass": warmup_pass,
                "control": control, "profiles_dir": self._profiles_dir(), "running": running}

    def plan_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                      spec: SpecOverrides | None = None, policy: str = "abba",
                      prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                      control: bool = True) -> PlanAnswerJson:
        return plan_answer(**self.plan_args(list(profiles), concurrencies, repeats, spec, policy,
                                            prompts_per_concurrency, warmup_pass, control))

    def add_campaign(self, profiles: Iterable[str], concurrencies: Iterable[int], repeats: int = 1,
                     spec: SpecOverrides | None = None, policy: str = "abba",
                     prompts_per_concurrency: int | None = None, warmup_pass: bool = True,
                     name: str | None = None, control: bool = True) -> CampaignAddedJson:
        profiles = list(profiles)
        self._check_profiles(profiles)
        plan = self._plan(profiles, concurrencies, repeats, spec, policy, prompts_per_concurrency, warmup_pass,
                          control)
        campaign_id, items = self.queue.add_campaign(plan, name)
        return {"campaign_id": campaign_id, "item_ids": [i.id for i in items],
                "server_starts": plan.start_costs()}

    def add_investigation(self, plan: FreeForm) -> CampaignAddedJson:
        """Queue an investigation plan (`moe_tui.investigate.model.InvestigationPlan.to_dict()`) as one
        campaign; its items run through the same queue as any other."""
        from moe_tui.investigate.store import enqueue_plan_dict

        profiles_dir = self._profiles_dir()
        self._check_profiles({i["profile"] for p in plan.get("proposals", ()) for i in p.get("items", ())})
        campaign_id, items = enqueue_plan_dict(self.queue, plan, profiles_dir=profiles_dir)
        return {"campaign_id": campaign_id, "item_ids": [i.id for i in items]}

    def add_explain(self, plan: FreeForm) -> CampaignAddedJson:
        """Queue an explain plan (`moe_tui.explain.store.plan_explain`): one profiled run a side."""
        from moe_tui.explain.store import enqueue_explain

        profiles_dir = self._profiles_dir()
        self._check_profiles({i["profile"] for i in plan.get("items", ())})
        campaign_id, items = enqueue_explain(self.queue, plan, profiles_dir=profiles_dir)
        return {"campaign_id": campaign_id, "item_ids": [i.id for i in items]}

    def queue_items(self, states: Iterable[str] | None = None) -> list[QueueItemJson]:
        return [i.to_dict() for i in self.queue.items(states)]

    def move_item(self, item_id: int, direction: str) -> QueueItemJson:
        return self.queue.move(item_id, direction).to_dict()

    def _is_current(self, item_id: int) -> bool:
        current = self._ctx.work.current
        return current is not None and current.id == int(item_id)

    def skip_item(self, item_id: int) -> QueueItemJson | ItemStateJson:
        if self._is_current(item_id):
            return self.skip_current()
        return self.queue.skip(item_id).to_dict()

    def cancel_item(self, item_id: int) -> QueueItemJson | ItemStateJson:
        if self._is_current(item_id):
            return self.cancel_current()
        return self.queue.cancel(item_id).to_dict()

    def skip_current(self) -> ItemStateJson:
        """Stop the running benchmark; the item becomes `skipped` (retry brings it back)."""
        item = self._ctx.work.current
        if not self._ctx.abort_current("skipped", "skipped by user while running"):
            raise ControllerError("nothing is running: no current item to skip")
        return {"item_id": item.id if item else None, "state": "skipped"}

    def cancel_current(self) -> ItemStateJson:
        item = self._ctx.work.current
        if not self._ctx.abort_current("cancelled", "cancelled by user while running"):
            raise ControllerError("nothing is running: no current item to cancel")
        return {"item_id": item.id if item else None, "state": "cancelled"}

    def retry_item(self, item_id: int) -> QueueItemJson:
        return self.queue.retry(item_id).to_dict()

    def delete_item(self, item_id: int) -> DeletedJson:
        self.queue.delete(item_id)
        return {"deleted": int(item_id)}

    def clear_queue(self, finished_only: bool = False) -> int:
        return self.queue.clear(finished_only=finished_only)


class Recovery:
    """What the controller does on start before working the queue (and, later, stray servers and
    rolling backups at its safe points)."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    async def recover(self, retry_interrupted: bool) -> None:
        for line in self._ctx.recorder.import_spilled():  # first: their items are still 'running'
            self._ctx.notice("warning", line)
        await self._sweep_orphans()
        interrupted = self._ctx.queue.recover_interrupted()
        stale_runs = self._ctx.store.mark_running_runs("incomplete", "interrupted: the runner stopped during this run")
        if interrupted or stale_runs:
            self._ctx.notice("warning", f"recovered from an earlier stop: {len(interrupted)} item(s) interrupted, "
                                         f"{stale_runs} partial run(s) kept as incomplete")
        # Servers recorded live that nobody here manages (a killed runner's, or started by hand
        # with `moe-tui server start`) are left alone until the queue needs the GPUs and ports:
        # `_ensure_server` stops them then. Say so now.
        from moe_tui.servers.manager import recorded_server_alive

        strays = []
        for start in self._stray_server_starts():
            if recorded_server_alive(start):
                strays.append(start)
            elif self._ctx.lock is not None:
                self._ctx.store.update_server_start(start["id"], state="stopped", stopped_at=time.time(),
                                                    reason="found gone when a new runner started")
        if strays:
            self._ctx.notice("warning", "server(s) running outside this controller: "
                             + ", ".join(f"{s['profile_name']} (pid {s['pid']})" for s in strays)
                             + "; they will be stopped when the queue needs the GPUs")
        if retry_interrupted:
            requeued = self._ctx.queue.retry_interrupted()
            if requeued:
                self._ctx.notice("info", f"requeued {len(requeued)} interrupted item(s): "
                                          + ", ".join(f"#{i}" for i in requeued))
        await self.backup_if_due()

    async def backup_if_due(self) -> None:
        """A safe point (recovered, nothing in flight): the store's one backup renewed if it is
        older than `store.backup.backup_every_s()` (a day; `moe-tui doctor --repair` restores it),
        in a thread, from a connection of its own (the store stays free for the runner)."""
        if self._ctx.lock is None:
            return
        from moe_tui.store.backup import backup_every_s, backup_store
        from moe_tui.store.errors import StoreError

        try:
            every = backup_every_s()
            taken = None if every is None else await asyncio.to_thread(
                backup_store, self._ctx.store, if_older_than_s=every)
        except StoreError as exc:
            self._ctx.notice("warning", str(exc))
            return
        if taken is not None:
            self._ctx.notice("info", taken.words())

    async def _sweep_orphans(self) -> None:
        """Stop what a dead runner of this data dir left (servers, benchmark children), found by
        the data-dir marker every runner puts in its children's environment; say which."""
        if self._ctx.lock is None:
            return  # not the lock holder: what runs may belong to the live runner
        from moe_tui.run.orphans import stop_orphans

        for line in await asyncio.to_thread(stop_orphans, self._ctx.data_dir):
            self._ctx.notice("warning", line)

    def _stray_server_starts(self) -> list[ServerStartRow]:
        """Server starts recorded live in the store that this controller does not manage."""
        ours = {s.start_id for s in self._ctx.servers.servers.values() if s.start_id is not None}
        live = self._ctx.store.server_start_ids_in_states(sorted(LIVE_STATES))
        starts = [self._ctx.store.server_start(start_id) for start_id in live if start_id not in ours]
        return [s for s in starts if s is not None]

    async def stop_stray_servers(self, why: str) -> None:
        """Stop servers recorded live that this controller does not manage (they hold the GPUs
        and ports the next start needs); rows of ones already gone are closed."""
        from moe_tui.servers.manager import recorded_server_alive, stop_recorded_server

        for start in self._stray_server_starts():
            start_id = start["id"]
            if recorded_server_alive(start):
                self._ctx.notice("warning", f"stopping server '{start['profile_name']}' (start #{start_id}, "
                                             f"pid {start['pid']}): {why}")
                report = await asyncio.to_thread(stop_recorded_server, start)
                reason = f"stopped by the controller ({why}); {report.describe()}"
            else:
                reason = f"found gone by the controller ({why})"
            self._ctx.store.update_server_start(start_id, state="stopped", reason=reason, stopped_at=time.time())
