"""Statistics of the grid: moderated variances over server-start means, Holm families, Welch deltas.

The grid's test (`fit_priors`, `moderated_test`, below) works on the log of each server start's mean:
each cell's own variance (both sides pooled), moderated toward a prior fitted per metric with a trend
in log concurrency (limma, Smyth 2004). The older pooled-noise test (`PooledNoise`, `cell_test`) and
`welch_delta` stay as references (tests, investigations).

Documented for the reader of a verdict (the README's "How a verdict is decided" says it in words):
- Per side: mean and sample standard deviation (ddof=1) of the runs averaged.
- `welch_delta`: delta = candidate - baseline with a Welch interval (matches scipy's ttest_ind
  with equal_var=False); no interval when a side has one value or both sides have zero spread.
- `cell_test` (the previous grid's test, kept as a reference): relative noise pooled over the grid,
  which assumes it is similar across concurrencies; the moderated test replaced it because it is not.
- `holm`: step-down adjusted p-values within a family (valid under any dependence between cells).
- `moderated_test` with `Prior(0, 0)`: the control check's own-noise test (its 90% interval for TOST
  agreement, its 99% one for "differs").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
SETTLE_POWER = 0.80
SETTLE_MAX_REPEATS = 1000


@dataclass(frozen=True)
class DeltaStats:
    delta: float
    delta_pct: float | None
    ci_low: float | None
    ci_high: float | None
    df: float | None


def t_ppf(q: float, df: float) -> float:
    # scipy.special.stdtrit is the Student t quantile without scipy.stats' per-call overhead.
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def t_sf2(t: float, df: float) -> float:
    """Two-sided p-value of |t| with df degrees of freedom."""
    from scipy.special import stdtr

    return float(2.0 * stdtr(df, -abs(t)))


def welch_delta(baseline: Sequence[float], candidate: Sequence[float], confidence: float = CONFIDENCE) -> DeltaStats:
    """Delta of means (candidate - baseline) with a Welch CI; no CI with one value or zero spread."""
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
        # Identical repeats: the noise is unknown, not zero; never a zero-width interval.
        return DeltaStats(delta, pct, None, None, None)
    df = se2 * se2 / (va * va / (a.size - 1) + vb * vb / (b.size - 1)) if va and vb else (
        a.size - 1 if va else b.size - 1)
    half = t_ppf(0.5 + confidence / 2.0, df) * math.sqrt(se2)
    return DeltaStats(delta, pct, delta - half, delta + half, df)


@dataclass(frozen=True)
class PooledNoise:
    """A metric's relative variance (cv^2) pooled over groups, with its degrees of freedom."""

    cv2: float
    df: int

    @classmethod
    def of(cls, groups: Iterable[Sequence[float]]) -> PooledNoise:
        ss, df = 0.0, 0
        for values in groups:
            arr = np.asarray(values, dtype=float)
            mean = float(arr.mean()) if arr.size else 0.0
            if arr.size < 2 or mean == 0 or float(arr.var()) == 0.0:
                continue
            ss += float(((arr / mean - 1.0) ** 2).sum())
            df += arr.size - 1
        return cls(ss / df if df else 0.0, df)


@dataclass(frozen=True)
class CellTest:
    delta: float
    delta_pct: float
    se: float  # standard error of the delta, in the metric's unit
    df: float
    p_value: float

    def interval(self, confidence: float) -> tuple[float, float]:
        half = t_ppf(0.5 + confidence / 2.0, self.df) * self.se
        return self.delta - half, self.delta + half


# A side whose own spread exceeds the pool beyond this F quantile is "noisier than the rest" and
# keeps its own variance and degrees of freedom.
HETEROGENEITY_QUANTILE = 0.99


def _side_var(values: np.ndarray, pooled: PooledNoise) -> tuple[float, float]:
    """(variance of the side's mean, its df): the pooled one, unless the side is clearly noisier."""
    from scipy.special import fdtri

    mean = float(values.mean())
    own = float(values.var(ddof=1))
    pool = pooled.cv2 * mean * mean
    if pooled.df > values.size - 1 and pool > 0:
        if own <= pool * float(fdtri(values.size - 1, pooled.df, HETEROGENEITY_QUANTILE)):
            return pool / values.size, float(pooled.df)
    return own / values.size, float(values.size - 1)


def cell_test(baseline: Sequence[float], candidate: Sequence[float], pooled: PooledNoise) -> CellTest | None:
    """Welch-style test of candidate vs baseline with pooled relative noise; None when untestable."""
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size < 2 or b.size < 2 or float(a.mean()) == 0:
        return None
    va, dfa = _side_var(a, pooled)
    vb, dfb = _side_var(b, pooled)
    se2 = va + vb
    if se2 <= 0:
        return None
    if dfa == dfb == float(pooled.df) and pooled.df > a.size - 1:
        df = float(pooled.df)  # both sides use the one pooled estimate: its df, not a sum of two
    else:
        df = se2 * se2 / ((va * va / dfa if va else 0.0) + (vb * vb / dfb if vb else 0.0))
    delta = float(b.mean() - a.mean())
    se = math.sqrt(se2)
    return CellTest(delta, delta / float(a.mean()) * 100.0, se, df, t_sf2(delta / se, df))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order (monotone, capped at 1)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def repeats_to_settle(
    std_baseline: float, std_candidate: float, delta: float, *,
    confidence: float = CONFIDENCE, power: float = SETTLE_POWER, max_repeats: int = SETTLE_MAX_REPEATS,
) -> int | None:
    """Repeats per side for one Welch test at `confidence` to detect `delta` with `power`.

    Starts from the normal approximation (a lower bound: t quantiles exceed z) and steps up until
    the t-based condition holds. None when delta is 0 or more than `max_repeats` are needed. For a
    single cell: a family correction asks for more.
    """
    from scipy.special import ndtri

    if not math.isfinite(delta) or delta == 0:
        return None
    va, vb = std_baseline ** 2, std_candidate ** 2
    if va + vb == 0:
        return None
    z = float(ndtri(0.5 + confidence / 2.0) + ndtri(power))
    n = max(2, math.ceil(z * z * (va + vb) / (delta * delta)))
    while n <= max_repeats:
        df = (va + vb) ** 2 * (n - 1) / (va * va + vb * vb)
        need = (t_ppf(0.5 + confidence / 2.0, df) + t_ppf(power, df)) * math.sqrt((va + vb) / n)
        if need <= abs(delta):
            return n
        n += 1
    return None


# -- moderated variances (empirical Bayes, limma-style) over server-start samples ----------------------
def trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y (Newton's method as in Smyth 2004's limma; y > 0)."""
    from scipy.special import polygamma

    if y > 1e7:
        return 1.0 / math.sqrt(y)
    if y < 1e-6:
        return 1.0 / y
    x = 0.5 + 1.0 / y
    for _ in range(50):
        tri = float(polygamma(1, x))
        step = tri * (1.0 - tri / y) / float(polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


@dataclass(frozen=True)
class Prior:
    """A cell's prior variance (log scale) and its degrees of freedom; df 0 means no borrowing."""

    s2: float
    df: float


def fit_priors(cells: Sequence[tuple[float, float, float]]) -> list[Prior]:
    """Per cell (x = log2 concurrency, s2 = own log-scale variance, d = its df): the prior it borrows.

    limma's fit of a scaled F distribution to the cells' variances, with a linear trend in x (three or
    more concurrencies; else a constant), so noise growing with concurrency is the prior's shape and
    not a deviation. The prior's df is what the spread of the variances around the trend allows
    (smaller when cells disagree more than sampling explains) and never more than the information the
    fitted trend holds at this cell (its leverage): a grid of few cells borrows little.
    """

    k = len(cells)
    if k < 2:
        return [Prior(0.0, 0.0)] * k
    x = np.array([c[0] for c in cells], dtype=float)
    design = np.column_stack([np.ones(k), x]) if k >= 3 and len(set(x.tolist())) >= 3 else np.ones((k, 1))
    return _priors(design, [c[1] for c in cells], [c[2] for c in cells])


def _priors(design: np.ndarray, variances: Sequence[float], dfs: Sequence[float]) -> list[Prior]:
    """limma's scaled-F fit of the variances (log scale, digamma-corrected) on `design`: each row's prior."""
    from scipy.special import digamma, polygamma

    d = np.asarray(dfs, dtype=float)
    e = np.log(np.asarray(variances, dtype=float)) - digamma(d / 2.0) + np.log(d / 2.0)
    trig = polygamma(1, d / 2.0)
    beta, *_ = np.linalg.lstsq(design, e, rcond=None)
    fitted = design @ beta
    resid_df = len(e) - design.shape[1]
    evar = float(((e - fitted) ** 2).sum() / resid_df) - float(trig.mean()) if resid_df > 0 else 0.0
    spread = max(evar, 0.0)
    leverage = np.einsum("ij,jk,ik->i", design, np.linalg.pinv(design.T @ design), design)
    out = []
    for i in range(len(e)):
        # Uncertainty of the prior's level at this cell: the true variance's scatter around the trend
        # (evar) plus the trend's own estimation error (leverage x the scatter of the e's).
        var_log = spread + float(leverage[i]) * (float(trig.mean()) + spread)
        df0 = 2.0 * trigamma_inverse(var_log) if var_log > 0 else 0.0
        s2 = float(math.exp(fitted[i] + digamma(df0 / 2.0) - math.log(df0 / 2.0))) if df0 > 0 else 0.0
        out.append(Prior(s2, df0))
    return out


@dataclass(frozen=True)
class ModeratedTest:
    """Candidate vs baseline on the log scale of per-start means: delta = log(ratio of geometric means)."""

    delta_log: float
    se: float
    df: float
    p_value: float
    own_df: float
    prior_df: float

    @property
    def delta_pct(self) -> float:
        return (math.exp(self.delta_log) - 1.0) * 100.0

    def interval_pct(self, confidence: float) -> tuple[float, float]:
        half = t_ppf(0.5 + confidence / 2.0, self.df) * self.se
        return (math.exp(self.delta_log - half) - 1.0) * 100.0, (math.exp(self.delta_log + half) - 1.0) * 100.0


def log_samples(values: Sequence[float]) -> np.ndarray | None:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(arr > 0):
        return None
    logs: np.ndarray = np.log(arr)
    return logs


def own_variance(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The two sides' pooled within-side variance of log values and its df (na + nb - 2)."""
    ss = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
    df = a.size + b.size - 2
    return (ss / df if df > 0 else 0.0), float(df)


def moderated_test(a: np.ndarray, b: np.ndarray, prior: Prior) -> ModeratedTest | None:
    """The cell's test with its own variance moderated by `prior` (df add; Smyth 2004, eq. 3)."""
    s2, d = own_variance(a, b)
    if d <= 0 or s2 <= 0:
        return None
    post = (prior.df * prior.s2 + d * s2) / (prior.df + d)
    df = prior.df + d
    se = math.sqrt(post * (1.0 / a.size + 1.0 / b.size))
    delta = float(b.mean() - a.mean())
    return ModeratedTest(delta, se, df, t_sf2(delta / se, df), d, prior.df)


# -- per-side moderated variances (Welch with empirical-Bayes priors) ---------------------------------
def fit_side_priors(cells: Sequence[tuple[float, int, float, float]]) -> list[Prior]:
    """Per side-cell (x = log2 concurrency, side 0/1, s2 = the side's own variance, d = its df): its prior.

    `fit_priors` with the side as a second covariate when both sides are present in at least two cells
    each: a side that is noisier everywhere (another machine, fewer and louder starts) keeps its level
    instead of being shrunk toward the quieter side's, which a pooled variance would do (5 v 2 starts at
    5% vs 1% noise: anti-conservative)."""
    k = len(cells)
    if k < 2:
        return [Prior(0.0, 0.0)] * k
    x = np.array([c[0] for c in cells], dtype=float)
    side = np.array([c[1] for c in cells], dtype=float)
    cols = [np.ones(k)]
    if len(set(x.tolist())) >= 3 and k >= 4:
        cols.append(x)
    if min(int((side == 0).sum()), int((side == 1).sum())) >= 2 and k >= len(cols) + 2:
        cols.append(side)
    return _priors(np.column_stack(cols), [c[2] for c in cells], [c[3] for c in cells])


def side_variance(values: np.ndarray) -> tuple[float, float]:
    """A side's own sample variance and its df (n - 1); (0, 0) with fewer than two values."""
    if values.size < 2:
        return 0.0, 0.0
    return float(values.var(ddof=1)), float(values.size - 1)


def welch_moderated(a: np.ndarray, b: np.ndarray, prior_a: Prior, prior_b: Prior) -> ModeratedTest | None:
    """Candidate minus baseline with each side's own variance moderated by its prior, Welch-Satterthwaite df.

    Unequal start counts and unequal noise keep their own weight (no pooling of the two sides); None when
    a side has fewer than two samples or the moderated spread is zero (noise unknown, never none)."""
    if a.size < 2 or b.size < 2:
        return None
    parts = []
    for values, prior in ((a, prior_a), (b, prior_b)):
        s2, d = side_variance(values)
        post = (prior.df * prior.s2 + d * s2) / (prior.df + d)
        parts.append((post / values.size, prior.df + d, d, prior.df))
    se2 = parts[0][0] + parts[1][0]
    if se2 <= 0:
        return None
    denom = sum(v * v / df for v, df, _, _ in parts if v > 0)
    df = se2 * se2 / denom
    delta = float(b.mean() - a.mean())
    se = math.sqrt(se2)
    return ModeratedTest(delta, se, df, t_sf2(delta / se, df), parts[0][2] + parts[1][2], parts[0][3] + parts[1][3])
