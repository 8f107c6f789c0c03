"""Where each side's decode step goes, and which classes explain the difference between two sides.

- `side_breakdown(label, ranks)`: one side (a profiled run: one trace per TP rank) as ms per decode
  step by kernel class, each with its noise: the standard error of the class's per-step mean over
  the steps of every rank (steps x ranks samples), so a class that jumps from step to step or from
  rank to rank is not mistaken for a difference between backends.
- `compare_sides(a, b, run_cv=...)`: per class B - A in ms/step; "beyond noise" when |delta|
  exceeds `NOISE_Z` times the combined uncertainty plus the `NOISE_FLOOR_MS` a profiler's
  timestamps can resolve. The uncertainty has two parts: the step-to-step standard errors seen in
  the traces, and what one profiled run a side cannot see: two server starts differ as a whole
  (clocks, memory layout). That part is `run_cv` times the class's time, `run_cv` being the
  relative run-to-run spread the grid measured for this pair (its pooled CV), else
  `DEFAULT_RUN_CV` (the grid's minimum practical effect);
  the share of the total step-time gap when the total itself is beyond its noise (else no share is
  printed: a share of nothing is not an explanation); the kernels that moved most.
- `moe_gemm_roofline`: the MoE GEMM ms/step next to the memory-bound time of the expert weights
  one step must read (the roofline's numbers), as "x times its roofline".

A profiled run is one server start a side: the breakdown explains the runs profiled, it is not a
verdict on the backends (the grid's repeats and control give that). Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from moe_tui.explain.rules import CLASS_WORDS, CLASSES, MOE_GEMM, OTHER, classify, short_name
from moe_tui.explain.trace import RankProfile
from moe_tui.records.grid import ClassDeltaJson, ExplanationJson, MoeGemmJson, SideJson

NOISE_Z = 3.0  # standard errors a class must move by to count as moved (about 99.7% two-sided)
NOISE_FLOOR_MS = 0.002  # 2 us: below what kernel timestamps resolve over a few steps
DEFAULT_RUN_CV = 0.02
TOP_KERNELS = 8
TOP_OTHER_NAMES = 5
# The first profiled step carries the profiler's own start (CUPTI buffers, a first replay after a
# pause): measured on the H200 trace in tests/data, its MoE GEMMs ran 45% slower and it held a
# 100 ms host stall. It is left out when a rank has at least SKIP_FIRST_FROM steps. The last step's
# window ends at its last kernel (no next launch bounds it), so it lacks the launch gap the others
# carry: left out from SKIP_LAST_FROM steps.
SKIP_FIRST_FROM = 3
SKIP_LAST_FROM = 5


class ExplainError(ValueError):
    """A side with nothing to explain (no ranks, no steps); the message says which side."""


@dataclass(frozen=True)
class ClassTime:
    kernel_class: str
    ms: float  # mean per decode step (over steps and ranks)
    se: float  # standard error of that mean

    @property
    def words(self) -> str:
        return CLASS_WORDS.get(self.kernel_class, self.kernel_class)


@dataclass(frozen=True)
class KernelRow:
    name: str
    kernel_class: str
    ms_per_step: float
    calls_per_step: float


@dataclass(frozen=True)
class SideBreakdown:
    label: str
    ranks: tuple[int, ...]
    steps: int  # per rank (the smallest)
    classes: tuple[ClassTime, ...]  # in CLASSES order
    step_ms: float
    step_se: float
    kernels: tuple[KernelRow, ...]  # all kernels, by ms/step (mean over ranks)
    stage: str | None = None

    def ms(self, kernel_class: str) -> float:
        return next((c.ms for c in self.classes if c.kernel_class == kernel_class), 0.0)

    def other_names(self, limit: int = TOP_OTHER_NAMES) -> list[str]:
        return [short_name(k.name) for k in self.kernels if k.kernel_class == OTHER][:limit]

    def to_dict(self) -> SideJson:
        return {"label": self.label, "ranks": list(self.ranks), "steps": self.steps, "stage": self.stage,
                "step_ms": self.step_ms, "step_se": self.step_se,
                "classes": {c.kernel_class: {"ms": c.ms, "se": c.se} for c in self.classes},
                "other_top": self.other_names(),
                "top_kernels": [{"name": k.name, "class": k.kernel_class, "ms_per_step": k.ms_per_step,
                                 "calls_per_step": k.calls_per_step} for k in self.kernels[:TOP_KERNELS]]}


def _se(values: Sequence[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else math.nan


def counted_steps(rank: RankProfile) -> tuple[dict[str, float], ...]:
    """The steps a breakdown counts: the first and last left out as said above."""
    steps = tuple(dict(s) for s in rank.steps)
    if len(steps) >= SKIP_LAST_FROM:
        steps = steps[:-1]
    return steps[1:] if len(steps) >= SKIP_FIRST_FROM else steps


def side_breakdown(label: str, ranks: Sequence[RankProfile]) -> SideBreakdown:
    """One side from its ranks' profiles (each rank's counted steps are samples of one step).
    Kernel rows average over all of a rank's steps (the first included: names, not noise)."""
    if not ranks:
        raise ExplainError(f"{label}: no trace to explain (no rank profiled)")
    samples: dict[str, list[float]] = {c: [] for c in CLASSES}
    totals: list[float] = []
    for r in ranks:
        for step in counted_steps(r):
            for c in CLASSES:
                samples[c].append(step.get(c, 0.0))
            totals.append(sum(step.values()))
    if not totals:
        raise ExplainError(f"{label}: the traces hold no complete step")
    classes = tuple(ClassTime(c, statistics.fmean(samples[c]), _se(samples[c])) for c in CLASSES)
    per_kernel: dict[str, list[float]] = {}
    for r in ranks:
        n = max(r.n_steps, 1)
        for k in r.kernels:
            row = per_kernel.setdefault(k.name, [0.0, 0.0])
            row[0] += k.total_ms / n / len(ranks)
            row[1] += k.count / n / len(ranks)
    kernels = tuple(sorted((KernelRow(name, classify(name), v[0], v[1]) for name, v in per_kernel.items()),
                           key=lambda k: -k.ms_per_step))
    stages = {r.stage for r in ranks}
    return SideBreakdown(label, tuple(sorted(r.rank for r in ranks)), min(len(counted_steps(r)) for r in ranks),
                         classes,
                         statistics.fmean(totals), _se(totals), kernels,
                         stages.pop() if len(stages) == 1 else None)


@dataclass(frozen=True)
class ClassDelta:
    kernel_class: str
    a_ms: float
    b_ms: float
    delta_ms: float
    noise_ms: float  # the |delta| that still counts as noise
    share: float | None  # of the total gap, when the gap is beyond noise

    @property
    def beyond_noise(self) -> bool:
        return abs(self.delta_ms) > self.noise_ms

    @property
    def words(self) -> str:
        return CLASS_WORDS.get(self.kernel_class, self.kernel_class)


@dataclass(frozen=True)
class KernelMove:
    name: str
    kernel_class: str
    a_ms: float
    b_ms: float

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms


@dataclass(frozen=True)
class Explanation:
    a: SideBreakdown
    b: SideBreakdown
    classes: tuple[ClassDelta, ...]
    total: ClassDelta  # the step time itself
    moved: tuple[KernelMove, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def summary_lines(self) -> list[str]:
        """The sentence a person reads first, one line per class that moved beyond its noise."""
        if not self.total.beyond_noise:
            moved = [f"{d.words} {d.delta_ms:+.3f} ms/step moved beyond its noise (±{d.noise_ms:.3f}), though the "
                     f"step as a whole did not" for d in sorted(self.classes, key=lambda d: -abs(d.delta_ms))
                     if d.beyond_noise]
            return [f"step time {self.a.step_ms:.3f} vs {self.b.step_ms:.3f} ms: the difference "
                    f"({self.total.delta_ms:+.3f} ms/step) is within its noise (±{self.total.noise_ms:.3f})", *moved]
        out = [f"step time {self.a.step_ms:.3f} -> {self.b.step_ms:.3f} ms ({self.total.delta_ms:+.3f} ms/step)"]
        for d in sorted(self.classes, key=lambda d: -abs(d.delta_ms)):
            if d.beyond_noise:
                share = f", {d.share * 100:.0f}% of the gap" if d.share is not None else ""
                out.append(f"{d.words} {d.delta_ms:+.3f} ms/step{share}")
        return out

    def to_dict(self) -> ExplanationJson:
        return {
            "a": self.a.to_dict(), "b": self.b.to_dict(),
            "classes": [_delta_dict(d) for d in self.classes], "total": _delta_dict(self.total),
            "moved": [{"name": m.name, "class": m.kernel_class, "a_ms": m.a_ms, "b_ms": m.b_ms,
                       "delta_ms": m.delta_ms} for m in self.moved],
            "summary": self.summary_lines(), "notes": list(self.notes),
        }


def _delta_dict(d: ClassDelta) -> ClassDeltaJson:
    return {"class": d.kernel_class, "words": d.words, "a_ms": d.a_ms, "b_ms": d.b_ms, "delta_ms": d.delta_ms,
            "noise_ms": d.noise_ms, "beyond_noise": d.beyond_noise, "share": d.share}


def _noise(se_a: float, se_b: float, ms_a: float, ms_b: float, run_cv: float) -> float:
    parts = [s for s in (se_a, se_b) if not math.isnan(s)]
    if not parts:
        return math.inf
    var = sum(s * s for s in parts) + (run_cv * ms_a) ** 2 + (run_cv * ms_b) ** 2
    return NOISE_Z * math.sqrt(var) + NOISE_FLOOR_MS


def compare_sides(a: SideBreakdown, b: SideBreakdown, *, run_cv: float = DEFAULT_RUN_CV,
                  top: int = TOP_KERNELS) -> Explanation:
    """B against A, class by class (delta = B - A); `run_cv` as a fraction (0.02 = 2%)."""
    if run_cv < 0 or not math.isfinite(run_cv):
        raise ExplainError(f"run_cv must be a fraction >= 0, got {run_cv}")
    total_noise = _noise(a.step_se, b.step_se, a.step_ms, b.step_ms, run_cv)
    gap = b.step_ms - a.step_ms
    total = ClassDelta("total", a.step_ms, b.step_ms, gap, total_noise, 1.0 if abs(gap) > total_noise else None)
    deltas = []
    for ca, cb in zip(a.classes, b.classes, strict=True):
        d = cb.ms - ca.ms
        deltas.append(ClassDelta(ca.kernel_class, ca.ms, cb.ms, d, _noise(ca.se, cb.se, ca.ms, cb.ms, run_cv),
                                 d / gap if total.beyond_noise and gap else None))
    ka = {k.name: k for k in a.kernels}
    kb = {k.name: k for k in b.kernels}
    moves = [KernelMove(n, (ka.get(n) or kb[n]).kernel_class, ka[n].ms_per_step if n in ka else 0.0,
                        kb[n].ms_per_step if n in kb else 0.0) for n in set(ka) | set(kb)]
    moves.sort(key=lambda m: -abs(m.delta_ms))
    notes = [f"noise: {NOISE_Z:g} x (step-to-step standard error, and {run_cv * 100:.1f}% run-to-run spread)"]
    if math.isinf(total_noise):
        notes.append("one step a side: no step-to-step spread to judge the noise by; every delta is unjudged")
    if a.stage != b.stage:
        notes.append(f"the sides profiled different stages ({a.stage or 'mixed'} vs {b.stage or 'mixed'})")
    return Explanation(a, b, tuple(deltas), total, tuple(moves[:top]), tuple(notes))


def moe_gemm_roofline(side: SideBreakdown, expert_bytes_per_step: float, hbm_bytes_per_s: float) -> MoeGemmJson:
    """The MoE GEMM time per step next to the time one GPU needs to read its share of the expert
    weights the step touches (`expert_bytes_per_step` per GPU, at `hbm_bytes_per_s`): a ratio of
    1.0 is at the memory roofline; 3.0 is three times slower than it."""
    floor_ms = expert_bytes_per_step / hbm_bytes_per_s * 1000.0 if hbm_bytes_per_s > 0 else math.nan
    ms = side.ms(MOE_GEMM)
    return {"label": side.label, "moe_gemm_ms": ms, "roofline_ms": floor_ms,
            "x_roofline": ms / floor_ms if floor_ms and not math.isnan(floor_ms) and floor_ms > 0 else None}


def class_table(expl: Explanation) -> list[ClassDeltaJson]:
    """Rows for the exports and the TUI: one per class (IDLE and OTHER included), then the total."""
    rows: list[ClassDeltaJson] = []
    for d in (*expl.classes, expl.total):
        rows.append({"class": d.kernel_class, "words": d.words if d.kernel_class != "total" else "step total",
                     "a_ms": d.a_ms, "b_ms": d.b_ms, "delta_ms": d.delta_ms, "noise_ms": d.noise_ms,
                     "beyond_noise": d.beyond_noise, "share": d.share})
    return rows

