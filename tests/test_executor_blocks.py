"""A campaign through a batch executor keeps the local runner's structure (issue 37 item 3): one job per
sweep (a profile's concurrencies of one repeat, the control's included, on one server start), the
sweep's runs imported with one shared server start (the grid pairs a cell with its control by start),
and with node blocks every repeat block pinned to one node (`sbatch --nodelist`). Pure store work:
an executor that records what it is asked."""

from __future__ import annotations

from pathlib import Path

from runner_support import write_profile

from moe_tui.executors.base import Executor, JobRequest, JobStatus
from moe_tui.executors.dispatch import Dispatcher
from moe_tui.executors.results import import_result, read_result, write_result
from moe_tui.executors.slurm import SlurmExecutor, SlurmSettings
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.jobs import ExecutorJobs
from moe_tui.store.queue import RunQueue
from moe_tui.store.queue_plan import CampaignPlan


class _Recorder(Executor):
    name = "slurm"

    def __init__(self) -> None:
        self.requests: list[JobRequest] = []

    def submit(self, request: JobRequest) -> str:
        self.requests.append(request)
        return str(100 + len(self.requests))

    def poll(self, job_ids):
        return {j: JobStatus(j, "RUNNING", "node1") for j in job_ids}

    def cancel(self, job_id):
        pass

    def find(self, name):
        return None


def _campaign(tmp_path: Path, repeats: int = 2) -> tuple[Store, list]:
    for name, backend in (("base", "flashinfer_cutlass"), ("cand", "flashinfer_cutedsl")):
        write_profile(tmp_path, name, backend, 30000)
    store = Store(tmp_path / "s.sqlite3")
    plan = CampaignPlan(("base", "cand"), (1, 8), repeats, BenchmarkSpec.from_dict({"num_prompts": 8}, "t"),
                        control=True)
    _, items = RunQueue(store).add_campaign(plan)
    return store, items


def test_each_sweep_is_one_job_and_each_repeat_block_is_pinned_to_one_node(tmp_path):
    store, items = _campaign(tmp_path, repeats=4)
    executor = _Recorder()
    d = Dispatcher(store, tmp_path, tmp_path / "data", executor, node_blocks=("node1", "node2"))
    d.step()
    by_id = {i.id: i for i in items}
    jobs = ExecutorJobs(store)
    sweeps = []
    for request in executor.requests:
        ids = [r[0] for r in store.query("SELECT queue_item_id FROM executor_jobs WHERE name = ? ORDER BY id",
                                         (request.name,))]
        sweep = {(by_id[i].profile_name, by_id[i].repeat_index) for i in ids}
        assert len(sweep) == 1, sweep  # one profile's one repeat
        assert sorted(by_id[i].spec.max_concurrency for i in ids) == [1, 2, 8]  # its cells and the control (2)
        (profile, repeat), = sweep
        assert request.nodelist == ("node1", "node2")[repeat % 2], (request, repeat)
        sweeps.append((profile, repeat, request.nodelist))
    assert len(executor.requests) == 2 * 4 and len({s[:2] for s in sweeps}) == 8
    for repeat in range(4):  # a block: both profiles of one repeat, on one node
        assert len({node for _, r, node in sweeps if r == repeat}) == 1
    assert {node for *_, node in sweeps} == {"node1", "node2"}
    assert all(j.state == "running" for j in RunQueue(store).items()) and len(jobs.open_jobs("slurm")) == 24


def test_without_node_blocks_no_job_is_pinned_and_an_item_outside_a_campaign_is_its_own_job(tmp_path):
    store, _ = _campaign(tmp_path, repeats=1)
    RunQueue(store).add_item("base", BenchmarkSpec.from_dict({"num_prompts": 4}, "t"))
    executor = _Recorder()
    Dispatcher(store, tmp_path, tmp_path / "data", executor).step()
    assert [r.nodelist for r in executor.requests] == ["", "", ""]  # two sweeps, one lone item


def test_sbatch_is_asked_for_the_pinned_node():
    request = JobRequest("n", Path("/j/job.json"), Path("/j"), Path("/j/result.json"), 8, 600.0, nodelist="node2")
    argv = SlurmExecutor().sbatch_argv(request, SlurmSettings(), Path("/j/job.sh"))
    assert "--nodelist=node2" in argv
    assert not any(a.startswith("--nodelist") for a in SlurmExecutor().sbatch_argv(
        JobRequest("n", Path("/j/job.json"), Path("/j"), Path("/j/result.json"), 8, 600.0), SlurmSettings(),
        Path("/j/job.sh")))


def _part(item_id: int, concurrency: int, tput: float) -> dict:
    spec = BenchmarkSpec.from_dict({"num_prompts": 8, "max_concurrency": concurrency}, "t")
    return {"item_id": item_id, "attempt": 1, "item_state": "done", "item_error": "",
            "server_start": {"argv": ["sim"], "state": "stopped", "ready_at": 5.0},
            "run": {"profile_name": "base", "spec_json": spec.canonical_json(), "fingerprint": spec.fingerprint,
                    "client": "moe-tui", "status": "complete", "profile": {}, "provenance": {},
                    "summary": {"output_throughput": tput}, "flags": [], "telemetry": {}, "selfcheck": {},
                    "requests": [], "gpu_samples": [], "error": "", "finished_at": 1.0}}


def test_a_sweeps_runs_are_imported_once_each_on_one_shared_server_start(tmp_path):
    store, items = _campaign(tmp_path, repeats=1)
    d = Dispatcher(store, tmp_path, tmp_path / "data", _Recorder())
    d.step()
    rows = [r for r in ExecutorJobs(store).open_jobs("slurm") if r.job_id == "101"]
    assert len(rows) == 3  # base's sweep: its cells (1, 8) and the control (2)
    path = Path(rows[0].result_path)
    assert all(r.result_path == str(path) for r in rows)
    concurrency = {i.id: i.spec.max_concurrency for i in items}
    write_result(path, {"job_id": "101", "node": "node2",
                        "items": [_part(r.item_id, concurrency[r.item_id], 100.0 + r.item_id) for r in rows]})
    runs = []
    for row in rows + rows:  # twice: a controller that died before settling imports again
        outcome, run_id = import_result(store, row, read_result(path, row.item_id))
        assert outcome == "imported"
        runs.append(run_id)
    assert runs[:3] == runs[3:] and len(set(runs)) == 3
    starts = {store.run(r).server_start_id for r in runs}
    assert len(starts) == 1 and None not in starts  # the cell and its control: one start, as measured
    assert store.query("SELECT COUNT(*) FROM server_starts")[0][0] == 1
    assert {store.run(r).provenance["executor"]["node"] for r in runs} == {"node2"}


def test_cancelling_one_item_of_a_sweep_cancels_it_and_retries_the_others_saying_why(tmp_path):
    store, _ = _campaign(tmp_path, repeats=1)
    lines: list[str] = []
    d = Dispatcher(store, tmp_path, tmp_path / "data", _Recorder(), result_grace_s=0.0, on_line=lines.append)
    d.step()
    jobs = ExecutorJobs(store)
    rows = [r for r in jobs.open_jobs("slurm") if r.job_id == "101"]
    jobs.ask_cancel(rows[0].id)  # `queue cancel` of the sweep's first item: its job is scancelled
    for _ in range(2):  # seen ended, then settled
        for row in [r for r in jobs.open_jobs("slurm") if r.job_id == "101"]:
            d._settle(row, JobStatus("101", "CANCELLED", "node1"))
    queue = RunQueue(store)
    assert queue.item(rows[0].item_id).state == "cancelled"
    assert [queue.item(r.item_id).state for r in rows[1:]] == ["pending", "pending"]  # a new sweep job comes
    said = [line for line in lines if "retried" in line]
    assert len(said) == 2 and all(f"cancelled with item #{rows[0].item_id} of its sweep" in x for x in said), lines
