"""The emulator's process tree, shaped like SGLang 0.5.23's: a parent (HTTP server), one scheduler
per TP rank titled as SGLang titles them, a detokenizer; the schedulers hold the simulated GPUs.
A SIGKILLed parent takes its children with it (PR_SET_PDEATHSIG, as SGLang's
kill_itself_when_parent_died does), unless --sim-orphan-children models the orphans reported in
the field; then the lifecycle's sweep finds them by moe-tui's marker and leaves zero survivors."""

from __future__ import annotations

import os
import signal
import time
import uuid

import psutil
import pytest

from moe_tui.judgement import SERVER_ID_ENV
from moe_tui.servers import processes_of, terminate_server
from moe_tui.sim.launch import start_sim
from moe_tui.sim.procs import scheduler_title
from tests.support import loopback


def live_children(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children() if p.status() != psutil.STATUS_ZOMBIE]


def alive(procs) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_titles_follow_sglangs_rule():
    assert scheduler_title(0, 1, 1) == "sglang::scheduler"
    assert scheduler_title(3, 8, 1) == "sglang::scheduler_TP3"
    assert scheduler_title(5, 8, 8) == "sglang::scheduler_TP5_EP5"
    assert scheduler_title(5, 8, 2) == "sglang::scheduler_TP5_EP1"  # moe_ep_rank = tp_rank // (tp / ep)


@pytest.mark.integration
def test_tp8_tree_holds_its_gpus_and_dies_with_a_sigkilled_parent():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "4,5,6,7,0,1,2,3"}
    with start_sim(["--tp-size", "8"], env=env) as sim:
        kids = live_children(sim.proc.pid)
        names = sorted(p.name() for p in kids)
        assert names == ["sglang::detokenizer"] + [f"sglang::scheduler_TP{r}" for r in range(8)]
        assert all(p.cmdline()[0] == p.name() for p in kids)  # argv[0] is the title, as setproctitle makes it
        info = loopback.get(sim.base_url + "/server_info", timeout=10).json()["sim"]
        gpus = loopback.get(sim.base_url + "/sim/gpus", timeout=10).json()
        assert info["gpu_indices"] == [4, 5, 6, 7, 0, 1, 2, 3]
        holders = {g["index"]: [p["pid"] for p in g["processes"]] for g in gpus["gpus"]}
        assert holders == {g: [pid] for g, pid in zip(info["gpu_indices"], info["scheduler_pids"])}
        by_pid = {p.pid: p.name() for p in kids}
        assert [by_pid[pid] for pid in info["scheduler_pids"]] == [f"sglang::scheduler_TP{r}" for r in range(8)]
        os.kill(sim.proc.pid, signal.SIGKILL)
        assert wait_until(lambda: not alive(kids)), f"children outlived the parent: {alive(kids)}"


@pytest.mark.integration
def test_orphans_outlive_the_parent_and_the_sweep_leaves_zero_survivors():
    marker = f"sim-orphan-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, SERVER_ID_ENV: marker}
    with start_sim(["--tp-size", "8", "--ep-size", "8", "--sim-orphan-children", "120"], env=env) as sim:
        leader = sim.proc.pid
        kids = live_children(leader)
        assert len(kids) == 9
        os.kill(leader, signal.SIGKILL)
        sim.proc.wait(5)
        # Orphaned: alive, reparented away from the dead leader, still holding "their GPU".
        assert wait_until(lambda: all(p.ppid() != leader for p in kids if p.is_running()))
        assert sorted(alive(kids)) == sorted(p.pid for p in kids)
        # The lifecycle's rule finds them without the leader: by the marker they inherited.
        found = {p.pid for p in processes_of(leader, marker, leader_verified=False)}
        assert found == {p.pid for p in kids}
        report = terminate_server(leader, marker, grace_s=1.0)
        assert report.clean and set(report.signalled) == found, report.describe()
        assert alive(kids) == []


@pytest.mark.integration
def test_tree_starts_from_a_root_cwd_like_the_detached_runner():
    """The detached runner runs with cwd "/": a child exec'd with argv[0] = its title must still find
    its own standard library (it once picked /lib/python3.x and the emulator never got ready)."""
    import subprocess
    import sys

    code = ("from moe_tui.sim.procs import ChildProcs; c = ChildProcs(2, 2); pids = c.start(); "
            "import psutil; print(sorted(psutil.Process(p).name() for p in pids)); c.stop()")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['sglang::scheduler_TP0_EP0', 'sglang::scheduler_TP1_EP1']"
