"""screenshots/investigate.svg: the investigation screen over a data home with real emulator runs.

    MOE_TUI_HOME=<home with runs> python tools/screenshot_investigate.py PROFILES_DIR BASELINE CANDIDATE CONC

Opens the real app on an in-process controller that is never started (nothing is run or
queued), picks the pair on the compare screen, highlights the cell's output tok/s row, presses
`i` and saves the proposal screen. Every number is the store's: `tools/screenshots.py` makes the
other screens from the demo campaign; this one needs a sweep with a surprising cell in it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE = (120, 40)


async def main(profiles_dir: Path, baseline: str, candidate: str, conc: int) -> int:
    sys.path.insert(0, str(ROOT))
    from moe_tui.ui.adapters import InProcessAdapter
    from textual.widgets import DataTable

    from moe_tui import paths
    from moe_tui.profiles import load_profiles
    from moe_tui.store.db import Store
    from moe_tui.ui.app import MoeTuiApp

    store = Store.open_default()
    adapter = InProcessAdapter(store, load_profiles(profiles_dir).profiles, profiles_dir, paths.data_dir())
    app = MoeTuiApp(adapter, sample_gpus=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(1.0)
            await pilot.press("3")
            await pilot.pause(1.0)
            app.screen.query_one("#compare-baseline").value = baseline
            app.screen.query_one("#compare-candidate").value = candidate
            await pilot.pause(2.0)
            table = app.screen.query_one("#compare-grid", DataTable)
            table.focus()
            table.move_cursor(row=table.get_row_index(f"{conc}/output_throughput"))
            await pilot.pause(0.5)
            await pilot.press("i")
            await pilot.pause(3.0)
            app.save_screenshot(str(ROOT / "screenshots" / "investigate.svg"))
            print("screenshots/investigate.svg")
    finally:
        adapter.close()
        store.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))))
