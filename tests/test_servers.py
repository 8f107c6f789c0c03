"""Server lifecycle against the real SGLang emulator (`python -m moe_tui.sim`) on loopback.

Every test starts real processes and checks the whole process table afterwards (psutil, by the
`MOE_TUI_SERVER_ID` marker each server carries), not just the handle's PID. Pure parsers
(Prometheus text, /server_info) and the GPU checks (with an injected GPU view) are unit tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from moe_tui import servers
from moe_tui.events import Notice, ServerLogLine, ServerMetrics, ServerStateChanged
from moe_tui.profiles import REDACTED, ServerProfile
from moe_tui.servers import (
    FAILED,
    READY,
    SERVER_ID_ENV,
    STARTING,
    STOPPED,
    ForeignGpuProcessError,
    GpuConflictError,
    GpuView,
    ManagedServer,
    PortInUseError,
    ServerFailed,
    ServerInfoError,
    ServerManager,
    check_gpus,
    metrics_event,
    parse_prometheus_text,
    parse_server_info,
)
from moe_tui.servers.keys import auth_headers
from moe_tui.store.db import Store

REPO = Path(__file__).resolve().parent.parent
FAST_SIM = {"load_seconds": 0.2, "graph_seconds": 0.1, "warmup_seconds": 0.1, "time_scale": 50}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_profile(name: str = "sim-test", *, backend: str = "flashinfer_cutlass", gpus=(),
                timeout: float = 20.0, env=None, **sim) -> ServerProfile:
    return ServerProfile(
        name=name, engine="sim", model_path="GLM-5-NVFP4", moe_runner_backend=backend,
        gpus=tuple(gpus), port=free_port(), startup_timeout_s=timeout,
        extra_args=("--enable-metrics",), env=dict(env or {}), sim={**FAST_SIM, **sim},
    )


def marked_processes(markers) -> list[psutil.Process]:
    """Every live process on the machine carrying one of these server markers."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(SERVER_ID_ENV) in markers and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def store(home):
    s = Store(home / "store.sqlite3")
    yield s
    s.close()


@pytest.fixture
def tracked():
    """Servers made by a test; whatever happens, nothing of theirs survives the test."""
    made: list[ManagedServer] = []
    yield made
    markers = {s.server_id for s in made if s.server_id}
    for server in made:
        server.stop_sync("test teardown")
    for proc in marked_processes(markers):
        proc.kill()


def make(tracked, profile, store=None, **kw) -> ManagedServer:
    kw.setdefault("ready_poll_s", 0.1)
    kw.setdefault("gpu_probe", servers.no_gpu_view)
    server = ManagedServer(profile, store=store, **kw)
    tracked.append(server)
    return server


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
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, headers=auth_headers(server.base_url)) as client:
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
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10,
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


CONTROLLER = textwrap.dedent("""
    import asyncio, json, sys
    from moe_tui import servers
    from moe_tui.profiles import profile_from_dict

    async def main():
        servers.install_exit_handlers()
        profile = profile_from_dict(json.loads(sys.argv[1]))
        server = servers.ManagedServer(profile, gpu_probe=servers.no_gpu_view, ready_poll_s=0.1,
                                       keep_running=sys.argv[2] == "keep")
        await server.start()
        await server.wait_ready(30)
        print(json.dumps({"pid": server.pid, "marker": server.server_id}), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


def run_controller(tmp_path, profile: ServerProfile, mode: str, sig: int) -> dict:
    data = {k: v for k, v in profile.launch_settings().items() if k not in ("env",)}
    data["gpus"], data["extra_args"] = list(profile.gpus), list(profile.extra_args)
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER)
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(data), mode], stdout=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line, "controller did not report a ready server"
        info = json.loads(line)
        assert psutil.pid_exists(info["pid"])
        proc.send_signal(sig)
        rc = proc.wait(timeout=20)
        info["rc"] = rc
        return info
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_killing_the_controller_leaves_no_server(tmp_path, home, sig):
    info = run_controller(tmp_path, sim_profile(), "stop", sig)
    try:
        assert info["rc"] == -sig  # the handler chained to the default action
        assert not group_alive(info["pid"])
        assert not marked_processes({info["marker"]})
    finally:
        for proc in marked_processes({info["marker"]}):
            proc.kill()


@pytest.mark.integration
def test_kept_server_survives_controller_and_stops_from_record(tmp_path, home):
    info = run_controller(tmp_path, sim_profile(), "keep", signal.SIGTERM)
    try:
        assert marked_processes({info["marker"]}), "a kept server must survive its controller"
        record = {"pid": info["pid"], "env": {SERVER_ID_ENV: info["marker"]}, "profile": {"engine": "sim"}}
        assert servers.recorded_server_alive(record)
        report = servers.stop_recorded_server(record, gpu_probe=servers.no_gpu_view)
        assert report.clean and info["pid"] in report.signalled
        assert not marked_processes({info["marker"]}) and not servers.recorded_server_alive(record)
    finally:
        for proc in marked_processes({info["marker"]}):
            proc.kill()


@pytest.mark.integration
def test_cli_start_keep_status_logs_stop(tmp_path, home):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    port = free_port()
    (profiles / "cli.toml").write_text(textwrap.dedent(f"""
        name = "sim-cli"
        engine = "sim"
        model_path = "GLM-5-NVFP4"
        moe_runner_backend = "flashinfer_cutlass"
        port = {port}
        startup_timeout_s = 20
        [sim]
        load_seconds = 0.1
        graph_seconds = 0.05
        warmup_seconds = 0.05
        fallback_backend = "flashinfer_cutedsl"
    """))
    env = {**os.environ, "MOE_TUI_HOME": str(home)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "moe_tui", "server", *args], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=60)

    markers = set()
    try:
        started = cli("start", "sim-cli", "--profiles", str(profiles), "--keep")
        assert started.returncode == 0, started.stderr
        assert "flashinfer_cutedsl" in started.stdout and "MISMATCH" in started.stdout
        with Store.open_default() as s:
            markers = {r["env"][SERVER_ID_ENV] for r in s.server_starts("sim-cli")}
        status = cli("status")
        assert status.returncode == 0 and "sim-cli" in status.stdout and "ready" in status.stdout
        logs = cli("logs", "sim-cli", "-n", "5")
        assert logs.returncode == 0 and "fired up" in logs.stdout
        stopped = cli("stop", "sim-cli")
        assert stopped.returncode == 0, stopped.stderr
        assert not marked_processes(markers)
        assert "stopped" in cli("status").stdout
        again = cli("stop", "sim-cli")
        assert again.returncode == 0  # idempotent
    finally:
        for proc in marked_processes(markers):
            proc.kill()


ESCAPER = textwrap.dedent("""
    # A leader that starts a grandchild in a session of its own, then dies: the grandchild is
    # reparented and outside the leader's process group, like SGLang's schedulers can be.
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(float(sys.argv[1]))
""")


@pytest.mark.integration
@pytest.mark.parametrize("leader_lives_s", [0.0, 60.0])
def test_stop_finds_escaped_descendants_by_marker(tmp_path, leader_lives_s):
    script = tmp_path / "escaper.py"
    script.write_text(ESCAPER)
    marker = f"test-escaper-{os.getpid()}-{leader_lives_s}"
    leader = subprocess.Popen([sys.executable, str(script), str(leader_lives_s)], stdout=subprocess.PIPE,
                              text=True, start_new_session=True, env={**os.environ, SERVER_ID_ENV: marker})
    try:
        grandchild = int(leader.stdout.readline())
        if not leader_lives_s:
            leader.wait(10)
        assert os.getpgid(grandchild) != leader.pid and psutil.pid_exists(grandchild)
        report = servers.terminate_server(leader.pid, marker, grace_s=2.0, popen=leader)
        assert grandchild in report.signalled and report.clean, report.describe()
        assert not marked_processes({marker})
        assert servers.terminate_server(leader.pid, marker, grace_s=2.0, popen=leader).signalled == ()
    finally:
        for proc in marked_processes({marker}):
            proc.kill()
        if leader.poll() is None:
            leader.kill()
            leader.wait()


@pytest.mark.integration
def test_stop_reports_gpu_still_listing_server_pids():
    marker = f"test-gpu-{os.getpid()}"
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True, env={**os.environ, SERVER_ID_ENV: marker})
    try:
        view = GpuView(count=2, processes={1: ((proc.pid, "sleep"), (999999, "other"))})
        report = servers.terminate_server(proc.pid, marker, grace_s=2.0, popen=proc, gpus=(0, 1),
                                          gpu_probe=lambda: view)
        assert report.gpu_checked and report.gpu_holders == (proc.pid,) and not report.clean
        assert "NVML still lists pids" in report.describe() and report.exit_signal == signal.SIGTERM
        assert not marked_processes({marker})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- pure parts ----------------------------------------------------------------------------------
def test_parse_prometheus_text_labels_comments_and_odd_lines():
    text = textwrap.dedent("""\
        # HELP sglang:num_running_reqs The number of running requests.
        # TYPE sglang:num_running_reqs gauge
        sglang:num_running_reqs{model_name="m",tp_rank="0"} 3
        sglang:num_running_reqs{model_name="m",tp_rank="1"} 4
        sglang:num_queue_reqs 7.0 1700000000000
        sglang:token_usage{model_name="a \\"quoted\\" name"} 0.25
        sglang:token_usage{model_name="b"} 0.75
        sglang:gen_throughput{model_name="m"} 1234.5
        sglang:cache_hit_rate{model_name="m"} NaN
        this line is garbage
        sglang:time_to_first_token_seconds_bucket{le="+Inf"} +Inf
    """)
    samples = parse_prometheus_text(text)
    names = [s.name for s in samples]
    assert names.count("sglang:num_running_reqs") == 2 and "this" not in names
    quoted = [s for s in samples if s.name == "sglang:token_usage"][0]
    assert quoted.labels["model_name"] == 'a "quoted" name'
    bucket = [s for s in samples if s.name.endswith("_bucket")][0]
    assert bucket.labels["le"] == "+Inf" and bucket.value == float("inf")
    event = metrics_event("p", samples, healthy=True)
    assert event.running_requests == 7 and event.queued_requests == 7.0
    assert event.token_usage == pytest.approx(0.5) and event.gen_throughput == 1234.5


@pytest.mark.parametrize("payload, words", [
    ("<html>Bad Gateway</html>", "not JSON"),
    ("[1, 2]", "JSON list"),
    ('{"version": "0.5.23"}', "no moe_runner_backend"),
    ('{"moe_runner_backend": null}', "no moe_runner_backend"),
])
def test_parse_server_info_garbage_gives_clear_error(payload, words):
    with pytest.raises(ServerInfoError, match=words):
        parse_server_info(payload)


def test_parse_server_info_reads_flat_and_nested():
    flat = parse_server_info('{"moe_runner_backend": "flashinfer_cutlass", "version": "0.5.23", "tp_size": 8}')
    assert (flat.resolved_backend, flat.version, flat.args["tp_size"]) == ("flashinfer_cutlass", "0.5.23", 8)
    nested = parse_server_info({"server_args": {"moe_runner_backend": "triton"}, "version": "x"})
    assert nested.resolved_backend == "triton"


def _sglang_profile(gpus) -> ServerProfile:
    return ServerProfile(name="real", engine="sglang", model_path="/m", moe_runner_backend="flashinfer_cutlass",
                         gpus=tuple(gpus), tp_size=len(gpus))


def test_gpu_index_beyond_machine_is_named():
    with pytest.raises(GpuConflictError, match=r"GPU index 8, 9.*reports 8 GPU"):
        check_gpus(_sglang_profile(range(2, 10)), [], GpuView(count=8), force=False)


def test_foreign_gpu_process_refused_unless_forced():
    view = GpuView(count=8, processes={3: ((4242, "python3"),), 5: ()})
    with pytest.raises(ForeignGpuProcessError, match=r"GPU 3: pid 4242 \(python3\)"):
        check_gpus(_sglang_profile(range(8)), [], view, force=False)
    warnings = check_gpus(_sglang_profile(range(8)), [], view, force=True)
    assert len(warnings) == 1 and "4242" in warnings[0] and "forced" in warnings[0]
    assert check_gpus(_sglang_profile([0, 1]), [], view, force=False) == []
    assert check_gpus(_sglang_profile(range(8)), [], None, force=False) == []  # no NVML: nothing to check


@pytest.mark.integration
def test_servers_module_does_not_import_textual():
    code = "import sys, moe_tui.servers, moe_tui.commands.server; assert 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


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
