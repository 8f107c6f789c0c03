"""The run summary a grid reads (issue 26, `moe_tui.store.summaries`), on real stores: the grid built
from summaries is the grid built from whole runs (flags from telemetry and selfcheck, confounders from
resolved server args, imports' server_info, requested fingerprints), summaries stay in step with
`runs` whoever writes, a store made by schema 7 is upgraded, the grid's statements read neither
provenance nor samples and find the pair's campaigns through an index, a pruned run's queue item
keeps an honest state, and the roofline lines use exactly the runs the grid averaged."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time

import pytest

from moe_tui.compare import BASELINE, CANDIDATE
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.grids.pair import RUN_STATUSES, build_grid, campaigns_note, plan_of
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue
from moe_tui.store.queue_plan import CampaignPlan
from moe_tui.store.schema import _MIGRATIONS, SCHEMA_VERSION

A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"
T0 = 1_790_000_000.0


def _spec(conc: int, **changes) -> BenchmarkSpec:
    base = {"client": "moe-tui", "client_version": "", "input_len": 128, "output_len": 64, "num_prompts": 200,
            "max_concurrency": conc, "seed": 42}
    return BenchmarkSpec.from_dict({**base, **changes})


def _profile(name: str, backend: str) -> dict:
    return {"name": name, "engine": "sim", "moe_runner_backend": backend, "tp_size": 8, "ep_size": 8,
            "model_path": "GLM-5-NVFP4", "quantization": "modelopt_fp4", "gpus": list(range(8))}


def _provenance(backend: str, start: int, kv_pool: int, item_fp: str | None) -> dict:
    return {
        "provenance_schema": 1, "simulated": True, "spec": {"big": "x" * 2000}, "profile": {"ignored": True},
        "server": {"start_id": start, "pid": 4000 + start, "base_url": "http://127.0.0.1:1", "log_path": "/tmp/log",
                   "requested_backend": backend, "resolved_backend": backend, "backend_mismatch": False,
                   "resolved_args": {"moe_runner_backend": backend, "kv_cache_dtype": "auto", "max_total_num_tokens": kv_pool,
                                     "chunked_prefill_size": 8192, "random_seed": start},
                   "sglang_version": "0.5.23", "engine": "sim"},
        "client": {"name": "moe-tui", "version": "1.0"},
        "host": {"hostname": "box", "platform": "Linux", "python_version": "3.11.9", "moe_tui_version": "0.1",
                 "python_executable": "/usr/bin/python"},
        "gpu": {"driver_version": "580.65", "gpu_names": {str(i): "NVIDIA H200" for i in range(8)},
                "gpu_uuids": {str(i): f"GPU-{i}" for i in range(8)}, "sm_clock_max_seen_mhz": 1980},
        "queue_item": {"id": 7, "requested_fingerprint": item_fp} if item_fp else None,
        "warmup_pass": {"duration_s": 3.0}, "started_at": T0, "finished_at": T0 + 5,
    }


def _store_run(store: Store, name: str, backend: str, conc: int, tok_s: float, *, start: int,
               telemetry: dict | None = None, selfcheck: dict | None = None, kv_pool: int = 500_000,
               item_fp: str | None = None) -> int:
    """One run through the runner's write path (create_run, then finish_run with samples)."""
    spec = _spec(conc)
    rid = store.create_run(profile_name=name, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                           client="moe-tui", profile=_profile(name, backend),
                           provenance=_provenance(backend, start, kv_pool, item_fp), server_start_id=start)
    store.finish_run(rid, status="complete", provenance=_provenance(backend, start, kv_pool, item_fp),
                     summary={"output_throughput": tok_s, "mean_ttft_ms": 40.0 + conc, "p99_ttft_ms": 80.0 + conc,
                              "mean_tpot_ms": 9.0, "mean_itl_ms": 9.0, "mean_e2e_latency_ms": 600.0 + conc,
                              "completed": 200, "failed": 0, "total_output_tokens": 12800},
                     telemetry=telemetry or {"overall": {"sm_clock_drop_pct": 1.0, "sm_util_mean": 90},
                                             "gpus": {"0": {"name": "NVIDIA H200", "power_w": [400] * 50}}},
                     selfcheck=selfcheck or {"client_bound": False, "loop_lag_ms": [1.0] * 50},
                     requests=[{"idx": i, "ok": True, "ttft": 0.04, "latency": 0.6, "itl": [0.009] * 63}
                               for i in range(20)],
                     gpu_samples=[(T0 + i, {"util": 90}) for i in range(5)])
    return rid


def _fill(store: Store) -> dict[str, int]:
    """The pair at two concurrencies, three starts a side, plus one throttled and one client-bound
    run (suspect: left out of the cells), and a run of another profile."""
    starts = iter(range(1, 100))
    ids: dict[str, int] = {}
    for conc, ta, tb in ((2, 180.0, 181.0), (16, 900.0, 1100.0)):
        for jitter in (-1.0, 0.5, 1.5):
            _store_run(store, A, "flashinfer_cutlass", conc, ta + jitter, start=next(starts))
            _store_run(store, B, "flashinfer_cutedsl", conc, tb + jitter * 1.5, start=next(starts),
                       kv_pool=480_000)
    ids["throttled"] = _store_run(store, B, "flashinfer_cutedsl", 16, 5000.0, start=next(starts), telemetry={
        "overall": {"suspect_clock_events": ["hw_slowdown"], "sm_clock_drop_pct": 30.0},
        "gpus": {"3": {"name": "NVIDIA H200", "power_w": [300] * 50}},
        "foreign_processes": [{"pid": 999, "gpu": 3, "name": "jupyter"}]})
    ids["client_bound"] = _store_run(store, A, "flashinfer_cutlass", 2, 1.0, start=next(starts),
                                     selfcheck={"client_bound": True, "client_bound_reasons": ["loop lag 80 ms"]})
    ids["other"] = _store_run(store, "someone-else", "triton", 2, 50.0, start=next(starts))
    return ids


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "store.sqlite3")
    yield s
    s.close()


def _grid_from(store: Store, read) -> object:
    return build_grid_from_runs(read(A), read(B), baseline_name=A, candidate_name=B, plan=plan_of(store, (A, B)))


def test_the_grid_from_run_summaries_is_the_grid_from_whole_runs(store):
    ids = _fill(store)
    whole = _grid_from(store, lambda n: store.runs(profile_name=n, statuses=RUN_STATUSES, exclude_diagnostic=True))
    summed = _grid_from(store, lambda n: store.run_summaries(profile_name=n, statuses=RUN_STATUSES,
                                                             exclude_diagnostic=True))
    assert summed == whole
    assert json.dumps(summed.to_json_dict(), sort_keys=True) == json.dumps(whole.to_json_dict(), sort_keys=True)
    # The facts that made it so: the throttled and client-bound runs are flagged and left out,
    # the derived KV pool is named, and the summaries hold none of the per-run bulk.
    assert ids["throttled"] in summed.point(CANDIDATE, 16).flagged_run_ids
    assert ids["client_bound"] in summed.point(BASELINE, 2).flagged_run_ids
    assert any("max_total_num_tokens" in w for w in summed.warnings)
    (row,) = store.query("SELECT facts_json FROM run_summaries WHERE run_id = ?", (ids["throttled"],))
    facts = json.loads(row[0])
    assert "gpu_uuids" not in facts["provenance"]["gpu"] and "spec" not in facts["provenance"]
    assert facts["telemetry"]["gpus"] == {"3": {"name": "NVIDIA H200"}}
    assert {"throttled", "foreign_gpu_process"} <= set(summed.point(CANDIDATE, 16).flags)


def test_the_grid_reads_neither_provenance_nor_samples_and_finds_campaigns_by_index(store):
    _fill(store)
    RunQueue(store).add_campaign(CampaignPlan(profiles=(A, B), concurrencies=(2, 16), repeats=2,
                                              base_spec=_spec(2)))
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        build_grid(store, A, B)
    finally:
        store._conn.set_trace_callback(None)
    text = "\n".join(statements)
    for bulk in ("provenance_json", "telemetry_json", "selfcheck_json", "requests", "gpu_samples", "instr("):
        assert bulk not in text, bulk
    assert "FROM run_summaries" in text and "campaign_profiles" in text
    plans = {q: " ".join(r[3] for r in store.query("EXPLAIN QUERY PLAN " + q, p)) for q, p in (
        ("SELECT * FROM run_summaries WHERE profile_name = ? AND status IN (?,?,?) AND diagnostic = ''",
         (A, *RUN_STATUSES)),
        ("SELECT campaign_id FROM campaign_profiles WHERE profile_name IN (?,?)", (A, B)))}
    assert all("USING" in plan and "SCAN" not in plan.replace("SCAN CONSTANT", "") for plan in plans.values()), plans


def test_summaries_stay_in_step_with_runs_whoever_writes(store):
    ids = _fill(store)
    rid = store.create_run(profile_name=A, spec_json=_spec(2).canonical_json(), fingerprint=_spec(2).fingerprint,
                           client="moe-tui", profile=_profile(A, "flashinfer_cutlass"))
    assert store.mark_running_runs("incomplete", "runner died") == 1
    (row,) = store.query("SELECT status, error FROM run_summaries WHERE run_id = ?", (rid,))
    assert tuple(row) == ("incomplete", "runner died")
    # A sqlite3 shell: marks a run, inserts one (its facts computed when read), deletes one.
    conn = sqlite3.connect(store.path)
    conn.execute("UPDATE runs SET diagnostic = 'cold' WHERE id = ?", (ids["other"] - 1,))
    conn.execute("INSERT INTO runs (created_at, finished_at, status, profile_name, spec_json, fingerprint, client,"
                 " provenance_json, summary_json) VALUES (?,?,?,?,?,?,?,?,?)",
                 (T0, T0, "complete", "shell", _spec(2).canonical_json(), _spec(2).fingerprint, "x",
                  json.dumps({"server": {"resolved_backend": "triton", "pid": 1}}), json.dumps({"output_throughput": 3})))
    conn.execute("DELETE FROM runs WHERE id = ?", (ids["client_bound"],))
    conn.commit()
    conn.close()
    assert [r.id for r in store.run_summaries(profile_name=B, exclude_diagnostic=True)
            if r.id == ids["other"] - 1] == []
    (shell,) = store.run_summaries(profile_name="shell")
    assert shell.provenance == {"server": {"resolved_backend": "triton"}} and shell.summary == {"output_throughput": 3}
    assert store.query("SELECT COUNT(*) FROM run_summaries WHERE run_id = ?", (ids["client_bound"],))[0][0] == 0
    assert store.query("SELECT COUNT(*) FROM runs")[0][0] == store.query("SELECT COUNT(*) FROM run_summaries")[0][0]


def _schema_7_store(path) -> None:
    """A store as the previous schema (7) made it: its migrations, and rows written as it wrote them."""
    conn = sqlite3.connect(path, isolation_level=None)
    for version in range(1, 8):
        conn.executescript(_MIGRATIONS[version])
    conn.execute("PRAGMA user_version = 7")
    with Store(path.parent / "donor.sqlite3") as donor:  # rows of the pair, copied column by column
        _fill(donor)
        RunQueue(donor).add_campaign(CampaignPlan(profiles=(A, B), concurrencies=(2,), repeats=2,
                                                  base_spec=_spec(2)), name="old campaign")
        columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
        for row in donor.query(f"SELECT {', '.join(columns)} FROM runs ORDER BY id"):
            conn.execute(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", tuple(row))
        for row in donor.query("SELECT id, created_at, name, policy, definition_json FROM campaigns"):
            conn.execute("INSERT INTO campaigns (id, created_at, name, policy, definition_json) VALUES (?,?,?,?,?)",
                         tuple(row))
    conn.execute("INSERT INTO queue_items (position, profile_name, spec_json, fingerprint, state, run_id, created_at,"
                 " updated_at) VALUES (1, ?, ?, ?, 'done', 9999, ?, ?)",
                 (A, _spec(2).canonical_json(), _spec(2).fingerprint, T0, T0))
    conn.close()


def test_a_store_made_by_schema_7_is_upgraded_and_its_grid_unchanged(tmp_path):
    path = tmp_path / "seven.sqlite3"
    _schema_7_store(path)
    conn = sqlite3.connect(path)
    whole_before = [tuple(r) for r in conn.execute("SELECT id, summary_json FROM runs ORDER BY id")]
    conn.close()
    with Store(path) as s:
        assert s.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION == 11
        assert s.query("SELECT COUNT(*) FROM run_summaries WHERE simulated IS NULL OR seq IS NULL")[0][0] == 0
        assert s.query("SELECT COUNT(*) FROM run_summaries WHERE facts_json IS NULL")[0][0] == 0
        assert [tuple(r) for r in s.query("SELECT run_id, summary_json FROM run_summaries ORDER BY run_id")] == whole_before
        whole = _grid_from(s, lambda n: s.runs(profile_name=n, statuses=RUN_STATUSES, exclude_diagnostic=True))
        stored = build_grid(s, A, B, extras=False)  # no campaign holds runs of both: every run, said so
        assert stored.warnings[-1] == campaigns_note(None, 0)
        assert dataclasses.replace(stored, warnings=stored.warnings[:-1]) == _grid_from(s, lambda n: s.run_summaries(
            profile_name=n, statuses=RUN_STATUSES, exclude_diagnostic=True)) == whole
        assert {tuple(r) for r in s.query("SELECT profile_name, campaign_id FROM campaign_profiles")} == {(A, 1), (B, 1)}
        assert any(k[0] == A for k in plan_of(s, (A, B)))
        (item,) = RunQueue(s).items()
        assert (item.state, item.run_id, item.error) == ("done", None, "run 9999 pruned")


def test_pruning_a_run_leaves_its_item_done_with_a_note_and_the_archive_links_it_again(store, tmp_path):
    queue = RunQueue(store)
    item = queue.add_item(A, _spec(2))
    claimed = queue.claim_next()
    assert claimed is not None and claimed.id == item.id
    rid = _store_run(store, A, "flashinfer_cutlass", 2, 180.0, start=1)
    queue.finish(item.id, "done", run_id=rid)
    with store.transaction() as tx:  # as the controller's _open_run records it
        tx.execute("UPDATE runs SET queue_item_id = ? WHERE id = ?", (item.id, rid))
    archive = tmp_path / "a.jsonl"
    with archive.open("w") as out:
        store.archive_runs([rid], out)
    assert store.delete_runs([rid]) == 1
    pruned = queue.item(item.id)
    assert (pruned.state, pruned.run_id) == ("done", None)
    assert pruned.error == f"run {rid} pruned {time.strftime('%Y-%m-%d', time.gmtime())}"
    assert queue.claim_next() is None  # never re-run by accident
    with pytest.raises(Exception, match="done"):
        queue.retry(item.id)
    restored, _ = store.restore_archive(archive.read_text().splitlines(), str(archive))
    again = queue.item(item.id)
    assert again.run_id == restored[0] and again.state == "done" and "restored as run" in again.error


def test_roofline_lines_use_the_runs_the_grid_averaged_not_a_flagged_one(store):
    ids = _fill(store)
    grid = build_grid(store, A, B)
    assert grid.extras is not None
    for side, cells in ((BASELINE, grid.extras.baseline_roofline), (CANDIDATE, grid.extras.candidate_roofline)):
        for conc in (2, 16):
            point = grid.point(side, conc)
            roof = cells[conc]
            assert roof.n == point.n == 3
            expected = [store.run(i).summary["output_throughput"] for i in point.run_ids]
            assert roof.measured_tok_s == pytest.approx(sum(expected) / len(expected))
    assert grid.extras.candidate_roofline[16].measured_tok_s < 2000  # the throttled 5000 tok/s run is out
    assert ids["throttled"] not in grid.point(CANDIDATE, 16).run_ids


def test_reading_commands_open_a_current_store_read_only_and_upgrade_an_older_one(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    from moe_tui.paths import store_path

    with Store.open_for_reading() as fresh:  # none yet: made as the writable open makes it
        assert not fresh.readonly and fresh.path == store_path()
    with Store.open_for_reading() as current:  # no integrity pass, no write lock: a read
        assert current.readonly
        with pytest.raises(Exception, match="read-only"):
            current.set_keep_samples_runs(3)
    path = store_path()
    path.unlink()
    _schema_7_store(path)
    with Store.open_for_reading() as upgraded:
        assert not upgraded.readonly and upgraded.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    with Store.open_for_reading() as again:
        assert again.readonly and len(again.run_summaries(profile_name=A)) == 7


def test_the_gate_line_comes_from_a_server_start_the_grid_averaged(store):
    from moe_tui.gate.correctness import GateSample
    from moe_tui.gate.probe import prompt_set_id

    ids = _fill(store)

    def gate(name: str, start: int | None, drift: bool) -> None:
        tokens = [100 + i for i in range(12)]
        if drift:
            tokens[4:] = [9000 + i for i in range(8)]
        samples = [GateSample(f"p{p}", tuple(tokens), tuple([-0.05] * 12)).to_dict() for p in range(4)]
        store.record_gate_samples(profile_name=name, prompt_set=prompt_set_id(), samples=samples,
                                  server_start_id=start)

    clean_start = store.run(build_grid(store, A, B).point(CANDIDATE, 16).run_ids[0]).server_start_id
    gate(A, None, drift=False)
    gate(B, clean_start, drift=False)
    gate(B, store.run(ids["throttled"]).server_start_id, drift=True)  # later, on the throttled run's start
    grid = build_grid(store, A, B)
    assert not grid.extras.output_differs, grid.extras.gate.words
    assert "output_differs" not in grid.flags
    # Without the grid's starts the latest pass (the left-out start's) would have spoken.
    from moe_tui.grids.extras import gate_verdict

    assert gate_verdict(store, A, B).output_differs
