"""CellRunsScreen (enter on a grid cell): the runs behind the highlighted cell, by side.

Each run says whether its number is in the cell's mean ("averaged"), carries a suspect flag, or
was left out (incomplete, failed, or flagged); enter opens the run's detail. Run ids come from the
core's grid (`SidePoint`); the UI decides nothing about them.

One CellRunsScreen is kept (ui.prepare): each opening gives it the grid and cell (`show`), and its
table is synced in place by run id (the cursor back on the first run when the cell changed).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label

from moe_tui.ui.prepare import KeepStyles
from moe_tui.ui.room import room
from moe_tui.ui.screens.base import composed
from moe_tui.ui.widgets.keyed_table import KeyedTable

COLUMNS = (("side", "Side", 10), ("profile", "Profile", 30), ("run", "Run", 7), ("use", "In the cell", None))


def run_rows(grid: Any, cell: Any) -> dict[str, tuple[object, ...]]:
    """run id -> (side, profile, run, use), baseline first."""
    rows: dict[str, tuple[object, ...]] = {}
    for side, name in (("baseline", grid.baseline_name), ("candidate", grid.candidate_name)):
        point = grid.points.get((side, cell.concurrency))
        if point is None:
            continue
        flagged = set(point.flagged_run_ids)
        for rid in point.run_ids:
            use = Text("averaged, flagged ⚑", style="yellow") if rid in flagged else Text("averaged", style="green")
            rows[str(rid)] = (side, Text(name), f"#{rid}", use)
        for rid in point.excluded_run_ids:
            why = "left out: flagged ⚑" if rid in flagged else "left out: incomplete or failed"
            rows[str(rid)] = (side, Text(name), f"#{rid}", Text(why, style="dim"))
    return rows


class CellRunsScreen(KeepStyles, ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "close", "Close", id="runs.close", tooltip="Back to the grid"),
        Binding("o", "open", "Open", id="runs.open", tooltip="Open the highlighted run's detail"),
    ]

    def __init__(self, grid: Any = None, cell: Any = None) -> None:
        super().__init__()
        self.grid, self.cell = grid, cell
        self._shown_cell: Any = None

    def compose(self) -> ComposeResult:
        with Vertical(id="runs-dialog", classes="dialog"):
            yield Label("", id="runs-title", classes="dialog-title")
            yield KeyedTable(COLUMNS, id="runs-table", middle_cut={"profile"})
            yield Label("", id="runs-detail", classes="dialog-detail")

    def show(self, grid: Any, cell: Any) -> None:
        """List the runs of `cell` of `grid` (this opening's)."""
        self.grid, self.cell = grid, cell
        if self.is_mounted:
            self._fill()

    def on_mount(self) -> None:
        if not composed(self):
            return  # the App closed while this screen was built off screen
        self._fill()

    def _fill(self) -> None:
        if self.grid is None or self.cell is None:
            return
        grid, cell = self.grid, self.cell
        self.query_one("#runs-title", Label).update(Text(
            f"Runs of conc {cell.concurrency} {cell.label}: {grid.baseline_name} vs {grid.candidate_name}"))
        table = self.query_one(KeyedTable)
        rows = run_rows(grid, cell)
        table.sync(rows)
        where = (grid.baseline_name, grid.candidate_name, cell.concurrency, cell.label)
        if where != self._shown_cell:
            self._shown_cell = where
            if rows:
                table.move_cursor(row=0, animate=False)
        self.query_one("#runs-detail", Label).update(
            "enter opens a run · esc back" if rows else "no run at this concurrency on either side")
        table.focus()

    def on_data_table_row_selected(self, event: Any) -> None:
        event.stop()
        self.action_open()

    def action_open(self) -> None:
        key = self.query_one(KeyedTable).highlighted_key
        if key is not None:
            room(self.app).open_run(int(key))

    def action_close(self) -> None:
        self.dismiss(None)
