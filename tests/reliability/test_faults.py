"""Faults survived, with real processes on loopback (the emulator, `moe-tui` subprocesses, tmux).

Each test injects one fault the way it happens on the GPU box and asserts what the user must be
able to rely on afterwards: the run is never shown as clean, the queue goes on, the store keeps
what it had, and no server process is left anywhere in the process table. (Server crash mid-run
and SIGKILL/SIGTERM of the runner are covered by `test_server_crash.py` / `test_runner_kill.py`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time

import psutil
import pytest
from runner_support import tmpfs, wait_for, wait_gone, write_profile

from tests.support.tmux import TMUX  # a tmux server of the tests' own (-L), never the user's

SMALL = {"num_prompts": 4, "input_len": 32, "output_len": 8}
SMALL_FLAGS = ["--num-prompts", "4", "--input-len", "32", "--output-len", "8", "--no-warmup-pass"]


def _drain(env, campaigns: list[tuple[list[str], dict]], *, request_timeout: float | None = None) -> dict:
    """Run the controller in-process until the queue is empty; the benchmark is the real
    out-of-process client (with a short per-request timeout where given)."""
    from moe_tui.run.controller import Controller
    from moe_tui.store.db import Store

    async def scenario() -> dict:
        env.data_dir.mkdir(parents=True, exist_ok=True)
        with Store(env.db) as store:
            c = Controller(store, env.profiles, data_dir=env.data_dir, telemetry=False,
                           request_timeout_s=request_timeout)
            events: list = []
            c.subscribe(events.append)
            for profiles, spec in campaigns:
                c.add_campaign(profiles, [1], spec=spec, warmup_pass=False)
            await c.start(until_empty=True)
            await asyncio.wait_for(c.wait_idle(), 120)
            items = c.queue_items()
            await c.shutdown("test over")
            return {"items": items, "events": events}

    return asyncio.run(scenario())


@pytest.mark.integration
def test_server_hang_mid_stream(env):
    """Server hangs mid-stream: the per-request timeout fires, the run ends failed/incomplete, the queue goes on."""
    hang = env.profile("sim-hang", "flashinfer_cutlass", hang_after_tokens=3)
    ok = env.profile("sim-ok", "flashinfer_cutlass")
    started = time.monotonic()
    out = _drain(env, [([hang], SMALL), ([ok], SMALL)], request_timeout=2.0)
    assert time.monotonic() - started < 90
    states = [(i["profile_name"], i["state"]) for i in out["items"]]
    assert states == [("sim-hang", "failed"), ("sim-ok", "done")], states
    (status, error, flags), = env.query("SELECT status, error, flags_json FROM runs WHERE profile_name = 'sim-hang'")
    assert status in ("failed", "incomplete") and "incomplete" in json.loads(flags)
    assert "timeout" in (error + json.dumps(env.query(
        "SELECT r.error FROM requests r JOIN runs u ON u.id = r.run_id WHERE u.profile_name = 'sim-hang'"))).lower()
    assert env.query("SELECT status FROM runs WHERE profile_name = 'sim-ok'") == [("complete",)]
    wait_gone(env)


@pytest.mark.integration
def test_startup_hang(env):
    """Startup hang: the startup timeout fires, the whole process group is gone, the item fails and the queue goes on."""
    env.profile("sim-stuck", "flashinfer_cutlass", startup_hang=True)
    path = env.profiles / "sim-stuck.toml"
    path.write_text(path.read_text().replace("startup_timeout_s = 30", "startup_timeout_s = 2"))
    ok = env.profile("sim-ok", "flashinfer_cutlass")
    out = _drain(env, [(["sim-stuck"], SMALL), ([ok], SMALL)])
    states = [(i["profile_name"], i["state"]) for i in out["items"]]
    assert states == [("sim-stuck", "failed"), ("sim-ok", "done")], states
    assert "startup_timeout_s=2" in out["items"][0]["error"]
    (state, pid, reason), = env.query(
        "SELECT state, pid, reason FROM server_starts WHERE profile_name = 'sim-stuck'")
    assert state == "failed" and "not ready within" in reason
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    wait_gone(env)


@pytest.mark.integration
def test_silent_backend_fallback(env):
    """Silent fallback: runs flagged backend_mismatch in the store and in `moe-tui compare` output."""
    fb = env.profile("sim-cutedsl", "flashinfer_cutedsl", fallback_backend="flashinfer_cutlass")
    ok = env.profile("sim-cutlass", "flashinfer_cutlass")
    added = env.run("queue", "add", "--no-control", "--profiles", f"{ok},{fb}", "--concurrency", "1",
                    "--profiles-dir", str(env.profiles), *SMALL_FLAGS)
    assert added.returncode == 0, added.stdout
    ran = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert ran.returncode == 0, ran.stdout
    assert "BACKEND MISMATCH" in ran.stdout
    rows = dict(env.query("SELECT profile_name, flags_json FROM runs"))
    assert "backend_mismatch" in json.loads(rows["sim-cutedsl"])
    assert "backend_mismatch" not in json.loads(rows["sim-cutlass"])
    (mismatch, resolved), = env.query(
        "SELECT backend_mismatch, resolved_backend FROM server_starts WHERE profile_name = 'sim-cutedsl'")
    assert mismatch == 1 and resolved == "flashinfer_cutlass"
    compare = env.run("compare", ok, fb)
    assert compare.returncode == 0, compare.stdout
    assert "backend_mismatch" in compare.stdout or "backend mismatch" in compare.stdout.lower(), compare.stdout
    wait_gone(env)


@pytest.mark.integration
def test_http_500_bursts(env):
    """HTTP 500 bursts: every error counted per request, the run marked incomplete with request_errors, the queue goes on."""
    flaky = env.profile("sim-flaky", "flashinfer_cutlass", error_rate=0.4, seed=7)
    ok = env.profile("sim-ok", "flashinfer_cutlass")
    # No client warmup request: a 500 there fails the whole run before the timed phase (as
    # bench_serving does); here the errors must land inside the timed run.
    out = _drain(env, [([flaky], {**SMALL, "num_prompts": 20, "warmup_requests": 0}), ([ok], SMALL)])
    states = [(i["profile_name"], i["state"]) for i in out["items"]]
    assert states == [("sim-flaky", "failed"), ("sim-ok", "done")], states
    (run_id, status, flags), = env.query("SELECT id, status, flags_json FROM runs WHERE profile_name = 'sim-flaky'")
    assert status == "incomplete"
    assert {"request_errors", "incomplete"} <= set(json.loads(flags))
    bad = env.query("SELECT COUNT(*), MIN(error) FROM requests WHERE run_id = ? AND ok = 0", (run_id,))[0]
    good = env.query("SELECT COUNT(*) FROM requests WHERE run_id = ? AND ok = 1", (run_id,))[0][0]
    assert bad[0] >= 1 and good >= 1 and bad[0] + good == 20
    assert "500" in bad[1], bad
    wait_gone(env)


def _tmux(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, timeout=20)


def _tui_pid(env) -> int | None:
    for proc in psutil.process_iter(["cmdline", "environ"]):
        cmd = proc.info.get("cmdline") or []
        if "moe_tui" in cmd and "tui" in cmd:
            with contextlib.suppress(psutil.Error):
                if (proc.info.get("environ") or {}).get("MOE_TUI_HOME") == str(env.home):
                    return proc.pid
    return None


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL], ids=["SIGHUP", "SIGKILL"])
def test_tui_killed_mid_run_campaign_finishes(env, sig):
    """SIGHUP / SIGKILL of the TUI (attached under tmux) mid-run: the detached runner finishes the campaign."""
    import sys

    a = env.profile("sim-a", "flashinfer_cutlass")
    added = env.run("queue", "add", "--profiles", a, "--concurrency", "1,2", "--repeats", "2",
                    "--profiles-dir", str(env.profiles), "--num-prompts", "24", "--input-len", "32",
                    "--output-len", "16", "--no-warmup-pass")
    assert added.returncode == 0, added.stdout
    detach = env.run("run", "--detach", "--until-empty", "--profiles-dir", str(env.profiles))
    assert detach.returncode == 0, detach.stdout
    session = f"moe-rel-{os.getpid()}-{sig}"
    tui = (f"MOE_TUI_HOME={env.home} {sys.executable} -m moe_tui tui --attach --no-gpu-sampling "
           f"--profiles-dir {env.profiles}")
    try:
        wait_for(lambda: env.query("SELECT COUNT(*) FROM runs WHERE status = 'running'")[0][0] == 1
                 if env.db.exists() else False, 60, "a run in progress")
        started = _tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "40", tui)
        assert started.returncode == 0, started.stderr
        pid = wait_for(lambda: _tui_pid(env), 20, "the TUI process")
        # The TUI is up and attached when it draws the queue it read from the runner.
        wait_for(lambda: "sim-a" in _tmux("capture-pane", "-p", "-t", session).stdout, 30, "the TUI drawing")
        pending_then = env.query("SELECT COUNT(*) FROM queue_items WHERE state = 'pending'")[0][0]
        assert pending_then >= 1  # the TUI dies with work still ahead
        os.kill(pid, sig)
        wait_for(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                 20, "the TUI to die")
        # The runner goes on without it and drains the queue, then exits (--until-empty).
        wait_for(lambda: [r[0] for r in env.query("SELECT state FROM queue_items ORDER BY id")] == ["done"] * 4,
                 150, "the campaign to finish")
        wait_for(lambda: not (env.data_dir / "runner.lock").exists() or
                 __import__("moe_tui.run.rendezvous", fromlist=["x"]).runner_is_running(env.data_dir) is None, 30, "the runner to exit")
        assert env.query("SELECT COUNT(*) FROM runs WHERE status = 'complete'") == [(4,)]
        wait_gone(env)
    finally:
        _tmux("kill-session", "-t", session)


@pytest.mark.integration
def test_two_runners_one_data_dir(env):
    """Two runners on one data dir: the second (foreground or --detach) refused with a message naming the first's pid."""
    env.profile("sim-a", "flashinfer_cutlass")
    first = env.popen("run", "--stay", "--profiles-dir", str(env.profiles))
    from moe_tui.run.rendezvous import runner_is_running

    wait_for(lambda: runner_is_running(env.data_dir) if (env.data_dir / "runner.lock").exists() else None,
             30, "the first runner to take the lock")
    for args in (("run", "--profiles-dir", str(env.profiles)),
                 ("run", "--detach", "--profiles-dir", str(env.profiles))):
        second = env.run(*args, timeout=60)
        assert second.returncode == 1, second.stdout
        assert f"pid {first.pid}" in second.stdout and "already owns" in second.stdout, second.stdout
        assert "Traceback" not in second.stdout
    assert first.poll() is None  # the first runner is untouched
    stop = env.run("run", "--stop")
    assert stop.returncode == 0, stop.stdout
    first.wait(30)


def test_store_write_fails_disk_full(env, seeded_store, store_digest):
    """Store disk write failing (SQLite reports the disk full): StoreError names the file, previous data intact."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    before = store_digest(seeded_store)
    spec = BenchmarkSpec.from_dict(SMALL)
    with Store(seeded_store) as store:
        run_id = store.create_run(profile_name="seed-a", spec_json=spec.canonical_json(),
                                  fingerprint=spec.fingerprint, client="moe-tui")
        mid = store_digest(seeded_store)
        pages = store.query("PRAGMA page_count")[0][0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: disk full
        big = [{"ok": True, "itl": [0.01] * 200, "latency": 1.0, "error": "x" * 200} for _ in range(2000)]
        with pytest.raises(StoreError, match=r"write to store file .*moe-tui.sqlite3 failed, nothing changed: "
                                             r"database or disk is full"):
            store.finish_run(run_id, status="complete", requests=big, summary={"output_throughput": 1.0})
        assert store_digest(seeded_store) == mid  # the failed transaction left nothing behind
        assert store.run(run_id).status == "running"
        store.finish_run(run_id, status="failed", error="disk full")  # small writes still go through
    after = store_digest(seeded_store)
    # Only the run itself changed: its row and its summary row (kept in step with it).
    run_tables = ("runs", "run_summaries")
    assert ({k: v for k, v in after.items() if k not in run_tables}
            == {k: v for k, v in before.items() if k not in run_tables})


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount a tmpfs")
def test_store_on_full_filesystem_cli(env, tmp_path, store_digest):
    """Store on a really full filesystem (tiny tmpfs): `moe-tui queue add` fails with the file named, exit 1, data intact."""
    with tmpfs(tmp_path / "full", "1m") as mnt:
        env.home = mnt / "h"
        env.env["MOE_TUI_HOME"] = str(env.home)
        write_profile(env.profiles, "ok", "flashinfer_cutlass", 30010)
        first = env.run("queue", "add", "--profiles", "ok", "--concurrency", "1", "--profiles-dir",
                        str(env.profiles), *SMALL_FLAGS)
        assert first.returncode == 0, first.stdout
        before = store_digest(env.db)
        # Eat every free block. Unbuffered: a last write that fits only in part must not leave the rest in
        # a buffer for close() to fail on (whether it does depends on how big the store has grown).
        with open(mnt / "filler", "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
        many = ",".join(str(c) for c in range(1, 400))
        full = env.run("queue", "add", "--profiles", "ok", "--concurrency", many, "--repeats", "20", "--yes",
                       "--profiles-dir", str(env.profiles), *SMALL_FLAGS)
        assert full.returncode == 1, full.stdout
        assert "Traceback" not in full.stdout
        assert str(env.db) in full.stdout and ("full" in full.stdout or "space" in full.stdout), full.stdout
        (mnt / "filler").unlink()
        assert store_digest(env.db) == before
        listed = env.run("queue", "list")
        assert listed.returncode == 0 and "pending 1" in listed.stdout, listed.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_100_start_stop_cycles_leave_no_orphans(env):
    """100 start/stop cycles of the emulator through the lifecycle (1 in 4 to ready, the rest stopped while starting): every stop clean, zero orphans."""
    from moe_tui import servers
    from moe_tui.profiles import load_profile

    names = [env.profile(f"sim-cycle{i}", "flashinfer_cutlass", load_seconds=0, graph_seconds=0,
                         warmup_seconds=0) for i in range(4)]
    profiles = [load_profile(env.profiles / f"{n}.toml") for n in names]
    markers: list[str] = []

    async def cycle(profile, n: int) -> None:
        server = servers.ManagedServer(profile, ready_poll_s=0.05, grace_s=2.0, gpu_probe=None)
        await server.start()
        if n % 4:  # three rounds in four: stopped while still starting (the user gives up on a
            # load), at staggered moments from "just forked" to "importing" to "loading"
            await asyncio.sleep(0.1 * (n % 7))
        else:
            await server.wait_ready(30)
        markers.append(server.server_id)
        report = await server.stop("cycle")
        assert report is not None and report.clean, report.describe() if report else None

    async def cycles() -> None:
        for n in range(25):  # four servers side by side: 100 start/stop cycles
            await asyncio.gather(*(cycle(p, n) for p in profiles))

    asyncio.run(cycles())
    assert len(set(markers)) == 100
    wait_gone(env)
    leftovers = []
    for proc in psutil.process_iter(["pid", "environ", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            marker = (proc.info.get("environ") or {}).get(servers.SERVER_ID_ENV)
            if marker in markers and proc.status() != psutil.STATUS_ZOMBIE:
                leftovers.append((proc.pid, proc.info.get("cmdline")))
    assert not leftovers, leftovers
    assert not servers.managed_servers()
