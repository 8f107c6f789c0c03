"""The Controller facade in-process (as the TUI uses it without a runner), against real emulator
servers: skip_current aborts the running benchmark cleanly and the queue moves on, pause takes
effect between items, `call` dispatches only known ops, snapshot is JSON, and the core modules
never import Textual."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from runner_support import Env, scaled, wait_gone

from moe_tui.events import ControllerStatus, RunFinished, RunStarted
from moe_tui.run.controller import Controller, ControllerError
from moe_tui.run.rendezvous import RunnerBusy, RunnerLock
from moe_tui.store.db import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]



def _controller(env: Env, store: Store) -> Controller:
    return Controller(store, env.profiles, data_dir=env.data_dir, telemetry=False)


async def _wait_event(events: list, kind: type, n: int = 1, timeout: float = 60) -> None:
    timeout = scaled(timeout)
    deadline = asyncio.get_running_loop().time() + timeout
    while sum(isinstance(e, kind) for e in events) < n:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {n} x {kind.__name__} within {timeout} s: {events[-5:]}")
        await asyncio.sleep(0.05)


def test_skip_current_and_pause_between_items(env):
    name = env.profile("sim-a", "flashinfer_cutlass")

    async def scenario() -> dict:
        env.data_dir.mkdir(parents=True, exist_ok=True)
        with Store(env.db) as store:
            c = _controller(env, store)
            events: list = []
            c.subscribe(events.append)
            await c.start(until_empty=False)
            with pytest.raises(RunnerBusy, match="already owns"):
                RunnerLock(env.data_dir).acquire()
            with pytest.raises(ControllerError, match="nothing is running"):
                c.skip_current()
            long = {"num_prompts": 400, "input_len": 32, "output_len": 64}
            c.add_campaign([name], [1], spec=long, warmup_pass=False)
            c.add_campaign([name], [2], repeats=2, spec={"num_prompts": 4, "input_len": 32, "output_len": 8},
                           warmup_pass=False)
            await _wait_event(events, RunStarted)
            json.dumps(c.snapshot())  # JSON-able while running
            assert c.snapshot()["current_item"]["id"] == 1
            c.pause()  # takes effect after the current item
            skipped = await c.call("skip_current")
            assert skipped == {"item_id": 1, "state": "skipped"}
            await _wait_event(events, RunFinished)
            await asyncio.sleep(1.0)
            paused_snapshot = c.snapshot()
            c.resume()
            await _wait_event(events, RunFinished, n=3)
            with pytest.raises(ControllerError, match="unknown op"):
                await c.call("shutdown_everything")
            with pytest.raises(ControllerError, match="op 'move_item'"):
                await c.call("move_item", item_id=1)
            final = c.snapshot()
            items = c.queue_items()
            await c.shutdown("test over")
            RunnerLock(env.data_dir).acquire().release()  # released on shutdown
            return {"events": events, "paused": paused_snapshot, "final": final, "items": items}

    result = asyncio.run(scenario())
    states = [i["state"] for i in result["items"]]
    assert states == ["skipped", "done", "done"]
    first = next(e for e in result["events"] if isinstance(e, RunFinished))
    assert first.queue_item_id == 1 and first.status in ("incomplete", "failed") and "incomplete" in first.flags
    # While paused nothing else started: only the skipped run had begun.
    assert result["paused"]["activity"] == "paused"
    assert result["paused"]["queue"]["counts"]["pending"] == 2
    assert any(isinstance(e, ControllerStatus) and e.activity == "paused" for e in result["events"])
    assert result["final"]["session"]["done"] == 2 and result["final"]["session"]["skipped"] == 1
    wait_gone(env)


def test_core_modules_do_not_import_textual():
    code = ("import sys, moe_tui.run.controller, moe_tui.run.runner, moe_tui.store.queue, moe_tui.provenance, "
            "moe_tui.commands.queue, moe_tui.commands.run; "
            "assert 'textual' not in sys.modules, 'textual imported'")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
