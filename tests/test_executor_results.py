"""A job's result file is imported once by job and item (issue 37): twice is one run, a result for an
attempt the item no longer runs stores nothing, a broken file is refused naming it. Pure store work."""

from __future__ import annotations

import json

import pytest

from moe_tui.executors.results import ResultError, import_result, read_result, write_result
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.jobs import ExecutorJobs
from moe_tui.store.queue import RunQueue


def _result(item_id: int, job_id: str, attempt: int) -> dict:
    spec = BenchmarkSpec.from_dict({"num_prompts": 4}, "t")
    return {"job_id": job_id, "item_id": item_id, "attempt": attempt, "node": "node2", "item_state": "done",
            "item_error": "", "server_start": None,
            "run": {"profile_name": "a", "spec_json": spec.canonical_json(), "fingerprint": spec.fingerprint,
                    "client": "moe-tui", "status": "complete", "profile": {}, "provenance": {"host": {"hostname": "node2"}},
                    "summary": {"output_throughput": 10.0}, "flags": [], "telemetry": {}, "selfcheck": {},
                    "requests": [], "gpu_samples": [], "error": "", "finished_at": 1.0}}


def claimed_with_a_job(tmp_path, profile: str = "a"):
    """A store with one claimed item of `profile` and its Slurm job 17 recorded: (store, item id, jobs)."""
    store = Store(tmp_path / "s.sqlite3")
    queue = RunQueue(store)
    item = queue.add_item(profile, BenchmarkSpec.from_dict({"num_prompts": 4}, "t"))
    queue.claim_next()
    jobs = ExecutorJobs(store)
    row_id = jobs.record("slurm", "n", item.id, 1, str(tmp_path / "result.json"))
    jobs.set_job_id(row_id, "17")
    return store, item.id, jobs


def test_a_result_imported_twice_is_one_run_and_closes_its_item(tmp_path):
    store, item_id, jobs = claimed_with_a_job(tmp_path)
    path = tmp_path / "result.json"
    write_result(path, _result(item_id, "17", 1))
    row = jobs.open_jobs("slurm")[0]
    first = import_result(store, row, read_result(path))
    again = import_result(store, row, read_result(path))  # the controller died before settling the row
    assert first[0] == again[0] == "imported" and first[1] == again[1] is not None
    assert store.query("SELECT COUNT(*) FROM runs")[0][0] == 1
    item = RunQueue(store).item(item_id)
    assert (item.state, item.run_id) == ("done", first[1])
    assert store.run(first[1]).provenance["executor"] == {"kind": "slurm", "job_id": "17", "node": "node2", "attempt": 1}


def test_a_result_of_an_older_attempt_or_another_job_is_stale(tmp_path):
    store, item_id, jobs = claimed_with_a_job(tmp_path)
    row = jobs.open_jobs("slurm")[0]
    assert import_result(store, row, read_result_of(tmp_path, _result(item_id, "17", 2)))[0] == "stale"
    assert import_result(store, row, read_result_of(tmp_path, _result(item_id, "99", 1)))[0] == "stale"
    assert store.query("SELECT COUNT(*) FROM runs")[0][0] == 0
    assert RunQueue(store).item(item_id).state == "running"


def read_result_of(tmp_path, data: dict) -> dict:
    path = tmp_path / "r.json"
    write_result(path, data)
    return read_result(path)


def test_a_broken_result_is_refused_naming_the_file_and_key(tmp_path):
    path = tmp_path / "result.json"
    assert read_result(path) is None  # not written yet
    data = _result(1, "17", 1)
    data["item_state"] = "running"
    path.write_text(json.dumps({"format": "moe-tui-job-result", "version": 1, **data}))
    with pytest.raises(ResultError, match="result.json.*item_state"):
        read_result(path)
    path.write_text("{half")
    with pytest.raises(ResultError, match="result.json"):
        read_result(path)
