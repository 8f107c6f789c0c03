"""Evidence checked, not taken: a finished run's token counts against what the client asked for.

A server's token counts are its own claim. moe-tui's client already refuses an impossible count
mid-stream (negative, not a whole number, over the request's `max_new_tokens`: the request fails);
this is the second line, run over the request records of every client (ours and SGLang's
`bench_serving`, whose records carry only the counts) before a run is stored:

- a completed request's output length must be a whole number in [0, max_new_tokens] (the spec's
  `output_len` is the largest any request of the workload asks for);
- with `ignore_eos` the client knows each request's count: the server must stop only at
  max_new_tokens, so a completed request reporting another count broke the spec (our client's
  records name each request's own request length; bench_serving's, with `range_ratio` 1, all ask
  for `output_len`);
- the summary's total output tokens must be the sum over the completed requests.

Any miss flags the run `output_tokens_mismatch` (suspect: left out of every mean) and the
self-check keeps what was counted and the first few misses in words. Pure: data in, data out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from moe_tui.records import TokenEvidenceJson
from moe_tui.spec import BenchmarkSpec

MISSES_KEPT = 5


def _count(value: object) -> int | None:
    """`value` as a whole, finite count, or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return None
    return int(value)


def _request_miss(spec: BenchmarkSpec, index: int, record: Mapping[str, Any]) -> str | None:
    """Why one completed request's count is impossible or off the spec, or None."""
    who = f"request {record.get('idx', index)}"
    count = _count(record.get("output_len"))
    if count is None:
        return f"{who}: output length {str(record.get('output_len'))[:40]!r} is not a whole number"
    if count < 0:
        return f"{who}: {count} output tokens (a count cannot be negative)"
    asked = _count(record.get("requested_output_len"))
    limit = asked if asked is not None and 0 < asked <= spec.output_len else spec.output_len
    if count > limit:
        return f"{who}: {count} output tokens, over the max_new_tokens of {limit}"
    if spec.ignore_eos:
        expected = asked if asked is not None else (spec.output_len if spec.range_ratio >= 1.0 else None)
        if expected is not None and count != expected:
            return f"{who}: {count} output tokens with ignore_eos, where exactly {expected} were asked for"
    return None


def token_evidence(spec: BenchmarkSpec, requests: Sequence[Mapping[str, Any]],
                   summary: Mapping[str, Any]) -> TokenEvidenceJson | None:
    """The self-check entry `output_tokens` when the counts do not hold (None when they do):
    `misses` (how many), `first` (up to MISSES_KEPT in words), `counted` and `summary_total`."""
    misses: list[str] = []
    counted = 0
    for index, record in enumerate(requests):
        if not record.get("ok"):
            continue
        miss = _request_miss(spec, index, record)
        if miss is not None:
            misses.append(miss)
        else:
            counted += _count(record.get("output_len")) or 0
    total = summary.get("total_output_tokens")
    if total is not None and not misses and requests and _count(total) != counted:
        misses.append(f"the summary says {str(total)[:40]} output tokens, its completed requests {counted}")
    if not misses:
        return None
    return {"misses": len(misses), "first": misses[:MISSES_KEPT], "counted": counted,
            "summary_total": total if _count(total) is not None else None}
