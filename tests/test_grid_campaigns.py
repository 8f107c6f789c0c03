"""The grid reads what it judges: the pair's own campaigns (issue 34, second pass).

A baseline measured months ago against another candidate, on a drifted machine, is not evidence about
today's candidate: a cell's runs are those of the campaigns that measured both profiles
(`store.grid_rows.pair_campaigns`, read through indexes), the runs of the baseline's other campaigns are
left out and counted in words, a store with no campaign of both compares every run and says so, and an
open grid brought up to date after a new campaign run equals a fresh build.
"""

from __future__ import annotations

import dataclasses

import pytest

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.grids.pair import RUN_STATUSES, build_grid, campaigns_note, plan_of
from moe_tui.store import grid_rows
from moe_tui.store.db import Store
from moe_tui.store.queue import PlannedItem, RunQueue
from tests.test_run_summaries import A, B, _fill, _profile, _provenance, _spec

C = "sim-triton"  # the candidate the baseline was measured against months ago
BACKEND = {A: "flashinfer_cutlass", B: "flashinfer_cutedsl", C: "triton"}


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "store.sqlite3")
    yield s
    s.close()


def _campaign(store: Store, name: str, profiles: tuple[str, str], tok_s: dict[str, float], *, leave: int = 0) -> None:
    """A campaign of both `profiles` at concurrencies 2 and 16, three repeats, interleaved, run as the
    runner runs its items (the run made by the claimed item); `leave` items stay pending."""
    queue = RunQueue(store)
    planned = [PlannedItem(p, _spec(conc), rep, True) for conc in (2, 16) for rep in range(3) for p in profiles]
    queue.add_planned_campaign(name, "interleaved", {"kind": "comparison"}, planned)
    for n in range(len(planned) - leave):
        _run_next(store, queue, tok_s, n)


def _run_next(store: Store, queue: RunQueue, tok_s: dict[str, float], n: int) -> int:
    item = queue.claim_next()
    assert item is not None
    start = 100 + item.id
    rid = store.create_run(profile_name=item.profile_name, spec_json=item.spec.canonical_json(),
                           fingerprint=item.fingerprint, client="moe-tui",
                           profile=_profile(item.profile_name, BACKEND[item.profile_name]),
                           provenance=_provenance(BACKEND[item.profile_name], start, 500_000, None),
                           queue_item_id=item.id, server_start_id=start)
    conc = item.spec.max_concurrency
    store.finish_run(rid, status="complete", summary={"output_throughput": tok_s[item.profile_name] * conc + n % 3,
                                                      "mean_ttft_ms": 40.0 + conc, "completed": 200, "failed": 0},
                     telemetry={}, selfcheck={"client_bound": False}, close_item=(item.id, "done", ""))
    return rid


def _history(store: Store, *, leave: int = 0) -> None:
    # Months ago: the baseline against C on a machine 30% faster (a drifted environment).
    _campaign(store, "old", (A, C), {A: 130.0, C: 140.0})
    # Today: the baseline against B, interleaved in one campaign.
    _campaign(store, "today", (A, B), {A: 100.0, B: 110.0}, leave=leave)


def _runs_of(store: Store, name: str, campaign: str) -> list[int]:
    return [int(r[0]) for r in store.query(
        "SELECT r.id FROM runs r JOIN queue_items q ON q.id = r.queue_item_id JOIN campaigns c ON c.id = q.campaign_id"
        " WHERE c.name = ? AND r.profile_name = ? ORDER BY r.id", (campaign, name))]


def _from(store: Store, ids: set[int]):
    """The pure grid of exactly the runs `ids` (what the store's grid must equal, less its note)."""
    def read(n: str):
        return [r for r in store.run_summaries(profile_name=n, statuses=RUN_STATUSES, exclude_diagnostic=True)
                if r.id in ids]

    return build_grid_from_runs(read(A), read(B), baseline_name=A, candidate_name=B, plan=plan_of(store, (A, B)))


def test_the_grid_uses_only_the_campaigns_that_measured_both(store):
    _history(store)
    grid = build_grid(store, A, B, extras=False)
    today = set(_runs_of(store, A, "today")) | set(_runs_of(store, B, "today"))
    old = _runs_of(store, A, "old")
    for conc in (2, 16):
        assert set(grid.point("baseline", conc).run_ids) <= set(_runs_of(store, A, "today"))
        assert not set(grid.point("baseline", conc).run_ids) & set(old)
        assert len(grid.point("baseline", conc).run_ids) == 3
    # The drifted months-old baseline (130 tok/s per stream) moves no mean: today's 100 is compared with 110.
    cell = grid.cell(16, "output_throughput")
    assert cell.baseline is not None and cell.baseline.mean == pytest.approx(1601.0)
    note = f"{len(old)} runs from campaigns that did not measure both: not used (the 1 campaign that measured both are compared)"
    assert grid.warnings[-1] == note
    expected = _from(store, today)
    assert dataclasses.replace(grid, warnings=grid.warnings[:-1]) == expected


def test_the_pair_campaigns_come_from_indexes_and_no_run_is_decoded(store):
    _history(store)
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        own = grid_rows.pair_campaigns(store, A, B)
    finally:
        store._conn.set_trace_callback(None)
    assert own is not None and own.campaigns == 1
    assert own.run_ids == frozenset(_runs_of(store, A, "today") + _runs_of(store, B, "today"))
    plans = "\n".join(" ".join(str(r[3]) for r in store.query(f"EXPLAIN QUERY PLAN {s}")) for s in seen
                      if s.lstrip().upper().startswith("SELECT") and "?" not in s)
    assert "SCAN" not in plans.replace("SCAN CONSTANT", "")
    assert grid_rows.pair_campaigns(store, B, C) is None  # B and C never shared a campaign


def test_no_campaign_of_both_compares_every_run_and_says_so(store):
    _fill(store)  # one-off runs of both profiles, no campaign
    grid = build_grid(store, A, B, extras=False)
    assert grid.warnings[-1] == campaigns_note(None, 0)
    assert "no campaign measured both profiles" in grid.warnings[-1]
    assert all(len(grid.point(side, c).run_ids) == 3 for side in ("baseline", "candidate") for c in (2, 16))


def test_a_new_run_in_an_open_grid_equals_a_fresh_build(store, tmp_path):
    _history(store, leave=1)
    before = build_grid(store, A, B, extras=False)
    _run_next(store, RunQueue(store), {A: 100.0, B: 110.0}, 11)
    after = build_grid(store, A, B, extras=False)
    assert after != before
    fresh = Store(tmp_path / "store.sqlite3")
    try:
        assert build_grid(fresh, A, B, extras=False) == after
    finally:
        fresh.close()
    assert sum(len(after.point(s, 16).run_ids) for s in ("baseline", "candidate")) == 6


def _alone(store: Store, name: str, profile: str, conc: int, tok_s: float) -> None:
    """A one-profile campaign at `conc`, three repeats on three server starts (each side on its own day)."""
    queue = RunQueue(store)
    queue.add_planned_campaign(name, "interleaved", {"kind": "comparison"},
                               [PlannedItem(profile, _spec(conc), rep, True) for rep in range(3)])
    for n in range(3):
        _run_next(store, queue, {profile: tok_s}, n)


def test_a_concurrency_only_separate_campaigns_reached_is_confounded_not_dropped(store):
    """The seed's concurrency 10: each side queued alone. The cell is built from those runs (so a spec drift
    would still be named) but shows no delta: the sides were never interleaved. Fails on a grid that drops
    them (no cell) or that pools them as if they were one campaign (a verdict)."""
    _campaign(store, "today", (A, B), {A: 100.0, B: 110.0})
    _alone(store, "monday", A, 64, 100.0)
    _alone(store, "friday", B, 64, 150.0)  # +50%: a clear 'better' had the runs been pooled
    grid = build_grid(store, A, B, extras=False)
    cell = grid.cell(64, "output_throughput")
    assert cell.verdict == "confounded" and cell.delta is None and cell.delta_text == "", cell
    assert any("measured in separate campaigns" in r for r in cell.reasons), cell.reasons
    assert len(grid.point("baseline", 64).run_ids) == 3 and len(grid.point("candidate", 64).run_ids) == 3
    assert "not used" not in " ".join(grid.warnings)  # nothing is left out: those runs are the cell's
    assert grid.cell(16, "output_throughput").verdict != "confounded"  # the pair's own cells are judged
