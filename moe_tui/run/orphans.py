"""Finding and stopping what a dead runner left behind.

Every controller that owns a data dir (it holds the runner lock) puts `MOE_TUI_RUNNER_DIR=<data
dir>` into its own environment, so every process it starts inherits it: SGLang servers and the
emulator (which also carry their start's `MOE_TUI_SERVER_ID`), benchmark children, SGLang's
bench_serving. A runner killed by SIGKILL (OOM killer, a lost node) cannot stop them; its
children live on in their own sessions, holding GPUs and ports.

The next controller to take the lock calls `stop_orphans(data_dir)` before anything else: every
process of this user carrying the marker for this data dir that is not itself or one of its
descendants is a dead runner's child (the lock proves no live runner owns the dir). Each is
stopped by process group, SIGTERM then SIGKILL after a grace period, and named in the returned
lines ("server sim-a (pid 123, ...)"), which the controller shows as notices.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil

RUNNER_DIR_ENV = "MOE_TUI_RUNNER_DIR"
SERVER_ID_ENV = "MOE_TUI_SERVER_ID"  # the same name moe_tui.servers gives its marker
GRACE_S = 5.0


def mark_children(data_dir: str | Path) -> None:
    """From now on every child of this process carries this data dir's marker."""
    os.environ[RUNNER_DIR_ENV] = str(Path(data_dir).resolve())


def _ours(data_dir: str | Path) -> set[int]:
    me = psutil.Process()
    with contextlib.suppress(psutil.Error):
        return {me.pid, *(c.pid for c in me.children(recursive=True))}
    return {me.pid}


def find_orphans(data_dir: str | Path) -> list[psutil.Process]:
    """Processes of this user that a runner of `data_dir` started and that are not ours: marked
    with the data dir, or in a server session it recorded (moe_tui.servers.sessions: what a
    launcher's `env -i` cannot clear)."""
    from moe_tui.servers.sessions import recorded_sessions, session_members

    wanted = str(Path(data_dir).resolve())
    mine, uid = _ours(data_dir), os.getuid()
    found: list[psutil.Process] = []
    for session in recorded_sessions(wanted):
        found.extend(p for p in session_members(session) if p.pid not in mine)
    seen = {p.pid for p in found}
    for proc in psutil.process_iter(["pid", "uids"]):
        try:
            if proc.pid in mine or proc.pid in seen or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if proc.environ().get(RUNNER_DIR_ENV) == wanted and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def describe(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        cmd = proc.cmdline()
        env = proc.environ()
        text = " ".join(cmd)[:120]
        if env.get(SERVER_ID_ENV):
            return f"server {env[SERVER_ID_ENV]} (pid {proc.pid}: {text})"
        if "bench" in cmd or any("bench_serving" in part or "moe_tui.bench" in part for part in cmd):
            return f"benchmark child (pid {proc.pid}: {text})"
        return f"process (pid {proc.pid}: {text})"
    return f"process (pid {proc.pid})"


def stop_orphans(data_dir: str | Path, grace_s: float = GRACE_S) -> list[str]:
    """Stop every orphan of `data_dir` (process groups, TERM then KILL). One line per process."""
    orphans = find_orphans(data_dir)
    if not orphans:
        _forget_ended_sessions(data_dir)
        return []
    names = {p.pid: describe(p) for p in orphans}
    own_group = os.getpgrp()
    groups = set()
    for proc in orphans:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(proc.pid))
    groups.discard(own_group)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        for proc in orphans:  # a child that shares our group is signalled alone
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(proc.pid) == own_group:
                    proc.send_signal(sig)
        _gone, alive = psutil.wait_procs(orphans, timeout=grace_s if sig == signal.SIGTERM else 2.0)
        orphans = alive
        if not orphans:
            break
    left = {p.pid for p in orphans}
    _forget_ended_sessions(data_dir)
    return [f"stopped what a dead runner of {data_dir} left: {names[pid]}" if pid not in left else
            f"could not stop what a dead runner of {data_dir} left: {names[pid]}"
            for pid in names]


def runner_dir_of(pid: int | None) -> str | None:
    """The data dir whose runner started process `pid` (its inherited `MOE_TUI_RUNNER_DIR`), or None
    when it is no moe-tui runner's child or its environment cannot be read (another user's)."""
    if pid is None:
        return None
    try:
        value = psutil.Process(pid).environ().get(RUNNER_DIR_ENV)
    except psutil.Error:
        return None
    return value or None


def stop_command(data_dir: str) -> str:
    """The command that stops the runner of `data_dir`, pasteable from any folder: its MOE_TUI_HOME
    (the folder above `data`, as `moe_tui.paths` lays it out) and this install's `moe-tui`."""
    import shlex
    import sys

    folder = Path(data_dir)
    env = f"MOE_TUI_HOME={shlex.quote(str(folder.parent))} " if folder.name == "data" else ""
    script = Path(sys.executable).parent / "moe-tui"
    program = shlex.quote(str(script)) if script.is_file() else f"{shlex.quote(sys.executable)} -m moe_tui"
    return f"{env}{program} run --stop"


def _forget_ended_sessions(data_dir: str | Path) -> None:
    """Drop the session records with no process left (a record of a live session stays)."""
    from moe_tui.servers.sessions import forget_session, recorded_sessions, session_members

    for session in recorded_sessions(Path(data_dir).resolve()):
        if not session_members(session):
            forget_session(session.path)
