"""Ctrl-C on `moe-tui run` while a server is starting stops at once (the start is abandoned and the
half-started server stopped), not once the start has finished, and exits 130."""

from __future__ import annotations

import signal
import time

import pytest
from runner_support import scaled, wait_for

pytestmark = [pytest.mark.integration]

SLOW_START_S = 120.0  # the emulator's startup delay (--sim-slow-start): far longer than a prompt stop


def test_ctrl_c_during_a_server_start_stops_promptly_and_exits_130(env):
    env.profile("sim-slow", "flashinfer_cutlass", slow_start=SLOW_START_S)
    added = env.run("queue", "add", "--profiles", "sim-slow", "--concurrency", "1", "--num-prompts", "4",
                    "--no-control", "--no-warmup-pass", "--profiles-dir", str(env.profiles))
    assert added.returncode == 0, added.stdout
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: env.emulators() and (env.data_dir / "runner.json").exists(), 60, "the slow server to start")
    time.sleep(0.5)  # well inside the loading phase
    asked = time.monotonic()
    runner.send_signal(signal.SIGINT)
    rc = runner.wait(timeout=scaled(SLOW_START_S / 2))
    took = time.monotonic() - asked
    out = runner.stdout.read() if runner.stdout else ""
    assert rc == 130, out
    # Abandoned, not waited out: the worker's grace for a benchmark to wind down (20 s) never ran.
    assert "stopping - the start was abandoned: interrupted: got SIGINT" in out, out
    assert took < 15, f"stopped {took:.1f} s after Ctrl-C:\n{out}"
    wait_for(lambda: not env.emulators(), 30, "the half-started server to be stopped")
    assert env.query("SELECT state FROM queue_items") == [("interrupted",)]  # retried on the next start
