"""Building the grid: points, confounders, per-cell states, pooled tests, Holm families, control.

Each cell ends in exactly one `judgement.VERDICTS` state, decided in this order (the first that
applies wins; README "How a verdict is decided" says it in words):
no_data -> refused (different spec) -> confounded (anything but the varied fields differs) ->
unverified (an imported spec field is unknown) -> unreliable (flagged runs: fewer than
`judgement.MIN_CLEAN_RUNS` clean runs on a side once they are left out, or flagged runs included
by the toggle) -> interim (the queue still holds planned repeats) -> noise_unknown (n < 2 or zero
spread on a side) -> tested: better/worse when the Holm-adjusted p-value of the cell's family is
under alpha AND the effect is at least the minimum; within_noise otherwise. A control check that
says "differs" turns every tested cell into confounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from moe_tui import judgement as J
from moe_tui.compare.confound import confounders, environment_listed
from moe_tui.compare.model import (
    BASELINE,
    CANDIDATE,
    CompareSettings,
    Confounder,
    FamilySummary,
    GridCell,
    MetricDef,
    PlanCount,
    SidePoint,
    SideStats,
)
from moe_tui.compare.points import SideRuns
from moe_tui.compare.runs import format_number, format_pct, requested_fingerprint, signed, spec_field_diffs
from moe_tui.compare.stats import CONFIDENCE, CellTest, PooledNoise, cell_test, holm, repeats_to_settle

TESTED = (J.BETTER, J.WORSE, J.WITHIN_NOISE)


@dataclass
class Draft:
    """A cell before the grid-wide statistics: its state so far, or None while testable."""

    conc: int
    metric: MetricDef
    pa: SidePoint
    pb: SidePoint
    sa: SideStats
    sb: SideStats
    verdict: str | None = None
    reasons: list[str] = field(default_factory=list)
    confounders: tuple[Confounder, ...] = ()
    test: CellTest | None = None
    p_adjusted: float | None = None


def stats_text(values: Sequence[float], mean: float | None, std: float | None) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{format_number(mean)} (n=1)"
    return f"{format_number(mean)} ± {format_number(std)} (n={len(values)})"


def side_stats(point: SidePoint, runs: SideRuns, metric: MetricDef, include_flagged: bool) -> tuple[SideStats, list[int]]:
    """The side's numbers for one metric, and the ids of averaged runs that lack the metric."""
    n_flag = len(runs.flagged)
    excluded, included = (0, n_flag) if include_flagged else (n_flag, 0)
    if point.fingerprint is None:
        return SideStats(0, None, None, (), "no run"), []
    if not runs.complete:
        return SideStats(0, None, None, (), "no complete run"), []
    values, missing = [], []
    for r in runs.averaged:
        v = r.summary.get(metric.key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            values.append(float(v))
        else:
            missing.append(r.id)
    suffix = f", +{excluded} flagged left out" if excluded else (f", incl. {included} flagged" if included else "")
    if not values:
        text = f"no clean run ({excluded} flagged left out)" if excluded and not runs.averaged else "not reported"
        return SideStats(0, None, None, (), text, excluded, included), missing
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) >= 2 else None
    text = stats_text(values, mean, std)
    if suffix:
        text = text[:-1] + suffix + ")" if text.endswith(")") else text + suffix
    return SideStats(len(values), mean, std, tuple(values), text, excluded, included), missing


def pre_state(d: Draft, names: tuple[str, str], runs: tuple[SideRuns, SideRuns], missing: tuple[list, list],
              conf: tuple[Confounder, ...], settings: CompareSettings,
              plan: Mapping[tuple[str, str], PlanCount]) -> None:
    """Decide every state that needs no grid-wide statistics; leaves d.verdict None when testable."""
    sides = ((names[0], d.pa, d.sa, runs[0], missing[0]), (names[1], d.pb, d.sb, runs[1], missing[1]))
    if d.pa.fingerprint is None or d.pb.fingerprint is None:
        who = [n for n, p, *_ in sides if p.fingerprint is None]
        return _set(d, J.NO_DATA, f"no run: {' and '.join(who)} at concurrency {d.conc}")
    if d.pa.fingerprint != d.pb.fingerprint:
        diffs = spec_field_diffs(d.pa.spec or {}, d.pb.spec or {}, d.pa.fingerprint, d.pb.fingerprint)
        return _set(d, J.REFUSED, "different spec: " + "; ".join(x.describe() for x in diffs))
    for name, _point, stats, sr, miss in sides:
        if not sr.complete:
            return _set(d, J.NO_DATA, f"no complete run: {name} has only {len(sr.all)} incomplete/failed "
                                      "run(s) of this spec")
        if stats.n == 0 and not sr.flagged:
            return _set(d, J.NO_DATA, f"not reported: {name} run(s) {', '.join(map(str, miss))} lack {d.metric.key}")
    if conf:
        d.confounders = conf
        return _set(d, J.CONFOUNDED, *(f"{c.describe()} ({c.source.replace('_', ' ')})" for c in conf))
    unknown = [(n, p.unknown_fields) for n, p, *_ in sides if p.unknown_fields]
    if unknown:
        return _set(d, J.UNVERIFIED, *(f"{n}: the imported record did not carry {', '.join(f)}; confirm them with "
                                       "`moe-tui import --assume FIELD=VALUE,...`" for n, f in unknown))
    reasons = _flag_reasons(sides, settings)
    if reasons:
        return _set(d, J.UNRELIABLE, *reasons)
    for name, _point, stats, _sr, _ in sides:
        if stats.n_flagged_excluded:
            d.reasons.append(f"{name}: {stats.n_flagged_excluded} flagged run(s) left out of the mean")
    pending = [(n, _pending(n, sr, plan)) for n, _, _, sr, _ in sides]
    pending = [(n, p) for n, p in pending if p.pending > 0]
    if pending:
        return _set(d, J.INTERIM, *(f"{n}: {p.planned - p.pending} of {p.planned} planned repeats done; "
                                    "no verdict until the campaign's repeats are in" for n, p in pending))
    for name, _point, stats, *_ in sides:
        if stats.n < 2:
            return _set(d, J.NOISE_UNKNOWN, f"{name} has {stats.n} run(s)")
        if stats.std == 0:
            return _set(d, J.NOISE_UNKNOWN, f"{name}'s {stats.n} runs are identical (zero spread is unknown noise, not none)")
    for name, _point, _stats, sr, _ in sides:
        # Repeats on one server start share its speed offset (a restart moves throughput by a
        # percent or two): their spread says nothing about the start-to-start part of the noise.
        starts = {r.server_start_id for r in sr.averaged}
        if len(sr.averaged) >= 2 and None not in starts and len(starts) == 1:
            return _set(d, J.NOISE_UNKNOWN, f"{name}'s {len(sr.averaged)} runs all came from one server start: "
                                            "start-to-start variance is unknown (interleave the profiles, or "
                                            "restart the server between repeats)")


def _set(d: Draft, verdict: str, *reasons: str) -> None:
    d.verdict = verdict
    d.reasons.extend(reasons)


def _flag_reasons(sides: Iterable[tuple], settings: CompareSettings) -> list[str]:
    out = []
    for name, point, stats, sr, _ in sides:
        codes = ", ".join(c for c in point.flags if c in J.SUSPECT_FLAGS or c == J.FLAG_INCOMPLETE)
        if settings.include_flagged and stats.n_flagged_included:
            out.append(f"{name}: the mean includes {stats.n_flagged_included} flagged run(s) ({codes})")
        elif (sr.flagged or len(sr.all) > len(sr.complete)) and stats.n < J.MIN_CLEAN_RUNS:
            out.append(f"{name}: {stats.n} clean run(s) left once flagged/incomplete runs are set aside ({codes}); "
                       f"a verdict needs {J.MIN_CLEAN_RUNS}")
    return out


def _pending(name: str, sr: SideRuns, plan: Mapping[tuple[str, str], PlanCount]) -> PlanCount:
    keys = {(r.profile_name or name, requested_fingerprint(r)) for r in sr.all}
    counts = [plan[k] for k in keys if k in plan]
    return PlanCount(sum(c.planned for c in counts), sum(c.pending for c in counts))


def pooled_noise(drafts: Sequence[Draft]) -> dict[str, PooledNoise]:
    """Per metric: relative noise pooled over the testable cells' sides."""
    groups: dict[str, list[Sequence[float]]] = {}
    for d in drafts:
        if d.verdict is None:
            groups.setdefault(d.metric.key, []).extend([d.sa.values, d.sb.values])
    return {k: PooledNoise.of(v) for k, v in groups.items()}


def run_tests(drafts: Sequence[Draft], pooled: Mapping[str, PooledNoise], settings: CompareSettings) -> list[FamilySummary]:
    """Test every testable cell, Holm-adjust within the primary and the secondary family, decide."""
    families = []
    for name, primary in (("primary", True), ("secondary", False)):
        members = [d for d in drafts if d.verdict is None and d.metric.primary == primary]
        for d in members:
            d.test = cell_test(d.sa.values, d.sb.values, pooled.get(d.metric.key, PooledNoise(0.0, 0)))
            if d.test is None:
                _set(d, J.NOISE_UNKNOWN, "no spread to judge from")
        tested = [d for d in members if d.test is not None]
        for d, p in zip(tested, holm([d.test.p_value for d in tested if d.test is not None])):
            d.p_adjusted = p
            _decide(d, len(tested), name, settings)
        metrics = tuple(dict.fromkeys(d.metric.key for d in drafts if d.metric.primary == primary))
        families.append(FamilySummary(name, metrics, len(tested), settings.alpha, len(tested) * settings.alpha,
                                      settings.alpha if tested else 0.0))
    return families


def _decide(d: Draft, family_size: int, family: str, settings: CompareSettings) -> None:
    t = d.test
    assert t is not None and d.p_adjusted is not None
    where = f"p={t.p_value:.3g}, Holm-adjusted {d.p_adjusted:.3g} over {family_size} {family} cell(s)"
    if d.p_adjusted < settings.alpha and abs(t.delta_pct) >= settings.min_effect_pct:
        up = t.delta > 0
        _set(d, J.BETTER if up == d.metric.higher_is_better else J.WORSE, where)
    elif d.p_adjusted < settings.alpha:
        _set(d, J.WITHIN_NOISE, f"{where}; {format_pct(t.delta_pct)} is under the {settings.min_effect_pct:g}% "
                                "minimum effect")
    else:
        _set(d, J.WITHIN_NOISE, f"{where}; not under alpha {settings.alpha:g}")


def finish(d: Draft, control_differs: str | None, settings: CompareSettings) -> GridCell:
    """The frozen cell, with its texts."""
    if control_differs and d.verdict in TESTED:
        d.verdict = J.CONFOUNDED
        d.reasons.insert(0, control_differs)
    sa, sb, m = d.sa, d.sb, d.metric
    show_delta = d.verdict not in (J.NO_DATA, J.REFUSED, J.CONFOUNDED) and sa.n and sb.n
    delta = delta_pct = lo = hi = lo_pct = hi_pct = None
    delta_text = ci_text = ""
    if show_delta and sa.mean is not None and sb.mean is not None:
        delta = sb.mean - sa.mean
        delta_pct = delta / sa.mean * 100.0 if sa.mean else None
        delta_text = f"{format_pct(delta_pct)} ({signed(delta, format_number(delta))} {m.unit})"
    repeats = None
    if d.verdict in TESTED and d.test is not None:
        lo, hi = d.test.interval(CONFIDENCE)
        lo_pct, hi_pct = (lo / sa.mean * 100.0, hi / sa.mean * 100.0) if sa.mean else (None, None)
        ci_text = f"[{format_pct(lo_pct)}, {format_pct(hi_pct)}]" if sa.mean else ""
        if d.verdict == J.WITHIN_NOISE and abs(d.test.delta_pct) >= settings.min_effect_pct:
            repeats = repeats_to_settle(sa.std or 0.0, sb.std or 0.0, d.test.delta)
    assert d.verdict is not None, "every draft is decided before it is finished"
    words = J.VERDICT_WORDS[d.verdict]
    detail = f"~{repeats} repeats/side to settle" if repeats else (d.reasons[0] if d.reasons and d.verdict not in (
        J.BETTER, J.WORSE, J.WITHIN_NOISE) else "")
    refusal = "; ".join(d.reasons) if d.verdict in (J.NO_DATA, J.REFUSED) else ""
    diffs = (spec_field_diffs(d.pa.spec or {}, d.pb.spec or {}, d.pa.fingerprint or "", d.pb.fingerprint or "")
             if d.verdict == J.REFUSED else ())
    return GridCell(
        concurrency=d.conc, metric=m.key, label=m.label, unit=m.unit, higher_is_better=m.higher_is_better,
        primary=m.primary, baseline=sa, candidate=sb,
        comparable=bool(d.pa.fingerprint and d.pa.fingerprint == d.pb.fingerprint and sa.n and sb.n),
        fingerprint=d.pa.fingerprint if d.pa.fingerprint == d.pb.fingerprint else None, spec_diffs=diffs,
        confounders=d.confounders, refusal=refusal, delta=delta, delta_pct=delta_pct, ci_low=lo, ci_high=hi,
        ci_low_pct=lo_pct, ci_high_pct=hi_pct, df=d.test.df if d.test else None,
        p_value=d.test.p_value if d.test else None, p_adjusted=d.p_adjusted, verdict=d.verdict,
        reasons=tuple(d.reasons), repeats_needed=repeats, baseline_flags=d.pa.flags, candidate_flags=d.pb.flags,
        delta_text=delta_text, ci_text=ci_text,
        verdict_text=f"{words}: {detail}" if detail and d.verdict != J.REFUSED else (
            f"refused: {detail}" if d.verdict == J.REFUSED else words),
        flags_text=flags_text(d.pa.flags, d.pb.flags),
    )


def flags_text(a: Sequence[str], b: Sequence[str]) -> str:
    parts = []
    if a:
        parts.append("B: " + ", ".join(a))
    if b:
        parts.append("C: " + ", ".join(b))
    return "; ".join(parts)


def cell_confounders(runs: tuple[SideRuns, SideRuns], vary: Iterable[str]) -> tuple[Confounder, ...]:
    return confounders(runs[0].all, runs[1].all, vary)


def environment_beside(runs: Mapping[tuple[str, int], SideRuns]) -> tuple[str, ...]:
    a = [r for (side, _), sr in runs.items() if side == BASELINE for r in sr.complete]
    b = [r for (side, _), sr in runs.items() if side == CANDIDATE for r in sr.complete]
    return environment_listed(a, b)


def method_lines(settings: CompareSettings, families: Sequence[FamilySummary]) -> tuple[str, ...]:
    prim = next((f for f in families if f.name == "primary"), None)
    sec = next((f for f in families if f.name == "secondary"), None)
    tested = sum(f.tested for f in families)
    return (
        f"Compared: {', '.join(sorted(settings.vary))}. Any other difference in launch settings, resolved server "
        "args, SGLang version, GPU model/count or driver makes a cell confounded (no verdict).",
        f"Better/worse needs the Holm-adjusted p-value under {settings.alpha:g} within the cell's family AND an "
        f"effect of at least {settings.min_effect_pct:g}% of the baseline mean.",
        "Primary family: output throughput across concurrencies; secondary family: every other metric's "
        "cells together (each family's chance of any false verdict is at most alpha).",
        f"A/A grid of this size: {tested} tested cell(s) would show {tested * settings.alpha:.2f} false verdicts on "
        f"average at {settings.alpha:g} each without correction; with it, a false verdict in at most "
        f"{(prim.max_false_rate if prim else 0) * 100:g}% of grids (primary) and "
        f"{(sec.max_false_rate if sec else 0) * 100:g}% (secondary).",
        "Noise: each metric's relative spread pooled over the grid's tested cells; a side clearly noisier than the "
        "pool (F test, 1%) keeps its own. Zero spread, one run, or every run from one server start on a side: "
        "noise unknown.",
        f"Flagged runs ({', '.join(sorted(J.SUSPECT_FLAGS))}) are left out of the mean"
        + (" (included now, so their cells are unreliable)" if settings.include_flagged else "")
        + f"; a cell needs {J.MIN_CLEAN_RUNS} clean runs a side.",
        f"Control: equivalence at concurrency 2 (else 1) within ±{settings.control_margin_pct:g}%; agrees when the "
        f"90% interval is inside, differs when beyond it with the 99% interval excluding 0, "
        f"inconclusive with fewer than {J.CONTROL_MIN_RUNS} runs a side. Differs withdraws every verdict.",
        "Interim: no verdict while the queue still holds planned repeats of a cell.",
    )
