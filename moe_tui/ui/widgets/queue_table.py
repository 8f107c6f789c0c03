"""QueueTable: the run queue as a keyed table (row key = item id), updated in place."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from moe_tui.control import QueueRow
from moe_tui.ui import render
from moe_tui.ui.widgets.keyed_table import KeyedTable

COLUMNS = (
    ("n", "#", 3),
    ("id", "Item", 5),
    ("profile", "Profile", 24),
    ("conc", "Conc", 5),
    ("rep", "Rep", 3),
    ("spec", "Spec", 12),
    ("state", "State", 11),
    ("tries", "Tries", 5),
    ("run", "Run", 5),
    ("note", "Note", None),
)

# 80 columns: what an item is and how it went; the item id, spec, tries and run show at 120.
NARROW_COLUMNS = {"n": 3, "profile": 22, "conc": 4, "rep": 3, "state": 11, "note": 19}  # 74 with cell padding


def queue_cells(n: int, row: QueueRow, current: int | None) -> tuple[object, ...]:
    marker = Text("▶", style="bold cyan") if row.id == current else Text(str(n), style="dim")
    return (
        marker,
        str(row.id),
        row.profile,
        str(row.concurrency),
        str(row.repeat_index),
        Text(row.short_fingerprint, style="dim"),
        render.state_text(row.state),
        str(row.attempts),
        str(row.run_id) if row.run_id is not None else "—",
        Text(row.error, style="red") if row.error else Text(row.campaign, style="dim"),
    )


class QueueTable(KeyedTable):
    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, zebra_stripes=True, middle_cut={"profile"}, **kwargs)

    def set_narrow(self, narrow: bool) -> None:
        self.show_columns(NARROW_COLUMNS if narrow else None)

    def show(self, rows: Sequence[QueueRow], current: int | None) -> None:
        self.sync({str(r.id): queue_cells(n, r, current) for n, r in enumerate(rows, start=1)})

    @property
    def highlighted_item(self) -> int | None:
        key = self.highlighted_key
        return int(key) if key is not None else None
