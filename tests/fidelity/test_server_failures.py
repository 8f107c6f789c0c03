"""Startup and failure as on a real SGLang box, against the emulator with the real behaviour on:
OOM / NCCL / CUDA errors read from the log and named in the failure reason; SGLang's own kill of
its process tree reported as such (not "killed by SIGKILL"); a no-progress watchdog that fails a
hung start long before startup_timeout_s; the FlashInfer autotune as its own phase; a stop that
SIGTERMs the launcher alone first; the HTTP port closed until the engine is up."""

from __future__ import annotations

import asyncio
import socket
import time

import psutil
import pytest

from moe_tui import servers
from moe_tui.events import ServerStateChanged
from moe_tui.profiles import ServerProfile
from moe_tui.servers import FAILED, READY, ManagedServer
from moe_tui.servers.failures import CUDA, NCCL, OOM, diagnose
from moe_tui.sim.launch import SimProcess, http_status

pytestmark = pytest.mark.integration

FAST_SIM = {"load_seconds": 0.3, "graph_seconds": 0.1, "warmup_seconds": 0.1, "time_scale": 50}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _profile(*, stall: float = 600.0, timeout: float = 60.0, backend: str = "flashinfer_cutlass",
             **sim: object) -> ServerProfile:
    return ServerProfile(name="sim-fail", engine="sim", model_path="GLM-5-NVFP4", moe_runner_backend=backend,
                         port=_port(), startup_timeout_s=timeout, startup_stall_s=stall,
                         extra_args=("--enable-metrics",), sim={**FAST_SIM, **sim})


@pytest.fixture
def made(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    out: list[ManagedServer] = []
    yield out
    for server in out:
        server.stop_sync("test teardown")


def _server(made, profile: ServerProfile) -> ManagedServer:
    server = ManagedServer(profile, ready_poll_s=0.1, gpu_probe=servers.no_gpu_view)
    made.append(server)
    return server


@pytest.mark.parametrize(("fault", "kind", "words"), [
    ("oom", OOM, "CUDA out of memory"), ("nccl", NCCL, "NCCL error"), ("cuda", CUDA, "illegal memory access")])
async def test_startup_error_is_named_and_sglangs_own_kill_is_not_the_oom_killer(made, fault, kind, words):
    server = _server(made, _profile(startup_fault=fault))
    await server.start()
    with pytest.raises(servers.ServerFailed):
        await server.wait_ready(timeout=30)
    event = server.failure
    assert event.exit_signal == 9  # kill_process_tree SIGKILLs the launcher itself
    assert event.reason.startswith("SGLang stopped its own process tree while starting after a child process "
                                   "failed: "), event.reason
    assert f": {kind}: " in event.reason and words in event.reason
    assert "killed by SIGKILL" not in event.reason


async def test_crash_while_ready_names_cuda_error(made):
    server = _server(made, _profile(crash_after_requests=1))
    await server.start()
    await server.wait_ready(timeout=30)
    import httpx

    from moe_tui.servers.keys import auth_headers
    from tests.support import loopback

    async with loopback.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10,
                                 headers=auth_headers(server.base_url)) as client:  # the start's key
        with pytest.raises(httpx.HTTPError):
            async with client.stream("POST", "/generate", json={
                    "text": "hi", "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}, "stream": True}) as r:
                async for _ in r.aiter_lines():
                    pass
    for _ in range(100):
        if server.state == FAILED:
            break
        await asyncio.sleep(0.05)
    assert server.failure is not None
    assert server.failure.reason.startswith("SGLang stopped its own process tree while ready")
    assert f"{CUDA}: " in server.failure.reason


async def test_no_progress_watchdog_fails_a_hung_start_before_the_timeout(made):
    # 5 s: above a loaded box's interpreter start before the first log line, far below the timeout
    server = _server(made, _profile(stall=5.0, timeout=120.0, startup_hang=True))
    began = time.monotonic()
    await server.start()
    with pytest.raises(servers.ServerFailed):
        await server.wait_ready(timeout=60)
    took = time.monotonic() - began
    assert "no startup progress for" in server.failure.reason and "startup_stall_s=5" in server.failure.reason
    assert "Loading safetensors checkpoint shards:   0% Completed" in server.failure.reason
    assert took < 60  # far below startup_timeout_s=120


async def test_log_lines_keep_the_watchdog_quiet_during_a_long_load(made):
    # 12 s of loading with the shard progress bar a real load prints: tqdm "\r" updates every 0.5 s
    # and no newline until the load ends; watchdog at 5 s
    server = _server(made, _profile(stall=5.0, load_seconds=12.0))
    await server.start()
    await server.wait_ready(timeout=60)
    assert server.state == READY
    await server.stop()


async def test_autotune_is_its_own_phase(made):
    phases: list[str] = []
    server = _server(made, _profile(autotune_seconds=0.8))
    server.subscribe(lambda e: phases.append(e.phase) if isinstance(e, ServerStateChanged) else None)
    await server.start()
    await server.wait_ready(timeout=30)
    seen = list(dict.fromkeys(p for p in phases if p))
    assert seen.index("loading weights") < seen.index("autotuning") < seen.index("capturing graphs"), seen
    await server.stop()


async def test_stop_sigterms_the_launcher_alone_first(made):
    server = _server(made, _profile())
    await server.start()
    await server.wait_ready(timeout=30)
    children = psutil.Process(server.pid).children(recursive=True)
    assert children
    report = await server.stop()
    assert report is not None and report.clean and not report.sent_sigkill
    # The emulator logs SGLang's graceful path: only the launcher got SIGTERM, and it took its
    # schedulers down itself (no child was signalled by moe-tui before the launcher was gone).
    assert any("Received sigterm, shutting down gracefully" in line for line in server.log_lines)
    assert not any("SIGTERM from outside its launcher" in line for line in server.log_lines), list(server.log_lines)[-5:]
    assert report.exit_signal is None and report.exit_code == 0
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def test_port_opens_only_when_the_engine_is_up():
    with SimProcess(["--sim-load-seconds", "3", "--sim-warmup-seconds", "0.5"]) as sim:
        statuses = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("ready to roll" in ln for ln in sim.lines):
            statuses.append((time.monotonic(), http_status(sim.base_url + "/v1/models", timeout=0.5)))
            time.sleep(0.05)
        graphs_end_seen = next(t for ln, t in zip(sim.lines, sim.line_times) if "CUDA graph end" in ln)
    first_open = min(t for t, s in statuses if s is not None)
    assert statuses[0][1] is None  # connection refused while the weights load
    # The engine was up before the port opened: "CUDA graph end" was printed before the first
    # answer. It reaches this reader a little after it is printed (a busy machine's reader thread can
    # trail by tens of ms, so each probe is judged by time, not by the lines read so far); a port
    # opened during the 3 s load would answer seconds before it.
    assert graphs_end_seen < first_open + 1.5, (graphs_end_seen - first_open, statuses)
    assert any(s == 200 for _, s in statuses)  # open (503 health) during warmup


def test_diagnosis_prefers_the_oom_over_the_cuda_error_it_causes():
    lines = ["[t TP3] ERROR Scheduler hit an exception: RuntimeError: CUDA error: out of memory",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
             "Received sigquit from a child process. It usually means the child failed."]
    d = diagnose(lines)
    assert d.kind == OOM and d.self_killed and d.line.startswith("torch.OutOfMemoryError")
    assert diagnose(["all good"]).kind is None and not diagnose(["all good"]).self_killed
