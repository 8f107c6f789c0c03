"""The JSON that moe-tui writes for others to read, as typed records: one TypedDict per export, the
published contract. docs/schemas/<name>.schema.json is generated from these (tests/test_export_schemas.py
regenerates and compares them, and validates every export written from a real store against its
schema), so the types here, the schemas there and what the commands write agree.

Why TypedDicts: every export is a JSON object that its encoder already builds as a dict (`json.dumps`
of it is the export). A TypedDict gives that dict a checked shape (mypy --strict checks every
literal annotated with one) at no run-time cost and without changing one byte written; a dataclass
would need a conversion step at each encoder and would change who builds the objects (the grid's
and the store's internals, which this module does not touch).

`EXPORTS` names each export: the command that writes it and its record type. Where a part of an
export is free-form by nature (a profile's settings, SGLang's /server_info, the grid's extras),
the field's type says so with a named alias (`FreeForm`).
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

# A JSON object whose keys are not fixed by moe-tui: it copies a foreign or user-written payload.
FreeForm = dict[str, Any]
# A BenchmarkSpec in canonical form (`BenchmarkSpec.canonical_dict`): request_rate may be "inf".
Number = float | int


class SpecJson(TypedDict):
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


# -- compare --format json (export: the same) --------------------------------------------------------
class ControlJson(TypedDict):
    state: Literal["agrees", "differs", "inconclusive", "absent"]
    concurrency: int | None
    delta_pct: float | None
    ci_pct: list[float] | None
    margin_pct: float
    n_baseline: int
    n_candidate: int
    text: str
    environment_differences: list[str]
    overlapping: bool


class CellJson(TypedDict):
    concurrency: int
    metric: str
    verdict: str
    n_baseline: int
    n_candidate: int
    starts_baseline: int
    starts_candidate: int
    baseline_mean: float | None
    candidate_mean: float | None
    delta_pct: float | None
    ci_pct: list[float] | None
    ci_confidence: float | None
    uncontrolled: str | None
    control_relative_pct: float | None
    control_relative_ci_pct: list[float] | None
    control_starts: list[int]
    reasons: list[str]


class RooflineRowJson(TypedDict):
    """One decode ceiling and its terms (`moe_tui.roofline.decode.Roofline.to_dict`)."""

    batch: int
    context: int
    gpu: str
    gpu_count: int
    hbm_gbps_total: float
    weight_bytes: dict[str, float]
    distinct_experts: float
    kv_bytes: float
    kv_replication: int
    total_bytes: float
    flops: float
    attention_flops: float
    t_mem_s: float
    t_compute_s: float
    bound: Literal["memory", "compute"]
    ceiling_tok_s: float
    notes: list[str]
    per_stream_tok_s: float
    step_ms: float


class RooflineCellJson(TypedDict):
    ceiling: RooflineRowJson | None
    measured_tok_s: float | None
    n: int
    pct_of_roofline: float | None
    why_not: str | None


class RooflineSidesJson(TypedDict):
    baseline: dict[str, RooflineCellJson]  # by concurrency (a JSON key is a string)
    candidate: dict[str, RooflineCellJson]


class GatePromptJson(TypedDict):
    prompt_id: str
    first_divergence: int | None
    identical: int
    compared: int
    mean_abs_logprob_diff: float | None
    baseline_prob_at_divergence: float | None
    accepted: bool
    why: str


class GateJson(TypedDict):
    """The correctness gate beside the grid (`moe_tui.gate.correctness.GateVerdict.to_dict`)."""

    status: str
    words: str
    identical_share: float | None
    mean_abs_logprob_diff: float | None
    first_divergence: int | None
    prompts: list[GatePromptJson]


class GridExtrasJson(TypedDict):
    gate: GateJson
    roofline: RooflineSidesJson


class CellInvestigationJson(TypedDict):
    concurrency: int
    metric: str
    state: str


class GridJson(TypedDict):
    """`moe-tui compare --format json`."""

    control: ControlJson
    cells: list[CellJson]
    extras: NotRequired[GridExtrasJson | None]  # the correctness gate and roofline beside the grid
    investigations: NotRequired[list[CellInvestigationJson]]


# -- export --format json --------------------------------------------------------------------------
class ExportPathsJson(TypedDict):
    """`moe-tui export --format json`: the files written."""

    markdown: str
    csv: str
    png: str | None
    svg: str | None
    extra: list[str]
    all: list[str]


# -- queue ---------------------------------------------------------------------------------------
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


class QueueSummaryJson(TypedDict):
    paused: bool
    counts: dict[str, int]
    total: int
    next_item_id: int | None
    pending_profiles: list[str]
    pending_profiles_shown: int


class QueueListJson(TypedDict):
    """`moe-tui queue list --format json`."""

    summary: QueueSummaryJson
    items: list[QueueItemJson]  # one page of them (--page/--limit, or --all)
    total: int  # items matching the filters, over every page
    offset: int  # of the page's first item among them
    more: bool  # a later page holds more


class AddedItemJson(TypedDict):
    id: int
    profile: str
    concurrency: int
    repeat: int
    fingerprint: str


class QueueAddJson(TypedDict):
    """`moe-tui queue add --format json`: with --dry-run `planned` (nothing added), else `items`."""

    dry_run: bool
    campaign_id: int | None
    name: str
    item_ids: list[int]
    profiles_dir: str | None
    planned: NotRequired[int]
    items: NotRequired[list[AddedItemJson]]


# -- investigate --format json ---------------------------------------------------------------------
class SideSnapshotJson(TypedDict):
    n: int
    mean: float | None
    std: float | None
    run_ids: list[int]


class CellSnapshotJson(TypedDict):
    verdict: str
    delta_pct: NotRequired[float | None]
    ci_pct: NotRequired[list[float] | None]
    fingerprint: NotRequired[str | None]
    baseline: NotRequired[SideSnapshotJson]
    candidate: NotRequired[SideSnapshotJson]
    control: NotRequired[str]
    control_concurrency: NotRequired[int | None]


class ProposedItemJson(TypedDict):
    side: str
    profile: str
    concurrency: int
    spec: SpecJson
    role: str
    warmup: bool
    fresh_start: bool
    repeat_index: int


class ProposalJson(TypedDict):
    kind: str
    reason: str
    items: list[ProposedItemJson]
    minutes: float | None
    server_starts: int
    expect: str


class InvestigationPlanJson(TypedDict):
    """`moe-tui investigate --format json` (the plan, queued or with --dry-run)."""

    name: str
    baseline: str
    candidate: str
    concurrency: int
    metric: str
    cap: int
    min_effect_pct: float
    spread_pct: float | None
    before: CellSnapshotJson
    proposals: list[ProposalJson]
    notes: list[str]
    cautions: list[str]
    minutes: float | None
    server_starts: int


class InvestigationReportJson(TypedDict):
    """One earlier investigation of the cell (`moe-tui investigate --report --format json`: a list)."""

    name: str
    state: str
    before: CellSnapshotJson
    after: CellSnapshotJson
    settled: str  # "settled: better", "not settled ...", or "" when no repeats were planned
    flags: list[str]
    lines: list[str]


# -- roofline, doctor ------------------------------------------------------------------------------
class RooflineJson(TypedDict):
    """`moe-tui roofline PROFILE --format json`."""

    profile: str
    setup: str
    config: str
    gpu_source: str
    total_params: int
    active_params: int
    precision: dict[str, str]
    rows: list[RooflineRowJson]


class DoctorCheckJson(TypedDict):
    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str


class DoctorJson(TypedDict):
    """`moe-tui doctor --box --format json`."""

    ok: bool
    checks: list[DoctorCheckJson]


# -- profiles, servers, store ------------------------------------------------------------------------
class ProfilesCheckJson(TypedDict):
    """`moe-tui profiles check --format json`."""

    profiles_dir: str
    profiles: list[str]
    problems: list[str]
    warnings: list[str]
    notes: list[str]


class ProfilesShowJson(TypedDict):
    """`moe-tui profiles show NAME --format json`."""

    name: str
    profiles_dir: str
    argv: list[str]
    env: dict[str, str]
    settings: FreeForm  # the profile's own keys (a user-written TOML table), secrets redacted


class ServerStatusJson(TypedDict):
    """One row of `moe-tui server status --format json` (a list of these)."""

    profile: str
    start_id: int
    state: str
    alive: bool
    pid: int | None
    port: int | None
    log_path: str | None
    reason: str | None
    profile_backend: str | None
    resolved_backend: str | None
    backend_mismatch: bool
    sglang_version: str | None


class CampaignUsageJson(TypedDict):
    id: int | None
    name: str | None
    items: int
    runs: int
    bytes: int


class ProfileUsageJson(TypedDict):
    name: str
    runs: int
    requests: int
    gpu_samples: int
    bytes: int
    first_finished: float | None
    last_finished: float | None


class StoreUsageJson(TypedDict):
    """`moe-tui store usage --format json`."""

    runs: int
    file_bytes: int
    free_bytes: int
    profiles: list[ProfileUsageJson]
    campaigns: list[CampaignUsageJson]
    bytes_by_kind: dict[str, int]  # the file's pages by what holds them (store.space.bytes_by_kind)
    keep_samples_runs: int | None  # per-request samples kept for the newest N runs; None: all kept


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


# -- moe-tui bench --events jsonl (what the runner reads from its client process) --------------------
class BenchProgressJson(TypedDict):
    """A progress line (`moe_tui.events.BenchProgress.to_dict`), about every 250 ms."""

    type: Literal["BenchProgress"]
    time: float
    run_id: int | None
    completed: int
    total: int
    errors: int
    elapsed_s: float
    output_tok_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    in_flight: int
    client_lag_ms: float | None
    phase: str


class BenchRequestJson(TypedDict):
    """One request of a run (`bench.result.outcome_record`), as `Store.finish_run` takes it."""

    idx: int
    ok: bool
    sent_at: float | None
    prompt_len: int
    output_len: int
    requested_output_len: int
    ttft: float | None
    latency: float | None
    itl: list[float]
    finish_reason: str | None
    error: str
    error_kind: str
    http_status: int | None
    queued_s: float | None
    chunks: int


class BenchResultJson(TypedDict):
    type: Literal["BenchResult"]
    status: Literal["complete", "incomplete", "failed"]
    summary: dict[str, Number | None]  # moe_tui.metrics.calculate_metrics: bench_serving's names
    requests: list[BenchRequestJson]
    selfcheck: FreeForm  # the client's self-checks (moe_tui.bench.live), open-ended by design
    errors_by_kind: dict[str, int]
    error: str
    flags: list[str]
    spec: FreeForm  # a SpecJson; {} when the request could not be read (one shape per field: msgspec)
    fingerprint: str
    client: str
    client_version: str
    started_at: float | None
    finished_at: float | None
    server_info: FreeForm | None  # SGLang's /server_info as it answered


# name -> (what writes it, its record type); docs/schemas/<name>.schema.json for each.
EXPORTS: dict[str, tuple[str, type]] = {
    "compare": ("moe-tui compare --format json", GridJson),
    "export": ("moe-tui export --format json", ExportPathsJson),
    "queue-list": ("moe-tui queue list --format json", QueueListJson),
    "queue-add": ("moe-tui queue add --format json", QueueAddJson),
    "investigate-plan": ("moe-tui investigate --format json", InvestigationPlanJson),
    "investigate-report": ("moe-tui investigate --report --format json (a list of these)", InvestigationReportJson),
    "roofline": ("moe-tui roofline --format json", RooflineJson),
    "doctor": ("moe-tui doctor --box --format json", DoctorJson),
    "profiles-check": ("moe-tui profiles check --format json", ProfilesCheckJson),
    "profiles-show": ("moe-tui profiles show --format json", ProfilesShowJson),
    "server-status": ("moe-tui server status --format json (a list of these)", ServerStatusJson),
    "store-usage": ("moe-tui store usage --format json", StoreUsageJson),
    "gpus": ("moe-tui gpus --format json", GpuSnapshotJson),
    "bench-progress": ("moe-tui bench --events jsonl (progress lines)", BenchProgressJson),
    "bench-result": ("moe-tui bench --events jsonl (the last line)", BenchResultJson),
}
