"""`moe-tui run --executor slurm`: work the queue as Slurm jobs (`moe_tui.executors.dispatch`).

    moe-tui run --executor slurm [--partition P] [--account A] [--qos Q] [--constraint C]
                [--gpus gres|exclusive|none] [--time-limit S] [--node-blocks N1,N2,...] [--stay] [--profiles-dir DIR]

Each pending item becomes one `sbatch` job working it with the local runner's code on the node it
lands on; one line per job state change and imported result. The data dir (MOE_TUI_HOME) must be on
storage the nodes see: the jobs' files and results live in its `jobs/` folder. Ctrl-C stops this
controller and leaves the jobs to Slurm; the next start re-adopts them. `--node-blocks` pins each
repeat block (repeat r of every profile, the control included) to one node, r modulo the nodes
named, so that machines are blocks of the plan, not noise (docs/executors.md).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--executor slurm (each item one sbatch job; see docs/executors.md)")
    g.add_argument("--partition", default=None, help="Slurm partition of every job (over slurm.toml)")
    g.add_argument("--account", default=None, help="Slurm account")
    g.add_argument("--qos", default=None, help="Slurm QoS")
    g.add_argument("--constraint", default=None, help="Slurm node constraint (features)")
    g.add_argument("--gpus", default=None, choices=("gres", "exclusive", "none"),
                   help="how a job asks for the profile's GPUs: --gres=gpu:N (default), a whole node, or not at all")
    g.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="each job's time limit in seconds (default: the plan's estimate per item)")
    g.add_argument("--node-blocks", default=None, metavar="N1,N2",
                   help="pin repeat r of every profile to node N[r mod count] (sbatch --nodelist): each node "
                        "measures whole repeat blocks, both sides and the control")


def run_slurm(args: argparse.Namespace, data_dir: Path, profiles_dir: Path, until_empty: bool, retry_interrupted: bool) -> int:
    import asyncio
    import signal

    from moe_tui.executors.dispatch import Dispatcher
    from moe_tui.executors.slurm import SlurmExecutor, SlurmSettingsError, load_config
    from moe_tui.profiles import load_profiles
    from moe_tui.run.rendezvous import RunnerBusy, RunnerUnavailable
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    campaign = {"partition": args.partition, "account": args.account, "qos": args.qos, "constraint": args.constraint,
                "gpus": args.gpus, "time_limit_s": args.time_limit}
    try:
        config = load_config(profiles_dir, campaign)
    except SlurmSettingsError as exc:
        print(f"moe-tui run: {exc}", file=sys.stderr)
        return 2
    blocks = tuple(n for n in (args.node_blocks or "").split(",") if n)
    bad = [n for n in blocks if not NODE_NAME.match(n)]
    if bad or (args.node_blocks is not None and not blocks):
        print(f"moe-tui run: --node-blocks: node names are letters, digits and -_. separated by commas, "
              f"got {args.node_blocks!r}", file=sys.stderr)
        return 2
    names = {p.name for p in load_profiles(profiles_dir).profiles}
    executor = SlurmExecutor(lambda request: config.for_profile(_profile_of(request.job_file, names)))

    def line(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with Store.open_default() as store:
            dispatcher = Dispatcher(store, profiles_dir, data_dir, executor, on_line=line, node_blocks=blocks)
            return await dispatcher.run(until_empty=until_empty, retry_interrupted=retry_interrupted, stop=stop)

    line(f"slurm dispatcher pid {__import__('os').getpid()} on {data_dir}; profiles from {profiles_dir}")
    try:
        return asyncio.run(main())
    except (RunnerBusy, RunnerUnavailable, StoreError, OSError) as exc:
        print(f"moe-tui run: {exc}", file=sys.stderr)
        return 1


def _profile_of(job_file: Path, names: set[str]) -> str:
    import json

    name = str(json.loads(job_file.read_text(encoding="utf-8"))["item"]["profile_name"])  # a sweep: one profile
    return name if name in names else ""
