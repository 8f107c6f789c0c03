"""A job past its time limit: Slurm ends it (TIMEOUT), the dispatcher names it and, out of attempts,
fails the item saying so; nothing is stored for it and nothing it started is left. Its own module (its
own cluster, another xdist worker): Slurm's limits are whole minutes, so this test waits one out."""

from __future__ import annotations

import pytest

from tests.slurm.support import add, dispatcher, drive, jobs_of, leftovers, open_store, runs_of

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def test_a_job_past_its_time_limit_is_named_timeout_and_its_item_fails_when_out_of_attempts(env, slurm_idle):
    env.profile("slow", "flashinfer_cutlass", time_scale=1)
    lines: list[str] = []
    with open_store(env) as store:
        item = add(store, "slow", num_prompts=400, output_len=1024, max_concurrency=1)
        d = dispatcher(store, env, slurm_idle, lines, time_limit_s=1, max_attempts=1)  # 1 s asks for Slurm's least: 1 min
        drive(d, timeout=180)
    jobs = jobs_of(env.db, item)
    assert [(j[1], j[3]) for j in jobs] == [("TIMEOUT", "failed")], jobs
    state, error = env.query("SELECT state, error FROM queue_items WHERE id = ?", (item,))[0]
    assert state == "failed" and "TIMEOUT" in error and "no more retries" in error, error
    assert runs_of(env.db, item) == []
    assert leftovers(env.home) == []
