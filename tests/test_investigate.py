"""The investigation planner on plain evidence (no store, no processes): which follow-ups it
proposes for a cell, their reasons, items and costs (`moe_tui.investigate.model`)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from moe_tui import judgement
from moe_tui.investigate.model import (
    CellEvidence,
    GridEvidence,
    InvestigateError,
    SideEvidence,
    repeats_per_side,
)
from moe_tui.investigate.planner import plan_investigation

SEED = {  # the seed's table: output tok/s per concurrency (cutlass, cutedsl)
    1: (10.36, 10.07), 10: (38.46, 64.29), 64: (218.74, 249.23), 256: (718.83, 515.58), 1024: (1603.04, 796.93),
}
BASE = {"client": "moe-tui", "input_len": 1024, "output_len": 1024, "seed": 42, "flush_cache": False}


def spec(c: int) -> dict:
    return {**BASE, "max_concurrency": c, "num_prompts": max(10, 4 * c)}


def side(profile: str, mean: float, n: int, cv: float = 2.0, starts=None, warm=None, run_s=30.0) -> SideEvidence:
    return SideEvidence(profile, n=n, mean=mean, std=mean * cv / 100 if n >= 2 else None,
                        run_ids=tuple(range(n)), server_start_ids=tuple(starts or range(100, 100 + n)),
                        warmup_pass=tuple(warm or [True] * n), run_seconds=run_s, warmup_seconds=run_s / 4)


def cell(c: int, b: float, k: float, n: int = 3, cv: float = 2.0, verdict: str | None = None, **kw) -> CellEvidence:
    delta = (k - b) / b * 100
    half = 2.5 * cv * math.sqrt(2 / n) if n >= 2 else None
    ci = (delta - half, delta + half) if half else None
    v = verdict or (judgement.NOISE_UNKNOWN if n < 2 else
                    judgement.BETTER if ci[0] > 0 else judgement.WORSE if ci[1] < 0 else judgement.WITHIN_NOISE)
    return CellEvidence(c, "output_throughput", True, v, kw.pop("bs", None) or side("A", b, n, cv),
                        kw.pop("cs", None) or side("B", k, n, cv), delta, ci, spec=spec(c), fingerprint=f"fp{c}")


def grid(cells, control=judgement.CONTROL_ABSENT, control_c=None, jit=(), radix=()) -> GridEvidence:
    cells = tuple(cells)
    return GridEvidence("A", "B", tuple(sorted({c.concurrency for c in cells})), control, control_c, cells,
                        start_seconds={"A": 60.0, "B": 90.0}, jit_sides=tuple(jit), radix_cache_sides=tuple(radix))


def seed_grid(n: int = 3, **kw) -> GridEvidence:
    return grid([cell(c, b, k, n) for c, (b, k) in SEED.items()], **kw)


def kinds(plan) -> list[str]:
    return [p.kind for p in plan.proposals]


def test_noise_unknown_cell_gets_pilot_repeats_interleaved():
    g = grid([cell(10, 38.46, 64.29, n=1)], control=judgement.CONTROL_AGREES, control_c=2)
    plan = plan_investigation(g, 10)
    rep = plan.proposals[0]
    assert rep.kind == "repeats"
    # A, B, B, A: each start fresh, measuring the control (concurrency 2) and then the cell on it
    assert [(i.side, i.concurrency, i.repeat_index, i.fresh_start) for i in rep.items] == [
        ("baseline", 2, 1, True), ("baseline", 10, 1, False), ("candidate", 2, 1, True), ("candidate", 10, 1, False),
        ("candidate", 2, 2, True), ("candidate", 10, 2, False), ("baseline", 2, 2, True), ("baseline", 10, 2, False)]
    assert "noise unknown" in rep.reason and "3 a side" in rep.reason
    assert all(i.spec == spec(10) for i in rep.items if i.concurrency == 10)  # results land in the cell
    assert rep.server_starts == 4  # a start per pair
    assert rep.minutes is not None and rep.minutes > 7.5  # the control runs cost beside the cell's


def test_repeats_sized_from_the_cells_own_spread_with_holm_level():
    g = seed_grid(n=3)
    small = cell(64, 100.0, 104.0, n=3, cv=2.0)  # +4%, 2% spread: needs more than 3 a side
    g = grid([small, *[c for c in g.cells if c.concurrency != 64]])
    plan = plan_investigation(g, 64)
    rep = next(p for p in plan.proposals if p.kind == "repeats")
    n, ok = repeats_per_side(2.0, 2.0, 4.0, min_effect_pct=2.0, alpha=0.05 / 5)
    assert ok and n > 3
    assert len([i for i in rep.items if i.concurrency == 64]) == 2 * (n - 3)
    assert len([i for i in rep.items if i.concurrency == 2]) == 2 * (n - 3)  # the control on every new start
    assert f"needs {n} runs a side" in rep.reason and "0.05/5" in rep.reason


def test_a_cell_that_cannot_settle_within_the_cap_says_so():
    g = grid([cell(64, 100.0, 100.5, n=3, cv=8.0)], control=judgement.CONTROL_AGREES, control_c=2)
    plan = plan_investigation(g, 64, cap=6)
    rep = plan.proposals[0]
    assert "not expected to settle within the cap of 6" in rep.reason
    assert len([i for i in rep.items if i.concurrency == 64]) == 2 * 3  # up to the cap, not beyond
    assert "not settled" in rep.expect


def test_a_cell_whose_starts_lack_the_control_gets_paired_starts():
    # Enough repeats already (no repeats proposal), but none of the cell's starts measured concurrency 2.
    g = grid([cell(10, 38.46, 64.29, n=6, cv=0.5)], control=judgement.CONTROL_AGREES, control_c=2)
    plan = plan_investigation(g, 10)
    assert "repeats" not in kinds(plan)
    control = next(p for p in plan.proposals if p.kind == "control")
    # 2 fresh starts a side, each measuring concurrency 2 and then the cell: never control-only starts
    assert [(i.concurrency, i.fresh_start) for i in control.items if i.side == "baseline"] == [
        (2, True), (10, False), (2, True), (10, False)]
    assert "on its own starts" in control.reason and "0 vs 0" in control.reason


def test_a_cell_judged_against_the_control_on_its_starts_gets_no_control_proposal():
    g = grid([dataclasses.replace(cell(10, 38.46, 64.29, n=6, cv=0.5), control_starts=(6, 6))],
             control=judgement.CONTROL_AGREES, control_c=2)
    plan = plan_investigation(g, 10)
    assert "control" not in kinds(plan)
    assert any(n.startswith("control: 6 vs 6") for n in plan.notes)


def test_seed_sign_change_between_64_and_256_is_bisected():
    plan = plan_investigation(seed_grid(), 256)
    bis = next(p for p in plan.proposals if p.kind == "bisect")
    assert {i.concurrency for i in bis.items} == {128}
    assert bis.items[0].spec["num_prompts"] == 512
    assert "changes sign between concurrency 64 (+13.9%) and 256 (-28.3%)" in bis.reason
    # the 256 -> 1024 bracket keeps its sign and stays beyond the minimum effect: nothing there
    assert all(i.concurrency < 256 for i in bis.items)
    # an unmeasured concurrency is priced like the slower of its measured neighbours
    assert bis.minutes is not None


def test_jit_backend_gets_a_cold_warm_pair_on_its_side():
    plan = plan_investigation(seed_grid(jit=("candidate",)), 256)
    pair = next(p for p in plan.proposals if p.kind == "cold_warm")
    cold, warm = pair.items
    assert (cold.side, cold.role, cold.fresh_start, cold.warmup) == ("candidate", "cold", True, False)
    assert (warm.side, warm.role, warm.fresh_start, warm.warmup) == ("candidate", "warm", False, True)
    assert pair.server_starts == 1  # the cold run starts the server; the warm one reuses it
    assert "JIT" in pair.reason


def test_no_jit_and_warm_runs_mean_no_cold_warm_pair():
    plan = plan_investigation(seed_grid(), 256)
    assert "cold_warm" not in kinds(plan)
    assert any(n.startswith("cold/warm") for n in plan.notes)


def test_runs_without_warmup_pass_make_a_warmup_effect_plausible():
    c = cell(64, 218.74, 249.23, bs=side("A", 218.74, 3, warm=[False, True, True]))
    plan = plan_investigation(grid([c]), 64)
    pair = next(p for p in plan.proposals if p.kind == "cold_warm")
    assert {i.side for i in pair.items} == {"baseline"} and "had no warmup pass" in pair.reason


def test_shared_start_with_radix_cache_gets_prefix_pair_and_restarts():
    shared = dict(starts=[7, 7, 7])
    c = cell(64, 100.0, 130.0, n=3, cv=1.0, bs=side("A", 100.0, 3, 1.0, **shared),
             cs=side("B", 130.0, 3, 1.0, **shared))
    plan = plan_investigation(grid([c], control=judgement.CONTROL_AGREES, control_c=2, radix=("baseline",)), 64)
    assert "repeats" not in kinds(plan)  # +30% with 1% spread is settled already
    cache = next(p for p in plan.proposals if p.kind == "prefix_cache")
    assert [i.role for i in cache.items] == ["cache-empty", "cache-hot"]
    assert cache.items[0].fresh_start and all(i.spec == spec(64) for i in cache.items)
    restart = next(p for p in plan.proposals if p.kind == "restart")
    assert all(i.fresh_start for i in restart.items) and len(restart.items) == 4
    assert "one server start (#7)" in restart.reason


def test_flush_cache_spec_needs_no_prefix_pair():
    c = cell(64, 100.0, 130.0)
    c = CellEvidence(**{**c.__dict__, "spec": {**spec(64), "flush_cache": True}})
    plan = plan_investigation(grid([c], radix=("baseline", "candidate")), 64)
    assert "prefix_cache" not in kinds(plan)


def test_refused_cell_proposes_nothing_and_says_why():
    c = CellEvidence(10, "output_throughput", True, judgement.REFUSED, side("A", 38.0, 3), side("B", 64.0, 3))
    plan = plan_investigation(grid([c]), 10)
    assert plan.proposals == ()
    assert "no spec shared by both sides" in plan.notes[0]


def test_unknown_cell_is_an_error_naming_what_exists():
    with pytest.raises(InvestigateError, match="concurrency 3.*1, 10, 64, 256, 1024"):
        plan_investigation(seed_grid(), 3)


def test_plan_totals_and_subset():
    plan = plan_investigation(seed_grid(n=1, jit=("candidate",)), 256)
    assert plan.name == "investigate:A-vs-B:c=256:output_throughput"
    assert plan.server_starts >= sum(p.server_starts for p in plan.proposals) - len(plan.proposals)
    only = plan.only(["bisect"])
    assert kinds(only) == ["bisect"] and only.server_starts == only.proposals[0].server_starts
    assert plan.to_dict()["before"]["verdict"] == judgement.NOISE_UNKNOWN


def test_flagged_runs_are_a_caution_in_words():
    c = cell(256, 718.83, 515.58)
    c = CellEvidence(**{**c.__dict__, "flags": {"baseline": ("client_bound",)}})
    plan = plan_investigation(grid([c]), 256)
    (caution,) = plan.cautions
    assert "baseline runs are flagged (client_bound" in caution and "could not keep up" in caution


def test_a_client_bound_cell_gets_a_remeasure_that_says_what_to_change():
    """The demo's c=256/1024 on a 2-core box: every run client-bound, so no clean run and no verdict; the
    investigation proposes fresh starts (concurrency 2 first) and names what to change."""
    advice = "what to change: fewer concurrent requests than 256 per client, or a faster client host"
    lost = dataclasses.replace(cell(256, 700.0, 500.0, n=0, verdict=judgement.UNRELIABLE),
                               baseline=dataclasses.replace(side("A", 700.0, 0), client_bound_runs=(1, 2, 3),
                                                            client_advice=advice),
                               candidate=dataclasses.replace(side("B", 500.0, 1), client_bound_runs=(4, 5)))
    plan = plan_investigation(grid([lost]), 256)
    rem = next(p for p in plan.proposals if p.kind == "remeasure")
    cell_items = [i for i in rem.items if i.concurrency == 256]
    assert sum(i.side == "baseline" for i in cell_items) == 3  # every lost run measured again
    assert sum(i.side == "candidate" for i in cell_items) == 2
    assert all(i.fresh_start and i.concurrency == 2 for i in rem.items if i.role == "control")
    assert "client-bound run(s) left out" in rem.reason and advice in rem.reason
    # no client-bound runs: nothing to re-measure
    assert "remeasure" not in kinds(plan_investigation(grid([cell(256, 700.0, 500.0, n=3)]), 256))
