"""Two-node servers (issue 37 item 5), the pure parts: the profile's `nnodes` checked, the srun step and
each rank's argv, Slurm's node states read, the inter-node cost, a lost node's result retried."""

from __future__ import annotations

import json
import os

import pytest

from moe_tui.executors.base import Executor, JobStatus
from moe_tui.executors.dispatch import Dispatcher
from moe_tui.executors.results import write_result
from moe_tui.profiles import ProfileError, profile_from_dict
from moe_tui.servers import rank
from moe_tui.servers.multinode import Placement, launch_argv, lost_in_sinfo
from moe_tui.sim.internode import MoeShape, internode_ms
from moe_tui.store.queue import RunQueue
from tests.test_executor_results import claimed_with_a_job

BASE = {"name": "wide", "engine": "sim", "model_path": "GLM-5-NVFP4", "moe_runner_backend": "flashinfer_cutlass",
        "tp_size": 8}


def test_a_two_node_profile_passes_nnodes_and_one_node_profiles_keep_their_snapshot():
    two = profile_from_dict({**BASE, "nnodes": 2}, "wide.toml")
    one = profile_from_dict(BASE, "one.toml")
    assert two.argv("py")[-2:] == ["--nnodes", "2"]
    assert "--nnodes" not in one.argv("py")
    assert two.snapshot()["nnodes"] == 2
    assert "nnodes" not in one.snapshot()  # a one-node profile's snapshot (and fingerprint) as before the key


@pytest.mark.parametrize("data, fragment", [
    ({"nnodes": 3}, "tp_size must be divisible by number of nodes"),  # SGLang's own assert, said before a start
    ({"nnodes": 0}, "must be in [1, 64]"),
    ({"nnodes": 2, "gpus": [0, 1]}, "lists 2 GPU(s) but tp_size is 8 over 2 nodes"),
    ({"nnodes": 2, "extra_args": ["--node-rank", "1"]}, "--node-rank sets node_rank"),
    ({"extra_args": ["--dist-init-addr=10.0.0.1:5000"]}, "sets dist_init_addr"),
])
def test_bad_multi_node_settings_are_refused_naming_the_key(data, fragment):
    with pytest.raises(ProfileError) as err:
        profile_from_dict({**BASE, **data}, "wide.toml")
    assert fragment in str(err.value) and "wide.toml" in str(err.value)


PLACEMENT = Placement(("node1", "node2"), "10.1.0.7:29512", "/shared/jobs/item-3-a1")


def test_the_srun_step_runs_one_rank_per_node_each_through_the_rank_wrapper():
    server = ["py", "-m", "moe_tui.sim", "--tp-size", "8", "--nnodes", "2"]
    assert launch_argv(server, PLACEMENT, "py") == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=node1,node2", "--kill-on-bad-exit=1",
        "--overlap", "py", "-m", "moe_tui.servers.rank", "--dist-init-addr", "10.1.0.7:29512", "--head", "node1",
        "--rank-log-dir", "/shared/jobs/item-3-a1", "--", *server]


@pytest.mark.parametrize("procid, node, want", [("0", "node1", "0"), ("1", "node2", "1")])
def test_each_rank_execs_the_server_with_its_node_rank_and_the_rendezvous(monkeypatch, procid, node, want):
    seen: list[list[str]] = []
    monkeypatch.setattr(os, "execvp", lambda path, args: seen.append(args))
    monkeypatch.setenv("SLURM_PROCID", procid)
    monkeypatch.setenv("SLURMD_NODENAME", node)
    rank.main(["--dist-init-addr", "10.1.0.7:29512", "--head", "node1", "--", "py", "-m", "moe_tui.sim", "--nnodes", "2"])
    assert seen == [["py", "-m", "moe_tui.sim", "--nnodes", "2", "--node-rank", want, "--dist-init-addr", "10.1.0.7:29512"]]


@pytest.mark.parametrize("procid, node", [("0", "node1"), ("1", "node2")])
def test_the_heads_key_file_reaches_a_rank_only_where_it_exists(monkeypatch, tmp_path, procid, node):
    seen: list[list[str]] = []
    monkeypatch.setattr(os, "execvp", lambda path, args: seen.append(args))
    monkeypatch.setenv("SLURM_PROCID", procid)
    monkeypatch.setenv("SLURMD_NODENAME", node)
    here = tmp_path / "keys.yaml"
    here.write_text("api-key: x\n")
    for config in (str(here), str(tmp_path / "on-the-head-only.yaml")):
        rank.main(["--dist-init-addr", "h:1", "--head", "node1", "--", "py", "--nnodes", "2", "--config", config])
    kept, missing = seen
    assert kept[:5] == ["py", "--nnodes", "2", "--config", str(here)]  # a shared folder: every rank reads it
    # rank 0 always keeps it (a missing file there is an error SGLang must name); rank 1 serves no API
    assert ("--config" in missing) == (procid == "0"), missing


def test_rank_zero_off_the_head_node_refuses(monkeypatch, capsys):
    monkeypatch.setattr(os, "execvp", lambda path, args: pytest.fail("must not exec"))
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURMD_NODENAME", "node2")
    assert rank.main(["--dist-init-addr", "h:1", "--head", "node1", "--", "py"]) == 2
    assert "not the head node1" in capsys.readouterr().err


def test_sinfo_states_name_down_failing_and_unresponsive_nodes_only():
    out = "node1|idle|none\nnode2|down|moe-tui-test\nnode3|idle*|Not responding\nnode4|mixed|none\nnode5|fail|bad dimm\n"
    assert lost_in_sinfo(out) == ["node2 (down: moe-tui-test)", "node3 (idle*: Not responding)",
                                  "node5 (fail: bad dimm)"]
    assert lost_in_sinfo("node1|allocated|none\n") == []


def test_the_inter_node_cost_is_zero_on_one_node_and_follows_the_bytes_over_two():
    shape = MoeShape(hidden=6144, moe_layers=75, top_k=8)
    assert internode_ms(128, 1, 8, shape) == 0.0 and internode_ms(0, 2, 16, shape) == 0.0
    # 128 tokens per GPU (2048 over TP16): half their 8 expert copies cross, 1 + 2 bytes an element,
    # over 50 GB/s, plus 2 x 20 us, in each of 75 MoE layers
    want = (128 * 8 * 6144 * 3 * 0.5 / 50e9 + 40e-6) * 75 * 1000
    assert internode_ms(128 * 16, 2, 16, shape) == pytest.approx(want)
    assert 17.0 < want < 17.3
    assert internode_ms(1, 2, 16, shape) < internode_ms(64, 2, 16, shape) < internode_ms(1024, 2, 16, shape)


class _Slurmish(Executor):
    name = "slurm"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def submit(self, request):  # pragma: no cover - nothing is submitted here
        raise AssertionError

    def poll(self, job_ids):
        return {}

    def cancel(self, job_id):
        pass

    def find(self, name):
        return None

    def lost_nodes(self, nodes, now="", reason=""):
        self.asked.append((nodes, now, reason))
        return ["node2 (down*: Not responding)"] if reason == "NodeDown" else []


def _one_job(tmp_path):
    store, item_id, jobs = claimed_with_a_job(tmp_path, "wide")
    executor = _Slurmish()
    d = Dispatcher(store, tmp_path, tmp_path, executor, result_grace_s=0.0)
    return store, item_id, jobs, d, executor


def test_a_job_result_that_says_a_node_was_lost_retries_the_item_and_stores_no_run(tmp_path):
    store, item_id, jobs, d, _ = _one_job(tmp_path)
    write_result(tmp_path / "result.json", {
        "job_id": "17", "item_id": item_id, "attempt": 1, "node": "node1", "item_state": "interrupted",
        "item_error": "node node2 (down*: Not responding) lost: server failed", "run": None, "server_start": None,
        "nodes": ["node1", "node2"], "lost_nodes": ["node2 (down*: Not responding)"]})
    d._settle(jobs.open_jobs("slurm")[0], JobStatus("17", "FAILED", "node[1-2]"))
    item = RunQueue(store).item(item_id)
    (outcome, reason), = store.query("SELECT outcome, reason FROM executor_jobs")
    assert item.state == "pending" and outcome == "retried", item  # back in the queue: a new job, a new attempt
    assert reason == "job 17: node node2 (down*: Not responding) lost mid-run", reason
    assert store.query("SELECT COUNT(*) FROM runs")[0][0] == 0
    assert json.loads(json.dumps(d.counts))["retried"] == 1


def test_a_node_fail_names_the_node_the_scheduler_lost_when_the_job_was_seen_losing_it(tmp_path):
    store, item_id, jobs, d, executor = _one_job(tmp_path)
    d._settle(jobs.open_jobs("slurm")[0], JobStatus("17", "RUNNING", "node[1-2]"))
    d._settle(jobs.open_jobs("slurm")[0], JobStatus("17", "COMPLETING", "node1", "NodeDown"))
    assert executor.asked == [("node[1-2]", "node1", "NodeDown")]  # asked at once, with the nodes it held before
    d._settle(jobs.open_jobs("slurm")[0], JobStatus("17", "NODE_FAIL", "node[1-2]", "NodeDown"))
    d._settle(jobs.open_jobs("slurm")[0], JobStatus("17", "NODE_FAIL", "node[1-2]", "NodeDown"))
    item = RunQueue(store).item(item_id)
    assert item.state == "pending", item
    (outcome, reason), = store.query("SELECT outcome, reason FROM executor_jobs")
    assert (outcome, reason) == ("retried", "job 17 NODE_FAIL on node[1-2] without a result: "
                                 "node node2 (down*: Not responding) lost"), reason


def test_a_two_node_emulator_is_measurably_slower_per_step_than_the_same_box_on_one_node():
    from moe_tui.sim.args import parse_args
    from moe_tui.sim.engine import SimEngine

    def step_ms(*extra: str) -> float:
        args = parse_args(["--tp-size", "16", "--moe-runner-backend", "flashinfer_cutlass", "--sim-exact", *extra])
        return SimEngine(args, [])._step_seconds(256, 0) * 1000

    one, two = step_ms(), step_ms("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:1")
    extra = internode_ms(256, 2, 16, MoeShape())
    assert two == pytest.approx(one + extra) and extra > 0.01 * one  # more than the start-to-start noise (1.5 %)
