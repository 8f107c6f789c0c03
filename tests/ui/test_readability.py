"""Readability checks from the integrator's headless screenshots: long profile names cut in the
middle (their tails tell them apart), texts that must not run together (queue summary, header),
and a GPU panel that says why there are no GPUs when the controller's first snapshot said so
before the App subscribed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.widgets import DataTable, Static

from moe_tui.control import ControlSnapshot
from moe_tui.telemetry import GpuProcess
from moe_tui.ui.render import middle_truncate
from moe_tui.ui.widgets.gpu_panel import PROCS_WIDTH, GpuPanel
from moe_tui.ui.widgets.queue_summary import QueueSummary
from moe_tui.ui.widgets.server_panel import ServerPanel
from tests.ui.fakes import RecordingAdapter, gpu_snapshot, no_driver_snapshot, telemetry_message
from tests.ui.waiting import workers_finished

GLM_A = "glm5-nvfp4-flashinfer-cutlass"
GLM_B = "glm5-nvfp4-flashinfer-cutedsl"


class LongNamesAdapter(RecordingAdapter):
    """Two GLM-5 profiles whose names differ only at the end, an idle controller, and the
    controller's relayed 'no driver' snapshot in its state (as after the first sample)."""

    def __init__(self) -> None:
        super().__init__()
        a, b = self.servers
        self.servers = (replace(a, profile=GLM_A), replace(b, profile=GLM_B))
        self.queue = tuple(replace(r, profile=GLM_A if "cutlass" in r.profile else GLM_B) for r in self.queue)

    def snapshot(self) -> ControlSnapshot:
        return ControlSnapshot(servers=self.servers, queue=self.queue_window(), activity="idle",
                               detail="waiting for queue items", paused=False, current_item=None,
                               telemetry=no_driver_snapshot().to_dict())


async def settle(pilot, app) -> None:
    await workers_finished(app)
    await pilot.pause(0.2)


def column(table: DataTable, key: str) -> list[str]:
    return [str(table.get_cell(row, key)) for row in table.rows]


def test_middle_truncate_keeps_the_tail_and_the_width():
    assert middle_truncate(GLM_B, 20) == "glm5-nvfp4-…-cutedsl"
    for width in range(8, len(GLM_A)):
        a, b = middle_truncate(GLM_A, width), middle_truncate(GLM_B, width)
        assert len(a) == len(b) == width and a != b, width
        assert a.startswith("gl") and "…" in a
    assert middle_truncate("short", 10) == "short"
    assert middle_truncate(GLM_A, 1) == "…" and middle_truncate(GLM_A, 0) == ""


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_long_profile_names_stay_apart_in_every_fixed_column(make_app, size):
    app, _ = make_app(adapter=LongNamesAdapter())
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        table = app.screen.query_one(ServerPanel).query_one(DataTable)
        names = column(table, "profile")
        assert len(set(names)) == 2 and {n[-7:] for n in names} == {"cutlass", "cutedsl"}, names
        width = table.columns["profile"].width  # type: ignore[index]
        assert all(len(n) <= width for n in names), (names, width)
        # The GPU panel's "Held by": the managed server's profile keeps its tail too.
        snap = gpu_snapshot()
        gpus = tuple(replace(g, processes=(GpuProcess(pid=4242, used_memory_bytes=2**30, name="python"),))
                     for g in snap.gpus)
        app.post_message(telemetry_message(replace(snap, gpus=gpus), owners={4242: GLM_B}))
        await settle(pilot, app)
        held = column(app.screen.query_one(GpuPanel).query_one(DataTable), "procs")
        assert held and all(h.endswith("-cutedsl") and len(h) <= PROCS_WIDTH for h in held), held
        await pilot.press("2")
        await settle(pilot, app)
        queue = app.screen.query_one("#queue-table", DataTable)
        profiles = set(column(queue, "profile"))
        assert {p[-7:] for p in profiles} == {"cutlass", "cutedsl"}, profiles


async def test_queue_summary_separates_activity_from_detail(make_app):
    app, _ = make_app(adapter=LongNamesAdapter())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        line = str(app.screen.query_one(QueueSummary).render())
        assert "idle: waiting for queue items" in line, line
        assert "idlewaiting" not in line


async def test_header_reads_title_dash_subtitle_with_single_blanks(make_app):
    app, _ = make_app(subtitle="in-process controller")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        title = app.format_title(app.title, app.sub_title)
        assert title.plain == "moe-tui — in-process controller"
        # No span may start with the blank before the dash: an SVG renderer drops a span's
        # leading blank, which is how the screenshot read "moe-tui—  in-process controller".
        assert all(not title.plain[s.start:s.end].startswith(" ") for s in title.spans), title.spans
        header = app.screen.query_one("HeaderTitle")
        assert "moe-tui — in-process controller" in str(header.render())


async def test_gpu_panel_says_why_when_the_snapshot_brought_no_gpus(make_app):
    # The controller relays its 'unavailable' snapshot once, at start, before the App subscribes:
    # only the state snapshot carries it, and the panel must show it, not "waiting" forever.
    app, adapter = make_app(adapter=LongNamesAdapter())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert adapter.callbacks  # subscribed, yet no GpuTelemetry event ever came
        note = str(app.screen.query_one(GpuPanel).query_one("#gpu-unavailable", Static).render())
        assert "waiting" not in note
        assert "no NVIDIA driver" in note and "simulated GPUs appear" in note, note


async def test_compare_cells_never_run_into_the_next_column_at_120(make_app):
    """`2072.7 ± 83.02 (n=42265.7 ± 81.99 (n=`: a cell longer than its column was cut with no mark
    and no gap, so two numbers read as one. Now the run count goes first, then the end is marked …,
    and one blank always parts a cell from the next."""
    from types import SimpleNamespace

    from moe_tui.ui.widgets.compare_grid import COLUMNS, CompareGrid, cell_cells

    side = SimpleNamespace
    cell = SimpleNamespace(concurrency=1024, metric="output_throughput", label="Output tok/s", verdict="no_data",
                           delta_text="-12.34% (-1234.56 tok/s)", comparable=True, ci_text="[-123.4%, +118.5%] 98.33%",
                           baseline=side(text="2072.7 ± 83.02 (n=42)"), candidate=side(text="2265.7 ± 81.99 (n=42)"),
                           baseline_flags=(), candidate_flags=(), spec_diffs=(), confounders=(), uncontrolled="",
                           flagged=False, investigation="")
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        grid = CompareGrid()
        await app.screen.mount(grid)
        grid.sync({"1024/output_throughput": cell_cells(cell, True)})
        await pilot.pause()
        for key, _, width in COLUMNS:
            shown = grid.get_cell("1024/output_throughput", key).plain
            assert len(shown) <= width - 1, (key, shown, width)
        assert grid.get_cell("1024/output_throughput", "baseline").plain == "2072.7 ± 83.02"
        assert grid.get_cell("1024/output_throughput", "candidate").plain == "2265.7 ± 81.99"
        assert grid.get_cell("1024/output_throughput", "delta").plain.endswith("…")
