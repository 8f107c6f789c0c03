"""SGLang's process tree: a TP8 emulator is a parent, 8 schedulers and a detokenizer; the tree is found,
owned (never foreign) and stopped with zero survivors, and orphans of a SIGKILLed parent are swept."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from moe_tui import servers
from moe_tui.events import ServerStateChanged
from moe_tui.profiles import ServerProfile
from moe_tui.servers import (
    FAILED,
    SERVER_ID_ENV,
)
from tests.support.servers import group_alive, make, marked_processes, sim_profile


# -- SGLang's process tree: a TP8 emulator is a parent, 8 schedulers and a detokenizer -----------
def tp8_profile(**sim) -> ServerProfile:
    return dataclasses.replace(sim_profile(**sim), tp_size=8, ep_size=8, gpus=tuple(range(8)))


def tree_of(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.integration
async def test_tp8_tree_is_found_owned_never_foreign_and_stopped_with_zero_survivors(store, tracked):
    from moe_tui.telemetry import SimSource, SimulatedGpuSampler, expand_descendants, foreign_processes, gpu_owners

    profile = tp8_profile()
    server = make(tracked, profile, store)
    await server.start()
    await server.wait_ready(timeout=20)
    children = tree_of(server.pid)
    titles = sorted(p.name() for p in children)
    assert titles == ["sglang::detokenizer"] + [f"sglang::scheduler_TP{r}_EP{r}" for r in range(8)]
    # found: the lifecycle's sweep sees all ten
    found = {p.pid for p in servers.processes_of(server.pid, server.server_id)}
    assert found == {server.pid} | {p.pid for p in children}
    # owned: the schedulers hold the simulated GPUs, and every holder is the profile's
    snapshot = SimulatedGpuSampler(lambda: [SimSource(server.base_url, profile.gpus, live=True)]).sample()
    assert snapshot.simulated and [g.index for g in snapshot.gpus] == list(range(8))
    holders = [p.pid for g in snapshot.gpus for p in g.processes]
    schedulers = {p.pid for p in children if "scheduler" in p.name()}
    assert set(holders) == schedulers and len(holders) == 8
    assert gpu_owners(holders, {profile.name: server.pid}) == {pid: profile.name for pid in holders}
    # never foreign
    assert foreign_processes(snapshot, expand_descendants([server.pid])) == []
    assert foreign_processes(snapshot, [server.pid]) == []  # descendants are included by default
    await server.stop()
    assert server.last_stop is not None and server.last_stop.clean, server.last_stop.describe()
    assert set(server.last_stop.signalled) == found
    assert not marked_processes({server.server_id}) and not group_alive(server.pid)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in children)


@pytest.mark.integration
async def test_tp8_orphans_of_a_sigkilled_parent_are_owned_by_marker_and_swept(store, tracked):
    from moe_tui.telemetry import gpu_owners

    # --sim-orphan-children: the schedulers outlive their parent, as field reports describe.
    profile = tp8_profile(orphan_children=120)
    server = make(tracked, profile, store, grace_s=1.0)
    failed = asyncio.Event()
    server.subscribe(lambda e: failed.set() if isinstance(e, ServerStateChanged) and e.state == FAILED else None)
    await server.start()
    await server.wait_ready(timeout=20)
    children = tree_of(server.pid)
    leader = server.pid
    os.kill(leader, signal.SIGKILL)
    await asyncio.wait_for(failed.wait(), 15)
    # The lifecycle saw the exit and swept the tree by its marker: nothing of it survives, although
    # the children were reparented away from the dead leader and no longer its descendants.
    await server.stop()
    assert not marked_processes({server.server_id}), "orphaned schedulers survived the sweep"
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in children)
    assert not group_alive(leader)
    # The rule that found them: reparented processes carrying the start's marker are the server's.
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, SERVER_ID_ENV: server.server_id})
    try:
        from moe_tui.telemetry.ownership import marker_of

        deadline = time.monotonic() + 5  # /proc/PID/environ reads empty for a moment after exec
        while marker_of(orphan.pid) != server.server_id and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gpu_owners([orphan.pid], {profile.name: None}, {profile.name: server.server_id}) == {
            orphan.pid: profile.name}
        assert gpu_owners([orphan.pid], {profile.name: leader}) == {}  # no marker given: foreign
    finally:
        orphan.kill()
        orphan.wait()
