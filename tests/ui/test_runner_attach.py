"""The App attached to a LIVE detached runner (the default mode), on fast emulator profiles.

`open_control_room` with no mode starts `moe-tui run --detach --stay` for the test's data dir and
attaches over the Unix socket; a one-item campaign then runs in the runner process and its
progress, result and server log lines must reach the widgets through the event stream. Quitting
with "stop servers and runner" must leave no runner and no emulator behind.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import Static

from moe_tui.control import CampaignRequest
from moe_tui.ui.screens.quit import QuitScreen
from moe_tui.ui.widgets.queue_summary import QueueSummary
from tests.runner_support import scaled, wait_gone
from tests.support.pilot import plain
from tests.ui.waiting import until

pytestmark = pytest.mark.integration  # starts real processes

SMALL_SPEC = {"input_len": 32, "output_len": 8, "num_prompts": 8, "range_ratio": 1.0, "seed": 1}



@pytest.mark.slow
def test_app_attached_to_live_runner_shows_progress_result_and_logs(env):
    from moe_tui.run.rendezvous import runner_is_running
    from moe_tui.ui.launch import open_control_room

    profile = env.profile("sim-a", "flashinfer_cutlass")
    room = open_control_room(env.profiles)
    assert room.started_runner and room.client.can_detach
    assert runner_is_running(env.data_dir) == room.started_runner  # a separate process owns the queue
    app = room.app
    seen: list[str] = []
    room.client.subscribe(lambda e: seen.append(type(e).__name__))

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.5)
            assert "attached to runner" in app.sub_title
            app.add_campaign(CampaignRequest(name="tiny", profiles=(profile,), concurrencies=(1,), repeats=1,
                                             spec=SMALL_SPEC, policy="grouped"))
            summary = app.screen.query_one(QueueSummary)
            await until(pilot, lambda: "1 done" in plain(summary), "the item done in the queue summary", 60)
            await pilot.pause(0.5)
            bench_head = plain(app.screen.query_one("#bench-head", Static))
            bench_stats = plain(app.screen.query_one("#bench-stats", Static))
            assert "run #" in bench_head and profile in bench_head, bench_head
            assert "SIMULATED" in bench_head
            assert "tok/s" in bench_stats or "last run" in bench_stats, bench_stats
            log_tail = plain(app.screen.query_one("#server-log-tail", Static))
            assert f"{profile}:" in log_tail and "no server log lines yet" not in log_tail, log_tail
            assert "RunFinished" in seen and "BenchProgress" in seen and "ServerLogLine" in seen
            # Stop servers and runner: the app exits once the runner is gone.
            await pilot.press("q")
            await until(pilot, lambda: isinstance(app.screen, QuitScreen), "the quit dialog", 5)
            await pilot.press("s")
            await until(pilot, lambda: not app.is_running, "the app to exit", 60)

    try:
        asyncio.run(drive())
    finally:
        if runner_is_running(env.data_dir):
            room.client.close()
    assert runner_is_running(env.data_dir) is None
    assert env.query("SELECT state FROM queue_items") == [("done",)]
    assert env.query("SELECT COUNT(*) FROM runs WHERE status = 'complete'") == [(1,)]
    wait_gone(env)


def test_runner_started_by_the_tui_gets_the_timeouts_given_to_the_tui(env):
    """`moe-tui --stall-timeout 7 --request-timeout 90` starts its runner with the same settings."""
    import psutil

    from moe_tui.control.launch import start_detached_runner
    from moe_tui.run.client import call_runner_sync

    env.profile("sim-a", "flashinfer_cutlass")
    pid = start_detached_runner(env.profiles, env.data_dir,
                                options={"stall_timeout_s": 7, "request_timeout_s": 90})
    try:
        cmd = psutil.Process(pid).cmdline()
        assert cmd[cmd.index("--stall-timeout") + 1] == "7.0"
        assert cmd[cmd.index("--request-timeout") + 1] == "90.0"
    finally:
        call_runner_sync("shutdown", env.data_dir)
    deadline = time.monotonic() + scaled(20)
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "runner did not stop"
        time.sleep(0.1)
