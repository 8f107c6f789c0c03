"""moe-tui's shared typed records: the JSON-shaped values that cross a boundary (the store's columns,
the control socket's answers, the exports), as TypedDicts that every layer may import (this package
imports nothing of moe-tui, so the store, the runner and the exports share one definition).

Why TypedDicts here (docs/architecture.md, "Typed records"): these values are JSON objects already
(written to a store column, sent over the control socket, dumped by an export), so a TypedDict
types the dict each encoder builds without a conversion step and without changing one byte written;
mypy --strict then refuses a misspelt key (tests/test_typed_records.py). In-memory values that never
become JSON are frozen dataclasses where they live (`moe_tui.store.queue_item.QueueItem`,
`moe_tui.spec.BenchmarkSpec`).

What is free-form by nature is named so: `FreeForm`, always with a comment saying whose payload
it is (SGLang's /server_info, a user's profile table, NVML's readings, an imported file's fields).

By concept: `base` (FreeForm and its named uses, the canonical spec), `queue` (queue items, the
controller's answers, campaign/server-start/gate rows, explain's plan, the runner's status), `run`
(provenance and its parts, the telemetry summary and GPU snapshot, self-check entries). Import them
from here.
"""

from moe_tui.records.base import (  # noqa: F401
    BenchSummary,
    DecodedTexts,
    FreeForm,
    GpuReadings,
    GridFactsJson,
    Number,
    Options,
    ProfileSnapshot,
    SelfChecks,
    SglangJson,
    SpecJson,
    SpecOverrides,
    StoredProvenance,
    StoredSpec,
    StoredTelemetry,
)
from moe_tui.records.queue import (  # noqa: F401
    CampaignAddedJson,
    CampaignArgsJson,
    CampaignRowJson,
    CappedPlanJson,
    ControlPlanJson,
    DeletedJson,
    ExecutorJobJson,
    ExplainCellJson,
    ExplainDefinitionJson,
    ExplainPlanItemJson,
    ExplainPlanJson,
    GateSamplesRow,
    ItemStateJson,
    PausedJson,
    PlanAnswerJson,
    PlannedItemJson,
    QueueItemJson,
    QueueSummaryJson,
    RunnerStatusJson,
    ServerStartRow,
)
from moe_tui.records.run import (  # noqa: F401
    ClientLimitsJson,
    ForeignProcessJson,
    GpuFactsJson,
    GpuRunSummaryJson,
    GpuSnapshotJson,
    HostFactsJson,
    NoTelemetryJson,
    OverallRunSummaryJson,
    ProfiledFactsJson,
    ProfilerAnswerJson,
    ProvenanceJson,
    QueueFactsJson,
    RequestRowJson,
    ServerFactsJson,
    ServerLoadJson,
    SimClockJson,
    TelemetrySummaryJson,
    TokenEvidenceJson,
    WarmupPassJson,
)

__all__ = [
    "BenchSummary",
    "CampaignAddedJson",
    "CampaignArgsJson",
    "CampaignRowJson",
    "CappedPlanJson",
    "ClientLimitsJson",
    "ControlPlanJson",
    "DecodedTexts",
    "DeletedJson",
    "ExecutorJobJson",
    "ExplainCellJson",
    "ExplainDefinitionJson",
    "ExplainPlanItemJson",
    "ExplainPlanJson",
    "ForeignProcessJson",
    "FreeForm",
    "GpuReadings",
    "GateSamplesRow",
    "GpuFactsJson",
    "GpuRunSummaryJson",
    "GpuSnapshotJson",
    "GridFactsJson",
    "HostFactsJson",
    "ItemStateJson",
    "NoTelemetryJson",
    "Number",
    "Options",
    "OverallRunSummaryJson",
    "PausedJson",
    "PlanAnswerJson",
    "PlannedItemJson",
    "ProfileSnapshot",
    "ProfiledFactsJson",
    "ProfilerAnswerJson",
    "ProvenanceJson",
    "QueueFactsJson",
    "QueueItemJson",
    "QueueSummaryJson",
    "RequestRowJson",
    "RunnerStatusJson",
    "ServerFactsJson",
    "ServerLoadJson",
    "SelfChecks",
    "ServerStartRow",
    "SglangJson",
    "SimClockJson",
    "SpecJson",
    "SpecOverrides",
    "StoredProvenance",
    "StoredSpec",
    "StoredTelemetry",
    "TelemetrySummaryJson",
    "TokenEvidenceJson",
    "WarmupPassJson",
]
