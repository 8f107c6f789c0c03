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

    name = _with_key(env, "sim-key")
    profile = load_profile(env.profiles / f"{name}.toml")
    assert profile.argv()[-len(profile.argv()):].count("--api-key") == 1
    server = subprocess.Popen(profile.argv(), env=env.env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              start_new_session=True)
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
