"""The runner's watchdog: when a runner dies without stopping its children, stop them at once.

A runner killed by SIGKILL (the OOM killer, a mistaken `kill -9`) cannot stop its SGLang servers
and benchmark child: they live in their own sessions and would keep the GPUs busy until the next
runner start sweeps them (`moe_tui.run.orphans`). So every runner starts this small process first
(`spawn(data_dir)`): in its own session, without the data-dir marker (so no sweep mistakes it for
a child), it waits for the runner's pid to end, then takes the runner lock (LOCK_NB: if a new
runner already holds it, that runner sweeps itself and the watchdog leaves) and stops every
orphan of the data dir, writing what it stopped to `<data dir>/logs/watchdog.log`. After a clean
stop there is nothing left to stop and it simply exits.

    python -m moe_tui.run.watchdog PID DATA_DIR
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

LOG_NAME = "watchdog.log"


def spawn(data_dir: str | Path) -> int | None:
    """Start the watchdog of this process (the runner). Returns its pid, or None if it could not
    start (the next runner's sweep still covers that case)."""
    from moe_tui.run.orphans import RUNNER_DIR_ENV

    env = {k: v for k, v in os.environ.items() if k != RUNNER_DIR_ENV}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "moe_tui.run.watchdog", str(os.getpid()),
                                 str(Path(data_dir).resolve())], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True, cwd="/")
    except OSError:
        return None
    return proc.pid


def _log(data_dir: Path, line: str) -> None:
    with contextlib.suppress(OSError):
        logs = data_dir / "logs"
        logs.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(logs / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def watch(pid: int, data_dir: Path) -> int:
    """Wait for `pid` to end, then stop what it left (if no new runner owns the data dir)."""
    from moe_tui.run.orphans import stop_orphans
    from moe_tui.run.rendezvous import RunnerBusy, RunnerLock

    try:
        runner = psutil.Process(pid)
        runner.wait()
    except psutil.Error:
        pass  # already gone
    lock = RunnerLock(data_dir)
    try:  # a watchdog never waits for the lock: if anyone holds it, that one owns the dir
        lock.acquire(role="watchdog")
    except (RunnerBusy, OSError):
        return 0  # a live runner owns the dir again: it sweeps what is left itself
    try:
        lines = stop_orphans(data_dir)
    finally:
        lock.release()
    for line in lines:
        _log(data_dir, f"runner {pid} ended; {line}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m moe_tui.run.watchdog PID DATA_DIR", file=sys.stderr)
        return 2
    return watch(int(argv[0]), Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
