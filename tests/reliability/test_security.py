"""Security checks: loopback by default, no shell strings, secrets redacted everywhere they could
land (store, logs, exports, CLI output), and a control socket only its owner can use."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import psutil
import pytest
from runner_support import REPO, wait_for, wait_gone

SECRET = "hf_supersecret"
SMALL_FLAGS = ["--num-prompts", "3", "--input-len", "16", "--output-len", "4", "--no-warmup-pass"]


def _listening_hosts(pids: set[int]) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections(kind="inet")
            if c.pid in pids and c.status == psutil.CONN_LISTEN}


@pytest.mark.integration
def test_servers_bind_loopback_unless_profile_says_otherwise(env):
    """Servers bind 127.0.0.1 by default; a profile binding 0.0.0.0 is warned about in `profiles check` and on start."""
    from moe_tui.profiles import load_profile

    local = env.profile("sim-local", "flashinfer_cutlass")
    path = env.profiles / f"{local}.toml"
    path.write_text(path.read_text().replace('host = "127.0.0.1"\n', ""))  # the default, not spelled out
    assert "host" not in path.read_text()
    open_ = env.profile("sim-open", "flashinfer_cutlass")
    open_path = env.profiles / f"{open_}.toml"
    open_path.write_text(open_path.read_text().replace('host = "127.0.0.1"', 'host = "0.0.0.0"'))
    assert load_profile(path).host == "127.0.0.1"

    check = env.run("profiles", "check", str(env.profiles))
    assert check.returncode == 0, check.stdout
    assert f"warning: {open_path}: key 'host': binds 0.0.0.0, so the server is reachable beyond this machine" in check.stdout
    assert str(path) + ": key 'host'" not in check.stdout

    try:
        for name in (local, open_):
            started = env.run("server", "start", name, "--profiles", str(env.profiles), "--keep", "--quiet",
                              timeout=60)
            assert started.returncode == 0, started.stdout
        out_local = env.run("server", "status", "--json")
        rows = {r["profile"]: r for r in json.loads(out_local.stdout)}
        local_pids = {rows[local]["pid"]} | {p.pid for p in psutil.Process(rows[local]["pid"]).children(True)}
        open_pids = {rows[open_]["pid"]} | {p.pid for p in psutil.Process(rows[open_]["pid"]).children(True)}
        assert _listening_hosts(local_pids) == {"127.0.0.1"}
        assert _listening_hosts(open_pids) == {"0.0.0.0"}
        assert "reachable from other machines" in started.stdout and "0.0.0.0" in started.stdout
    finally:
        stop = env.run("server", "stop", "--all", timeout=60)
        assert stop.returncode == 0, stop.stdout
    wait_gone(env)


SHELL_PATTERNS = re.compile(r"shell\s*=\s*True|os\.system\s*\(|os\.popen\s*\(|commands\.getoutput|"
                            r"create_subprocess_shell")


def test_no_shell_strings_anywhere():
    """No shell strings anywhere in the source (shell=True, os.system, os.popen, create_subprocess_shell)."""
    me = Path(__file__).resolve()
    roots = [REPO / "moe_tui", REPO / "tools", REPO / "benches", REPO / "tests"]
    checked, hits = 0, []
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.exists() else []:
            if path.resolve() == me or ".venv" in path.parts:
                continue
            checked += 1
            for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if SHELL_PATTERNS.search(line):
                    hits.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert checked > 50  # the scan really looked at the code base
    assert not hits, "shell strings found:\n" + "\n".join(hits)


def _all_bytes_under(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_socket()}


@pytest.mark.integration
def test_secret_env_redacted_everywhere(env):
    """Secret-looking env vars (HF_TOKEN) never reach the store file, server logs, runner logs, exports or CLI output."""
    names = []
    for name, backend in (("sim-sec-a", "flashinfer_cutlass"), ("sim-sec-b", "flashinfer_cutedsl")):
        env.profile(name, backend)
        path = env.profiles / f"{name}.toml"
        text = path.read_text().replace("\n[sim]", f'\nenv = {{HF_TOKEN = "{SECRET}", MY_API_KEY = "{SECRET}-2"}}\n[sim]')
        path.write_text(text)
        names.append(name)
    added = env.run("queue", "add", "--profiles", ",".join(names), "--concurrency", "1", "--no-control",
                    "--profiles-dir", str(env.profiles), *SMALL_FLAGS)
    assert added.returncode == 0, added.stdout
    ran = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert ran.returncode == 0, ran.stdout
    assert env.query("SELECT COUNT(*) FROM runs WHERE status = 'complete'") == [(2,)]
    exports = env.home / "exports"
    exported = env.run("export", *names, "--dir", str(exports))
    assert exported.returncode == 0, exported.stdout
    outputs = [added.stdout, ran.stdout, exported.stdout]
    for args in (("compare", *names), ("server", "status", "--json", "--all"),
                 ("profiles", "show", names[0], "--dir", str(env.profiles)), ("queue", "list", "--json")):
        result = env.run(*args)
        assert result.returncode == 0, result.stdout
        outputs.append(result.stdout)
    wait_gone(env)

    files = _all_bytes_under(env.data_dir) | _all_bytes_under(exports)
    kinds = {p.suffix for p in files}
    assert any(p.name.startswith("moe-tui.sqlite3") for p in files)
    assert any(p.suffix == ".log" and p.name.startswith("sim-sec-a") for p in files)  # server log
    assert {".md", ".csv"} <= kinds, kinds
    leaked = [str(p) for p, data in files.items() if SECRET.encode() in data]
    assert not leaked, f"secret found in: {leaked}"
    assert not [o for o in outputs if SECRET in o]
    # The redaction is visible, not silent: the variable is recorded as present.
    snapshot = json.loads(env.query("SELECT profile_json FROM runs LIMIT 1")[0][0])
    assert snapshot["env"] == {"HF_TOKEN": "***redacted***", "MY_API_KEY": "***redacted***"}
    # ...and the server really got the value (redaction is for records, not for the launch).
    from moe_tui.profiles import load_profile

    assert load_profile(env.profiles / "sim-sec-a.toml").launch_env()["HF_TOKEN"] == SECRET


@pytest.mark.integration
def test_control_socket_owner_only(env):
    """Control socket is owner-only: mode 0600, and another user is refused at connect."""
    from moe_tui.run.rendezvous import read_runner_info, socket_path_for

    env.profile("sim-a", "flashinfer_cutlass")
    runner = env.popen("run", "--stay", "--profiles-dir", str(env.profiles))
    sock = socket_path_for(env.data_dir)
    wait_for(lambda: sock.exists(), 30, "the control socket")
    mode = stat.S_IMODE(sock.stat().st_mode)
    assert stat.S_ISSOCK(sock.stat().st_mode) and mode == 0o600, oct(mode)
    assert sock.stat().st_uid == os.getuid()
    parent_mode = stat.S_IMODE(sock.parent.stat().st_mode)
    assert not parent_mode & stat.S_IWOTH, oct(parent_mode)  # nobody else can replace it
    info = read_runner_info(env.data_dir)
    assert info and info.get("pid") == runner.pid

    status = env.run("run", "--status")
    assert status.returncode == 0, status.stdout  # the owner gets in

    if os.geteuid() == 0:
        # Another user (nobody) cannot connect: a forked child drops to uid 65534 and tries.
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                import socket

                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(str(sock))
                    os.write(write_fd, b"connected")
                except PermissionError:
                    os.write(write_fd, b"refused")
                except OSError as exc:
                    os.write(write_fd, f"oserror {exc.errno}".encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        os.waitpid(pid, 0)
        answer = os.read(read_fd, 100).decode()
        os.close(read_fd)
        assert answer == "refused", answer

    stop = env.run("run", "--stop")
    assert stop.returncode == 0, stop.stdout
    runner.wait(30)
    assert not sock.exists()  # removed on a clean exit
