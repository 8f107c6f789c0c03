"""A two-node server (`nnodes = 2`) as one Slurm job of two nodes: the emulator's ranks started by one
`srun` step, rendezvousing at the head's address; ready, benchmarked and stopped on the head; both
nodes and the rendezvous recorded; a node lost mid-run named as such, the item retried, nothing left."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from runner_support import scaled

from tests.slurm.support import add, dispatcher, drive, jobs_of, leftovers, open_store, runs_of, wait_job_state

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def _two_node_profile(env, name: str, **sim) -> str:
    env.profile(name, "flashinfer_cutlass", **sim)
    path = env.profiles / f"{name}.toml"
    path.write_text(path.read_text().replace("[sim]", "nnodes = 2\n\n[sim]", 1))
    return name


def _wait_for(path: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {text!r}: {path.read_text() if path.is_file() else 'no file'}")


def test_a_two_node_profile_starts_benchmarks_and_stops_through_one_srun(env, slurm_idle):
    _two_node_profile(env, "wide")
    lines: list[str] = []
    with open_store(env) as store:
        item = add(store, "wide", num_prompts=4, output_len=16, max_concurrency=2)
        drive(dispatcher(store, env, slurm_idle, lines), timeout=120)
    jobs = jobs_of(env.db, item)
    assert len(jobs) == 1 and jobs[0][1] in ("RUNNING", "COMPLETING", "COMPLETED") and jobs[0][3] == "imported", jobs
    (run_id, status, prov), = runs_of(env.db, item)
    assert status == "complete", prov
    placement = prov["multinode"]
    assert placement["nnodes"] == 2 and sorted(placement["nodes"]) == ["node1", "node2"], placement
    assert placement["head"] == placement["nodes"][0] == prov["host"]["hostname"] == prov["executor"]["node"]
    host, port = placement["dist_init_addr"].rsplit(":", 1)
    assert host == "127.0.0.1" and 1024 <= int(port) < 65536  # the head's NodeAddr, a port chosen there
    args = prov["server"]["resolved_args"]  # the head's own /server_info: rank 0 of 2, the same rendezvous
    assert (args["nnodes"], args["node_rank"], args["dist_init_addr"]) == (2, 0, placement["dist_init_addr"])
    argv = json.loads(env.query("SELECT argv_json FROM server_starts WHERE id = "
                                "(SELECT server_start_id FROM runs WHERE id = ?)", (run_id,))[0][0])
    assert argv[0] == "srun" and "--nodes=2" in argv and "--ntasks-per-node=1" in argv, argv
    rank1 = env.data_dir / "jobs" / f"item-{item}-a1" / "rank-1.log"  # the other node's rank: its own log
    text = rank1.read_text()
    assert "node_rank=1" in text and "Init parallel ends." in text, text
    assert leftovers(env.home) == []


def test_losing_the_second_node_mid_run_names_it_and_retries_the_item(env, slurm_idle):
    _two_node_profile(env, "wide", time_scale=10)
    lines: list[str] = []
    with open_store(env) as store:
        item = add(store, "wide", num_prompts=8, output_len=128, max_concurrency=2)  # seconds: time to strike
        d = dispatcher(store, env, slurm_idle, lines)
        d.adopt()
        wait_job_state(env.db, item, {"RUNNING"}, d, timeout=60)
        # the other rank is up once it tried its dummy health server (after the head's port opened)
        _wait_for(env.data_dir / "jobs" / f"item-{item}-a1" / "rank-1.log", "Dummy health check server", 60)
        slurm_idle.cmd("scontrol", "update", "nodename=node2", "state=down", "reason=moe-tui-test")
        wait_job_state(env.db, item, {"NODE_FAIL"}, d, timeout=60)
        deadline = time.monotonic() + scaled(30)
        while len(jobs_of(env.db, item)) < 2 and time.monotonic() < deadline:  # settled and resubmitted
            d.step()
            time.sleep(d.poll_s)
        slurm_idle.cmd("scontrol", "update", "nodename=node2", "state=resume", check=False)  # back, if not already
        drive(d, timeout=120)
    jobs = jobs_of(env.db, item)
    assert [(j[1], j[3]) for j in jobs][:1] == [("NODE_FAIL", "retried")] and jobs[1][3] == "imported", (jobs, lines)
    said = [line for line in lines if "retried" in line]
    assert said and "node node2 (" in said[0] and ") lost" in said[0] and "node1 (" not in said[0], lines
    runs = runs_of(env.db, item)
    assert len(runs) == 1 and runs[0][1] == "complete" and runs[0][2]["queue_item"]["attempt"] == 2, runs
    assert leftovers(env.home) == []
