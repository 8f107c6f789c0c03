"""The emulator's seeded step noise and slow drift, observed from outside the real process.

One request at a time (batch 1: a known step time), timed end to end over HTTP. Noise spreads the
per-request times; drift makes later requests slower than earlier ones."""

from __future__ import annotations

import statistics
import time

import httpx
import pytest

from tests.sim_helpers import sim_server

pytestmark = pytest.mark.integration  # starts real processes

# 40 decode steps of ~96.6 ms each (flashinfer_cutlass at batch 1), 50x faster: ~77 ms a request.
# --sim-exact: no start/drift/run variance, so only the flag under test moves the times.
ARGS = ["--moe-runner-backend", "flashinfer_cutlass", "--sim-time-scale", "50", "--sim-exact"]
PAYLOAD = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}


def request_seconds(base_url: str, n: int) -> list[float]:
    return interleaved_request_seconds([base_url], n)[0]


def interleaved_request_seconds(base_urls: list[str], n: int) -> list[list[float]]:
    """n timed requests to each server, taking turns: whatever load the machine is under falls on
    every server alike, so their times compare side by side."""
    times: list[list[float]] = [[] for _ in base_urls]
    with httpx.Client(timeout=30) as client:
        for _ in range(n):
            for url, out in zip(base_urls, times):
                start = time.perf_counter()
                resp = client.post(url + "/generate", json=PAYLOAD)
                resp.raise_for_status()
                assert resp.json()["meta_info"]["completion_tokens"] == 40
                out.append(time.perf_counter() - start)
    return times


def test_noise_spreads_request_times_around_the_model():
    # 20x (not 50x): a request lasts ~190 ms, so a loaded machine's late wake-ups (a few ms) stay
    # a small share of it beside the noise's ~6%. Both servers run at once and take turns.
    slower = ["--moe-runner-backend", "flashinfer_cutlass", "--sim-time-scale", "20", "--sim-exact"]
    with sim_server(slower) as quiet, sim_server(slower + ["--sim-noise-pct", "40", "--sim-seed", "7"]) as noisy:
        calm, shaken = interleaved_request_seconds([quiet.base_url, noisy.base_url], 10)
    # Per-step noise of 40% averages over 40 steps to ~6% per request: far above the quiet spread,
    # while the mean stays near the model (noise is centred on it).
    assert statistics.stdev(shaken) > 2 * statistics.stdev(calm), (calm, shaken)
    assert abs(statistics.mean(shaken) / statistics.mean(calm) - 1) < 0.25, (calm, shaken)


def test_drift_makes_later_requests_slower():
    # +3000% per minute = +50% per second since ready: a few seconds make the drift unmistakable.
    with sim_server(ARGS + ["--sim-drift-pct-per-min", "3000"]) as sim:
        early = request_seconds(sim.base_url, 2)
        time.sleep(2.0)
        late = request_seconds(sim.base_url, 2)
    assert min(late) > 1.5 * max(early), (early, late)


def test_each_start_draws_fresh_noise_unless_seeded():
    """Without --sim-seed two starts use different noise streams (repeats on separate starts are
    independent samples); with it, a start is reproducible."""
    import httpx as _httpx

    def seed_in_force(args: list[str]) -> int:
        with sim_server(ARGS + args) as sim:
            return _httpx.get(sim.base_url + "/server_info", timeout=10).json()["sim"]["sim_seed"]

    assert seed_in_force(["--sim-noise-pct", "5"]) != seed_in_force(["--sim-noise-pct", "5"])
    assert seed_in_force(["--sim-seed", "11"]) == 11
