"""What an investigation changed: the cell before and after, and what its pairs found.

`report(store, record, evidence)` compares the "before" snapshot stored with the investigation
(`moe_tui.investigate.store`) with the cell as the grid has it now (`evidence`, from
`investigate_store.evidence_from_grid`), and reads the runs of the cold/warm and prefix-cache pairs
from the store. Settled or not is decided once, when every item has finished: the plan fixed the
number of runs before any ran, so a cell that is still open at the cap is "not settled", never
topped up after looking. No Textual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moe_tui import judgement
from moe_tui.investigate.model import SIDES, GridEvidence, cell_snapshot, describe_cell

if TYPE_CHECKING:
    from moe_tui.investigate.store import InvestigationRecord
    from moe_tui.store.db import Store

DECISIVE = frozenset({judgement.BETTER, judgement.WORSE})


@dataclass(frozen=True)
class PairResult:
    kind: str  # cold_warm | prefix_cache
    side: str
    first: float | None  # cold / cache-empty run's value
    second: float | None  # warm / cache-hot run's value
    diff_pct: float | None  # (first - second) / second
    threshold_pct: float
    effect: bool

    def words(self, metric: str) -> str:
        a, b = ("cold", "warm") if self.kind == "cold_warm" else ("cache-empty", "cache-hot")
        if self.diff_pct is None:
            return f"{self.side}: {a}/{b} pair not measured (yet)"
        what = "warmup effect" if self.kind == "cold_warm" else "prefix-cache effect"
        verdict = (f"{what.upper()}: beyond the {self.threshold_pct:.1f}% bar" if self.effect else
                   f"no {what} (within the {self.threshold_pct:.1f}% bar)")
        return (f"{self.side}: {a} {self.first:.4g} vs {b} {self.second:.4g} {metric} "
                f"({self.diff_pct:+.1f}%): {verdict}")


@dataclass(frozen=True)
class InvestigationReport:
    name: str
    state: str  # under investigation | complete | ended (k of n items done)
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    settled: str  # "settled: better" | "not settled ..." | "" when no repeats were planned
    pairs: tuple[PairResult, ...] = ()
    lines: tuple[str, ...] = ()
    flags: tuple[str, ...] = field(default=())  # warmup_effect, prefix_cache_effect

    def text(self) -> str:
        return "\n".join((f"{self.name} [{self.state}]", *self.lines))


def _value(store: Store, run_id: int | None, metric: str) -> float | None:
    if run_id is None:
        return None
    rec = store.run(run_id)
    if rec is None or rec.status != "complete":
        return None
    value = rec.summary.get(metric)
    return float(value) if isinstance(value, (int, float)) else None


def _pairs(store: Store, record: InvestigationRecord, evidence: GridEvidence) -> list[PairResult]:
    metric = record.metric
    # The spread as it was when planned: the pairs' own runs (a cold one!) must not widen the bar.
    bar = judgement.pair_effect_threshold_pct(record.definition.get("spread_pct"))
    higher = next((c.higher_is_better for c in evidence.cells if c.metric == metric), True)
    out = []
    for kind, first_role, second_role in (("cold_warm", "cold", "warm"), ("prefix_cache", "cache-empty", "cache-hot")):
        for side in SIDES:
            firsts = [i for r, i in record.roles() if r.get("role") == first_role and r.get("side") == side]
            seconds = [i for r, i in record.roles() if r.get("role") == second_role and r.get("side") == side]
            if not firsts:
                continue
            a = _value(store, firsts[0].run_id, metric)
            b = _value(store, seconds[0].run_id, metric) if seconds else None
            diff = (a - b) / b * 100.0 if a is not None and b else None
            # An effect is the cold (or cache-empty) run doing worse than the warm one.
            worse = diff is not None and ((diff < 0) if higher else (diff > 0))
            out.append(PairResult(kind, side, a, b, diff, bar, bool(worse and diff is not None and abs(diff) > bar)))
    return out


def _settled(record: InvestigationRecord, after: Mapping[str, Any]) -> str:
    kinds = {p.get("kind") for p in record.definition.get("proposals") or ()}
    if "repeats" not in kinds:
        return ""
    if record.open:
        return "pending: the planned repeats have not all run"
    verdict = after.get("verdict")
    min_effect = float(record.definition.get("min_effect_pct") or 2.0)
    ci = after.get("ci_pct")
    if verdict in DECISIVE:
        return f"settled: {judgement.VERDICT_WORDS[verdict]}"
    if verdict == judgement.WITHIN_NOISE and ci and -min_effect <= ci[0] and ci[1] <= min_effect:
        return f"settled: within +/-{min_effect:g}% (no practical difference)"
    cap = record.definition.get("cap")
    return (f"not settled: the planned runs (cap {cap} a side) are in and the interval still spans the "
            f"question; no more runs were added after looking")


def report(store: Store, record: InvestigationRecord, evidence: GridEvidence) -> InvestigationReport:
    before = record.definition.get("before") or {}
    after = cell_snapshot(evidence.cell(record.concurrency, record.metric), evidence)
    lines = [f"cell  before: {describe_cell(before)}",
             f"      after:  {describe_cell(after)}"]
    made_as = (record.definition.get("baseline"), record.definition.get("candidate"))
    if made_as == (evidence.candidate, evidence.baseline):
        # The same cell seen the other way round: a delta's sign (and better/worse) flip with the order.
        lines.insert(0, f"      investigated as baseline {made_as[0]}, candidate {made_as[1]}: 'before' is in "
                        f"that order, 'after' in this one ({evidence.baseline} vs {evidence.candidate})")
    settled = _settled(record, after)
    if settled:
        lines.append(f"      {settled}")
    roles = [r for r, _ in record.roles()]
    if any(r.get("kind") == "control" for r in roles):
        lines.append(f"control  before: {before.get('control', '?')} -> after: {evidence.control_state}"
                     f" (concurrency {evidence.control_concurrency or '?'})")
    for conc in sorted({int(r["concurrency"]) for r in roles if r.get("kind") == "bisect"}):
        mid = evidence.cell(conc, record.metric)
        lines.append(f"bisect   concurrency {conc}: " +
                     (describe_cell(cell_snapshot(mid)) if mid is not None else "not measured yet"))
    cold = sorted(i.run_id for r, i in record.roles() if r.get("role") == "cold" and i.run_id is not None)
    in_cell = [rid for rid in cold if rid in {r for side in ("baseline", "candidate") if side in after
                                               for r in after[side]["run_ids"]}]
    if in_cell:
        lines.append(f"      note: 'after' includes cold run(s) {', '.join(f'#{r}' for r in in_cell)} "
                     f"(no warmup pass, on purpose); a grid that leaves diagnostic runs out shows the cell without them")
    pairs = _pairs(store, record, evidence)
    lines += [f"pair     {p.words(record.metric)}" for p in pairs]
    flags = sorted({"warmup_effect" if p.kind == "cold_warm" else "prefix_cache_effect" for p in pairs if p.effect})
    return InvestigationReport(record.name, record.state, before, after, settled, tuple(pairs), tuple(lines),
                               tuple(flags))
