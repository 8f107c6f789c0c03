"""The emulator's seeded step noise and slow drift, observed from outside the real process.

One request at a time (batch 1: a known step time), timed end to end over HTTP. Noise spreads the
per-request times; drift makes later requests slower than earlier ones."""

from __future__ import annotations

import statistics
import time

import pytest

from tests.sim_helpers import sim_server
from tests.support import loopback

pytestmark = pytest.mark.integration  # starts real processes

# 40 decode steps of ~96.6 ms each (flashinfer_cutlass at batch 1), 50x faster: ~77 ms a request.
# --sim-exact: no start/drift/run variance, so only the flag under test moves the times.
ARGS = ["--moe-runner-backend", "flashinfer_cutlass", "--sim-time-scale", "50", "--sim-exact"]
PAYLOAD = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}


def request_seconds(base_url: str, n: int) -> list[float]:
    return interleaved_request_seconds([base_url], n)[0]


def interleaved_request_seconds(base_urls: list[str], n: int, tokens: int = 40) -> list[list[float]]:
    """n timed requests of `tokens` output tokens to each server, taking turns: whatever load the
    machine is under falls on every server alike, so their times compare side by side."""
    times: list[list[float]] = [[] for _ in base_urls]
    payload = PAYLOAD | {"sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    with loopback.Client(timeout=30) as client:
        for _ in range(n):
            for url, out in zip(base_urls, times):
                start = time.perf_counter()
                resp = client.post(url + "/generate", json=payload)
                resp.raise_for_status()
                assert resp.json()["meta_info"]["completion_tokens"] == tokens
                out.append(time.perf_counter() - start)
    return times


def test_noise_spreads_request_times_around_the_model():
    # Requests of 4 tokens in real time (1x: ~0.5 s, five steps of ~97 ms) and 80% per-step noise:
    # ~50% spread per request (IQR over the median), while a loaded machine's late wake-ups add a
    # few ms a step: a few % (beside 8 busy loops on 2 cores: quiet side 2-5%, noisy side 54%). At
    # 10x and 10 tokens (~10 ms steps) the same lateness made the quiet side as spread as the
    # noisy one under `make test -n 6` (IQR 23 ms on ~100 ms requests). Both servers run at once and
    # take turns, so that load falls on both alike.
    slower = ["--moe-runner-backend", "flashinfer_cutlass", "--sim-time-scale", "1", "--sim-exact"]
    with sim_server(slower) as quiet, sim_server(slower + ["--sim-noise-pct", "80", "--sim-seed", "7"]) as noisy:
        calm, shaken = interleaved_request_seconds([quiet.base_url, noisy.base_url], 16, tokens=4)
    # Noise far above the quiet spread, while the middle stays near the model (noise is centred on
    # it; the 0.2 floor on a step's factor lifts it by ~7% at 80%). Spread as the interquartile
    # range and centre as the median: a busy machine's odd stalled request (+35% seen) moves
    # neither, where it doubled the quiet side's standard deviation.
    assert iqr(shaken) > 2 * iqr(calm), (calm, shaken)
    assert abs(statistics.median(shaken) / statistics.median(calm) - 1) < 0.25, (calm, shaken)


def iqr(values: list[float]) -> float:
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q3 - q1


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
    def seed_in_force(args: list[str]) -> int:
        with sim_server(ARGS + args) as sim:
            return loopback.get(sim.base_url + "/server_info", timeout=10).json()["sim"]["sim_seed"]

    assert seed_in_force(["--sim-noise-pct", "5"]) != seed_in_force(["--sim-noise-pct", "5"])
    assert seed_in_force(["--sim-seed", "11"]) == 11
