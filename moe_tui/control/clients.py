"""The two ControlClients: host a controller in this process, or attach to a detached runner.

- `InProcessClient`: a `controller.Controller` on its own asyncio loop thread (`LoopThread`);
  commands go through `Controller.call(op, ...)`, the same op names the runner serves, so both
  clients speak one vocabulary. Quitting shuts the controller down (servers stopped or left).
- `AttachedClient`: a `runner.RunnerClient` on a loop thread; events stream from the socket;
  quitting only detaches (or asks the runner to stop its servers).

Both read the queue, runs and comparisons straight from the store (`StoreReads`). No Textual.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moe_tui.control.api import CampaignPreview, CampaignRequest, ControlClient, ControlSnapshot
from moe_tui.control.loop_thread import LoopThread
from moe_tui.control.reads import StoreReads, campaign_args, campaign_preview
from moe_tui.events import Event, Notice, Subscribers
from moe_tui.judgement import FAILED, is_live
from moe_tui.profiles import ServerProfile
from moe_tui.records import CampaignAddedJson, CampaignArgsJson, Options, RunnerStatusJson
from moe_tui.run.rendezvous import read_runner_info
from moe_tui.store.db import Store

# A server start waits for /health_generate; the profile's own startup timeout bounds it.
COMMAND_TIMEOUT_S = 60.0
# A stopping runner interrupts its benchmark and stops every server (SIGTERM, grace, SIGKILL).
RUNNER_STOP_WAIT_S = 90.0
# Log lines a freshly attached TUI shows per running server before new ones stream in.
ATTACH_LOG_LINES = 200


def _plan_args(request: CampaignRequest) -> CampaignArgsJson:
    """The plan_campaign op's arguments: add_campaign's without the name (a plan has its default one)."""
    args = campaign_args(request)
    args.pop("name", None)
    return args


def _snapshot(reads: StoreReads, snap: RunnerStatusJson) -> ControlSnapshot:
    item = snap.get("current_item")
    current = item["id"] if item else None
    queue = snap.get("queue")
    servers = reads.server_rows(snap.get("servers") or ())
    # A TUI that attaches mid-campaign has missed the log lines streamed so far: the servers' log
    # files (named in the store) fill the tails; new lines then arrive as events.
    logs = {row.profile: tuple(reads.log_lines(row.profile, ATTACH_LOG_LINES))
            for row in servers if is_live(row.state) or row.state == FAILED}
    return ControlSnapshot(
        servers=servers,
        logs={k: v for k, v in logs.items() if v},
        queue=reads.queue_window(current=current),
        activity=snap.get("activity") or "idle",
        detail=snap.get("detail") or "",
        paused=bool(queue and queue.get("paused")),
        current_item=current,
        telemetry=snap.get("telemetry"),
        notices=tuple(n for n in (reads.store.size_notice(),) if n),
    )


class _OpsClient(StoreReads, ControlClient):
    """Commands as controller op names (`controller.OPS`): the same words in-process and remote."""

    _subs: Subscribers[Event]

    def _op(self, op: str, timeout: float | None = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        raise NotImplementedError

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        return self._subs.add(callback)

    def snapshot(self) -> ControlSnapshot:
        return _snapshot(self, self._op("snapshot"))

    def restart_counts(self, request: CampaignRequest) -> dict[str, int]:
        return dict(self._op("plan_campaign", **_plan_args(request))["server_starts"])

    def campaign_preview(self, request: CampaignRequest) -> CampaignPreview:
        plan = self._op("plan_campaign", **_plan_args(request))
        return campaign_preview(request, plan)

    def start_server(self, profile: str) -> None:
        self._op("start_server", timeout=None, name=profile)

    def stop_server(self, profile: str) -> None:
        self._op("stop_server", timeout=None, name=profile)

    def pause(self) -> None:
        self._op("pause")

    def resume(self) -> None:
        self._op("resume")

    def skip(self) -> None:
        self._op("skip_current")

    def retry(self, item_id: int) -> None:
        self._op("retry_item", item_id=item_id)

    def cancel(self, item_id: int) -> None:
        self._op("cancel_item", item_id=item_id)

    def delete(self, item_id: int) -> None:
        self._op("delete_item", item_id=item_id)

    def move(self, item_id: int, direction: str) -> None:
        self._op("move_item", item_id=item_id, direction=direction)

    def add_campaign(self, request: CampaignRequest) -> int:
        result = self._op("add_campaign", **campaign_args(request))
        return len(result.get("item_ids") or ())

    def queue_investigation(self, plan: Any) -> CampaignAddedJson:
        added: CampaignAddedJson = self._op("add_investigation", plan=plan.to_dict())  # the controller's add_investigation
        return added

    def queue_explain(self, baseline: str, candidate: str, concurrency: int) -> CampaignAddedJson:
        added: CampaignAddedJson = self._op("add_explain", plan=self.explain_plan(baseline, candidate, concurrency))
        return added


class InProcessClient(_OpsClient):
    mode = "in-process controller"
    can_detach = False

    def __init__(self, store: Store, profiles: list[ServerProfile], profiles_dir: Path, data_dir: Path,
                 *, exports_dir: Path | None = None, controller_options: Options | None = None) -> None:
        from moe_tui.run.controller import Controller

        self.store = store
        self.profiles = profiles
        self.exports_dir = exports_dir
        self.data_dir = data_dir
        self._subs = Subscribers("control client events")
        self._loop = LoopThread("moe-tui-controller")
        self.controller = Controller(store, profiles_dir, data_dir=data_dir, **(controller_options or {}))
        self.controller.subscribe(self._subs.emit)
        self._started = False

    def start(self) -> None:
        """Take the runner lock and start working the queue (raises runner.RunnerBusy)."""
        self._loop.run(self.controller.start(work=True), timeout=COMMAND_TIMEOUT_S)
        self._started = True

    def _op(self, op: str, timeout: float | None = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        return self._loop.run(self.controller.call(op, **args), timeout)

    def shutdown(self, stop_servers: bool) -> None:
        if self._started:
            self._loop.run(self.controller.shutdown("the TUI quit", stop_servers=stop_servers), timeout=120)
            self._started = False
        self._loop.stop()

    def close(self) -> None:
        """Stop the controller and its servers (tests and scripts)."""
        self.shutdown(stop_servers=True)


class AttachedClient(_OpsClient):
    can_detach = True

    def __init__(self, store: Store, profiles: list[ServerProfile], data_dir: Path,
                 *, exports_dir: Path | None = None) -> None:
        self.store = store
        self.profiles = profiles
        self.exports_dir = exports_dir
        self.runner_dir = self.data_dir = data_dir
        self._subs = Subscribers("control client events")
        self._loop = LoopThread("moe-tui-runner-client")
        self._client: Any = None
        self._pump: Any = None
        self._closing = False
        self.mode = "attached to runner"

    def start(self) -> None:
        from moe_tui.run.client import RunnerClient

        async def connect() -> Any:
            client = await RunnerClient.connect(self.runner_dir)
            await client.subscribe()
            self._pump = asyncio.get_running_loop().create_task(self._forward(client))
            return client

        self._client = self._loop.run(connect(), timeout=10)
        info = read_runner_info(self.runner_dir) or {}
        self.mode = f"attached to runner pid {info.get('pid', '?')}"

    async def _forward(self, client: Any) -> None:
        async for event in client.events():
            self._subs.emit(event)
        if self._closing:
            return  # we hung up (or asked the runner to stop): not news
        self._subs.emit(Notice(level="error", message="the runner closed the connection: "
                                                      "commands will fail until you restart the TUI"))

    def _op(self, op: str, timeout: float | None = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        if self._client is None:
            raise RuntimeError("not attached to a runner")
        return self._loop.run(self._client.call(op, timeout=timeout, **args), None if timeout is None else timeout + 5)

    def shutdown(self, stop_servers: bool) -> None:
        """Detach, leaving the runner at work; or (`stop_servers`) stop the runner itself, which
        stops the running benchmark (its item marked interrupted) and every server, and wait until
        it has exited so nothing it started outlives this call."""
        from moe_tui.run.rendezvous import RunnerUnavailable, runner_is_running

        if self._client is not None:
            self._closing = True
            if stop_servers:
                try:
                    self._op("shutdown", reason="the TUI quit with 'stop servers and runner'")
                except RunnerUnavailable:
                    if runner_is_running(self.runner_dir):
                        raise  # alive but not answering: say so rather than pretend it stopped
                    # the runner is already gone (it crashed or was stopped elsewhere): nothing to stop
            client, self._client = self._client, None
            self._loop.run(client.close(), timeout=10)
            if stop_servers:
                deadline = time.monotonic() + RUNNER_STOP_WAIT_S
                while runner_is_running(self.runner_dir) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if runner_is_running(self.runner_dir):
                    raise RuntimeError(f"the runner did not exit within {RUNNER_STOP_WAIT_S:.0f} s; "
                                       "stop it with `moe-tui run --stop`")
        self._loop.stop()

    def close(self) -> None:
        """Detach without stopping anything (tests and scripts)."""
        self.shutdown(stop_servers=False)
