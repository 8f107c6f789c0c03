"""The controller end to end, headless: `moe-tui queue add` + `moe-tui run` as real subprocesses
against real emulator servers on loopback. A small campaign drains with every item done and a
complete run stored per item; a silently falling-back server flags its runs backend_mismatch; a
server that cannot start fails its item with the log tail and skips its profile's other items
while the queue goes on; no emulator outlives the runner."""

from __future__ import annotations

import json

import pytest
from runner_support import wait_gone

import moe_tui
from moe_tui.bench.engine import native_spec
from moe_tui.spec import BenchmarkSpec

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = ["--num-prompts", "4", "--input-len", "32", "--output-len", "8"]


def test_small_campaign_runs_headless_to_the_end(env):
    a = env.profile("sim-a", "flashinfer_cutlass")
    b = env.profile("sim-b", "flashinfer_cutedsl")
    # --no-control: this test is the runner's flow (the control's planned starts: test_seed_campaign).
    added = env.run("queue", "add", "--profiles", f"{a},{b}", "--concurrency", "1,4", "--repeats", "2",
                    "--profiles-dir", str(env.profiles), "--no-control", *SMALL)
    assert added.returncode == 0, added.stdout
    # ABBA is the default order (repeats independent of one start, counterbalanced): 4 starts instead of 2.
    assert "abba 4 (chosen), interleaved 4, grouped 2, alternating 8" in added.stdout
    assert "added campaign 1: 8 item(s)" in added.stdout

    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=150)
    assert done.returncode == 0, done.stdout
    out = done.stdout
    assert out.count(" complete: ") == 8, out
    assert "tok/s; flags: simulated" in out
    assert "server sim-a: ready" in out and "server sim-b: ready" in out

    items = env.query("SELECT id, state, run_id, fingerprint, profile_name, attempts, spec_json FROM queue_items "
                      "ORDER BY id")
    assert [i[1] for i in items] == ["done"] * 8
    assert all(i[5] == 1 for i in items)
    runs = {r[0]: r for r in env.query(
        "SELECT id, status, queue_item_id, fingerprint, profile_name, provenance_json, flags_json FROM runs")}
    assert len(runs) == 8
    selfchecks = dict(env.query("SELECT id, selfcheck_json FROM runs"))
    for item_id, _state, run_id, fingerprint, profile, _, spec_json in items:
        run = runs[run_id]
        assert run[1] == "complete" and run[2] == item_id
        # Stored under the spec as run: the asked spec with this moe-tui's version filled in.
        assert run[3] == native_spec(BenchmarkSpec.from_json(spec_json)).fingerprint and run[4] == profile
        prov = json.loads(run[5])
        assert prov["simulated"] is True and prov["fingerprint"] == run[3]
        assert prov["queue_item"]["requested_fingerprint"] == fingerprint
        assert prov["spec"]["client_version"] == moe_tui.__version__
        assert prov["server"]["resolved_backend"] == prov["server"]["requested_backend"]
        assert prov["server"]["resolved_args"]["moe_runner_backend"] == prov["server"]["requested_backend"]
        assert prov["warmup_pass"]["status"] == "complete"
        assert prov["warmup_pass"]["fingerprint"] != run[3]  # other prompts than the timed run
        assert prov["host"]["python_version"] and prov["client"]["name"] == "moe-tui"
        assert prov["started_at"] < prov["finished_at"]
        # bench_serving's 1 s pause after the flush, in the emulator's time (50x faster: 20 ms).
        assert json.loads(selfchecks[run_id])["warmup_pause_s"] == 1.0 / 50
        # One client process per item: the timed run was its second run, after the warmup pass.
        assert json.loads(selfchecks[run_id])["client_process_run"] == 2
        flags = json.loads(run[6])
        # client_bound may appear on a loaded CI box; nothing else may.
        assert "simulated" in flags and set(flags) <= {"simulated", "client_bound"}, flags
    # Same concurrency, same spec as run, across both profiles: comparable by construction.
    by_conc = {}
    for run in runs.values():
        by_conc.setdefault(json.loads(run[5])["spec"]["max_concurrency"], set()).add(run[3])
    assert all(len(fps) == 1 for fps in by_conc.values()) and len(by_conc) == 2
    # ABBA order (the default): A's sweep, B's, B's again on a fresh start, A's: one server start each.
    starts = env.query("SELECT profile_name, state FROM server_starts ORDER BY id")
    assert [s[0] for s in starts] == [a, b, b, a]
    assert all(s[1] == "stopped" for s in starts)
    # Requests were kept per run.
    assert env.query("SELECT COUNT(*) FROM requests")[0][0] == 8 * 4
    wait_gone(env)


def test_silent_fallback_is_flagged_backend_mismatch(env):
    name = env.profile("sim-fallback", "flashinfer_cutedsl", fallback_backend="flashinfer_cutlass")
    assert env.run("queue", "add", "--profiles", name, "--concurrency", "2", "--no-warmup-pass",
                   "--profiles-dir", str(env.profiles), *SMALL).returncode == 0
    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=90)
    assert done.returncode == 0, done.stdout
    assert "BACKEND MISMATCH" in done.stdout
    (status, flags, prov), = env.query("SELECT status, flags_json, provenance_json FROM runs")
    assert status == "complete"
    assert "backend_mismatch" in json.loads(flags)
    assert "no_warmup_pass" in json.loads(flags)
    server = json.loads(prov)["server"]
    assert server["requested_backend"] == "flashinfer_cutedsl"
    assert server["resolved_backend"] == "flashinfer_cutlass" and server["backend_mismatch"] is True
    assert env.query("SELECT state FROM queue_items") == [("done",)]
    wait_gone(env)


def test_failed_server_start_fails_item_skips_profile_and_queue_goes_on(env):
    good = env.profile("sim-good", "flashinfer_cutlass")
    broken = env.profile("sim-broken", "flashinfer_cutedsl")
    # A flag the emulator (like SGLang) rejects: the server exits at once with status 2.
    path = env.profiles / f"{broken}.toml"
    path.write_text(path.read_text().replace('extra_args = ["--enable-metrics"]',
                                             'extra_args = ["--enable-metrics", "--cuda-graph-max-bs", "8"]'))
    assert env.run("queue", "add", "--profiles", f"{broken},{good}", "--concurrency", "1", "--repeats", "2",
                   "--order", "interleaved", "--no-warmup-pass", "--profiles-dir", str(env.profiles),
                   "--no-control", *SMALL).returncode == 0
    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=90)
    assert done.returncode == 0, done.stdout
    rows = env.query("SELECT profile_name, state, error, attempts FROM queue_items ORDER BY id")
    assert [(r[0], r[1]) for r in rows] == [(broken, "failed"), (good, "done"), (broken, "skipped"), (good, "done")]
    assert "failed to start" in rows[0][2] and "ambiguous" in rows[0][2]  # the reason and the log tail
    assert rows[2][2].startswith("not attempted") and rows[2][3] == 0
    assert env.query("SELECT COUNT(*) FROM server_starts WHERE profile_name = ?", (broken,))[0][0] == 1
    # Retry brings the skipped item back; it fails again for the same reason, nothing else changes.
    assert env.run("queue", "retry", str(3)).returncode == 0
    assert env.query("SELECT state FROM queue_items WHERE id = 3") == [("pending",)]
    wait_gone(env)


@pytest.mark.sglang_client
def test_queue_item_measured_by_sglang_bench_serving(env, sglang_client):
    name = env.profile("sim-a", "flashinfer_cutlass")
    assert env.run("queue", "add", "--profiles", name, "--concurrency", "2", "--no-warmup-pass",
                   "--client", "sglang.bench_serving", "--profiles-dir", str(env.profiles), *SMALL).returncode == 0
    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert done.returncode == 0, done.stdout
    (status, client, spec_json, prov, summary), = env.query(
        "SELECT status, client, spec_json, provenance_json, summary_json FROM runs")
    assert status == "complete", done.stdout
    assert client == "sglang.bench_serving"
    assert json.loads(spec_json)["client_version"] == sglang_client.version
    assert json.loads(prov)["client"] == {"name": "sglang.bench_serving", "version": sglang_client.version}
    assert json.loads(summary)["completed"] == 4 and json.loads(summary)["output_throughput"] > 0
    wait_gone(env)
