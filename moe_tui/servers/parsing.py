"""Pure parsers of what a running server says: Prometheus text from `/metrics` and the
`/server_info` payload (the resolved MoE backend, version, every resolved arg), with clear errors."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moe_tui.events import ServerMetrics
from moe_tui.records import SglangJson
from moe_tui.servers.base import ServerInfoError

# -- pure parsers --------------------------------------------------------------------------------
_PROM_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class PromSample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_prometheus_text(text: str) -> list[PromSample]:
    """Prometheus text exposition format -> samples. Comments and malformed lines are skipped
    (one odd line from a server must not blank the whole panel)."""
    samples: list[PromSample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            continue
        value_text = m.group("value")
        try:
            value = float(value_text)
        except ValueError:
            lowered = value_text.lower()
            if lowered in ("nan", "+inf", "-inf", "inf"):
                value = float(lowered.replace("+", ""))
            else:
                continue
        labels = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _PROM_LABEL.findall(m.group("labels") or "")}
        samples.append(PromSample(m.group("name"), labels, value))
    return samples


def metric_value(samples: Sequence[PromSample], name: str) -> float | None:
    """One gauge's value; several label sets (one per engine / DP rank) are summed."""
    values = [s.value for s in samples if s.name == name and not math.isnan(s.value)]
    return sum(values) if values else None


def metrics_event(profile: str, samples: Sequence[PromSample], healthy: bool) -> ServerMetrics:
    # token_usage is a fraction per rank: the mean is the meaningful aggregate, not the sum.
    usage = [s.value for s in samples if s.name == "sglang:token_usage" and not math.isnan(s.value)]
    return ServerMetrics(
        profile=profile,
        healthy=healthy,
        running_requests=metric_value(samples, "sglang:num_running_reqs"),
        queued_requests=metric_value(samples, "sglang:num_queue_reqs"),
        token_usage=(sum(usage) / len(usage)) if usage else None,
        gen_throughput=metric_value(samples, "sglang:gen_throughput"),
    )


@dataclass(frozen=True)
class ServerInfo:
    resolved_backend: str
    version: str | None
    args: SglangJson


def parse_server_info(payload: str | bytes | Mapping[str, Any]) -> ServerInfo:
    """`/server_info` body -> resolved backend, version and the whole resolved args dict.

    Raises ServerInfoError naming what is wrong (not JSON, not an object, no moe_runner_backend).
    """
    if isinstance(payload, (str, bytes)):
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            snippet = payload[:80] if isinstance(payload, str) else payload[:80].decode("utf-8", "replace")
            raise ServerInfoError(f"/server_info is not JSON ({exc}); it began {snippet!r}") from None
    else:
        data = payload
    if not isinstance(data, Mapping):
        raise ServerInfoError(f"/server_info is a JSON {type(data).__name__}, expected an object")
    args = dict(data)
    # Some SGLang versions nest the resolved args; accept both shapes.
    nested = args.get("server_args")
    source = nested if isinstance(nested, Mapping) and "moe_runner_backend" in nested else args
    backend = source.get("moe_runner_backend")
    if not isinstance(backend, str) or not backend:
        raise ServerInfoError(
            f"/server_info has no moe_runner_backend string (got {backend!r}); "
            f"keys: {', '.join(sorted(map(str, args))[:20]) or 'none'}"
        )
    version = args.get("version")
    return ServerInfo(backend, version if isinstance(version, str) else None, args)
