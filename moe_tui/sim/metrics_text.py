"""The emulator's `/metrics` body: SGLang 0.5.23's Prometheus names and labels
(srt/observability/metrics_collector.py; see docs/emulator.md) over the engine's counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moe_tui.sim.engine import SimEngine


def metrics_text(engine: SimEngine) -> str:
    """Prometheus text exposition of the engine's gauges, counters and histograms."""
    name = engine.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
    # Scheduler gauges and tokenizer-side metrics carry different labels (metrics_collector.py);
    # the emulator does not split streamed from whole requests: all count as streamed.
    tok = f'model_name="{name}",engine_type="unified"'
    labels, streamed = f'{tok},tp_rank="0",pp_rank="0",moe_ep_rank="0"', f'{tok},is_streaming="true"'
    m = engine.metrics
    lines: list[str] = []

    def gauge(metric: str, help_text: str, value: float) -> None:
        lines.extend([f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge",
                      f"{metric}{{{labels}}} {value}"])

    def counter(metric: str, help_text: str, value: float) -> None:
        lines.extend([f"# HELP {metric} {help_text}", f"# TYPE {metric} counter",
                      f"{metric}{{{streamed}}} {value}"])

    gauge("sglang:num_running_reqs", "The number of running requests.", engine.sched.num_running)
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
          engine.sched.num_waiting)
    gauge("sglang:num_used_tokens", "The number of used tokens.", engine.used_tokens())
    gauge("sglang:token_usage", "The token usage.", round(engine.token_usage(), 6))
    gauge("sglang:gen_throughput", "The generation throughput (token/s).",
          round(engine.last_gen_throughput, 3))
    gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", round(m.cache_hit_rate, 6))
    counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
            m.prompt_tokens_total)
    counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
            m.generation_tokens_total)
    lines.extend(["# HELP sglang:cached_tokens_total Number of cached prompt tokens by source "
                  "(device/host/storage).", "# TYPE sglang:cached_tokens_total counter",
                  f'sglang:cached_tokens_total{{{tok},cache_source="device"}} {m.cached_tokens_total}'])
    counter("sglang:num_requests_total", "Number of requests processed.", m.num_requests_total)
    for hist, hist_labels in ((m.ttft, streamed), (m.itl, tok), (m.e2e, streamed)):
        lines.extend(hist.render(hist_labels))
    return "\n".join(lines) + "\n"
