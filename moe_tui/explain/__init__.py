"""Explain a difference: where each side's decode step goes, kernel class by kernel class.

- `rules`: the one table from kernel names to classes (MoE GEMM, MoE routing/permute, attention,
  collectives, dense GEMM, quantization, norms/elementwise; idle gaps measured; other);
- `trace`: one torch-profiler Chrome trace (one TP rank) -> per-step class times;
- `breakdown`: a side's ms/step per class with its noise, B vs A per class with the share of the
  gap, the kernels that moved, the MoE GEMM against its roofline;
- `expert_load`: per-layer max/mean tokens per expert from an expert-distribution dump;
- `render`: the breakdown as text, Markdown, CSV, JSON and a stacked bar per side.
Pure (files in, records out) except `render`'s picture; `moe_tui.explain.store` queues profiled
runs and finds their traces.
"""

from __future__ import annotations

from moe_tui.explain.breakdown import (
    ClassDelta,
    ClassTime,
    ExplainError,
    Explanation,
    SideBreakdown,
    compare_sides,
    moe_gemm_roofline,
    side_breakdown,
)
from moe_tui.explain.rules import CLASS_WORDS, CLASSES, RULES, classify, short_name
from moe_tui.explain.trace import RankProfile, TraceError, parse_trace_name, profile_rank, read_rank

__all__ = [
    "CLASSES", "CLASS_WORDS", "RULES", "ClassDelta", "ClassTime", "ExplainError", "Explanation", "RankProfile",
    "SideBreakdown", "TraceError", "classify", "compare_sides", "moe_gemm_roofline", "parse_trace_name",
    "profile_rank", "read_rank", "short_name", "side_breakdown",
]
