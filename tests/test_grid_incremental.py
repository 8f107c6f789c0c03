"""A grid that reads what it judges (issue 34), on real stores: the grid built from the index and the
chosen specs' runs (`grids.rows`, `store.grid_rows`) is the grid built from every run; runs of a spec
the grid did not choose are never read whole; an open grid brought up to date after a new run, a
finished run, a foreign writer's run and a prune is the grid rebuilt from scratch, and it read only
what changed; a store made by schema 8 is upgraded to 9 with its rows marked."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.grids import pair
from moe_tui.grids.pair import RUN_STATUSES, build_grid, campaigns_note, plan_of
from moe_tui.store.db import Store
from moe_tui.store.schema import _MIGRATIONS
from tests.test_run_summaries import T0, A, B, _fill, _profile, _provenance, _spec, _store_run


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "store.sqlite3")
    yield s
    s.close()


def _every_run(store: Store):
    """The grid as built before issue 34: from every run of both profiles, read whole."""
    def read(n: str):
        return store.run_summaries(profile_name=n, statuses=RUN_STATUSES, exclude_diagnostic=True)

    grid = build_grid_from_runs(read(A), read(B), baseline_name=A, candidate_name=B, plan=plan_of(store, (A, B)))
    # These stores hold one-off runs (no campaign measured both): every run is read, and the grid says so.
    return dataclasses.replace(grid, warnings=(*grid.warnings, campaigns_note(None, 0)))


def _same(a, b) -> None:
    assert a == b
    assert json.dumps(a.to_json_dict(), sort_keys=True) == json.dumps(b.to_json_dict(), sort_keys=True)


def _old_era(store: Store) -> list[int]:
    """Baseline runs of an older spec at concurrency 16 (the grid chooses the spec both sides share)."""
    old = _spec(16, input_len=256)
    ids = []
    for start in (201, 202, 203):
        rid = store.create_run(profile_name=A, spec_json=old.canonical_json(), fingerprint=old.fingerprint,
                               client="moe-tui", profile=_profile(A, "flashinfer_cutlass"),
                               provenance=_provenance("flashinfer_cutlass", start, 500_000, None), server_start_id=start)
        store.finish_run(rid, status="complete", summary={"output_throughput": 700.0 + start}, telemetry={},
                         selfcheck={}, requests=[], gpu_samples=[])
        ids.append(rid)
    return ids


def _statements(store: Store, build) -> str:
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        build()
    finally:
        store._conn.set_trace_callback(None)
    return "\n".join(seen)


def test_the_grid_from_the_index_is_the_grid_from_every_run_and_reads_only_the_chosen_spec(store):
    _fill(store)
    old = _old_era(store)
    grid = build_grid(store, A, B, extras=False)
    _same(grid, _every_run(store))
    assert any("other specs exist at this concurrency" in n for n in grid.point("baseline", 16).notes)
    read_whole = set(pair._rows[store][A].runs)
    assert read_whole and not read_whole & set(old)  # the older spec: counted from the index, never decoded


def test_an_open_grid_reads_only_what_changed_and_equals_a_rebuild(store):
    _fill(store)
    _old_era(store)
    build_grid(store, A, B, extras=False)
    # A run starts (not in a grid yet), then finishes: each time the open grid reads the changed rows alone.
    spec = _spec(16)
    rid = store.create_run(profile_name=B, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                           client="moe-tui", profile=_profile(B, "flashinfer_cutedsl"),
                           provenance=_provenance("flashinfer_cutedsl", 300, 480_000, None), server_start_id=300)
    _same(build_grid(store, A, B, extras=False), _every_run(store))
    store.finish_run(rid, status="complete", provenance=_provenance("flashinfer_cutedsl", 300, 480_000, None),
                     summary={"output_throughput": 1099.0}, telemetry={}, selfcheck={}, requests=[], gpu_samples=[])
    built = []
    text = _statements(store, lambda: built.append(build_grid(store, A, B, extras=False)))
    _same(built[0], _every_run(store))
    assert "WHERE seq > " in text
    grid_reads = [s for s in text.splitlines() if "FROM run_summaries" in s and "run_id IN" not in s]
    assert not any("ORDER BY run_id" in s for s in grid_reads), grid_reads  # no full read of the pair's rows
    assert rid in pair.build_grid(store, A, B, extras=False).point("candidate", 16).run_ids


def test_an_open_grid_follows_a_foreign_writer_and_a_prune(store):
    ids = _fill(store)
    build_grid(store, A, B, extras=False)
    conn = sqlite3.connect(store.path)  # a sqlite3 shell: a run without facts or mark, one without a concurrency
    for spec_json in (_spec(2).canonical_json(), json.dumps({"input_len": 128})):
        conn.execute("INSERT INTO runs (created_at, started_at, finished_at, status, profile_name, spec_json,"
                     " fingerprint, client, profile_json, provenance_json, summary_json) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                     (T0, T0, T0 + 9, "complete", A, spec_json, _spec(2).fingerprint, "x",
                      json.dumps(_profile(A, "flashinfer_cutlass")), json.dumps({"simulated": True}),
                      json.dumps({"output_throughput": 179.0})))
    conn.commit()
    conn.close()
    grid = build_grid(store, A, B, extras=False)
    _same(grid, _every_run(store))
    assert grid.simulated and any("have no max_concurrency" in w for w in grid.warnings)
    store.delete_runs([ids["client_bound"], ids["throttled"]])
    _same(build_grid(store, A, B, extras=False), _every_run(store))


def test_a_store_made_by_schema_8_is_upgraded_to_9_with_its_rows_marked(tmp_path):
    path = tmp_path / "eight.sqlite3"
    with Store(path) as s:
        _fill(s)
        _store_run(s, A, "flashinfer_cutlass", 64, 2000.0, start=77)
        before = _every_run(s)
    conn = sqlite3.connect(path, isolation_level=None)  # back to what schema 8 left: no columns of 9
    conn.execute("DROP TRIGGER runs_summary_insert")
    conn.execute("DROP TRIGGER runs_summary_update")
    conn.execute("DROP INDEX run_summaries_cells")
    conn.execute("DROP INDEX run_summaries_seq")
    for column in ("concurrency", "simulated", "seq"):
        conn.execute(f"ALTER TABLE run_summaries DROP COLUMN {column}")
    conn.executescript(_MIGRATIONS[8])  # its triggers back
    conn.execute("PRAGMA user_version = 8")
    conn.close()
    with Store(path) as s:
        rows = {r[0]: tuple(r[1:]) for r in s.query("SELECT run_id, concurrency, simulated, seq FROM run_summaries")}
        assert sorted({c for c, _, _ in rows.values()}) == [2, 16, 64]
        assert all(sim == 1 and seq == rid for rid, (_, sim, seq) in rows.items())
        _same(build_grid(s, A, B, extras=False), before)
        new = _store_run(s, B, "flashinfer_cutedsl", 64, 2100.0, start=78)
        assert s.query("SELECT seq FROM run_summaries WHERE run_id = ?", (new,))[0][0] > max(rows)
