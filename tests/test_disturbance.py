"""Pure checks of the disturbance flags: the server's load over the client's cap, and short
freezes that add up (`moe_tui.disturbance`, `moe_tui.bench.stall`), on plain data."""

from __future__ import annotations

from dataclasses import dataclass, field

from moe_tui.bench.stall import stall_check
from moe_tui.disturbance import client_cap, load_flags, load_summary
from moe_tui.provenance import run_flags


def test_client_cap_is_concurrency_or_prompts():
    assert client_cap(4, 100) == 4 and client_cap(64, 10) == 10 and client_cap(None, 7) == 7


def test_one_lagging_sample_over_the_cap_is_not_foreign_load():
    samples = [(float(t), 2.0) for t in range(200)] + [(200.0, 3.0)]
    summary = load_summary(samples, cap=2)
    assert summary["foreign_requests_max"] == 0 and not load_flags(summary)
    assert "foreign_load" not in run_flags(server_load=summary)


def test_far_over_the_cap_or_often_over_it_is_foreign_load():
    far = load_summary([(0.0, 2.0), (1.0, 42.0), (2.0, 2.0)], cap=2)
    assert far["foreign_requests_max"] == 40 and far["foreign_seen_at"] == 1.0
    assert "foreign_load" in run_flags(server_load=far)
    often = load_summary([(float(t), 3.0 if t % 2 else 2.0) for t in range(20)], cap=2)
    assert often["foreign_requests_max"] == 1 and load_flags(often) == {"foreign_load"}
    assert load_summary([], cap=2)["server_max_requests"] is None


@dataclass
class _Outcome:
    sent_at: float
    latency: float
    chunks: list = field(default_factory=list)


def _stream(start: float, end: float, freezes: list[tuple[float, float]], step: float = 0.05) -> _Outcome:
    """One request emitting a token every `step` s from `start` to `end`, silent during `freezes`."""
    chunks, t = [], start
    while t < end:
        if not any(a <= t < b for a, b in freezes):
            chunks.append((t - start, 1))
        t += step
    return _Outcome(start, end - start, chunks)


def test_short_freezes_adding_up_are_a_cumulative_stall():
    freezes = [(10.0 * i + 2.0, 10.0 * i + 4.0) for i in range(5)]  # five 2 s freezes in 50 s
    check = stall_check([_stream(0.0, 50.0, freezes), _stream(0.0, 50.0, freezes)], 50.0, 1000.0, 0.0, 50.0)
    assert check["pauses"]["count"] == 5 and 9.5 <= check["pauses"]["total_s"] <= 10.5
    stall = check["server_stall"]
    assert stall is not None and stall["cumulative"] is True and stall["length_s"] < 5.0 and stall["count"] == 5


def test_one_short_freeze_is_not_a_stall_and_one_long_one_is():
    one = stall_check([_stream(0.0, 50.0, [(10.0, 12.0)])], 50.0, 0.0, 0.0, 50.0)
    assert one["server_stall"] is None and one["pauses"]["count"] == 1
    long = stall_check([_stream(0.0, 50.0, [(10.0, 17.0)])], 50.0, 0.0, 0.0, 50.0)
    assert long["server_stall"]["cumulative"] is False and long["server_stall"]["length_s"] >= 6.9


def test_the_runners_own_health_probe_is_not_someone_else():
    """The runner's /health (a one-token generate) sits beside the client's streams: at cap 1024 it was
    in the server's count in 30 of 64 samples and flagged foreign_load on every run."""
    from moe_tui.disturbance import load_summary

    samples = [(float(t), 1025.0 if t % 2 else 1024.0) for t in range(64)]
    assert load_summary(samples, 1024)["foreign_requests_max"] == 1  # without the allowance: flagged
    allowed = load_summary(samples, 1024, allowance=1)
    assert allowed["foreign_requests_max"] == 0 and allowed["runner_requests_allowed"] == 1
    # someone else's streams beyond the probe are still seen, as the excess over the client's cap
    busy = load_summary([(float(t), 1040.0) for t in range(64)], 1024, allowance=1)
    assert busy["foreign_requests_max"] == 16 and busy["client_cap"] == 1024
