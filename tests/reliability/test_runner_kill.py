"""Reliability of the headless runner under the ways it gets stopped in real life.

- SIGKILL mid-campaign (OOM killer, a lost node): starting `moe-tui run` again finishes the
  campaign with nothing lost (every item done) and nothing duplicated (one complete run per item;
  the killed run is kept as `incomplete`), and the server the dead runner left behind is stopped
  by its watchdog right away: no emulator process remains anywhere in the process table.
- SIGTERM mid-run: the runner stops the benchmark, marks the item `interrupted`, stops its server
  and exits 0; the next `moe-tui run` requeues the interrupted item and finishes it.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runner_support import Env, wait_for, wait_gone  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Enough prompts that a kill lands inside a run rather than between runs.
SPEC = ["--num-prompts", "24", "--input-len", "32", "--output-len", "16", "--no-warmup-pass"]
# A run SIGTERM must land inside: the item's client process is warm when its run opens (one process
# per item, started with it), so 24 prompts at concurrency 1 could end before the signal is handled.
LONG_SPEC = ["--num-prompts", "120", "--input-len", "32", "--output-len", "16", "--no-warmup-pass"]


def _running_item_with_progress(env: Env) -> bool:
    if not env.db.exists():
        return False
    done = env.query("SELECT COUNT(*) FROM queue_items WHERE state = 'done'")[0][0]
    running = env.query("SELECT COUNT(*) FROM queue_items q JOIN runs r ON r.id = q.run_id "
                        "WHERE q.state = 'running' AND r.status = 'running'")[0][0]
    return done >= 2 and running == 1


def test_sigkill_mid_campaign_then_rerun_loses_and_duplicates_nothing(env):
    a = env.profile("sim-a", "flashinfer_cutlass")
    b = env.profile("sim-b", "flashinfer_cutedsl")
    assert env.run("queue", "add", "--no-control", "--profiles", f"{a},{b}", "--concurrency", "1,4", "--repeats", "2",
                   "--profiles-dir", str(env.profiles), *SPEC).returncode == 0
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: _running_item_with_progress(env), 90, "two items done and a third running")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(10)
    killed_item = env.query("SELECT id, run_id FROM queue_items WHERE state = 'running'")
    assert len(killed_item) == 1
    wait_gone(env, 30)  # the dead runner's watchdog stops its server at once, not at the next start

    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=150)
    assert again.returncode == 0, again.stdout
    assert "recovered from an earlier stop: 1 item(s) interrupted" in again.stdout
    assert "requeued 1 interrupted item(s)" in again.stdout

    items = env.query("SELECT id, state, run_id FROM queue_items ORDER BY id")
    assert items and all(i[1] == "done" for i in items), items  # the plan's items (control items included)
    complete = env.query("SELECT id, queue_item_id FROM runs WHERE status = 'complete'")
    assert sorted(r[1] for r in complete) == [i[0] for i in items]  # one complete run per item
    assert {r[0] for r in complete} == {i[2] for i in items}
    (status, error), = env.query("SELECT status, error FROM runs WHERE id = ?", (killed_item[0][1],))
    assert status == "incomplete" and "interrupted" in error
    assert env.query("SELECT COUNT(*) FROM runs")[0][0] == len(items) + 1  # one per item, plus the killed one
    assert env.query("SELECT attempts FROM queue_items WHERE id = ?", (killed_item[0][0],)) == [(2,)]
    # No server start is left recorded as live, and none is alive.
    assert env.query("SELECT COUNT(*) FROM server_starts WHERE state IN ('starting','ready','stopping')") == [(0,)]
    wait_gone(env)


def test_sigterm_marks_current_item_interrupted_and_stops_servers(env):
    a = env.profile("sim-a", "flashinfer_cutlass")
    assert env.run("queue", "add", "--profiles", a, "--concurrency", "1", "--repeats", "2",
                   "--profiles-dir", str(env.profiles), *LONG_SPEC).returncode == 0
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: env.db.exists() and env.query(
        "SELECT COUNT(*) FROM queue_items q JOIN runs r ON r.id = q.run_id "
        "WHERE q.state = 'running' AND r.status = 'running'")[0][0] == 1, 60, "a run in progress")
    os.kill(runner.pid, signal.SIGTERM)
    out, _ = runner.communicate(timeout=40)
    assert runner.returncode == 0, out
    states = [r[0] for r in env.query("SELECT state FROM queue_items ORDER BY id")]
    assert states == ["interrupted", "pending"], out
    (status, flags), = env.query("SELECT status, flags_json FROM runs")
    # Stopped early: partial ("incomplete") or, if no request had finished yet, "failed"; never clean.
    assert status in ("incomplete", "failed") and "incomplete" in flags
    wait_gone(env)
    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=90)
    assert again.returncode == 0, again.stdout
    assert [r[0] for r in env.query("SELECT state FROM queue_items ORDER BY id")] == ["done", "done"]
    wait_gone(env)
