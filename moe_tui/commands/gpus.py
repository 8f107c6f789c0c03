"""`moe-tui gpus`: one NVML sample of every GPU as a table (or JSON), optionally repeated.

Without an NVIDIA driver it prints why and exits 0: "no GPU here" is information, not an error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from moe_tui.commands.common import add_format

if TYPE_CHECKING:
    from moe_tui.telemetry.data import TelemetrySnapshot


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_format(p, "the snapshot as JSON")
    p.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        default=None,
        help="sample again every SECONDS until Ctrl-C",
    )
    p.add_argument(
        "--gpus",
        default=None,
        metavar="LIST",
        help="comma-separated GPU indices to show (default: all)",
    )
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui.telemetry import NvmlSampler

    indices = None
    if args.gpus:
        try:
            indices = [int(part) for part in args.gpus.split(",") if part.strip()]
        except ValueError:
            print(f"moe-tui gpus: --gpus expects comma-separated integers, got {args.gpus!r}",
                  file=sys.stderr)
            return 2
    if args.watch is not None and args.watch <= 0:
        print(f"moe-tui gpus: --watch must be > 0 seconds, got {args.watch}", file=sys.stderr)
        return 2
    sampler = NvmlSampler(indices)
    try:
        while True:
            snapshot = sampler.sample()
            if args.json:
                print(json.dumps(snapshot.to_dict(), sort_keys=True), flush=True)
            else:
                if args.watch is not None and sys.stdout.isatty():
                    from moe_tui.trust import raw_stdout

                    raw_stdout().write("\x1b[H\x1b[2J")  # our own escape: past the CLI's escaping
                print(render_snapshot(snapshot), flush=True)
            if not snapshot.available:
                return 1  # no driver, no GPUs to read: a script must not take the empty answer as a reading
            if args.watch is None:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _fmt(value: object, spec: str = "", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def _gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**30:.1f}"


def render_snapshot(snapshot: TelemetrySnapshot) -> str:
    """The human table for one `TelemetrySnapshot` (plain text, no colour)."""
    if not snapshot.available:
        return snapshot.reason or "GPU telemetry unavailable"
    header = (
        f"driver {_fmt(snapshot.driver_version)}  CUDA {_fmt(snapshot.cuda_driver_version)}  "
        f"NVML {_fmt(snapshot.nvml_version)}  "
        f"sample {_fmt(None if snapshot.sample_seconds is None else snapshot.sample_seconds * 1e3, '.2f', ' ms')}"
    )
    cols = ["GPU", "name", "util%", "mem%", "memory GiB", "power W", "temp C", "SM MHz", "mem MHz",
            "clock events", "procs"]
    rows = []
    for g in snapshot.gpus:
        rows.append([
            str(g.index),
            _fmt(g.name),
            _fmt(g.util_gpu_pct, ".0f"),
            _fmt(g.util_mem_pct, ".0f"),
            f"{_gib(g.mem_used_bytes)}/{_gib(g.mem_total_bytes)}",
            f"{_fmt(g.power_w, '.0f')}/{_fmt(g.power_limit_w, '.0f')}",
            _fmt(g.temperature_c, ".0f"),
            f"{_fmt(g.sm_clock_mhz)}/{_fmt(g.sm_clock_max_mhz)}",
            _fmt(g.mem_clock_mhz),
            ",".join(g.clock_events) or ("n/a" if g.clock_event_bits is None else "none"),
            "n/a" if g.processes is None else str(len(g.processes)),
        ])
    if not rows:
        return header + "\nno GPUs visible to NVML"
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    lines = [header, "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    procs = [(g.index, p) for g in snapshot.gpus for p in (g.processes or ())]
    if procs:
        lines.append("")
        lines.append("GPU  pid       memory GiB  name")
        for index, p in procs:
            lines.append(f"{index:<4} {p.pid:<9} {_gib(p.used_memory_bytes):<11} {_fmt(p.name)}")
    return "\n".join(lines)
