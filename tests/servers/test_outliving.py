"""Servers beyond their controller: a killed controller leaves none, a kept one survives and is stopped
from its record, the CLI's start/keep/status/logs/stop, escaped descendants found by marker, and a stop
that reports the GPUs still listing a server's processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
from runner_support import scaled

from moe_tui import servers
from moe_tui.profiles import ServerProfile
from moe_tui.servers import (
    SERVER_ID_ENV,
    GpuView,
)
from moe_tui.store.db import Store
from tests.support.servers import REPO, free_port, group_alive, marked_processes, sim_profile

CONTROLLER = textwrap.dedent("""
    import asyncio, json, signal, sys
    from moe_tui import servers
    from moe_tui.profiles import profile_from_dict

    async def main():
        # as started at a terminal, or under nohup, whatever the test session's own disposition is
        signal.signal(signal.SIGHUP, signal.SIG_IGN if sys.argv[3] == "nohup" else signal.SIG_DFL)
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


@contextlib.contextmanager
def controller(tmp_path, profile: ServerProfile, mode: str, hup: str = "terminal"):
    """A controller process with one ready server: (the process, {pid, marker}); killed with its group
    at the end if still running."""
    data = {k: v for k, v in profile.launch_settings().items() if k not in ("env",)}
    data["gpus"], data["extra_args"] = list(profile.gpus), list(profile.extra_args)
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER)
    proc = subprocess.Popen([sys.executable, str(script), json.dumps(data), mode, hup], stdout=subprocess.PIPE,
                            text=True, start_new_session=True, cwd=REPO)
    try:
        line = proc.stdout.readline()
        assert line, "controller did not report a ready server"
        info = json.loads(line)
        assert psutil.pid_exists(info["pid"])
        yield proc, info
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_controller(tmp_path, profile: ServerProfile, mode: str, sig: int) -> dict:
    with controller(tmp_path, profile, mode) as (proc, info):
        proc.send_signal(sig)
        info["rc"] = proc.wait(timeout=20)
        return info


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
def test_a_hang_up_under_nohup_stops_neither_the_controller_nor_its_server(tmp_path, home):
    """An ignored SIGHUP stays ignored: stopping the servers and carrying on would leave the program
    running without them (it did, until the handler respected an inherited SIG_IGN)."""
    marker = "-"
    try:
        with controller(tmp_path, sim_profile(), "stop", hup="nohup") as (proc, info):
            marker = info["marker"]
            proc.send_signal(signal.SIGHUP)
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=scaled(2))  # a handled hang-up stops the server well within this
            assert group_alive(info["pid"]) and marked_processes({marker})
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == -signal.SIGTERM
            assert not marked_processes({marker})
    finally:
        for leftover in marked_processes({marker}):
            leftover.kill()


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
