"""No orphans after a runner's death (issue 13): a runner SIGKILLed mid-run leaves its emulator
and its benchmark child running (they live in their own sessions); the next runner to start on
the data dir finds them by the data-dir marker in their environment, stops them, says which, and
finishes the campaign with nothing lost and nothing duplicated."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from runner_support import runner_children, wait_for, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = ["--num-prompts", "24", "--input-len", "32", "--output-len", "32", "--no-warmup-pass"]


def _bench_child_running(env) -> bool:
    """The emulator up and the item's benchmark process beside it (the client process starts with the
    item, before its server is ready: alone it is not yet a benchmark in flight)."""
    cmds = [" ".join(p.cmdline()) for p in runner_children(env.data_dir) if p.is_running()]
    return any("bench" in c for c in cmds) and any("moe_tui.sim" in c for c in cmds)


def _watchdogs_of(pid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if "moe_tui.run.watchdog" in cmd and str(pid) in cmd:
            found.append(proc)
    return found


def _runner_benchmarking(env):
    """A runner working a two-repeat campaign, started and waited on until its benchmark child runs."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=4)
    assert env.run("queue", "add", "--profiles", name, "--concurrency", "2", "--repeats", "2",
                   "--profiles-dir", str(env.profiles), *SPEC).returncode == 0
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: _bench_child_running(env), 90, "the benchmark child running")
    return runner


def test_sigkilled_runner_is_cleaned_up_by_its_watchdog_at_once(env):
    """Runner SIGKILLed mid-run: its watchdog stops the emulator and benchmark child at once (no new start), logging them; the next start finishes the campaign."""
    runner = _runner_benchmarking(env)
    old = [p for p in runner_children(env.data_dir) if p.pid != runner.pid]
    assert len(_watchdogs_of(runner.pid)) == 1
    assert not any("runner_watchdog" in " ".join(p.cmdline()) for p in old)  # it carries no marker
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(10)
    wait_for(lambda: not runner_children(env.data_dir), 30, "the watchdog stopping what the runner left")
    wait_gone(env)
    log_path = env.data_dir / "logs" / "watchdog.log"
    wait_for(lambda: log_path.exists() and "benchmark child" in log_path.read_text(), 30, "the watchdog's log")
    log = log_path.read_text()
    assert f"runner {runner.pid} ended; stopped what a dead runner of {env.data_dir.resolve()} left: server " in log
    assert "left: benchmark child" in log, log
    wait_for(lambda: not _watchdogs_of(runner.pid), 10, "the watchdog exiting")
    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=180)
    assert again.returncode == 0 and "Traceback" not in again.stdout, again.stdout
    assert [s for (s,) in env.query("SELECT state FROM queue_items ORDER BY id")] == ["done", "done"]
    assert not runner_children(env.data_dir)
    wait_gone(env)


def test_sigkilled_runner_leaves_nothing_once_a_new_runner_starts(env):
    """Runner and its watchdog both SIGKILLed mid-run: the next runner stops the emulator and benchmark child, naming them, and finishes the campaign."""
    runner = _runner_benchmarking(env)
    old = {p.pid: " ".join(p.cmdline()) for p in runner_children(env.data_dir) if p.pid != runner.pid}
    assert any("moe_tui.sim" in c for c in old.values()) and any("bench" in c for c in old.values()), old
    # The OOM killer takes the runner's watchdog too: then the next start must stop what is left.
    (watchdog,) = _watchdogs_of(runner.pid)
    watchdog.kill()
    wait_for(lambda: not watchdog.is_running() or watchdog.status() == psutil.STATUS_ZOMBIE, 10,
             "the watchdog killed")  # the runner, its parent, has not reaped it yet
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(10)
    assert all(psutil.pid_exists(pid) for pid in old), "the dead runner's children should outlive it"

    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=180)
    out = again.stdout
    assert again.returncode == 0, out
    assert "Traceback" not in out
    for pid, cmd in old.items():
        assert f"stopped what a dead runner of {env.data_dir} left: " in out and f"pid {pid}" in out, (pid, out)
        proc = psutil.Process(pid) if psutil.pid_exists(pid) else None
        assert proc is None or proc.status() == psutil.STATUS_ZOMBIE or " ".join(proc.cmdline()) != cmd, \
            f"old process {pid} ({cmd}) is still running"
    assert "left: server " in out and "left: benchmark child" in out, out
    items = env.query("SELECT id, state FROM queue_items ORDER BY id")
    assert [s for _, s in items] == ["done", "done"]
    complete = env.query("SELECT queue_item_id FROM runs WHERE status = 'complete' ORDER BY queue_item_id")
    assert [r[0] for r in complete] == [i for i, _ in items]  # one complete run per item
    assert not runner_children(env.data_dir)
    wait_gone(env)
