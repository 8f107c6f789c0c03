"""End to end: the real `moe-tui demo` in a real terminal (tmux 120x40) on the emulator.

Start the demo campaign with `r`, wait for the first recorded result of both profiles (read from the
store the app writes), open the comparison (3) and export Markdown (e); the file must exist with the
SIMULATED banner. Then quit with `q`, `s` (stop the servers) and check nothing is left running.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

ROOT = Path(__file__).resolve().parents[2]


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def wait_for(predicate, timeout: float, what: str, pane: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    screen = tmux("capture-pane", "-p", "-t", pane)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; screen:\n{screen}")


def test_demo_campaign_to_markdown_export(tmp_path):
    home = tmp_path / "home"
    session = f"moe-tui-e2e-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "MOE_TUI_HOME": str(home), "TERM": "xterm-256color"}
    command = f"{sys.executable} -m moe_tui demo --no-gpu-sampling"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", str(ROOT),
                    *[f"-e{k}={v}" for k, v in (("MOE_TUI_HOME", str(home)), ("TERM", "xterm-256color"))],
                    command], check=True, env=env)
    store = home / "demo-home" / "data" / "moe-tui.sqlite3"
    exports = home / "demo-home" / "data" / "exports"
    try:
        wait_for(lambda: "Live benchmark" in tmux("capture-pane", "-p", "-t", session), 30, "the dashboard", session)
        wait_for(lambda: "demo campaign" in tmux("capture-pane", "-p", "-t", session) or store.exists(), 10,
                 "the demo campaign", session)
        tmux("send-keys", "-t", session, "r")

        def first_result() -> bool:
            if not store.exists():
                return False
            with sqlite3.connect(store) as db:
                return db.execute("SELECT COUNT(DISTINCT profile_name) FROM runs WHERE status = 'complete'"
                                  ).fetchone()[0] == 2

        # Interleaved order: the candidate's first result follows the baseline's whole sweep.
        wait_for(first_result, 200, "a complete run of both profiles", session)
        time.sleep(1.0)
        tmux("send-keys", "-t", session, "3")
        wait_for(lambda: "Baseline vs candidate" in tmux("capture-pane", "-p", "-t", session), 15,
                 "the comparison screen", session)
        time.sleep(1.5)
        tmux("send-keys", "-t", session, "e")
        md = wait_for(lambda: sorted(exports.glob("*.md")) if exports.exists() else [], 30, "the Markdown export",
                      session)
        text = md[0].read_text()
        assert "SIMULATED" in text and "sim-flashinfer-cutlass" in text
        wait_for(lambda: "Exported" in tmux("capture-pane", "-p", "-t", session), 10, "the export toast", session)
        tmux("send-keys", "-t", session, "q")
        wait_for(lambda: "Quit moe-tui?" in tmux("capture-pane", "-p", "-t", session), 10, "the quit dialog", session)
        tmux("send-keys", "-t", session, "s")

        def exited() -> bool:
            out = subprocess.run(["tmux", "list-panes", "-t", session, "-F", "#{pane_current_command}"],
                                 capture_output=True, text=True)
            return out.returncode != 0 or "python" not in out.stdout
        wait_for(exited, 60, "the app to exit", session)
        with sqlite3.connect(store) as db:
            live = db.execute("SELECT COUNT(*) FROM server_starts WHERE state IN ('starting','ready')").fetchone()[0]
        assert live == 0
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        # Anything the app left behind (it should be nothing) is killed by its recorded pid.
        if store.exists():
            with sqlite3.connect(store) as db:
                for (pid,) in db.execute("SELECT pid FROM server_starts WHERE pid IS NOT NULL"):
                    try:
                        os.killpg(pid, 9)
                    except (ProcessLookupError, PermissionError):
                        pass
