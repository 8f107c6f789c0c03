"""A profile's API key closes its server to others (issue 22, item 2), with real processes.

- The emulator started with the profile's `--api-key` answers 401 to a request without the key
  or with a wrong one (as SGLang does), while /health stays open.
- A campaign on that profile runs to the end: the server manager, the correctness gate and the
  benchmark child all send `Authorization: Bearer <key>`.
- The key is never stored: not in the profile snapshot, the server start's argv, the run's
  provenance (the server's resolved args echo it), nor anywhere else in the store.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import urllib.error
import urllib.request

import pytest
from runner_support import wait_for, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = "sk-test-7f3a9c1e5b"


def _with_key(env, name: str) -> str:
    env.profile(name, "flashinfer_cutlass")
    path = env.profiles / f"{name}.toml"
    text = path.read_text()
    path.write_text(text.replace("[sim]", f'api_key = "{KEY}"\n\n[sim]', 1))
    return name


def _status(url: str, body: dict | None = None, key: str | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0  # not listening yet


def test_api_key_closes_the_server_to_others_and_is_never_stored(env):
    """Profile api_key: the emulator answers 401 without it; a campaign runs (manager, gate, bench child send it); the key is nowhere in the store."""
    from moe_tui.profiles import load_profile
    from moe_tui.servers.server_key import start_key, write_key_config

    name = _with_key(env, "sim-key")
    profile = load_profile(env.profiles / f"{name}.toml")
    assert KEY not in profile.argv() and "--api-key" not in profile.argv()  # never on a command line (ps)
    folder = env.home.parent / "start"
    folder.mkdir(mode=0o700)
    config = write_key_config(folder, start_key(profile))  # what the server manager hands the server
    server = subprocess.Popen([*profile.argv(), "--config", str(config)], env=env.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT, start_new_session=True)
    env.procs.append(server)
    base = profile.base_url
    wait_for(lambda: _status(f"{base}/health") == 200, 60, "the keyed emulator's /health")
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
    assert _status(f"{base}/generate", body) == 401
    assert _status(f"{base}/generate", body, key="wrong") == 401
    assert _status(f"{base}/server_info") == 401
    assert _status(f"{base}/generate", body, key=KEY) == 200
    env.kill(server)
    wait_gone(env)

    add = env.run("queue", "add", "--profiles", name, "--concurrency", "1,2", "--num-prompts", "6", "--input-len",
                  "16", "--output-len", "8", "--no-warmup-pass", "--profiles-dir", str(env.profiles))
    assert add.returncode == 0, add.stdout
    run = env.run("run", "--profiles-dir", str(env.profiles), timeout=180)
    assert run.returncode == 0 and "Traceback" not in run.stdout, run.stdout
    assert env.query("SELECT status FROM runs ORDER BY id") == [("complete",), ("complete",)], run.stdout
    assert KEY not in run.stdout
    conn = sqlite3.connect(env.db)
    dump = "\n".join(conn.iterdump())
    conn.close()
    assert KEY not in dump, "the API key was written into the store"
    (profile_json,) = env.query("SELECT profile_json FROM runs LIMIT 1")[0]
    assert json.loads(profile_json)["api_key"] == "***redacted***"
    wait_gone(env)


def test_the_emulator_applies_api_key_and_admin_api_key_to_routes_as_sglang_does():
    """SGLang 0.5.23 (utils/auth.py): with --admin-api-key the admin routes (profiler, expert recorder, flush_cache) take only the admin key, /generate only the api key; /health, /ready and /metrics stay open."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sim_helpers import sim_server

    admin = "adm-1c9e"
    args = ["--api-key", KEY, "--admin-api-key", admin, "--sim-load-seconds", "0", "--sim-graph-seconds", "0",
            "--sim-warmup-seconds", "0", "--enable-metrics"]
    gen = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
    with sim_server(args) as sim:
        url = sim.base_url
        assert _status(url + "/generate", gen, KEY) == 200
        assert _status(url + "/generate", gen, admin) == 401  # the admin key is not the api key
        assert _status(url + "/flush_cache", {}, admin) == 200
        assert _status(url + "/flush_cache", {}, KEY) == 401  # with an admin key, the api key no longer opens admin routes
        assert _status(url + "/start_expert_distribution_record", {}, KEY) == 401
        assert _status(url + "/start_profile", {}, None) == 401
        assert _status(url + "/health") == 200 and _status(url + "/metrics") == 200
    with sim_server(["--admin-api-key", admin, "--sim-load-seconds", "0", "--sim-graph-seconds", "0",
                     "--sim-warmup-seconds", "0"]) as sim:  # an admin key alone: generate stays open
        assert _status(sim.base_url + "/generate", gen) == 200
        assert _status(sim.base_url + "/flush_cache", {}) == 401


NOBODY = 65534


def _as_nobody(url: str, body: dict | None = None) -> int:
    """The status another local user (uid nobody) gets for `url` (POST with `body`, else GET)."""
    import os

    code = ("import json, sys, urllib.request, urllib.error\n"
            "url, body = sys.argv[1], sys.argv[2]\n"
            "req = urllib.request.Request(url, data=body.encode() if body else None,"
            " headers={'Content-Type': 'application/json'})\n"
            "try:\n    print(urllib.request.urlopen(req, timeout=30).status)\n"
            "except urllib.error.HTTPError as e:\n    print(e.code)\n")
    # the system python: the venv under /root is not readable by another user (stdlib only here)
    out = subprocess.run(["/usr/bin/python3", "-I", "-c", code, url, json.dumps(body) if body is not None else ""],
                         capture_output=True, text=True, timeout=60, cwd="/",
                         preexec_fn=lambda: (os.setgid(NOBODY), os.setuid(NOBODY)))
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root to act as another user (uid nobody)")
async def test_a_server_moe_tui_starts_answers_only_moe_tui_even_without_a_profile_key(tmp_path, monkeypatch):
    """Shipped profiles set no api_key: another local user (uid nobody) got the profiler to write traces into the owner's folders. Now each start has a key (in a 0600 --config file, never on argv): nobody gets 401 on /start_profile, /flush_cache and /get_server_info; moe-tui's own calls pass; the key is stored nowhere."""
    import os
    import socket

    import psutil

    from moe_tui.profiles import ServerProfile
    from moe_tui.servers import ManagedServer, no_gpu_view
    from moe_tui.servers.keys import auth_headers
    from moe_tui.store.db import Store
    from tests.support import loopback

    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    profile = ServerProfile(name="sim-shipped", engine="sim", model_path="GLM-5-NVFP4",
                            moe_runner_backend="flashinfer_cutlass", port=port, startup_timeout_s=60,
                            extra_args=("--enable-metrics",),
                            sim={"load_seconds": 0, "graph_seconds": 0, "warmup_seconds": 0})
    assert not profile.api_key
    store = Store(tmp_path / "store.sqlite3")
    server = ManagedServer(profile, store=store, ready_poll_s=0.1, gpu_probe=no_gpu_view)
    try:
        await server.start()
        await server.wait_ready(timeout=60)
        key = server.server_key
        assert key and auth_headers(server.base_url) == {"Authorization": f"Bearer {key}"}
        argv = psutil.Process(server.pid).cmdline()
        assert key not in " ".join(argv) and "--config" in argv  # ps shows a path, not the key
        config = argv[argv.index("--config") + 1]
        assert os.stat(config).st_mode & 0o777 == 0o600 and os.stat(os.path.dirname(config)).st_mode & 0o777 == 0o700
        base = server.base_url
        traces = tmp_path / "owner-private"
        assert _as_nobody(f"{base}/start_profile", {"output_dir": str(traces), "num_steps": 1}) == 401
        assert _as_nobody(f"{base}/flush_cache", {}) == 401
        assert _as_nobody(f"{base}/get_server_info") == 401
        assert _as_nobody(f"{base}/health") == 200  # probes stay open, as in SGLang
        async with loopback.AsyncClient(base_url=base, trust_env=False, headers=auth_headers(base)) as client:
            assert (await client.post("/flush_cache")).status_code == 200  # moe-tui's own admin call
            info = (await client.get("/get_server_info")).json()
        assert info["api_key"] == key  # SGLang echoes its args, key included: moe-tui must scrub it
        assert not traces.exists()
        await server.stop()
        assert not os.path.exists(config)  # the start's folder goes at stop
        store.close()
        conn = sqlite3.connect(tmp_path / "store.sqlite3")
        dump = "\n".join(conn.iterdump())
        conn.close()
        assert "sim-shipped" in dump and key not in dump  # the start was recorded, its key was not
        assert all(key not in line for line in server.log_lines)
        assert any("***redacted***" in line for line in server.log_lines)  # the echo, scrubbed
    finally:
        server.stop_sync("test teardown")
        store.close()
