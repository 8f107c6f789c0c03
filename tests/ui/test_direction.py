"""Issue 23 item 1: the comparison's direction is the user's.

The default is the campaign's order (first profile = baseline), data arriving never swaps what the
pickers show, the user's pick is remembered per data dir, the grid's title names the direction,
and an investigation made in one order is found from the other."""

from __future__ import annotations

import pytest
from textual.widgets import Select

from moe_tui.control import direction
from moe_tui.control.reads import StoreReads
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue
from moe_tui.store.queue_plan import CampaignPlan
from moe_tui.ui.screens.compare import keep_direction
from tests.support.pilot import SIZE, open_compare, press, settle
from tests.ui.fakes import RecordingAdapter, demo_runs

A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


# -- plain data ---------------------------------------------------------------------------------
def test_campaign_order_takes_the_newest_campaign_with_two_profiles_with_runs():
    campaigns = [{"definition": {"profiles": [B, A]}},
                 {"definition": {"profiles": [A, B, "never-ran"]}},
                 {"definition": {"profiles": ["never-ran", "other"]}}]
    assert direction.campaign_order(campaigns, [A, B]) == (A, B)
    assert direction.campaign_order(campaigns[:1], [A, B]) == (B, A)
    # An investigation keeps the pair it was made for.
    assert direction.campaign_order([{"definition": {"kind": "investigation", "baseline": B, "candidate": A}}],
                                    [A, B]) == (B, A)
    assert direction.campaign_order(campaigns, [A]) is None


def test_choose_prefers_the_users_pick_then_the_campaign_then_the_first_two():
    names = [B, A, "c"]
    assert direction.choose(names, (A, "c"), (B, A)) == (A, "c")
    assert direction.choose(names, ("gone", A), (A, B)) == (A, B)
    assert direction.choose(names, None, None) == (B, A)
    assert direction.choose([A], (A, B), None) is None


def test_pick_is_remembered_per_data_dir(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    direction.save_pick(one, B, A)
    assert direction.load_pick(one) == (B, A)
    assert direction.load_pick(two) is None
    (two / direction.DIRECTION_FILE).write_text("{not json")
    assert direction.load_pick(two) is None  # a broken file is no pick, not a crash


def test_keep_direction_never_replaces_what_the_pickers_show():
    names = [B, A]
    # The user picked the baseline only; a run lands and the choices change: it stays the baseline.
    assert keep_direction(names, (A, Select.NULL), None, (B, A)) == (A, B)
    assert keep_direction(names, (Select.NULL, A), None, (A, B)) == (B, A)
    assert keep_direction(names, (A, B), (B, A), (B, A)) == (A, B)
    assert keep_direction(names, (Select.NULL, Select.NULL), None, (A, B)) == (A, B)
    assert keep_direction(names, (Select.NULL, Select.NULL), (B, A), (A, B)) == (B, A)


# -- a real store -------------------------------------------------------------------------------
class Reads(StoreReads):
    def __init__(self, store: Store, data_dir) -> None:
        self.store, self.profiles, self.data_dir = store, [], data_dir


@pytest.fixture
def store(tmp_path):
    from tests.support.stores import store_of

    a, b = demo_runs()
    with store_of(tmp_path, b + a) as s:  # cutedsl's runs first: the store's order is not the campaign's
        yield s


def test_store_default_is_the_campaign_order_and_a_pick_overrides_it(store, tmp_path):
    reads = Reads(store, tmp_path)
    spec = BenchmarkSpec.from_dict(demo_runs()[0][0]["spec"])
    RunQueue(store).add_campaign(CampaignPlan(profiles=(A, B), concurrencies=(10,), base_spec=spec, repeats=1,
                                              policy="interleaved"), name="demo")
    assert reads.compare_direction() == (A, B)
    reads.remember_direction(B, A)
    assert reads.compare_direction() == (B, A)
    assert Reads(store, tmp_path / "elsewhere").compare_direction() == (A, B)


def first_sweep(s: Store) -> None:
    """A grouped campaign of A then B at concurrency 10, two repeats: the baseline's two runs done (as the
    runner makes them, from the claimed items), the candidate's two queued."""
    queue = RunQueue(s)
    queue.add_campaign(CampaignPlan(profiles=(A, B), concurrencies=(10,), base_spec=BenchmarkSpec(), repeats=2,
                                    policy="grouped"), name="first sweep")
    for value in (100.0, 101.0):
        item = queue.claim_next()
        assert item is not None and item.profile_name == A
        rid = s.create_run(profile_name=A, spec_json=item.spec.canonical_json(), fingerprint=item.fingerprint,
                           client="moe-tui", profile={"name": A, "engine": "sim"}, queue_item_id=item.id)
        s.finish_run(rid, status="complete", summary={"completed": 10, "failed": 0, "output_throughput": value},
                     close_item=(item.id, "done", ""))


def test_the_newest_campaigns_pair_is_offered_before_the_candidate_has_a_run(tmp_path):
    """The demo's first sweep (grouped): the baseline's runs land first; the candidate has none yet. The pickers
    offer the campaign's pair and the grid says, per cell, that the candidate's run is queued (was: nothing)."""
    s = Store(tmp_path / "store.sqlite3")
    try:
        reads = Reads(s, tmp_path)
        first_sweep(s)
        assert reads.compared_profiles() == [A, B] and reads.compare_direction() == (A, B)
        cell = reads.comparison(A, B).cell(10, "output_throughput")
        assert cell.baseline.n == 2 and cell.candidate.n == 0 and cell.delta_text == ""
        assert cell.verdict == "no_data" and cell.verdict_text == f"no data: no run yet: {B} at concurrency 10 (2 queued)"
        grid = reads.comparison(A, B)  # "not yet", not a fault: no "profile snapshot not recorded"
        assert f"no run of {B} yet: launch settings are compared once it has one" in grid.warnings
        assert not any("snapshot not recorded" in w for w in grid.warnings)
        assert "(yet, where it is queued; else add it to both sweeps)" in grid.control.text
    finally:
        s.close()


def test_investigation_report_finds_the_cell_in_either_order(store):
    from moe_tui.grids.pair import build_grid
    from moe_tui.investigate.planner import plan_investigation
    from moe_tui.investigate.report import report
    from moe_tui.investigate.store import enqueue_plan, evidence_from_grid, investigations

    plan = plan_investigation(evidence_from_grid(build_grid(store, A, B), store), 10)
    enqueue_plan(RunQueue(store), plan.only(["cold_warm"]))
    (record,) = investigations(store, B, A)  # asked the other way round
    grid = build_grid(store, B, A)
    text = report(store, record, evidence_from_grid(grid, store)).text()
    assert f"investigated as baseline {A}, candidate {B}" in text
    assert "(investigated as" in grid.cell(10, "output_throughput").investigation


# -- the screen -----------------------------------------------------------------------------------
class Arriving(RecordingAdapter):
    """One profile has runs at first; the second one's first run lands later."""

    def __init__(self) -> None:
        super().__init__()
        self.names = [A]
        self.remembered: list[tuple[str, str]] = []

    def compared_profiles(self):
        return list(self.names)

    def compare_direction(self):
        return (B, A) if len(self.names) == 2 else None  # the campaign's order would be B first

    def remember_direction(self, baseline, candidate):
        self.remembered.append((baseline, candidate))


async def test_data_arriving_never_flips_the_users_direction(make_app):
    app, adapter = make_app(adapter=Arriving())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compare(pilot, app)
        base = screen.query_one("#compare-baseline", Select)
        assert base.value == Select.NULL  # one profile with runs: nothing to compare yet
        base.value = A  # the user picks the baseline
        await settle(pilot, app)
        adapter.names = [B, A]  # a run of B lands
        screen.load_choices()
        await settle(pilot, app)
        assert (base.value, screen.query_one("#compare-candidate", Select).value) == (A, B)
        assert app.compare_pair == (A, B)
        assert f"baseline {A} → candidate {B}" in str(screen.query_one("#compare-grid").border_title)
        await press(pilot, app, "w")
        assert adapter.remembered[-1] == (B, A)
        assert app.compare_pair == (B, A)


def test_compare_by_cli_during_the_first_sweep_shows_the_grid(capsys):
    """The same in `moe-tui compare`: it said "no runs for profile 'sim-flashinfer-cutedsl' (did you
    mean 'sim-flashinfer-cutlass'?)", the baseline offered for its own queued candidate. A profile
    the campaign has queued is not unknown; a name that is neither run nor queued still exits 4."""
    import json

    from moe_tui import cli
    from moe_tui.paths import store_path

    with Store(store_path()) as s:
        first_sweep(s)
    assert cli.main(["compare", A, B, "--format", "json"]) == 0
    (cell,) = [c for c in json.loads(capsys.readouterr().out)["cells"] if c["metric"] == "output_throughput"]
    assert cell["n_baseline"] == 2 and cell["n_candidate"] == 0 and cell["delta_pct"] is None
    assert f"no run yet: {B} at concurrency 10 (2 queued)" in " ".join(cell["reasons"])
    assert cli.main(["compare", A, "sim-nothing-queued"]) == 4
    assert "no runs for profile 'sim-nothing-queued'" in capsys.readouterr().err


def test_compare_takes_the_profiles_folder_and_says_which_name_is_a_profile_not_run_yet(tmp_path, capsys):
    """Walk 2026-12-05 finding 14: `compare --profiles-dir DIR` was refused (usage error), though `queue add` and
    `run` take it. The grid reads stored runs; the folder tells a profile not run yet from a typo."""
    from moe_tui import cli

    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "fresh.toml").write_text('name = "sim-fresh"\nengine = "sim"\nmodel_path = "m"\n'
                                       'moe_runner_backend = "flashinfer_cutlass"\nport = 31900\ngpus = [0]\n')
    assert cli.main(["compare", "sim-fresh", "sim-typo", "--profiles-dir", str(folder)]) == 4
    err = capsys.readouterr().err
    assert f"'sim-fresh' is a profile in {folder} with no run yet" in err, err
    assert "'sim-typo' is a profile" not in err


def test_the_servers_list_the_newest_campaigns_baseline_first(tmp_path):
    """Walk 2026-12-05 finding 13: the Servers panel listed profiles as the folder sorts them, so the demo's
    candidate (cutedsl) stood above its baseline (cutlass). The newest campaign's profiles come first, in its
    order; the others follow as the folder lists them."""
    from moe_tui.paths import bundled_demo_profiles_dir
    from moe_tui.profiles import load_profiles

    s = Store(tmp_path / "store.sqlite3")
    try:
        reads = Reads(s, tmp_path)
        reads.profiles = list(load_profiles(bundled_demo_profiles_dir()).profiles)
        folder_order = [p.name for p in reads.profiles]
        assert folder_order.index(B) < folder_order.index(A)  # the folder puts the candidate first
        assert [r.profile for r in reads.server_rows(())] == folder_order  # no campaign: the folder's order
        RunQueue(s).add_campaign(CampaignPlan(profiles=(A, B), concurrencies=(10,), base_spec=BenchmarkSpec(),
                                              repeats=1, policy="interleaved"), name="demo")
        shown = [r.profile for r in reads.server_rows(())]
        assert shown[:2] == [A, B] and sorted(shown) == sorted(folder_order)
    finally:
        s.close()
