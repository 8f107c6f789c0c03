"""`build_grid_from_runs`: pure, runs in, grid out (`moe_tui.grids.pair.build_grid` reads them from the store)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from moe_tui import judgement as J
from moe_tui.compare.confound import derived_notes, server_args_missing
from moe_tui.compare.control import control_check
from moe_tui.compare.grid import (
    Draft,
    cell_confounders,
    environment_beside,
    finish,
    gate,
    method_lines,
    pre_state,
    provisional,
    side_stats,
)
from moe_tui.compare.memo import Kept, build_scope
from moe_tui.compare.model import (
    BASELINE,
    CANDIDATE,
    METRICS,
    PRIMARY_METRIC,
    CompareError,
    CompareSettings,
    ComparisonGrid,
    ControlCheck,
    FamilySummary,
    GridCell,
    MetricDef,
    PlanCount,
    ProvenanceRow,
    SidePoint,
    ThroughputSeries,
)
from moe_tui.compare.points import Keyed, SideRuns, choose_fingerprints, side_point
from moe_tui.compare.runs import (
    NOT_RECORDED,
    PROVENANCE_ORDER,
    Run,
    normalise,
    side_provenance,
    snapshot_diff,
    snapshot_text,
)
from moe_tui.compare.sources import RunSource, memory_source
from moe_tui.compare.verdict import run_tests
from moe_tui.profiles import SettingDiff
from moe_tui.records import ProfileSnapshot


def _concurrencies(by_conc: Mapping[str, Mapping[int, Sequence[Keyed]]], fingerprint: str | None,
                   names: tuple[str, str]) -> list[int]:
    concs = sorted(set(by_conc[BASELINE]) | set(by_conc[CANDIDATE]))
    if fingerprint is None:
        return concs
    concs = [c for c in concs if any(r.fingerprint.startswith(fingerprint)
                                     for s in (BASELINE, CANDIDATE) for r in by_conc[s].get(c, ()))]
    if not concs:
        raise CompareError(f"--fingerprint {fingerprint}: neither {names[0]} nor {names[1]} has a run with that "
                           "fingerprint")
    return concs


def build_grid_from_runs(
    baseline_runs: Iterable[object], candidate_runs: Iterable[object], *,
    baseline_name: str = BASELINE, candidate_name: str = CANDIDATE, fingerprint: str | None = None,
    metrics: Sequence[MetricDef] = METRICS, settings: CompareSettings | None = None,
    plan: Mapping[tuple[str, str], PlanCount] | None = None,
) -> ComparisonGrid:
    """The comparison grid from two lists of runs (RunRecord or mappings with the same names).

    `fingerprint` (6+ leading characters) limits the grid to the concurrencies where either side
    has a run of it. `plan`: (profile name, requested spec fingerprint) -> PlanCount from the queue.
    What is derived from a run's dicts is derived once per build (`compare.memo`).
    """
    with build_scope():
        return _build(baseline_runs, candidate_runs, baseline_name, candidate_name, fingerprint, metrics,
                      settings, plan)


def _build(baseline_runs: Iterable[object], candidate_runs: Iterable[object], baseline_name: str,
           candidate_name: str, fingerprint: str | None, metrics: Sequence[MetricDef],
           settings: CompareSettings | None, plan: Mapping[tuple[str, str], PlanCount] | None) -> ComparisonGrid:
    if fingerprint is not None and len(fingerprint) < 6:
        raise CompareError(f"--fingerprint {fingerprint!r}: give at least 6 characters of the fingerprint")
    sources = {BASELINE: memory_source([normalise(r, f"{baseline_name} run") for r in baseline_runs]),
               CANDIDATE: memory_source([normalise(r, f"{candidate_name} run") for r in candidate_runs])}
    return build_from_sources(sources, (baseline_name, candidate_name), fingerprint, metrics, settings, plan)


def build_grid_from_sources(baseline: RunSource, candidate: RunSource, *, baseline_name: str, candidate_name: str,
                            fingerprint: str | None = None, metrics: Sequence[MetricDef] = METRICS,
                            settings: CompareSettings | None = None,
                            plan: Mapping[tuple[str, str], PlanCount] | None = None,
                            kept: Kept | None = None) -> ComparisonGrid:
    """The grid from two `RunSource`s (keys first, the chosen specs' runs read whole after): the same
    grid `build_grid_from_runs` makes of the same runs, reading only what it judges. `kept`: what an
    open grid derived from its runs in earlier builds (`compare.memo.Kept`)."""
    if fingerprint is not None and len(fingerprint) < 6:
        raise CompareError(f"--fingerprint {fingerprint!r}: give at least 6 characters of the fingerprint")
    with build_scope(kept):
        return build_from_sources({BASELINE: baseline, CANDIDATE: candidate}, (baseline_name, candidate_name),
                                  fingerprint, metrics, settings, plan)


def build_from_sources(sources: Mapping[str, RunSource], names: tuple[str, str], fingerprint: str | None,
                       metrics: Sequence[MetricDef], settings: CompareSettings | None,
                       plan: Mapping[tuple[str, str], PlanCount] | None) -> ComparisonGrid:
    settings = settings or CompareSettings()
    warnings: list[str] = []
    for side, name in ((BASELINE, names[0]), (CANDIDATE, names[1])):
        if sources[side].bad:
            warnings.append(f"{name}: run(s) {', '.join(map(str, sources[side].bad))} have no max_concurrency in "
                            "their spec; left out")
    by_conc = {s: sources[s].keys for s in (BASELINE, CANDIDATE)}
    concurrencies = _concurrencies(by_conc, fingerprint, names)
    points: dict[tuple[str, int], SidePoint] = {}
    side_runs: dict[tuple[str, int], SideRuns] = {}
    for conc in concurrencies:
        fa, fb = choose_fingerprints(by_conc[BASELINE].get(conc, []), by_conc[CANDIDATE].get(conc, []), fingerprint)
        for side, fp, other in ((BASELINE, fa, fb), (CANDIDATE, fb, fa)):
            points[(side, conc)], side_runs[(side, conc)] = side_point(
                side, conc, by_conc[side].get(conc, []), fp, other, settings.include_flagged,
                sources[side].of_spec(conc, fp) if fp is not None else ())
    drafts = _drafts(concurrencies, metrics, points, side_runs, names, settings, plan or {})
    control = control_check(points, {k: sr.averaged for k, sr in side_runs.items()}, settings.control_margin_pct,
                            environment_beside(side_runs))
    ctl_runs, ctl_why = _control_runs(points, side_runs)
    families = run_tests(drafts, settings, ctl_runs, ctl_why)
    for d in drafts:
        gate(d, control, settings)
        provisional(d)
    cells = tuple(finish(d, settings) for d in drafts)
    return _assemble(names, metrics, concurrencies, cells, points, side_runs, sources, control, warnings,
                     settings, families)


def _control_runs(points: Mapping[tuple[str, int], SidePoint], side_runs: Mapping[tuple[str, int], SideRuns]
                  ) -> tuple[tuple[Sequence[Run], Sequence[Run]] | None, str]:
    """Each side's clean runs at the control concurrency (both of one spec), or None and why not."""
    conc = J.CONTROL_CONCURRENCY
    pa, pb = points.get((BASELINE, conc)), points.get((CANDIDATE, conc))
    if pa is None or pb is None or pa.fingerprint is None or pb.fingerprint is None:
        return None, (f"control absent: concurrency {conc} was not measured by both sides (add it to both "
                      "sweeps: every verdict is judged against it on the same server starts)")
    if pa.fingerprint != pb.fingerprint:
        return None, f"control unusable: the two sides ran different specs at concurrency {conc}"
    return (side_runs[(BASELINE, conc)].averaged, side_runs[(CANDIDATE, conc)].averaged), ""


def _drafts(concurrencies: Sequence[int], metrics: Sequence[MetricDef], points: Mapping[tuple[str, int], SidePoint],
            side_runs: Mapping[tuple[str, int], SideRuns], names: tuple[str, str], settings: CompareSettings,
            plan: Mapping[tuple[str, str], PlanCount]) -> list[Draft]:
    drafts = []
    for conc in concurrencies:
        pa, pb = points[(BASELINE, conc)], points[(CANDIDATE, conc)]
        ra, rb = side_runs[(BASELINE, conc)], side_runs[(CANDIDATE, conc)]
        conf = cell_confounders((ra, rb), settings.vary) if pa.fingerprint and pb.fingerprint else ()
        for metric in metrics:
            sa, ma = side_stats(pa, ra, metric, settings.include_flagged)
            sb, mb = side_stats(pb, rb, metric, settings.include_flagged)
            d = Draft(conc, metric, pa, pb, sa, sb)
            pre_state(d, names, (ra, rb), (ma, mb), conf, settings, plan)
            drafts.append(d)
    return drafts


def _assemble(names: tuple[str, str], metrics: Sequence[MetricDef], concurrencies: Sequence[int],
              cells: tuple[GridCell, ...], points: Mapping[tuple[str, int], SidePoint],
              side_runs: Mapping[tuple[str, int], SideRuns], sources: Mapping[str, RunSource], control: ControlCheck,
              warnings: list[str], settings: CompareSettings, families: list[FamilySummary]) -> ComparisonGrid:
    used = {s: [r for (side, _), sr in side_runs.items() if side == s for r in sr.complete]
            for s in (BASELINE, CANDIDATE)}
    if control.failed:
        warnings.insert(0, control.text)
    snaps, diffs = _profiles(names, used, sources, warnings, settings)
    provenance = _provenance_rows(names, used, sources, warnings)
    conf = tuple(dict.fromkeys(c for cell in cells for c in cell.confounders))
    if conf:
        warnings.insert(0, f"confounded: {len(conf)} difference(s) besides {', '.join(sorted(settings.vary))}: "
                        + "; ".join(c.describe() for c in conf))
    warnings.extend(derived_notes(used[BASELINE], used[CANDIDATE]))
    missing = server_args_missing(used[BASELINE], used[CANDIDATE])
    if missing:
        warnings.append(f"resolved server args not recorded for the {' and '.join(missing)}: launch settings are "
                        "compared from the profile snapshots only")
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
        baseline_name=names[0], candidate_name=names[1], metrics=tuple(metrics),
        concurrencies=tuple(concurrencies), cells=cells, points=points,
        baseline_series=_series(BASELINE, concurrencies, cells, side_runs),
        candidate_series=_series(CANDIDATE, concurrencies, cells, side_runs),
        backend_diff=tuple(d for d in diffs if d.kind == "backend"),
        launch_diff=tuple(d for d in diffs if d.kind == "launch"),
        identity_diff=tuple(d for d in diffs if d.kind == "identity"),
        baseline_profile=snaps[BASELINE], candidate_profile=snaps[CANDIDATE], provenance=provenance,
        control=control, warnings=tuple(warnings),
        flags=(J.FLAG_ENVIRONMENT_DIFFERS,) if control.failed else (),
        simulated=sources[BASELINE].simulated() or sources[CANDIDATE].simulated(), specs=specs,
        spec_users={k: tuple(v) for k, v in spec_users.items()}, settings=settings, confounders=conf,
        families=tuple(families), method=method_lines(settings, families),
    )


def _profiles(names: tuple[str, str], used: Mapping[str, list[Run]], sources: Mapping[str, RunSource],
              warnings: list[str], settings: CompareSettings) -> tuple[dict[str, ProfileSnapshot], list[SettingDiff]]:
    snaps: dict[str, ProfileSnapshot] = {}
    for side, name in ((BASELINE, names[0]), (CANDIDATE, names[1])):
        pool = used[side] or sources[side].every()
        latest = max(pool, key=lambda r: r.order) if pool else None
        snaps[side] = dict(latest.profile) if latest is not None else {}
        distinct = {snapshot_text(r.profile) for r in used[side] if r.profile}
        if len(distinct) > 1:
            warnings.append(f"{name}: the averaged runs were made with {len(distinct)} different profile snapshots "
                            "(the profile was edited between runs)")
    if not snaps[BASELINE] or not snaps[CANDIDATE]:
        # A side with no run yet (a campaign's first sweep) is "not yet", not a snapshot that went missing.
        unrun = [n for side, n in zip((BASELINE, CANDIDATE), names) if not snaps[side] and not sources[side].every()]
        missing = [n for side, n in zip((BASELINE, CANDIDATE), names) if not snaps[side] and n not in unrun]
        if unrun:
            warnings.append(f"no run of {', '.join(unrun)} yet: launch settings are compared once it has one")
        if missing:
            warnings.append(f"profile snapshot not recorded for {', '.join(missing)}: launch settings cannot be compared")
        return snaps, []
    return snaps, snapshot_diff(snaps[BASELINE], snaps[CANDIDATE], settings.vary)


def _provenance_rows(names: tuple[str, str], used: Mapping[str, list[Run]], sources: Mapping[str, RunSource],
                     warnings: list[str]) -> tuple[ProvenanceRow, ...]:
    prov_a = side_provenance(used[BASELINE] or sources[BASELINE].every())
    prov_b = side_provenance(used[CANDIDATE] or sources[CANDIDATE].every())
    keys = [k for k in PROVENANCE_ORDER if k in prov_a or k in prov_b]
    keys += sorted((set(prov_a) | set(prov_b)) - set(keys))
    rows = []
    for key in keys:
        va, vb = prov_a.get(key, NOT_RECORDED), prov_b.get(key, NOT_RECORDED)
        rows.append(ProvenanceRow(key, va, vb, NOT_RECORDED not in (va, vb) and va != vb))
    for name, prov in zip(names, (prov_a, prov_b)):
        # derived server values (the KV pool) may differ start to start: shown, never a warning
        mixed = [k for k, v in prov.items() if v.startswith("mixed: ") and k not in J.SERVER_ARGS_SHOWN]
        if mixed:
            warnings.append(f"{name}: runs disagree among themselves on {', '.join(mixed)}")
    return tuple(rows)


def _series(side: str, concurrencies: Sequence[int], cells: Sequence[GridCell],
            side_runs: Mapping[tuple[str, int], SideRuns]) -> ThroughputSeries:
    by_conc = {c.concurrency: c for c in cells if c.metric == PRIMARY_METRIC}
    means, stds, ns, comparable, flagged = [], [], [], [], []
    for conc in concurrencies:
        sr = side_runs.get((side, conc))
        values = [v for r in (sr.flagged if sr else ()) if isinstance(v := r.summary.get(PRIMARY_METRIC), (int, float))
                  and not isinstance(v, bool) and math.isfinite(v)]
        flagged.append(sum(values) / len(values) if values else None)
        cell = by_conc.get(conc)
        stats = None if cell is None else (cell.baseline if side == BASELINE else cell.candidate)
        means.append(stats.mean if stats else None)
        stds.append(stats.std if stats else None)
        ns.append(stats.n if stats else 0)
        comparable.append(bool(cell and cell.delta_pct is not None))  # no verdict: drawn as not comparable
    return ThroughputSeries(tuple(concurrencies), tuple(means), tuple(stds), tuple(ns), tuple(comparable),
                            tuple(flagged))


def plan_counts(rows: Iterable[Mapping[str, Any]],
                expected: Mapping[tuple[int, str, str], int] | None = None) -> dict[tuple[str, str], PlanCount]:
    """(profile, requested fingerprint) -> planned queue items, those still pending or running, and those
    of the latest plan touching it that were cut: cancelled or skipped items, plus items its campaign
    planned (`expected`: (campaign id, profile, fingerprint) -> count, from the stored definitions) that
    are no longer in the queue (cleared). `rows`: per-state counts (profile_name, fingerprint, state, n,
    and campaign_id when known). A newer plan for the key (a re-plan) leaves the older cut behind. `earlier`:
    the items of plans done in full, nothing pending or cut (the runs a cell had before an open plan)."""
    expected = expected or {}
    present: dict[tuple[int, str, str], int] = {}
    latest: dict[tuple[str, str], int] = {}
    out: dict[tuple[str, str], PlanCount] = {}
    cut_by: dict[tuple[int, str, str], int] = {}
    kept: dict[tuple[int, str, str], tuple[int, int]] = {}  # (campaign, *key) -> (planned, pending)
    for r in rows:
        key = (r["profile_name"], r["fingerprint"])
        camp = int(r.get("campaign_id") or 0)
        latest[key] = max(latest.get(key, 0), camp)
        present[(camp, *key)] = present.get((camp, *key), 0) + r["n"]
        planned, pending, cut, _ = out.get(key, PlanCount(0, 0))
        if r["state"] in ("cancelled", "skipped"):
            cut_by[(camp, *key)] = cut_by.get((camp, *key), 0) + r["n"]
            out[key] = PlanCount(planned, pending, cut)
            continue
        queued = r["n"] if r["state"] in ("pending", "running") else 0
        out[key] = PlanCount(planned + r["n"], pending + queued, cut)
        n0, q0 = kept.get((camp, *key), (0, 0))
        kept[(camp, *key)] = (n0 + r["n"], q0 + queued)
    for camp, profile, fp in expected:
        latest[(profile, fp)] = max(latest.get((profile, fp), 0), camp)
    earlier: dict[tuple[str, str], int] = {}  # per key, in one pass (a store holds thousands of campaigns)
    for ck, (n, queued) in kept.items():
        if not queued and not cut_by.get(ck) and expected.get(ck, 0) <= present.get(ck, 0):
            earlier[ck[1:]] = earlier.get(ck[1:], 0) + n
    for key, camp in latest.items():
        missing = max(0, expected.get((camp, *key), 0) - present.get((camp, *key), 0))
        cut = cut_by.get((camp, *key), 0) + missing
        planned, pending, _, _ = out.get(key, PlanCount(0, 0))
        out[key] = PlanCount(planned, pending, cut, earlier.get(key, 0))
    return out


def unknown_profiles(known: Sequence[str], names: Sequence[str], where: str) -> CompareError | None:
    """The error for profile names without runs (with a did-you-mean), or None when all are known."""
    missing = [n for n in names if n not in known]
    if not missing:
        return None
    import difflib

    hints = [f"'{m}'" + (f" (did you mean '{h[0]}'?)" if (h := difflib.get_close_matches(m, known, n=1)) else "")
             for m in missing]
    return CompareError(f"no runs for profile {', '.join(hints)} in the store {where}; "
                        f"profiles with runs: {', '.join(known) if known else 'none'}")
