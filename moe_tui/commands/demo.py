"""`moe-tui demo`: the control room on the bundled simulated profiles, with a campaign ready.

Uses a separate data home (`<data dir>/demo-home`, or $MOE_TUI_HOME/demo-home) so simulated runs
never mix with real ones, and queues "sim cutlass vs cutedsl at concurrency 1, 2, 10, 64, 256,
1024 x 2 repeats, small prompts" (256 and 1024 at the emulator's slower per-cell clock, so one
client keeps up: `judgement.sim_cell_time_scale`), paused: press `r` to start it. No GPU needed. Like `moe-tui`,
it runs the campaign in a detached runner (started if none holds the demo data dir, attached to
otherwise), so closing the terminal leaves it running; `--in-process` keeps it inside the TUI.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    from moe_tui.commands.tui import add_mode_args

    add_mode_args(p)
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui import paths
    from moe_tui.commands.tui import controller_options_from, launch
    from moe_tui.control.launch import use_demo_home

    use_demo_home()
    return launch(paths.bundled_demo_profiles_dir(), attach=args.attach, demo=True,
                  controller_options=controller_options_from(args))
