"""Helpers for the server tests (tests/servers): emulator profiles on free ports, the process table by
server marker, and a ManagedServer made for a test (its teardown is the `tracked` fixture's)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from moe_tui import servers
from moe_tui.profiles import ServerProfile
from moe_tui.servers import SERVER_ID_ENV, ManagedServer
from tests.runner_support import free_port, processes_with

REPO = Path(__file__).resolve().parent.parent.parent
FAST_SIM = {"load_seconds": 0.2, "graph_seconds": 0.1, "warmup_seconds": 0.1, "time_scale": 50}

__all__ = ["FAST_SIM", "REPO", "free_port", "group_alive", "make", "marked_processes", "sim_profile"]


def sim_profile(name: str = "sim-test", *, backend: str = "flashinfer_cutlass", gpus=(),
                timeout: float = 20.0, env=None, **sim) -> ServerProfile:
    return ServerProfile(
        name=name, engine="sim", model_path="GLM-5-NVFP4", moe_runner_backend=backend,
        gpus=tuple(gpus), port=free_port(), startup_timeout_s=timeout,
        extra_args=("--enable-metrics",), env=dict(env or {}), sim={**FAST_SIM, **sim},
    )


def marked_processes(markers) -> list[psutil.Process]:
    """Every live process on the machine carrying one of these server markers."""
    return processes_with(SERVER_ID_ENV, set(markers))


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True



def make(tracked, profile, store=None, **kw) -> ManagedServer:
    kw.setdefault("ready_poll_s", 0.1)
    kw.setdefault("gpu_probe", servers.no_gpu_view)
    server = ManagedServer(profile, store=store, **kw)
    tracked.append(server)
    return server
