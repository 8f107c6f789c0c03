"""A managed server's life against the real SGLang emulator (`python -m moe_tui.sim`) on loopback: start
to ready, hangs, crashes, a busy port, a silent backend fallback, GPU overlap, health lost, garbage
/server_info, repeated cycles. Every test checks the whole process table afterwards (psutil, by the
`MOE_TUI_SERVER_ID` marker each server carries), not just the handle's PID."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from moe_tui import servers
from moe_tui.events import Notice, ServerLogLine, ServerMetrics, ServerStateChanged
from moe_tui.profiles import REDACTED
from moe_tui.servers import (
    FAILED,
    READY,
    SERVER_ID_ENV,
    STARTING,
    STOPPED,
    GpuConflictError,
    PortInUseError,
    ServerFailed,
    ServerManager,
)
from moe_tui.servers.keys import auth_headers
from tests.support import loopback
from tests.support.servers import group_alive, make, marked_processes, sim_profile


# -- lifecycle -------------------------------------------------------------------------------
@pytest.mark.integration
async def test_start_to_ready_records_everything_and_stops_clean(store, tracked):
    profile = sim_profile(env={"HF_TOKEN": "sekrit", "NCCL_DEBUG": "WARN"})
    server = make(tracked, profile, store, metrics_interval_s=0.1)
    events = []
    server.subscribe(events.append)
    await server.start()
    assert server.state == STARTING
    await server.wait_ready(timeout=15)

    assert server.state == READY and server.phase == "ready"
    assert server.resolved_backend == "flashinfer_cutlass" and not server.backend_mismatch
    phases = [e.phase for e in events if isinstance(e, ServerStateChanged) and e.state == STARTING]
    assert phases[0] == "launching"
    for expected in ("loading weights", "capturing graphs", "warmup"):
        assert expected in phases, phases
    assert phases.index("loading weights") < phases.index("capturing graphs") < phases.index("warmup")
    assert any(isinstance(e, ServerLogLine) and "Load weight end" in e.line for e in events)
    assert any("Load weight begin" in line for line in server.log_lines)

    # the child got the real secret; the store only the redacted one, plus the marker
    child_env = psutil.Process(server.pid).environ()
    assert child_env["HF_TOKEN"] == "sekrit" and child_env[SERVER_ID_ENV] == server.server_id
    row = store.server_start(server.start_id)
    assert row["state"] == READY and row["pid"] == server.pid and row["ready_at"] is not None
    assert row["env"]["HF_TOKEN"] == REDACTED and row["env"][SERVER_ID_ENV] == server.server_id
    assert str(profile.port) in row["argv"] and row["profile"]["name"] == profile.name
    assert row["resolved_backend"] == "flashinfer_cutlass" and row["backend_mismatch"] is False
    assert row["sglang_version"] and row["server_info"]["port"] == profile.port
    assert row["model_info"]["model_path"] == "GLM-5-NVFP4"
    assert "fired up" in Path(row["log_path"]).read_text()

    for _ in range(50):
        if any(isinstance(e, ServerMetrics) for e in events):
            break
        await asyncio.sleep(0.05)
    metrics = [e for e in events if isinstance(e, ServerMetrics)]
    assert metrics and metrics[-1].running_requests == 0 and metrics[-1].gen_throughput is not None

    pid, marker = server.pid, server.server_id
    report = await server.stop()
    assert report.clean and server.state == STOPPED
    assert await server.stop() is report  # idempotent
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not group_alive(pid) and not marked_processes({marker})
    assert store.server_start(server.start_id)["state"] == STOPPED
    states = [e.state for e in events if isinstance(e, ServerStateChanged)]
    assert states[-2:] == ["stopping", "stopped"]


@pytest.mark.integration
async def test_v1_models_answering_is_not_readiness(tracked):
    # Warmup long enough to see the port answer while the server still warms up.
    server = make(tracked, sim_profile(warmup_seconds=1.5))
    await server.start()
    async with loopback.AsyncClient(base_url=server.base_url, trust_env=False, headers=auth_headers(server.base_url)) as client:
        for _ in range(100):
            try:
                if (await client.get("/v1/models")).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
        else:
            pytest.fail("/v1/models never answered")
        assert (await client.get("/health_generate")).status_code == 503
        assert server.state == STARTING
    await server.wait_ready(timeout=15)
    assert server.state == READY
    await server.stop()


@pytest.mark.integration
async def test_startup_hang_hits_timeout_and_group_is_gone(store, tracked):
    # 4 s: the emulator must get as far as "Load weight begin" on a busy 2-core CI machine.
    server = make(tracked, sim_profile(startup_hang=True, timeout=4.0), store)
    events = []
    server.subscribe(events.append)
    await server.start()
    pid, marker = server.pid, server.server_id
    began = time.monotonic()
    with pytest.raises(ServerFailed) as info:
        await server.wait_ready(timeout=15)
    assert 3.5 < time.monotonic() - began < 12
    assert server.state == FAILED and "startup_timeout_s=4" in server.reason
    event = info.value.event
    assert event is not None and event.state == FAILED and event.log_tail
    assert event.log_tail[0].startswith("# moe-tui:") and "--sim-startup-hang" in event.log_tail[0]
    if any("Load weight begin" in line for line in event.log_tail):  # not reached on a starved CPU
        assert event.phase == "loading weights"
    await server.stop()  # waits for the failure path's cleanup; idempotent
    assert not group_alive(pid) and not marked_processes({marker})
    assert store.server_start(server.start_id)["state"] == FAILED


@pytest.mark.integration
async def test_crash_mid_run_is_detected_with_log_tail(store, tracked):
    server = make(tracked, sim_profile(crash_after_requests=1), store)
    failed = asyncio.Event()
    server.subscribe(lambda e: failed.set() if isinstance(e, ServerStateChanged) and e.state == FAILED else None)
    await server.start()
    await server.wait_ready(timeout=15)
    async with loopback.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10,
                                 headers=auth_headers(server.base_url)) as client:
        with pytest.raises(httpx.HTTPError):
            async with client.stream("POST", "/generate", json={
                "text": "hello", "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
                "stream": True,
            }) as resp:
                async for _ in resp.aiter_lines():
                    pass
    await asyncio.wait_for(failed.wait(), 5)
    event = server.failure
    # SGLang's launcher kills its own tree (and itself, SIGKILL) when a scheduler fails: named as such
    assert event.exit_code is None and event.exit_signal == signal.SIGKILL
    assert "SGLang stopped its own process tree while ready" in event.reason
    assert "CUDA error: " in event.reason and "illegal memory access" in event.reason
    assert any("illegal memory access" in line for line in event.log_tail)
    assert 0 < len(event.log_tail) <= 50
    row = store.server_start(server.start_id)
    assert row["state"] == FAILED and row["exit_signal"] == signal.SIGKILL and "illegal memory access" in row["log_tail"]
    await server.stop()
    assert not marked_processes({server.server_id})


async def test_port_in_use_names_port_and_holder(tracked):
    profile = sim_profile()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", profile.port))
        holder.listen()
        server = make(tracked, profile)
        with pytest.raises(PortInUseError) as info:
            await server.start()
    message = str(info.value)
    assert f"port {profile.port}" in message and f"pid {os.getpid()}" in message
    assert "python" in message.lower()
    assert info.value.holder_pid == os.getpid() and server.pid is None and server.state == STOPPED


@pytest.mark.integration
async def test_silent_fallback_is_flagged_from_server_info(store, tracked):
    server = make(tracked, sim_profile(fallback_backend="flashinfer_cutedsl"), store)
    events = []
    server.subscribe(events.append)
    await server.start()
    await server.wait_ready(timeout=15)
    assert server.backend_mismatch and server.resolved_backend == "flashinfer_cutedsl"
    ready = [e for e in events if isinstance(e, ServerStateChanged) and e.state == READY][0]
    assert ready.backend_mismatch and "BACKEND MISMATCH" in ready.reason
    assert any(isinstance(e, Notice) and e.level == "warning" and "fell back" in e.message for e in events)
    row = store.server_start(server.start_id)
    assert row["backend_mismatch"] is True and row["resolved_backend"] == "flashinfer_cutedsl"
    await server.stop()


@pytest.mark.integration
async def test_overlapping_gpus_refused_naming_both_profiles(tracked):
    manager = ServerManager(gpu_probe=servers.no_gpu_view, ready_poll_s=0.1)
    a = await manager.start(sim_profile("sim-a", gpus=(0, 1)))
    tracked.append(a)
    with pytest.raises(GpuConflictError) as info:
        await manager.start(sim_profile("sim-b", gpus=(1, 2)))
    tracked.append(manager.get("sim-b"))
    message = str(info.value)
    assert "'sim-a'" in message and "'sim-b'" in message and "GPU(s) 1" in message
    assert manager.get("sim-b").pid is None
    await manager.stop_all()
    assert a.state == STOPPED


@pytest.mark.integration
async def test_health_that_stops_answering_while_ready_fails_the_server(store, tracked):
    server = make(tracked, sim_profile(), store, health_interval_s=0.2, health_timeout_s=0.3,
                  health_failures=2, grace_s=0.5)
    failed = asyncio.Event()
    server.subscribe(lambda e: failed.set() if isinstance(e, ServerStateChanged) and e.state == FAILED else None)
    await server.start()
    await server.wait_ready(timeout=15)
    os.kill(server.pid, signal.SIGSTOP)  # alive but deaf: only the health check can tell
    await asyncio.wait_for(failed.wait(), 10)
    assert "health stopped answering (2 checks in a row" in server.reason
    assert server.failure.log_tail and server.failure.exit_code is None
    await server.stop()
    assert server.last_stop is not None and server.last_stop.sent_sigkill
    assert not marked_processes({server.server_id}) and not group_alive(server.pid)
    assert store.server_start(server.start_id)["state"] == FAILED


STAND_IN = textwrap.dedent("""
    # A server whose /server_info answers garbage (the emulator has no such fault).
    import http.server, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    BODIES = {"/health_generate": (200, "ok"), "/health": (200, "ok"),
              "/server_info": (200, "<html>502 Bad Gateway</html>"),
              "/model_info": (200, '{"model_path": "stand-in"}')}
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code, body = BODIES.get(self.path, (404, "no"))
            self.send_response(code); self.end_headers(); self.wfile.write(body.encode())
        def log_message(self, *a):
            pass
    print("The server is fired up and ready to roll!", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


@pytest.mark.integration
async def test_garbage_server_info_is_flagged_not_a_crash(tmp_path, store, tracked):
    script = tmp_path / "standin.py"
    script.write_text(STAND_IN)
    fake_python = tmp_path / "fakepython"
    fake_python.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {script} \"$@\"\n")
    fake_python.chmod(0o755)
    server = make(tracked, sim_profile(), store, python=str(fake_python))
    events = []
    server.subscribe(events.append)
    await server.start()
    await server.wait_ready(timeout=15)
    assert server.state == READY and server.resolved_backend is None and not server.backend_mismatch
    assert "/server_info is not JSON" in server.server_info_error and "Bad Gateway" in server.server_info_error
    assert "resolved backend UNKNOWN" in server.reason
    assert any(isinstance(e, Notice) and e.level == "error" and "cannot verify" in e.message for e in events)
    row = store.server_start(server.start_id)
    assert row["resolved_backend"] is None and "UNKNOWN" in row["reason"]
    assert row["model_info"] == {"model_path": "stand-in"}
    await server.stop()
    assert not marked_processes({server.server_id})


def test_binding_beyond_loopback_warns():
    profile = dataclasses.replace(sim_profile(), host="0.0.0.0")
    warnings = servers.preflight(profile)
    assert len(warnings) == 1 and "0.0.0.0" in warnings[0] and "reachable from other machines" in warnings[0]
    assert servers.preflight(sim_profile()) == []


@pytest.mark.integration
@pytest.mark.slow
async def test_repeated_start_stop_cycles_leave_nothing_behind(tracked):
    # Five cycles of one server, each process group checked gone; the 100-cycle soak with stops
    # mid-start is tests/reliability/test_faults.py::test_100_start_stop_cycles_leave_no_orphans.
    profile = sim_profile(load_seconds=0.05, graph_seconds=0.02, warmup_seconds=0.02)
    server = make(tracked, profile, grace_s=2.0)
    markers, pids = set(), []
    for _ in range(5):
        await server.start()
        await server.wait_ready(timeout=15)
        markers.add(server.server_id)
        pids.append(server.pid)
        report = await server.stop()
        assert report.clean, report.describe()
    assert len(markers) == 5
    assert not marked_processes(markers)
    assert not [p for p in pids if group_alive(p)]


@pytest.mark.integration
async def test_a_ready_server_that_stops_answering_is_not_reused(store, tracked):
    """A server that crashed during the last item may not have exited when the next item asks (its crash
    handler still stopping children); reused, it failed that item too (test_server_crash, once under load,
    2026-12-05). `still_serving` asks /health: a frozen server (SIGSTOP) is not one to reuse, a killed one is
    recorded failed within the exit wait, a live one is reused."""
    server = make(tracked, sim_profile(), store)
    await server.start()
    await server.wait_ready(timeout=15)
    assert await server.still_serving(timeout=5.0, exit_wait=1.0)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        assert not await server.still_serving(timeout=0.5, exit_wait=0.3)
        assert server.state == READY  # frozen, not gone: the caller stops it
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert await server.still_serving(timeout=5.0, exit_wait=1.0)
    os.killpg(server.pid, signal.SIGKILL)  # a crash: the exit watcher records it while still_serving waits
    assert not await server.still_serving(timeout=0.5, exit_wait=30.0)
    assert server.state == FAILED and "SIGKILL" in server.reason, server.reason
