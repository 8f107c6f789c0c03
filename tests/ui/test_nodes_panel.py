"""The dashboard's node panel (issue 37 item 4): batch jobs' nodes, each GPU's owning job and item,
live/stale/ended as the core's rows say (`executors.nodes.node_rows`, fed fixed jobs and samples),
hidden when no batch job ran. Snapshots at 120x40 and 80x24."""

from __future__ import annotations

from textual.widgets import DataTable

from moe_tui.executors.nodes import node_rows
from moe_tui.store.jobs import JobRow
from moe_tui.ui.app import MoeTuiApp
from moe_tui.ui.widgets.node_panel import NodePanel
from tests.ui.fakes import T0, RecordingAdapter
from tests.ui.test_snapshots import feed
from tests.ui.waiting import workers_finished


def _job(row_id: int, job_id: str, item: int, node: str, ended: bool = False) -> JobRow:
    return JobRow(row_id, "slurm", f"moetui-t-i{item}-a1", job_id, item, 1, "COMPLETED" if ended else "RUNNING",
                  node, "", f"/jobs/{row_id}/result.json", T0 - 60, T0 - 5 if ended else None, False,
                  "imported" if ended else "", None)


def _gpu(index: int, util: float) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H200", "util_gpu_pct": util, "mem_used_bytes": 120 * 2**30,
            "mem_total_bytes": 141 * 2**30, "power_w": 610.0, "temperature_c": 61.0}


def _sample(node: str, age: float, gpus: list[dict[str, object]], owned: list[int] | None) -> dict[str, object]:
    return {"format": "moe-tui-node-gpus", "node": node, "owned": owned,
            "snapshot": {"t": 12.5, "wall": T0 - age, "simulated": True, "available": True, "gpus": gpus}}


ROWS = tuple(node_rows(
    [_job(1, "4101", 12, "node1"), _job(2, "4102", 13, "node1"), _job(3, "4103", 14, "node2"),
     _job(4, "4099", 9, "node3", ended=True)],
    {1: _sample("node1", 0.5, [_gpu(0, 91.0), _gpu(1, 88.0), _gpu(2, 12.0), _gpu(3, 0.0)], [0, 1]),
     2: _sample("node1", 0.7, [_gpu(0, 91.0), _gpu(1, 88.0), _gpu(2, 12.0), _gpu(3, 0.0)], [2]),
     3: _sample("node2", 42.0, [_gpu(0, 77.0), _gpu(1, 75.0)], None),
     4: _sample("node3", 3.0, [_gpu(0, 5.0)], None)},
    T0))


class NodesAdapter(RecordingAdapter):
    def node_rows(self):
        return ROWS


def _table_text(app) -> list[str]:
    table = app.screen.query_one(NodePanel).query_one(DataTable)
    return [" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


async def test_the_dashboard_shows_each_nodes_gpus_their_jobs_and_stale_or_ended_nodes(make_app):
    app, _ = make_app(adapter=NodesAdapter())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.3)  # one tick: the App reads the nodes
        await workers_finished(app)
        await pilot.pause(0.2)
        panel = app.screen.query_one(NodePanel)
        assert panel.display and "1 of 3 live" in str(panel.border_subtitle)
        rows = _table_text(app)
        assert len(rows) == 7, rows
        assert rows[0].startswith("node1 live · sim") and "job 4101 #12" in rows[0] and "120/141" in rows[0]
        assert "job 4101 #12" in rows[1] and "job 4102 #13" in rows[2] and "—" in rows[3]
        assert rows[4].startswith("node2 STALE 42s") and "120/141" not in rows[4]
        assert "job 4103 #14" in rows[4] and "n/a" in rows[4] and "610W" not in rows[4]  # no figure shown as live
        assert rows[6].startswith("node3 ended") and "job 4099" not in rows[6]


async def test_without_batch_jobs_the_node_panel_stays_hidden(make_app):
    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.3)
        await workers_finished(app)
        assert not app.screen.query_one(NodePanel).display


async def feed_nodes(pilot) -> None:
    await feed(pilot)
    pilot.app.live.set_nodes(ROWS)
    pilot.app.mark_dirty("nodes")
    await pilot.pause(0.3)


def _app() -> MoeTuiApp:
    return MoeTuiApp(NodesAdapter(), clock=lambda: T0, subtitle="snapshot")


def test_dashboard_nodes_120x40(snap_compare):
    assert snap_compare(_app(), terminal_size=(120, 40), run_before=feed_nodes)


def test_dashboard_nodes_80x24(snap_compare):
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=feed_nodes)
