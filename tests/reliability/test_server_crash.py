"""A server that dies in the middle of a benchmark: the run is kept as evidence (never `complete`),
its item fails with the reason, the next item starts a fresh server and the queue drains; no
emulator is left behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runner_support import wait_gone  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_server_crash_mid_run_fails_item_and_queue_goes_on(env):
    # The emulator exits abruptly once its 6th request starts streaming: item 1 (4 prompts + 1
    # bench warmup request) survives, item 2 crashes it, item 3 needs a new server.
    name = env.profile("sim-crashy", "flashinfer_cutlass", crash_after_requests=6)
    assert env.run("queue", "add", "--profiles", name, "--concurrency", "1", "--repeats", "3",
                   "--no-warmup-pass", "--num-prompts", "4", "--input-len", "32", "--output-len", "8",
                   "--profiles-dir", str(env.profiles)).returncode == 0
    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert done.returncode == 0, done.stdout
    assert f"server {name}: failed" in done.stdout
    rows = env.query("SELECT q.state, q.error, r.status FROM queue_items q LEFT JOIN runs r ON r.id = q.run_id "
                     "ORDER BY q.id")
    assert rows[0][0] == "done" and rows[0][2] == "complete"
    assert rows[1][0] == "failed" and rows[1][2] in ("incomplete", "failed") and rows[1][1]
    assert rows[2][0] == "done" and rows[2][2] == "complete"
    assert env.query("SELECT COUNT(*) FROM server_starts")[0][0] == 2
    wait_gone(env)
