"""`moe-tui` / `moe-tui tui`: open the control room on your profiles.

Profiles come from --profiles-dir, else `profiles_dir` in the config file, else
./server_profiles/. The controller lives in a detached runner so a dropped SSH session or a killed
TUI leaves the campaign running: if a runner holds this data dir the TUI attaches to it, otherwise
it starts one (`moe-tui run --detach --stay`) and attaches. Quitting asks whether to stop the
servers and the runner or to leave the campaign running. `--attach` only attaches (refused when no
runner runs); `--in-process` hosts the controller inside the TUI (it stops when the TUI does).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from moe_tui.records import Options

if TYPE_CHECKING:
    from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    from moe_tui.commands.common import add_profiles_dir

    add_profiles_dir(p)
    add_mode_args(p)
    from moe_tui.commands.run_slurm import add_arguments as add_slurm_arguments

    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="where the runner this TUI starts works items: this machine (default) or as Slurm jobs "
                        "(`moe-tui run --executor slurm`; a runner already holding the data dir is attached as is)")
    add_slurm_arguments(p)
    p.set_defaults(run=run)
    return p


def add_mode_args(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--attach", dest="attach", action="store_const", const=True, default=None,
                      help="only attach to the runner of this data dir (refused when none runs)")
    mode.add_argument("--in-process", dest="attach", action="store_const", const=False,
                      help="host the controller in the TUI: no runner, everything stops when the TUI quits "
                           "(refused while a runner holds the data dir)")
    p.add_argument("--no-gpu-sampling", action="store_true",
                   help="an in-process controller samples no GPUs (a runner keeps its own setting)")
    p.add_argument("--request-timeout", type=float, default=None, metavar="S",
                   help="per-request limit for every benchmark the controller runs (as `moe-tui run`)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                   help="fail a request whose stream is silent this long (as `moe-tui run`)")


def controller_options_from(args: argparse.Namespace) -> Options:
    """The controller settings given on the command line; the runner gets the timeouts as flags."""
    options: Options = {}
    if getattr(args, "no_gpu_sampling", False):
        options["telemetry"] = False  # the TUI draws the controller's samples: none taken, none drawn
    if args.request_timeout is not None:
        options["request_timeout_s"] = args.request_timeout
    if args.stall_timeout is not None:
        options["stall_timeout_s"] = args.stall_timeout
    if getattr(args, "executor", "local") != "local":  # the runner it starts dispatches jobs (run.batch)
        from moe_tui.commands.run_slurm import forwarded

        options["runner_args"] = ["--executor", args.executor, *forwarded(args)]
    return options


def profiles_dir_from(args: argparse.Namespace) -> Path:
    """The one lookup rule (`commands.common`) without the bundled demo: `moe-tui` on real
    profiles never falls back to simulated ones (that is `moe-tui demo`, on a data home of its own)."""
    from moe_tui.commands.common import profiles_dir_for

    return profiles_dir_for(args.profiles_dir, bundled=False)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "executor", "local") != "local" and args.attach is False:
        print("moe-tui: --executor slurm works the queue in a runner of its own (`moe-tui run --executor slurm`); "
              "drop --in-process", file=sys.stderr)
        return 2
    return launch(profiles_dir_from(args), attach=args.attach, demo=False,
                  controller_options=controller_options_from(args))


def launch(profiles_dir: Path, *, attach: bool | None, demo: bool,
           controller_options: Options | None = None) -> int:
    from moe_tui.servers import install_exit_handlers
    from moe_tui.ui.launch import open_control_room

    # Servers this process starts (--in-process only) are stopped if it dies (SIGTERM, a dropped
    # SSH session): nothing else would ever stop them. Attached, the runner owns the servers.
    install_exit_handlers()
    room = open_control_room(profiles_dir, attach=attach, demo=demo, controller_options=controller_options)
    room.app.run()
    if room.app.exit_note:
        print(f"moe-tui: {room.app.exit_note}")
    return int(room.app.return_code or 0)
