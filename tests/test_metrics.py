"""moe_tui.metrics against records whose expected figures were worked out by hand (see comments)."""

from __future__ import annotations

import pytest

from moe_tui.metrics import SUMMARY_FIELDS, MetricsError, calculate_metrics, peak_bins, split_chunk_gaps

# Four requests, one failed. Times in seconds.
RECORDS = [
    # A: tokens at 0.5 (first), 0.7, 0.9, 1.1
    {"idx": 0, "ok": True, "sent_at": 0.0, "prompt_len": 10, "output_len": 4, "ttft": 0.5,
     "latency": 1.1, "itl": [0.2, 0.2, 0.2]},
    # B: tokens at 0.7 (first), 2.4
    {"idx": 1, "ok": True, "sent_at": 0.4, "prompt_len": 20, "output_len": 2, "ttft": 0.3,
     "latency": 2.0, "itl": [1.7]},
    # C: failed; its prompt and any partial output must not count
    {"idx": 2, "ok": False, "sent_at": 0.1, "prompt_len": 99, "output_len": 50, "ttft": 0.05,
     "latency": None, "itl": [0.01] * 10, "error": "stream cut"},
    # D: one token only (no TPOT), at 1.6
    {"idx": 3, "ok": True, "sent_at": 1.0, "prompt_len": 5, "output_len": 1, "ttft": 0.6,
     "latency": 0.6, "itl": []},
]


def test_counts_and_throughputs():
    m = calculate_metrics(RECORDS, 2.5)
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_input_tokens"] == 35
    assert m["total_output_tokens"] == 7
    assert m["request_throughput"] == pytest.approx(1.2)
    assert m["input_throughput"] == pytest.approx(14.0)
    assert m["output_throughput"] == pytest.approx(2.8)
    assert m["total_throughput"] == pytest.approx(16.8)
    assert m["duration"] == 2.5


def test_ttft_statistics():
    m = calculate_metrics(RECORDS, 2.5)
    # TTFTs 0.5, 0.3, 0.6: mean 0.46667, population std sqrt(0.046667/3) = 0.124722
    assert m["mean_ttft_ms"] == pytest.approx(466.6667, abs=1e-3)
    assert m["median_ttft_ms"] == pytest.approx(500.0)
    assert m["std_ttft_ms"] == pytest.approx(124.7219, abs=1e-3)
    # linear percentiles on sorted [0.3, 0.5, 0.6]: p90 at rank 1.8 -> 0.58
    assert m["p90_ttft_ms"] == pytest.approx(580.0)
    assert m["p95_ttft_ms"] == pytest.approx(590.0)
    assert m["p99_ttft_ms"] == pytest.approx(598.0)


def test_tpot_only_for_outputs_longer_than_one():
    m = calculate_metrics(RECORDS, 2.5)
    # A: (1.1-0.5)/3 = 0.2; B: (2.0-0.3)/1 = 1.7; D has output_len 1 and is left out
    assert m["mean_tpot_ms"] == pytest.approx(950.0)
    assert m["median_tpot_ms"] == pytest.approx(950.0)
    assert m["std_tpot_ms"] == pytest.approx(750.0)
    assert m["p90_tpot_ms"] == pytest.approx(1550.0)
    assert m["p99_tpot_ms"] == pytest.approx(1685.0)


def test_itl_is_the_flat_per_token_list():
    m = calculate_metrics(RECORDS, 2.5)
    # [0.2, 0.2, 0.2, 1.7]: the failed request's ITLs are excluded
    assert m["mean_itl_ms"] == pytest.approx(575.0)
    assert m["median_itl_ms"] == pytest.approx(200.0)
    assert m["p90_itl_ms"] == pytest.approx(1250.0)
    assert m["max_itl_ms"] == pytest.approx(1700.0)


def test_e2e_and_concurrency():
    m = calculate_metrics(RECORDS, 2.5)
    assert m["mean_e2e_latency_ms"] == pytest.approx(1233.3333, abs=1e-3)
    assert m["median_e2e_latency_ms"] == pytest.approx(1100.0)
    assert m["concurrency"] == pytest.approx(3.7 / 2.5)


def test_peak_bins_like_bench_serving():
    tokens, concurrent = peak_bins(RECORDS)
    # first send 0.0, last end 2.4 -> ceil(2.4)+1 = 4 bins
    # tokens: A 0.5,0.7,0.9 in bin 0, 1.1 in bin 1; B 0.7 bin 0, 2.4 bin 2; D 1.6 bin 1
    assert tokens == [4, 2, 1, 0]
    # requests by integer second of start..end: A 0-1, B 0-2, D 1-1
    assert concurrent == [2, 3, 1, 0]
    m = calculate_metrics(RECORDS, 2.5)
    assert m["max_output_tokens_per_s"] == 4.0
    assert m["max_concurrent_requests"] == 3


def test_nothing_completed():
    m = calculate_metrics([RECORDS[2]], 1.0)
    assert m["completed"] == 0 and m["failed"] == 1
    assert m["output_throughput"] == 0.0
    # bench_serving: statistics over `[] or 0` are 0; E2E over [] would be NaN -> None here
    assert m["mean_ttft_ms"] == 0.0 and m["p99_itl_ms"] == 0.0
    assert m["mean_e2e_latency_ms"] is None
    assert m["max_output_tokens_per_s"] == 0.0 and m["max_concurrent_requests"] == 0


def test_field_names_and_order():
    m = calculate_metrics(RECORDS, 2.5)
    assert tuple(m) == SUMMARY_FIELDS
    for name in ("mean_ttft_ms", "p95_tpot_ms", "std_itl_ms", "p99_e2e_latency_ms",
                 "max_output_tokens_per_s", "max_concurrent_requests", "concurrency"):
        assert name in m


def test_bad_input_names_the_record():
    with pytest.raises(MetricsError, match="record 1: missing 'latency'"):
        calculate_metrics([RECORDS[0], {"ok": True, "sent_at": 0, "prompt_len": 1, "output_len": 1,
                                        "ttft": 0.1}], 1.0)
    with pytest.raises(MetricsError, match="duration"):
        calculate_metrics(RECORDS, 0.0)


def test_split_chunk_gaps():
    # first chunk at 1.0; 3 tokens at 1.3 -> 0.1 each; 0-token chunk skipped, its gap carried;
    # 2 tokens at 1.9 -> (1.9-1.3)/2 = 0.3 each
    itl = split_chunk_gaps([(1.0, 1), (1.3, 3), (1.5, 0), (1.9, 2)])
    assert itl == pytest.approx([0.1, 0.1, 0.1, 0.3, 0.3])
    assert split_chunk_gaps([]) == []
