"""`python tools/screenshot_slurm.py`: screenshots/queue-slurm.svg, the Queue screen of a campaign worked
through Slurm, from a real run.

Starts the Slurm test tier's two-node cluster on this host (`tests/slurm/cluster.py`: needs root and
the packages `slurmctld slurmd slurm-client munge`), writes two emulator profiles in a throwaway data
home, and opens the control room as `moe-tui --executor slurm --gpus exclusive --node-blocks
node1,node2` does (a detached runner hosting the Slurm dispatcher, the App attached to it). It queues
a small interleaved campaign from the App, opens the Queue screen and saves it once the queue shows
jobs that finished and jobs still in Slurm's hands (job id, node and Slurm state in the Job column).
Nothing is drawn by hand. Stops the runner and the cluster, whatever happens. About two minutes.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
SIZE = (120, 40)
WAIT_S = 300.0
SLURM_ARGS = ("--executor", "slurm", "--gpus", "exclusive", "--node-blocks", "node1,node2")
SPEC = {"input_len": 64, "output_len": 32, "num_prompts": 16, "range_ratio": 1.0, "seed": 1}


async def shoot(app, campaign) -> int:
    from moe_tui.ui.screens.queue import QueueScreen
    from moe_tui.ui.widgets.queue_summary import QueueSummary

    started = time.monotonic()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.0)
        app.add_campaign(campaign)
        await pilot.pause(1.0)
        await pilot.press("2")
        # Wanted on screen: items done by their jobs and an item whose job Slurm still runs.
        while True:
            summaries = app.screen.query(QueueSummary) if isinstance(app.screen, QueueScreen) else []
            text = str(summaries.first().render()) if summaries else ""
            if "done" in text and "running" in text:
                break
            if time.monotonic() - started > WAIT_S:
                print(f"screenshot_slurm: no finished and running items in {WAIT_S:.0f} s: {text}", file=sys.stderr)
                return 1
            await pilot.pause(0.5)
        await pilot.pause(2.0)  # a poll of the jobs' Slurm states after the last change
        OUT.mkdir(exist_ok=True)
        app.save_screenshot(str(OUT / "queue-slurm.svg"))
        print(f"  screenshots/queue-slurm.svg  ({time.monotonic() - started:.0f} s)")
    return 0


def main() -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import os

    from runner_support import Env

    from tests.slurm import cluster as slurm_cluster
    from tests.slurm.support import job_env

    lacking = slurm_cluster.missing()
    if lacking:
        print("screenshot_slurm: this host lacks " + ", ".join(lacking), file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="moe-tui-slurm-shot-"))
    cluster = slurm_cluster.start(root / "slurm")
    env = Env(root)
    os.environ["MOE_TUI_HOME"] = str(env.home)
    for key, value in job_env(cluster, env.home / "nodes").items():
        os.environ[key] = value  # the runner the App starts passes them on to sbatch
    room = None
    try:
        from moe_tui.cli import build_parser
        from moe_tui.commands.tui import controller_options_from
        from moe_tui.control import CampaignRequest
        from moe_tui.ui.launch import open_control_room

        base = env.profile("sim-flashinfer-cutlass", "flashinfer_cutlass", time_scale=10)
        cand = env.profile("sim-flashinfer-cutedsl", "flashinfer_cutedsl", time_scale=10)
        args = build_parser(only="tui").parse_args(["tui", *SLURM_ARGS, "--profiles-dir", str(env.profiles)])
        room = open_control_room(env.profiles, controller_options=controller_options_from(args))
        campaign = CampaignRequest(name="cutlass vs cutedsl via slurm", profiles=(base, cand),
                                   concurrencies=(4, 16), repeats=2, spec=SPEC, policy="interleaved")
        return asyncio.run(shoot(room.app, campaign))
    finally:
        from moe_tui.run.client import call_runner_sync
        from moe_tui.run.rendezvous import runner_is_running

        if runner_is_running(env.data_dir):
            call_runner_sync("shutdown", env.data_dir)
        if room is not None:
            room.client.close()
        for job in cluster.cmd("squeue", "-h", "-o", "%i", check=False).split():
            cluster.cmd("scancel", job, check=False)
        deadline = time.monotonic() + 30
        while runner_is_running(env.data_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        env.cleanup()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
