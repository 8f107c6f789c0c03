"""The control check beside the grid: at concurrency 2 the MoE backend should barely matter, so the
two columns should measure the same there. It is an equivalence test, reported beside the grid; it no
longer gates verdicts from beside them: each cell is judged against the control measured on its own
server starts (`compare.verdict`), where an environment shift cancels instead of hiding under a margin.

- absent: concurrency 2 was not measured by both sides;
- inconclusive: fewer than `judgement.CONTROL_MIN_RUNS` server starts on a side, different specs, or
  an interval too wide to tell (more starts only narrow it, so they never make the check weaker);
- agrees: the 90% interval of the relative difference lies inside +/- the margin (TOST at 5%);
- differs: the point estimate is beyond the margin and the 99% interval excludes zero.

Judged with the control cell's own noise: output throughput averaged within each server start, the
starts' log values as samples, the two sides' spread pooled (df = starts - 2), nothing borrowed from
the rest of the grid (a quiet control cell must not inherit the grid's louder noise, nor the reverse).
`overlapping` says whether the control's own runs of the two sides overlap in time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from moe_tui import judgement as J
from moe_tui.compare.evidence import overlap_problem, start_means
from moe_tui.compare.model import BASELINE, CANDIDATE, PRIMARY_METRIC, ControlCheck, SidePoint
from moe_tui.compare.runs import Run, format_number, format_pct
from moe_tui.compare.stats import Prior, log_samples, moderated_test

CONTROL_METRIC = PRIMARY_METRIC


def control_check(points: Mapping[tuple[str, int], SidePoint], runs: Mapping[tuple[str, int], Sequence[Run]],
                  margin_pct: float, environment: Sequence[str] = ()) -> ControlCheck:
    """`runs`: (side, concurrency) -> the clean runs averaged there."""
    env = tuple(environment)

    def result(state: str, conc: int | None, text: str, na: int = 0, nb: int = 0, pct: float | None = None,
               lo: float | None = None, hi: float | None = None, overlapping: bool = True) -> ControlCheck:
        return ControlCheck(state, conc, pct, lo, hi, margin_pct, na, nb, text, env, overlapping)

    for conc in J.CONTROL_CONCURRENCIES:
        pa, pb = points.get((BASELINE, conc)), points.get((CANDIDATE, conc))
        if pa is None or pb is None or pa.fingerprint is None or pb.fingerprint is None:
            continue
        if pa.fingerprint != pb.fingerprint:
            return result(J.CONTROL_INCONCLUSIVE, conc,
                          f"control check inconclusive: the two sides ran different specs at concurrency {conc}")
        ra, rb = list(runs.get((BASELINE, conc), ())), list(runs.get((CANDIDATE, conc), ()))
        overlapping = overlap_problem(ra, rb) is None
        va, vb = start_means(ra, CONTROL_METRIC), start_means(rb, CONTROL_METRIC)
        na, nb = len(va), len(vb)
        if min(na, nb) < J.CONTROL_MIN_RUNS:
            return result(J.CONTROL_INCONCLUSIVE, conc,
                          f"control check inconclusive at concurrency {conc}: {na} vs {nb} server starts; it needs "
                          f"at least {J.CONTROL_MIN_RUNS} a side (never a pass on fewer)", na, nb,
                          overlapping=overlapping)
        la, lb = log_samples(va), log_samples(vb)
        test = moderated_test(la, lb, Prior(0.0, 0.0)) if la is not None and lb is not None else None
        if test is None:
            return result(J.CONTROL_INCONCLUSIVE, conc, f"control check inconclusive at concurrency {conc}: "
                          "no spread to judge from (identical repeats)", na, nb, overlapping=overlapping)
        lo, hi = test.interval_pct(J.CONTROL_AGREE_CONFIDENCE)
        dlo, dhi = test.interval_pct(J.CONTROL_DIFFER_CONFIDENCE)
        pct = test.delta_pct
        what = (f"output tok/s at concurrency {conc}: {format_number(sum(va) / na)} vs {format_number(sum(vb) / nb)} "
                f"over {na} vs {nb} server starts ({format_pct(pct)}, 90% interval [{format_pct(lo)}, "
                f"{format_pct(hi)}] from its own noise, margin ±{margin_pct:g}%)")
        if -margin_pct < lo and hi < margin_pct:
            return result(J.CONTROL_AGREES, conc, f"control check agrees: {what}", na, nb, pct, lo, hi, overlapping)
        if abs(pct) > margin_pct and (dlo > 0 or dhi < 0):
            return result(J.CONTROL_DIFFERS, conc,
                          f"ENVIRONMENT DIFFERS: control check {what}; beyond the margin and the 99% interval "
                          "excludes 0. At this concurrency the MoE backend should barely matter: check clocks, "
                          "server args, the benchmark client and the machine; verdicts stand only where the "
                          "control on their own server starts backs them.",
                          na, nb, pct, lo, hi, overlapping)
        return result(J.CONTROL_INCONCLUSIVE, conc,
                      f"control check inconclusive: {what}; the interval is neither inside the margin nor clear "
                      "of zero beyond it (more server starts narrow it)", na, nb, pct, lo, hi, overlapping)
    return result(J.CONTROL_ABSENT, None,
                  "control check absent: concurrency 2 was not measured by both sides (yet, where it is "
                  "queued; else add it to both sweeps): every verdict is judged against it on the same "
                  "server starts")
