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
# A run's spec as the store holds it: a SpecJson for a run moe-tui measured, an imported file's own fields
# otherwise (BenchmarkSpec.from_dict reads both).
StoredSpec = FreeForm
# A run's telemetry column: a TelemetrySummaryJson (or {}: NoTelemetryJson) for a run moe-tui measured,
# an imported file's own otherwise; a grid's RunSummary holds only its grid facts (compare.runs._GRID_FACTS).
StoredTelemetry = FreeForm
# Decoded JSON by its text: one read's cache, so runs that share a text share its decoded value (the
# store's reads; the values are whatever the text held).
DecodedTexts = dict[str, Any]
# ServerProfile.snapshot(): the user's profile table (TOML, user-written keys), secrets redacted.
ProfileSnapshot = FreeForm
# A run's self-checks by check name (moe_tui.bench.live and the runner's additions: ServerLoadJson,
# TokenEvidenceJson, ...), open-ended by design: a newer client adds checks an older reader shows as they are.
SelfChecks = FreeForm
# SGLang's own JSON as it answered or as a client sends it (/server_info, /get_model_info, a /generate or
# /v1/completions body): its keys are SGLang's and change with SGLang's versions.
SglangJson = FreeForm
# One event of a Chrome trace as torch.profiler (Kineto) writes it: its keys are Kineto's.
TraceEvent = FreeForm
# A model's config.json as Hugging Face writes it (the model's own keys: num_hidden_layers, ...).
HfConfig = FreeForm
# One GPU's NVML readings as the sampler took them (telemetry.GpuSample.to_dict; NVML's fields).
GpuReadings = FreeForm
# A user-written TOML table as parsed (a profile's settings, slurm.toml's tables): its keys are checked
# where they are used (each names a bad key and its file).
SettingsTable = FreeForm
# An Event on the wire (events.Event.to_dict): its dataclass's fields by name and "type", the class's name.
# The typed form is the Event dataclass itself; event_from_dict decodes this back into it.
EventJson = FreeForm
# One JSON line of a run archive file as read (store.archive): untrusted, each field checked as it is restored.
ArchiveLine = FreeForm
# Keyword arguments passed through to a constructor that names and checks them itself (the controller's
# options, the emulator's parsed arguments).
Options = FreeForm


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


class GridFactsJson(TypedDict):
    """The parts of a run's provenance, telemetry and selfcheck a grid reads (`compare.runs.grid_facts`;
    stored in `run_summaries.facts_json`): each a pruned copy of the stored column."""

    provenance: StoredProvenance
    telemetry: StoredTelemetry
    selfcheck: SelfChecks
