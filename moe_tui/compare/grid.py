"""Building the grid: points, confounders, evidence checks, per-cell states, the gate, the frozen cells.

Each cell ends in exactly one `judgement.VERDICTS` state, decided in this order (the first that
applies wins; README "How a verdict is decided" says it in words):
no_data -> refused (different spec, or both servers report the same backend) -> confounded (anything
but the varied fields differs) -> unverified (an imported spec field or server start is unknown) ->
unreliable (flagged runs; a percentile from too few requests) -> output_differs (output tokens per
request beyond 1%) -> interim (the queue still holds planned repeats) -> cut_short (the latest plan
was cancelled, skipped or cleared before it was done) -> noise_unknown (fewer than 2 server starts or
zero spread on a side) -> tested: better/worse when the family-corrected interval lies beyond the
minimum effect both raw and against the control measured on the same server starts (`verdict`),
within_noise otherwise -> uncontrolled (a tested cell the control on its own starts does not back, or
whose sides do not overlap in time): no verdict and no delta unless the user accepts uncontrolled
verdicts, and then labelled so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moe_tui import judgement as J
from moe_tui.compare.confound import confounders, environment_listed
from moe_tui.compare.evidence import (
    import_gaps,
    is_import,
    output_length_unknown,
    output_tokens_problem,
    overlap_problem,
    percentile_problem,
    same_backend,
    start_key,
    start_means,
    time_unknown,
)
from moe_tui.compare.memo import derived
from moe_tui.compare.model import (
    BASELINE,
    CANDIDATE,
    CompareSettings,
    Confounder,
    ControlCheck,
    FamilySummary,
    GridCell,
    MetricDef,
    PlanCount,
    SidePoint,
    SideStats,
)
from moe_tui.compare.points import SideRuns
from moe_tui.compare.runs import format_number, format_pct, requested_fingerprint, signed, spec_field_diffs
from moe_tui.compare.stats import (
    ModeratedTest,
    repeats_to_settle,
)

TESTED = (J.BETTER, J.WORSE, J.WITHIN_NOISE)

if TYPE_CHECKING:
    import numpy as np

    # One side of a cell as the state rules read it: (profile name, point, stats, its runs, ids of
    # averaged runs that lack the metric).
    Side = tuple[str, SidePoint, SideStats, SideRuns, list[int]]
    LogSamples = tuple[np.ndarray, np.ndarray]  # the two sides' per-start means, logged


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
    test: ModeratedTest | None = None
    p_adjusted: float | None = None
    runs: tuple[SideRuns, SideRuns] | None = None  # (baseline, candidate), set by pre_state
    starts: tuple[list[float], list[float]] = ([], [])  # per-start means, the test's samples
    confidence: float | None = None  # of the family-corrected interval
    uncontrolled: str = ""
    did: ModeratedTest | None = None  # against the control on the same server starts
    did_pairs: tuple[int, int] = (0, 0)  # server starts per side that measured the cell and the control
    queued: int = 0  # runs a new plan still has queued for a cell that has runs from before it: provisional
    interim: list[str] = field(default_factory=list)  # why it is interim if its runs so far give no verdict


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


def pre_state(d: Draft, names: tuple[str, str], runs: tuple[SideRuns, SideRuns], missing: tuple[list[int], list[int]],
              conf: tuple[Confounder, ...], settings: CompareSettings,
              plan: Mapping[tuple[str, str], PlanCount]) -> None:
    """Decide every state that needs no grid-wide statistics; leaves d.verdict None when testable."""
    d.runs = runs
    sides: tuple[Side, Side] = ((names[0], d.pa, d.sa, runs[0], missing[0]), (names[1], d.pb, d.sb, runs[1], missing[1]))
    if d.pa.fingerprint is None or d.pb.fingerprint is None:
        who = [n for n, p, *_ in sides if p.fingerprint is None]
        # A campaign's first sweep: the other side's spec is queued for this one (the same campaign).
        known = d.pa.fingerprint or d.pb.fingerprint
        queued = sum(plan[(n, known)].pending for n in who if known and (n, known) in plan)
        return _set(d, J.NO_DATA, f"no run {'yet' if queued else ''}: {' and '.join(who)} at concurrency {d.conc}"
                                  .replace("no run :", "no run:") + (f" ({queued} queued)" if queued else ""))
    if d.pa.fingerprint != d.pb.fingerprint:
        diffs = spec_field_diffs(d.pa.spec or {}, d.pb.spec or {}, d.pa.fingerprint, d.pb.fingerprint)
        return _set(d, J.REFUSED, "different spec: " + "; ".join(x.describe() for x in diffs))
    for name, _point, stats, sr, miss in sides:
        if not sr.complete:
            return _set(d, J.NO_DATA, f"no complete run: {name} has only {len(sr.all)} incomplete/failed "
                                      "run(s) of this spec")
        if stats.n == 0 and not sr.flagged:
            return _set(d, J.NO_DATA, f"not reported: {name} run(s) {', '.join(map(str, miss))} lack {d.metric.key}")
    same = same_backend(runs[0].complete, runs[1].complete, settings.vary)
    if same:
        return _set(d, J.REFUSED, same)
    if conf:
        d.confounders = conf
        return _set(d, J.CONFOUNDED, *(f"{c.describe()} ({c.source.replace('_', ' ')})" for c in conf))
    if _unverified(d, sides, settings.vary):
        return None
    reasons = _flag_reasons(sides, settings)
    reasons += [w for n, _, _, sr, _ in sides if (w := percentile_problem(d.metric.key, sr.averaged, n))]
    if reasons:
        return _set(d, J.UNRELIABLE, *reasons)
    output = output_tokens_problem(runs[0].averaged, runs[1].averaged, names)
    if output:
        return _set(d, J.OUTPUT_DIFFERS, output)
    for name, _point, stats, _sr, _ in sides:
        if stats.n_flagged_excluded:
            d.reasons.append(f"{name}: {stats.n_flagged_excluded} flagged run(s) left out of the mean")
    if _planned_state(d, sides, plan):
        return None
    d.starts = (start_means(runs[0].averaged, d.metric.key), start_means(runs[1].averaged, d.metric.key))
    for (name, _point, stats, _sr, _), starts in zip(sides, d.starts):
        if d.queued and (len(starts) < 2 or stats.std == 0 or max(starts) == min(starts)):
            d.queued = 0  # no verdict so far to keep while the plan runs
            return _set(d, J.INTERIM, *d.interim)
        if len(starts) < 2:
            return _set(d, J.NOISE_UNKNOWN, f"{name} has {stats.n} run(s) from {len(starts)} server start(s): "
                                            "start-to-start variance is unknown; a side needs 2 starts (interleave "
                                            "the profiles, or restart the server between repeats)")
        if stats.std == 0 or max(starts) == min(starts):
            return _set(d, J.NOISE_UNKNOWN, f"{name}'s {stats.n} runs are identical (zero spread is unknown noise, "
                                            "not none)")
    return None


def _unverified(d: Draft, sides: Iterable[Side], vary: frozenset[str]) -> bool:
    reasons = [f"{n}: the imported record did not carry {', '.join(p.unknown_fields)}; confirm them with "
               "`moe-tui import --assume FIELD=VALUE,...`" for n, p, *_ in sides if p.unknown_fields]
    for name, _p, _s, sr, _ in sides:
        nameless = [r.id for r in sr.averaged if start_key(r) is None and is_import(r)]
        if nameless:
            reasons.append(f"{name}: imported run(s) {', '.join(map(str, nameless[:5]))} carry no server start "
                           "identity (server_info has no pid): runs on one start cannot be told from runs on "
                           "many, so the sample size is unknown; name it with `moe-tui import --server-start "
                           "NAME` (one file per start)")
        gaps: dict[str, list[int]] = {}
        for r in sr.averaged:
            for gap in import_gaps(r, vary):
                gaps.setdefault(gap, []).append(r.id)
        reasons += [f"{name}: imported run(s) {', '.join(map(str, ids[:5]))} do not record {gap}: unverified, "
                    "never taken as the same (`moe-tui import --server-info FILE` with that start's saved "
                    "GET /server_info)" for gap, ids in gaps.items()]
        if d.metric.key == "output_throughput" and (unknown := output_length_unknown(sr.averaged)):
            reasons.append(f"{name}: output length unknown for run(s) {', '.join(map(str, unknown[:5]))} (no "
                           "total_output_tokens): an early stop cannot be ruled out, so no throughput verdict")
    if reasons:
        _set(d, J.UNVERIFIED, *reasons)
    return bool(reasons)


def _planned_state(d: Draft, sides: Iterable[Side], plan: Mapping[tuple[str, str], PlanCount]) -> bool:
    """Interim while planned repeats are pending; cut short when the latest plan was cut before done. A
    cell whose sides all have runs from a plan done in full before the open one is tested on its runs
    and its verdict kept, provisional (`provisional`), rather than hidden while new runs are queued."""
    counts = [(n, _pending(n, sr, plan), len(sr.all)) for n, _, _, sr, _ in sides]
    pending = [(n, p) for n, p, _ in counts if p.pending > 0]
    if pending:
        interim = [f"{n}: {p.planned - p.earlier - p.pending} of {p.planned - p.earlier} planned repeats done; "
                   "no verdict (and no delta) until the plan is done" for n, p in pending]
        # a plan done in full before this one, and runs beyond this plan's: a verdict to keep
        if all(p.earlier and done > p.planned - p.earlier - p.pending for _, p, done in counts if p.pending):
            d.queued, d.interim = sum(p.pending for _, p in pending), interim
            return False
        _set(d, J.INTERIM, *interim)
        return True
    cut = [(n, p, done) for n, p, done in counts if p.cut > 0]
    if cut:
        _set(d, J.CUT_SHORT, *(f"{n}: plan cut short: {p.cut} planned item(s) cancelled, skipped or cleared; "
                               f"{done} run(s) done of {p.planned + p.cut} planned; re-plan the cell for a verdict"
                               for n, p, done in cut))
        return True
    return False


def _set(d: Draft, verdict: str, *reasons: str) -> None:
    d.verdict = verdict
    d.reasons.extend(reasons)


def _flag_reasons(sides: Iterable[Side], settings: CompareSettings) -> list[str]:
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
    """The plan's counts for a side's runs (once per build and cell side: every metric asks)."""
    return derived("pending", (name, sr, plan), lambda: _pending_of(name, sr, plan))


def _pending_of(name: str, sr: SideRuns, plan: Mapping[tuple[str, str], PlanCount]) -> PlanCount:
    keys = {(r.profile_name or name, requested_fingerprint(r)) for r in sr.all}
    counts = [plan[k] for k in keys if k in plan]
    return PlanCount(*(sum(column) for column in zip(*counts))) if counts else PlanCount(0, 0)


def gate(d: Draft, control: ControlCheck, settings: CompareSettings) -> None:
    """A tested cell stands only when the control on its own server starts backs it (`_decide` says why not
    in `uncontrolled`) and the sides overlap in time; otherwise it is uncontrolled, shown only when the user
    accepts that. The grid-level control check (`control`) is reported beside, never a blanket pass."""
    if d.verdict not in TESTED:
        return
    if d.runs and (unknown := time_unknown(d.runs[0].averaged, d.runs[1].averaged, ("baseline", "candidate"))):
        d.reasons.append(unknown)
    why = d.uncontrolled
    if not why and d.runs:
        why = overlap_problem(d.runs[0].averaged, d.runs[1].averaged) or ""
    if not why:
        return
    d.uncontrolled = why
    if settings.accept_uncontrolled:
        d.reasons.insert(0, f"uncontrolled ({why}): shown because uncontrolled verdicts are accepted")
        return
    d.reasons.insert(0, f"{J.VERDICT_WORDS[d.verdict]} withheld: {why}; a verdict needs the control on the same "
                        "server starts to back it (--accept-uncontrolled shows it, labelled)")
    d.verdict = J.UNCONTROLLED


def provisional(d: Draft) -> None:
    """A cell with runs queued keeps the verdict its runs so far give (tested or uncontrolled), marked
    provisional and saying why; otherwise it is interim, as before the runs it has were judged."""
    if not d.queued:
        return
    if d.verdict in TESTED or d.verdict == J.UNCONTROLLED:
        d.reasons.insert(0, f"{d.queued} run(s) queued for this cell; the verdict may change (provisional: "
                            "from the runs done so far)")
        return
    d.verdict, d.reasons, d.queued = J.INTERIM, list(d.interim), 0


def finish(d: Draft, settings: CompareSettings) -> GridCell:
    """The frozen cell, with its texts; a delta and interval only with a verdict (tested cells)."""
    sa, sb, m = d.sa, d.sb, d.metric
    delta = delta_pct = lo = hi = lo_pct = hi_pct = None
    delta_text = ci_text = short_of = ""
    repeats = None
    wide = False
    if d.verdict in TESTED and d.test is not None and sa.mean is not None and sb.mean is not None and d.confidence:
        delta_pct = d.test.delta_pct
        # The % is the ratio of the sides' per-start geometric means (the test's scale); the absolute
        # delta is that ratio on the baseline's mean, so the two never disagree in sign. Where the run
        # means on screen say otherwise, a reason says which is which.
        delta = sa.mean * delta_pct / 100.0
        delta_text = f"{format_pct(delta_pct)} ({signed(delta, format_number(delta))} {m.unit})"
        lo_pct, hi_pct = d.test.interval_pct(d.confidence)
        wide = d.verdict == J.WITHIN_NOISE and too_wide(lo_pct, hi_pct)
        arithmetic = (sb.mean - sa.mean) / sa.mean * 100.0 if sa.mean else delta_pct
        if abs(arithmetic - delta_pct) > 0.5 and not wide:
            d.reasons.append(f"the delta is the ratio of the sides' per-start geometric means "
                             f"({len(d.starts[0])} vs {len(d.starts[1])} starts: {format_pct(delta_pct)}), not of the "
                             f"run means shown ({format_pct(arithmetic)})")
        lo, hi = sa.mean * lo_pct / 100.0, sa.mean * hi_pct / 100.0
        ci_text = f"[{format_pct(lo_pct)}, {format_pct(hi_pct)}] {d.confidence:.1%}"  # the family-corrected level
        if d.verdict == J.WITHIN_NOISE and abs(delta_pct) >= settings.min_effect_pct:
            repeats = repeats_to_settle(sa.std or 0.0, sb.std or 0.0, delta)
        if d.verdict == J.WITHIN_NOISE and not repeats and (lo_pct > 0 or hi_pct < 0):
            short_of = f"clear of 0, not of the ±{settings.min_effect_pct:g}% minimum effect"
        if wide:
            # No delta shown as if it were one: the numbers stay in JSON/CSV for scripts, with the reason.
            starts = f"{len(d.starts[0])}+{len(d.starts[1])} server starts"
            d.reasons.insert(0, f"too wide to bound: with {starts} the {d.confidence:.1%} interval runs from "
                                f"{format_pct(lo_pct)} to {format_pct(hi_pct)} (past halving and doubling); the "
                                "difference is unknown, not small")
            delta_text, ci_text = "", f"too wide ({starts})"
            short_of = f"too wide to bound with {starts}" + (f": ~{repeats} repeats/side to settle" if repeats else "")
    assert d.verdict is not None, "every draft is decided before it is finished"
    words = J.VERDICT_WORDS[d.verdict] + (" (uncontrolled)" if d.uncontrolled and d.verdict in TESTED else "")
    words += " (provisional)" if d.queued else ""
    detail = short_of if wide else f"~{repeats} repeats/side to settle" if repeats else short_of or (
        d.reasons[0] if d.reasons and d.verdict not in (J.BETTER, J.WORSE, J.WITHIN_NOISE) else "")
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
        flags_text=flags_text(d.pa.flags, d.pb.flags), n_starts_baseline=len(d.starts[0]),
        n_starts_candidate=len(d.starts[1]), ci_confidence=d.confidence if ci_text else None,
        uncontrolled=d.uncontrolled if d.verdict in TESTED or d.verdict == J.UNCONTROLLED else "",
        control_relative_pct=d.did.delta_pct if d.did is not None and d.confidence else None,
        control_relative_ci_pct=d.did.interval_pct(d.confidence) if d.did is not None and d.confidence else None,
        control_starts=d.did_pairs, provisional=d.reasons[0] if d.queued else "", ci_too_wide=wide,
    )


def too_wide(lo_pct: float, hi_pct: float) -> bool:
    """The interval reaches both halving and doubling (`judgement.INTERVAL_TOO_WIDE_RATIO`): it bounds nothing."""
    ratio = J.INTERVAL_TOO_WIDE_RATIO
    return 1.0 + lo_pct / 100.0 <= 1.0 / ratio and 1.0 + hi_pct / 100.0 >= ratio


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
        "args, SGLang version, GPU model/count or driver makes a cell confounded (no verdict); both servers "
        "reporting the same backend is refused.",
        "Unit of evidence: a server start. Runs are averaged within their start; the starts are the samples "
        "(log scale, so effects are ratios); a side needs 2 starts. An import names its start with `moe-tui "
        "import --server-start NAME` (one file per start) or by server_info's pid; none -> unverified. An import "
        "that does not record the resolved backend, its launch settings or its output tokens is unverified too.",
        "Noise: each side's own variance over its server starts, moderated empirical-Bayes style (limma, Smyth "
        "2004) toward a prior fitted per metric over the grid's side-cells (a trend in log concurrency, the side "
        "as a covariate); Welch-Satterthwaite degrees of freedom, so unequal start counts or unequal noise keep "
        "their own weight. Assumes log values are roughly normal within a side and cell.",
        f"Control inside the comparison: every cell is tested twice, raw and against concurrency "
        f"{J.CONTROL_CONCURRENCY} measured on the same server starts (log(cell / control) per start, candidate "
        "minus baseline: an environment shift of any size cancels); a verdict needs both to clear the bar in one "
        "direction (intersection-union: its error rate is at most the better-protected test's).",
        f"Better/worse needs the family-corrected intervals (Bonferroni: level 1 - {settings.alpha:g}/m over the "
        f"family's m tested cells) wholly beyond ±{settings.min_effect_pct:g}% of the baseline, raw and against the "
        "control; the raw interval is the one shown (the control-relative one beside it). Holm-adjusted p-values "
        "(of the larger of the two) are reported beside it.",
        "Primary family: output throughput across concurrencies; secondary family: every other metric's "
        "cells together (each family's chance of any false verdict is at most alpha).",
        f"A/A grid of this size: {tested} tested cell(s) would show {tested * settings.alpha:.2f} false verdicts on "
        f"average at {settings.alpha:g} each without correction; with it, a false verdict in at most "
        f"{(prim.max_false_rate if prim else 0) * 100:g}% of grids (primary) and "
        f"{(sec.max_false_rate if sec else 0) * 100:g}% (secondary).",
        f"Flagged runs ({', '.join(sorted(J.SUSPECT_FLAGS))}) are left out of the mean"
        + (" (included now, so their cells are unreliable)" if settings.include_flagged else "")
        + f"; a cell needs {J.MIN_CLEAN_RUNS} clean runs a side. P99 needs "
        f"{J.PERCENTILE_MIN_REQUESTS['p99']} requests a run; output tokens per request may differ by "
        f"{J.OUTPUT_TOKENS_TOLERANCE_PCT:g}% at most.",
        f"Control check beside the grid: equivalence of the raw throughput at concurrency {J.CONTROL_CONCURRENCY} "
        f"within ±{settings.control_margin_pct:g}% (below the minimum effect), reported, never a blanket pass. A cell "
        "whose starts did not also measure the control, or where raw and control-relative disagree, is "
        "uncontrolled" + (" (shown now, labelled, as accepted)." if settings.accept_uncontrolled
                          else " (no verdict, no delta)."),
        "Fixed horizon: no verdict (and no delta) while a cell's first plan still runs; a cell whose earlier "
        "plan finished keeps its verdict, marked provisional, while new runs are queued for it; a plan cancelled, "
        "skipped or cleared leaves its cells cut short until re-planned. Sides whose timed runs do not overlap in "
        "time are uncontrolled; runs without a time are said ('time unknown'), never a reason to skip the rule.",
    )
