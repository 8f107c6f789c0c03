"""`moe-tui demo`: the control room on the bundled simulated profiles, with a campaign ready.

Uses a separate data home (`<data dir>/demo-home`, or $MOE_TUI_HOME/demo-home) so simulated runs
never mix with real ones, and queues "sim cutlass vs cutedsl at concurrency 1, 2, 10, 64 x 2
repeats, small prompts, interleaved", paused: press `r` to start it. No GPU needed.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--no-gpu-sampling", action="store_true", help="do not sample NVML in the TUI")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui import paths
    from moe_tui.commands.tui import launch
    from moe_tui.ui.launch import use_demo_home

    use_demo_home()
    return launch(paths.bundled_demo_profiles_dir(), attach=False, demo=True,
                  sample_gpus=not args.no_gpu_sampling)
