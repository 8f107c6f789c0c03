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
    if args.nnodes > 1 and args.node_rank > 0:  # no API on a non-zero node rank (sim/internode.py)
        return asyncio.run(_follower(args, argv))
    return asyncio.run(SimServer(args, argv).serve())


async def _follower(args: argparse.Namespace, argv: list[str]) -> int:
    from moe_tui.sim.engine import SimEngine
    from moe_tui.sim.internode import serve_follower
    from moe_tui.sim.startup import follower_startup

    return await serve_follower(SimEngine(args, argv), follower_startup)
