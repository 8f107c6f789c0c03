"""`moe-tui run --executor slurm` end to end, killed (SIGKILL) while its jobs run and started again:
it re-adopts the jobs by id, imports what finished meanwhile, and every item is measured once.
`queue list` names each item's job, node and Slurm state; each run records the node it ran on."""

from __future__ import annotations

import json
import signal
import time

import pytest
from runner_support import scaled

from tests.slurm.support import job_env, rows

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def test_controller_killed_and_restarted_loses_nothing_and_runs_nothing_twice(env, slurm_idle):
    env.profile("base", "flashinfer_cutlass", time_scale=20)
    env.profile("cand", "flashinfer_cutedsl", time_scale=20)
    env.env.update(job_env(slurm_idle, env.home / "nodes"))
    out = env.run("queue", "add", "--profiles-dir", str(env.profiles), "--profiles", "base,cand", "--concurrency", "2",
                  "--repeats", "2", "--num-prompts", "8", "--input-len", "64", "--output-len", "64", "--no-control")
    assert "added campaign" in out.stdout, out.stdout
    argv = ("run", "--executor", "slurm", "--gpus", "exclusive", "--profiles-dir", str(env.profiles))
    first = env.popen(*argv)
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline and not (
            env.db.exists() and rows(env.db, "SELECT 1 FROM executor_jobs WHERE state = 'RUNNING'")):
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    deadline = time.monotonic() + scaled(90)  # the jobs go on without their controller
    while slurm_idle.cmd("squeue", "-h", "-o", "%i").split() and time.monotonic() < deadline:
        time.sleep(0.5)
    second = env.run(*argv, timeout=180)
    assert second.returncode == 0, second.stdout
    assert "re-adopted" in second.stdout, second.stdout
    items = env.query("SELECT id, state, attempts, run_id FROM queue_items ORDER BY id")
    assert [(s, a) for _, s, a, _ in items] == [("done", 1)] * 4, (items, second.stdout)
    runs = env.query("SELECT id, queue_item_id, provenance_json FROM runs ORDER BY id")
    assert sorted(r[1] for r in runs) == [1, 2, 3, 4], runs  # one run per item, none twice
    provs = [json.loads(r[2]) for r in runs]
    assert {p["host"]["hostname"] for p in provs} <= {"node1", "node2"}
    assert all(p["executor"]["node"] == p["host"]["hostname"] for p in provs)
    listed = env.run("queue", "list").stdout
    assert "job" in listed.splitlines()[1] and "node" in listed.splitlines()[1], listed
    for _, _, _, run_id in items:
        job = env.query("SELECT job_id, node FROM executor_jobs WHERE run_id = ?", (run_id,))
        assert len(job) == 1 and job[0][1] in listed, (job, listed)
