"""Issue 33: the commands moe-tui prints work when pasted, as printed, from another folder, in a shell
whose PATH does not hold the venv (what a user has after `make demo`), into a real terminal (tmux)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tmux import keys, screen, session, wait_screen

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

ROOT = Path(__file__).resolve().parents[1]
SIM = "sim-flashinfer-cutlass"
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"  # no venv: `moe-tui` alone is "command not found"


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MOE_TUI_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def pasted(line: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MOE_TUI_HOME", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = BARE_PATH
    return subprocess.run(["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_run_detach_prints_a_pasteable_attach_status_and_stop_and_the_tui_says_how_to_return(tmp_path):
    # A demo's data home whose queue is on the bundled simulated profiles, started from the repo
    # root, where ./server_profiles holds real GPU profiles: the runner must run on the folder that
    # holds its queue's profiles, and the attach line must name that folder (or the demo).
    home = tmp_path / "demo-home"
    assert cli(home, "queue", "pause").returncode == 0
    added = cli(home, "queue", "add", "--profiles", SIM, "--concurrency", "1", "--num-prompts", "2",
                "--input-len", "8", "--output-len", "4", "--no-control", "--no-warmup-pass")
    assert added.returncode == 0, added.stderr
    started = cli(home, "run", "--detach", "--stay")
    assert started.returncode == 0, started.stderr
    commands = re.findall(r"`([^`]+)`", started.stdout)
    assert len(commands) == 3, started.stdout
    attach, status, stop = commands
    assert attach.endswith(" demo --attach"), attach
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        watched = pasted(status, elsewhere)
        assert watched.returncode == 0, watched.stderr
        assert watched.stdout.startswith("runner pid "), watched.stdout
        with session("moe-tui-paste", attach, elsewhere, {"PATH": BARE_PATH}, remain_on_exit=True) as name:
            wait_screen(name, lambda: "attached to runner" in screen(name) and SIM in screen(name), 30,
                        "the attached control room listing the queue's simulated profile")
            keys(name, "q")
            wait_screen(name, "Quit moe-tui?", 10, "the quit dialog")
            keys(name, "l")
            wait_screen(name, f"attach again with: {attach}", 30, "the line printed on leaving")
    finally:
        stopped = pasted(stop, elsewhere)
    assert stopped.returncode == 0, stopped.stderr
    assert pasted(status, elsewhere).returncode != 0  # stopped: no runner answers any more
