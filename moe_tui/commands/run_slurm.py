"""`moe-tui run --executor slurm`: work the queue as Slurm jobs (`moe_tui.executors.dispatch`).

    moe-tui run --executor slurm [--partition P] [--account A] [--qos Q] [--constraint C]
                [--gpus gres|exclusive|none] [--time-limit S] [--node-blocks N1,N2,...] [--stay] [--profiles-dir DIR]

Each sweep of pending items becomes one `sbatch` job working it with the local runner's code on the
node it lands on; one line per job state change and imported result. The dispatcher is hosted by the
runner (`moe_tui.run.batch`): the same control socket, so `moe-tui` (the TUI) attaches to it, adds
campaigns and sees the jobs, and `--detach` starts it in the background. The data dir (MOE_TUI_HOME) must be on
storage the nodes see: the jobs' files and results live in its `jobs/` folder. Ctrl-C stops this
controller and leaves the jobs to Slurm; the next start re-adopts them. `--node-blocks` pins each
repeat block (repeat r of every profile, the control included) to one node, r modulo the nodes
named, so that machines are blocks of the plan, not noise (docs/executors.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moe_tui.executors.dispatch import Dispatcher
    from moe_tui.run.batch import BatchFactory
    from moe_tui.store.db import Store

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


def forwarded(args: argparse.Namespace) -> list[str]:
    """The --executor slurm options as given, for the detached runner's command line."""
    out: list[str] = []
    for flag, value in (("--partition", args.partition), ("--account", args.account), ("--qos", args.qos),
                        ("--constraint", args.constraint), ("--gpus", args.gpus), ("--node-blocks", args.node_blocks)):
        if value is not None:
            out += [flag, str(value)]
    if args.time_limit is not None:
        out += ["--time-limit", repr(args.time_limit)]
    return out


def slurm_batch(args: argparse.Namespace, data_dir: Path, profiles_dir: Path) -> tuple[BatchFactory, str] | int:
    """The runner's batch worker for these options (`run.batch`) and its name; or the exit code after
    printing what is wrong with them."""
    from moe_tui.executors.dispatch import Dispatcher
    from moe_tui.executors.slurm import SlurmExecutor, SlurmSettingsError, load_config
    from moe_tui.profiles import load_profiles

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

    def dispatcher(store: Store, on_line: Callable[[str], None]) -> Dispatcher:
        return Dispatcher(store, profiles_dir, data_dir, executor, on_line=on_line, node_blocks=blocks)

    return dispatcher, f"{executor.name} dispatcher"


def _profile_of(job_file: Path, names: set[str]) -> str:
    import json

    name = str(json.loads(job_file.read_text(encoding="utf-8"))["item"]["profile_name"])  # a sweep: one profile
    return name if name in names else ""
