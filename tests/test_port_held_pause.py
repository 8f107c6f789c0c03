"""A port held by another data dir's runner pauses the queue: nothing fails or is skipped, the item
waits in its place, and the notice names that data dir and the command that stops its runner."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
from runner_support import Env, free_port, scaled, wait_for, write_profile

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = ("--concurrency", "1", "--num-prompts", "4", "--input-len", "32", "--output-len", "8", "--no-control")


def test_a_port_held_by_another_runner_pauses_the_queue_and_names_it(tmp_path):
    (tmp_path / "o").mkdir()
    mine, other = Env(tmp_path), Env(tmp_path / "o")
    try:
        port = free_port()
        mine.ports.append(port)
        other.ports.append(port)
        write_profile(other.profiles, "sim-a", "flashinfer_cutlass", port)
        write_profile(mine.profiles, "sim-b", "flashinfer_cutedsl", port)
        assert other.run("queue", "add", "--profiles", "sim-a", "--profiles-dir", str(other.profiles),
                         *SMALL).returncode == 0
        started = other.run("run", "--detach", "--stay", "--profiles-dir", str(other.profiles), timeout=60)
        assert started.returncode == 0, started.stdout
        wait_for(lambda: other.query("SELECT state FROM queue_items") == [("done",)], 60, "the other runner's item")
        assert other.emulators()  # its server stays up on the port

        assert mine.run("queue", "add", "--profiles", "sim-b", "--repeats", "2", "--profiles-dir",
                        str(mine.profiles), *SMALL).returncode == 0
        runner = mine.popen("run", "--profiles-dir", str(mine.profiles))
        wait_for(lambda: mine.db.exists() and mine.query("SELECT value FROM queue_settings WHERE key = 'paused'")
                 == [("1",)], 60, "my queue to pause")
        states = mine.query("SELECT state FROM queue_items ORDER BY id")
        assert states == [("pending",), ("pending",)]  # nothing failed, nothing skipped
        assert not mine.query("SELECT id FROM runs")
        # `run --status` says why it paused (it said only "queue paused; resume to continue", the
        # reason was in the runner's log alone: walk of 2026-12-05)
        status = mine.run("run", "--status")
        assert f"the runner of data dir {other.data_dir.resolve()} holds it" in status.stdout, status.stdout
        assert re.search(r"^  sim-b +stopped +port ", status.stdout, re.M), status.stdout  # it was `?`
        mine.kill(runner)
        out = runner.stdout.read() if runner.stdout else ""
        assert f"the runner of data dir {other.data_dir.resolve()} holds it" in out, out
        stop = f"MOE_TUI_HOME={shlex.quote(str(other.home.resolve()))} "
        assert stop in out and "/moe-tui run --stop`" in out, out
        # The command printed stops that runner, pasted as printed from another folder.
        command = out.split("(`", 1)[1].split("`)", 1)[0]
        env = {k: v for k, v in other.env.items() if k != "MOE_TUI_HOME"}
        pasted = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True,
                                timeout=scaled(60))
        assert pasted.returncode == 0, pasted.stdout + pasted.stderr
        wait_for(lambda: not other.emulators(), 30, "the other runner's server to stop")
    finally:
        mine.cleanup()
        other.cleanup()
