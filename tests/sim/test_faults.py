"""Each emulator fault, injected by flag and observed from outside the real process."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.sim_helpers import SimProcess, http_status, sim_server, stream_generate
from tests.support import loopback

pytestmark = pytest.mark.integration  # starts real processes


def test_crash_after_requests_exits_mid_stream():
    with sim_server(["--sim-crash-after-requests", "2", "--sim-time-scale", "20"]) as sim:
        ok = stream_generate(sim.base_url, {"input_ids": [1], "sampling_params": {"max_new_tokens": 3}})
        assert ok[-1] == "[DONE]"
        with pytest.raises((httpx.HTTPError,)):
            stream_generate(sim.base_url, {"input_ids": [1], "sampling_params": {"max_new_tokens": 500}})
        code = sim.wait_exit(timeout=10)
        assert code not in (0, None)
        assert any("Scheduler hit an exception" in ln for ln in sim.lines)


def test_startup_hang_never_becomes_healthy():
    # SGLang opens its HTTP port only once the engine is up (http_server.py): a load that hangs
    # leaves the port closed, the process alive.
    with SimProcess(["--sim-startup-hang"]) as sim:
        sim.wait_for_log("Loading safetensors checkpoint shards:   0% Completed", timeout=10)
        time.sleep(1.0)
        assert http_status(sim.base_url + "/v1/models") is None
        assert http_status(sim.base_url + "/health_generate") is None
        assert sim.returncode() is None
        assert not any("ready to roll" in ln for ln in sim.lines)


def test_slow_start_delays_readiness():
    start = time.monotonic()
    with sim_server(["--sim-slow-start", "1.5"]) as sim:
        elapsed = time.monotonic() - start
        info = loopback.get(sim.base_url + "/server_info").json()
    assert elapsed >= 1.5
    assert info["startup_time"]["load_weight"] >= 1.5


def test_fallback_backend_is_reported_and_logged():
    args = ["--moe-runner-backend", "flashinfer_cutedsl", "--sim-fallback-backend",
            "flashinfer_cutlass", "--sim-time-scale", "100"]
    with sim_server(args) as sim:
        info = loopback.get(sim.base_url + "/server_info").json()
        warning = sim.wait_for_log("WARNING.*falling back to moe_runner_backend='flashinfer_cutlass'")
        # Performance follows the fallback: at batch 10 cutlass is ~1.7x slower per step.
        chunks = stream_generate(sim.base_url, {"input_ids": [1], "sampling_params": {"max_new_tokens": 2}})
    assert info["moe_runner_backend"] == "flashinfer_cutlass"
    assert info["sim"]["requested_moe_runner_backend"] == "flashinfer_cutedsl"
    assert info["sim"]["perf_row"] == "flashinfer_cutlass"
    assert "flashinfer_cutedsl" in warning
    assert chunks[-1] == "[DONE]"


def _first_token_then_next(base_url: str, n_tokens: int) -> list[float]:
    """Wall times between successive chunks of one stream."""
    times = []
    with loopback.stream("POST", base_url + "/generate",
                      json={"input_ids": [1], "stream": True,
                            "sampling_params": {"max_new_tokens": n_tokens}}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.monotonic())
    return [b - a for a, b in zip(times, times[1:])]


def test_jit_stall_hits_first_use_of_a_batch_bucket_only():
    args = ["--sim-jit-stall-ms", "400", "--sim-time-scale", "1", "--moe-runner-backend",
            "flashinfer_cutlass"]
    with sim_server(args) as sim:  # readiness health check already used bucket 1 (prefill only)
        first = _first_token_then_next(sim.base_url, 4)
        again = _first_token_then_next(sim.base_url, 4)
        assert any("JIT compiling MoE kernels for batch bucket 1" in ln for ln in sim.lines)
    # First decode step at batch 1 pays ~400 ms extra; the second run does not.
    assert first[0] > again[0] + 0.3
    assert max(again) < 0.25


def test_error_rate_gives_seeded_http_500s():
    def statuses(seed: str) -> list[int]:
        with sim_server(["--sim-error-rate", "0.5", "--sim-seed", seed, "--sim-zero-delay"]) as sim:
            return [loopback.post(sim.base_url + "/generate",
                               json={"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}
                               ).status_code for _ in range(40)]

    a = statuses("7")
    assert set(a) == {200, 500} and 8 <= a.count(500) <= 32
    assert statuses("7") == a  # seeded: the same draws again


def test_cut_stream_closes_without_done():
    with sim_server(["--sim-cut-stream-after-tokens", "3", "--sim-time-scale", "100"]) as sim:
        received = []
        with pytest.raises(httpx.HTTPError):
            with loopback.stream("POST", sim.base_url + "/generate",
                              json={"input_ids": [1], "stream": True,
                                    "sampling_params": {"max_new_tokens": 50}}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        received.append(line[6:])
        assert "[DONE]" not in received
        assert json.loads(received[-1])["meta_info"]["completion_tokens"] == 3
        assert http_status(sim.base_url + "/health_generate") == 200


def test_hang_after_tokens_stalls_until_client_times_out():
    with sim_server(["--sim-hang-after-tokens", "2", "--sim-time-scale", "100"]) as sim:
        received = []
        with pytest.raises(httpx.ReadTimeout):
            with loopback.stream("POST", sim.base_url + "/generate",
                              json={"input_ids": [1], "stream": True,
                                    "sampling_params": {"max_new_tokens": 50}},
                              timeout=httpx.Timeout(5.0, read=1.0)) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        received.append(json.loads(line[6:]))
        assert [c["meta_info"]["completion_tokens"] for c in received] == [1, 2]
        assert http_status(sim.base_url + "/health_generate") == 200  # the engine is not stuck
