"""A wedged server: `/health` answers 200 (SGLang 0.5.23 calls a server healthy as soon as anything
comes back from its scheduler) while every generate stream stays silent (the emulator's
`--sim-hang-after-tokens 0`). The item must end at the stall timeout, not at prompts x stall
timeout, and the next item must get a freshly started server, not the wedged one."""

from __future__ import annotations

import asyncio
import json

import pytest
from runner_support import wait_gone

SPEC = {"num_prompts": 6, "input_len": 32, "output_len": 8, "warmup_requests": 0}


@pytest.mark.integration
def test_wedged_server_is_restarted_after_the_stall_timeout(env):
    from moe_tui.run.controller import Controller
    from moe_tui.store.db import Store

    wedged = env.profile("sim-wedged", "flashinfer_cutlass", hang_after_tokens=0)

    async def scenario() -> list:
        env.data_dir.mkdir(parents=True, exist_ok=True)
        with Store(env.db) as store:
            c = Controller(store, env.profiles, data_dir=env.data_dir, telemetry=False, stall_timeout_s=1.0)
            c.add_campaign([wedged], [1], spec=SPEC, warmup_pass=False)
            c.add_campaign([wedged], [1], spec=SPEC, warmup_pass=False)
            await c.start(until_empty=True)
            await asyncio.wait_for(c.wait_idle(), 120)
            items = c.queue_items()
            await c.shutdown("test over")
            return items

    items = asyncio.run(scenario())
    assert [i["state"] for i in items] == ["failed", "failed"], items
    assert all("server wedged" in i["error"] for i in items), items
    starts = env.query("SELECT state, reason FROM server_starts ORDER BY id")
    # one start per item: the wedged server was stopped, not handed to the next item
    assert len(starts) == 2, starts
    assert "server wedged" in (starts[0][1] or ""), starts
    for (run_id,) in env.query("SELECT id FROM runs ORDER BY id"):
        stalled = [e for (e,) in env.query("SELECT error FROM requests WHERE run_id = ? AND ok = 0", (run_id,))
                   if "stall timeout" in (e or "")]
        # concurrency 1: without the watch each of the 6 prompts waits out its own stall timeout
        assert 1 <= len(stalled) < SPEC["num_prompts"], (run_id, stalled)
        (flags,) = env.query("SELECT flags_json FROM runs WHERE id = ?", (run_id,))[0]
        assert "incomplete" in json.loads(flags)
    wait_gone(env)
