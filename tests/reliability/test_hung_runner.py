"""A runner that does not answer (issue 22, item 4), with real processes.

The runner is frozen with SIGSTOP mid-run: it keeps its lock and its socket accepts connections,
but nothing answers. `run --status` says so in words (no traceback); `run --stop` says the stop
request was not taken, sends SIGTERM, then SIGKILL, and stops the servers and load generator
the runner had started; the next start finishes the campaign.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator

import psutil
import pytest
from runner_support import runner_children, wait_for, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = ["--num-prompts", "24", "--input-len", "32", "--output-len", "32", "--no-warmup-pass"]


def _timed_phase(env) -> bool:
    from moe_tui.run.client import call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable

    try:
        progress = (call_runner_sync("snapshot", env.data_dir, timeout=5.0) or {}).get("last_progress") or {}
    except (RunnerUnavailable, OSError):
        return False
    return progress.get("phase") == "timed"


@contextlib.contextmanager
def frozen_mid_run(env) -> Iterator[subprocess.Popen]:
    """A runner working a one-item campaign, frozen (SIGSTOP) in its timed phase; resumed (SIGCONT) on
    leaving if it still lives, so no stopped process outlives the test."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=2)
    assert env.run("queue", "add", "--profiles", name, "--concurrency", "2", "--profiles-dir", str(env.profiles),
                   *SPEC).returncode == 0
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: _timed_phase(env), 90, "the timed phase under way")
    runner_proc = psutil.Process(runner.pid)
    runner_proc.send_signal(signal.SIGSTOP)
    try:
        yield runner
    finally:
        if runner_proc.is_running():
            runner_proc.send_signal(signal.SIGCONT)


def test_frozen_runner_status_says_so_and_stop_works_by_signal(env):
    """Runner frozen (SIGSTOP) mid-run: run --status says it does not answer; run --stop falls back to SIGTERM then SIGKILL and stops its server and load generator."""
    with frozen_mid_run(env) as runner:
        status = env.run("run", "--status", timeout=60)
        assert status.returncode == 1 and "Traceback" not in status.stdout, status.stdout
        assert "did not answer 'snapshot' within" in status.stdout and "run --stop" in status.stdout, status.stdout

        env.env["MOE_TUI_STOP_WAIT_S"] = "3"
        stop = env.run("run", "--stop", timeout=90)
        out = stop.stdout
        assert stop.returncode == 0 and "Traceback" not in out, out
        assert f"runner {runner.pid} did not take the stop request" in out and "sending SIGTERM" in out, out
        assert "sending SIGKILL" in out and f"runner {runner.pid} killed" in out, out
    runner.wait(10)
    assert runner.returncode == -signal.SIGKILL
    wait_for(lambda: not runner_children(env.data_dir), 30, "nothing left of the runner's children")
    wait_gone(env)
    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=150)
    assert again.returncode == 0 and "Traceback" not in again.stdout, again.stdout
    assert env.query("SELECT state FROM queue_items") == [("done",)]
    wait_gone(env)


def test_stop_of_a_frozen_runner_takes_under_10_s(env):
    """Runner frozen (SIGSTOP) mid-run, the default waits: `run --stop` kills it and stops what it left within 10 s (was 106 s)."""
    import time

    from runner_support import speed_factor

    env.env.pop("MOE_TUI_STOP_WAIT_S", None)
    with frozen_mid_run(env) as runner:
        started = time.monotonic()
        stop = env.run("run", "--stop", timeout=150)
    took = time.monotonic() - started
    assert stop.returncode == 0 and f"runner {runner.pid} killed" in stop.stdout, stop.stdout
    assert took < 10 * speed_factor(), f"run --stop took {took:.1f} s"
    runner.wait(10)
    wait_for(lambda: not runner_children(env.data_dir), 30, "nothing left of the runner's children")
    wait_gone(env)
