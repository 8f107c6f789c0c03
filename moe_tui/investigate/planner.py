"""Planning an investigation: every follow-up that would tell something about a cell (`plan_investigation`).

The evidence, plan and cost model it works on live in `moe_tui.investigate.model` (with what each
proposal is for and why). Each `propose_*` takes the grid's evidence and the investigated cell and returns a `Proposal` (its
reason in words, its queue items, its cost) or None, adding to `notes` why it proposed nothing.
Pure: no I/O. `spec_at` moves the cell's spec to another concurrency with the sweep's prompt rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from moe_tui import judgement
from moe_tui.investigate.model import (
    ALPHA,
    BISECT_REPEATS,
    CONTROL_CONCURRENCIES,
    CONTROL_MIN_N_PAIRED,
    DEFAULT_CAP,
    MIN_EFFECT_PCT,
    PILOT_N,
    PLANNED_POWER,
    PRIMARY_METRIC,
    SIDES,
    CellEvidence,
    CostModel,
    GridEvidence,
    InvestigateError,
    InvestigationPlan,
    Proposal,
    ProposedItem,
    _cost_model,
    _sequence_cost,
    cell_snapshot,
    make_proposal,
    pooled_cv,
    repeats_per_side,
)
from moe_tui.records import SpecOverrides


# -- specs at other concurrencies ------------------------------------------------------------------
def _prompt_rule(grid: GridEvidence, base: Mapping[str, Any]) -> tuple[int, int | None]:
    """(min prompts, prompts per concurrency or None): the rule num_prompts = max(min, ppc x C)
    that the measured specs sharing every other field with `base` follow."""
    def rest(spec: Mapping[str, Any]) -> SpecOverrides:
        return {k: v for k, v in spec.items() if k not in ("max_concurrency", "num_prompts")}

    pairs = {(int(c.spec["max_concurrency"]), int(c.spec["num_prompts"]))
             for c in grid.cells if c.spec and rest(c.spec) == rest(base)}
    pairs.add((int(base["max_concurrency"]), int(base["num_prompts"])))
    floor = min(n for _, n in pairs)
    scaled = {n // c for c, n in pairs if n > floor and n % c == 0}
    if len(scaled) == 1:
        ppc = scaled.pop()
        if all(n == max(floor, ppc * c) for c, n in pairs):
            return floor, ppc
    return floor, None


def spec_at(grid: GridEvidence, base: Mapping[str, Any], concurrency: int) -> tuple[SpecOverrides, str]:
    """The cell's spec moved to `concurrency` (a measured spec there when one matches), and the
    prompt rule used, in words."""
    for c in grid.cells:
        if c.concurrency == concurrency and c.spec:
            same = {k: v for k, v in c.spec.items() if k not in ("max_concurrency", "num_prompts")}
            if same == {k: v for k, v in base.items() if k not in ("max_concurrency", "num_prompts")}:
                return dict(c.spec), "the spec already measured there"
    floor, ppc = _prompt_rule(grid, base)
    spec = dict(base)
    spec["max_concurrency"] = concurrency
    if ppc is None:
        spec["num_prompts"] = int(base["num_prompts"])
        return spec, f"num_prompts {spec['num_prompts']} as in the investigated cell"
    spec["num_prompts"] = max(floor, ppc * concurrency)
    return spec, f"num_prompts = max({floor}, {ppc} x concurrency), the rule the sweep's specs follow"


def _interleave(grid: GridEvidence, conc: int, spec: Mapping[str, Any], counts: Mapping[str, int],
                role: str, start_index: Mapping[str, int],
                control: Mapping[str, Any] | None = None) -> list[ProposedItem]:
    """A,B,B,A... with `counts[side]` server starts a side (the longer side finishes alone). With `control`
    (the spec at concurrency 2), each start measures the control first and then the cell on the same server,
    so the grid judges the cell against the control on that start."""
    items: list[ProposedItem] = []
    done = {s: 0 for s in SIDES}
    turn = 0
    while any(done[s] < counts.get(s, 0) for s in SIDES):
        for side in (SIDES if turn % 2 == 0 else SIDES[::-1]):
            if done[side] < counts.get(side, 0):
                index = start_index.get(side, 0) + done[side]
                if control is not None and conc != CONTROL_CONCURRENCIES[0]:
                    items.append(ProposedItem(side, grid.profile(side), CONTROL_CONCURRENCIES[0], dict(control),
                                              "control", fresh_start=True, repeat_index=index))
                    items.append(ProposedItem(side, grid.profile(side), conc, dict(spec), role, repeat_index=index))
                else:
                    items.append(ProposedItem(side, grid.profile(side), conc, dict(spec), role,
                                              fresh_start=True, repeat_index=index))
                done[side] += 1
        turn += 1
    return items


# -- the proposals ----------------------------------------------------------------------------------
def _fmt(x: float | None, digits: int = 1) -> str:
    return "?" if x is None else f"{x:+.{digits}f}%"


def propose_repeats(grid: GridEvidence, cell: CellEvidence, costs: CostModel, *, cap: int,
                     min_effect: float, notes: list[str]) -> Proposal | None:
    nb, nc = cell.baseline.n, cell.candidate.n
    if cell.spec is None or nb == 0 or nc == 0:
        notes.append("repeats: the cell has no shared spec with runs on both sides; nothing to repeat")
        return None
    primary = cell.metric == PRIMARY_METRIC
    k = max(1, len(grid.concurrencies)) if primary else 1
    alpha = ALPHA / k
    level = (f"alpha {ALPHA:g}/{k} (Holm's first step over the {k} concurrencies of {PRIMARY_METRIC})"
             if primary and k > 1 else f"alpha {ALPHA:g}")
    cvb, cvc = cell.baseline.cv_pct, cell.candidate.cv_pct
    source = "this cell's own spread"
    if cvb is None or cvc is None:
        pooled = pooled_cv(grid.cells, cell.metric)
        if pooled is not None:
            cvb, cvc = cvb if cvb is not None else pooled, cvc if cvc is not None else pooled
            source = f"the grid's median spread for this metric ({pooled:.1f}% of the mean)"
    if cell.delta_pct is None:
        return None
    if cvb is None or cvc is None:
        target, settles = max(PILOT_N, nb, nc), True
        why = (f"no other cell has 2+ runs a side to lend its spread: {PILOT_N} a side "
               f"is the least that measures the spread; the planner can size the rest from it")
    else:
        target, settles = repeats_per_side(cvb, cvc, cell.delta_pct, min_effect_pct=min_effect, alpha=alpha,
                                           cap=cap)
        target = max(target, nb, nc)
        goal = (f"detect {_fmt(cell.delta_pct)} against zero" if abs(cell.delta_pct) >= min_effect else
                f"fit the interval inside +/-{min_effect:g}% (the delta {_fmt(cell.delta_pct)} is under "
                f"the minimum practical effect)")
        why = (f"to {goal} at {PLANNED_POWER:.0%} power and {level}, with spreads of {cvb:.1f}% / {cvc:.1f}% "
               f"from {source}, the cell needs {target} runs a side")
        if not settles:
            why = (f"not expected to settle within the cap of {cap} runs a side ({goal} at "
                   f"{PLANNED_POWER:.0%} power, {level}, spreads {cvb:.1f}% / {cvc:.1f}% from {source}); "
                   f"these runs take it to the cap and the follow-up will say 'not settled' "
                   f"rather than add more after looking")
    counts = {"baseline": target - nb, "candidate": target - nc}
    if counts["baseline"] <= 0 and counts["candidate"] <= 0:
        notes.append(f"repeats: {nb} vs {nc} runs already reach the {target} a side the cell needs")
        return None
    control, _ = spec_at(grid, cell.spec, CONTROL_CONCURRENCIES[0])
    items = _interleave(grid, cell.concurrency, cell.spec, counts, "repeat", {"baseline": nb, "candidate": nc},
                        control)
    shared = [s for s in SIDES if cell.side(s).shared_one_start]
    reason = (f"{cell.verdict.replace('_', ' ')} at n={nb} vs n={nc}: {why}. Interleaved A,B,B,A so "
              f"drift falls on both; each start is fresh and measures concurrency {CONTROL_CONCURRENCIES[0]} "
              "first, so the cell is judged against the control on its own starts")
    if shared:
        reason += f" (the {' and '.join(shared)} runs so far all shared one server start)"
    expect = ("the cell settles" if settles else "the cell at the cap, reported 'not settled' if it does not")
    return make_proposal("repeats", reason, items, costs, expect)


def propose_control(grid: GridEvidence, cell: CellEvidence, costs: CostModel, *, covered: bool,
                    notes: list[str]) -> Proposal | None:
    """Starts that measure the control and the cell together, when the cell's own starts lack the control
    (each cell is judged against concurrency 2 on its own starts; a control measured elsewhere vouches for
    nothing). Not proposed when the repeats already carry it, nor for the control cell itself."""
    conc = CONTROL_CONCURRENCIES[0]
    if cell.spec is None or cell.concurrency == conc:
        return None
    if covered:
        notes.append(f"control: every proposed repeat measures concurrency {conc} on its own start")
        return None
    have = dict(zip(SIDES, cell.control_starts))
    counts = {side: max(0, CONTROL_MIN_N_PAIRED - have[side]) for side in SIDES}
    if not any(counts.values()):
        notes.append(f"control: {have['baseline']} vs {have['candidate']} of this cell's starts also measured "
                     f"concurrency {conc}")
        return None
    spec, rule = spec_at(grid, cell.spec, conc)
    items = _interleave(grid, cell.concurrency, cell.spec, counts, "repeat",
                        {"baseline": cell.baseline.n, "candidate": cell.candidate.n}, spec)
    reason = (f"only {have['baseline']} vs {have['candidate']} of this cell's server starts also measured "
              f"concurrency {conc}: the cell is judged against the control on its own starts (an environment "
              f"shift cancels there), which needs {CONTROL_MIN_N_PAIRED} a side; {counts['baseline']} and "
              f"{counts['candidate']} fresh start(s), each measuring concurrency {conc} ({rule}) and then the cell")
    return make_proposal("control", reason, items, costs, "the cell judged against the control on its own starts")


def propose_remeasure(grid: GridEvidence, cell: CellEvidence, costs: CostModel, *, cap: int,
                      notes: list[str]) -> Proposal | None:
    """Fresh starts that re-measure a cell whose runs the client could not drive (client-bound: left out, so
    the cell has too few clean runs for a verdict): as many a side as were lost, at least enough for the
    cell's clean minimum, each measuring concurrency 2 first; the reason says what to change first."""
    lost = {side: cell.side(side).client_bound_runs for side in SIDES}
    if cell.spec is None or not any(lost.values()):
        return None
    counts = {side: min(cap, max(len(lost[side]), judgement.MIN_CLEAN_RUNS - cell.side(side).n, 0))
              for side in SIDES}
    if not any(counts.values()):
        return None
    control, _ = spec_at(grid, cell.spec, CONTROL_CONCURRENCIES[0])
    items = _interleave(grid, cell.concurrency, cell.spec, counts, "remeasure",
                        {"baseline": cell.baseline.n, "candidate": cell.candidate.n}, control)
    advice = next((cell.side(s).client_advice for s in SIDES if cell.side(s).client_advice), "")
    said = "; ".join(f"{side}: {len(lost[side])} client-bound run(s) left out ({cell.side(side).n} clean)"
                     for side in SIDES if lost[side])
    reason = (f"{said}: the benchmark client, not the server, set their pace, so the cell has no verdict; "
              f"{counts['baseline']} and {counts['candidate']} fresh start(s) re-measure it (concurrency "
              f"{CONTROL_CONCURRENCIES[0]} first on each)" + (f"; {advice}" if advice else ""))
    notes.append("remeasure: an emulator profile re-runs a cell its client cannot drive at a slower time scale "
                 "(judgement.sim_cell_time_scale), the same on both sides")
    return make_proposal("remeasure", reason, items, costs, "clean runs of the cell, judged against the control")


def propose_bisect(grid: GridEvidence, cell: CellEvidence, costs: CostModel, *, min_effect: float,
                    notes: list[str]) -> Proposal | None:
    if cell.spec is None or cell.delta_pct is None:
        return None
    measured = sorted(c.concurrency for c in grid.cells
                      if c.metric == cell.metric and c.delta_pct is not None)
    k = measured.index(cell.concurrency) if cell.concurrency in measured else -1
    if k < 0:
        return None
    items: list[ProposedItem] = []
    said: list[str] = []
    for other in [measured[j] for j in (k - 1, k + 1) if 0 <= j < len(measured)]:
        lo, hi = sorted((cell.concurrency, other))
        clo, chi = grid.cell(lo, cell.metric), grid.cell(hi, cell.metric)
        dlo, dhi = (clo.delta_pct if clo else None), (chi.delta_pct if chi else None)
        if dlo is None or dhi is None:  # a neighbour without a delta (refused, no data) bounds nothing
            continue
        flips = (dlo > 0) != (dhi > 0)
        crosses = (abs(dlo) >= min_effect) != (abs(dhi) >= min_effect)
        if not (flips or crosses):
            continue
        mid = round(math.sqrt(lo * hi))
        if mid <= lo or mid >= hi:
            notes.append(f"bisection: {lo} and {hi} are adjacent; no concurrency between them")
            continue
        spec, rule = spec_at(grid, cell.spec, mid)
        what = "changes sign" if flips else f"crosses the {min_effect:g}% minimum effect"
        said.append(f"the delta {what} between concurrency {lo} ({_fmt(dlo)}) and {hi} ({_fmt(dhi)}): "
                    f"concurrency {mid} (their geometric midpoint; {rule})")
        items += _interleave(grid, mid, spec, {s: BISECT_REPEATS for s in SIDES}, "bisect", {})
    if not items:
        return None
    reason = "; ".join(said) + f"; {BISECT_REPEATS} runs a side, interleaved"
    return make_proposal("bisect", reason, items, costs, "which half of the bracket the crossover is in")


def _cold_warm_pair(grid: GridEvidence, cell: CellEvidence, side: str, role_cold: str, role_warm: str,
                    cold_warmup: bool) -> list[ProposedItem]:
    spec, profile = dict(cell.spec or {}), grid.profile(side)
    n = cell.side(side).n
    return [ProposedItem(side, profile, cell.concurrency, spec, role_cold, warmup=cold_warmup,
                         fresh_start=True, repeat_index=n),
            ProposedItem(side, profile, cell.concurrency, spec, role_warm, warmup=True, repeat_index=n + 1)]


def propose_cold_warm(grid: GridEvidence, cell: CellEvidence, costs: CostModel,
                       notes: list[str]) -> Proposal | None:
    if cell.spec is None:
        return None
    why: dict[str, str] = {}
    for side in SIDES:
        s = cell.side(side)
        if side in grid.jit_sides:
            why[side] = f"{side} runs a backend that compiles kernels per batch shape (JIT)"
        elif s.warmup_pass and not all(s.warmup_pass):
            why[side] = f"{sum(1 for w in s.warmup_pass if not w)} of its {s.n} {side} runs had no warmup pass"
    if not why:
        notes.append("cold/warm: no JIT backend and every run had a warmup pass; no warmup effect plausible")
        return None
    items = [i for side in why for i in _cold_warm_pair(grid, cell, side, "cold", "warm", cold_warmup=False)]
    reason = ("; ".join(why.values()) + ": a cold run (fresh server start, no warmup pass) right before a "
              "warm one (same server, warmup pass) shows whether first-time compilation or warmup leaks "
              "into the timed numbers (the seed re-ran 256 for this by hand: 515.58 then 515.77 tok/s)")
    return make_proposal("cold_warm", reason, items, costs, "a warmup effect, flagged when cold and warm differ")


def propose_prefix_cache(grid: GridEvidence, cell: CellEvidence, costs: CostModel,
                          notes: list[str]) -> Proposal | None:
    if cell.spec is None or cell.flush_cache:
        notes.append("prefix cache: the spec flushes the cache before each run" if cell.flush_cache else
                     "prefix cache: no shared spec")
        return None
    def repeated_on_one_start(side: str) -> bool:
        known = [x for x in cell.side(side).server_start_ids if x is not None]
        return len(known) == cell.side(side).n and len(set(known)) < len(known)

    sides = [s for s in SIDES if s in grid.radix_cache_sides and repeated_on_one_start(s)]
    if not sides:
        notes.append("prefix cache: no side repeated the spec on one server start with its radix cache on")
        return None
    items = [i for side in sides
             for i in _cold_warm_pair(grid, cell, side, "cache-empty", "cache-hot", cold_warmup=True)]
    reason = (f"the {' and '.join(sides)} repeats reused one server start with the radix cache on, and every "
              f"repeat sends the same prompts (seed {cell.spec.get('seed')}): a run on a fresh server (empty "
              f"cache; its warmup pass uses other prompts) next to one right after it (cache holding these "
              f"prompts) shows whether cached prefills inflate the repeats; the spec is kept so both land "
              f"in this cell (flush_cache = true would be another spec)")
    return make_proposal("prefix_cache", reason, items, costs, "a prefix-cache effect, flagged when the pair differs")


def propose_restart(grid: GridEvidence, cell: CellEvidence, costs: CostModel, covered: bool,
                     notes: list[str]) -> Proposal | None:
    shared = [s for s in SIDES if cell.side(s).shared_one_start]
    if not shared:
        return None
    if covered:
        notes.append("restart: the interleaved repeats start a fresh server for every item")
        return None
    items = []
    for side in shared:
        s = cell.side(side)
        items += [ProposedItem(side, grid.profile(side), cell.concurrency, dict(cell.spec or {}), "restart",
                               fresh_start=True, repeat_index=s.n + j) for j in range(2)]
    reason = (f"every {' and '.join(shared)} repeat ran on one server start (#{cell.side(shared[0]).server_start_ids[0]}"
              f"): whatever that start got (memory layout, compiled kernels, clocks) all of them share, so "
              f"the interval understates the spread; 2 runs a side on fresh starts")
    return make_proposal("restart", reason, items, costs, "the spread across server starts")


def plan_investigation(grid: GridEvidence, concurrency: int, metric: str = PRIMARY_METRIC, *,
                       cap: int = DEFAULT_CAP, min_effect_pct: float = MIN_EFFECT_PCT) -> InvestigationPlan:
    """Every follow-up that would tell something about the cell, with its reason and cost."""
    cell = grid.cell(int(concurrency), metric)
    if cell is None:
        metrics = sorted({c.metric for c in grid.cells})
        raise InvestigateError(
            f"no cell for concurrency {concurrency}, metric {metric!r}: measured concurrencies "
            f"{', '.join(map(str, grid.concurrencies)) or 'none'}; metrics {', '.join(metrics) or 'none'}")
    if cap < 2:
        raise InvestigateError(f"cap must be at least 2 runs a side, got {cap}")
    costs = _cost_model(grid)
    notes: list[str] = []
    repeats = propose_repeats(grid, cell, costs, cap=cap, min_effect=min_effect_pct, notes=notes)
    found = [
        repeats,
        propose_control(grid, cell, costs, covered=repeats is not None, notes=notes),
        propose_remeasure(grid, cell, costs, cap=cap, notes=notes),
        propose_bisect(grid, cell, costs, min_effect=min_effect_pct, notes=notes),
        propose_cold_warm(grid, cell, costs, notes),
        propose_prefix_cache(grid, cell, costs, notes),
        propose_restart(grid, cell, costs, repeats is not None, notes),
    ]
    if cell.spec is None:
        notes.insert(0, f"the cell is {cell.verdict.replace('_', ' ')}: no spec shared by both sides, so no "
                        f"run of this cell can be proposed (queue both sides with one spec first)")
    proposals = tuple(p for p in found if p is not None)
    starts, minutes = _sequence_cost([i for p in proposals for i in p.items], costs)
    return InvestigationPlan(grid.baseline, grid.candidate, cell.concurrency, metric, proposals, tuple(notes),
                             cell_snapshot(cell, grid), starts, minutes, cap, min_effect_pct,
                             pooled_cv(grid.cells, metric), _cautions(cell), costs)


def _cautions(cell: CellEvidence) -> tuple[str, ...]:
    out = []
    for side in SIDES:
        codes = tuple(cell.flags.get(side, ()))
        if codes:
            words = "; ".join(judgement.flag_words(c) for c in codes)
            out.append(f"the {side} runs are flagged ({', '.join(codes)}: {words}): their number measures "
                       f"that, not the backend; the runs below re-measure the cell, but fix the cause first")
    return tuple(out)
