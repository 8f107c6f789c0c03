"""Per-request limits through the queue, end to end: `moe-tui run --stall-timeout` against a real
emulator that hangs mid-stream frees the queue in seconds (not the 600 s request timeout), the
hung item fails with its run stored as evidence, the next item runs, and the limits asked for and
in force are in the run's provenance and selfcheck. Bad limit values are refused up front."""

from __future__ import annotations

import json
import time

import pytest
from runner_support import wait_gone

pytestmark = pytest.mark.integration  # starts real processes

SMALL = ["--num-prompts", "4", "--input-len", "32", "--output-len", "8", "--warmup-requests", "0",
         "--no-warmup-pass"]


def test_run_stall_timeout_frees_the_queue_from_a_hung_server(env):
    hang = env.profile("sim-hang", "flashinfer_cutlass", hang_after_tokens=3)
    ok = env.profile("sim-ok", "flashinfer_cutlass")
    added = env.run("queue", "add", "--no-control", "--profiles", f"{hang},{ok}", "--concurrency", "1",
                    "--profiles-dir", str(env.profiles), *SMALL)
    assert added.returncode == 0, added.stdout
    started = time.monotonic()
    ran = env.run("run", "--profiles-dir", str(env.profiles), "--stall-timeout", "2", "--request-timeout", "300",
                  timeout=120)
    elapsed = time.monotonic() - started
    assert ran.returncode == 0, ran.stdout
    assert "stall timeout 2 s" in ran.stdout and "request timeout 300 s" in ran.stdout
    assert elapsed < 90, ran.stdout  # without the stall limit: 300 s per hung request

    states = env.query("SELECT profile_name, state, error FROM queue_items ORDER BY id")
    assert [(p, s) for p, s, _ in states] == [("sim-hang", "failed"), ("sim-ok", "done")], states
    (run_id, status, flags, selfcheck, provenance), = env.query(
        "SELECT id, status, flags_json, selfcheck_json, provenance_json FROM runs WHERE profile_name = 'sim-hang'")
    assert status == "failed" and "incomplete" in json.loads(flags)
    errors = [e for (e,) in env.query("SELECT error FROM requests WHERE run_id = ? AND ok = 0", (run_id,))]
    # concurrency 1: the first request is cut after 2 s of silence; the server is then known wedged
    # (moe_tui.run.wedge) and the rest are stopped, not each waited out for another 2 s
    assert len(errors) == 4 and "silent for 2 s (stall timeout) mid-stream after 3 tokens" in errors[0], errors
    assert all("run stopped before this request finished" in e for e in errors[1:]), errors
    check = json.loads(selfcheck)
    assert check["stall_timeout_s"] == 2.0 and check["request_timeout_s"] == 300.0
    client = json.loads(provenance)["client"]
    assert client["stall_timeout_s"] == 2.0 and client["request_timeout_s"] == 300.0
    assert env.query("SELECT status FROM runs WHERE profile_name = 'sim-ok'") == [("complete",)]
    wait_gone(env)


@pytest.mark.parametrize("flag,value", [("--stall-timeout", "0"), ("--request-timeout", "-1"),
                                        ("--stall-timeout", "inf")])
def test_run_refuses_bad_limits(env, flag, value):
    ran = env.run("run", "--profiles-dir", str(env.profiles), flag, value, timeout=60)
    assert ran.returncode == 2
    assert f"{flag} must be > 0 seconds, got" in ran.stdout and "Traceback" not in ran.stdout
