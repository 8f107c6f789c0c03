"""The index of moe-tui's published JSON exports: each export's name (docs/schemas/<name>.schema.json),
the command that writes it and its typed record (`moe_tui.export.records`, `moe_tui.export.grid_records`).
tests/test_export_schemas.py generates the schemas from these records and validates real exports.
"""

from __future__ import annotations

from moe_tui.export.grid_records import (
    ExplanationJson,
    GridJson,
    InvestigationPlanJson,
    InvestigationReportJson,
    RooflineJson,
)
from moe_tui.export.records import (
    BenchProgressJson,
    BenchRecordJson,
    BenchResultJson,
    DoctorJson,
    ExportPathsJson,
    GpuSnapshotJson,
    ProfilesCheckJson,
    ProfilesShowJson,
    QueueAddJson,
    QueueListJson,
    RunnerStatusJson,
    ServerStatusJson,
    StoreUsageJson,
)

# name -> (what writes it, its record type); docs/schemas/<name>.schema.json for each.
EXPORTS: dict[str, tuple[str, type]] = {
    "compare": ("moe-tui compare --format json", GridJson),
    "export": ("moe-tui export --format json", ExportPathsJson),
    "queue-list": ("moe-tui queue list --format json", QueueListJson),
    "queue-add": ("moe-tui queue add --format json", QueueAddJson),
    "investigate-plan": ("moe-tui investigate --format json", InvestigationPlanJson),
    "investigate-report": ("moe-tui investigate --report --format json (a list of these)", InvestigationReportJson),
    "roofline": ("moe-tui roofline --format json", RooflineJson),
    "explain": ("moe-tui explain --format json", ExplanationJson),
    "doctor": ("moe-tui doctor --box --format json", DoctorJson),
    "profiles-check": ("moe-tui profiles check --format json", ProfilesCheckJson),
    "profiles-show": ("moe-tui profiles show --format json", ProfilesShowJson),
    "server-status": ("moe-tui server status --format json (a list of these)", ServerStatusJson),
    "store-usage": ("moe-tui store usage --format json", StoreUsageJson),
    "run-status": ("moe-tui run --status --format json", RunnerStatusJson),
    "gpus": ("moe-tui gpus --format json", GpuSnapshotJson),
    "bench-progress": ("moe-tui bench --events jsonl (progress lines)", BenchProgressJson),
    "bench-result": ("moe-tui bench --events jsonl (the last line)", BenchResultJson),
    "bench-record": ("moe-tui bench --output-file (one line a run)", BenchRecordJson),
}
