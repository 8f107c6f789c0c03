"""The sessions of the servers a runner started, written where its watchdog and the next runner
look, so a SIGKILLed runner's server is found by what neither a profile nor a launcher can clear.

Every server starts in a session of its own (`start_new_session`): its launcher is the session
leader and every process below it keeps that session id, whatever it does to its environment. A
launcher running the server under `env -i` (or setting moe-tui's markers to something else)
drops the `MOE_TUI_RUNNER_DIR` / `MOE_TUI_SERVER_ID` markers the sweep (`moe_tui.run.orphans`)
reads, and such a server outlived its killed runner for good. So a runner's server start also
writes `<data dir>/server-sessions/<server id>.json` (pid and create time of the session
leader; owner-only, O_EXCL|O_NOFOLLOW), removed once the server is stopped cleanly. A recorded
session's processes are those of this user whose session id is the leader's pid; a leader alive
with another create time is a reused pid, and its session is not ours.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

RUNNER_DIR_ENV = "MOE_TUI_RUNNER_DIR"  # moe_tui.run.orphans.RUNNER_DIR_ENV: a runner's data dir
SESSIONS_DIR = "server-sessions"
MAX_RECORD_BYTES = 4096


@dataclass(frozen=True)
class Session:
    path: Path
    pid: int
    create_time: float
    server_id: str


def record_session(server_id: str, pid: int) -> Path | None:
    """Note this server's session in the runner's data dir (None outside a runner, or when the
    leader is already gone: then there is nothing to find later)."""
    runner_dir = os.environ.get(RUNNER_DIR_ENV)
    if not runner_dir:
        return None
    from moe_tui import paths

    try:
        created = psutil.Process(pid).create_time()
        folder = paths.private_dir(Path(runner_dir) / SESSIONS_DIR, what="server sessions folder")
        path = folder / f"{server_id}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": pid, "create_time": created, "server_id": server_id}, f)
    except (OSError, psutil.Error):
        return None
    return path


def forget_session(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def recorded_sessions(data_dir: str | Path) -> list[Session]:
    """The sessions recorded under `data_dir` (a record that is not this user's small regular
    JSON file is skipped: it names nothing to stop)."""
    from moe_tui.trust import open_regular

    found: list[Session] = []
    folder = Path(data_dir) / SESSIONS_DIR
    with contextlib.suppress(OSError):
        for path in sorted(folder.glob("*.json")):
            try:
                fd = open_regular(path, follow_links=False, own=True, max_bytes=MAX_RECORD_BYTES)
                with os.fdopen(fd, "rb") as f:
                    data = json.loads(f.read(MAX_RECORD_BYTES))
                pid, created = data["pid"], data["create_time"]
                if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 and isinstance(created, float):
                    found.append(Session(path, pid, created, str(data.get("server_id", ""))))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    return found


def session_members(session: Session) -> list[psutil.Process]:
    """This user's live processes in the recorded session; none when its leader's pid now
    belongs to a later process."""
    with contextlib.suppress(psutil.NoSuchProcess):
        if abs(psutil.Process(session.pid).create_time() - session.create_time) > 1.0:
            return []  # a reused pid
    uid, found = os.getuid(), []
    for proc in psutil.process_iter(["uids"]):
        try:
            if proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if os.getsid(proc.pid) == session.pid and proc.status() != psutil.STATUS_ZOMBIE \
                    and proc.create_time() >= session.create_time - 1.0:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found
