"""The native load generator against the real emulator process: clean runs, both APIs, and faults.

Each test starts its own emulator (fast time scale) through moe_tui.sim.launch, which kills the
process group on exit. Figures asserted are ones that can only come out right if the client sent
the spec's exact requests and read the streams correctly.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from moe_tui.bench.engine import run_benchmark
from moe_tui.sim.launch import free_port, start_sim
from moe_tui.spec import BenchmarkSpec

FAST = ["--sim-time-scale", "50", "--enable-metrics"]


def _metric(base_url: str, name: str) -> float:
    text = urllib.request.urlopen(base_url + "/metrics", timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def _run(spec: BenchmarkSpec, url: str, **kw):
    return asyncio.run(run_benchmark(spec, url, warmup_pause_s=0.0, **kw))


@pytest.mark.integration
@pytest.mark.parametrize("api", ["generate", "completions"])
def test_clean_run_counts_every_token(api):
    spec = BenchmarkSpec(api=api, input_len=48, output_len=24, range_ratio=0.5, num_prompts=24,
                         max_concurrency=6, warmup_requests=2)
    events = []
    with start_sim(FAST) as sim:
        before = _metric(sim.base_url, "sglang:prompt_tokens_total")  # readiness probes count too
        result = _run(spec, sim.base_url, on_progress=events.append, progress_interval_s=0.05)
        server_prompt_tokens = _metric(sim.base_url, "sglang:prompt_tokens_total") - before
    s = result.summary
    assert result.status == "complete", result.error
    assert s["completed"] == 24 and s["failed"] == 0 and result.errors_by_kind == {}
    requested_out = sum(r["output_len"] for r in result.requests)
    assert s["total_output_tokens"] == requested_out
    # ignore_eos: every request returns exactly its drawn length, within [12, 24]
    assert all(12 <= r["output_len"] <= 24 and r["finish_reason"] == "length" for r in result.requests)
    # exact ids reached the server: its prompt-token counter equals our input total plus warmup
    warm_len = result.requests[0]["prompt_len"]
    assert server_prompt_tokens == s["total_input_tokens"] + 2 * warm_len
    # one ITL entry per token after the first chunk
    for r in result.requests:
        assert r["ok"] and r["ttft"] > 0 and r["latency"] >= r["ttft"]
        assert len(r["itl"]) <= r["output_len"] - 1
    assert s["mean_itl_ms"] > 0 and s["mean_tpot_ms"] > 0
    # progress: warmup then timed phase, ending with everything done
    assert {e.phase for e in events} == {"warmup", "timed"}
    assert events[-1].completed == 24 and events[-1].total == 24 and events[-1].in_flight == 0
    assert max(e.in_flight for e in events) <= 6
    check = result.selfcheck
    assert check["peak_in_flight"] == 6 and check["vocab_size"] == 8192
    assert check["loop_lag_samples"] > 0 and check["client_cpu_fraction"] is not None


@pytest.mark.integration
def test_poisson_arrivals_follow_the_requested_rate():
    spec = BenchmarkSpec(input_len=16, output_len=4, num_prompts=30, max_concurrency=30, request_rate=40.0)
    with start_sim(FAST) as sim:
        result = _run(spec, sim.base_url)
    assert result.status == "complete", result.error
    sends = sorted(r["sent_at"] for r in result.requests)
    # the 30 arrivals span about 29 exponential gaps of mean 25 ms; seeded, so the span is fixed
    span = sends[-1] - sends[0]
    assert 0.3 < span < 1.5
    assert result.selfcheck["achieved_rate"] == pytest.approx(29 / span, rel=0.05)
    # Arrivals are released at absolute times: a dispatch is late by what the event loop itself was
    # late (a busy box's wake-ups, seen by the lag probe), never by the sum of earlier gaps' lateness
    # as chained sleeps would be (29 gaps: 29 late wake-ups added up).
    check = result.selfcheck
    assert check["dispatch_lag_p99_ms"] < 50 + check["loop_lag_max_ms"], check


@pytest.mark.integration
def test_http_500s_make_the_run_incomplete_and_are_counted():
    spec = BenchmarkSpec(input_len=16, output_len=8, num_prompts=40, max_concurrency=8, warmup_requests=0)
    with start_sim(FAST + ["--sim-error-rate", "0.3", "--sim-seed", "3"]) as sim:
        result = _run(spec, sim.base_url)
    s = result.summary
    assert result.status == "incomplete"
    assert 0 < s["failed"] < 40 and s["completed"] + s["failed"] == 40
    assert result.errors_by_kind == {"http_500": s["failed"]}
    bad = [r for r in result.requests if not r["ok"]]
    assert all(r["http_status"] == 500 and "HTTP 500" in r["error"] for r in bad)
    assert "incomplete" in result.flags
    # failed requests add no tokens
    assert s["total_output_tokens"] == sum(r["output_len"] for r in result.requests if r["ok"])


@pytest.mark.integration
def test_cut_streams_fail_every_request():
    spec = BenchmarkSpec(input_len=16, output_len=20, num_prompts=6, max_concurrency=3, warmup_requests=0)
    with start_sim(FAST + ["--sim-cut-stream-after-tokens", "5"]) as sim:
        result = _run(spec, sim.base_url)
    assert result.status == "failed"
    assert result.errors_by_kind == {"stream_cut": 6}
    assert "no request completed" in result.error


@pytest.mark.integration
def test_hung_stream_times_out_instead_of_hanging_the_run():
    spec = BenchmarkSpec(input_len=16, output_len=20, num_prompts=3, max_concurrency=3, warmup_requests=0)
    with start_sim(FAST + ["--sim-hang-after-tokens", "4"]) as sim:
        result = _run(spec, sim.base_url, request_timeout=1.0)
    assert result.status == "failed"
    assert result.errors_by_kind == {"timeout": 3}
    assert all(r["output_len"] == 4 for r in result.requests)
    assert result.summary["duration"] < 5


@pytest.mark.integration
def test_server_crash_mid_run_keeps_partial_results():
    spec = BenchmarkSpec(input_len=16, output_len=8, num_prompts=12, max_concurrency=1, warmup_requests=0)
    with start_sim(FAST + ["--sim-crash-after-requests", "4"]) as sim:
        result = _run(spec, sim.base_url)
        assert sim.wait_exit(5) != 0
    s = result.summary
    assert result.status == "incomplete"
    # requests before the crash completed (the 4th may or may not finish before the exit)
    assert s["completed"] in (3, 4) and all(r["ok"] for r in result.requests[:3])
    assert set(result.errors_by_kind) <= {"stream_cut", "connect"} and "connect" in result.errors_by_kind
    assert sum(result.errors_by_kind.values()) == 12 - s["completed"]
    assert "failed" in result.error


def test_unreachable_server_fails_with_a_clear_error():
    spec = BenchmarkSpec(num_prompts=2)
    result = _run(spec, f"http://127.0.0.1:{free_port()}")
    assert result.status == "failed"
    assert "server unreachable" in result.error
    assert result.summary == {}


@pytest.mark.integration
def test_warmup_failure_fails_the_run():
    spec = BenchmarkSpec(input_len=16, output_len=8, num_prompts=4, warmup_requests=2)
    with start_sim(FAST + ["--sim-error-rate", "1.0"]) as sim:
        result = _run(spec, sim.base_url)
    assert result.status == "failed" and result.error.startswith("warmup failed")
    assert result.errors_by_kind == {"http_500": 2}


@pytest.mark.integration
def test_stall_timeout_fails_a_silent_stream_long_before_the_request_timeout():
    spec = BenchmarkSpec(input_len=16, output_len=20, num_prompts=3, max_concurrency=3, warmup_requests=0)
    with start_sim(FAST + ["--sim-hang-after-tokens", "4"]) as sim:
        result = _run(spec, sim.base_url, request_timeout=60.0, stall_timeout=0.5)
    assert result.status == "failed"
    assert result.errors_by_kind == {"timeout": 3}
    assert all(r["output_len"] == 4 and "silent for 0.5 s (stall timeout) mid-stream after 4 tokens" in r["error"]
               for r in result.requests), [r["error"] for r in result.requests]
    assert result.summary["duration"] < 5
    assert result.selfcheck["stall_timeout_s"] == 0.5 and result.selfcheck["request_timeout_s"] == 60.0


@pytest.mark.integration
def test_stall_timeout_does_not_cut_a_slow_but_streaming_server():
    # a stall limit only counts silence: a server streaming normally is never cut by it
    spec = BenchmarkSpec(input_len=16, output_len=12, num_prompts=4, max_concurrency=4, warmup_requests=0)
    with start_sim(FAST) as sim:
        result = _run(spec, sim.base_url, stall_timeout=2.0)
    assert result.status == "complete", result.error
    assert result.selfcheck["stall_timeout_s"] == 2.0
    assert result.selfcheck["request_timeout_s"] >= 600  # the default total limit stays in force


@pytest.mark.integration
@pytest.mark.parametrize("preopen", [True, False])
def test_connection_pool_is_opened_before_the_timed_phase(preopen):
    spec = BenchmarkSpec(input_len=16, output_len=4, num_prompts=40, max_concurrency=40, warmup_requests=1)
    with start_sim(FAST) as sim:
        result = _run(spec, sim.base_url, preopen_connections=preopen)
    assert result.status == "complete", result.error
    check = result.selfcheck
    if preopen:
        # the warmup's idle connection is reused, the other 39 are opened: 40 held at once
        assert check["connections_preopen_target"] == 40
        assert check["connections_preopened"] == 39 and check["connections_preopen_errors"] == 0
        assert 0 < check["connections_preopen_s"] < 10
        assert check["connections_opened_timed"] == 0
    else:
        assert "connections_preopened" not in check
        assert check["connections_opened_timed"] == 39
