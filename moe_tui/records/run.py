"""A run's records: its provenance and the parts the runner builds (warm-up pass, sim clock, client limits,
a profiled run's facts), its telemetry summary and GPU snapshot, its self-check entries. See `moe_tui.records`."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from moe_tui.records.base import FreeForm, Number, SpecJson


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


# -- a GPU snapshot (moe_tui.telemetry.TelemetrySnapshot.to_dict; `moe-tui gpus`)
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


# -- a run's per-request rows as the store reads them back (store.runs.RunRecords.requests) ---------------
class RequestRowJson(TypedDict):
    """One request of a run: the `requests` table's columns, `ok` a bool and `itl` decoded."""

    run_id: int
    idx: int
    ok: bool
    sent_at: float | None
    prompt_len: int | None
    output_len: int | None
    ttft: float | None
    latency: float | None
    itl: list[float]
    finish_reason: str | None
    error: str
