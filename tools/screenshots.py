"""`make screenshots`: documentation SVGs of every screen from the real app on the emulator.

Runs `moe-tui demo`'s startup (bundled simulated profiles, a throwaway data home, a detached
runner the app attaches to, as `moe-tui demo` does), starts the demo campaign, waits until both
profiles have a finished run, then saves one SVG per screen into screenshots/ (and the dashboard
and Compare once more at 80x24). Nothing is drawn by hand: every number is the emulator's, measured by the
real controller. Quitting stops the runner; if anything fails it is stopped anyway. Takes about a
minute and a half.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
SIZE = (120, 40)
WAIT_S = 240.0


async def main() -> int:
    os.environ["MOE_TUI_HOME"] = tempfile.mkdtemp(prefix="moe-tui-screens-")
    sys.path.insert(0, str(ROOT))
    from moe_tui import paths
    from moe_tui.control.launch import use_demo_home
    from moe_tui.events import RunFinished
    from moe_tui.ui.launch import open_control_room

    use_demo_home()
    room = open_control_room(paths.bundled_demo_profiles_dir(), demo=True)
    app = room.app
    finished: list[RunFinished] = []
    room.client.subscribe(lambda e: finished.append(e) if isinstance(e, RunFinished) else None)
    OUT.mkdir(exist_ok=True)
    started = time.monotonic()

    def shot(name: str) -> None:
        app.save_screenshot(str(OUT / f"{name}.svg"))
        print(f"  screenshots/{name}.svg  ({time.monotonic() - started:.0f} s)")

    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(1.0)
        await pilot.press("r")  # start the demo campaign
        # Interleaved: the candidate's first result arrives after the baseline's sweep.
        while len({e.profile for e in finished if e.status == "complete"}) < 2:
            if time.monotonic() - started > WAIT_S:
                print("screenshots: no result from both profiles in time", file=sys.stderr)
                return 1
            await pilot.pause(0.5)
        await pilot.pause(2.0)  # mid-run of the next item: live figures on the dashboard
        shot("dashboard")
        await pilot.resize_terminal(80, 24)  # the compact layout, same live data
        await pilot.pause(1.0)
        shot("dashboard-80x24")
        await pilot.resize_terminal(*SIZE)
        await pilot.pause(0.5)
        await pilot.press("2")
        await pilot.pause(1.0)
        shot("queue")
        await pilot.press("a")
        await pilot.pause(1.0)
        shot("add-campaign")
        await pilot.press("escape")
        await pilot.press("3")
        await pilot.pause(2.0)
        shot("compare")
        await pilot.resize_terminal(80, 24)  # the narrow grid: Conc, Metric, Delta, Verdict
        await pilot.pause(1.0)
        shot("compare-80x24")
        await pilot.resize_terminal(*SIZE)
        await pilot.pause(0.5)
        await pilot.press("1")
        await pilot.pause(0.5)
        app.screen.query_one("#server-table").focus()
        await pilot.press("l")
        await pilot.pause(1.5)
        shot("server-log")
        await pilot.press("escape", "o")
        await pilot.pause(1.5)
        shot("run-detail")
        await pilot.press("escape", "question_mark")
        await pilot.pause(0.5)
        shot("help")
        await pilot.press("escape", "q")
        await pilot.pause(0.5)
        shot("quit")
        await pilot.press("s")
        while app.is_running and time.monotonic() - started < WAIT_S + 120:
            await pilot.pause(0.5)
    return 0


def run() -> int:
    from moe_tui import paths
    from moe_tui.run.rendezvous import runner_is_running

    try:
        return asyncio.run(main())
    finally:
        if runner_is_running(paths.data_dir()):
            subprocess.run([sys.executable, "-m", "moe_tui", "run", "--stop"], check=False)


if __name__ == "__main__":
    sys.exit(run())
