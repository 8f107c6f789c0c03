"""Issue 23 item 4: a verdict that changed since the user last saw the cell is marked (↻), with
why, until the user has looked at it; the interval is labelled as the grid labels it."""

from __future__ import annotations

import dataclasses

from textual.widgets import DataTable, Static

from moe_tui import judgement as J
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.control.seen import SeenVerdicts
from tests.support.pilot import SIZE, open_compare, press, settle
from tests.ui.fakes import RecordingAdapter, demo_runs

A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


def grids():
    """The demo grid, then the same grid after the baseline lost one of its runs at concurrency 10."""
    a, b = demo_runs()
    full = build_grid_from_runs(a, b, baseline_name=A, candidate_name=B)
    fewer = [r for r in a if r["spec"]["max_concurrency"] != 10] + [r for r in a if r["spec"]["max_concurrency"] == 10][:1]
    return full, build_grid_from_runs(fewer, b, baseline_name=A, candidate_name=B)


def test_a_changed_verdict_is_reported_with_why_until_acknowledged():
    full, fewer = grids()
    seen = SeenVerdicts()
    assert seen.changes(full) == {}  # first sight: nothing to compare with
    changes = seen.changes(fewer)
    assert set(changes) == {(10, "output_throughput")}
    words = changes[(10, "output_throughput")]
    assert words.startswith("was better (") and "CI (family-corrected) [+55.0%, +59.3%] 97.5%" in words and "n=2 vs 2" in words
    assert "now noise unknown" in words and "runs n=2->1 vs 2->2" in words
    assert seen.changes(fewer) == changes  # still not looked at
    seen.acknowledge(fewer, fewer.cell(10, "output_throughput"))
    assert seen.changes(fewer) == {}
    # The other direction is another set of cells.
    assert seen.changes(dataclasses.replace(fewer, baseline_name=B, candidate_name=A)) == {}


def test_a_cell_that_had_no_data_is_new_not_changed():
    full, _ = grids()
    seen = SeenVerdicts()
    empty = dataclasses.replace(full, cells=tuple(dataclasses.replace(c, verdict="no_data") for c in full.cells))
    seen.changes(empty)
    assert seen.changes(full) == {}


def test_same_runs_a_different_verdict_says_the_judgement_changed():
    full, _ = grids()
    seen = SeenVerdicts()
    seen.changes(full)
    cell = full.cell(10, "output_throughput")
    other = dataclasses.replace(full, cells=tuple(dataclasses.replace(c, verdict="worse") if c is cell else c
                                                 for c in full.cells))
    words = seen.changes(other)[(10, "output_throughput")]
    assert "same runs and means" in words


class Changing(RecordingAdapter):
    def __init__(self) -> None:
        super().__init__()
        self.grids = list(grids())
        self.now = 0  # which grid the store "holds"; the test moves it on

    def compared_profiles(self):
        return [A, B]

    def comparison(self, baseline, candidate, include_flagged=False):
        return self.grids[self.now]


async def test_the_grid_marks_the_changed_cell_and_clears_it_once_seen(make_app):
    app, adapter = make_app(adapter=Changing())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compare(pilot, app)
        table = screen.query_one("#compare-grid", DataTable)
        was = J.VERDICT_WORDS[grids()[0].cell(10, "output_throughput").verdict]
        assert table.get_cell("10/output_throughput", "verdict").plain == was
        adapter.now = 1  # a run was replaced
        await press(pilot, app, "ctrl+r")  # reload: the second grid arrives
        assert table.get_cell("10/output_throughput", "verdict").plain.startswith("↻ ")
        table.focus()
        table.move_cursor(row=table.get_row_index("10/output_throughput"))
        await settle(pilot, app)
        detail = str(screen.query_one("#compare-cell", Static).render())
        assert f"changed since you last saw it: was {was}" in detail and "why: runs n=2->1" in detail
        await press(pilot, app, "down")  # looked at it, moved on
        assert not table.get_cell("10/output_throughput", "verdict").plain.startswith("↻")
