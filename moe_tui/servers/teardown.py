"""Process teardown: find every process of a server (its family by judgement's one rule, its
process group, its environment marker) and stop them all, leaving nothing behind (`terminate_server`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from moe_tui.judgement import server_family
from moe_tui.servers.base import KILL_CONFIRM_S, SERVER_ID_ENV, GpuProbe

if TYPE_CHECKING:
    import psutil  # untyped (mypy sees Any): the name is for the reader

# After the launcher's own shutdown: how long the rest of the group gets after its SIGTERM.
GROUP_TERM_S = 5.0


# -- the process table ---------------------------------------------------------------------------
def _alive(proc: psutil.Process, popen: subprocess.Popen[bytes] | None = None) -> bool:
    """True while a process exists and is not a zombie (a zombie holds no memory or GPU)."""
    import psutil

    if popen is not None and proc.pid == popen.pid:
        return popen.poll() is None
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def processes_of(leader_pid: int | None, marker: str | None, *, leader_verified: bool = True) -> list[psutil.Process]:
    """Every live process that belongs to a server: its family by `judgement.server_family` (the
    leader, its descendants, and any process whose environment carries `MOE_TUI_SERVER_ID=marker`
    with its descendants: this is what finds reparented schedulers), plus members of the leader's
    process group.

    `leader_verified=False` (the leader is gone or may be a reused PID) skips the leader, its
    children and its group, unless a member of that group carries the marker."""
    import psutil

    from moe_tui.telemetry.ownership import marked_pids, process_parents

    me = os.getpid()
    parent_of = process_parents()
    marked = marked_pids([marker], parent_of.keys())[marker] if marker else set()
    family = server_family(leader_pid if leader_verified else None, parent_of, marked)
    found: dict[int, psutil.Process] = {}
    for pid in family - {me}:
        with contextlib.suppress(psutil.Error):
            found[pid] = psutil.Process(pid)
    group: dict[int, psutil.Process] = {}
    if leader_pid is not None:
        for pid in parent_of:
            if pid == me or pid in found:
                continue
            with contextlib.suppress(OSError, psutil.Error):
                if os.getpgid(pid) == leader_pid:
                    group[pid] = psutil.Process(pid)
    # A group member proves the group id is still ours only if the group id is held by a process
    # we know (a live, verified leader, or any member with our marker): group ids are never
    # reused while a member lives.
    if group and (leader_verified or any(pid in marked for pid in group)):
        found.update(group)
    return [p for p in found.values() if _alive(p)]


def has_marker(pid: int, marker: str) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).environ().get(SERVER_ID_ENV) == marker)
    except (psutil.Error, OSError):
        return False


@dataclass(frozen=True)
class StopReport:
    """What a stop did and what it found afterwards. `clean` is the promise kept."""

    signalled: tuple[int, ...] = ()
    sent_sigkill: bool = False
    survivors: tuple[int, ...] = ()  # processes of the server still alive after SIGKILL
    gpu_checked: bool = False
    gpu_holders: tuple[int, ...] = ()  # server PIDs NVML still lists on the profile's GPUs
    exit_code: int | None = None
    exit_signal: int | None = None
    seconds: float = 0.0
    remote_left: tuple[str, ...] = ()  # a multi-node start: what the sweep found on other nodes (servers/multinode.py)

    @property
    def clean(self) -> bool:
        return not self.survivors and not self.gpu_holders and not self.remote_left

    def describe(self) -> str:
        parts = [f"stopped {len(self.signalled)} process(es) in {self.seconds:.1f} s"]
        if self.sent_sigkill:
            parts.append("SIGKILL was needed")
        if self.survivors:
            parts.append(f"STILL ALIVE: pids {', '.join(map(str, self.survivors))}")
        if self.gpu_holders:
            parts.append(f"NVML still lists pids {', '.join(map(str, self.gpu_holders))} on the GPUs")
        if self.remote_left:
            parts.append("LEFT ON NODES: " + "; ".join(self.remote_left))
        return "; ".join(parts)


def _signal_all(group_id: int | None, procs: Sequence[psutil.Process], sig: int) -> None:
    if group_id is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group_id, sig)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)


def _wait_gone(procs: Sequence[psutil.Process], popen: subprocess.Popen[bytes] | None, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _alive(p, popen)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def terminate_server(
    leader_pid: int | None,
    marker: str | None,
    *,
    grace_s: float,
    popen: subprocess.Popen[bytes] | None = None,
    gpus: Sequence[int] = (),
    gpu_probe: GpuProbe | None = None,
) -> StopReport:
    """Stop a server's whole process tree and confirm nothing of it is left. Idempotent; safe to
    call on a server that already exited. `leader_pid` must be the session leader (the pid of a
    child started with start_new_session=True), so its pid is the process group id."""
    began = time.monotonic()

    def verified() -> bool:
        if leader_pid is None:
            return False
        if popen is not None:
            return popen.poll() is None
        return marker is not None and has_marker(leader_pid, marker)

    def group_of(found: Sequence[psutil.Process]) -> int | None:
        # killpg only while the group id provably is ours (see processes_of).
        if leader_pid is None:
            return None
        if verified():
            return leader_pid
        for proc in found:
            with contextlib.suppress(OSError):
                if os.getpgid(proc.pid) == leader_pid:
                    return leader_pid
        return None

    procs = processes_of(leader_pid, marker, leader_verified=verified())  # before any signal
    all_pids = {p.pid for p in procs}
    sent_kill = False
    first_group = group_of(procs) if procs else None  # proven ours before anything was signalled
    if procs:
        alive = _term_in_order(leader_pid if verified() else None, first_group, procs, popen, grace_s)
        if alive:
            sent_kill = True
            _signal_all(group_of(alive), alive, signal.SIGKILL)
            _wait_gone(alive, popen, KILL_CONFIRM_S)
    # A last look over the whole table: anything of the group or with our marker that appeared
    # meanwhile (a child forked during shutdown) is killed too.
    late = processes_of(leader_pid, marker, leader_verified=verified())
    if late:
        sent_kill = True
        all_pids.update(p.pid for p in late)
        _signal_all(group_of(late), late, signal.SIGKILL)
        late = _wait_gone(late, popen, KILL_CONFIRM_S)
    exit_code = exit_signal = None
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)  # reap our child so it does not linger as a zombie
        exit_code, exit_signal = _split_returncode(popen.returncode)
    if first_group is not None and not late:
        # The leader's children (SGLang's schedulers) die reparented: init reaps them a moment
        # later. Wait for that, so "stopped" means the process group is gone, zombies included.
        _wait_group_empty(first_group, 2.0)
    gpu_checked, holders = False, tuple[int, ...]()
    if gpus and gpu_probe is not None:
        view = gpu_probe()
        if view is not None:
            gpu_checked = True
            listed = {pid for procs_ in view.pids_on(gpus).values() for pid, _ in procs_}
            holders = tuple(sorted(listed & (all_pids | ({leader_pid} if leader_pid else set()))))
    return StopReport(
        signalled=tuple(sorted(all_pids)), sent_sigkill=sent_kill,
        survivors=tuple(sorted(p.pid for p in late)), gpu_checked=gpu_checked, gpu_holders=holders,
        exit_code=exit_code, exit_signal=exit_signal, seconds=time.monotonic() - began,
    )


def _term_in_order(leader_pid: int | None, group: int | None, procs: Sequence[psutil.Process],
                   popen: subprocess.Popen[bytes] | None, grace_s: float) -> list[psutil.Process]:
    """SIGTERM the launcher alone first and give it `grace_s` for SGLang's own shutdown (it drains
    in-flight requests, then takes its schedulers down: tokenizer_manager.py); a group-wide SIGTERM
    would kill the schedulers, which have no handler of their own, before that clean path ran.
    Then SIGTERM whatever of the group is left (GROUP_TERM_S). Returns the processes still alive."""
    leader = [p for p in procs if p.pid == leader_pid]
    if leader:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(leader[0].pid, signal.SIGTERM)
        _wait_gone(leader, popen, grace_s)
        rest = [p for p in procs if _alive(p, popen)]
        if not rest:
            return []
        _signal_all(group, rest, signal.SIGTERM)
        return _wait_gone(rest, popen, min(grace_s, GROUP_TERM_S))
    _signal_all(group, procs, signal.SIGTERM)
    return _wait_gone(procs, popen, grace_s)


def _wait_group_empty(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # another user's process took the id: not ours to wait for
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _split_returncode(rc: int | None) -> tuple[int | None, int | None]:
    if rc is None:
        return None, None
    if rc < 0:
        return None, -rc
    return rc, None


def signal_name(sig: int | None) -> str:
    if sig is None:
        return ""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
