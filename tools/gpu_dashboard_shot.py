"""Headless screenshots of the dashboard on this machine's real GPUs (NVML), as an engineer sees it.

    python tools/gpu_dashboard_shot.py [--out DIR] [--profiles-dir server_profiles] [--wait 6]

Opens the control room in-process on the given profiles (nothing is started: the servers stay
stopped), lets the controller's GPU sampler deliver a few samples, and saves the dashboard as SVG
at 120x40 and 80x24 (`dashboard-gpus-120x40.svg`, `dashboard-gpus-80x24.svg`), plus the GPU rows
as plain text. Run it while `tools/gpu_load.py` loads some GPUs and not others, so each row shows
its own state. Read-only towards the GPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def shoot(out: Path, profiles_dir: Path, wait_s: float) -> int:
    from moe_tui.ui.launch import open_control_room

    room = open_control_room(profiles_dir, attach=False)
    app = room.app
    out.mkdir(parents=True, exist_ok=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(wait_s)  # several 1 Hz samples: utilization and power have settled
        app.save_screenshot(str(out / "dashboard-gpus-120x40.svg"))
        await pilot.resize_terminal(80, 24)
        await pilot.pause(2.0)
        app.save_screenshot(str(out / "dashboard-gpus-80x24.svg"))
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.5)
    print(f"saved {out / 'dashboard-gpus-120x40.svg'} and {out / 'dashboard-gpus-80x24.svg'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--profiles-dir", type=Path, default=ROOT / "server_profiles")
    ap.add_argument("--wait", type=float, default=6.0)
    args = ap.parse_args()
    os.environ.setdefault("MOE_TUI_HOME", tempfile.mkdtemp(prefix="moe-tui-gpushot-"))
    return asyncio.run(shoot(args.out, args.profiles_dir, args.wait))


if __name__ == "__main__":
    raise SystemExit(main())
