"""Months of data (issue 26), on a real store: the grid's reads are indexed reads of the compared
pair, a grid is built once per store change, an investigation's cold run is marked on the run itself
(clearing the queue cannot put it back into a cell), and deleting a run from any SQLite client
deletes its requests and GPU samples. Timings live in benches/scale.py, not here."""

from __future__ import annotations

import re
import sqlite3

import pytest

from moe_tui.grids.pair import build_grid
from moe_tui.investigate.planner import plan_investigation
from moe_tui.investigate.store import diagnostic_run_ids, enqueue_plan, evidence_from_grid, investigations
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue
from moe_tui.store.schema import SCHEMA_VERSION
from tests.support.stores import store_of, stored_row
from tests.test_grid_investigation import A, B
from tests.ui.fakes import demo_runs


@pytest.fixture
def store(tmp_path):
    a, b = demo_runs()
    with store_of(tmp_path, a + b) as s:
        yield s


def _cold_run(store: Store) -> tuple[int, float]:
    """Queue a cold/warm investigation of conc 10 and store an absurd cold run for its cold item."""
    before = build_grid(store, A, B).cell(10, "output_throughput")
    plan = plan_investigation(evidence_from_grid(build_grid(store, A, B), store), 10)
    enqueue_plan(RunQueue(store), plan.only(["cold_warm"]))
    (record,) = investigations(store, A, B)
    cold_item = next(item for role, item in record.roles() if role.get("role") == "cold")
    runs = demo_runs()[1] if cold_item.profile_name == B else demo_runs()[0]
    side = next(r for r in runs if r["spec"]["max_concurrency"] == 10)
    (run_id,) = store.import_runs([stored_row(side, summary={**side["summary"], "output_throughput": 1.0})])
    RunQueue(store).attach_run(cold_item.id, run_id)
    return run_id, before.candidate.mean if cold_item.profile_name == B else before.baseline.mean


def test_cold_run_is_marked_on_the_run_and_clearing_the_queue_keeps_it_out(store):
    run_id, mean_before = _cold_run(store)
    assert store.run(run_id).diagnostic == "cold"
    assert diagnostic_run_ids(store) == {run_id} == diagnostic_run_ids(store, (A, B))
    assert diagnostic_run_ids(store, ("someone-else",)) == set()
    queue = RunQueue(store)
    for item in queue.items(states=["pending"]):
        queue.cancel(item.id)
    assert queue.clear(finished_only=True) > 0 and queue.items() == []
    cell = build_grid(store, A, B).cell(10, "output_throughput")
    assert mean_before in (cell.baseline.mean, cell.candidate.mean)
    assert 1.0 not in (cell.baseline.mean, cell.candidate.mean)


def _drop_schema_8(conn) -> None:
    """What schema 8 added (run summaries, campaign profiles, their triggers): gone, as before it."""
    for trigger in ("runs_summary_insert", "runs_summary_update", "runs_summary_delete",
                    "campaigns_profiles_insert", "campaigns_profiles_delete"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE run_summaries")
    conn.execute("DROP TABLE campaign_profiles")


def _as_schema_4(path) -> None:
    conn = sqlite3.connect(path)
    _drop_schema_8(conn)
    conn.execute("DROP TRIGGER queue_items_mark_profiled")  # schema 6's, which reads the column
    conn.execute("DROP TRIGGER queue_items_mark_cold")
    conn.execute("DROP TRIGGER runs_delete_children")
    conn.execute("DROP INDEX runs_diagnostic")
    conn.execute("ALTER TABLE runs DROP COLUMN diagnostic")
    conn.execute("ALTER TABLE runs DROP COLUMN stored_bytes")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()


def test_upgrade_marks_the_cold_runs_an_older_store_knew_only_through_queue_items(tmp_path):
    path = tmp_path / "old.sqlite3"
    with Store(path) as s:
        a, b = demo_runs()
        s.import_runs([stored_row(r) for r in a + b])
        run_id, _ = _cold_run(s)
    _as_schema_4(path)
    conn = sqlite3.connect(path)
    assert "diagnostic" not in {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    conn.close()
    with Store(path) as s:
        assert s.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        assert s.run(run_id).diagnostic == "cold"
        assert [r.id for r in s.runs(profile_name=s.run(run_id).profile_name, exclude_diagnostic=True)
                if r.id == run_id] == []


def test_a_schema_6_store_gains_the_bytes_column_and_the_runner_writes_it(tmp_path):
    path = tmp_path / "six.sqlite3"
    Store(path).close()
    conn = sqlite3.connect(path)  # a store made by the merged main before schema 7
    _drop_schema_8(conn)
    conn.execute("DROP INDEX queue_items_position")
    conn.execute("ALTER TABLE runs DROP COLUMN stored_bytes")
    conn.execute("PRAGMA user_version = 6")
    conn.commit()
    conn.close()
    with Store(path) as s:
        assert s.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        run_id = s.create_run(profile_name=A, spec_json="{}", fingerprint="f" * 64, client="moe-tui")
        s.finish_run(run_id, status="complete", requests=[{"ok": True, "itl": [0.01] * 10}])
        assert s.query("SELECT stored_bytes FROM runs WHERE id = ?", (run_id,))[0][0] > 0
        assert "queue_items_position" in {r[0] for r in s.query("SELECT name FROM sqlite_master")}


def test_deleting_a_run_from_a_plain_sqlite_client_leaves_no_orphans(store):
    run_id = store.create_run(profile_name=A, spec_json="{}", fingerprint="f" * 64, client="moe-tui")
    store.finish_run(run_id, status="complete", summary={"completed": 1},
                     requests=[{"ok": True, "ttft": 0.1, "latency": 0.2, "itl": [0.01, 0.02]}],
                     gpu_samples=[(1.0, {"util": 5})])
    assert store.requests(run_id) and store.gpu_samples(run_id)
    conn = sqlite3.connect(store.path)  # the sqlite3 shell's default: foreign keys OFF
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 0
    conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
    conn.commit()
    conn.close()
    assert store.requests(run_id) == [] and store.gpu_samples(run_id) == []


def test_a_new_store_frees_pages_incrementally(store):
    assert store.query("PRAGMA auto_vacuum")[0][0] == 2  # INCREMENTAL


@pytest.mark.parametrize(("sql", "index"), [
    ("SELECT * FROM runs WHERE profile_name = ? AND status IN ('complete','failed') AND diagnostic = ''"
     " ORDER BY id", "runs_profile"),
    ("SELECT id FROM runs WHERE diagnostic != '' AND profile_name IN (?, ?)", "runs_diagnostic"),
    ("SELECT * FROM queue_items WHERE campaign_id = ? ORDER BY position, id", "queue_items_campaign"),
    ("SELECT profile_name, fingerprint, state, COUNT(*) FROM queue_items WHERE profile_name IN (?, ?)"
     " GROUP BY profile_name, fingerprint, state", "queue_items_plan"),
    ("SELECT * FROM campaigns WHERE policy = ? ORDER BY id", "campaigns_policy"),
    ("SELECT id FROM runs WHERE finished_at < ?", "runs_finished"),
    ("SELECT id FROM queue_items ORDER BY position, id", "queue_items_position"),
])
def test_the_grids_reads_are_index_seeks_not_scans(store, sql, index):
    params = [p for p in ("x", "y")][: sql.count("?")]
    plan = " | ".join(r[3] for r in store.query("EXPLAIN QUERY PLAN " + sql, params))
    # An index seek, or an index walk: never a table scan; a read of every row needs no sort (a
    # seek may sort what it found: the pair's runs, not the store).
    assert index in plan and not re.search(r"SCAN (runs|queue_items)(?! USING)", plan), plan
    assert "WHERE" in sql or "TEMP B-TREE" not in plan, plan


def test_profile_names_skip_scan_finds_every_profile(store):
    store.import_runs([stored_row(demo_runs()[0][0], profile_name=name) for name in ("zz", "aa", "mm")])
    assert store.profile_names_with_runs() == sorted({A, B, "zz", "aa", "mm"})


def test_a_grid_is_built_once_per_store_change(store):
    first = build_grid(store, A, B)
    assert build_grid(store, A, B) is first  # nothing committed: the cached grid
    store.import_runs([stored_row(demo_runs()[0][0])])  # this handle commits
    second = build_grid(store, A, B)
    assert second is not first and second.cell(1, "output_throughput").baseline.n == \
        first.cell(1, "output_throughput").baseline.n + 1
    other = Store(store.path)  # another process's handle commits
    other.import_runs([stored_row(demo_runs()[0][0])])
    other.close()
    third = build_grid(store, A, B)
    assert third is not second and third.cell(1, "output_throughput").baseline.n == \
        second.cell(1, "output_throughput").baseline.n + 1


def test_the_queue_views_light_read_agrees_with_the_full_items(store):
    queue = RunQueue(store)
    _cold_run(store)  # an investigation campaign with its items
    from moe_tui.spec import BenchmarkSpec

    queue.add_item("lonely", BenchmarkSpec.from_dict({"max_concurrency": 48}))
    full, light = queue.items(), queue.light_items()
    names = queue.campaign_names()
    assert [(i.id, i.spec.max_concurrency, names.get(i.campaign_id or -1, ""), i.state, i.fingerprint)
            for i in full] == [(r["id"], r["concurrency"], r["campaign"] or "", r["state"], r["fingerprint"])
                               for r in light]
    assert light[-1]["concurrency"] == 48 and light[-1]["campaign"] is None


def test_the_queue_view_is_read_again_only_after_a_change(store):
    from moe_tui.control.reads import StoreReads
    from moe_tui.spec import BenchmarkSpec

    reads = StoreReads()
    reads.store = store
    queue = RunQueue(store)
    queue.add_item(A, BenchmarkSpec.from_dict({"max_concurrency": 4}))
    first = reads.queue_rows()
    assert reads.queue_rows() is first  # nothing committed: the same rows
    queue.add_item(B, BenchmarkSpec.from_dict({"max_concurrency": 8}))
    second = reads.queue_rows()
    assert second is not first and [r.concurrency for r in second] == [4, 8]


def test_an_import_finds_earlier_copies_by_hash_through_an_index(store):
    (rid,) = store.import_runs([stored_row(demo_runs()[0][0], provenance={"content_sha256": "abc", "source_file": "f"},
                                        source="import")])
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)  # the statement as run, its values inlined
    try:
        assert store.imported_runs_by_hash(["abc", "zzz"]) == {"abc": rid}
    finally:
        store._conn.set_trace_callback(None)
    (lookup,) = [s for s in statements if "content_sha256" in s]
    plan = " ".join(r[3] for r in store.query("EXPLAIN QUERY PLAN " + lookup))
    assert "USING INDEX runs_import_hash" in plan and "SCAN runs" not in plan
