"""The grid and investigations over a real store: a cell under investigation is marked (TUI, text,
JSON), and an investigation's cold run (no warmup pass, on purpose) never enters the cell's mean."""

from __future__ import annotations

import pytest

from moe_tui.grids.pair import build_grid
from moe_tui.investigate.planner import plan_investigation
from moe_tui.investigate.store import enqueue_plan, evidence_from_grid, investigations
from moe_tui.store.queue import RunQueue
from tests.support.stores import store_of, stored_row
from tests.ui.fakes import demo_runs

A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


@pytest.fixture
def store(tmp_path):
    a, b = demo_runs()
    with store_of(tmp_path, a + b) as s:
        yield s


def test_cell_under_investigation_is_marked_and_cold_run_left_out(store):
    before = build_grid(store, A, B).cell(10, "output_throughput")
    assert before.investigation == ""
    plan = plan_investigation(evidence_from_grid(build_grid(store, A, B), store), 10)
    assert "cold_warm" in [p.kind for p in plan.proposals]
    enqueue_plan(RunQueue(store), plan.only(["cold_warm"]))
    (record,) = investigations(store, A, B)
    cold_item = next(item for role, item in record.roles() if role.get("role") == "cold")

    # The cold run measured something absurd for the cell (a JIT compile in the timed run): stored
    # under the cell's very spec and profile, it would drag the candidate's mean down.
    runs = demo_runs()[1] if cold_item.profile_name == B else demo_runs()[0]
    side = next(r for r in runs if r["spec"]["max_concurrency"] == 10)
    summary = {**side["summary"], "output_throughput": 1.0}
    (run_id,) = store.import_runs([stored_row(side, summary=summary)])
    RunQueue(store).attach_run(cold_item.id, run_id)

    grid = build_grid(store, A, B)
    after = grid.cell(10, "output_throughput")
    assert after.investigation.startswith("under investigation"), after.investigation
    assert (after.baseline.mean, after.candidate.mean) == (before.baseline.mean, before.candidate.mean)
    assert (after.baseline.n, after.candidate.n) == (before.baseline.n, before.candidate.n)
    assert {"concurrency": 10, "metric": "output_throughput", "state": after.investigation} in \
        grid.to_json_dict()["investigations"]
    others = [c for c in grid.cells if (c.concurrency, c.metric) != (10, "output_throughput")]
    assert others and not any(c.investigation for c in others)


def test_marker_reaches_the_text_export_and_the_tui_cell(store):
    from moe_tui.export.formats import render_text
    from moe_tui.ui.widgets.compare_grid import cell_detail, short_verdict

    plan = plan_investigation(evidence_from_grid(build_grid(store, A, B), store), 10)
    enqueue_plan(RunQueue(store), plan)
    grid = build_grid(store, A, B)
    cell = grid.cell(10, "output_throughput")
    assert "⌕" in short_verdict(cell).plain and cell.investigation in cell_detail(cell).plain
    assert f"concurrency 10, {cell.label}: under investigation" in render_text(grid)
