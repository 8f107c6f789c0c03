"""What `moe-tui bench` prints and appends: bench_serving's summary block and JSONL record.

The printed block uses sglang.bench_serving 0.5.23's banner and labels (`{:<40} {:<10}` rows), so
anything that parses bench_serving's output by label reads ours; moe-tui's own lines (status,
failures, client self-check) come after the closing rule. The JSONL record has bench_serving's
field names, plus `failed`, `max_itl_ms`, `status`, `errors_by_kind`, `flags`, `selfcheck`,
`client`, `spec_fingerprint` and `spec` (the canonical spec).
"""

from __future__ import annotations

import json
import math

from moe_tui.bench.bench_serving_record import BenchServingRecord
from moe_tui.bench.engine import BenchResult
from moe_tui.spec import BenchmarkSpec

API_TO_BACKEND = {"generate": "sglang", "completions": "sglang-oai"}


def _row(label: str, value: object, fmt: str = "") -> str:
    if value is None:
        text = "n/a"
    elif fmt:
        text = format(value, fmt)
    else:
        text = str(value)
    return f"{label:<40} {text:<10}"


def summary_block(spec: BenchmarkSpec, result: BenchResult) -> str:
    s = result.summary
    rate = spec.request_rate
    lines = ["", "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    if not s:
        lines += [_row("Status:", result.status), _row("Error:", result.error), "=" * 50]
        return "\n".join(lines)
    lines += [
        _row("Backend:", API_TO_BACKEND[spec.api]),
        _row("Traffic request rate:", rate if not math.isinf(rate) else "inf"),
        _row("Max request concurrency:", spec.max_concurrency),
        _row("Successful requests:", s["completed"]),
        _row("Benchmark duration (s):", s["duration"], ".2f"),
        _row("Total input tokens:", s["total_input_tokens"]),
        _row("Total generated tokens:", s["total_output_tokens"]),
        _row("Request throughput (req/s):", s["request_throughput"], ".2f"),
        _row("Input token throughput (tok/s):", s["input_throughput"], ".2f"),
        _row("Output token throughput (tok/s):", s["output_throughput"], ".2f"),
        _row("Peak output token throughput (tok/s):", s["max_output_tokens_per_s"], ".2f"),
        _row("Peak concurrent requests:", s["max_concurrent_requests"]),
        _row("Total token throughput (tok/s):", s["total_throughput"], ".2f"),
        _row("Concurrency:", s["concurrency"], ".2f"),
    ]
    sections = (
        ("End-to-End Latency", "E2E Latency", "e2e_latency", ("mean", "median", "p90", "p95", "p99")),
        ("Time to First Token", "TTFT", "ttft", ("mean", "median", "p90", "p95", "p99")),
        ("Time per Output Token (excl. 1st token)", "TPOT", "tpot", ("mean", "median", "p90", "p95", "p99")),
        ("Inter-Token Latency", "ITL", "itl", ("mean", "median", "p90", "p95", "p99", "max")),
    )
    names = {"mean": "Mean", "median": "Median", "p90": "P90", "p95": "P95", "p99": "P99", "max": "Max"}
    for title, label, key, stats in sections:
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for stat in stats:
            lines.append(_row(f"{names[stat]} {label} (ms):", s.get(f"{stat}_{key}_ms"), ".2f"))
    lines.append("=" * 50)
    lines.append(_row("Status:", result.status))
    if s.get("failed"):
        kinds = ", ".join(f"{k} {n}" for k, n in result.errors_by_kind.items())
        lines.append(_row("Failed requests:", f"{s['failed']} ({kinds})"))
    if result.error:
        lines.append(_row("Error:", result.error))
    check = result.selfcheck
    lag = check.get("loop_lag_p99_ms")
    cpu = check.get("client_cpu_fraction")
    lines.append(_row("Client loop lag p99 (ms):", lag, ".2f"))
    lines.append(_row("  of it the client's own (ms):", check.get("loop_own_lag_p99_ms"), ".2f"))
    lines.append(_row("Client CPU (% of one core):", None if cpu is None else cpu * 100, ".1f"))
    if check.get("client_bound"):
        lines.append(_row("CLIENT-BOUND:", "; ".join(check.get("client_bound_reasons", []))))
    lines.append(_row("Spec fingerprint:", spec.short_fingerprint))
    return "\n".join(lines)


def jsonl_record(spec: BenchmarkSpec, result: BenchResult) -> BenchServingRecord:
    record: BenchServingRecord = {
        "backend": API_TO_BACKEND[spec.api],
        "dataset_name": spec.dataset,
        "request_rate": spec.request_rate,
        "max_concurrency": spec.max_concurrency,
        "random_input_len": spec.input_len,
        "random_output_len": spec.output_len,
        "random_range_ratio": spec.range_ratio,
        "server_info": result.server_info,
    }
    record.update(result.summary)
    record.update(
        status=result.status, errors_by_kind=result.errors_by_kind, flags=result.flags,
        error=result.error, selfcheck=result.selfcheck,
        client=f"{result.client} {result.client_version}".strip(),
        spec_fingerprint=spec.fingerprint, spec=spec.canonical_dict(),
    )
    return record


def jsonl_line(spec: BenchmarkSpec, result: BenchResult) -> str:
    # request_rate inf is written as the bare token Infinity, exactly as bench_serving does.
    return json.dumps(jsonl_record(spec, result))
