"""The emulator process's entry point: one `SimServer` (routes over an engine) until stopped.

The engine (continuous batching, prefix cache, variance, simulated GPUs, child processes) lives in
`moe_tui.sim.engine`, its startup in `moe_tui.sim.startup`, the HTTP routes in `moe_tui.sim.routes`.
"""

from __future__ import annotations

import argparse
import asyncio

from moe_tui.sim.routes import SimServer

__all__ = ["SimServer", "run_server"]


def run_server(args: argparse.Namespace, argv: list[str]) -> int:
    return asyncio.run(SimServer(args, argv).serve())
