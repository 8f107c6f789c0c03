"""Nothing lost, nothing twice: jobs killed under the dispatcher (scancel, a node set DOWN, preemption
by a higher-priority partition) are retried as new jobs and their item is measured exactly once; what
a killed job started is gone with it. Each strike waits for the job's server to serve (its GPU relay),
never a fixed sleep."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tests.slurm.support import add, dispatcher, drive, jobs_of, leftovers, open_store, runs_of, wait_job_state, wait_server_up

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

LONG = dict(num_prompts=16, output_len=128, max_concurrency=2)  # seconds of emulated decode: time to strike


def _exactly_once(env, item_id: int, lost_state: str) -> None:
    jobs = jobs_of(env.db, item_id)
    assert jobs[0][1] == lost_state and jobs[1][1] in ("RUNNING", "COMPLETING", "COMPLETED"), jobs
    assert [j[3] for j in jobs] == ["retried", "imported"], jobs
    runs = runs_of(env.db, item_id)
    assert len(runs) == 1 and runs[0][1] == "complete", runs  # the killed attempt stored nothing
    assert runs[0][2]["executor"]["job_id"] == jobs[1][0] and runs[0][2]["queue_item"]["attempt"] == 2
    state, attempts, run_id = env.query("SELECT state, attempts, run_id FROM queue_items WHERE id = ?", (item_id,))[0]
    assert (state, attempts, run_id) == ("done", 2, runs[0][0])


@contextmanager
def _long_item_as_a_job(env, slurm_idle, lines: list[str]) -> Iterator[tuple[int, object, Callable[[], tuple]]]:
    """One long emulator item submitted by a dispatcher: (its id, the dispatcher, a wait for its job RUNNING)."""
    env.profile("base", "flashinfer_cutlass", time_scale=10)
    with open_store(env) as store:
        item = add(store, "base", **LONG)
        d = dispatcher(store, env, slurm_idle, lines)
        d.adopt()
        yield item, d, lambda: _serving(env, item, d)


def _serving(env, item: int, d) -> tuple:
    """The item's job RUNNING and its server up (the strike lands mid-run); the job's row."""
    job = wait_job_state(env.db, item, {"RUNNING"}, d, timeout=60)
    wait_server_up(env, item, d)
    return job


def test_scancel_mid_run_retries_the_item_once(env, slurm_idle):
    lines: list[str] = []
    with _long_item_as_a_job(env, slurm_idle, lines) as (item, d, running):
        job = running()
        slurm_idle.cmd("scancel", job[0])
        drive(d, timeout=120)
    _exactly_once(env, item, "CANCELLED")
    assert any("cancelled outside moe-tui" in line for line in lines), lines
    assert leftovers(env.home) == []


def test_node_down_mid_run_retries_the_item_on_a_live_node(env, slurm_idle):
    lines: list[str] = []
    with _long_item_as_a_job(env, slurm_idle, lines) as (item, d, running):
        job = running()
        slurm_idle.cmd("scontrol", "update", f"nodename={job[2]}", "state=down", "reason=moe-tui-test")
        drive(d, timeout=120)
    _exactly_once(env, item, "NODE_FAIL")
    assert jobs_of(env.db, item)[0][2] == job[2]
    assert leftovers(env.home) == []


def test_preempted_by_a_higher_priority_job_retries_the_item_once(env, slurm_idle):
    """The test cluster preempts by partition priority (PreemptMode=CANCEL: Slurm reports PREEMPTED)."""
    lines: list[str] = []
    with _long_item_as_a_job(env, slurm_idle, lines) as (item, d, running):
        job = running()
        urgent = slurm_idle.cmd("sbatch", "--parsable", "--output=/dev/null", "--partition=urgent", "--exclusive",
                                f"--nodelist={job[2]}", "--time=1", "--wrap", "sleep 1").strip()
        wait_job_state(env.db, item, {"PREEMPTED"}, d, timeout=60)
        drive(d, timeout=120)
    _exactly_once(env, item, "PREEMPTED")
    assert jobs_of(env.db, item)[0][2] == job[2]
    said = [line for line in lines if "retried" in line]
    assert said and f"job {job[0]} PREEMPTED" in said[0], lines
    assert "COMPLETED" in slurm_idle.cmd("squeue", "-h", "-t", "all", "-j", urgent, "-o", "%T")  # it got the node
    assert leftovers(env.home) == []


def test_queue_cancel_of_an_item_a_job_works_scancels_the_job_and_cancels_the_item(env, slurm_idle):
    lines: list[str] = []
    with _long_item_as_a_job(env, slurm_idle, lines) as (item, d, running):
        running()
        out = env.run("queue", "cancel", str(item))
        assert "cancel asked" in out.stdout, out.stdout
        drive(d, timeout=60)
    jobs = jobs_of(env.db, item)
    assert [(j[1], j[3]) for j in jobs] == [("CANCELLED", "cancelled")], jobs
    assert env.query("SELECT state FROM queue_items WHERE id = ?", (item,))[0][0] == "cancelled"
    assert runs_of(env.db, item) == []
    assert leftovers(env.home) == []
