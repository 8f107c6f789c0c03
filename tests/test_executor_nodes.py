"""The node rows of batch jobs' relayed GPU telemetry (`executors.nodes`): pure rows, the file channel."""

from __future__ import annotations

import json
from pathlib import Path

from moe_tui.executors.nodes import (
    NODE_FILE,
    gres_gpu_indices,
    node_rows,
    owned_gpus,
    read_node_sample,
    write_node_sample,
)
from moe_tui.store.jobs import JobRow

NOW = 1_000_000.0


def job(row_id: int, job_id: str, item: int, node: str = "node1", state: str = "RUNNING",
        ended: float | None = None, outcome: str = "") -> JobRow:
    return JobRow(row_id, "slurm", f"moetui-x-i{item}-a1", job_id, item, 1, state, node, "", f"/j/{row_id}/result.json",
                  NOW - 60, ended, False, outcome, None)


def gpu(index: int, util: float = 50.0) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H200", "util_gpu_pct": util, "mem_used_bytes": 40 * 2**30,
            "mem_total_bytes": 80 * 2**30, "power_w": 300.0, "temperature_c": 55.0}


def sample(node: str, t: float, gpus: list[dict[str, object]], owned: list[int] | None = None,
           simulated: bool = True) -> dict[str, object]:
    return {"format": "moe-tui-node-gpus", "node": node, "owned": owned,
            "snapshot": {"t": 12.5, "wall": t, "simulated": simulated, "available": True, "gpus": gpus}}


def test_a_live_node_shows_its_gpus_and_which_job_owns_each() -> None:
    jobs = [job(1, "101", 7), job(2, "102", 8)]
    samples = {1: sample("node1", NOW - 1, [gpu(0), gpu(1), gpu(2)], owned=[0, 1]),
               2: sample("node1", NOW - 2, [gpu(0), gpu(1), gpu(2)], owned=[2])}
    [row] = node_rows(jobs, samples, NOW)
    assert (row.node, row.status, row.simulated) == ("node1", "live", True)
    assert [(g.index, g.job_id, g.item_id) for g in row.gpus] == [(0, "101", 7), (1, "101", 7), (2, "102", 8)]
    assert row.gpus[0].util_pct == 50.0 and row.gpus[0].mem_text == "40/80"
    assert row.gpus[2].owner_text == "job 102 #8"
    assert row.status_text == "live · sim"


def test_without_an_allocation_the_jobs_own_sampled_gpus_are_its_own() -> None:
    [row] = node_rows([job(1, "101", 7)], {1: sample("node2", NOW, [gpu(3)])}, NOW)
    assert [(g.index, g.job_id) for g in row.gpus] == [(3, "101")]


def test_a_silent_node_is_stale_and_shows_no_last_value_as_live() -> None:
    [row] = node_rows([job(1, "101", 7)], {1: sample("node1", NOW - 30, [gpu(0, util=99.0)])}, NOW)
    assert row.status == "stale" and row.status_text == "STALE 30s"
    assert row.gpus[0].util_pct is None and row.gpus[0].power_w is None and row.gpus[0].mem_text == ""


def test_a_node_whose_job_ended_shows_ended_with_no_figures_and_no_owner() -> None:
    ended = job(1, "101", 7, state="COMPLETED", ended=NOW - 3, outcome="imported")
    [row] = node_rows([ended], {1: sample("node1", NOW - 1, [gpu(0)])}, NOW)
    assert row.status == "ended" and row.status_text == "ended"
    assert row.gpus[0].util_pct is None and row.gpus[0].job_id == ""
    assert row.jobs == ("job 101 #7 COMPLETED",)


def test_a_pending_job_without_a_node_has_no_row_and_a_running_one_waits_for_its_sample() -> None:
    rows = node_rows([job(1, "101", 7, node="", state="PENDING"), job(2, "102", 8, node="node2")], {}, NOW)
    assert [(r.node, r.status, r.gpus) for r in rows] == [("node2", "waiting", ())]


def test_owned_gpus_reads_slurms_allocation_not_uuids() -> None:
    assert owned_gpus({"SLURM_JOB_GPUS": "2,3"}) == [2, 3]
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc", "SLURM_STEP_GPUS": ""}) is None
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": "1"}) == [1]
    assert owned_gpus({}) is None


def test_the_node_file_round_trips_and_a_foreign_file_is_no_sample(tmp_path: Path) -> None:
    path = tmp_path / NODE_FILE
    write_node_sample(path, job_id="5", item_id=3, node="node1", snapshot={"t": 1.0, "wall": NOW, "gpus": [gpu(0)]},
                      owned=None, seq=1)
    body = read_node_sample(path)
    assert body is not None and body["node"] == "node1" and body["snapshot"]["gpus"][0]["index"] == 0
    assert [p.name for p in tmp_path.iterdir()] == [NODE_FILE]  # no temporary left behind
    path.write_text(json.dumps({"format": "other", "snapshot": {"gpus": []}}), encoding="utf-8")
    assert read_node_sample(path) is None
    path.write_text("{not json", encoding="utf-8")
    assert read_node_sample(path) is None
    assert read_node_sample(tmp_path / "missing.json") is None


def test_the_allocation_is_read_from_scontrols_gres_idx() -> None:
    shown = ("JobId=7 JobName=x\n   JOB_GRES=gpu:3\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0-1,5)\n"
             "     Nodes=node2 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:2)\n   TresPerNode=gres:gpu:3\n")
    assert gres_gpu_indices(shown, "node1") == [0, 1, 5]
    assert gres_gpu_indices(shown, "node2") == [2]
    assert gres_gpu_indices("JobId=7\n   TresPerNode=gres:gpu:3\n", "node1") is None


def test_a_sweeps_job_shows_the_item_its_relay_says_is_being_measured(tmp_path) -> None:
    from moe_tui.events import GpuTelemetry, RunStarted
    from moe_tui.executors.job import _node_relay

    path = tmp_path / NODE_FILE
    relay = _node_relay(path, "101", {1: 7, 2: 8})  # the job's private queue ids -> the controller's items
    snapshot = {"t": 1.0, "wall": NOW, "simulated": True, "available": True, "gpus": [gpu(0)]}
    relay(GpuTelemetry(snapshot=snapshot))  # type: ignore[arg-type]
    assert read_node_sample(path)["item_id"] == 7  # before any run: the sweep's first item
    relay(RunStarted(run_id=5, queue_item_id=2, profile="base", fingerprint="f", spec_summary="c=8"))
    relay(GpuTelemetry(snapshot=snapshot))  # type: ignore[arg-type]
    relayed = read_node_sample(path)
    assert relayed["item_id"] == 8
    rows = [job(1, "101", 7), job(2, "101", 8)]  # one job, two items of its sweep: one file both read
    [row] = node_rows(rows, {1: relayed, 2: relayed}, NOW)
    assert [(g.index, g.job_id, g.item_id) for g in row.gpus] == [(0, "101", 8)]
    [row] = node_rows(list(reversed(rows)), {1: {**relayed, "item_id": 7}, 2: {**relayed, "item_id": 7}}, NOW)
    assert row.gpus[0].item_id == 7
