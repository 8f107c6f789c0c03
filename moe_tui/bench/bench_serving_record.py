"""sglang.bench_serving's JSONL records: which fields a result has (`RESULT_FIELDS`, bench_serving's
own names), reading and checking them (`parse_bench_serving_jsonl`, `normalize_record`: every field
present, None when absent, types checked, errors naming file and line), and the BenchmarkSpec fields
a record determines (`spec_fields_from_record`). The running side is `moe_tui.bench.sglang_adapter`,
which re-exports these names. Standard library only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moe_tui.records import FreeForm, SpecOverrides

# sglang.bench_serving's JSONL record by its own field names: a foreign payload (every RESULT_FIELDS
# key present once normalized, None when absent; PASSTHROUGH_FIELDS and DETAIL_FIELDS as written).
BenchServingRecord = FreeForm
# BenchmarkSpec fields by name, as `BenchmarkSpec.from_dict` takes them (a subset: what a record says).
SpecFields = SpecOverrides

CLIENT_NAME = "sglang.bench_serving"
BACKEND_TO_API = {"sglang": "generate", "sglang-native": "generate", "sglang-oai": "completions"}

# The fields of a bench_serving JSONL record that a normalized result always has (None when an
# older client did not write one). Names are bench_serving's own.
_LATENCY_FIELDS = tuple(
    f"{stat}_{metric}_ms"
    for metric in ("e2e_latency", "ttft", "tpot", "itl")
    for stat in ("mean", "median", "std", "p90", "p95", "p99")
)
RESULT_FIELDS = (
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    *_LATENCY_FIELDS,
    "concurrency",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
)
# Kept as they are when present.
PASSTHROUGH_FIELDS = (
    # A `moe-tui bench --output-file` record carries its own spec and verdict on itself.
    "spec", "spec_fingerprint", "client", "status", "flags", "selfcheck", "error",
    "tag",
    "server_info",
    "accept_length",
    "sharegpt_output_len",
    "total_input_text_tokens",
    "total_input_vision_tokens",
    "cache_report",
)
# Per-request lists written with --output-details.
DETAIL_FIELDS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")

_STRING_FIELDS = {"backend", "dataset_name"}
_INT_FIELDS = {
    "max_concurrency",
    "random_input_len",
    "random_output_len",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "max_concurrent_requests",
}
_REQUIRED_FIELDS = ("backend", "dataset_name", "duration", "completed", "output_throughput")

# BenchmarkSpec fields a bench_serving record does not carry: an importer must supply them or
# mark them unknown. (seed, warmup and flush appear only on the command line; ignore_eos and
# temperature only in the request bodies.)
SPEC_FIELDS_NOT_IN_RECORD = ("client_version", "seed", "warmup_requests", "ignore_eos", "temperature", "flush_cache")


class BenchServingError(RuntimeError):
    """The client could not be found or run, or its output could not be read."""


class RecordError(BenchServingError):
    """A JSONL record is unreadable; the message names the file and line."""


# -- reading records ----------------------------------------------------------------------------
def _parse_constant(name: str) -> float:
    # bench_serving writes json.dumps(float('inf')) as the bare token Infinity; accept it.
    return {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}[name]


def parse_bench_serving_jsonl(path: str | os.PathLike[str]) -> list[BenchServingRecord]:
    """Every record in a bench_serving JSONL file, normalized. Blank lines are skipped."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{path}: cannot read: {exc}") from None
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line, parse_constant=_parse_constant)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{path}:{lineno}: not a JSON record ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise RecordError(f"{path}:{lineno}: JSON nested too deeply to be a benchmark record") from None
        records.append(normalize_record(raw, where=f"{path}:{lineno}"))
    return records


def normalize_record(raw: object, where: str = "record") -> BenchServingRecord:
    """A bench_serving result with every RESULT_FIELDS key (None if absent) and checked types."""
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    missing = [f for f in _REQUIRED_FIELDS if raw.get(f) is None]
    if missing:
        raise RecordError(f"{where}: not a bench_serving result (missing {', '.join(missing)})")
    out: BenchServingRecord = {}
    for field in RESULT_FIELDS:
        out[field] = _checked(field, raw.get(field), where)
    for field in PASSTHROUGH_FIELDS + DETAIL_FIELDS:
        if field in raw:
            out[field] = raw[field]
    return out


def _checked(field: str, value: Any, where: str) -> Any:
    if value is None:
        return None
    if field in _STRING_FIELDS:
        if isinstance(value, str):
            return value
    elif field == "request_rate" and value == "trace":
        return value  # mooncake trace replay
    elif isinstance(value, bool):
        pass
    elif field in _INT_FIELDS:
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return int(value)
    elif isinstance(value, (int, float)):
        return float(value)
    raise RecordError(f"{where}: field '{field}' has an unexpected value {value!r}")


def spec_fields_from_record(record: Mapping[str, Any]) -> SpecFields:
    """The BenchmarkSpec fields a bench_serving record determines (see SPEC_FIELDS_NOT_IN_RECORD).

    num_prompts is exact only with --output-details (one entry per request); otherwise it is
    `completed`, which is short by the number of failed requests.
    """
    backend = record.get("backend")
    if backend not in BACKEND_TO_API:
        raise RecordError(f"backend {backend!r}: not an SGLang backend this tool compares ({', '.join(BACKEND_TO_API)})")
    fields: SpecFields = {
        "client": CLIENT_NAME,
        "api": BACKEND_TO_API[backend],
        "dataset": record.get("dataset_name"),
        "input_len": record.get("random_input_len"),
        "output_len": record.get("random_output_len"),
        "range_ratio": record.get("random_range_ratio"),
        "request_rate": record.get("request_rate"),
    }
    if record.get("max_concurrency") is not None:
        fields["max_concurrency"] = record["max_concurrency"]
    if isinstance(record.get("errors"), list):
        fields["num_prompts"] = len(record["errors"])
    elif record.get("completed") is not None:
        fields["num_prompts"] = record["completed"]
    return {k: v for k, v in fields.items() if v is not None}
