"""What an investigation works on: the evidence, the plan, the cost model, and what each proposal is for.

The planner (`moe_tui.investigate.planner.plan_investigation`) decides what to run next to settle
one surprising grid cell. Pure: plain evidence in (`GridEvidence`, `CellEvidence`, `SideEvidence`: what the grid and the
store know about a comparison), a plan out (`InvestigationPlan`: proposals, each with its reason in
words, its queue items and its cost in server starts and estimated minutes). No I/O, no Textual;
`moe_tui.investigate.store` reads the evidence from the grid and the store and queues a plan.

What is proposed, and why (the seed's afternoon, decided by the grid instead of by hand):
- repeats: more runs per side, interleaved A,B,A,B (drift falls on both), until the cell is
  expected to settle at the planned power, from the grid's own variance (the cell's spread, or
  the median spread of the other cells when the cell has one run a side). Settling means the 95%
  interval (at the Holm-bounded level alpha/k over the k concurrencies of the primary metric)
  clears zero for a delta at least the minimum practical effect, or fits inside +/- that effect
  for a smaller one. The count is fixed before anything runs and capped: a cell not expected to
  settle within the cap is said to be so, and the follow-up reports "not settled" rather than
  adding runs after looking (no peeking).
- control: fresh server starts that measure concurrency 2 and then the cell, when fewer than 2 of the
  cell's own starts a side measured the control (each cell is judged against it on its own starts);
  not proposed when the repeats already carry it (every repeat start measures concurrency 2 first).
- bisection: the geometric midpoint between the investigated concurrency and a measured neighbour
  where the delta changes sign or crosses the minimum effect (the seed's 64 -> 256 flip).
- cold/warm pair: a run on a fresh server start without the warmup pass next to a warm one, on the
  side(s) where a JIT or warmup effect is plausible (a JIT-compiling backend, or runs that had no
  warmup pass).
- prefix-cache pair: a run on a fresh server (empty radix cache) next to one right after it on the
  same server (cache holding the very prompts, same seed) where repeats shared a server start with
  the radix cache on. The cell's spec is kept (so the results land in the cell); a spec with
  `flush_cache = true` would be another fingerprint, another cell.
- restart: runs on fresh server starts when every repeat of a side so far shared one start (a
  start-specific state would be shared by all of them and the interval would understate the
  spread). Interleaved repeats restart the server at every item, so they answer this too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from moe_tui import judgement
from moe_tui.records.grid import CellSnapshotJson, InvestigationPlanJson, SideSnapshotJson

PRIMARY_METRIC = "output_throughput"
CONTROL_CONCURRENCIES = (2,)
# Server starts a side that must measure the cell and the control together for the cell's contrast.
CONTROL_MIN_N_PAIRED = 2
MIN_EFFECT_PCT = 2.0  # the grid's minimum practical effect
ALPHA = 0.05
PLANNED_POWER = 0.80
DEFAULT_CAP = 10  # repeats per side the planner will ever ask for at one cell
PILOT_N = 3  # runs a side that measure the noise when nothing else does
BISECT_REPEATS = 2

KINDS = ("repeats", "control", "remeasure", "bisect", "cold_warm", "prefix_cache", "restart")
KIND_TITLES = {
    "repeats": "more repeats", "control": "control concurrency", "remeasure": "re-measure (client-bound)",
    "bisect": "bisection",
    "cold_warm": "cold / warm pair", "prefix_cache": "prefix-cache pair", "restart": "server restarts",
}
SIDES = ("baseline", "candidate")


class InvestigateError(ValueError):
    """The cell cannot be investigated (unknown concurrency or metric, no spec); says which."""


# -- evidence (what the grid and the store know) ---------------------------------------------------
@dataclass(frozen=True)
class SideEvidence:
    """One side of one cell: its complete runs and how they were measured."""

    profile: str
    n: int = 0
    mean: float | None = None
    std: float | None = None
    run_ids: tuple[int, ...] = ()
    server_start_ids: tuple[int | None, ...] = ()  # one per run
    warmup_pass: tuple[bool, ...] = ()  # one per run: did a warmup pass precede it
    run_seconds: float | None = None  # mean wall time of one timed run here
    warmup_seconds: float | None = None  # mean wall time of its warmup pass
    client_bound_runs: tuple[int, ...] = ()  # complete runs left out because the client set the pace
    client_advice: str = ""  # what to change so the client keeps up (bench.live.client_bound_advice)

    @property
    def cv_pct(self) -> float | None:
        if self.n < 2 or self.std is None or not self.mean:
            return None
        return abs(self.std / self.mean) * 100.0

    @property
    def shared_one_start(self) -> bool:
        starts = [s for s in self.server_start_ids if s is not None]
        return self.n >= 2 and len(starts) == self.n and len(set(starts)) == 1


@dataclass(frozen=True)
class CellEvidence:
    concurrency: int
    metric: str
    higher_is_better: bool
    verdict: str  # judgement.VERDICTS
    baseline: SideEvidence
    candidate: SideEvidence
    delta_pct: float | None = None
    ci_pct: tuple[float, float] | None = None
    planned_repeats: int | None = None  # the grid's own repeats-to-settle, when it gave one
    spec: Mapping[str, Any] | None = None  # the shared spec (None when refused / no data)
    fingerprint: str | None = None
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # side -> suspect flag codes
    # Server starts per side that measured this cell and the control concurrency (the grid's pairs).
    control_starts: tuple[int, int] = (0, 0)

    def side(self, name: str) -> SideEvidence:
        return self.baseline if name == "baseline" else self.candidate

    @property
    def flush_cache(self) -> bool:
        return bool((self.spec or {}).get("flush_cache"))


@dataclass(frozen=True)
class GridEvidence:
    baseline: str
    candidate: str
    concurrencies: tuple[int, ...]
    control_state: str  # judgement.CONTROL_STATES
    control_concurrency: int | None
    cells: tuple[CellEvidence, ...]
    start_seconds: Mapping[str, float] = field(default_factory=dict)  # profile -> mean start-to-ready
    jit_sides: tuple[str, ...] = ()  # sides whose resolved backend compiles kernels per shape
    radix_cache_sides: tuple[str, ...] = ()  # sides whose server keeps a prefix (radix) cache
    simulated: bool = False

    def cell(self, concurrency: int, metric: str) -> CellEvidence | None:
        return next((c for c in self.cells if c.concurrency == concurrency and c.metric == metric), None)

    def profile(self, side: str) -> str:
        return self.baseline if side == "baseline" else self.candidate


# -- the plan -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProposedItem:
    side: str
    profile: str
    concurrency: int
    spec: Mapping[str, Any]
    role: str  # repeat, control, bisect, cold, warm, cache-empty, cache-hot, restart
    warmup: bool = True
    fresh_start: bool = False
    repeat_index: int = 0


@dataclass(frozen=True)
class Proposal:
    kind: str
    reason: str
    items: tuple[ProposedItem, ...]
    server_starts: int
    minutes: float | None  # None when a duration it needs was never measured
    expect: str = ""  # what the result will tell, in words

    @property
    def title(self) -> str:
        return KIND_TITLES.get(self.kind, self.kind)


@dataclass(frozen=True)
class InvestigationPlan:
    baseline: str
    candidate: str
    concurrency: int
    metric: str
    proposals: tuple[Proposal, ...]
    notes: tuple[str, ...]  # what was considered and not proposed, and why
    before: Mapping[str, Any]  # the cell as it stood (cell_snapshot), stored with the record
    server_starts: int
    minutes: float | None
    cap: int = DEFAULT_CAP
    min_effect_pct: float = MIN_EFFECT_PCT
    spread_pct: float | None = None  # the grid's median spread for the metric when planned
    cautions: tuple[str, ...] = ()  # what makes the cell's runs themselves suspect
    _costs: CostModel | None = field(default=None, compare=False, repr=False)  # the cost model it was made with

    @property
    def name(self) -> str:
        return campaign_name(self.baseline, self.candidate, self.concurrency, self.metric)

    @property
    def items(self) -> tuple[ProposedItem, ...]:
        return tuple(i for p in self.proposals for i in p.items)

    def only(self, kinds: Sequence[str]) -> InvestigationPlan:
        """The plan with only the proposals of `kinds` (costs recomputed)."""
        kept = tuple(p for p in self.proposals if p.kind in set(kinds))
        starts, minutes = _sequence_cost(
            [i for p in kept for i in p.items], self._costs)
        return InvestigationPlan(self.baseline, self.candidate, self.concurrency, self.metric, kept,
                                 self.notes, self.before, starts, minutes, self.cap, self.min_effect_pct,
                                 self.spread_pct, self.cautions, self._costs)

    @property
    def before_text(self) -> str:
        """The cell as it stood, in words (what the proposal screen and the CLI show first)."""
        return describe_cell(self.before)

    def to_dict(self) -> InvestigationPlanJson:
        data = asdict(self)  # the fields are the record's (tests/test_export_schemas.py checks the export)
        data.pop("_costs", None)
        data["name"] = self.name
        return cast(InvestigationPlanJson, data)


def campaign_name(baseline: str, candidate: str, concurrency: int, metric: str) -> str:
    return f"investigate:{baseline}-vs-{candidate}:c={concurrency}:{metric}"


def cell_snapshot(cell: CellEvidence | None, grid: GridEvidence | None = None) -> CellSnapshotJson:
    """What the record keeps of a cell: enough to show before / after without the runs."""
    if cell is None:
        return {"verdict": judgement.NO_DATA}

    def side(name: str) -> SideSnapshotJson:
        s = cell.side(name)
        return {"n": s.n, "mean": s.mean, "std": s.std, "run_ids": list(s.run_ids)}

    out: CellSnapshotJson = {
        "verdict": cell.verdict, "delta_pct": cell.delta_pct,
        "ci_pct": list(cell.ci_pct) if cell.ci_pct else None, "fingerprint": cell.fingerprint,
        "baseline": side("baseline"), "candidate": side("candidate"),  # SIDES, in its order
    }
    if grid is not None:
        out["control"] = grid.control_state
        out["control_concurrency"] = grid.control_concurrency
    return out


# -- statistics ----------------------------------------------------------------------------------
def _t(q: float, df: float) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def repeats_per_side(cv_b: float, cv_c: float, delta_pct: float, *, min_effect_pct: float,
                     alpha: float = ALPHA, power: float = PLANNED_POWER, cap: int = DEFAULT_CAP,
                     margin_pct: float | None = None) -> tuple[int, bool]:
    """(n per side, settles) for the cell to settle, from spreads in % of the baseline mean.

    A delta of at least `min_effect_pct` settles when a two-sided Welch test at `alpha` detects it
    with `power`; a smaller one settles when the interval fits inside +/- `margin_pct` (default the
    minimum effect), planned with the same power. Returns (cap, False) when the cap does not do."""
    d = abs(delta_pct)
    margin = min_effect_pct if margin_pct is None else margin_pct
    target = d if (margin_pct is None and d >= min_effect_pct) else margin - d
    va, vb = cv_b ** 2, cv_c ** 2
    if target <= 0:
        return cap, False
    if va + vb == 0:
        return 2, True
    for n in range(2, cap + 1):
        df = (va + vb) ** 2 * (n - 1) / (va * va + vb * vb) if va * va + vb * vb else n - 1
        need = (_t(1 - alpha / 2, df) + _t(power, df)) * math.sqrt((va + vb) / n)
        if need <= target:
            return n, True
    return cap, False


def pooled_cv(cells: Sequence[CellEvidence], metric: str) -> float | None:
    """The median per-side spread (% of mean) of the cells of `metric` with 2+ runs a side."""
    cvs = sorted(cv for c in cells if c.metric == metric for cv in (c.baseline.cv_pct, c.candidate.cv_pct)
                 if cv is not None)
    if not cvs:
        return None
    mid = len(cvs) // 2
    return cvs[mid] if len(cvs) % 2 else (cvs[mid - 1] + cvs[mid]) / 2.0


# -- cost ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CostModel:
    run_s: Mapping[tuple[str, int], float]  # (profile, concurrency) -> timed run seconds
    warmup_s: Mapping[tuple[str, int], float]
    start_s: Mapping[str, float]


def _cost_model(grid: GridEvidence) -> CostModel:
    run_s: dict[tuple[str, int], float] = {}
    warm_s: dict[tuple[str, int], float] = {}
    for cell in grid.cells:
        for name in SIDES:
            s = cell.side(name)
            key = (s.profile, cell.concurrency)
            if s.run_seconds is not None:
                run_s.setdefault(key, s.run_seconds)
            if s.warmup_seconds is not None:
                warm_s.setdefault(key, s.warmup_seconds)
    return CostModel(run_s, warm_s, dict(grid.start_seconds))


def _nearest(table: Mapping[tuple[str, int], float], profile: str, conc: int) -> float | None:
    """A measured duration at this concurrency, else the larger of the two measured neighbours
    (an unmeasured concurrency is priced like the slower side of its bracket)."""
    if (profile, conc) in table:
        return table[(profile, conc)]
    known = sorted(c for p, c in table if p == profile)
    lower = [c for c in known if c < conc]
    upper = [c for c in known if c > conc]
    around = ([table[(profile, lower[-1])]] if lower else []) + ([table[(profile, upper[0])]] if upper else [])
    return max(around) if around else None


def _sequence_cost(items: Sequence[ProposedItem], costs: CostModel | None,
                   running: str | None = None) -> tuple[int, float | None]:
    """Server starts (a start when the profile changes or an item asks for a fresh one) and
    estimated minutes (starts + warmup passes + timed runs), for items run in this order."""
    starts, seconds, current, known = 0, 0.0, running, True
    for item in items:
        if item.profile != current or item.fresh_start:
            starts += 1
            current = item.profile
            start = costs.start_s.get(item.profile) if costs else None
            known &= start is not None
            seconds += start or 0.0
        run = _nearest(costs.run_s, item.profile, item.concurrency) if costs else None
        known &= run is not None
        seconds += run or 0.0
        if item.warmup:
            warm = _nearest(costs.warmup_s, item.profile, item.concurrency) if costs else None
            seconds += warm if warm is not None else (run or 0.0)  # a pass costs about a run
    return starts, (round(seconds / 60.0, 1) if known else None)


def make_proposal(kind: str, reason: str, items: Sequence[ProposedItem], costs: CostModel,
              expect: str = "") -> Proposal:
    starts, minutes = _sequence_cost(items, costs)
    return Proposal(kind, reason, tuple(items), starts, minutes, expect)


def describe_cell(snap: Mapping[str, Any]) -> str:
    """"+14.0% [+8.1%, +19.9%] better (n=3 vs 3)", from a cell snapshot."""
    verdict = judgement.VERDICT_WORDS.get(snap.get("verdict", ""), str(snap.get("verdict")))
    b, c = snap.get("baseline") or {}, snap.get("candidate") or {}
    n = f"(n={b.get('n', 0)} vs {c.get('n', 0)})"
    delta = snap.get("delta_pct")
    if delta is None:
        return f"{verdict} {n}"
    ci = snap.get("ci_pct")
    interval = f" [{ci[0]:+.1f}%, {ci[1]:+.1f}%]" if ci else " [no interval]"
    return f"{delta:+.1f}%{interval} {verdict} {n}"
