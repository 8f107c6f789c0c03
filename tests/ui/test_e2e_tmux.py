"""End to end: the real `moe-tui demo` in a real terminal (tmux 120x40) on the emulator, surviving
the terminal going away.

A tiny campaign is queued in the demo home first (so the demo keeps it instead of queueing its
own 16 items). `moe-tui demo` starts a detached runner and attaches; `r` starts the campaign. Mid
run the tmux session is killed (the TUI gets SIGHUP, as when an SSH connection drops): the runner
must go on and drain the queue (polled in the store). `moe-tui demo` started again must attach to
that runner and show the finished items; the comparison exports Markdown; quitting with "stop
servers and runner" must leave no runner and no emulator anywhere in the process table.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.support.tmux import keys, kill_session, new_session, screen, wait_screen  # the tests' own tmux server

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

ROOT = Path(__file__).resolve().parents[2]
DEMO_PROFILES = ROOT / "server_profiles" / "demo"
PROFILES = "sim-flashinfer-cutlass,sim-flashinfer-cutedsl"


def wait_for(predicate, timeout: float, what: str, session: str):
    """Poll until `predicate` on `session`'s screen (`timeout` for an idle machine, scaled)."""
    return wait_screen(session, predicate, timeout, what)


def ours(home: Path) -> list[psutil.Process]:
    """Every process of this test's home (TUI, runner, emulators), from the whole process table."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        with contextlib.suppress(psutil.Error):
            cmd = proc.info.get("cmdline") or []
            if any("moe_tui" in part for part in cmd) and proc.status() != psutil.STATUS_ZOMBIE:
                if str(home) in ((proc.info.get("environ") or {}).get("MOE_TUI_HOME") or ""):
                    found.append(proc)
    return found


def emulators(home: Path) -> list[psutil.Process]:
    return [p for p in ours(home) if "moe_tui.sim" in p.info["cmdline"]]


def states(store: Path) -> list[str]:
    if not store.exists():
        return []
    with contextlib.closing(sqlite3.connect(store, timeout=10)) as db:
        return [r[0] for r in db.execute("SELECT state FROM queue_items ORDER BY id")]


def start_demo(session: str, home: Path) -> None:
    new_session(session, f"{sys.executable} -m moe_tui demo --no-gpu-sampling", ROOT, {"MOE_TUI_HOME": str(home)})


def test_demo_survives_sighup_reattaches_and_stops_clean(tmp_path):
    home = tmp_path / "home"
    demo_home = home / "demo-home"
    store = demo_home / "data" / "moe-tui.sqlite3"
    exports = demo_home / "data" / "exports"
    env = {**os.environ, "MOE_TUI_HOME": str(demo_home)}
    queued = subprocess.run(
        [sys.executable, "-m", "moe_tui", "queue", "add", "--profiles", PROFILES, "--concurrency", "1,2",
         "--order", "grouped", "--num-prompts", "6", "--input-len", "32", "--output-len", "8",
         "--no-warmup-pass", "--no-control", "--profiles-dir", str(DEMO_PROFILES)],  # 4 items: the subject is the SSH drop
        env=env, capture_output=True, text=True, timeout=60)
    assert queued.returncode == 0, queued.stdout + queued.stderr
    assert states(store) == ["pending"] * 4
    first, second = f"moe-tui-e2e-{uuid.uuid4().hex[:8]}", f"moe-tui-e2e-{uuid.uuid4().hex[:8]}"
    try:
        start_demo(first, home)
        wait_for(lambda: "Live benchmark" in screen(first), 30, "the dashboard", first)
        wait_for(lambda: "attached to runner" in screen(first), 10, "the header naming the runner", first)
        runner_pid = int((demo_home / "data" / "runner.json").read_text().split('"pid": ')[1].split(",")[0])
        keys(first, "r")
        wait_for(lambda: states(store).count("done") >= 1, 90, "the first finished item", first)
        ahead = [s for s in states(store) if s in ("pending", "running")]
        assert ahead, "the campaign must still have work when the terminal goes away"
        tui = [p for p in ours(home) if "demo" in p.info["cmdline"]]
        assert len(tui) == 1, [p.info["cmdline"] for p in tui]
        kill_session(first)  # SIGHUP to the TUI
        wait_for(lambda: not tui[0].is_running() or tui[0].status() == psutil.STATUS_ZOMBIE, 15,
                 "the TUI to die", first)
        assert psutil.pid_exists(runner_pid), "the runner died with the terminal"
        wait_for(lambda: states(store) == ["done"] * 4, 90, "the runner to drain the queue", first)
        assert psutil.pid_exists(runner_pid)  # --stay: still there for the next attach

        start_demo(second, home)
        wait_for(lambda: "4 done" in screen(second), 30, "the reattached dashboard showing the done items",
                 second)
        assert f"runner pid {runner_pid}" in screen(second)
        keys(second, "3")
        # The grid's title names the direction: the demo campaign's first profile is the baseline.
        wait_for(lambda: "baseline sim-flashinfer-cutlass → candidate" in screen(second), 15,
                 "the comparison screen", second)
        time.sleep(1.0)
        keys(second, "e")
        md = wait_for(lambda: sorted(exports.glob("*.md")) if exports.exists() else [], 30,
                      "the Markdown export", second)
        text = md[0].read_text()
        assert "SIMULATED" in text and "sim-flashinfer-cutlass" in text
        keys(second, "q")
        wait_for(lambda: "Quit moe-tui?" in screen(second), 10, "the quit dialog", second)
        keys(second, "s")
        wait_for(lambda: not ours(home), 60, "every process of the demo to exit", second)
        assert not emulators(home)
        with contextlib.closing(sqlite3.connect(store)) as db:
            live = db.execute("SELECT COUNT(*) FROM server_starts WHERE state IN ('starting','ready')").fetchone()[0]
        assert live == 0
    finally:
        for session in (first, second):
            kill_session(session)
        for proc in ours(home):  # anything left (it should be nothing) is killed with its group
            with contextlib.suppress(Exception):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
