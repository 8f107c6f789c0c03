"""Per-node telemetry through the test cluster (issue 37 item 4): a job's node GPUs (the emulator's
simulated ones, marked so) reach the controller's node rows, the rows the dashboard's Nodes panel
shows, owned by that job and item while it runs; once the job ended its node shows as ended, with
no last figure shown as live."""

from __future__ import annotations

import time

import pytest
from runner_support import scaled

from moe_tui.executors.nodes import MAX_NODE_FILE_BYTES, NODE_FILE, read_node_rows
from tests.slurm.support import add, dispatcher, drive, jobs_of, open_store, wait_job_state

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

LONG = dict(num_prompts=16, output_len=128, max_concurrency=2)  # seconds of emulated decode: time to look


def test_a_jobs_node_gpus_reach_the_node_rows_live_then_ended(env, slurm_idle):
    env.profile("base", "flashinfer_cutlass", time_scale=10)
    lines: list[str] = []
    with open_store(env) as store:
        item = add(store, "base", **LONG)
        d = dispatcher(store, env, slurm_idle, lines)
        d.adopt()
        job_id, _, node = wait_job_state(env.db, item, {"RUNNING"}, d, timeout=60)[:3]
        deadline = time.monotonic() + scaled(60)
        live = None
        while live is None:
            assert time.monotonic() < deadline, f"no live node row; rows: {read_node_rows(store)}; lines: {lines}"
            d.step()
            live = next((r for r in read_node_rows(store) if r.status == "live" and r.gpus), None)
            time.sleep(d.poll_s)
        assert live.node == node and live.simulated, live
        assert all(g.job_id == job_id and g.item_id == item for g in live.gpus), live.gpus
        assert all(g.util_pct is not None and g.mem_text for g in live.gpus), live.gpus
        drive(d, timeout=120)
        [ended] = [r for r in read_node_rows(store) if r.node == node]
    assert jobs_of(env.db, item)[-1][3] == "imported"
    assert ended.status == "ended" and ended.gpus, ended
    assert all(g.util_pct is None and g.power_w is None and g.job_id == "" for g in ended.gpus), ended.gpus
    [folder] = (env.data_dir / "jobs").iterdir()
    assert 0 < (folder / NODE_FILE).stat().st_size < MAX_NODE_FILE_BYTES  # one snapshot, replaced, bounded
