"""The control check: at a low concurrency (2, else 1) the MoE backend should barely matter, so the
two columns should measure the same there. It is an equivalence test, not a difference test:

- absent: neither concurrency 2 nor 1 was measured by both sides;
- inconclusive: fewer than `judgement.CONTROL_MIN_RUNS` clean runs on a side, different specs, or
  an interval too wide to tell (more repeats only narrow it, so they never make the check weaker);
- agrees: the 90% interval of the relative difference lies inside +/- the margin (TOST at 5%);
- differs: the point estimate is beyond the margin and the 99% interval excludes zero.

Output throughput's noise is the grid's pooled estimate (`stats.cell_test`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from moe_tui import judgement as J
from moe_tui.compare.model import BASELINE, CANDIDATE, ControlCheck, SidePoint
from moe_tui.compare.runs import format_number, format_pct
from moe_tui.compare.stats import PooledNoise, cell_test


def control_check(points: Mapping[tuple[str, int], SidePoint], values: Mapping[tuple[str, int], Sequence[float]],
                  pooled: PooledNoise, margin_pct: float, environment: Sequence[str] = ()) -> ControlCheck:
    """`values`: (side, concurrency) -> the clean output throughput values averaged there."""
    env = tuple(environment)

    def result(state: str, conc: int | None, text: str, na: int = 0, nb: int = 0, pct: float | None = None,
               lo: float | None = None, hi: float | None = None) -> ControlCheck:
        return ControlCheck(state, conc, pct, lo, hi, margin_pct, na, nb, text, env)

    for conc in J.CONTROL_CONCURRENCIES:
        pa, pb = points.get((BASELINE, conc)), points.get((CANDIDATE, conc))
        if pa is None or pb is None or pa.fingerprint is None or pb.fingerprint is None:
            continue
        if pa.fingerprint != pb.fingerprint:
            return result(J.CONTROL_INCONCLUSIVE, conc,
                          f"control check inconclusive: the two sides ran different specs at concurrency {conc}")
        va, vb = list(values.get((BASELINE, conc), ())), list(values.get((CANDIDATE, conc), ()))
        na, nb = len(va), len(vb)
        if min(na, nb) < J.CONTROL_MIN_RUNS:
            return result(J.CONTROL_INCONCLUSIVE, conc,
                          f"control check inconclusive at concurrency {conc}: {na} vs {nb} clean runs; it needs "
                          f"at least {J.CONTROL_MIN_RUNS} a side (never a pass on fewer)", na, nb)
        test = cell_test(va, vb, pooled)
        mean_a = sum(va) / na
        if test is None or mean_a == 0:
            return result(J.CONTROL_INCONCLUSIVE, conc, f"control check inconclusive at concurrency {conc}: "
                          "no spread to judge from (identical repeats)", na, nb)
        lo, hi = (x / mean_a * 100.0 for x in test.interval(J.CONTROL_AGREE_CONFIDENCE))
        dlo, dhi = test.interval(J.CONTROL_DIFFER_CONFIDENCE)
        pct = test.delta_pct
        what = (f"output tok/s at concurrency {conc}: {format_number(mean_a)} vs {format_number(sum(vb) / nb)} "
                f"({format_pct(pct)}, 90% interval [{format_pct(lo)}, {format_pct(hi)}], margin ±{margin_pct:g}%)")
        if -margin_pct < lo and hi < margin_pct:
            return result(J.CONTROL_AGREES, conc, f"control check agrees: {what}", na, nb, pct, lo, hi)
        if abs(pct) > margin_pct and (dlo > 0 or dhi < 0):
            return result(J.CONTROL_DIFFERS, conc,
                          f"ENVIRONMENT DIFFERS: control check {what}; beyond the margin and the 99% interval "
                          "excludes 0. At this concurrency the MoE backend should barely matter: check clocks, "
                          "server args, the benchmark client and the machine; no verdict stands meanwhile.",
                          na, nb, pct, lo, hi)
        return result(J.CONTROL_INCONCLUSIVE, conc,
                      f"control check inconclusive: {what}; the interval is neither inside the margin nor clear "
                      "of zero beyond it (more repeats narrow it)", na, nb, pct, lo, hi)
    return result(J.CONTROL_ABSENT, None,
                  "control check absent: neither concurrency 2 nor 1 was measured by both sides; add "
                  "concurrency 2 to both sweeps to check the environments agree")
