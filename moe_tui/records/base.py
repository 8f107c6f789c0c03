"""The names every record module shares: what is free-form (`FreeForm` and its named uses) and the
canonical spec (`SpecJson`). See `moe_tui.records`."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

# A JSON object whose keys moe-tui does not fix: it carries a foreign or user-written payload as it
# came (each use says whose). Everything moe-tui itself builds has a record below or beside its code.
FreeForm = dict[str, Any]
Number = float | int
# Spec fields as a user gave them (`queue add --spec`, the TUI's form, a control request), before
# `BenchmarkSpec.from_dict` checks them (it names a bad or unknown field): any subset of SpecJson's.
SpecOverrides = FreeForm
# bench_serving's summary by bench_serving's field names (moe_tui.metrics.calculate_metrics; for SGLang's
# own client, its normalised record): the set grows with bench_serving's versions.
BenchSummary = FreeForm
# A run's provenance as the store holds it: a ProvenanceJson for a run moe-tui measured, while an imported
# run keeps its file's own layout (compare.runs reads both), so a reader of stored runs gets this.
StoredProvenance = FreeForm


class SpecJson(TypedDict):
    """A BenchmarkSpec in canonical form (`BenchmarkSpec.canonical_dict`): request_rate may be "inf"."""

    spec_schema: int
    dataset: str
    input_len: int
    output_len: int
    range_ratio: float
    num_prompts: int
    max_concurrency: int
    request_rate: float | str
    seed: int
    api: str
    client: str
    client_version: str
    warmup_requests: int
    ignore_eos: bool
    temperature: float
    flush_cache: bool
    vocab_size: NotRequired[int]
    tokenizer: NotRequired[str]
