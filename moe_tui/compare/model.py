"""The comparison grid's data model: metrics, settings, and the frozen records the UI renders.

Everything a screen or an exporter shows is a field here, computed by `moe_tui.compare.grid`;
renderers only format. Verdict and control-state codes are `moe_tui.judgement`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from moe_tui import judgement as J
from moe_tui.profiles import SettingDiff
from moe_tui.records.grid import CellJson, ControlState, GridJson
from moe_tui.spec import FieldDiff

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

BASELINE = "baseline"
CANDIDATE = "candidate"
PRIMARY_METRIC = "output_throughput"


class CompareError(ValueError):
    """The comparison cannot be built (e.g. an unknown profile). The message says what and where."""


@dataclass(frozen=True)
class MetricDef:
    key: str  # sglang bench_serving summary field name
    label: str
    unit: str
    higher_is_better: bool

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def primary(self) -> bool:
        return self.key == PRIMARY_METRIC


METRICS: tuple[MetricDef, ...] = (
    MetricDef("output_throughput", "Output tok/s", "tok/s", True),
    MetricDef("mean_ttft_ms", "Mean TTFT", "ms", False),
    MetricDef("p99_ttft_ms", "P99 TTFT", "ms", False),
    MetricDef("mean_tpot_ms", "Mean TPOT", "ms", False),
    MetricDef("mean_itl_ms", "Mean ITL", "ms", False),
    MetricDef("mean_e2e_latency_ms", "Mean E2E", "ms", False),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}


class PlanCount(NamedTuple):
    """Queue items of one (profile, requested spec fingerprint): how many planned, how many still to run,
    and how many of the latest plan touching it were cut (cancelled, skipped, or cleared from the queue)."""

    planned: int
    pending: int  # pending or running
    cut: int = 0
    # Items of plans (campaigns) done in full, nothing pending or cut: the runs a cell had before the open plan.
    # A cell with runs beyond the open plan's keeps its verdict, provisional, while the plan runs.
    earlier: int = 0


@dataclass(frozen=True)
class CompareSettings:
    """What is compared and the bars a verdict must clear (defaults in `moe_tui.judgement`)."""

    vary: frozenset[str] = J.DEFAULT_VARY
    include_flagged: bool = False
    min_effect_pct: float = J.MIN_EFFECT_PCT
    alpha: float = J.FAMILY_ALPHA
    control_margin_pct: float = J.CONTROL_MARGIN_PCT
    # Show verdicts the control did not back (absent, inconclusive, differs), labelled "uncontrolled".
    accept_uncontrolled: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "vary", frozenset(self.vary))
        if not self.vary:
            raise CompareError("--vary: name at least one field the comparison varies")
        if not 0 <= self.min_effect_pct < 100:
            raise CompareError(f"minimum effect must be in [0, 100) percent, got {self.min_effect_pct}")
        if not 0 < self.control_margin_pct < 100:
            raise CompareError(f"control margin must be in (0, 100) percent, got {self.control_margin_pct}")


@dataclass(frozen=True)
class SidePoint:
    """One side (baseline or candidate) at one concurrency: which runs the numbers come from."""

    side: str
    concurrency: int
    fingerprint: str | None  # the chosen spec; None when the side has no run here
    spec: Mapping[str, Any] | None
    run_ids: tuple[int, ...]  # complete runs averaged (clean ones; flagged too with include_flagged)
    excluded_run_ids: tuple[int, ...]  # incomplete/failed runs, and flagged runs left out
    flagged_run_ids: tuple[int, ...]  # complete runs carrying a suspect flag
    other_fingerprints: tuple[str, ...]  # other specs this side has at this concurrency
    flags: tuple[str, ...]  # suspect flag codes of the runs of this spec, sorted
    flag_notes: tuple[str, ...]  # every flag in words with run ids (suspect and informational)
    notes: tuple[str, ...]  # informational: other specs exist, why this spec was chosen
    unknown_fields: tuple[str, ...] = ()  # spec fields an imported record did not carry

    @property
    def n(self) -> int:
        return len(self.run_ids)

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12] if self.fingerprint else ""


@dataclass(frozen=True)
class SideStats:
    """One side's numbers for one metric at one concurrency, with its display string."""

    n: int
    mean: float | None
    std: float | None  # sample standard deviation; None when n < 2
    values: tuple[float, ...]
    text: str  # "218.7 ± 4.1 (n=5)", "10.36 (n=1)", "no run", "not reported"; "+1 flagged left out"
    n_flagged_excluded: int = 0
    n_flagged_included: int = 0


@dataclass(frozen=True)
class Confounder:
    """A difference between the two columns other than the compared field(s)."""

    field: str
    baseline: str
    candidate: str
    source: str  # "profile" | "server_args" | "environment" | "control" | "campaign"

    def describe(self) -> str:
        if self.source in ("control", "campaign"):  # said in words: no per-side values
            return self.field
        return f"{self.field}: {self.baseline} vs {self.candidate}"


@dataclass(frozen=True)
class GridCell:
    """One (concurrency, metric) cell. Every string the UI needs is precomputed."""

    concurrency: int
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    primary: bool  # output throughput: the family whose false-verdict rate is controlled first
    baseline: SideStats
    candidate: SideStats
    comparable: bool  # both sides have complete runs of one identical fingerprint
    fingerprint: str | None
    spec_diffs: tuple[FieldDiff, ...]  # when the fingerprints differ
    confounders: tuple[Confounder, ...]  # why a cell is confounded
    refusal: str  # "" when a delta is shown; otherwise why not, in words
    delta: float | None  # candidate - baseline, in `unit`
    delta_pct: float | None  # of the baseline mean
    ci_low: float | None  # the family-corrected interval the verdict used (`ci_confidence`), `unit`
    ci_high: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    df: float | None  # Welch-Satterthwaite degrees of freedom of the test
    p_value: float | None  # two-sided, of this cell alone
    p_adjusted: float | None  # Holm-adjusted within the cell's family
    verdict: str  # one of judgement.VERDICTS
    reasons: tuple[str, ...]  # why this verdict (or why none), in words
    repeats_needed: int | None  # per side, for a within-noise cell; None if not estimable
    baseline_flags: tuple[str, ...]
    candidate_flags: tuple[str, ...]
    delta_text: str  # "+14.0% (+30.5 tok/s)" or ""
    ci_text: str  # "[+8.1%, +19.9%]" or ""
    verdict_text: str  # judgement.VERDICT_WORDS[verdict] plus a short qualifier
    flags_text: str  # "B: client_bound; C: backend_mismatch" or ""
    # An investigation of this cell (moe-tui investigate), in words: "under investigation: 3 of 8
    # runs done" while open, "investigated: before -> after" once complete; "" when none.
    investigation: str = ""
    n_starts_baseline: int = 0  # server starts behind each side's mean: the samples of the test
    n_starts_candidate: int = 0
    ci_confidence: float | None = None  # the interval's level after the family correction (Bonferroni)
    uncontrolled: str = ""  # why the control did not back this verdict (shown anyway, or withheld); "" otherwise
    # The cell against the control measured on the same server starts (difference in differences: the
    # log ratio of cell to control, candidate minus baseline), at the cell's family-corrected level.
    control_relative_pct: float | None = None
    control_relative_ci_pct: tuple[float, float] | None = None
    control_starts: tuple[int, int] = (0, 0)  # server starts per side that measured both
    # Why the verdict may still change ("3 run(s) queued for this cell; ..."): the cell's runs so far give
    # this verdict while a new plan for it is queued; "" otherwise.
    provisional: str = ""
    # A within-noise cell whose interval reaches past halving and doubling: no delta shown, the reason first.
    ci_too_wide: bool = False

    @property
    def flagged(self) -> bool:
        return bool(self.baseline_flags or self.candidate_flags)

    @property
    def family(self) -> str:
        return "primary" if self.primary else "secondary"


@dataclass(frozen=True)
class ProvenanceRow:
    key: str
    baseline: str  # "(not recorded)" when absent; "mixed: a | b" when the side's runs disagree
    candidate: str
    differs: bool  # both recorded and different


@dataclass(frozen=True)
class ControlCheck:
    """The equivalence check at the control concurrency (2), reported beside the grid."""

    state: str  # judgement.CONTROL_STATES
    concurrency: int | None
    delta_pct: float | None
    ci_low_pct: float | None  # the equivalence interval (90%)
    ci_high_pct: float | None
    margin_pct: float
    n_baseline: int
    n_candidate: int
    text: str
    environment_differences: tuple[str, ...] = ()  # host, clocks seen, driver ... beside the check
    overlapping: bool = True  # the control's own runs of the two sides overlap in time

    @property
    def status(self) -> str:  # the old name, kept for readers of the previous model
        return self.state

    @property
    def failed(self) -> bool:
        return self.state == J.CONTROL_DIFFERS


@dataclass(frozen=True)
class ThroughputSeries:
    """One side's output throughput per concurrency (None where it has no complete run)."""

    concurrencies: tuple[int, ...]
    mean: tuple[float | None, ...]
    std: tuple[float | None, ...]
    n: tuple[int, ...]
    comparable: tuple[bool, ...]
    flagged_mean: tuple[float | None, ...] = ()  # the mean of the flagged runs left out (drawn hollow)


@dataclass(frozen=True)
class FamilySummary:
    """One multiple-testing family: its tested cells and what an A/A grid of its size would show."""

    name: str  # "primary" | "secondary"
    metrics: tuple[str, ...]
    tested: int  # cells that reached the test
    alpha: float
    expected_false_uncorrected: float  # tested x alpha: false verdicts per A/A grid without correction
    max_false_rate: float  # Holm: chance of any false verdict in the family, at most alpha


@dataclass(frozen=True)
class ComparisonGrid:
    baseline_name: str
    candidate_name: str
    metrics: tuple[MetricDef, ...]
    concurrencies: tuple[int, ...]
    cells: tuple[GridCell, ...]  # concurrency-major, metric order as in `metrics`
    points: Mapping[tuple[str, int], SidePoint]
    baseline_series: ThroughputSeries
    candidate_series: ThroughputSeries
    backend_diff: tuple[SettingDiff, ...]  # the compared (varied) settings that differ
    launch_diff: tuple[SettingDiff, ...]  # every other launch setting that differs
    identity_diff: tuple[SettingDiff, ...]  # name, port, ...: shown separately, harmless
    baseline_profile: Mapping[str, Any]
    candidate_profile: Mapping[str, Any]
    provenance: tuple[ProvenanceRow, ...]
    control: ControlCheck
    warnings: tuple[str, ...]  # whole-comparison warnings, most important first
    flags: tuple[str, ...]  # whole-comparison flags (FLAG_ENVIRONMENT_DIFFERS)
    simulated: bool
    specs: Mapping[str, Mapping[str, Any]]
    spec_users: Mapping[str, tuple[str, ...]]
    settings: CompareSettings = field(default_factory=CompareSettings)
    confounders: tuple[Confounder, ...] = ()  # union over the grid, for the summary
    families: tuple[FamilySummary, ...] = ()
    method: tuple[str, ...] = ()  # the rules in force, in words
    # Roofline % per concurrency and the correctness gate (grid_extras.GridExtras), attached by the
    # service that reads them; None for a grid built from runs alone.
    extras: Any = None

    def cell(self, concurrency: int, metric: str) -> GridCell:
        for c in self.cells:
            if c.concurrency == concurrency and c.metric == metric:
                return c
        raise KeyError(f"no cell for concurrency {concurrency}, metric {metric!r}")

    def point(self, side: str, concurrency: int) -> SidePoint:
        return self.points[(side, concurrency)]

    def rows(self, concurrency: int) -> list[GridCell]:
        return [c for c in self.cells if c.concurrency == concurrency]

    def verdict_counts(self) -> dict[str, int]:
        counts = {v: 0 for v in J.VERDICTS}
        for c in self.cells:
            counts[c.verdict] += 1
        return counts

    @property
    def expected_false_verdicts(self) -> float:
        """Upper bound on the mean number of false better/worse in an A/A grid of this size."""
        return sum(f.max_false_rate for f in self.families if f.tested)

    def to_json_dict(self) -> GridJson:
        """`moe-tui compare --format json`: {"control": {...}, "cells": [...]} (the issue's contract)."""
        ctl = self.control
        cells: list[CellJson] = []
        for c in self.cells:
            ci = [c.ci_low_pct, c.ci_high_pct] if c.ci_low_pct is not None and c.ci_high_pct is not None else None
            cells.append({"concurrency": c.concurrency, "metric": c.metric, "verdict": c.verdict,
                          "n_baseline": c.baseline.n, "n_candidate": c.candidate.n,
                          "starts_baseline": c.n_starts_baseline, "starts_candidate": c.n_starts_candidate,
                          "baseline_mean": c.baseline.mean, "candidate_mean": c.candidate.mean,
                          "delta_pct": c.delta_pct, "ci_pct": ci, "ci_confidence": c.ci_confidence,
                          "ci_too_wide": c.ci_too_wide,
                          "uncontrolled": c.uncontrolled or None,
                          "provisional": bool(c.provisional), "provisional_reason": c.provisional or None,
                          "control_relative_pct": c.control_relative_pct,
                          "control_relative_ci_pct": (list(c.control_relative_ci_pct)
                                                      if c.control_relative_ci_pct else None),
                          "control_starts": list(c.control_starts), "reasons": list(c.reasons)})
        # ControlCheck.state is one of judgement.CONTROL_STATES, the record's literal
        out: GridJson = {"control": {"state": cast(ControlState, ctl.state), "concurrency": ctl.concurrency, "delta_pct": ctl.delta_pct,
                            "ci_pct": ([ctl.ci_low_pct, ctl.ci_high_pct]
                                       if ctl.ci_low_pct is not None and ctl.ci_high_pct is not None else None),
                            "margin_pct": ctl.margin_pct, "n_baseline": ctl.n_baseline,
                            "n_candidate": ctl.n_candidate, "text": ctl.text,
                            "environment_differences": list(ctl.environment_differences),
                            "overlapping": ctl.overlapping},
                         "cells": cells}
        if self.extras is not None:
            out["extras"] = self.extras.to_json()
        if any(c.investigation for c in self.cells):
            out["investigations"] = [{"concurrency": c.concurrency, "metric": c.metric, "state": c.investigation}
                                     for c in self.cells if c.investigation]
        return out

    def to_frame(self) -> pd.DataFrame:
        """One row per cell with the raw numbers (for analysis; the exporters format their own)."""
        import pandas as pd

        rows = []
        for c in self.cells:
            rows.append({
                "concurrency": c.concurrency, "metric": c.metric, "unit": c.unit, "primary": c.primary,
                "higher_is_better": c.higher_is_better,
                "baseline_fingerprint": self.points[(BASELINE, c.concurrency)].fingerprint,
                "candidate_fingerprint": self.points[(CANDIDATE, c.concurrency)].fingerprint,
                "baseline_n": c.baseline.n, "baseline_mean": c.baseline.mean, "baseline_std": c.baseline.std,
                "candidate_n": c.candidate.n, "candidate_mean": c.candidate.mean,
                "candidate_std": c.candidate.std, "comparable": c.comparable, "delta": c.delta,
                "delta_pct": c.delta_pct, "ci_low": c.ci_low, "ci_high": c.ci_high,
                "ci_low_pct": c.ci_low_pct, "ci_high_pct": c.ci_high_pct, "df": c.df,
                "p_value": c.p_value, "p_adjusted": c.p_adjusted, "verdict": c.verdict,
                "reasons": "; ".join(c.reasons), "repeats_needed": c.repeats_needed, "refusal": c.refusal,
                "baseline_flags": ",".join(c.baseline_flags), "candidate_flags": ",".join(c.candidate_flags),
            })
        return pd.DataFrame(rows)
