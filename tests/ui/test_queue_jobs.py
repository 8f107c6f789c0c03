"""The Queue screen's Job column (issue 37 item 1/3): an item an executor worked shows its newest
batch job's id, Slurm state and node, read with the page from the store (`StoreReads.queue_window`
over `executor_jobs`); the column appears only while the page has a job, and the screen fits 120x40
and 80x24 with it (snapshots looked at)."""

from __future__ import annotations

from dataclasses import replace

from moe_tui.control.reads import StoreReads
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.jobs import ExecutorJobs
from moe_tui.store.queue import RunQueue
from moe_tui.ui.app import MoeTuiApp
from moe_tui.ui.widgets.queue_table import QueueTable
from tests.ui.fakes import T0, RecordingAdapter, demo_queue
from tests.ui.test_snapshots import open_queue

SPEC = {"input_len": 64, "output_len": 32, "num_prompts": 8, "max_concurrency": 4}


def test_the_queue_page_carries_each_items_newest_job(tmp_path) -> None:
    with Store(tmp_path / "s.sqlite3") as store:
        queue = RunQueue(store)
        a, b, c = (queue.add_item("p", BenchmarkSpec.from_dict(SPEC, "t")).id for _ in range(3))
        jobs = ExecutorJobs(store)
        first = jobs.record("slurm", "moetui-x-i1-a1", a, 1, str(tmp_path / "r1.json"))
        jobs.set_job_id(first, "41")
        jobs.update(first, state="NODE_FAIL", node="node2", reason="", ended=True)
        second = jobs.record("slurm", "moetui-x-i1-a2", a, 2, str(tmp_path / "r2.json"))
        jobs.set_job_id(second, "42")
        jobs.update(second, state="RUNNING", node="node1", reason="", ended=False)
        jobs.record("slurm", "moetui-x-i2-a1", b, 1, str(tmp_path / "r3.json"))  # sbatch not answered yet
        reads = StoreReads()
        reads.store = store
        rows = {r.id: r for r in reads.queue_window().rows}
    assert (rows[a].job_id, rows[a].job_state, rows[a].job_node) == ("42", "RUNNING", "node1")
    assert (rows[b].job_id, rows[b].job_state) == ("?", "SUBMITTING")
    assert (rows[c].job_id, rows[c].job_state, rows[c].job_node) == ("", "", "")


def _with_jobs() -> tuple:
    rows = list(demo_queue())
    rows[0] = replace(rows[0], job_id="4097", job_state="COMPLETED", job_node="node1")
    rows[1] = replace(rows[1], job_id="4099", job_state="COMPLETED", job_node="node2")
    rows[2] = replace(rows[2], job_id="4101", job_state="RUNNING", job_node="node1", attempts=2)
    rows[3] = replace(rows[3], state="running", job_id="4102", job_state="PENDING")
    rows[5] = replace(rows[5], job_id="4100", job_state="NODE_FAIL", job_node="node2")
    return tuple(rows)


class JobsAdapter(RecordingAdapter):
    def queue_rows(self):
        return _with_jobs()


def _app() -> MoeTuiApp:
    return MoeTuiApp(JobsAdapter(), clock=lambda: T0, subtitle="snapshot")


async def test_the_job_column_shows_only_with_jobs(make_app) -> None:
    for adapter, wanted in ((JobsAdapter(), True), (RecordingAdapter(), False)):
        app, _ = make_app(adapter=adapter)
        async with app.run_test(size=(120, 40)) as pilot:
            await open_queue(pilot)
            table = app.screen.query_one(QueueTable)
            keys = [c.key.value for c in table.ordered_columns]
            assert ("job" in keys) is wanted and ("spec" in keys) is not wanted, keys
            if wanted:
                cells = " ".join(str(c) for c in table.get_row_at(2))
                assert "4101 RUNNING node1" in cells, cells


def test_queue_jobs_120x40(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(120, 40), run_before=open_queue)


def test_queue_jobs_80x24(snap_compare) -> None:
    assert snap_compare(_app(), terminal_size=(80, 24), run_before=open_queue)
