"""Runs disturbed by others are never stored clean (issue 22, item 2), with real processes.

- Someone else's streams on the server's port during a run: the server's own running + queued
  count (its /metrics, scraped by the runner) goes over the client's cap, and the run is flagged
  `foreign_load` with the excess in its self-check. The same campaign undisturbed is not flagged.
- Five short freezes of the server (SIGSTOP/SIGCONT), each under the single-stall floor of 5 s:
  their total is over the limit and the run is flagged `server_stall` (cumulative).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from runner_support import speed_factor, wait_for, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Another user's load: `n` concurrent streaming /generate requests, each read to its end.
INTRUDER = textwrap.dedent('''
    import json, sys, threading, urllib.request
    url, n = sys.argv[1], int(sys.argv[2])
    key = sys.argv[3] if len(sys.argv) > 3 else ""
    auth = {"Authorization": "Bearer " + key} if key else {}
    body = json.dumps({"input_ids": list(range(64)), "stream": True,
                       "sampling_params": {"max_new_tokens": 256, "ignore_eos": True, "temperature": 0}}).encode()
    def one():
        req = urllib.request.Request(url + "/generate", data=body, headers={"Content-Type": "application/json", **auth})
        with urllib.request.urlopen(req, timeout=300) as r:
            while r.read(65536):
                pass
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads: t.start()
    print("sent", flush=True)
    for t in threads: t.join()
''')


def _start_key(env) -> str:
    """The key of the server start (from the `--config` file its argv names; "" if none): the other
    client here is another program of the same user, which can read it; another user cannot
    (tests/reliability/test_admin_key.py)."""
    import yaml

    for proc in env.emulators():
        argv = proc.cmdline()
        if "--config" in argv:
            keys = yaml.safe_load(open(argv[argv.index("--config") + 1]).read()) or {}
            return str(keys.get("api-key") or keys.get("admin-api-key") or "")
    return ""


def _add(env, name: str, prompts: int, conc: int = 2, out_len: int = 32):
    add = env.run("queue", "add", "--profiles", name, "--concurrency", str(conc), "--num-prompts", str(prompts),
                  "--input-len", "32", "--output-len", str(out_len), "--no-warmup-pass",
                  "--profiles-dir", str(env.profiles))
    assert add.returncode == 0, add.stdout


def _timed_phase(env, at_least: int = 1) -> bool:
    from moe_tui.run.client import call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable

    try:
        progress = (call_runner_sync("snapshot", env.data_dir, timeout=5.0) or {}).get("last_progress") or {}
    except (RunnerUnavailable, OSError):
        return False
    return progress.get("phase") == "timed" and progress.get("completed", 0) >= at_least


def _last_run(env) -> tuple[list[str], dict]:
    (flags, selfcheck), = env.query("SELECT flags_json, selfcheck_json FROM runs ORDER BY id DESC LIMIT 1")
    return json.loads(flags), json.loads(selfcheck)


def test_someone_elses_streams_on_the_server_flag_the_run_foreign_load(env):
    """Another client's 40 streams to the server during a run: flagged foreign_load (server count over the client's cap); undisturbed: not flagged."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=2)
    port = env.ports[-1]
    _add(env, name, prompts=32)
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: _timed_phase(env), 60, "the timed phase under way")
    intruder = subprocess.Popen([sys.executable, "-c", INTRUDER, f"http://127.0.0.1:{port}", "40", _start_key(env)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.procs.append(intruder)
    out, _ = runner.communicate(timeout=180 * speed_factor())
    assert runner.returncode == 0 and "Traceback" not in out, out
    flags, selfcheck = _last_run(env)
    load = selfcheck["server_load"]
    assert "foreign_load" in flags, (flags, load)
    assert load["client_cap"] == 2 and load["foreign_requests_max"] > 0 and load["samples"] > 0, load
    assert load["server_max_requests"] == load["client_cap"] + load["foreign_requests_max"]
    from moe_tui.judgement import SUSPECT_FLAGS, flag_words

    assert "foreign_load" in SUSPECT_FLAGS and "someone else" in flag_words("foreign_load")
    intruder.kill()
    intruder.wait(10)

    _add(env, name, prompts=16)
    clean = env.run("run", "--profiles-dir", str(env.profiles), timeout=180)
    assert clean.returncode == 0, clean.stdout
    flags, selfcheck = _last_run(env)
    assert "foreign_load" not in flags and selfcheck["server_load"]["foreign_requests_max"] == 0, selfcheck
    assert selfcheck["server_load"]["samples"] > 0  # it was watched, and saw only this client
    wait_gone(env)


def _freeze_the_emulator_in_a_timed_run(env, times: int, freeze_s: float, gap_s: float) -> tuple[int, str, int]:
    """A 48-prompt run of one emulator, SIGSTOPped `times` times for `freeze_s` (`gap_s` apart) once its
    timed phase is under way: (freezes made before the run ended, the runner's output, its exit code)."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=4)
    _add(env, name, prompts=48, out_len=64)
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: _timed_phase(env, 2), 90, "the timed phase under way")
    (emulator,) = env.emulators()
    frozen = 0
    for _ in range(times):
        emulator.send_signal(signal.SIGSTOP)
        time.sleep(freeze_s)
        emulator.send_signal(signal.SIGCONT)
        frozen += 1
        time.sleep(gap_s)
        if not _timed_phase(env):
            break
    out, _ = runner.communicate(timeout=180 * speed_factor())
    return frozen, out, runner.returncode


def test_five_short_freezes_add_up_to_a_server_stall(env):
    """Five 1.5 s freezes of the server, each under the 5 s single-stall floor: the run is flagged server_stall (cumulative)."""
    frozen, out, returncode = _freeze_the_emulator_in_a_timed_run(env, 5, 1.5, 0.5)
    assert frozen == 5, f"the run ended after {frozen} freezes: make it longer"
    assert returncode == 0 and "Traceback" not in out, out
    flags, selfcheck = _last_run(env)
    stall, pauses = selfcheck["server_stall"], selfcheck["pauses"]
    assert "server_stall" in flags, (flags, stall, pauses)
    assert stall["cumulative"] is True and stall["length_s"] < 5.0, stall
    assert pauses["count"] >= 5 and pauses["total_s"] >= 5 * 1.5 - 1.0 and pauses["total_s"] > pauses["total_limit_s"]
    wait_gone(env)
