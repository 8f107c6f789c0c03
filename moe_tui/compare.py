"""The comparison grid: baseline vs candidate profile, rows = concurrency x metric.

The grid refuses to show a delta unless both cells measured the same benchmark spec (identical
fingerprint); a refused cell says why (the spec fields that differ with both values, or which side
has no run). With repeats it gives each side's mean and standard deviation, the delta with a 95%
Welch confidence interval, the delta as a percentage of the baseline mean, a verdict ("better",
"worse", "within noise") and, for a "within noise" cell, an estimate of the repeats per side that
would settle it. A single repeat on either side gives the delta marked "n=1, noise unknown".

It also carries what makes a comparison suspect: run flags (backend fallback, client-bound,
request errors, incomplete runs, throttling, clock drop, foreign GPU processes), the launch
settings that differ between the two profile snapshots beyond the MoE backend, provenance
differences (versions, GPUs, driver), and the control check: at a low-concurrency point
(2, else 1) both backends should measure about the same, so a difference there beyond noise says
the environments differ (the seed's concurrency-2 sanity check, made automatic).

Everything the UI shows is computed here and stored as display strings next to the numbers;
the UI and the exporters only render. Pure: numbers in, numbers and strings out; the one
entry point that touches I/O is `build_grid`, which only reads the store handed to it.

Statistics (documented for the reader of a verdict):
- Per side: mean and sample standard deviation (ddof=1) of the complete runs' summary values.
- Delta = candidate mean - baseline mean. Standard error sqrt(s_b^2/n_b + s_c^2/n_c); degrees of
  freedom by Welch-Satterthwaite; CI = delta +/- t_{0.975, df} * se (scipy.stats.t).
- The CI in percent divides the absolute CI by the baseline mean (the baseline mean is treated as
  fixed; fine while its own error is small, which is what a "better/worse" verdict needs anyway).
- Verdict: the CI excludes 0 -> better or worse by the metric's direction; otherwise within noise.
- Repeats to settle: the smallest n per side such that a two-sided 5% Welch test would detect the
  observed delta with 80% power, using the observed standard deviations:
  (t_{0.975,df(n)} + t_{0.80,df(n)}) * sqrt((s_b^2 + s_c^2)/n) <= |delta|. It assumes the observed
  delta and spreads are the true ones, so it is a rough guide, not a promise; None when the
  observed delta is 0 or more than 1000 repeats would be needed.
- Control check: uses a 99% CI (it raises an alarm over the whole comparison, so it is held to a
  stricter bar than a single cell; an A/A comparison trips it about 1% of the time) or, with a
  single repeat on either side, a difference over 5% of the baseline.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from moe_tui.profiles import ProfileError, SettingDiff, profile_diff, profile_from_dict
from moe_tui.spec import BenchmarkSpec, FieldDiff, SpecError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from moe_tui.store import Store

# -- vocabulary -----------------------------------------------------------------------------------
BASELINE = "baseline"
CANDIDATE = "candidate"

BETTER = "better"
WORSE = "worse"
WITHIN_NOISE = "within noise"
NOISE_UNKNOWN = "n=1, noise unknown"
DIFFERENT_SPEC = "different spec"
NO_DATA = "no data"
VERDICTS = (BETTER, WORSE, WITHIN_NOISE, NOISE_UNKNOWN, DIFFERENT_SPEC, NO_DATA)

# Suspect flags a side of a cell can carry. The first six are also the run flag names the
# controller writes into RunRecord.flags; the grid derives them from telemetry, selfcheck,
# provenance and the summary too, so a run imported without flags is judged all the same.
FLAG_BACKEND_MISMATCH = "backend_mismatch"
FLAG_CLIENT_BOUND = "client_bound"
FLAG_REQUEST_ERRORS = "request_errors"
FLAG_THROTTLED = "throttled"
FLAG_CLOCK_DROP = "clock_drop"
FLAG_FOREIGN_GPU_PROCESS = "foreign_gpu_process"
FLAG_INCOMPLETE = "incomplete"  # incomplete/failed runs of this spec exist (never averaged in)
FLAG_PROFILE_CHANGED = "profile_changed"  # the averaged runs used different profile snapshots
FLAG_ENVIRONMENT_DIFFERS = "environment_differs"  # grid-level: the control check failed

CONFIDENCE = 0.95
CONTROL_CONFIDENCE = 0.99
CONTROL_CONCURRENCIES = (2, 1)  # preferred first: the seed's sanity check ran at concurrency 2
CONTROL_N1_THRESHOLD_PCT = 5.0
# Backends are not identical at batch 1-2 either (the seed: 19.29 vs 19.24 tok/s, 0.3%): with
# quiet repeats a tiny real difference is "beyond noise" without meaning the environments differ.
# The alarm needs both: beyond noise AND at least this large.
CONTROL_MIN_EFFECT_PCT = 2.0
CONTROL_METRIC = "output_throughput"
SETTLE_POWER = 0.80
SETTLE_MAX_REPEATS = 1000
CLOCK_DROP_SUSPECT_PCT = 10.0  # the same bar as telemetry.CLOCK_DROP_SUSPECT_PCT


@dataclass(frozen=True)
class MetricDef:
    key: str  # sglang bench_serving summary field name
    label: str
    unit: str
    higher_is_better: bool

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"


METRICS: tuple[MetricDef, ...] = (
    MetricDef("output_throughput", "Output tok/s", "tok/s", True),
    MetricDef("mean_ttft_ms", "Mean TTFT", "ms", False),
    MetricDef("p99_ttft_ms", "P99 TTFT", "ms", False),
    MetricDef("mean_tpot_ms", "Mean TPOT", "ms", False),
    MetricDef("mean_itl_ms", "Mean ITL", "ms", False),
    MetricDef("mean_e2e_latency_ms", "Mean E2E", "ms", False),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}


class CompareError(ValueError):
    """The comparison cannot be built (e.g. an unknown profile). The message says what and where."""


# -- the model the UI renders -----------------------------------------------------------------------
@dataclass(frozen=True)
class SidePoint:
    """One side (baseline or candidate) at one concurrency: which runs the numbers come from."""

    side: str
    concurrency: int
    fingerprint: str | None  # the chosen spec; None when the side has no run here
    spec: Mapping[str, Any] | None
    run_ids: tuple[int, ...]  # complete runs of `fingerprint`, the ones averaged
    excluded_run_ids: tuple[int, ...]  # incomplete/failed runs of `fingerprint`, never averaged
    other_fingerprints: tuple[str, ...]  # other specs this side has at this concurrency
    flags: tuple[str, ...]  # suspect flag codes (FLAG_*), sorted
    flag_notes: tuple[str, ...]  # the same, said in words with run ids
    notes: tuple[str, ...]  # informational: other specs exist, why this spec was chosen

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
    text: str  # "218.7 ± 4.1 (n=5)", "10.36 (n=1)", "no run", "no complete run", "not reported"


@dataclass(frozen=True)
class GridCell:
    """One (concurrency, metric) cell. Every string the UI needs is precomputed."""

    concurrency: int
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    baseline: SideStats
    candidate: SideStats
    comparable: bool  # True only when both sides have complete runs of one identical fingerprint
    fingerprint: str | None  # the shared fingerprint when comparable
    spec_diffs: tuple[FieldDiff, ...]  # when the fingerprints differ
    refusal: str  # "" when a delta is shown; otherwise why not, in words
    delta: float | None  # candidate - baseline, in `unit`
    delta_pct: float | None  # of the baseline mean
    ci_low: float | None
    ci_high: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    df: float | None  # Welch-Satterthwaite degrees of freedom
    verdict: str  # one of VERDICTS
    repeats_needed: int | None  # per side, for a "within noise" cell; None if not estimable
    baseline_flags: tuple[str, ...]
    candidate_flags: tuple[str, ...]
    delta_text: str  # "+14.0% (+30.5 tok/s)" or "" when refused
    ci_text: str  # "[+8.1%, +19.9%]" or ""
    verdict_text: str  # the verdict, or the refusal, or "within noise (~12 repeats/side)"
    flags_text: str  # "B: client_bound; C: backend_mismatch" or ""

    @property
    def flagged(self) -> bool:
        return bool(self.baseline_flags or self.candidate_flags)


@dataclass(frozen=True)
class ProvenanceRow:
    key: str
    baseline: str  # "(not recorded)" when absent; "mixed: a | b" when the side's runs disagree
    candidate: str
    differs: bool  # both recorded and different


@dataclass(frozen=True)
class ControlCheck:
    status: str  # "agrees" | "environment differs" | "unavailable"
    concurrency: int | None
    delta_pct: float | None
    text: str

    @property
    def failed(self) -> bool:
        return self.status == "environment differs"


@dataclass(frozen=True)
class ThroughputSeries:
    """One side's output throughput per concurrency (None where it has no complete run)."""

    concurrencies: tuple[int, ...]
    mean: tuple[float | None, ...]
    std: tuple[float | None, ...]  # None with fewer than two repeats
    n: tuple[int, ...]
    comparable: tuple[bool, ...]  # False where the grid refuses a delta at that concurrency


@dataclass(frozen=True)
class ComparisonGrid:
    baseline_name: str
    candidate_name: str
    metrics: tuple[MetricDef, ...]
    concurrencies: tuple[int, ...]
    cells: tuple[GridCell, ...]  # concurrency-major, metric order as in `metrics`
    points: Mapping[tuple[str, int], SidePoint]  # (side, concurrency) -> SidePoint
    baseline_series: ThroughputSeries
    candidate_series: ThroughputSeries
    backend_diff: tuple[SettingDiff, ...]  # what is being compared (moe_runner_backend)
    launch_diff: tuple[SettingDiff, ...]  # every other launch setting that differs: suspect
    identity_diff: tuple[SettingDiff, ...]  # name, port, ...: shown separately, harmless
    baseline_profile: Mapping[str, Any]  # latest snapshot used ({} when not recorded)
    candidate_profile: Mapping[str, Any]
    provenance: tuple[ProvenanceRow, ...]
    control: ControlCheck
    warnings: tuple[str, ...]  # whole-comparison warnings, most important first
    flags: tuple[str, ...]  # whole-comparison flags (FLAG_ENVIRONMENT_DIFFERS)
    simulated: bool  # any run came from the emulator
    specs: Mapping[str, Mapping[str, Any]]  # fingerprint -> spec dict, every fingerprint shown
    spec_users: Mapping[str, tuple[str, ...]]  # fingerprint -> sides that use it
    extras: Any = None  # issue 15: grid_extras.GridExtras (roofline %, correctness gate)

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
        counts = {v: 0 for v in VERDICTS}
        for c in self.cells:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1  # issue 15: "unreliable" (output differs)
        return counts

    def to_frame(self) -> "pd.DataFrame":
        """One row per cell with the raw numbers (for analysis; the exporters format their own)."""
        import pandas as pd

        rows = []
        for c in self.cells:
            rows.append({
                "concurrency": c.concurrency, "metric": c.metric, "unit": c.unit,
                "higher_is_better": c.higher_is_better,
                "baseline_fingerprint": self.points[(BASELINE, c.concurrency)].fingerprint,
                "candidate_fingerprint": self.points[(CANDIDATE, c.concurrency)].fingerprint,
                "baseline_n": c.baseline.n, "baseline_mean": c.baseline.mean, "baseline_std": c.baseline.std,
                "candidate_n": c.candidate.n, "candidate_mean": c.candidate.mean,
                "candidate_std": c.candidate.std, "comparable": c.comparable, "delta": c.delta,
                "delta_pct": c.delta_pct, "ci_low": c.ci_low, "ci_high": c.ci_high,
                "ci_low_pct": c.ci_low_pct, "ci_high_pct": c.ci_high_pct, "df": c.df,
                "verdict": c.verdict, "repeats_needed": c.repeats_needed, "refusal": c.refusal,
                "baseline_flags": ",".join(c.baseline_flags), "candidate_flags": ",".join(c.candidate_flags),
            })
        return pd.DataFrame(rows)


# -- statistics -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeltaStats:
    delta: float
    delta_pct: float | None
    ci_low: float | None
    ci_high: float | None
    df: float | None


def _t_ppf(q: float, df: float) -> float:
    # scipy.special.stdtrit is the Student t quantile without scipy.stats' per-call overhead.
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def welch_delta(baseline: Sequence[float], candidate: Sequence[float], confidence: float = CONFIDENCE) -> DeltaStats:
    """Delta of means (candidate - baseline) with a Welch CI; no CI when a side has one value."""
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("welch_delta needs at least one value on each side")
    ma, mb = float(a.mean()), float(b.mean())
    delta = mb - ma
    pct = delta / ma * 100.0 if ma != 0 else None
    if a.size < 2 or b.size < 2:
        return DeltaStats(delta, pct, None, None, None)
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se2 = va + vb
    if se2 == 0.0:
        # Identical repeats on both sides: no spread to speak of; the CI is the point itself.
        return DeltaStats(delta, pct, delta, delta, math.inf)
    df = se2 * se2 / (va * va / (a.size - 1) + vb * vb / (b.size - 1))
    half = _t_ppf(0.5 + confidence / 2.0, df) * math.sqrt(se2)
    return DeltaStats(delta, pct, delta - half, delta + half, df)


def verdict_for(ci_low: float, ci_high: float, higher_is_better: bool) -> str:
    if ci_low > 0:
        return BETTER if higher_is_better else WORSE
    if ci_high < 0:
        return WORSE if higher_is_better else BETTER
    return WITHIN_NOISE


def repeats_to_settle(
    std_baseline: float, std_candidate: float, delta: float, *,
    confidence: float = CONFIDENCE, power: float = SETTLE_POWER, max_repeats: int = SETTLE_MAX_REPEATS,
) -> int | None:
    """Repeats per side for a Welch test at `confidence` to detect `delta` with `power`.

    Starts from the normal approximation (a lower bound: t quantiles exceed z) and steps up until
    the t-based condition holds. None when delta is 0 or more than `max_repeats` are needed.
    """
    from scipy.special import ndtri

    if not math.isfinite(delta) or delta == 0:
        return None
    va, vb = std_baseline ** 2, std_candidate ** 2
    if va + vb == 0:
        return 2
    z = float(ndtri(0.5 + confidence / 2.0) + ndtri(power))
    n = max(2, math.ceil(z * z * (va + vb) / (delta * delta)))
    while n <= max_repeats:
        df = (va + vb) ** 2 * (n - 1) / (va * va + vb * vb)
        need = (_t_ppf(0.5 + confidence / 2.0, df) + _t_ppf(power, df)) * math.sqrt((va + vb) / n)
        if need <= abs(delta):
            return n
        n += 1
    return None


# -- input normalisation --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Run:
    id: int
    status: str
    fingerprint: str
    spec: Mapping[str, Any]
    summary: Mapping[str, Any]
    flags: tuple[str, ...]
    profile: Mapping[str, Any]
    provenance: Mapping[str, Any]
    telemetry: Mapping[str, Any]
    selfcheck: Mapping[str, Any]
    error: str
    order: tuple[float, int]  # (finished or created time, id): "most recent" is the largest


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _normalise(run: Any, where: str) -> _Run:
    """A RunRecord (or a mapping with the same names) as the grid's plain record."""
    rid = _get(run, "id")
    fp = _get(run, "fingerprint")
    spec = _get(run, "spec")
    if rid is None or not isinstance(fp, str) or not fp or not isinstance(spec, Mapping):
        raise CompareError(f"{where}: a run needs an id, a fingerprint and a spec dict, got {run!r:.200}")
    when = _get(run, "finished_at") or _get(run, "created_at") or 0.0
    return _Run(
        id=int(rid), status=str(_get(run, "status", "complete")), fingerprint=fp, spec=dict(spec),
        summary=dict(_get(run, "summary") or {}), flags=tuple(_get(run, "flags") or ()),
        profile=dict(_get(run, "profile") or {}), provenance=dict(_get(run, "provenance") or {}),
        telemetry=dict(_get(run, "telemetry") or {}), selfcheck=dict(_get(run, "selfcheck") or {}),
        error=str(_get(run, "error") or ""), order=(float(when), int(rid)),
    )


def _concurrency(run: _Run) -> int | None:
    value = run.spec.get("max_concurrency")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


# Run flags that are not a reason to distrust one cell: "simulated" is the export's banner, and a
# run's own status flags are re-derived from its status.
_NOT_SUSPECT_FLAGS = {"simulated", "complete"}

# -- suspect flags ----------------------------------------------------------------------------------
def run_suspect_flags(run: Any) -> list[tuple[str, str]]:
    """(flag code, words) for one run, from its flags and its stored telemetry/selfcheck/summary."""
    r = run if isinstance(run, _Run) else _normalise(run, "run")
    found: dict[str, str] = {}

    def add(code: str, text: str) -> None:
        found.setdefault(code, f"run {r.id}: {text}")

    for raw in r.flags:
        code = raw.replace("-", "_")  # the bench engine spells it "client-bound"
        if code in _NOT_SUSPECT_FLAGS:
            continue
        add(code, code.replace("_", " "))
    failed = r.summary.get("failed")
    if isinstance(failed, (int, float)) and failed > 0:
        total = (r.summary.get("completed") or 0) + failed
        found[FLAG_REQUEST_ERRORS] = f"run {r.id}: {failed:g} of {total:g} requests failed"
    if r.status in ("incomplete", "failed"):
        add(FLAG_INCOMPLETE, f"{r.status}{': ' + r.error if r.error else ''}")
    # Backend fallback: the server resolved a different MoE backend than the profile asked for.
    prov = r.provenance
    asked = r.profile.get("moe_runner_backend") or _dig(prov, ("server", "requested_backend"))
    resolved = next((v for v in (_dig(prov, p) for p in dict(PROVENANCE_FIELDS)["resolved_backend"]) if v), None)
    mismatch = prov.get("backend_mismatch") or _dig(prov, ("server", "backend_mismatch"))
    if mismatch or (asked and resolved and asked != resolved):
        found[FLAG_BACKEND_MISMATCH] = (
            f"run {r.id}: server resolved MoE backend {resolved!s} but the profile asks {asked!s}"
            if asked and resolved else f"run {r.id}: MoE backend mismatch (silent fallback)"
        )
    client = r.selfcheck.get("client_bound")
    if client:
        reasons = r.selfcheck.get("client_bound_reasons")
        detail = ("; ".join(map(str, reasons)) if isinstance(reasons, list) and reasons
                  else "the client could not keep up")
        found[FLAG_CLIENT_BOUND] = f"run {r.id}: client-bound ({detail})"
    tel = r.telemetry
    if tel:
        overall = tel.get("overall") or {}
        throttles = sorted(set(overall.get("suspect_clock_events") or ())
                           | {e for g in (tel.get("gpus") or {}).values() for e in (g.get("suspect_clock_events") or ())})
        if throttles:
            found[FLAG_THROTTLED] = f"run {r.id}: GPU throttled ({', '.join(throttles)})"
        drop = overall.get("sm_clock_drop_pct")
        if isinstance(drop, (int, float)) and drop >= CLOCK_DROP_SUSPECT_PCT:
            found[FLAG_CLOCK_DROP] = f"run {r.id}: SM clock dropped {drop:.0f}% under load"
        foreign = tel.get("foreign_processes")
        if foreign:
            who = ", ".join(f"pid {p.get('pid')} on GPU {p.get('gpu')}" for p in foreign[:3])
            more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            found[FLAG_FOREIGN_GPU_PROCESS] = f"run {r.id}: foreign GPU process ({who}{more})"
    return sorted(found.items())


# -- spec and profile differences -------------------------------------------------------------------
def spec_field_diffs(baseline_spec: Mapping[str, Any], candidate_spec: Mapping[str, Any],
                     baseline_fp: str = "", candidate_fp: str = "") -> tuple[FieldDiff, ...]:
    """Every spec field that differs, both values; never empty when the fingerprints differ."""
    try:
        diffs = BenchmarkSpec.from_dict(baseline_spec).diff(BenchmarkSpec.from_dict(candidate_spec))
    except SpecError:
        keys = list(dict.fromkeys([*baseline_spec, *candidate_spec]))
        diffs = [FieldDiff(k, baseline_spec.get(k), candidate_spec.get(k)) for k in keys
                 if baseline_spec.get(k) != candidate_spec.get(k)]
    if not diffs and baseline_fp != candidate_fp:
        # The stored specs read the same but were fingerprinted differently (another spec schema
        # or a hand-edited store): still not the same measurement, and we say exactly that.
        diffs = [FieldDiff("fingerprint", baseline_fp[:12], candidate_fp[:12])]
    return tuple(diffs)


_IDENTITY_KEYS = ("name", "description", "port", "host", "python")


def snapshot_diff(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[SettingDiff]:
    """profiles.profile_diff on two stored profile snapshots (falls back to a key-by-key diff)."""
    a = {k: v for k, v in baseline.items() if k != "source"}
    b = {k: v for k, v in candidate.items() if k != "source"}
    try:
        return profile_diff(profile_from_dict(a, "baseline profile snapshot"),
                            profile_from_dict(b, "candidate profile snapshot"))
    except (ProfileError, TypeError, KeyError, AttributeError):
        out = []
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                kind = ("backend" if key == "moe_runner_backend"
                        else "identity" if key in _IDENTITY_KEYS else "launch")
                out.append(SettingDiff(key, a.get(key), b.get(key), kind))
        return out


# -- provenance -----------------------------------------------------------------------------------
# (shown key, where to look in a run's provenance dict, first hit wins). The nested paths are
# moe_tui.provenance.build_provenance's layout; the flat ones cover runs imported from elsewhere.
PROVENANCE_FIELDS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("engine", (("server", "engine"), ("engine",))),
    ("simulated", (("simulated",), ("server", "resolved_args", "simulated"), ("server_info", "simulated"))),
    ("sglang_version", (("server", "sglang_version"), ("sglang_version",), ("server", "resolved_args", "version"),
                        ("server_info", "version"))),
    ("resolved_backend", (("server", "resolved_backend"), ("resolved_backend",),
                          ("server", "resolved_args", "moe_runner_backend"), ("server_info", "moe_runner_backend"))),
    ("gpu_names", (("gpu", "gpu_names"), ("gpu_names",))),
    ("driver_version", (("gpu", "driver_version"), ("driver_version",))),
    ("cuda_version", (("gpu", "cuda_driver_version"), ("cuda_driver_version",), ("cuda_version",))),
    ("hostname", (("host", "hostname"), ("hostname",))),
    ("platform", (("host", "platform"), ("platform",))),
    ("python_version", (("host", "python_version"), ("python_version",))),
    ("moe_tui_version", (("host", "moe_tui_version"), ("moe_tui_version",))),
    ("client", (("client", "name"),)),
    ("client_version", (("client", "version"),)),
)
PROVENANCE_ORDER = tuple(k for k, _ in PROVENANCE_FIELDS)
# Flat keys that are per-run by nature (times, pids, paths) or shown elsewhere (spec, profile).
_VOLATILE_MARKERS = ("time", "_at", "pid", "run_id", "server_start", "log", "argv", "env", "started",
                     "finished", "duration", "uptime", "port", "command", "queue", "url", "path", "executable")
_NOT_PROVENANCE = {"spec", "fingerprint", "spec_summary", "profile", "provenance_schema", "warmup_pass",
                   "server_info", "server", "client", "host", "gpu", "cuda_driver_version", "requested_backend",
                   "backend_mismatch"}
NOT_RECORDED = "(not recorded)"


def _dig(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _provenance_values(run: _Run) -> dict[str, str]:
    out: dict[str, str] = {}
    prov = run.provenance
    for key, paths in PROVENANCE_FIELDS:
        for path in paths:
            value = _dig(prov, path)
            if value is not None and value != {} and value != "":
                out[key] = _render_value(value)
                break
    for key, value in prov.items():
        if key in out or key in _NOT_PROVENANCE or isinstance(value, Mapping) or value is None:
            continue
        if any(m in key for m in _VOLATILE_MARKERS):
            continue
        out[key] = _render_value(value)
    # Telemetry stored with the run fills what provenance lacks (imported or older runs).
    tel = run.telemetry
    for key, src in (("driver_version", "driver_version"), ("cuda_version", "cuda_driver_version")):
        if tel.get(src) and key not in out:
            out[key] = _render_value(tel[src])
    if "gpu_names" not in out and isinstance(tel.get("gpus"), Mapping):
        names = {k: g.get("name") for k, g in tel["gpus"].items() if isinstance(g, Mapping)}
        if any(names.values()):
            out["gpu_names"] = _render_value(names)
    if "engine" not in out and run.profile.get("engine"):
        out["engine"] = str(run.profile["engine"])
    return out


def _render_value(value: Any) -> str:
    if isinstance(value, Mapping) and all(str(k).isdigit() for k in value):
        # {gpu index: name}: in index order, so "8 x NVIDIA RTX PRO 6000" when they agree.
        value = [value[k] for k in sorted(value, key=lambda k: int(k))]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value) and len(set(value)) == 1:
        return f"{len(value)} x {value[0]}"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _side_provenance(runs: Sequence[_Run]) -> dict[str, str]:
    values: dict[str, list[str]] = {}
    for run in sorted(runs, key=lambda r: r.order):
        for key, value in _provenance_values(run).items():
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    return {k: v[0] if len(v) == 1 else "mixed: " + " | ".join(v) for k, v in values.items()}


def _is_simulated(run: _Run) -> bool:
    prov = run.provenance
    return bool(
        run.profile.get("engine") == "sim" or prov.get("engine") == "sim" or _dig(prov, ("server", "engine")) == "sim"
        or prov.get("simulated") or _dig(prov, ("server_info", "simulated"))
        or _dig(prov, ("server", "resolved_args", "simulated")) or "simulated" in run.flags
    )


# -- formatting -----------------------------------------------------------------------------------
def format_number(x: float | None) -> str:
    """Four significant-ish digits a person reads: 1603.0, 218.7, 38.46, 0.123."""
    if x is None or not math.isfinite(x):
        return "-" if x is None else str(x)
    ax = abs(x)
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    if ax == 0:
        return "0"
    return f"{x:#.3g}"


def _signed(x: float, text: str) -> str:
    return text if text.startswith("-") else "+" + text


def format_pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return _signed(x, f"{x:.1f}%")


# -- the grid ---------------------------------------------------------------------------------------
def build_grid_from_runs(
    baseline_runs: Iterable[Any], candidate_runs: Iterable[Any], *,
    baseline_name: str = BASELINE, candidate_name: str = CANDIDATE,
    fingerprint: str | None = None, metrics: Sequence[MetricDef] = METRICS,
) -> ComparisonGrid:
    """The comparison grid from two lists of runs (RunRecord or mappings with the same names).

    `fingerprint` (a full fingerprint or a prefix of at least 6 characters) limits the grid to the
    concurrencies where either side has a run of it, and makes each side pick it where it has it.
    """
    if fingerprint is not None and len(fingerprint) < 6:
        raise CompareError(f"--fingerprint {fingerprint!r}: give at least 6 characters of the fingerprint")
    runs = {
        BASELINE: [_normalise(r, f"{baseline_name} run") for r in baseline_runs],
        CANDIDATE: [_normalise(r, f"{candidate_name} run") for r in candidate_runs],
    }
    warnings: list[str] = []
    by_conc: dict[str, dict[int, list[_Run]]] = {BASELINE: {}, CANDIDATE: {}}
    for side, side_runs in runs.items():
        name = baseline_name if side == BASELINE else candidate_name
        bad = []
        for run in side_runs:
            conc = _concurrency(run)
            if conc is None:
                bad.append(run.id)
                continue
            by_conc[side].setdefault(conc, []).append(run)
        if bad:
            warnings.append(f"{name}: run(s) {', '.join(map(str, bad))} have no max_concurrency in their spec; left out")

    concurrencies = sorted(set(by_conc[BASELINE]) | set(by_conc[CANDIDATE]))
    if fingerprint is not None:
        concurrencies = [
            c for c in concurrencies
            if any(r.fingerprint.startswith(fingerprint) for s in (BASELINE, CANDIDATE) for r in by_conc[s].get(c, ()))
        ]
        if not concurrencies:
            raise CompareError(
                f"--fingerprint {fingerprint}: neither {baseline_name} nor {candidate_name} has a run with that fingerprint"
            )

    points: dict[tuple[str, int], SidePoint] = {}
    used: dict[str, list[_Run]] = {BASELINE: [], CANDIDATE: []}
    chosen_runs: dict[tuple[str, int], list[_Run]] = {}
    for conc in concurrencies:
        fa, fb = _choose_fingerprints(by_conc[BASELINE].get(conc, []), by_conc[CANDIDATE].get(conc, []), fingerprint)
        for side, fp in ((BASELINE, fa), (CANDIDATE, fb)):
            point, complete = _side_point(side, conc, by_conc[side].get(conc, []), fp,
                                          other_has=(fb if side == BASELINE else fa))
            points[(side, conc)] = point
            chosen_runs[(side, conc)] = complete
            used[side].extend(complete)

    cells: list[GridCell] = []
    for conc in concurrencies:
        pa, pb = points[(BASELINE, conc)], points[(CANDIDATE, conc)]
        for metric in metrics:
            cells.append(_cell(conc, metric, pa, pb, chosen_runs[(BASELINE, conc)], chosen_runs[(CANDIDATE, conc)],
                               baseline_name, candidate_name))

    control = _control_check(points, chosen_runs)
    grid_flags: list[str] = []
    if control.failed:
        grid_flags.append(FLAG_ENVIRONMENT_DIFFERS)
        warnings.insert(0, control.text)

    # Profile snapshots: the latest snapshot of the runs in the grid (any run if none complete).
    snaps = {}
    for side in (BASELINE, CANDIDATE):
        pool = used[side] or runs[side]
        latest = max(pool, key=lambda r: r.order) if pool else None
        snaps[side] = dict(latest.profile) if latest is not None else {}
        distinct = {json.dumps({k: v for k, v in r.profile.items() if k != "source"}, sort_keys=True)
                    for r in used[side] if r.profile}
        if len(distinct) > 1:
            name = baseline_name if side == BASELINE else candidate_name
            warnings.append(f"{name}: the averaged runs were made with {len(distinct)} different profile snapshots "
                            "(the profile was edited between runs)")
    diffs = snapshot_diff(snaps[BASELINE], snaps[CANDIDATE]) if snaps[BASELINE] and snaps[CANDIDATE] else []
    backend_diff = tuple(d for d in diffs if d.kind == "backend")
    launch_diff = tuple(d for d in diffs if d.kind == "launch")
    identity_diff = tuple(d for d in diffs if d.kind == "identity")
    if not snaps[BASELINE] or not snaps[CANDIDATE]:
        missing = [n for n, s in ((baseline_name, snaps[BASELINE]), (candidate_name, snaps[CANDIDATE])) if not s]
        warnings.append(f"profile snapshot not recorded for {', '.join(missing)}: launch settings cannot be compared")
    elif launch_diff:
        warnings.append(
            f"{len(launch_diff)} launch setting(s) besides the MoE backend differ: "
            + "; ".join(d.describe() for d in launch_diff)
        )

    prov_a, prov_b = _side_provenance(used[BASELINE] or runs[BASELINE]), _side_provenance(used[CANDIDATE] or runs[CANDIDATE])
    keys = [k for k in PROVENANCE_ORDER if k in prov_a or k in prov_b]
    keys += sorted((set(prov_a) | set(prov_b)) - set(keys))
    provenance = []
    for key in keys:
        va, vb = prov_a.get(key, NOT_RECORDED), prov_b.get(key, NOT_RECORDED)
        differs = NOT_RECORDED not in (va, vb) and va != vb
        provenance.append(ProvenanceRow(key, va, vb, differs))
    # Which keys differing is expected: the resolved backend is what is being compared.
    prov_diffs = [p for p in provenance if p.differs and p.key != "resolved_backend"]
    if prov_diffs:
        warnings.append("provenance differs: " + "; ".join(f"{p.key}: {p.baseline} vs {p.candidate}" for p in prov_diffs))
    for side, prov in ((BASELINE, prov_a), (CANDIDATE, prov_b)):
        mixed = [k for k, v in prov.items() if v.startswith("mixed: ")]
        if mixed:
            name = baseline_name if side == BASELINE else candidate_name
            warnings.append(f"{name}: runs disagree among themselves on {', '.join(mixed)}")

    all_runs = runs[BASELINE] + runs[CANDIDATE]
    specs: dict[str, Mapping[str, Any]] = {}
    spec_users: dict[str, list[str]] = {}
    for conc in concurrencies:
        for side in (BASELINE, CANDIDATE):
            p = points[(side, conc)]
            if p.fingerprint:
                specs.setdefault(p.fingerprint, p.spec or {})
                users = spec_users.setdefault(p.fingerprint, [])
                if side not in users:
                    users.append(side)

    return ComparisonGrid(
        baseline_name=baseline_name, candidate_name=candidate_name, metrics=tuple(metrics),
        concurrencies=tuple(concurrencies), cells=tuple(cells), points=points,
        baseline_series=_series(BASELINE, concurrencies, cells),
        candidate_series=_series(CANDIDATE, concurrencies, cells),
        backend_diff=backend_diff, launch_diff=launch_diff, identity_diff=identity_diff,
        baseline_profile=snaps[BASELINE], candidate_profile=snaps[CANDIDATE],
        provenance=tuple(provenance), control=control, warnings=tuple(warnings), flags=tuple(grid_flags),
        simulated=any(_is_simulated(r) for r in all_runs), specs=specs,
        spec_users={k: tuple(v) for k, v in spec_users.items()},
    )


def build_grid(store: "Store", baseline: str, candidate: str, *, fingerprint: str | None = None,
               metrics: Sequence[MetricDef] = METRICS) -> ComparisonGrid:
    """The grid for two profile names, read from the store. Unknown names raise CompareError."""
    known = store.profile_names_with_runs()
    missing = [n for n in (baseline, candidate) if n not in known]
    if missing:
        import difflib

        hints = [f"'{m}'" + (f" (did you mean '{h[0]}'?)" if (h := difflib.get_close_matches(m, known, n=1)) else "")
                 for m in missing]
        raise CompareError(
            f"no runs for profile {', '.join(hints)} in the store {store.path}; "
            f"profiles with runs: {', '.join(known) if known else 'none'}"
        )
    statuses = ("complete", "incomplete", "failed")
    grid = build_grid_from_runs(
        store.runs(profile_name=baseline, statuses=statuses), store.runs(profile_name=candidate, statuses=statuses),
        baseline_name=baseline, candidate_name=candidate, fingerprint=fingerprint, metrics=metrics,
    )
    # issue 15: roofline % per concurrency and the correctness gate (moe_tui/grid_extras.py)
    from moe_tui.grid_extras import apply_gate, build_extras

    return apply_gate(grid, build_extras(store, baseline, candidate))


# -- internals --------------------------------------------------------------------------------------
def _rank(runs: Sequence[_Run]) -> tuple[bool, tuple[float, int]]:
    return (any(r.status == "complete" for r in runs), max(r.order for r in runs))


def _choose_fingerprints(a: Sequence[_Run], b: Sequence[_Run], forced: str | None) -> tuple[str | None, str | None]:
    """Deterministic spec choice per side: the forced one, else a shared one, else the most recent."""
    ga: dict[str, list[_Run]] = {}
    gb: dict[str, list[_Run]] = {}
    for r in a:
        ga.setdefault(r.fingerprint, []).append(r)
    for r in b:
        gb.setdefault(r.fingerprint, []).append(r)

    def best(groups: dict[str, list[_Run]]) -> str | None:
        return max(groups, key=lambda fp: (_rank(groups[fp]), fp)) if groups else None

    fa = fb = None
    if forced is not None:
        fa = next((fp for fp in sorted(ga) if fp.startswith(forced)), None)
        fb = next((fp for fp in sorted(gb) if fp.startswith(forced)), None)
    common = (set(ga) & set(gb))
    if fa is None and fb is not None and fb in ga:
        fa = fb
    if fb is None and fa is not None and fa in gb:
        fb = fa
    if fa is None and fb is None and common:
        def shared_rank(fp: str) -> tuple[Any, ...]:
            ra, rb = _rank(ga[fp]), _rank(gb[fp])
            return (ra[0] and rb[0], max(ra[1], rb[1]), fp)

        fa = fb = max(common, key=shared_rank)
    if fa is None:
        fa = best(ga)
    if fb is None:
        fb = best(gb)
    return fa, fb


def _side_point(side: str, conc: int, runs: Sequence[_Run], fp: str | None, other_has: str | None) -> tuple[SidePoint, list[_Run]]:
    if fp is None:
        return SidePoint(side, conc, None, None, (), (), (), (), (), ()), []
    chosen = sorted((r for r in runs if r.fingerprint == fp), key=lambda r: r.order)
    complete = [r for r in chosen if r.status == "complete"]
    excluded = [r for r in chosen if r.status != "complete"]
    others: dict[str, int] = {}
    for r in runs:
        if r.fingerprint != fp:
            others[r.fingerprint] = others.get(r.fingerprint, 0) + 1
    notes = []
    if others:
        why = "shared with the other side" if fp == other_has else "the most recent"
        listed = ", ".join(f"{o[:12]} ({k} run{'s' if k != 1 else ''})" for o, k in sorted(others.items()))
        notes.append(f"other specs exist at this concurrency: {listed}; using {fp[:12]} ({why})")
    flag_words: dict[str, list[str]] = {}
    for r in complete:
        for code, text in run_suspect_flags(r):
            flag_words.setdefault(code, []).append(text)
    if excluded:
        states = ", ".join(f"run {r.id} {r.status}" for r in excluded)
        flag_words.setdefault(FLAG_INCOMPLETE, []).append(f"not averaged in: {states}")
    profiles = {json.dumps({k: v for k, v in r.profile.items() if k != "source"}, sort_keys=True)
                for r in complete if r.profile}
    if len(profiles) > 1:
        flag_words.setdefault(FLAG_PROFILE_CHANGED, []).append(
            f"the {len(complete)} runs used {len(profiles)} different profile snapshots")
    codes = tuple(sorted(flag_words))
    words = tuple(w for code in codes for w in flag_words[code])
    point = SidePoint(side, conc, fp, dict(chosen[0].spec) if chosen else None,
                      tuple(r.id for r in complete), tuple(r.id for r in excluded),
                      tuple(sorted(others)), codes, words, tuple(notes))
    return point, complete


def _stats_text(values: Sequence[float], mean: float | None, std: float | None) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{format_number(mean)} (n=1)"
    return f"{format_number(mean)} ± {format_number(std)} (n={len(values)})"


def _side_stats(point: SidePoint, complete: Sequence[_Run], metric: MetricDef) -> tuple[SideStats, list[int]]:
    """The side's numbers for one metric, and the ids of complete runs that lack the metric."""
    if point.fingerprint is None:
        return SideStats(0, None, None, (), "no run"), []
    if not complete:
        return SideStats(0, None, None, (), "no complete run"), []
    values, missing = [], []
    for r in complete:
        v = r.summary.get(metric.key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            values.append(float(v))
        else:
            missing.append(r.id)
    if not values:
        return SideStats(0, None, None, (), "not reported"), missing
    arr = np.asarray(values)
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size >= 2 else None
    return SideStats(len(values), mean, std, tuple(values), _stats_text(values, mean, std)), missing


def _flags_text(a: Sequence[str], b: Sequence[str]) -> str:
    parts = []
    if a:
        parts.append("B: " + ", ".join(a))
    if b:
        parts.append("C: " + ", ".join(b))
    return "; ".join(parts)


def _cell(conc: int, metric: MetricDef, pa: SidePoint, pb: SidePoint, ra: Sequence[_Run], rb: Sequence[_Run],
          baseline_name: str, candidate_name: str) -> GridCell:
    sa, missing_a = _side_stats(pa, ra, metric)
    sb, missing_b = _side_stats(pb, rb, metric)
    base = dict(concurrency=conc, metric=metric.key, label=metric.label, unit=metric.unit,
                higher_is_better=metric.higher_is_better, baseline=sa, candidate=sb,
                baseline_flags=pa.flags, candidate_flags=pb.flags, flags_text=_flags_text(pa.flags, pb.flags))
    empty = dict(delta=None, delta_pct=None, ci_low=None, ci_high=None, ci_low_pct=None, ci_high_pct=None,
                 df=None, repeats_needed=None, delta_text="", ci_text="")

    def refuse(verdict: str, reason: str, diffs: tuple[FieldDiff, ...] = ()) -> GridCell:
        return GridCell(**base, comparable=False, fingerprint=None, spec_diffs=diffs, refusal=reason,
                        verdict=verdict, verdict_text=reason, **empty)

    if pa.fingerprint is None or pb.fingerprint is None:
        who = [n for n, p in ((baseline_name, pa), (candidate_name, pb)) if p.fingerprint is None]
        return refuse(NO_DATA, f"no run: {' and '.join(who)} at concurrency {conc}")
    if pa.fingerprint != pb.fingerprint:
        diffs = spec_field_diffs(pa.spec or {}, pb.spec or {}, pa.fingerprint, pb.fingerprint)
        return refuse(DIFFERENT_SPEC, "different spec: " + "; ".join(d.describe() for d in diffs), diffs)
    for name, stats, point, missing in ((baseline_name, sa, pa, missing_a), (candidate_name, sb, pb, missing_b)):
        if stats.n == 0:
            if point.n == 0:
                states = f"{len(point.excluded_run_ids)} incomplete/failed"
                return refuse(NO_DATA, f"no complete run: {name} has only {states} run(s) of this spec")
            return refuse(NO_DATA, f"not reported: {name} run(s) {', '.join(map(str, missing))} lack {metric.key}")

    d = welch_delta(sa.values, sb.values)
    mean_a = sa.mean or 0.0
    pct = (lambda x: None if x is None or mean_a == 0 else x / mean_a * 100.0)
    delta_text = f"{format_pct(d.delta_pct)} ({_signed(d.delta, format_number(d.delta))} {metric.unit})"
    if d.ci_low is None:
        verdict, verdict_text, repeats, ci_text = NOISE_UNKNOWN, NOISE_UNKNOWN, None, ""
    else:
        verdict = verdict_for(d.ci_low, d.ci_high, metric.higher_is_better)
        ci_text = (f"[{format_pct(pct(d.ci_low))}, {format_pct(pct(d.ci_high))}]" if mean_a != 0
                   else f"[{format_number(d.ci_low)}, {format_number(d.ci_high)}] {metric.unit}")
        repeats = None
        verdict_text = verdict
        if verdict == WITHIN_NOISE:
            repeats = repeats_to_settle(sa.std or 0.0, sb.std or 0.0, d.delta)
            if repeats is not None:
                verdict_text = f"within noise (~{repeats} repeats/side to settle)"
            elif d.delta != 0:
                verdict_text = f"within noise (> {SETTLE_MAX_REPEATS} repeats/side to settle)"
    if missing_a or missing_b:
        verdict_text += " (some runs lack this metric)"
    return GridCell(
        **base, comparable=True, fingerprint=pa.fingerprint, spec_diffs=(), refusal="",
        delta=d.delta, delta_pct=d.delta_pct, ci_low=d.ci_low, ci_high=d.ci_high,
        ci_low_pct=pct(d.ci_low), ci_high_pct=pct(d.ci_high), df=d.df, verdict=verdict,
        repeats_needed=repeats, delta_text=delta_text, ci_text=ci_text, verdict_text=verdict_text,
    )


def _control_check(points: Mapping[tuple[str, int], SidePoint],
                   chosen: Mapping[tuple[str, int], Sequence[_Run]]) -> ControlCheck:
    metric = METRIC_BY_KEY[CONTROL_METRIC]
    for conc in CONTROL_CONCURRENCIES:
        pa, pb = points.get((BASELINE, conc)), points.get((CANDIDATE, conc))
        if pa is None or pb is None or pa.fingerprint is None or pa.fingerprint != pb.fingerprint:
            continue
        sa, _ = _side_stats(pa, chosen[(BASELINE, conc)], metric)
        sb, _ = _side_stats(pb, chosen[(CANDIDATE, conc)], metric)
        if sa.n == 0 or sb.n == 0:
            continue
        d = welch_delta(sa.values, sb.values, confidence=CONTROL_CONFIDENCE)
        pct = d.delta_pct
        what = f"{metric.label} at concurrency {conc}: {format_number(sa.mean)} vs {format_number(sb.mean)} ({format_pct(pct)})"
        if d.ci_low is None:
            differs = pct is not None and abs(pct) > CONTROL_N1_THRESHOLD_PCT
            basis = f"n=1, threshold {CONTROL_N1_THRESHOLD_PCT:g}%"
        else:
            beyond_noise = d.ci_low > 0 or d.ci_high < 0
            large = pct is not None and abs(pct) >= CONTROL_MIN_EFFECT_PCT
            differs = beyond_noise and large
            basis = f"{CONTROL_CONFIDENCE * 100:g}% CI of the delta {'excludes' if beyond_noise else 'includes'} 0"
            if beyond_noise and not large:
                basis += f", but under the {CONTROL_MIN_EFFECT_PCT:g}% that would mean the environments differ"
        if differs:
            return ControlCheck("environment differs", conc, pct,
                                f"ENVIRONMENT DIFFERS: control check {what}, beyond noise ({basis}). At this "
                                "concurrency the MoE backend should barely matter: check clocks, server args, "
                                "the benchmark client and the machine before trusting any delta.")
        verdict = "within noise" if "includes" in basis or d.ci_low is None else "agrees"
        return ControlCheck("agrees", conc, pct, f"control check passed: {what}, {verdict} ({basis})")
    return ControlCheck("unavailable", None, None,
                        "no control check: neither concurrency 2 nor 1 has complete runs of one spec on both "
                        "sides; add concurrency 2 to both sweeps to check the environments agree")


def _series(side: str, concurrencies: Sequence[int], cells: Sequence[GridCell]) -> ThroughputSeries:
    by_conc = {c.concurrency: c for c in cells if c.metric == CONTROL_METRIC}
    means, stds, ns, comparable = [], [], [], []
    for conc in concurrencies:
        cell = by_conc.get(conc)
        stats = None if cell is None else (cell.baseline if side == BASELINE else cell.candidate)
        means.append(stats.mean if stats else None)
        stds.append(stats.std if stats else None)
        ns.append(stats.n if stats else 0)
        comparable.append(bool(cell and cell.comparable))
    return ThroughputSeries(tuple(concurrencies), tuple(means), tuple(stds), tuple(ns), tuple(comparable))
