"""The comparison grid: baseline vs candidate profile, rows = concurrency x metric, honest verdicts.

A cell carries a better/worse verdict only when nothing but the compared field(s) differs between
the columns, the runs are clean, the campaign's planned repeats are in, the control agrees, and the
statistics hold over the whole grid (a server start, not a run, is the unit); otherwise its state
says why not (`judgement.VERDICTS`, in words from `judgement.VERDICT_WORDS`) and it shows no delta.
Modules:
- `model`: the frozen records the UI and exporters render (GridCell, ComparisonGrid, ...);
- `runs`: stored runs as plain records, their flags and provenance, spec/profile diffs, formatting;
- `points`: which spec and runs stand behind each (side, concurrency);
- `confound`: every difference besides the varied fields (profile, server args, environment);
- `evidence`: per-run checks: server start identity, output tokens, percentile requests, same
  backend, overlap in time;
- `stats`: moderated (empirical-Bayes) per-side variances over start means, Welch, Holm, repeats
  to settle;
- `control`: the equivalence check at concurrency 2, reported beside the grid;
- `verdict`: each cell tested raw and against the control on its own server starts, families, decisions;
- `grid`: per-cell states, the gate, the frozen cells; `build`: the entry points.
The core never imports Textual and reads nothing: `moe_tui.grids.pair.build_grid` reads the store and calls it.
The package itself brings only the records, the runs' helpers and the verdict names: `build` and `stats`
(numpy) are imported from their modules, so a runner storing a run (`store.summaries` reads `runs`)
does not import the statistics (~0.1 s of CPU a process).
"""

from __future__ import annotations

from moe_tui.compare.model import (
    BASELINE,
    CANDIDATE,
    METRIC_BY_KEY,
    METRICS,
    PRIMARY_METRIC,
    CompareError,
    CompareSettings,
    ComparisonGrid,
    Confounder,
    ControlCheck,
    FamilySummary,
    GridCell,
    MetricDef,
    PlanCount,
    ProvenanceRow,
    SidePoint,
    SideStats,
    ThroughputSeries,
)
from moe_tui.compare.runs import (
    NOT_RECORDED,
    PROVENANCE_FIELDS,
    format_number,
    format_pct,
    run_flags_in_words,
    run_suspect_flags,
    snapshot_diff,
    spec_field_diffs,
)
from moe_tui.judgement import (
    BETTER,
    CONFOUNDED,
    CONTROL_ABSENT,
    CONTROL_AGREES,
    CONTROL_DIFFERS,
    CONTROL_INCONCLUSIVE,
    FLAG_BACKEND_MISMATCH,
    FLAG_CLIENT_BOUND,
    FLAG_CLOCK_DROP,
    FLAG_ENVIRONMENT_DIFFERS,
    FLAG_FOREIGN_GPU_PROCESS,
    FLAG_INCOMPLETE,
    FLAG_PROFILE_CHANGED,
    FLAG_REQUEST_ERRORS,
    FLAG_THROTTLED,
    INTERIM,
    NO_DATA,
    NOISE_UNKNOWN,
    REFUSED,
    UNRELIABLE,
    UNVERIFIED,
    VERDICT_WORDS,
    VERDICTS,
    WITHIN_NOISE,
    WORSE,
)

CONTROL_METRIC = PRIMARY_METRIC

__all__ = [
    "BASELINE", "CANDIDATE", "METRIC_BY_KEY",
    "METRICS", "PRIMARY_METRIC", "CompareError", "CompareSettings", "ComparisonGrid", "Confounder",
    "ControlCheck", "FamilySummary", "GridCell", "MetricDef", "PlanCount", "ProvenanceRow", "SidePoint",
    "SideStats", "ThroughputSeries", "NOT_RECORDED", "PROVENANCE_FIELDS", "format_number", "format_pct",
    "run_flags_in_words", "run_suspect_flags", "snapshot_diff", "spec_field_diffs",
    "BETTER", "CONFOUNDED", "CONTROL_ABSENT", "CONTROL_AGREES",
    "CONTROL_DIFFERS", "CONTROL_INCONCLUSIVE", "FLAG_BACKEND_MISMATCH", "FLAG_CLIENT_BOUND", "FLAG_CLOCK_DROP",
    "FLAG_ENVIRONMENT_DIFFERS", "FLAG_FOREIGN_GPU_PROCESS", "FLAG_INCOMPLETE", "FLAG_PROFILE_CHANGED",
    "FLAG_REQUEST_ERRORS", "FLAG_THROTTLED", "INTERIM", "NO_DATA", "NOISE_UNKNOWN", "REFUSED", "UNRELIABLE",
    "UNVERIFIED", "VERDICT_WORDS", "VERDICTS", "WITHIN_NOISE", "WORSE", "CONTROL_METRIC"
]
