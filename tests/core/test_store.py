"""Store: schema, transactional writes, clear errors naming the file, crash safety."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import SCHEMA_VERSION, Store
from moe_tui.store.errors import StoreError


def new_run(store: Store, profile: str = "a", spec: BenchmarkSpec | None = None) -> int:
    spec = spec or BenchmarkSpec()
    return store.create_run(profile_name=profile, spec_json=spec.canonical_json(),
                            fingerprint=spec.fingerprint, client="moe-tui 0.1.0")


def test_schema_version_and_wal(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    assert store.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    store.close()
    # Re-opening an up-to-date store migrates nothing and keeps data.
    store = Store(tmp_path / "s.sqlite3")
    assert store.runs() == []


def test_run_lifecycle_round_trip(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    spec = BenchmarkSpec(max_concurrency=10)
    run_id = new_run(store, spec=spec)
    store.finish_run(
        run_id, status="complete", summary={"output_throughput": 38.5}, flags=["client_bound"],
        requests=[{"ok": True, "ttft": 0.1, "latency": 2.0, "itl": [0.1, 0.1], "output_len": 3},
                  {"ok": False, "error": "HTTP 500"}],
        gpu_samples=[(1.0, {"gpus": []})], selfcheck={"lag_ms_p99": 0.3},
    )
    run = store.run(run_id)
    assert run.status == "complete" and run.summary == {"output_throughput": 38.5}
    assert run.flags == ["client_bound"] and run.selfcheck == {"lag_ms_p99": 0.3}
    assert run.fingerprint == spec.fingerprint and BenchmarkSpec.from_dict(run.spec) == spec
    reqs = store.requests(run_id)
    assert [r["ok"] for r in reqs] == [True, False] and reqs[0]["itl"] == [0.1, 0.1]
    assert reqs[1]["error"] == "HTTP 500"
    assert store.gpu_samples(run_id) == [(1.0, {"gpus": []})]
    assert [r.id for r in store.runs(profile_name="a", fingerprint=spec.fingerprint)] == [run_id]
    assert store.runs(profile_name="b") == []


def test_failed_write_rolls_back_everything(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    run_id = new_run(store)
    # The second request row has a duplicate idx AND a broken type: the whole finish must roll back.
    with pytest.raises(Exception):  # noqa: B017 (sqlite and JSON errors alike: any failure must roll back)
        store.finish_run(run_id, status="complete", summary={"x": 1},
                         requests=[{"ok": True}, {"ok": True, "itl": object()}])
    run = store.run(run_id)
    assert run.status == "running" and run.summary == {}
    assert store.requests(run_id) == []


def test_invalid_finish_status_changes_nothing(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    run_id = new_run(store)
    with pytest.raises(ValueError, match="status"):
        store.finish_run(run_id, status="great")
    assert store.run(run_id).status == "running"


def test_corrupt_store_file_is_a_clear_error_naming_the_file(tmp_path):
    path = tmp_path / "s.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError) as info:
        Store(path)
    assert str(path) in str(info.value)
    assert "not a usable moe-tui database" in str(info.value)
    assert path.read_bytes() == b"this is not sqlite" * 100  # untouched


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    with pytest.raises(StoreError, match="newer than this moe-tui"):
        Store(path)


def test_read_only_store_write_fails_clearly_and_keeps_data(tmp_path):
    if os.geteuid() == 0:
        # root ignores file modes; use SQLite's own read-only flag instead.
        path = tmp_path / "s.sqlite3"
        store = Store(path)
        run_id = new_run(store)
        store.query("PRAGMA query_only = ON")
        with pytest.raises(StoreError) as info:
            store.finish_run(run_id, status="complete", summary={"x": 1})
        assert str(path) in str(info.value) and "nothing changed" in str(info.value)
        store.query("PRAGMA query_only = OFF")
        assert store.run(run_id).status == "running"
        return
    pytest.skip("non-root path not exercised on this machine")


@pytest.mark.integration
def test_crash_mid_write_leaves_previous_state(tmp_path):
    """A process killed inside a transaction leaves the store as it was before that transaction."""
    path = tmp_path / "s.sqlite3"
    store = Store(path)
    run_id = new_run(store)
    store.close()
    script = textwrap.dedent(f"""
        import os, signal
        from moe_tui.store.db import Store
        s = Store({str(path)!r})
        with s.transaction() as tx:
            tx.execute("UPDATE runs SET status = 'complete' WHERE id = {run_id}")
            tx.execute("DELETE FROM runs")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert proc.returncode == -9
    store = Store(path)
    assert [(r.id, r.status) for r in store.runs()] == [(run_id, "running")]


def test_mark_running_runs_after_crash(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    a, b = new_run(store), new_run(store)
    store.finish_run(b, status="complete")
    assert store.mark_running_runs("incomplete", "runner died") == 1
    assert store.run(a).status == "incomplete" and store.run(a).error == "runner died"
    assert store.run(b).status == "complete"


def test_version_1_store_migrates_to_current_keeping_runs(tmp_path):
    """A store written by schema 1 (before queue_settings) opens, migrates and keeps its runs."""
    from moe_tui.store import db as store_module

    path = tmp_path / "s.sqlite3"
    conn = sqlite3.connect(path)
    conn.isolation_level = None
    for statement in store_module._split_sql(store_module._MIGRATIONS[1]):
        conn.execute(statement)
    conn.execute("INSERT INTO runs (created_at, status, profile_name, spec_json, fingerprint, client)"
                 " VALUES (1.0, 'complete', 'a', '{}', 'f', 'moe-tui')")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    store = Store(path)
    assert store.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    assert [r.profile_name for r in store.runs()] == ["a"]
    assert store.query("SELECT count(*) FROM queue_settings")[0][0] == 0
