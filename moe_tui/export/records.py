"""The JSON that moe-tui writes for others to read, as typed records: one TypedDict per export, the
published contract. docs/schemas/<name>.schema.json is generated from these (tests/test_export_schemas.py
regenerates and compares them, and validates every export written from a real store against its
schema), so the types here, the schemas there and what the commands write agree.

Why TypedDicts: every export is a JSON object that its encoder already builds as a dict (`json.dumps`
of it is the export). A TypedDict gives that dict a checked shape (mypy --strict checks every
literal annotated with one) at no run-time cost and without changing one byte written; a dataclass
would need a conversion step at each encoder and would change who builds the objects (the grid's
and the store's internals, which this module does not touch).

The comparison's records (grid, investigate, roofline) are in `moe_tui.export.grid_records`;
`moe_tui.export.schemas.EXPORTS` names each export: the command that writes it and its record
type. Where a part of an export is free-form by nature (a profile's settings, SGLang's
/server_info, NVML's per-GPU readings, the client's self-check), the field's type says so with a
named alias (`FreeForm`).
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from moe_tui.bench.live import ProgressFigures
from moe_tui.records import (
    ExecutorJobJson,
    FreeForm,
    GpuSnapshotJson,
    Number,
    QueueItemJson,
    QueueSummaryJson,
    RunnerStatusJson,
    SpecJson,
)
from moe_tui.records.store import CampaignUsageJson, ProfileUsageJson

# shared with the store and the runner: moe_tui.records
__all__ = ["ExecutorJobJson", "FreeForm", "GpuSnapshotJson", "Number", "QueueItemJson", "QueueSummaryJson",
           "RunnerStatusJson", "SpecJson"]


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


# -- doctor --------------------------------------------------------------------------------------
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


class StoreUsageJson(TypedDict):
    """`moe-tui store usage --format json`."""

    runs: int
    file_bytes: int
    free_bytes: int
    profiles: list[ProfileUsageJson]
    campaigns: list[CampaignUsageJson]
    bytes_by_kind: dict[str, int]  # the file's pages by what holds them (store.space.bytes_by_kind)
    keep_samples_runs: int | None  # per-request samples kept for the newest N runs; None: all kept


# -- moe-tui bench --events jsonl (what the runner reads from its client process) --------------------
class BenchProgressJson(ProgressFigures):
    """A progress line (`moe_tui.events.BenchProgress.to_dict`), about every 250 ms: the live figures
    (`bench.live.ProgressFigures`) with what the line is and which run it belongs to."""

    type: Literal["BenchProgress"]
    time: float
    run_id: int | None


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


class MetricsJson(TypedDict):
    """A run's summary as `moe_tui.metrics.calculate_metrics` makes it (bench_serving's names)."""

    duration: float | None
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None
    input_throughput: float | None
    output_throughput: float | None
    total_throughput: float | None
    mean_e2e_latency_ms: float | None
    median_e2e_latency_ms: float | None
    std_e2e_latency_ms: float | None
    p90_e2e_latency_ms: float | None
    p95_e2e_latency_ms: float | None
    p99_e2e_latency_ms: float | None
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    std_ttft_ms: float | None
    p90_ttft_ms: float | None
    p95_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    std_tpot_ms: float | None
    p90_tpot_ms: float | None
    p95_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    std_itl_ms: float | None
    p90_itl_ms: float | None
    p95_itl_ms: float | None
    p99_itl_ms: float | None
    max_itl_ms: float | None
    concurrency: float | None
    max_output_tokens_per_s: float | None
    max_concurrent_requests: int


class BenchRecordJson(MetricsJson):
    """`moe-tui bench --output-file F`: one line appended per measured run, bench_serving's record
    (its field names, request_rate inf as the bare token Infinity) with moe-tui's verdict on itself."""

    backend: str
    dataset_name: str
    request_rate: float
    max_concurrency: int
    random_input_len: int
    random_output_len: int
    random_range_ratio: float
    server_info: FreeForm | None  # SGLang's /server_info as it answered
    status: Literal["complete", "incomplete", "failed"]
    errors_by_kind: dict[str, int]
    flags: list[str]
    error: str
    selfcheck: FreeForm  # the client's self-checks (moe_tui.bench.live), open-ended by design
    client: str
    spec_fingerprint: str
    spec: SpecJson


