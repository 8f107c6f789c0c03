"""Owner-only everything (issue 13, "permissions" and "socket dir" rows), with real processes.

- Data dir 0700; store, WAL, SHM, runner log, server logs and exports 0600, under the usual 022
  umask; a data dir and store left world-readable by an older version are tightened.
- The short socket folder (used when the data dir path is too long for a socket address) made
  first by another user is refused by the runner and by `run --status`, naming it.
- The client checks the uid of what answers on the socket (SO_PEERCRED): a fake runner of
  another user is refused before its answer is believed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from runner_support import speed_factor, wait_for, wait_gone

pytestmark = pytest.mark.integration  # starts real processes

NOBODY = 65534


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_dir_store_logs_exports_owner_only(env):
    """Data dir 0700; store, WAL, SHM, logs and exports 0600 (umask 022); loose ones left by an older version are tightened."""
    env.data_dir.mkdir(parents=True, mode=0o755)
    os.chmod(env.data_dir, 0o755)
    name = env.profile("sim-a", "flashinfer_cutlass")
    other = env.profile("sim-b", "flashinfer_cutedsl")
    add = subprocess.run(["sh", "-c", 'umask 022; exec "$@"', "sh", *env.argv(
        "queue", "add", "--no-control", "--profiles", f"{name},{other}", "--concurrency", "1", "--num-prompts", "4", "--input-len", "16",
        "--output-len", "8", "--no-warmup-pass", "--profiles-dir", str(env.profiles))],
        env=env.env, capture_output=True, text=True)
    assert add.returncode == 0, add.stdout + add.stderr
    os.chmod(env.db, 0o644)  # what an older version left
    runner = subprocess.Popen(["sh", "-c", 'umask 022; exec "$@"', "sh", *env.argv(
        "run", "--stay", "--profiles-dir", str(env.profiles))], env=env.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)  # a pipe nobody reads would block it
    env.procs.append(runner)

    def all_done() -> bool:
        states = env.query("SELECT state FROM queue_items")
        return bool(states) and all(s == ("done",) for s in states)

    wait_for(all_done, 90, "the runs")
    exported = env.run("export", name, other)
    assert exported.returncode == 0, exported.stdout
    assert any((env.data_dir / "exports").glob("*.md")), exported.stdout
    files = [env.db, *(p for p in env.data_dir.glob("moe-tui.sqlite3-*"))]
    files += [p for p in env.data_dir.rglob("*") if p.is_file() and p.suffix in (".log", ".md", ".csv", ".json")]
    assert any(p.suffix == ".log" for p in files), files
    assert _mode(env.data_dir) == 0o700, oct(_mode(env.data_dir))
    loose = {str(p): oct(_mode(p)) for p in files if _mode(p) & 0o077}
    assert not loose, loose
    dirs = {str(p): oct(_mode(p)) for p in env.data_dir.rglob("*") if p.is_dir() and _mode(p) & 0o077}
    assert not dirs, dirs
    assert env.run("run", "--stop").returncode == 0
    runner.wait(60 * speed_factor())
    wait_gone(env)


def _long_home(env, tmp_path):
    """A home whose data dir path is too long for a socket address, and a private TMPDIR."""
    home = tmp_path / ("h" * 120)
    env.home = home
    env.env["MOE_TUI_HOME"] = str(home)
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    env.env["TMPDIR"] = str(tmpdir)
    return tmpdir / f"moe-tui-{os.getuid()}"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder owned by another user")
def test_socket_dir_made_first_by_another_user_is_refused(env, tmp_path):
    """Socket folder made first by another user (long data-dir path): the runner and `run --status` refuse it, naming it."""
    short = _long_home(env, tmp_path)
    short.mkdir(mode=0o777)
    os.chown(short, NOBODY, NOBODY)
    env.profile("sim-a", "flashinfer_cutlass")
    out = env.run("run", "--stay", "--profiles-dir", str(env.profiles), timeout=60)
    assert out.returncode == 1, out.stdout
    assert f"socket folder {short} belongs to uid {NOBODY}" in out.stdout and "Traceback" not in out.stdout
    status = env.run("run", "--status")
    assert status.returncode == 1 and f"socket folder {short} belongs to uid {NOBODY}" in status.stdout
    assert not env.emulators()
    # Made by us, it is 0700 and used.
    short.rmdir()
    runner = env.popen("run", "--stay", "--profiles-dir", str(env.profiles))
    wait_for(lambda: any(short.glob("*.sock")) if short.exists() else False, 60, "the socket")
    assert _mode(short) == 0o700 and short.stat().st_uid == os.getuid()
    assert env.run("run", "--status").returncode == 0
    assert env.run("run", "--stop").returncode == 0
    runner.wait(60)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to serve a socket as another user")
def test_client_refuses_a_runner_of_another_user(env, tmp_path):
    """A fake runner served by another user (SO_PEERCRED): `run --status` refuses it and shows nothing of its answer."""
    import shutil
    import tempfile

    fake_dir = Path(tempfile.mkdtemp(prefix="moe-tui-fake-", dir="/tmp"))  # reachable by nobody
    os.chmod(fake_dir, 0o777)
    path = fake_dir / "runner.sock"
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the impostor: uid nobody, answers every request with a fake snapshot
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            srv = socket.socket(socket.AF_UNIX)
            srv.bind(str(path))
            os.chmod(path, 0o777)
            srv.listen(4)
            os.write(ready_w, b"1")
            srv.settimeout(60)
            while True:
                conn, _ = srv.accept()
                conn.recv(65536)
                conn.sendall(json.dumps({"id": 1, "ok": True, "result": {"activity": "FAKE-SNAPSHOT"}}).encode() + b"\n")
                conn.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"1", "the impostor did not start"
        env.data_dir.mkdir(parents=True)
        info = env.data_dir / "runner.json"
        info.write_text(json.dumps({"pid": pid, "socket": str(path)}))
        info.chmod(0o600)  # as the runner writes it: a looser one is not even read (test_trust.py)
        status = env.run("run", "--status")
        assert status.returncode == 1, status.stdout
        assert "FAKE-SNAPSHOT" not in status.stdout and "Traceback" not in status.stdout
        assert f"what answers on {path} runs as uid {NOBODY}, not as you" in status.stdout
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(ready_r)
        shutil.rmtree(fake_dir, ignore_errors=True)
