"""moe-tui's shared typed records: the JSON-shaped values that cross a boundary (the store's columns,
the control socket's answers, the exports), as TypedDicts that every layer may import (this module
imports nothing of moe-tui, so the store, the runner and the exports share one definition).

Why TypedDicts here (docs/architecture.md, "Typed records"): these values are JSON objects already
(written to a store column, sent over the control socket, dumped by an export), so a TypedDict
types the dict each encoder builds without a conversion step and without changing one byte written;
mypy --strict then refuses a misspelt key (tests/test_typed_records.py). In-memory values that never
become JSON are frozen dataclasses where they live (`moe_tui.store.queue_item.QueueItem`,
`moe_tui.spec.BenchmarkSpec`).

What is free-form by nature is named so: `FreeForm`, always with a comment saying whose payload
it is (SGLang's /server_info, a user's profile table, NVML's readings, an imported file's fields).
"""

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


# -- the queue ------------------------------------------------------------------------------------
class QueueItemJson(TypedDict):
    id: int
    position: float
    campaign_id: int | None
    profile_name: str
    spec: SpecJson
    fingerprint: str
    repeat_index: int
    warmup: bool
    state: str
    attempts: int
    run_id: int | None
    error: str
    created_at: float
    updated_at: float
    concurrency: int
    num_prompts: int
    fresh_start: bool
    job: NotRequired[ExecutorJobJson]  # `queue list` only, for an item an executor ran as a batch job


class ExecutorJobJson(TypedDict):
    """The newest batch job a queue item became (`moe_tui.store.jobs.JobRow.to_dict`)."""

    executor: str
    job_id: str | None
    state: str
    node: str
    reason: str
    attempt: int
    outcome: str


# -- the controller's answers (moe_tui.run.ops, over the control socket) ------------------------------
class ItemStateJson(TypedDict):
    """skip/cancel of the running item: which item (None when it finished meanwhile) and its new state."""

    item_id: int | None
    state: str


class CampaignAddedJson(TypedDict):
    """A campaign (or an investigation's or explain's plan) added to the queue."""

    campaign_id: int
    item_ids: list[int]
    server_starts: NotRequired[dict[str, int]]  # server starts by queue policy (plain campaigns only)


class CampaignArgsJson(TypedDict):
    """The add_campaign/plan_campaign op's arguments from the TUI's form (`control.reads.campaign_args`)."""

    profiles: list[str]
    concurrencies: list[int]
    repeats: int
    spec: SpecOverrides
    policy: str
    prompts_per_concurrency: NotRequired[int]
    name: NotRequired[str]
    control: NotRequired[bool]


class ExplainCellJson(TypedDict):
    """A cell's breakdown as the explain screen shows it (`control.reads.StoreReads.explain_cell`)."""

    state: str  # none | pending | failed | ready
    message: str
    lines: list[str]
    simulated: bool


class DeletedJson(TypedDict):
    deleted: int


class PlannedItemJson(TypedDict):
    profile_name: str
    concurrency: int
    num_prompts: int
    repeat_index: int
    fingerprint: str


class ControlPlanJson(TypedDict):
    """A campaign's control concurrency (`store.queue_plan.CampaignPlan.control_plan`)."""

    concurrency: int | None  # None: no control planned
    starts_per_side: int
    extra_per_profile: int
    why: str


class CampaignRowJson(TypedDict):
    """One `campaigns` row, its definition decoded (`store.queue.RunQueue.campaign`, `.campaigns`)."""

    id: int
    name: str
    policy: str
    created_at: float
    # Each kind of campaign stores its own definition (a plan's CampaignPlan.definition(), explain's
    # ExplainDefinitionJson, an investigation's), and a store keeps those of older moe-tui versions:
    # a reader checks the kind it wants (`kind`) before it reads the rest.
    definition: FreeForm


class PlanAnswerJson(TypedDict):
    """The plan_campaign op's answer (`moe_tui.run.ops.plan_answer`); `items` capped for the socket."""

    name: str
    definition: FreeForm  # CampaignPlan.definition(): the campaign's stored definition (store.queue_plan)
    control: ControlPlanJson
    server_starts: dict[str, int]  # server starts by queue policy (CampaignPlan.start_costs)
    items: list[PlannedItemJson]


class CappedPlanJson(PlanAnswerJson):
    """The plan as the control socket sends it (`moe_tui.run.facade.capped_plan`): `items` cut to the
    first ones shown, their full count and the cells whose prompts are fewer than their concurrency."""

    item_count: int
    items_truncated: bool
    short_cells: list[list[int]]  # [concurrency, num_prompts] of each such cell
    planner_pid: NotRequired[int]  # the process that built it (a thread's is the controller's own)


class PausedJson(TypedDict):
    paused: bool


# -- a run's provenance (moe_tui.provenance.build_provenance) -------------------------------------------
class HostFactsJson(TypedDict):
    hostname: str
    platform: str
    python_version: str
    python_executable: str
    moe_tui_version: str


class GpuFactsJson(TypedDict):
    """The GPUs a run ran on, from `telemetry.summarize_run` (`available` False and a reason without it)."""

    available: bool
    reason: str | None
    driver_version: NotRequired[str | None]
    cuda_driver_version: NotRequired[str | None]
    gpu_names: NotRequired[dict[str, str | None]]
    gpu_uuids: NotRequired[dict[str, str | None]]
    sm_clock_min_mhz: NotRequired[Number | None]
    sm_clock_max_seen_mhz: NotRequired[Number | None]
    sm_clock_drop_pct: NotRequired[Number | None]
    clock_events_seen: NotRequired[list[str]]
    suspect_clock_events: NotRequired[list[str]]
    foreign_processes: NotRequired[list[ForeignProcessJson] | None]  # None: not judged
    gpus_lost: NotRequired[list[int]]
    simulated: NotRequired[bool]  # the emulator's simulated GPUs, not NVML: names and clocks are modelled


class ForeignProcessJson(TypedDict):
    """A process on the run's GPUs that was not the servers' (`telemetry.summarize_run`)."""

    gpu: int
    pid: int
    name: str | None
    samples: int
    max_used_memory_bytes: int | None


class ServerFactsJson(TypedDict):
    start_id: int | None
    pid: int | None
    base_url: str | None
    log_path: str | None
    requested_backend: str | None
    resolved_backend: str | None
    backend_mismatch: bool
    server_info_error: str | None
    resolved_args: FreeForm  # SGLang's /server_info as it answered (the server's resolved arguments)
    sglang_version: str | None
    engine: str


class QueueFactsJson(TypedDict):
    """The queue item a run worked, as its provenance records it."""

    id: int
    campaign_id: int | None
    repeat_index: int
    attempt: int
    requested_fingerprint: str


class ProvenanceJson(TypedDict):
    """Where a run came from (`runs.provenance_json` for runs moe-tui measured; imported runs keep
    whatever layout their file had, so a reader of stored runs reads that column as FreeForm)."""

    provenance_schema: int
    simulated: bool
    spec: SpecJson
    fingerprint: str
    spec_summary: str
    profile: FreeForm  # ServerProfile.snapshot(): the user's profile table, secrets redacted
    server: ServerFactsJson
    client: FreeForm  # the client's self-description (name, version, its limits): bench.result's payload
    host: HostFactsJson
    gpu: GpuFactsJson
    queue_item: QueueFactsJson | None
    warmup_pass: WarmupPassJson | None  # None: the item ran without one
    started_at: float | None
    finished_at: float | None
    sim_clock: NotRequired[SimClockJson]  # an emulator cell at a time scale other than its launch's
    profiled: NotRequired[ProfiledFactsJson]  # an explain item's profiled run (moe_tui.run.profiled)


class ProfilerAnswerJson(TypedDict):
    """What SGLang's /start_profile or /stop_profile answered (status None: no answer)."""

    status: int | None
    answer: str
    at: NotRequired[float]


class ProfiledFactsJson(TypedDict):
    """How a profiled run went (`moe_tui.run.profiled.profiled_run`), kept in its provenance."""

    request: FreeForm  # the body sent to SGLang's /start_profile (its ProfileReqInput's fields)
    steps: int
    explain: str | None  # the explain campaign's name
    notes: list[str]
    concurrency: int
    prefill: bool
    expert_record: NotRequired[str]  # recording, dumped, or why not
    batch_full: NotRequired[str]
    start_profile: NotRequired[ProfilerAnswerJson]
    stop_profile: NotRequired[ProfilerAnswerJson]
    decode_capture: NotRequired[str | None]  # "DECODE", or "MIXED" when SGLang named it EXTEND
    disarm: NotRequired[str]
    files: NotRequired[list[str]]  # the trace files kept


class NoTelemetryJson(TypedDict):
    """A run's telemetry column when none was taken: {}."""


# -- rows the store reads back beside the runs (moe_tui.store.records) ------------------------------------
class ServerStartRow(TypedDict):
    """One `server_starts` row, its JSON columns decoded (`Store.server_start`, `Store.server_starts`)."""

    id: int
    profile_name: str
    profile: FreeForm  # ServerProfile.snapshot(): the user's profile table, secrets redacted
    argv: list[str]
    env: dict[str, str]
    log_path: str
    pid: int | None
    started_at: float
    ready_at: float | None
    stopped_at: float | None
    state: str
    reason: str
    resolved_backend: str | None
    backend_mismatch: bool
    sglang_version: str | None
    server_info: FreeForm | None  # SGLang's /server_info as it answered
    model_info: FreeForm | None  # SGLang's /model_info as it answered
    exit_code: int | None
    exit_signal: int | None
    log_tail: str | None


class GateSamplesRow(TypedDict):
    """One `gate_samples` row, its samples decoded (`Store.gate_samples`; moe_tui.gate.probe writes them)."""

    id: int
    created_at: float
    profile_name: str
    campaign_id: int | None
    server_start_id: int | None
    prompt_set: str
    resolved_backend: str | None
    samples: list[FreeForm]  # per prompt: token ids and logprobs as SGLang's /generate answered


# -- explain (moe_tui.explain.store): the plan the control socket carries, the campaign definition stored ---------
class ExplainPlanItemJson(TypedDict):
    side: str  # "baseline" or "candidate"
    profile: str
    spec: SpecJson  # the cell's spec as profiled (explain.store.profiled_spec)


class ExplainPlanJson(TypedDict):
    """What `explain.store.plan_explain` proposes for a cell: one profiled item a side."""

    name: str
    kind: str  # explain.store.KIND
    baseline: str
    candidate: str
    concurrency: int
    cell_fingerprint: str
    steps: int  # decode steps SGLang's profiler captures
    items: list[ExplainPlanItemJson]
    stages: list[str]  # "DECODE", and "EXTEND" when the prefill is profiled too


class ExplainDefinitionJson(TypedDict):
    """An explain campaign's stored definition (`campaigns.definition_json`; explain.store.enqueue_explain)."""

    name: str
    kind: str
    baseline: str
    candidate: str
    concurrency: int
    cell_fingerprint: str
    steps: int
    stages: list[str]
    sides: list[str]
    profiles_dir: str | None


# -- a run's parts the runner builds (moe_tui.run.items, moe_tui.run.sim_clock) ---------------------------
class WarmupPassJson(TypedDict):
    """The warm-up pass before a timed run (its results discarded), as the run's provenance keeps it."""

    status: str
    error: str
    fingerprint: NotRequired[str]
    num_prompts: NotRequired[int]
    seed: NotRequired[int]
    completed: NotRequired[int]
    duration_s: NotRequired[float]
    rule: NotRequired[str]


class SimClockJson(TypedDict):
    """An emulator cell's time scale beside its launch's (`moe_tui.run.sim_clock.cell_clock`)."""

    time_scale: float
    launch_time_scale: float
    concurrency: int
    rule: str


class ClientLimitsJson(TypedDict, total=False):
    """The per-request limits the controller asked moe-tui's client for (none for another client)."""

    request_timeout_s: float | None
    stall_timeout_s: float | None


# -- a run's telemetry summary (moe_tui.telemetry.summary.summarize_run; stored with the run) --------------
class GpuRunSummaryJson(TypedDict):
    """One GPU over a run."""

    name: str | None
    uuid: str | None
    samples: int
    lost_samples: int
    busy_samples: int
    util_gpu_mean: float | None
    util_gpu_min: float | None
    util_gpu_max: float | None
    util_mem_mean: float | None
    sm_clock_min_mhz: int | None
    sm_clock_max_seen_mhz: int | None
    sm_clock_min_busy_mhz: int | None
    sm_clock_max_mhz: int | None
    sm_clock_drop_pct: float | None
    clock_events_seen: list[str]
    clock_event_fraction: dict[str, float]  # event -> share of the samples that reported events
    suspect_clock_events: list[str]
    power_mean_w: float | None
    power_max_w: float | None
    mem_used_peak_bytes: int | None
    mem_total_bytes: int | None
    temperature_max_c: float | None


class OverallRunSummaryJson(TypedDict, total=False):
    """Every GPU together ({} without a sample)."""

    gpu_count: int
    util_gpu_mean: float | None
    util_gpu_min: float | None
    util_gpu_max: float | None
    sm_clock_min_mhz: int | None
    sm_clock_max_seen_mhz: int | None
    sm_clock_drop_pct: float | None  # the worst GPU's: it sets the pace in TP
    clock_events_seen: list[str]
    suspect_clock_events: list[str]
    power_mean_w: float | None  # per GPU
    power_total_mean_w: float | None
    mem_used_peak_bytes: int | None  # the fullest GPU
    gpus_lost: list[int]


class TelemetrySummaryJson(TypedDict):
    available: bool
    reason: str | None
    snapshots: int
    duration_s: float
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: dict[str, GpuRunSummaryJson]  # by GPU index (a string: JSON's keys)
    overall: OverallRunSummaryJson
    foreign_processes: list[ForeignProcessJson] | None  # None: not judged (no PIDs of ours known)
    simulated: bool


# -- a run's self-check entries the runner adds (moe_tui.disturbance, moe_tui.run.evidence) ----------------
class ServerLoadJson(TypedDict):
    """The server's own running + queued count over a run beside the client's cap (`disturbance.load_summary`)."""

    client_cap: int
    samples: int
    server_max_requests: float | None
    foreign_requests_max: float
    foreign_seen_at: float | None
    runner_requests_allowed: NotRequired[int]  # the runner's own health probes, allowed over the cap
    samples_over_cap: NotRequired[int]


class TokenEvidenceJson(TypedDict):
    """The self-check entry `output_tokens` when the counts do not hold (`run.evidence.token_evidence`)."""

    misses: int
    first: list[str]
    counted: int
    summary_total: object  # the summary's total_output_tokens as the client reported it (shown, never summed)


# -- the runner's state (`moe-tui run --status`, the control socket's snapshot op) ------------------------
class QueueSummaryJson(TypedDict):
    paused: bool
    counts: dict[str, int]
    total: int
    next_item_id: int | None
    pending_profiles: list[str]
    pending_profiles_shown: int


class GpuSnapshotJson(TypedDict):
    """`moe-tui gpus --format json` (one object; with --watch one a line)."""

    available: bool
    simulated: bool
    reason: str | None
    t: float
    wall: float
    sample_seconds: float
    driver_version: str | None
    cuda_driver_version: str | int | None
    nvml_version: str | None
    gpus: list[FreeForm]  # one per GPU: NVML's readings (telemetry.GpuSample.to_dict)


class RunnerStatusJson(TypedDict):
    """`moe-tui run --status --format json`: the runner's snapshot."""

    pid: int
    data_dir: str
    working: bool
    activity: str
    detail: str
    current_item: QueueItemJson | None
    current_run_id: int | None
    last_progress: FreeForm | None  # the last BenchProgress event (moe_tui.events), as the runner saw it
    last_finished: FreeForm | None  # the last RunFinished event
    queue: QueueSummaryJson
    session: dict[str, int]  # items this runner closed, by state
    servers: list[FreeForm]  # each managed server's own description (servers.managed)
    telemetry: GpuSnapshotJson | None
