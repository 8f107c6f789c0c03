"""The detached runner and its control channel: `moe-tui run --detach` starts a background runner
that owns the servers and the queue; `RunnerClient` attaches over the Unix socket, calls ops and
receives the event stream; a second runner is refused with a message naming the holder's pid;
SIGHUP leaves it running; `moe-tui run --stop` stops it and its servers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import time

import psutil
import pytest
from runner_support import Env, wait_for, wait_gone

from moe_tui.events import QueueChanged, RunFinished, RunStarted, ServerStateChanged
from moe_tui.run.client import RunnerClient, RunnerOpError

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def _attach_and_run_one_item(env: Env, profile: str) -> tuple[list, dict, dict]:
    client = await RunnerClient.connect(env.data_dir)
    events: list = []
    finished = asyncio.Event()

    async def listen() -> None:
        async for event in client.events():
            events.append(event)
            if isinstance(event, RunFinished):
                finished.set()

    listener = asyncio.create_task(listen())
    try:
        await client.subscribe()
        before = await client.call("snapshot")
        plan = await client.call("plan_campaign", profiles=[profile], concurrencies=[1, 2],
                                 spec={"num_prompts": 4, "input_len": 32, "output_len": 8})
        assert plan["server_starts"]["grouped"] == 1 and len(plan["items"]) == 2
        with pytest.raises(RunnerOpError, match="no profile named 'nope'"):
            await client.call("add_campaign", profiles=["nope"], concurrencies=[1])
        with pytest.raises(RunnerOpError, match="unknown op"):
            await client.call("rm_rf")
        added = await client.call("add_campaign", profiles=[profile], concurrencies=[1],
                                  spec={"num_prompts": 4, "input_len": 32, "output_len": 8},
                                  warmup_pass=False)
        assert len(added["item_ids"]) == 1
        await asyncio.wait_for(finished.wait(), 60)
        after = await client.call("snapshot")
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await client.close()
    return events, before, after


def test_detached_runner_attach_events_single_owner_sighup_stop(env):
    profile = env.profile("sim-a", "flashinfer_cutlass")
    started = env.run("run", "--detach", "--profiles-dir", str(env.profiles), timeout=60)
    assert started.returncode == 0, started.stdout
    info = json.loads((env.data_dir / "runner.json").read_text())
    pid = info["pid"]
    assert f"pid {pid}" in started.stdout
    runner = psutil.Process(pid)
    assert runner.is_running() and os.getsid(pid) != os.getsid(0)  # its own session
    mode = stat.S_IMODE(os.stat(info["socket"]).st_mode)
    assert mode == 0o600

    # One runner per data dir, in either form, with the holder named.
    second = env.run("run", "--detach", "--profiles-dir", str(env.profiles), timeout=30)
    assert second.returncode == 1 and f"pid {pid}" in second.stdout and "already owns" in second.stdout
    fg = env.run("run", "--profiles-dir", str(env.profiles), timeout=30)
    assert fg.returncode == 1 and f"pid {pid}" in fg.stdout

    events, before, after = asyncio.run(_attach_and_run_one_item(env, profile))
    assert before["pid"] == pid and before["activity"] in ("idle", "paused")
    kinds = [type(e) for e in events]
    assert QueueChanged in kinds and RunStarted in kinds and RunFinished in kinds
    ready = [e for e in events if isinstance(e, ServerStateChanged) and e.state == "ready"]
    assert ready and ready[0].profile == profile and ready[0].resolved_backend == "flashinfer_cutlass"
    result = next(e for e in events if isinstance(e, RunFinished))
    assert result.status == "complete" and result.output_throughput > 0 and "simulated" in result.flags
    assert after["queue"]["counts"]["done"] == 1
    assert after["last_finished"]["run_id"] == result.run_id
    assert [s["state"] for s in after["servers"]] == ["ready"]  # stays up for the next items

    # Edits from the CLI go through the runner while it runs.
    paused = env.run("queue", "pause")
    assert paused.returncode == 0 and "paused" in paused.stdout
    status = env.run("run", "--status", "--json")
    assert json.loads(status.stdout)["queue"]["paused"] is True
    assert "PAUSED" in env.run("run", "--status").stdout  # in words without --json

    # A dropped SSH session must not stop a campaign.
    os.kill(pid, signal.SIGHUP)
    time.sleep(0.5)
    assert runner.is_running() and runner.status() != psutil.STATUS_ZOMBIE
    assert env.run("run", "--status").returncode == 0

    stopped = env.run("run", "--stop", timeout=60)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    wait_for(lambda: not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE, 20, "runner exit")
    assert not (env.data_dir / "runner.json").exists()
    wait_gone(env)
    # The lock went with it: a new runner may start (and drains the now-empty queue at once).
    assert env.run("queue", "resume").returncode == 0
    assert env.run("run", "--profiles-dir", str(env.profiles), timeout=60).returncode == 0
