"""KeyedTable: a DataTable updated in place by row key (never cleared and refilled on a tick).

`sync(rows)` takes the full wanted picture {row key: cells} in display order and does the least
work to get there (linear in the rows given; a table of thousands shows a window of them, see
`moe_tui.ui.widgets.queue_table`): new rows are added, vanished rows removed, and only cells whose value changed
are updated, all inside one `batch_update`. The cursor stays on the same row key across updates.

`show_columns(keys)` narrows the table to some of its columns (narrow terminals): rows always
carry every column's cell; the table rebuilds itself from them only when the set changes.

Columns named in `middle_cut` (profile names) are cut in the middle to their current width
(`render.middle_truncate`), never at the end: the end of a profile name is what tells two apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowDoesNotExist, RowKey

from moe_tui.ui.render import middle_truncate, plain

# One way to move in every table, help's included (k9s, lazygit, less): j/k as the arrows, g/Home
# the first row, G/End the last, PgUp/PgDn a page (DataTable's own). A screen never binds these.
NAVIGATION: list[BindingType] = [
    Binding("j", "cursor_down", "Down", show=False),
    Binding("k", "cursor_up", "Up", show=False),
    Binding("home,g", "scroll_top", "First", show=False),
    Binding("end,G", "scroll_bottom", "Last", show=False),
]
NAVIGATION_HELP = ("j k g G", "Move", "Down, up, first, last row of a table (also ↑ ↓ Home End; PgUp PgDn a page); "
                   "Tab the next field, Esc back")


class NavTable(DataTable[Any]):
    """A DataTable with the one navigation scheme."""

    BINDINGS = NAVIGATION


class KeyedTable(NavTable):

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], *,
                 middle_cut: Collection[str] = (), **kwargs: Any) -> None:
        kwargs.setdefault("cursor_type", "row")
        super().__init__(**kwargs)
        self._column_spec = list(columns)
        self._middle_cut = frozenset(middle_cut)
        self._cells: dict[str, tuple[Any, ...]] = {}
        self._order: list[str] = []
        self._visible = [c[0] for c in self._column_spec]
        self._widths: dict[str, int | None] = {}
        self._pending: Mapping[str, Sequence[Any]] | None = None
        self._versions: dict[tuple[str | None, str | None], int] = {}  # (row, column) -> last write
        self._written = itertools.count(1)

    def on_mount(self) -> None:
        self._add_columns()
        pending, self._pending = self._pending, None
        if pending is not None:  # rows given before the columns existed: painted now, shown or not
            self.sync(pending)
            prerender = getattr(self.screen, "prerender_soon", None)
            if prerender is not None:  # a screen built off screen renders its rows before its visit
                prerender()

    def _add_columns(self) -> None:
        for key, label, width in self._column_spec:
            if key in self._visible:
                self.add_column(label, key=key, width=self._widths.get(key, width))

    # -- cell renders kept across updates --------------------------------------------------------
    # DataTable keys every cached cell render on a table-wide update count, so changing one cell
    # re-renders every visible cell (8 GPUs x 11 columns each second for one changed number).
    # Cells are cached here by their own version instead, bumped whenever that cell is written;
    # everything else a cell's look depends on is in the key, and DataTable's own clears (style,
    # theme, cursor or column changes) empty this cache with its own.
    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None) -> RowKey:
        row_key = super().add_row(*cells, height=height, key=key, label=label)
        for column_key in self.columns:
            self._versions[(row_key.value, column_key.value)] = next(self._written)
        return row_key

    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: Any, *,
                    update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, value, update_width=update_width)
        cell = (getattr(row_key, "value", row_key), getattr(column_key, "value", column_key))
        self._versions[cell] = next(self._written)  # type: ignore[index]

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> Any:
        if column_index < 0:  # row labels: DataTable's own caching
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if row_index < 0:  # the header: its look is its label's (a repaint of the rows keeps it)
            label = self.ordered_columns[column_index].label
            version: Any = ("header", label.plain, tuple(label.spans), str(label.style))
        else:
            row_key = self._row_locations.get_key(row_index)
            column_key = self._column_locations.get_key(column_index)
            version = self._versions.get((getattr(row_key, "value", None), getattr(column_key, "value", None)))
        key: Any = ("keyed", row_index, column_index, version, base_style, width, cursor, hover, self.show_cursor,
                    self.cursor_type, self._show_hover_cursor, self._pseudo_class_state)
        cache: Any = self._cell_render_cache
        lines = cache.get(key)
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            cache[key] = lines
        return lines

    def _cell(self, key: str, value: Any) -> Any:
        # Cells hold user data (names, errors): plain Text, never markup.
        if not isinstance(value, str | Text):
            return value
        text = plain(value)
        width = self._widths.get(key) or next((w for k, _, w in self._column_spec if k == key), None)
        if key in self._middle_cut and width and text.cell_len > width:
            text = Text(middle_truncate(text.plain, width), style=text.style)
        return text

    def _project(self, cells: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self._cell(key, cell) for (key, _, _), cell in zip(self._column_spec, cells)
                     if key in self._visible)

    def show_columns(self, keys: Sequence[str] | Mapping[str, int] | None) -> None:
        """Show only these columns (None: all); a mapping also gives their widths. Rebuilds the
        table only when the set changes."""
        wanted = [c[0] for c in self._column_spec if keys is None or c[0] in keys]
        widths: dict[str, int | None] = dict(keys) if isinstance(keys, Mapping) else {}
        if wanted == self._visible and widths == self._widths:
            return
        self._visible, self._widths = wanted, widths
        if not self.is_mounted:
            return
        keep = self.highlighted_key
        with self.app.batch_update():
            self.clear(columns=True)
            self._add_columns()
            for key in self._order:
                self.add_row(*self._project(self._cells[key]), key=key)
            if keep is not None and keep in self._cells:
                self.move_cursor(row=self.get_row_index(keep), animate=False)

    @property
    def row_keys_in_order(self) -> list[str]:
        return list(self._order)

    @property
    def highlighted_key(self) -> str | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        try:
            row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except Exception:
            return None
        return row_key.value

    def sync(self, rows: Mapping[str, Sequence[Any]]) -> None:
        if not self.columns:  # not mounted yet: on_mount paints the latest rows given
            self._pending = rows
            return
        keep = self.highlighted_key
        column_keys = [c[0] for c in self._column_spec]
        with self.app.batch_update():
            for key in [k for k in self._order if k not in rows]:
                try:
                    self.remove_row(key)
                except RowDoesNotExist:
                    pass
                self._cells.pop(key, None)
            for key, cells in rows.items():
                cells = tuple(cells)
                old = self._cells.get(key)
                if old is None:
                    self.add_row(*self._project(cells), key=key)
                elif old != cells:
                    for col, before, after in zip(column_keys, old, cells):
                        if before != after and col in self._visible:
                            self.update_cell(key, col, self._cell(col, after))
                self._cells[key] = cells
            wanted = list(rows)
            before = set(self._order)  # a set: membership in the old order list made this quadratic
            current = [k for k in self._order if k in rows] + [k for k in wanted if k not in before]
            if current != wanted:
                # Reordering is rare (a user moved an item): re-add only the rows from the first
                # one out of place; everything above it stays untouched.
                first = next(i for i, (a, b) in enumerate(zip(current, wanted)) if a != b)
                for key in current[first:]:
                    self.remove_row(key)
                for key in wanted[first:]:
                    self.add_row(*self._project(self._cells[key]), key=key)
            self._order = wanted
            if keep is not None and keep in rows:
                try:
                    index = self.get_row_index(keep)
                except RowDoesNotExist:
                    index = self.cursor_row
                if index != self.cursor_row:  # moving it to where it is still scrolls and repaints
                    self.move_cursor(row=index, animate=False)
