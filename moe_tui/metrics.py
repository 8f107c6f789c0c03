"""Benchmark metric math from per-request records: sglang.bench_serving's definitions, exactly.

`calculate_metrics(records, duration_s)` reproduces `calculate_metrics` of sglang 0.5.23
(`sglang/benchmark/serving.py`) so a number from moe-tui and a number from bench_serving mean the
same thing:

- duration D: wall time of the timed phase (warmup excluded), handed in by the caller.
- request / input / output / total throughput: completed / D, sum(prompt_len) / D,
  sum(output_len) / D, (input + output) / D, over *successful* requests only (a failed request
  adds 0 output tokens and its prompt is not counted).
- TTFT: send to first non-empty chunk. TPOT per request: (latency - ttft) / (output_len - 1), only
  for output_len > 1. ITL: the flat list of per-token gaps (each chunk gap already divided evenly
  over the chunk's new tokens by the client). E2E: send to the last line of the stream.
- each latency: mean, median, std (population, numpy default), p90, p95, p99 (np.percentile,
  linear interpolation); ITL also max. All in milliseconds.
- concurrency: sum(E2E) / D (Little's law).
- peak output throughput: tokens counted in 1 s wall bins starting at the earliest successful
  send; a request's token times are send + ttft, then + each ITL entry in turn (so the first
  chunk counts as one token, as in bench_serving); bins = int(ceil(last end - first send)) + 1.
- peak concurrent requests: per 1 s bin, requests whose [send, send + latency] covers it (by the
  integer second of start and end).

Where bench_serving would produce NaN (no request completed: E2E statistics over an empty list),
this module gives None, because NaN is not JSON; TTFT/TPOT/ITL statistics over an empty list are
0, as in bench_serving (it computes them over `list or 0`). Field names are bench_serving's JSONL
names, plus `failed` and `max_itl_ms` (bench_serving prints Max ITL but does not write it).

Records are plain mappings with keys ok, sent_at (seconds, any clock shared by all records),
prompt_len, output_len, ttft, latency, itl (list of seconds). Pure: numpy only, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from moe_tui.records import BenchSummary

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e_latency")
STATISTICS = ("mean", "median", "std", "p90", "p95", "p99")

# The order of bench_serving's JSONL record (results part), then our additions.
SUMMARY_FIELDS: tuple[str, ...] = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    *(f"{stat}_e2e_latency_ms" for stat in STATISTICS),
    *(f"{stat}_ttft_ms" for stat in STATISTICS),
    *(f"{stat}_tpot_ms" for stat in STATISTICS),
    *(f"{stat}_itl_ms" for stat in STATISTICS),
    "max_itl_ms", "concurrency", "max_output_tokens_per_s", "max_concurrent_requests",
)


class MetricsError(ValueError):
    """A record handed to the metric math is malformed; the message names the record."""


def _stats(values: Sequence[float], empty_is_zero: bool) -> dict[str, float | None]:
    """mean/median/std/p90/p95/p99 in ms, with bench_serving's empty-list behaviour."""
    if not values:
        fill = 0.0 if empty_is_zero else None
        return {stat: fill for stat in STATISTICS}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(np.mean(arr)) * 1000,
        "median": float(np.median(arr)) * 1000,
        "std": float(np.std(arr)) * 1000,
        "p90": float(np.percentile(arr, 90)) * 1000,
        "p95": float(np.percentile(arr, 95)) * 1000,
        "p99": float(np.percentile(arr, 99)) * 1000,
    }


def _field(record: Mapping[str, Any], key: str, index: int) -> Any:
    try:
        value = record[key]
    except KeyError:
        raise MetricsError(f"request record {index}: missing '{key}'") from None
    if value is None:
        raise MetricsError(f"request record {index}: '{key}' is None in a successful request")
    return value


def peak_bins(records: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[int]]:
    """Output tokens and concurrent requests per 1 s wall bin, as bench_serving bins them.

    Only successful records; empty lists when there are none.
    """
    ok = [r for r in records if r.get("ok")]
    if not ok:
        return [], []
    first_send = min(float(r["sent_at"]) for r in ok)
    last_end = max(float(r["sent_at"]) + float(r["latency"]) for r in ok)
    nbins = int(np.ceil(last_end - first_send)) + 1
    tokens = np.zeros(nbins)
    concurrent = np.zeros(nbins)
    for r in ok:
        sent = float(r["sent_at"])
        t = sent + float(r["ttft"])
        times = [t]
        for gap in r.get("itl") or ():
            t += gap
            times.append(t)
        for tt in times:
            b = int(tt - first_send)
            if 0 <= b < nbins:
                tokens[b] += 1
        start_b = int(sent - first_send)
        end_b = int(sent + float(r["latency"]) - first_send)
        for b in range(start_b, min(end_b + 1, nbins)):
            concurrent[b] += 1
    return tokens.tolist(), [int(c) for c in concurrent]


def calculate_metrics(records: Iterable[Mapping[str, Any]], duration_s: float) -> BenchSummary:
    """The summary dict (bench_serving JSONL field names) of one timed phase."""
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0):
        raise MetricsError(f"duration must be a positive number of seconds, got {duration_s!r}")
    records = list(records)
    completed = failed = 0
    total_input = total_output = 0
    ttfts: list[float] = []
    tpots: list[float] = []
    itls: list[float] = []
    e2es: list[float] = []
    for i, r in enumerate(records):
        if not r.get("ok"):
            failed += 1
            continue
        output_len = int(_field(r, "output_len", i))
        latency = float(_field(r, "latency", i))
        ttft = float(_field(r, "ttft", i))
        _field(r, "sent_at", i)
        completed += 1
        total_input += int(_field(r, "prompt_len", i))
        total_output += output_len
        if output_len > 1:
            tpots.append((latency - ttft) / (output_len - 1))
        itls.extend(float(x) for x in (r.get("itl") or ()))
        ttfts.append(ttft)
        e2es.append(latency)

    tokens_per_bin, concurrent_per_bin = peak_bins(records)
    out: BenchSummary = {
        "duration": float(duration_s),
        "completed": completed,
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration_s,
        "input_throughput": total_input / duration_s,
        "output_throughput": total_output / duration_s,
        "total_throughput": (total_input + total_output) / duration_s,
    }
    for name, values, empty_is_zero in (
        ("e2e_latency", e2es, False), ("ttft", ttfts, True), ("tpot", tpots, True), ("itl", itls, True),
    ):
        for stat, value in _stats(values, empty_is_zero).items():
            out[f"{stat}_{name}_ms"] = value
    out["max_itl_ms"] = float(np.max(itls)) * 1000 if itls else 0.0
    out["concurrency"] = float(np.sum(e2es)) / duration_s if e2es else 0.0
    out["max_output_tokens_per_s"] = float(max(tokens_per_bin)) if tokens_per_bin else 0.0
    out["max_concurrent_requests"] = int(max(concurrent_per_bin)) if concurrent_per_bin else 0
    return {key: out[key] for key in SUMMARY_FIELDS}


def split_chunk_gaps(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """Per-token ITL from (arrival time, new tokens) of each chunk *after* the first.

    `chunks` starts with the first token-bearing chunk (its arrival is the TTFT point); each later
    chunk's gap to the previous one is divided evenly over that chunk's new tokens. A chunk with
    0 new tokens is skipped and its gap carries into the next chunk (bench_serving's `continue`).
    """
    itl: list[float] = []
    if not chunks:
        return itl
    previous = chunks[0][0]
    for arrival, new_tokens in chunks[1:]:
        if new_tokens <= 0:
            continue
        gap = (arrival - previous) / new_tokens
        itl.extend([gap] * new_tokens)
        previous = arrival
    return itl
