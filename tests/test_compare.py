"""The comparison grid: fingerprint gating, statistics, verdicts, flags, control check, diffs."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest
from compare_data import SNAP_A, SNAP_B, control_fail_runs, golden_runs, grid_of, make_run, provenance, runs, summary

from moe_tui.compare import (
    BETTER,
    FLAG_BACKEND_MISMATCH,
    FLAG_CLIENT_BOUND,
    FLAG_CLOCK_DROP,
    FLAG_ENVIRONMENT_DIFFERS,
    FLAG_FOREIGN_GPU_PROCESS,
    FLAG_INCOMPLETE,
    FLAG_REQUEST_ERRORS,
    FLAG_THROTTLED,
    NO_DATA,
    NOISE_UNKNOWN,
    UNRELIABLE,
    WITHIN_NOISE,
    WORSE,
    CompareError,
)
from moe_tui.compare import (
    REFUSED as DIFFERENT_SPEC,
)
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.compare.stats import repeats_to_settle, welch_delta
from moe_tui.grids.pair import build_grid


def test_welch_ci_matches_scipy_ttest():
    from scipy import stats  # here, not at the top: 1 s of CPU in every worker's collection

    a, b = [100.0, 103.0, 98.0, 101.0, 99.5], [110.0, 104.0, 113.0, 108.0]
    d = welch_delta(a, b)
    res = stats.ttest_ind(b, a, equal_var=False)
    ci = res.confidence_interval(0.95)
    assert d.delta == pytest.approx(np.mean(b) - np.mean(a))
    assert d.ci_low == pytest.approx(ci.low) and d.ci_high == pytest.approx(ci.high)
    assert d.df == pytest.approx(res.df)
    assert d.delta_pct == pytest.approx((np.mean(b) - np.mean(a)) / np.mean(a) * 100)


def test_single_repeat_shows_the_means_but_no_delta_and_no_verdict():
    g = grid_of(runs("a", 64, [200.0], 1), runs("b", 64, [230.0], 10, SNAP_B))
    c = g.cell(64, "output_throughput")
    assert c.comparable and c.verdict == NOISE_UNKNOWN
    assert c.baseline.mean == pytest.approx(200.0) and c.candidate.mean == pytest.approx(230.0)
    assert c.delta is None and c.delta_pct is None and c.delta_text == ""  # no delta without a verdict
    assert c.ci_low is None and c.repeats_needed is None and c.ci_text == ""
    assert c.verdict_text.startswith("noise unknown")


def test_zero_variance_is_noise_unknown_never_a_zero_width_interval():
    g = grid_of(runs("a", 64, [200.0, 200.0], 1), runs("b", 64, [201.0, 201.0], 10, SNAP_B))
    c = g.cell(64, "output_throughput")
    assert c.verdict == NOISE_UNKNOWN and c.ci_low is None and "identical" in c.reasons[0]
    assert welch_delta([1.0, 1.0], [2.0, 2.0]).ci_low is None


def test_a_tiny_effect_beyond_noise_is_not_a_verdict():
    """+0.4% TPOT with quiet repeats: significant, but under the 2% minimum effect."""
    a = [make_run(i, "a", concurrency=8, summary=summary(100 + i % 3 * 0.01, mean_tpot_ms=95.0 + i % 3 * 0.01),
                  profile=SNAP_A) for i in range(4)]
    b = [make_run(10 + i, "b", concurrency=8, summary=summary(100 + i % 3 * 0.01, mean_tpot_ms=95.38 + i % 3 * 0.01),
                  profile=SNAP_B) for i in range(4)]
    c = grid_of(a, b).cell(8, "mean_tpot_ms")
    assert c.verdict == WITHIN_NOISE and any("minimum effect" in r for r in c.reasons) and not c.primary


def test_verdict_follows_metric_direction():
    a = [make_run(i, "a", concurrency=8, summary=summary(100 + i % 2, mean_ttft_ms=200.0 + i % 2), profile=SNAP_A)
         for i in range(4)]
    b = [make_run(10 + i, "b", concurrency=8, summary=summary(150 + i % 2, mean_ttft_ms=150.0 + i % 2 * 1.5),
                  profile=SNAP_B) for i in range(4)]
    g = grid_of(a, b)
    assert g.cell(8, "output_throughput").verdict == BETTER  # higher throughput
    assert g.cell(8, "mean_ttft_ms").verdict == BETTER  # lower latency
    g2 = grid_of(b, a)
    assert g2.cell(8, "output_throughput").verdict == WORSE
    assert g2.cell(8, "mean_ttft_ms").verdict == WORSE


def test_within_noise_says_how_many_repeats_would_settle_it():
    # +3%: above the 2% minimum effect, but not clear of the noise (under it, nothing is worth settling)
    g = grid_of(runs("a", 4, [100, 104, 97, 101], 1), runs("b", 4, [105, 101, 107, 101], 10, SNAP_B))
    c = g.cell(4, "output_throughput")
    assert c.verdict == WITHIN_NOISE and c.p_adjusted is not None and c.p_adjusted >= 0.05
    assert c.repeats_needed is not None and c.repeats_needed > 4
    assert f"~{c.repeats_needed} repeats/side" in c.verdict_text


def test_repeats_to_settle_is_a_t_corrected_power_estimate():
    # Normal approximation: 2 * (1.96 + 0.84)^2 = 15.7; t quantiles push it to 17.
    assert repeats_to_settle(1.0, 1.0, 1.0) == 17
    assert repeats_to_settle(1.0, 1.0, 2.0) < repeats_to_settle(1.0, 1.0, 1.0)
    assert repeats_to_settle(1.0, 1.0, 0.0) is None
    assert repeats_to_settle(1.0, 1.0, 0.001) is None  # beyond the 1000 cap
    # The estimate delivers roughly its promised power: simulate at the estimated n.
    rng = np.random.default_rng(3)
    n = repeats_to_settle(1.0, 1.0, 1.0)
    hits = sum(welch_delta(rng.normal(0, 1, n), rng.normal(1, 1, n)).ci_low > 0 for _ in range(400))
    assert 0.72 <= hits / 400 <= 0.92


def test_incomplete_and_failed_runs_are_flagged_never_averaged():
    a = runs("a", 16, [100.0, 102.0], 1)
    a.append(make_run(3, "a", concurrency=16, summary=summary(5.0, failed=90), status="incomplete", profile=SNAP_A))
    a.append(make_run(4, "a", concurrency=16, summary=summary(1.0), status="failed", profile=SNAP_A))
    g = grid_of(a, runs("b", 16, [101.0, 103.0], 10, SNAP_B))
    c = g.cell(16, "output_throughput")
    assert c.baseline.n == 2 and c.baseline.mean == pytest.approx(101.0)
    assert FLAG_INCOMPLETE in c.baseline_flags
    p = g.point("baseline", 16)
    assert p.excluded_run_ids == (3, 4) and p.run_ids == (1, 2)
    notes = " ".join(p.flag_notes)
    assert "run 3: incomplete" in notes and "run 4: failed" in notes and "90 of 100 requests failed" in notes
    assert c.verdict == WITHIN_NOISE  # two clean runs a side remain: the flagged ones only left out


def test_only_incomplete_runs_refuse_with_the_reason():
    a = [make_run(1, "a", concurrency=16, summary=summary(5.0), status="incomplete", profile=SNAP_A)]
    g = grid_of(a, runs("b", 16, [101.0], 10, SNAP_B), baseline_name="A", candidate_name="B")
    c = g.cell(16, "output_throughput")
    assert c.verdict == NO_DATA and c.delta is None
    assert "no complete run" in c.refusal and "A has only 1" in c.refusal and c.baseline.text == "no complete run"


def test_no_run_on_one_side_names_it():
    g = grid_of(runs("a", 256, [700.0], 1), [], baseline_name="A", candidate_name="Bee")
    c = g.cell(256, "output_throughput")
    assert c.verdict == NO_DATA and c.refusal == "no run: Bee at concurrency 256"
    assert c.verdict_text == "no data: no run: Bee at concurrency 256"
    assert c.candidate.text == "no run" and c.delta is None


def test_different_spec_refuses_and_names_fields_with_both_values():
    a = runs("a", 64, [218.0, 219.0], 1)
    b = [make_run(10 + i, "b", concurrency=64, summary=summary(v), profile=SNAP_B,
                  spec_changes={"output_len": 512, "range_ratio": 0.0}) for i, v in enumerate([249.0, 250.0])]
    c = grid_of(a, b).cell(64, "output_throughput")
    assert not c.comparable and c.verdict == DIFFERENT_SPEC
    assert c.delta is None and c.delta_pct is None and c.ci_low is None and c.delta_text == ""
    assert [d.field for d in c.spec_diffs] == ["output_len", "range_ratio"]
    assert "output_len: 1024 vs 512" in c.refusal and "range_ratio: 1.0 vs 0.0" in c.refusal


def test_fingerprint_choice_prefers_the_shared_spec_then_says_others_exist():
    a = runs("a", 64, [218.0, 219.0], 1)
    a += [make_run(50, "a", concurrency=64, summary=summary(999.0), profile=SNAP_A, spec_changes={"seed": 7})]
    b = runs("b", 64, [249.0, 250.0], 10, SNAP_B)
    g = grid_of(a, b)
    c = g.cell(64, "output_throughput")
    assert c.fingerprint and c.baseline.mean == pytest.approx(218.5)
    note = " ".join(g.point("baseline", 64).notes)
    assert "other specs exist" in note and "shared with the other side" in note


def test_fingerprint_choice_without_shared_spec_takes_the_most_recent():
    a = [make_run(1, "a", concurrency=64, summary=summary(100.0), profile=SNAP_A, spec_changes={"seed": 1}),
         make_run(2, "a", concurrency=64, summary=summary(200.0), profile=SNAP_A, spec_changes={"seed": 2})]
    b = [make_run(3, "b", concurrency=64, summary=summary(300.0), profile=SNAP_B, spec_changes={"seed": 3})]
    g = grid_of(a, b)
    c = g.cell(64, "output_throughput")
    assert c.baseline.mean == 200.0 and "seed: 2 vs 3" in c.refusal
    assert "the most recent" in g.point("baseline", 64).notes[0]


def test_forced_fingerprint_limits_rows_and_choice():
    a = runs("a", 2, [19.0], 1) + runs("a", 64, [218.0], 5)
    b = runs("b", 2, [19.1], 10, SNAP_B) + runs("b", 64, [250.0], 15, SNAP_B)
    fp = a[1].fingerprint
    g = grid_of(a, b, fingerprint=fp[:10])
    assert g.concurrencies == (64,)
    with pytest.raises(CompareError, match="at least 6"):
        grid_of(a, b, fingerprint="abc")
    with pytest.raises(CompareError, match="neither"):
        grid_of(a, b, fingerprint="ffffffffff")


def test_suspect_flags_from_every_source():
    tel = {"available": True, "overall": {"suspect_clock_events": ["hw_slowdown"], "sm_clock_drop_pct": 22.0},
           "gpus": {}, "foreign_processes": [{"gpu": 3, "pid": 999, "name": "python"}]}
    b = [make_run(10, "b", concurrency=32, summary=summary(300.0, failed=3), profile=SNAP_B, telemetry=tel,
                  selfcheck={"client_bound": True}, flags=("simulated",),
                  prov=provenance(resolved_backend="triton"))]
    g = grid_of(runs("a", 32, [250.0], 1), b)
    c = g.cell(32, "output_throughput")
    assert set(c.candidate_flags) == {FLAG_BACKEND_MISMATCH, FLAG_CLIENT_BOUND, FLAG_REQUEST_ERRORS,
                                      FLAG_THROTTLED, FLAG_CLOCK_DROP, FLAG_FOREIGN_GPU_PROCESS}
    assert c.baseline_flags == () and c.flags_text.startswith("C: ")
    notes = " ".join(g.point("candidate", 32).flag_notes)
    assert "triton" in notes and "3 of 100 requests failed" in notes and "pid 999" in notes
    assert g.simulated  # the "simulated" run flag is the banner, not a cell flag
    assert c.verdict == UNRELIABLE and c.candidate.n == 0 and c.candidate.n_flagged_excluded == 1


def test_flagged_runs_on_both_sides_lose_their_verdict_and_the_toggle_keeps_them_unreliable():
    """The issue's attack: client_bound on both sides kept its "better"."""
    from moe_tui.compare import CompareSettings

    a = runs("a", 64, [200.0, 201.0, 199.0], 1, flags=("client_bound",))
    b = runs("b", 64, [260.0, 261.0, 259.0], 10, SNAP_B, flags=("client_bound",))
    c = grid_of(a, b).cell(64, "output_throughput")
    assert c.verdict == UNRELIABLE and c.baseline.n == 0 and "client_bound" in c.reasons[0]
    c = grid_of(a, b, settings=CompareSettings(include_flagged=True)).cell(64, "output_throughput")
    assert c.verdict == UNRELIABLE and c.baseline.n == 3 and "includes 3 flagged" in c.reasons[0]
    # One flagged run of three on a side: left out, two clean remain, a verdict may stand.
    a2 = runs("a", 64, [200.0, 201.0], 1) + runs("a", 64, [150.0], 5, flags=("server_stall",))
    c = grid_of(a2, runs("b", 64, [260.0, 262.0], 10, SNAP_B)).cell(64, "output_throughput")
    assert c.verdict == BETTER and c.baseline.n == 2 and c.baseline.n_flagged_excluded == 1
    assert any("1 flagged run(s) left out" in r for r in c.reasons)


def test_bench_engine_flag_spelling_is_normalised():
    b = [make_run(10, "b", concurrency=32, summary=summary(300.0), profile=SNAP_B, flags=("client-bound",))]
    c = grid_of(runs("a", 32, [250.0], 1), b).cell(32, "output_throughput")
    assert c.candidate_flags == (FLAG_CLIENT_BOUND,)


def test_control_check_differs_is_reported_and_a_difference_at_the_control_is_never_a_verdict():
    a, b = control_fail_runs()
    g = build_grid_from_runs(a, b)
    assert g.control.failed and g.control.state == "differs" and g.control.concurrency == 2
    assert FLAG_ENVIRONMENT_DIFFERS in g.flags and g.warnings[0].startswith("ENVIRONMENT DIFFERS")
    c = g.cell(2, "output_throughput")
    assert c.verdict == "uncontrolled" and c.delta_pct is None and "control concurrency" in c.reasons[0]
    # JSON says why beside the state (no "uncontrolled": null next to "verdict": "uncontrolled").
    cell = next(x for x in g.to_json_dict()["cells"] if x["concurrency"] == 2 and x["metric"] == "output_throughput")
    assert cell["verdict"] == "uncontrolled" and "control concurrency" in cell["uncontrolled"]
    # Accepted, the verdict shows, labelled as uncontrolled.
    c = grid_of(a, b).cell(2, "output_throughput")
    assert c.verdict == BETTER and "control concurrency" in c.uncontrolled and "(uncontrolled)" in c.verdict_text


def test_control_check_is_an_equivalence_test_with_a_margin_below_the_minimum_effect():
    """The seed's concurrency-2 point: 19.29 vs 19.24 tok/s, a real 0.3% difference with quiet repeats:
    its interval lies inside ±1.5% (below the 2% a verdict needs), so the check agrees."""
    g = grid_of(runs("a", 2, [19.29, 19.291, 19.289], 1),
                             runs("b", 2, [19.24, 19.241, 19.239], 10, SNAP_B))
    assert g.control.state == "agrees" and "margin ±1.5%" in g.control.text
    assert g.control.margin_pct < g.settings.min_effect_pct
    assert FLAG_ENVIRONMENT_DIFFERS not in g.flags
    # Quiet repeats 4% apart: beyond the margin and clear of zero: differs.
    g = grid_of(runs("a", 2, [19.29, 19.291, 19.289], 1),
                             runs("b", 2, [18.52, 18.521, 18.519], 10, SNAP_B))
    assert g.control.failed and FLAG_ENVIRONMENT_DIFFERS in g.flags
    # Noisy repeats: neither inside the margin nor clearly beyond it.
    g = grid_of(runs("a", 2, [19.0, 20.5, 18.0], 1), runs("b", 2, [18.5, 20.0, 19.5], 10, SNAP_B))
    assert g.control.state == "inconclusive"


def test_control_check_needs_three_runs_a_side_and_more_never_weaken_it():
    """The issue's attack: a 10% slower environment passed with 2 repeats a side."""
    g = grid_of(runs("a", 2, [19.0, 19.1], 1), runs("b", 2, [17.1, 17.2], 10, SNAP_B))
    assert g.control.state == "inconclusive" and "at least 3" in g.control.text
    g = grid_of(runs("a", 2, [19.0], 1), runs("b", 2, [19.6], 10, SNAP_B))
    assert g.control.state == "inconclusive"
    g = grid_of(runs("a", 2, [19.0, 19.1, 18.9], 1), runs("b", 2, [17.1, 17.2, 17.0], 10, SNAP_B))
    assert g.control.state == "differs"


def test_the_control_is_concurrency_2_never_1_and_its_absence_withholds_verdicts():
    # Concurrency 1 is no control: in the seed the backends truly differed by 2.8% there.
    g = grid_of(runs("a", 1, [10.0, 10.01, 9.99], 1), runs("b", 1, [10.0, 10.01, 9.99], 10, SNAP_B))
    assert g.control.state == "absent" and g.control.concurrency is None
    g = grid_of(runs("a", 64, [10.0], 1), runs("b", 64, [10.0], 10, SNAP_B))
    assert g.control.state == "absent" and "concurrency 2 was not measured" in g.control.text
    # A clear +14% at 64 with no concurrency 2 anywhere: judged raw, but withheld (no control on its starts).
    g = build_grid_from_runs(runs("a", 64, [220.0, 221.0, 219.0], 5),
                             runs("b", 64, [250.0, 251.0, 249.5], 15, SNAP_B))
    c = g.cell(64, "output_throughput")
    assert c.verdict == "uncontrolled" and "control absent" in c.uncontrolled and c.delta_pct is None


def test_grid_serves_the_ui_without_computation():
    a, b = golden_runs()
    g = grid_of(a, b, baseline_name="glm5-cutlass", candidate_name="glm5-cutedsl")
    assert g.concurrencies == (1, 2, 10, 64, 256, 1024)
    assert len(g.cells) == 6 * 6
    assert g.baseline_series.concurrencies == g.concurrencies
    assert g.candidate_series.mean[g.concurrencies.index(256)] is None
    assert g.baseline_series.std[0] is None and g.baseline_series.n[1] == 5
    for c in g.cells:
        assert c.baseline.text and c.candidate.text and c.verdict_text
        assert c.verdict_text.startswith(__import__("moe_tui.judgement").judgement.VERDICT_WORDS[c.verdict].split(":")[0])
        assert (c.delta is not None) == (c.verdict in (BETTER, WORSE, WITHIN_NOISE))  # no delta without a verdict
    frame = g.to_frame()
    assert list(frame["concurrency"].unique()) == list(g.concurrencies) and len(frame) == 36


def test_build_grid_from_store_and_unknown_profile(tmp_path):
    from moe_tui.store.db import Store

    with Store(tmp_path / "s.sqlite3") as store:
        for r in golden_runs()[0][:3]:
            store.import_run(profile_name=r.profile_name, spec_json=__import__("json").dumps(r.spec),
                             fingerprint=r.fingerprint, client=r.client, summary=r.summary, provenance=r.provenance,
                             profile=r.profile)
        g = build_grid(store, "glm5-cutlass", "glm5-cutlass")
        c = g.cell(2, "output_throughput")  # one profile against itself: the backend did not change
        assert c.verdict == DIFFERENT_SPEC and "compared setting did not change" in c.reasons[0]
        with pytest.raises(CompareError) as err:
            build_grid(store, "glm5-cutlas", "nope")
        msg = str(err.value)
        assert "'glm5-cutlas' (did you mean 'glm5-cutlass'?)" in msg and "'nope'" in msg
        assert "profiles with runs: glm5-cutlass" in msg


def test_bad_run_input_is_named():
    with pytest.raises(CompareError, match="baseline-x run"):
        grid_of([{"id": 1}], [], baseline_name="baseline-x")


@pytest.mark.integration
def test_core_modules_do_not_import_textual():
    code = "import sys, moe_tui.compare, moe_tui.export.formats; assert 'textual' not in sys.modules; " \
           "assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nan_metric_is_not_averaged():
    a = runs("a", 4, [100.0, 101.0], 1)
    b = runs("b", 4, [100.0], 10, SNAP_B) + [make_run(12, "b", concurrency=4, summary=summary(float("nan")), profile=SNAP_B)]
    c = grid_of(a, b).cell(4, "output_throughput")
    assert c.candidate.n == 1 and not math.isnan(c.candidate.mean)
    assert c.verdict == NOISE_UNKNOWN


def test_interim_until_the_planned_repeats_are_in():
    from moe_tui.compare import PlanCount

    a = runs("a", 64, [200.0, 201.0, 199.0], 1)
    b = runs("b", 64, [260.0, 261.0], 10, SNAP_B)
    fp = a[0].fingerprint
    c = grid_of(a, b, plan={("b", fp): PlanCount(3, 1)}).cell(64, "output_throughput")
    assert c.verdict == "interim" and "2 of 3 planned repeats done" in c.reasons[0]
    assert c.delta_pct is None and c.delta_text == ""  # an interim cell shows no running delta
    c = grid_of(a, b, plan={("b", fp): PlanCount(3, 0)}).cell(64, "output_throughput")
    assert c.verdict == BETTER


def test_repeats_from_one_server_start_each_are_noise_unknown():
    """Grouped runs: every repeat of a side on one server start. A start's own speed offset would
    pass for a backend difference (the emulator's A/A with grouped order called a third of its
    cells), so such a cell has no verdict until repeats span starts."""
    def starts(runs_, ids):
        return [dataclasses.replace(r, server_start_id=i) for r, i in zip(runs_, ids)]

    a = runs("a", 64, [200.0, 201.0, 199.0], 1)
    b = runs("b", 64, [230.0, 231.0, 229.0], 10, SNAP_B)
    cell = grid_of(starts(a, [1, 1, 1]), starts(b, [2, 2, 2])).cell(64, "output_throughput")
    assert cell.verdict == NOISE_UNKNOWN and "from 1 server start(s)" in " ".join(cell.reasons)
    # The same numbers from three starts a side: the verdict stands.
    cell = grid_of(starts(a, [1, 3, 5]), starts(b, [2, 4, 6])).cell(64, "output_throughput")
    assert cell.verdict == BETTER
    # Starts not known (imported runs): nothing to judge by, the rule does not apply.
    assert grid_of(a, b).cell(64, "output_throughput").verdict == BETTER


def test_moderated_variance_borrows_only_what_the_grid_supports():
    from scipy.special import polygamma

    from moe_tui.compare.stats import fit_priors, trigamma_inverse

    for x in (0.3, 1.0, 4.0, 40.0):
        assert trigamma_inverse(float(polygamma(1, x))) == pytest.approx(x, rel=1e-6)
    # Five concurrencies, equal noise: the prior sits near the common variance and carries weight.
    equal = fit_priors([(float(i), 1e-4 * f, 4.0) for i, f in enumerate((0.8, 1.1, 0.9, 1.2, 1.0))])
    assert all(2e-5 < p.s2 < 5e-4 and p.df > 2 for p in equal)
    # Noise growing 9x (3x in sd) with log concurrency: the trend is the prior's shape, so the noisiest
    # cell's prior is near its own level, not the grid's average.
    growing = fit_priors([(float(i), 1e-4 * 9 ** (i / 4), 4.0) for i in range(5)])
    assert growing[-1].s2 > 4 * growing[0].s2
    # Two cells: a constant prior; one cell: nothing to borrow.
    assert len(fit_priors([(0.0, 1e-4, 4.0), (1.0, 2e-4, 4.0)])) == 2
    assert fit_priors([(0.0, 1e-4, 4.0)])[0].df == 0.0
