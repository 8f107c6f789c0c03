"""`moe-tui sim ARGS...`: run the SGLang emulator; every argument after `sim` is passed through."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> None:
    # No option prefix of its own (prefix_chars="+", add_help=False): every argument after `sim`,
    # `--help` included, reaches the emulator's sglang-like parser untouched.
    p = sub.add_parser(name, help=help_text, add_help=False, prefix_chars="+",
                       description="Run the SGLang emulator (SIMULATED server).")
    p.add_argument("sim_args", nargs=argparse.REMAINDER,
                   help="sglang.launch_server flags and --sim-* flags")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from moe_tui.sim.__main__ import main

    return main(list(args.sim_args), prog="moe-tui sim")
