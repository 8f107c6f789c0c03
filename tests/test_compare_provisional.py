"""A cell's verdict while a new plan for it is queued: kept, marked provisional, with the reason, in the
JSON, the Markdown, the CSV and the TUI's verdict column; interim only when the cell has no runs from
before the open plan (the fixed horizon of a first plan) or its runs so far give no verdict."""

from __future__ import annotations

import dataclasses

from compare_data import make_run, snapshot, summary

from moe_tui.compare import BETTER, INTERIM, CompareSettings, PlanCount
from moe_tui.compare.build import build_grid_from_runs, plan_counts

SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)


def grid_of(a, b, **kw):
    return build_grid_from_runs(a, b, settings=dataclasses.replace(CompareSettings(), accept_uncontrolled=True), **kw)


def runs(name, values, start, snap):
    return [make_run(start + i, name, concurrency=64, summary=summary(v), profile=snap) for i, v in enumerate(values)]


A = runs("a", [200.0, 201.0, 199.0], 1, SNAP_A)
B = runs("b", [260.0, 261.0, 259.0], 10, SNAP_B)
FP = A[0].fingerprint


def test_a_new_plan_keeps_the_verdict_marked_provisional():
    settled = grid_of(A, B).cell(64, "output_throughput")
    assert settled.verdict == BETTER and not settled.provisional
    # A second campaign of 3 repeats a side, queued (even paused) after the first was done.
    plan = {("a", FP): PlanCount(6, 3, 0, 3), ("b", FP): PlanCount(6, 3, 0, 3)}
    grid = grid_of(A, B, plan=plan)
    c = grid.cell(64, "output_throughput")
    assert c.verdict == BETTER and c.delta_pct == settled.delta_pct and c.delta_text == settled.delta_text
    assert c.provisional.startswith("6 run(s) queued for this cell; the verdict may change")
    assert c.reasons[0] == c.provisional and "(provisional)" in c.verdict_text
    row = grid.to_json_dict()["cells"][0]
    assert row["verdict"] == "better" and row["provisional"] is True
    assert row["provisional_reason"] == c.provisional and row["delta_pct"] == settled.delta_pct

    from moe_tui.export.formats import render_csv, render_markdown, render_text
    from moe_tui.ui.widgets.compare_grid import short_verdict

    assert "| **better** (uncontrolled) (provisional) | 6 run(s) queued" in render_markdown(grid, generated_at="now")
    assert "(provisional)" in render_csv(grid) and "better (uncontrolled) (provisional)" in render_text(grid, 400)
    assert short_verdict(c).plain == "better (uncontrolled) (provisional)"


def test_a_first_plan_still_running_stays_interim():
    plan = {("b", FP): PlanCount(3, 1)}  # b's runs are all from the open plan: no verdict to keep
    c = grid_of(A, B[:2], plan=plan).cell(64, "output_throughput")
    assert c.verdict == INTERIM and not c.provisional and c.delta_pct is None


def test_runs_so_far_without_a_verdict_leave_the_cell_interim():
    same = runs("b", [260.0, 260.0, 260.0], 10, SNAP_B)  # zero spread: noise unknown, nothing to keep
    c = grid_of(A, same, plan={("b", FP): PlanCount(6, 3, 0, 3)}).cell(64, "output_throughput")
    assert c.verdict == INTERIM and not c.provisional and "0 of 3 planned repeats done" in c.reasons[0]


def test_plan_counts_tell_earlier_plans_from_the_open_one():
    rows = [{"profile_name": "a", "fingerprint": "f", "state": "done", "n": 3, "campaign_id": 1},
            {"profile_name": "a", "fingerprint": "f", "state": "pending", "n": 3, "campaign_id": 2},
            {"profile_name": "a", "fingerprint": "f", "state": "done", "n": 1, "campaign_id": 2}]
    assert plan_counts(rows)[("a", "f")] == PlanCount(7, 3, 0, 3)


def test_a_plan_cut_short_earns_no_provisional_verdict():
    rows = [{"profile_name": "a", "fingerprint": "f", "state": "done", "n": 2, "campaign_id": 1},
            {"profile_name": "a", "fingerprint": "f", "state": "cancelled", "n": 1, "campaign_id": 1},
            {"profile_name": "a", "fingerprint": "f", "state": "pending", "n": 1, "campaign_id": 2}]
    assert plan_counts(rows)[("a", "f")].earlier == 0  # cut: its runs never earned a verdict
    rows[1]["state"] = "done"
    assert plan_counts(rows[:2], {(1, "a", "f"): 4})[("a", "f")].earlier == 0  # one item cleared


def test_runs_of_a_cleared_plan_earn_no_provisional_verdict():
    c = grid_of(A, B, plan={("b", FP): PlanCount(1, 1)}).cell(64, "output_throughput")  # plan 1 cleared
    assert c.verdict == INTERIM and not c.provisional
