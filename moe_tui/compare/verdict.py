"""The grid's tests and decisions: each testable cell raw and against the control on its own server starts.

- raw: the sides' per-start means (log scale), candidate minus baseline;
- against the control (difference in differences): per server start that measured both the cell and the
  control concurrency (`judgement.CONTROL_CONCURRENCY`), log(cell / control) of one metric; the start's
  environment (a slow host, a hot GPU, a day) acts on both and cancels, whatever its size;
- each with per-side variances moderated toward a prior fitted over the metric's side-cells (trend in log
  concurrency, the side as a covariate): Welch-Satterthwaite df, no pooling of unequal sides;
- Holm within the primary (output throughput) and secondary families on the larger of the two p-values, and
  better/worse only when both family-corrected (Bonferroni) intervals lie beyond the minimum effect in one
  direction: an intersection-union test, so the verdict's error rate is at most the better-protected test's.
  An environment shift biases the raw test and not the contrast; a backend that differs at the control
  biases the contrast and not the raw test (with interleaved starts); neither alone makes a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from moe_tui import judgement as J
from moe_tui.compare.evidence import start_mean_map
from moe_tui.compare.grid import Draft, _set
from moe_tui.compare.model import CompareSettings, FamilySummary
from moe_tui.compare.runs import Run, format_pct
from moe_tui.compare.stats import (
    ModeratedTest,
    Prior,
    fit_side_priors,
    holm,
    log_samples,
    side_variance,
    welch_moderated,
)

if TYPE_CHECKING:
    from moe_tui.compare.grid import LogSamples


def _samples(d: Draft) -> LogSamples | None:
    la, lb = log_samples(d.starts[0]), log_samples(d.starts[1])
    return None if la is None or lb is None else (la, lb)


def _did_samples(d: Draft, control: tuple[Sequence[Run], Sequence[Run]]) -> tuple[LogSamples | None, tuple[int, int]]:
    """The cell's within-start contrast against the control on each side: log(cell / control) per server
    start that measured both (same metric), so whatever that start's environment did to both cancels."""
    assert d.runs is not None
    out = []
    for cell_runs, ctl_runs in zip((d.runs[0].averaged, d.runs[1].averaged), control):
        cell, ctl = start_mean_map(cell_runs, d.metric.key), start_mean_map(ctl_runs, d.metric.key)
        out.append([math.log(v) - math.log(ctl[k]) for k, v in cell.items()
                    if k is not None and k in ctl and v > 0 and ctl[k] > 0])
    pairs = (len(out[0]), len(out[1]))
    if min(pairs) < 2:
        return None, pairs
    import numpy as np

    return (np.asarray(out[0], dtype=float), np.asarray(out[1], dtype=float)), pairs


def _moderate(members: Sequence[tuple[Draft, LogSamples]]) -> list[ModeratedTest | None]:
    """Welch tests with each side's variance moderated toward a prior fitted over the metric's side-cells
    (trend in log concurrency, the side as a covariate)."""
    cells: list[tuple[float, int, float, float]] = []
    where: list[tuple[int, int]] = []
    for i, (d, samples) in enumerate(members):
        for side, values in enumerate(samples):
            s2, df = side_variance(values)
            if s2 > 0 and df > 0:
                cells.append((math.log2(d.conc), side, s2, df))
                where.append((i, side))
    priors = dict(zip(where, fit_side_priors(cells)))
    none = Prior(0.0, 0.0)
    return [welch_moderated(la, lb, priors.get((i, 0), none), priors.get((i, 1), none))
            for i, (_, (la, lb)) in enumerate(members)]


def run_tests(drafts: Sequence[Draft], settings: CompareSettings,
              control: tuple[Sequence[Run], Sequence[Run]] | None = None, control_why: str = "") -> list[FamilySummary]:
    """Test every testable cell twice, raw (the sides' per-start means) and against the control measured on
    the same server starts (difference in differences), each with per-side moderated variances; Holm-adjust
    within the primary and the secondary family on the larger of the two p-values (an intersection-union
    test: a verdict needs both), and decide on the family-corrected intervals."""
    raw: dict[str, list[tuple[Draft, LogSamples]]] = {}
    did: dict[str, list[tuple[Draft, LogSamples]]] = {}
    for d in drafts:
        samples = _samples(d) if d.verdict is None else None
        if d.verdict is None and samples is None:
            _set(d, J.NOISE_UNKNOWN, "a value that is not positive: no relative noise to judge from")
        elif samples is not None:
            raw.setdefault(d.metric.key, []).append((d, samples))
            if control is not None and d.conc != J.CONTROL_CONCURRENCY:
                pair, d.did_pairs = _did_samples(d, control)
                if pair is not None:
                    did.setdefault(d.metric.key, []).append((d, pair))
    for members in raw.values():
        for (d, _), test in zip(members, _moderate(members)):
            d.test = test
            if test is None:
                _set(d, J.NOISE_UNKNOWN, "no spread to judge from")
    for members in did.values():
        for (d, _), test in zip(members, _moderate(members)):
            d.did = test
    families = []
    for name, primary in (("primary", True), ("secondary", False)):
        candidates = [d for d in drafts if d.verdict is None and d.metric.primary == primary and d.test is not None]
        # The control concurrency never carries a verdict (a difference there is the environment or the
        # backend at low load), so it claims no share of the family's alpha: it is read at the family's
        # level, its p-value Bonferroni-adjusted by the same m, and the comparison cells keep their power.
        tested = [d for d in candidates if d.conc != J.CONTROL_CONCURRENCY]
        m = max(len(tested), 1)
        for d, p in zip(tested, holm([_iut_p(d) for d in tested])):
            d.p_adjusted = p
            _decide(d, m, name, settings, control_why)
        for d in candidates:
            if d.conc == J.CONTROL_CONCURRENCY:
                d.p_adjusted = min(1.0, _iut_p(d) * m)
                _decide(d, m, name, settings, control_why)
        metrics = tuple(dict.fromkeys(d.metric.key for d in drafts if d.metric.primary == primary))
        families.append(FamilySummary(name, metrics, len(tested), settings.alpha, len(tested) * settings.alpha,
                                      settings.alpha if tested else 0.0))
    return families


def _iut_p(d: Draft) -> float:
    assert d.test is not None
    return max(d.test.p_value, d.did.p_value) if d.did is not None else d.test.p_value


def _call(t: ModeratedTest, confidence: float, min_effect: float) -> int:
    """+1 / -1 when the interval lies wholly beyond +/- the minimum effect (up / down), else 0."""
    lo, hi = t.interval_pct(confidence)
    return 1 if lo > min_effect else (-1 if hi < -min_effect else 0)


def _decide(d: Draft, family_size: int, family: str, settings: CompareSettings, control_why: str) -> None:
    """Better/worse when the Bonferroni interval (level 1 - alpha/m, m = the family's tested cells) lies
    wholly beyond the minimum effect, both raw and relative to the control on the same starts; the raw
    interval is the one shown (it is what the means on screen say), the control-relative one beside it."""
    t = d.test
    assert t is not None and d.p_adjusted is not None
    d.confidence = conf = 1.0 - settings.alpha / family_size
    lo, hi = t.interval_pct(conf)
    where = (f"{conf:.2%} interval [{format_pct(lo)}, {format_pct(hi)}] (family-corrected over "
             f"{family_size} {family} cell(s); Holm p {d.p_adjusted:.3g}; {t.own_df:g} own + {t.prior_df:.1f} "
             "borrowed df)")
    m = settings.min_effect_pct
    raw = _call(t, conf, m)
    verdict = (J.BETTER if (raw > 0) == d.metric.higher_is_better else J.WORSE) if raw else J.WITHIN_NOISE
    if d.conc == J.CONTROL_CONCURRENCY:
        _set(d, verdict, where if raw else _noise_words(where, d.p_adjusted, settings))
        if raw:
            d.uncontrolled = (f"this is the control concurrency ({J.CONTROL_CONCURRENCY}): a difference here is "
                              "the environment or the backend at low load, which no comparison can tell apart")
        return
    if d.did is None:
        _set(d, verdict, where if raw else _noise_words(where, d.p_adjusted, settings))
        na, nb = d.did_pairs
        d.uncontrolled = control_why or (
            f"no control on the same server starts: {na} vs {nb} of this cell's server starts also measured "
            f"concurrency {J.CONTROL_CONCURRENCY} (a side needs 2)")
        return
    dlo, dhi = d.did.interval_pct(conf)
    rel = _call(d.did, conf, m)
    rel_where = (f"against the control (concurrency {J.CONTROL_CONCURRENCY}) on the same {d.did_pairs[0]} vs "
                 f"{d.did_pairs[1]} server starts: {format_pct(d.did.delta_pct)} [{format_pct(dlo)}, "
                 f"{format_pct(dhi)}]")
    if raw and rel == raw:
        _set(d, verdict, where, f"{rel_where}: agrees")
    elif raw:
        _set(d, verdict, where, rel_where)
        d.uncontrolled = (f"the control moved with it ({rel_where}): an environment that differs and a backend "
                          "that differs cannot be told apart here")
    elif rel:
        _set(d, J.WITHIN_NOISE, _noise_words(where, d.p_adjusted, settings),
             f"{rel_where}: clear of the minimum effect only relative to the control; the backends may differ "
             f"at concurrency {J.CONTROL_CONCURRENCY} itself, so no verdict")
    else:
        _set(d, J.WITHIN_NOISE, _noise_words(where, d.p_adjusted, settings), rel_where)


def _noise_words(where: str, p_adjusted: float, settings: CompareSettings) -> str:
    m = settings.min_effect_pct
    if p_adjusted < settings.alpha:
        return f"{where}; significant, but the interval reaches inside the {m:g}% minimum effect"
    return f"{where}; not under alpha {settings.alpha:g}"


