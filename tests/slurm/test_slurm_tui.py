"""The control room works a campaign through Slurm (issue 37's done-when: `moe-tui`, not only `moe-tui run
--executor slurm`). The dispatcher is hosted by the runner (`moe_tui.run.batch`): `run --executor slurm
--detach` serves the same control socket as a local runner, so the TUI attaches to it, queues a campaign
from its own form's request, shows the items done as Slurm jobs ran them (the Queue screen's Job column
names each job and node), and its Compare grid holds the runs the jobs measured on their nodes."""

from __future__ import annotations

import asyncio
import time

import pytest

from moe_tui.control import CampaignRequest
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.widgets.queue_summary import QueueSummary
from tests.runner_support import scaled
from tests.slurm.support import job_env, leftovers

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

SPEC = {"input_len": 64, "output_len": 32, "num_prompts": 8, "range_ratio": 1.0, "seed": 1}


async def _until(pilot, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.3)
    raise AssertionError(f"timed out after {scaled(timeout):.0f} s waiting for {what}")


SLURM_ARGS = ("--executor", "slurm", "--gpus", "exclusive", "--node-blocks", "node1,node2")


@pytest.mark.parametrize("started_by", ["moe-tui --executor slurm", "moe-tui run --executor slurm --detach"])
def test_the_tui_attached_to_a_slurm_runner_works_a_campaign_as_jobs(env, slurm_idle, monkeypatch, started_by):
    import psutil

    from moe_tui.cli import build_parser
    from moe_tui.commands.tui import controller_options_from
    from moe_tui.run.client import call_runner_sync
    from moe_tui.run.rendezvous import runner_is_running
    from moe_tui.ui.launch import open_control_room

    base = env.profile("base", "flashinfer_cutlass", time_scale=20)
    cand = env.profile("cand", "flashinfer_cutedsl", time_scale=20)
    for key, value in job_env(slurm_idle, env.home / "nodes").items():
        env.env[key] = value
        monkeypatch.setenv(key, value)  # the runner the TUI starts inherits this process's environment
    if started_by.startswith("moe-tui run"):  # started by hand, then `moe-tui` attaches to it
        started = env.run("run", "--detach", "--stay", *SLURM_ARGS, "--profiles-dir", str(env.profiles))
        assert started.returncode == 0 and "attach with" in started.stdout, started.stdout
        room = open_control_room(env.profiles)
        assert not room.started_runner  # attached to the Slurm-working runner, not a local one of its own
    else:  # the TUI starts its runner as a Slurm dispatcher (the command line parsed as `moe-tui` parses it)
        args = build_parser(only="tui").parse_args(["tui", *SLURM_ARGS, "--profiles-dir", str(env.profiles)])
        room = open_control_room(env.profiles, controller_options=controller_options_from(args))
        assert room.started_runner
        cmd = psutil.Process(room.started_runner).cmdline()
        assert cmd[cmd.index("--executor") + 1] == "slurm" and "node1,node2" in cmd, cmd
    app = room.app

    async def drive() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.5)
            assert "attached to runner" in app.sub_title
            app.add_campaign(CampaignRequest(name="via slurm", profiles=(base, cand), concurrencies=(8,), repeats=2,
                                             spec=SPEC, policy="interleaved"))
            summary = app.screen.query_one(QueueSummary)
            # 2 profiles x 2 repeats x (8 and the control at 2): 8 items, in 4 jobs (a sweep each)
            await _until(pilot, lambda: "8 done" in str(summary.render()), 240, "8 items done in the queue summary")
            await pilot.press("3")
            await _until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.grid is not None
                         and any(c.baseline.n and c.candidate.n for c in app.screen.grid.cells), 30,
                         "the Compare grid with both sides' runs")
            grid = app.screen.grid
            cell = grid.cell(8, "output_throughput")
            assert cell.baseline.n == 2 and cell.candidate.n == 2, cell
            assert cell.control_starts == (2, 2), cell  # each sweep's cell against its control on its own start

    try:
        asyncio.run(drive())
    finally:
        if runner_is_running(env.data_dir):
            call_runner_sync("shutdown", env.data_dir)
        room.client.close()
    jobs = env.query("SELECT COUNT(DISTINCT job_id), COUNT(*) FROM executor_jobs WHERE outcome = 'imported'")
    assert jobs[0][0] == 4, jobs
    hosts = env.query("SELECT DISTINCT json_extract(provenance_json, '$.host.hostname') FROM runs")
    assert {h for (h,) in hosts} == {"node1", "node2"}, hosts
    assert env.query("SELECT DISTINCT state FROM queue_items") == [("done",)]
    deadline = time.monotonic() + scaled(30)
    while (runner_is_running(env.data_dir) or leftovers(env.home)) and time.monotonic() < deadline:
        time.sleep(0.2)  # the runner releases its lock, then exits
    assert not runner_is_running(env.data_dir)
    assert leftovers(env.home) == []
