"""A wrong number is never stored as a clean run (issue 36, "evidence checked, not taken").

- A server whose token counts lie (twice the tokens it sent, -5, 3e7): moe-tui's client refuses
  the impossible count mid-stream (the request fails naming the count and the request's
  max_new_tokens), so `moe-tui bench` and the runner never store a clean run from it, and 3e7 is
  never spread into 3e7 inter-token gaps.
- With ignore_eos the client knows each request's count: a server that stops at half and says
  "length" gets the stored run flagged `output_tokens_mismatch` (suspect).
- Records of any client (SGLang's bench_serving carries only the counts) are checked the same way
  before a run is stored (`run.evidence.token_evidence`).
- 25 freezes of 0.8-0.9 s, each under the old 1 s pause floor, add up: the run is flagged
  `server_stall` (cumulative), both from a synthetic timeline and from a real emulator frozen by
  SIGSTOP.
"""

from __future__ import annotations

import json

import pytest
from conftest import write_garbage_server
from runner_support import free_port, wait_gone

SPEC = ["--num-prompts", "4", "--input-len", "16", "--output-len", "8", "--no-warmup-pass"]


@pytest.mark.integration
@pytest.mark.parametrize("mode, said", [("count-x2", "10 completion tokens, over the max_new_tokens of 8"),
                                        ("count-neg", "-5 completion tokens: a count cannot be negative"),
                                        ("count-huge", "30000000 completion tokens, over the max_new_tokens of 8")])
def test_bench_refuses_a_servers_impossible_token_counts(env, garbage_server, tmp_path, mode, said):
    """Counts over max_new_tokens or negative: every request fails naming the count; never a complete run at 2x (or 0) tok/s."""
    base = garbage_server(mode)
    out_file = tmp_path / "out.jsonl"
    result = env.run("bench", "--base-url", base, "--num-prompts", "3", "--random-input-len", "8",
                     "--random-output-len", "8", "--warmup-requests", "0", "--vocab-size", "1000",
                     "--output-file", str(out_file), timeout=60)
    out = result.stdout
    assert "Traceback" not in out, out
    assert result.returncode == 1, out
    assert said in out, out
    (record,) = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert record["status"] == "failed" and record["completed"] == 0, record
    assert record.get("output_throughput", 0) == 0


def _lying_profile(env, tmp_path, mode: str) -> str:
    script = write_garbage_server(tmp_path, mode)
    port = free_port()
    env.ports.append(port)
    name = mode.replace("count-", "liar-")
    (env.profiles / f"{name}.toml").write_text(
        f'name = "{name}"\nengine = "sim"\nmodel_path = "GLM-5-NVFP4"\nmoe_runner_backend = "flashinfer_cutlass"\n'
        f'port = {port}\npython = "{script}"\nstartup_timeout_s = 30\n')
    return name


def _stored_run(env, name: str) -> tuple[str, list[str], dict]:
    add = env.run("queue", "add", "--profiles", name, "--concurrency", "2",
                  "--profiles-dir", str(env.profiles), *SPEC)
    assert add.returncode == 0, add.stdout
    run = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert "Traceback" not in run.stdout, run.stdout
    ((status, flags, selfcheck),) = env.query("SELECT status, flags_json, selfcheck_json FROM runs")
    return status, json.loads(flags), json.loads(selfcheck or "{}")


@pytest.mark.integration
@pytest.mark.slow
def test_runner_never_stores_an_over_count_clean(env, tmp_path):
    """A server counting twice the tokens it sends, run by the runner: the run is stored failed with request_errors, not complete at 2x."""
    status, flags, _ = _stored_run(env, _lying_profile(env, tmp_path, "count-x2"))
    assert status == "failed" and "incomplete" in flags, (status, flags)
    ((error,),) = env.query("SELECT error FROM queue_items")
    assert "server reported 10 completion tokens, over the max_new_tokens of 8" in error, error
    wait_gone(env)


@pytest.mark.integration
@pytest.mark.slow
def test_runner_flags_a_server_that_stops_short_under_ignore_eos(env, tmp_path):
    """ignore_eos, the server stops at half and says "length": stored flagged output_tokens_mismatch, the misses named."""
    status, flags, selfcheck = _stored_run(env, _lying_profile(env, tmp_path, "count-short"))
    assert "output_tokens_mismatch" in flags, (status, flags, selfcheck)
    check = selfcheck["output_tokens"]
    assert check["misses"] == 4 and "4 output tokens with ignore_eos, where exactly 8 were asked for" in check["first"][0]
    from moe_tui.judgement import SUSPECT_FLAGS

    assert "output_tokens_mismatch" in SUSPECT_FLAGS
    wait_gone(env)


def _records(lens, asked=None, ok=True):
    return [{"idx": i, "ok": ok, "output_len": n, **({"requested_output_len": asked} if asked else {})}
            for i, n in enumerate(lens)]


def test_token_evidence_checks_every_clients_records():
    """bench_serving's records (counts only): over max, negative, non-whole and short-under-ignore_eos counts are named; honest ones pass."""
    from moe_tui.run.evidence import token_evidence
    from moe_tui.spec import BenchmarkSpec

    spec = BenchmarkSpec.from_dict({"num_prompts": 3, "input_len": 8, "output_len": 8})
    assert token_evidence(spec, _records([8, 8, 8]), {"total_output_tokens": 24}) is None
    assert token_evidence(spec, _records([8, 8, 16], ok=True) + _records([0], ok=False),
                          {"total_output_tokens": 32})["first"] == ["request 2: 16 output tokens, over the max_new_tokens of 8"]
    assert "cannot be negative" in token_evidence(spec, _records([-5]), {})["first"][0]
    assert "not a whole number" in token_evidence(spec, _records([float("nan")]), {})["first"][0]
    assert "over the max_new_tokens of 8" in token_evidence(spec, _records([3e7]), {})["first"][0]
    short = token_evidence(spec, _records([8, 4]), {"total_output_tokens": 12})
    assert short["misses"] == 1 and "where exactly 8 were asked for" in short["first"][0]
    # a summary out of step with its requests (an edited total)
    assert "the summary says 48" in token_evidence(spec, _records([8, 8, 8]), {"total_output_tokens": 48})["first"][0]
    # without ignore_eos a request may stop early; with range_ratio < 1 our client names each request's own length
    loose = BenchmarkSpec.from_dict({"num_prompts": 2, "input_len": 8, "output_len": 8, "ignore_eos": False})
    assert token_evidence(loose, _records([3, 8]), {"total_output_tokens": 11}) is None
    ranged = BenchmarkSpec.from_dict({"num_prompts": 2, "input_len": 8, "output_len": 8, "range_ratio": 0.5})
    assert token_evidence(ranged, _records([5], asked=5), {"total_output_tokens": 5}) is None
    assert token_evidence(ranged, _records([6], asked=5), {"total_output_tokens": 6}) is not None


class _Outcome:
    """What `find_stalls` reads of a request outcome."""

    def __init__(self, sent_at, chunks, latency):
        self.sent_at, self.chunks, self.latency = sent_at, chunks, latency


def test_25_short_freezes_cost_44_percent_and_flag_the_run():
    """4 streams at 20 ms ITL for 48 s with 25 freezes of 0.8-0.9 s (44% of the time): server_stall, cumulative."""
    from moe_tui.bench.stall import stall_check

    itl, duration = 0.02, 48.0
    freezes = [(1.0 + k * 1.9, 0.8 + 0.1 * (k % 2)) for k in range(25)]  # (start, length)
    ticks, t = [], 0.0
    while t < duration:
        frozen = next((start + length for start, length in freezes if start <= t < start + length), None)
        t = frozen if frozen is not None else t + itl
        ticks.append(t)
    lost = sum(length for _, length in freezes) / duration
    assert 0.43 < lost < 0.47
    outcomes = [_Outcome(0.0, [(tick, 1) for tick in ticks], ticks[-1]) for _ in range(4)]
    check = stall_check(outcomes, itl * 1000, wall_anchor=1000.0, perf_anchor=0.0, duration_s=duration)
    stall = check["server_stall"]
    assert stall is not None and stall["cumulative"] is True and stall["count"] == 25, check
    assert check["pauses"]["total_s"] > check["pauses"]["total_limit_s"]


@pytest.mark.integration
@pytest.mark.slow
def test_short_real_freezes_under_a_second_add_up(env):
    """Eight SIGSTOP freezes of 0.7 s of a real emulator (each under the old 1 s floor): the stored run is flagged server_stall."""
    from test_disturbed import _freeze_the_emulator_in_a_timed_run, _last_run

    frozen, out, returncode = _freeze_the_emulator_in_a_timed_run(env, 8, 0.7, 0.3)
    assert frozen == 8, f"the run ended after {frozen} freezes: make it longer"
    assert returncode == 0 and "Traceback" not in out, out
    flags, selfcheck = _last_run(env)
    assert "server_stall" in flags, (flags, selfcheck["pauses"])
    assert selfcheck["server_stall"]["cumulative"] is True and selfcheck["pauses"]["count"] >= 8
    wait_gone(env)
