"""Per-node telemetry through the test cluster (issue 37 item 4): a job's node GPUs (the emulator's
simulated ones, marked so) reach the controller's node rows, the rows the dashboard's Nodes panel
shows, owned by that job and item (Slurm's GRES allocation, as the job read it) while it runs; a
job whose relay falls silent (stopped) shows STALE with no figure; once the job ended its node
shows as ended, with no last figure shown as live."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from runner_support import scaled

from moe_tui.executors.dispatch import Dispatcher
from moe_tui.executors.nodes import MAX_NODE_FILE_BYTES, NODE_FILE, NodeRow, read_node_rows, read_node_sample
from moe_tui.executors.slurm import SlurmExecutor, SlurmSettings
from tests.slurm.support import add, drive, job_env, jobs_of, open_store, wait_job_state

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

LONG = dict(num_prompts=16, output_len=128, max_concurrency=2)  # seconds of emulated decode: time to look


def _job_process(root: Path) -> psutil.Process:
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "moe_tui.executors.job" in " ".join(proc.info["cmdline"] or []) and \
                    proc.environ().get("TMPDIR", "").startswith(str(root)):
                return proc
    raise AssertionError(f"no job process under {root}")


@contextlib.contextmanager
def _paused(proc: psutil.Process) -> Iterator[None]:
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def _wait_status(store, node: str, status: str, d) -> NodeRow:
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        row = next((r for r in read_node_rows(store) if r.node == node), None)
        if row is not None and row.status == status:
            return row
        time.sleep(d.poll_s)
    raise AssertionError(f"{node} never {status}: {read_node_rows(store)}")


def test_a_jobs_node_gpus_reach_the_node_rows_live_then_ended(env, slurm_idle):
    env.profile("base", "flashinfer_cutlass", time_scale=10)
    lines: list[str] = []
    with open_store(env) as store:
        item = add(store, "base", **LONG)
        gres = SlurmSettings(gpus="gres", time_limit_s=600)  # --gres=gpu:8 (the profile's tp_size)
        executor = SlurmExecutor(lambda request: gres, env=job_env(slurm_idle, env.home / "nodes"))
        d = Dispatcher(store, env.profiles, env.data_dir, executor, poll_s=0.3, result_grace_s=1.0,
                       on_line=lines.append)
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
        relayed = read_node_sample(next((env.data_dir / "jobs").iterdir()) / NODE_FILE)
        assert relayed is not None and relayed["owned"] == list(range(8))  # Slurm's GRES allocation (IDX:0-7)
        assert all(g.util_pct is not None and g.mem_text for g in live.gpus), live.gpus
        with _paused(_job_process(env.home / "nodes")):  # the job's relay falls silent: STALE, no figure
            stale = _wait_status(store, node, "stale", d)
        assert all(g.util_pct is None and g.mem_text == "" for g in stale.gpus), stale.gpus
        drive(d, timeout=120)
        [ended] = [r for r in read_node_rows(store) if r.node == node]
    assert jobs_of(env.db, item)[-1][3] == "imported"
    assert ended.status == "ended" and ended.gpus, ended
    assert all(g.util_pct is None and g.power_w is None and g.job_id == "" for g in ended.gpus), ended.gpus
    [folder] = (env.data_dir / "jobs").iterdir()
    assert 0 < (folder / NODE_FILE).stat().st_size < MAX_NODE_FILE_BYTES  # one snapshot, replaced, bounded
