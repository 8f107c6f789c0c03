"""CompareScreen: pick baseline and candidate; the profile diff, warnings, the grid and a chart.

The grid comes from the core (`grids.build_grid` via the control client) in a thread worker and is
re-read when a run finishes. Export (e markdown, E csv) writes the pair on screen; f includes flagged
runs in the means (their cells then say unreliable) and back.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Header, Select, Static

from moe_tui import judgement as J
from moe_tui.ui import render
from moe_tui.ui.room import Room, room
from moe_tui.ui.screens.base import LiveScreen, composed
from moe_tui.ui.widgets.compare_grid import CI_LABEL, CompareGrid, cell_detail, cell_text
from moe_tui.ui.widgets.filter_bar import FilterBar
from moe_tui.ui.widgets.key_bar import KeyBar
from moe_tui.ui.widgets.select import ShutdownSafeSelect
from moe_tui.ui.widgets.throughput_chart import ThroughputChart

NARROW_PICKER_LABEL = 22  # cells a profile name gets in one of two pickers on an 80-column terminal


def diff_text(grid: Any) -> Text:
    """The profile diff and whole-comparison warnings above the grid (strings from the core)."""
    text = Text()
    if grid.simulated:
        text.append_text(render.badge("SIMULATED", "bold white on magenta"))
        text.append(" ")
        from moe_tui.control.reads import sim_clock_note  # tok/s on the emulator's clock, said where shown

        if note := sim_clock_note(grid):
            text.append(note.split(": ")[0] + ": tok/s read x the clock, ms / it", style="magenta")
            text.append("\n")
    for d in grid.backend_diff:
        text.append("compared: ", style="bold")
        text.append(d.describe())
    if grid.launch_diff:
        text.append("\n")
        text.append("launch settings differ (cells confounded): ", style="bold yellow")
        text.append("; ".join(d.describe() for d in grid.launch_diff), style="yellow")
    text.append("\n")
    text.append("control check: ", style="bold")
    words = J.CONTROL_WORDS[grid.control.state]
    text.append(f"{words}: ", style="bold red" if grid.control.failed else "bold")
    # the check's text may open with its state ("control check absent: ..."), said just before
    text.append(grid.control.text.removeprefix(f"control check {words}: "),
                style="bold red" if grid.control.failed else "dim")
    for env in grid.control.environment_differences:
        text.append("\n  beside it: ", style="dim")
        text.append(env, style="dim")
    if grid.settings.include_flagged:
        text.append("\nflagged runs included (f toggles): their cells are unreliable", style="magenta")
    if grid.settings.accept_uncontrolled:
        text.append("\nuncontrolled verdicts shown, labelled (u toggles)", style="magenta")
    for warning in grid.warnings:
        text.append("\n⚠ ", style="yellow")
        text.append(warning, style="yellow")
    from moe_tui.control.reads import grid_extra_lines  # issue 15: gate verdict, % of roofline

    for line in grid_extra_lines(grid):
        text.append("\n" + line, style="dim")
    return text


def keep_direction(names: list[str], shown: tuple[object, object], session: tuple[str, str] | None,
                   default: tuple[str, str] | None) -> tuple[str | None, str | None]:
    """The pickers' values after the choices changed. The direction is the user's: what the
    pickers show stays (new data never swaps it), then this session's pair, then the client's
    default (the remembered pick or the campaign's order). A blank picker is filled with the
    default's other name, never with the name already shown in the other picker."""
    valid = [v if isinstance(v, str) and v in names else None for v in shown]
    if valid[0] is None and valid[1] is None:
        for pair in (session, default):
            if pair is not None and pair[0] in names and pair[1] in names:
                return pair
        return None, None
    base, cand = valid
    order = [n for n in (default or ()) if n in names] + names
    if base is None:
        base = next((n for n in order if n != cand), None)
    if cand is None:
        cand = next((n for n in order if n != base), None)
    return base, cand


class CompareScreen(LiveScreen):
    # The main table has the focus (and a visible cursor) from the start: arrows, j/k and / work at once.
    AUTO_FOCUS = "#compare-grid"
    # Listed by `?` after the bindings: the profile selects are reached by Tab, not by a key of their own.
    HELP_EXTRA = (("Tab", "Profiles", "Tab (shift+Tab back) to the baseline and candidate selects above the grid: "
                                      "Enter opens one, ↑ ↓ pick, Enter sets it, Esc closes it"),)
    BINDINGS = [
        Binding("e", "export('markdown')", "Markdown", id="export.markdown",
                tooltip="Write the comparison as Markdown with spec and provenance"),
        Binding("E", "export('csv')", "CSV", id="export.csv", key_display="E",
                tooltip="Write the comparison grid as CSV"),
        Binding("w", "swap", "Swap", id="compare.swap", tooltip="Swap baseline and candidate"),
        Binding("f", "toggle_flagged", "Flagged", id="compare.flagged",
                tooltip="Include flagged runs in the means (their cells then say unreliable)"),
        Binding("u", "toggle_uncontrolled", "Uncontrolled", id="compare.uncontrolled", show=False,
                tooltip="Show verdicts the control check did not back, labelled 'uncontrolled'"),
        Binding("ctrl+r", "reload", "Reload", id="compare.reload", key_display="^r",
                tooltip="Re-read the runs and rebuild the grid (g is the first row, as in every table)"),
        Binding("i", "investigate", "Investigate", id="compare.investigate",
                tooltip="Propose and queue the runs that would settle the highlighted cell"),
        Binding("enter,o", "open_cell", "Runs", id="compare.runs", key_display="⏎",
                tooltip="List the highlighted cell's runs (averaged, flagged, left out); enter opens one"),
        Binding("slash", "filter", "Filter", id="compare.filter", key_display="/",
                tooltip="Show only the cells whose concurrency, metric or verdict hold these words"),
        Binding("x", "explain", "Explain", id="compare.explain",
                tooltip="Where each side's decode step goes at the highlighted cell (profiled runs)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.grid: Any | None = None
        self._seen_grid: Any | None = None  # the grid last compared with what the user saw
        self._changes: dict[tuple[int, str], str] = {}
        self._looked_at: tuple[int, str] | None = None  # the highlighted cell's (concurrency, metric)
        self._choices: list[str] = []
        self.include_flagged = False
        self.accept_uncontrolled = False  # `u`: show verdicts the control did not back, labelled

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        with Vertical(id="compare-body"):
            with Horizontal(id="compare-pickers"):
                yield Static("Baseline", classes="picker-label")
                yield ShutdownSafeSelect([], id="compare-baseline", prompt="baseline profile")
                yield Static("Candidate", classes="picker-label")
                yield ShutdownSafeSelect([], id="compare-candidate", prompt="candidate profile")
            yield Static("pick two profiles with recorded runs", id="compare-diff", classes="panel")
            yield FilterBar(id="compare-filter")
            yield CompareGrid(id="compare-grid", classes="panel")
            yield Static("", id="compare-cell")
            yield ThroughputChart(id="compare-chart", classes="panel")
        yield KeyBar()

    def on_mount(self) -> None:
        if not composed(self):
            return  # the App closed while this screen was built off screen
        self.query_one(CompareGrid).border_title = "Baseline vs candidate"
        self.query_one(CompareGrid).set_narrow(self.app.has_class("-narrow"))
        self.load_choices()

    def on_screen_resume(self) -> None:
        for grid in self.query(CompareGrid):  # none yet while the App prepares the screen
            grid.set_narrow(self.app.has_class("-narrow"))
        if self.is_current:  # not while the App prepares it in the background (not composed yet)
            self.load_choices()

    def live_update(self, topics: set[str]) -> None:
        if "layout" in topics:
            self.query_one(CompareGrid).set_narrow(self.app.has_class("-narrow"))
            self._title(self._pair())
            self._show_cell()
        if "bench" in topics and self.control.live.bench.last_finished is not None:
            finished = self.control.live.bench.last_finished
            if getattr(self, "_seen_finish", None) != finished.run_id:
                self._seen_finish = finished.run_id
                self.load_choices()

    def load_choices(self) -> None:
        self.control.call_core("list profiles with runs", self._choices_and_direction,
                               done=self._set_choices, group="compare-choices")

    def _choices_and_direction(self) -> tuple[list[str], tuple[str, str] | None]:
        client = self.control.client
        return list(client.compared_profiles()), client.compare_direction()

    def _set_choices(self, answer: tuple[list[str], tuple[str, str] | None]) -> None:
        names, default = answer
        try:
            base = self.query_one("#compare-baseline", Select)
            cand = self.query_one("#compare-candidate", Select)
        except NoMatches:
            return  # the answer came while the App was quitting (the screen's children are gone)
        if names != self._choices:
            self._choices = list(names)
            keep = (base.value, cand.value)
            # Names are plain text, never markup; on a narrow terminal cut in the middle so that
            # the tail, which tells GLM-5 profiles apart, still shows in a half-width picker.
            width = NARROW_PICKER_LABEL if self.app.has_class("-narrow") else 10_000
            options = [(Text(render.middle_truncate(n, width)), n) for n in names]
            with self.prevent(Select.Changed):
                base.set_options(options)
                cand.set_options(options)
                pair = keep_direction(names, keep, self.control.compare_pair, default)
                base.value = pair[0] if pair[0] is not None else Select.NULL
                cand.value = pair[1] if pair[1] is not None else Select.NULL
        self.reload()

    def _pair(self) -> tuple[str, str] | None:
        base = self.query_one("#compare-baseline", Select).value
        cand = self.query_one("#compare-candidate", Select).value
        if isinstance(base, str) and isinstance(cand, str):
            return base, cand
        return None

    def reload(self) -> None:
        pair = self._pair()
        self.control.compare_pair = pair
        self._title(pair)
        self.maybe_refresh_bindings()
        if pair is None:
            return
        if pair[0] == pair[1]:
            self.notify("compare: baseline and candidate are the same profile", severity="warning", markup=False)
        self.control.call_core(f"compare {pair[0]} vs {pair[1]}", self._comparison, *pair,
                               done=self.show_grid, group="compare-build")

    def _comparison(self, baseline: str, candidate: str) -> Any:
        options = {k: True for k, on in (("include_flagged", self.include_flagged),
                                         ("accept_uncontrolled", self.accept_uncontrolled)) if on}
        return self.control.client.comparison(baseline, candidate, **options)

    def action_toggle_uncontrolled(self) -> None:
        self.accept_uncontrolled = not self.accept_uncontrolled
        self.reload()

    def action_toggle_flagged(self) -> None:
        self.include_flagged = not self.include_flagged
        self.reload()

    def show_grid(self, grid: Any) -> None:
        if grid is self.grid:  # the client's cached grid: nothing changed since it was painted
            if self.is_current and self._seen_grid is not grid:  # built in the background, seen now
                self._seen_grid = grid
                self._changes = self.control.seen.changes(grid, CI_LABEL)
                if self._changes:
                    self.query_one(CompareGrid).show(grid, self._changes, self._filter())
                    self._show_cell()
            return
        self.grid = grid
        # Verdicts that differ from what the user last saw are marked (↻) with why, until looked at.
        # Only a grid on screen is seen: one built while the screen waits in the background is not.
        self._seen_grid = grid if self.is_current else None
        self._changes = self.control.seen.changes(grid, CI_LABEL) if self.is_current else {}
        self.query_one("#compare-diff", Static).update(diff_text(grid))
        table = self.query_one(CompareGrid)
        table.show(grid, self._changes, self._filter())
        counts = {k: v for k, v in grid.verdict_counts().items() if v}
        table.border_subtitle = " · ".join(f"{v} {J.VERDICT_WORDS[k]}" for k, v in counts.items())
        self.query_one(ThroughputChart).show(grid)
        self._show_cell()
        self.prerender_soon()  # built while another screen is shown: the visit repaints from cache

    def _show_cell(self) -> None:
        cell = self.query_one(CompareGrid).highlighted_cell
        change = self._changes.get((cell.concurrency, cell.metric), "") if cell is not None else ""
        # The means and the interval in full under the grid at every width (a column may cut them).
        self.query_one("#compare-cell", Static).update(
            cell_detail(cell, numbers=True, change=change) if cell is not None else "")

    def on_data_table_row_highlighted(self) -> None:
        table = self.query_one(CompareGrid)
        cell, before = table.highlighted_cell, self._looked_at
        self._show_cell()
        key = (cell.concurrency, cell.metric) if cell is not None else None
        if before is not None and before != key and self.grid is not None:
            # The user moved on from a cell: what it shows now is what they saw.
            seen = next((c for c in self.grid.cells if (c.concurrency, c.metric) == before), None)
            if seen is not None:
                self.control.seen.acknowledge(self.grid, seen)
            if self._changes.pop(before, None) is not None:
                table.show(self.grid, self._changes, self._filter())
        self._looked_at = key

    def _filter(self) -> Any:
        bar = self.query_one(FilterBar)
        return (lambda cell: bar.matches(cell_text(cell))) if bar.active else None

    def action_filter(self) -> None:
        self.query_one(FilterBar).open()

    def on_input_changed(self, event: Any) -> None:
        if isinstance(event.input, FilterBar) and self.grid is not None:
            self.query_one(CompareGrid).show(self.grid, self._changes, self._filter())
            # The cursor's row index can stay while its cell changes (no highlight event): the
            # line under the grid follows the cell the cursor is on now.
            self._show_cell()

    def on_filter_bar_done(self) -> None:
        self.query_one(CompareGrid).focus()

    def on_data_table_row_selected(self, event: Any) -> None:
        # The focused grid takes `enter` itself (its select binding): the same as the key.
        event.stop()
        self.action_open_cell()

    def action_open_cell(self) -> None:
        cell = self.query_one(CompareGrid).highlighted_cell
        if cell is None or self.grid is None:
            self.notify("runs: highlight a cell of the grid first", severity="warning")
            return
        self.control.open_cell_runs(self.grid, cell)

    def on_select_changed(self, event: Select.Changed) -> None:
        self.reload()
        self._remember()

    def _remember(self) -> None:
        """The user chose a direction: keep it for the next session on this data dir."""
        pair = self._pair()
        if pair is not None and pair[0] != pair[1]:
            self.control.call_core("remember the compare direction", self.control.client.remember_direction,
                                   *pair, group="compare-remember")

    def _title(self, pair: tuple[str, str] | None) -> None:
        """The grid's title names the direction: every delta is the candidate against the baseline."""
        grid = self.query_one(CompareGrid)
        if pair is None:
            grid.border_title = "Baseline vs candidate"
            return
        narrow = self.app.has_class("-narrow")
        width = max(12, (self.app.size.width - (24 if narrow else 60)) // 2)
        base, cand = (render.middle_truncate(n, width) for n in pair)
        tail = "" if narrow else " (delta = candidate vs baseline)"
        grid.border_title = Text(f"baseline {base} → candidate {cand}{tail}")

    def binding_state(self) -> tuple[object, ...]:
        return (self._pair(),)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("export", "swap"):
            return True if self._pair() else None
        return True

    def action_export(self, fmt: str) -> None:
        self.control.export(fmt)

    def action_swap(self) -> None:
        pair = self._pair()
        if pair is None:
            return
        base = self.query_one("#compare-baseline", Select)
        cand = self.query_one("#compare-candidate", Select)
        with self.prevent(Select.Changed):
            base.value, cand.value = pair[1], pair[0]
        self.reload()
        self._remember()

    def action_reload(self) -> None:
        self.load_choices()

    def action_investigate(self) -> None:
        from moe_tui.ui.screens.investigate import InvestigateScreen

        pair, cell = self._pair(), self.query_one(CompareGrid).highlighted_cell
        if pair is None or cell is None:
            self.notify("investigate: highlight a cell of the grid first", severity="warning")
            return
        self.app.push_screen(InvestigateScreen(*pair, cell.concurrency, cell.metric))

    def action_explain(self) -> None:
        from moe_tui.ui.screens.explain import ExplainScreen

        pair, cell = self._pair(), self.query_one(CompareGrid).highlighted_cell
        if pair is None or cell is None:
            self.notify("explain: highlight a cell of the grid first", severity="warning")
            return
        self.app.push_screen(ExplainScreen(*pair, cell.concurrency))
