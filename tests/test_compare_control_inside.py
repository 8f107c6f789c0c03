"""The control inside the comparison: each cell judged raw and against concurrency 2 on its own server starts.

Plain data (no process): sweeps of server starts, each start measuring concurrency 2 and the cell, as the
campaign plan queues them. Every test here fails on the grid that judged the control beside the cells.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from compare_data import make_run, snapshot, summary

from moe_tui import judgement as J
from moe_tui.compare import CompareSettings
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.compare.stats import Prior, welch_moderated

SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)
# Per-start offsets shared by a start's concurrencies (a slow start is slow everywhere) plus a little
# of each run's own: fixed numbers, so every test is exact.
OFFSETS = (0.0, 0.012, -0.009, 0.006, -0.004, 0.010, -0.011, 0.003)
JITTER = (0.002, -0.003, 0.001, -0.001, 0.003, -0.002, 0.0, 0.002, -0.001, 0.001, 0.002, -0.002)


def sweeps(name: str, snap: dict, starts: range, levels: dict[int, float], *, first_id: int,
           factor: float = 1.0, factor_at: dict[int, float] | None = None, when0: float = 0.0,
           own_control_starts: bool = True) -> list:
    """One run per concurrency per start; start k shares its offset over its concurrencies."""
    out = []
    rid = first_id
    for k in starts:
        for j, (conc, level) in enumerate(sorted(levels.items())):
            off = OFFSETS[k % len(OFFSETS)] + JITTER[(k * 5 + j) % len(JITTER)]
            v = level * factor * (factor_at or {}).get(conc, 1.0) * math.exp(off)
            start = k + (1000 if conc == J.CONTROL_CONCURRENCY and not own_control_starts else 0)
            out.append(make_run(rid, name, concurrency=conc, summary=summary(v, scale=level / v), profile=snap,
                                when=when0 + 10.0 * k + j, start=start + (500 if name == "b" else 0)))
            rid += 1
    return out


LEVELS = {2: 19.3, 64: 220.0}


def grid(a, b, **kw):
    return build_grid_from_runs(a, b, baseline_name="a", candidate_name="b", **kw)


def test_an_environment_shift_bigger_than_the_old_margin_cancels_and_never_reads_worse():
    # The candidate's host is 6% slower on every start, at every concurrency; the backends are equal.
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100, factor=0.94)
    c = grid(a, b).cell(64, "output_throughput")
    assert c.verdict != J.WORSE
    assert c.control_relative_pct is not None and abs(c.control_relative_pct) < 1.0
    # The raw comparison alone would have called it (what --accept-uncontrolled shows, labelled).
    acc = grid(a, b, settings=CompareSettings(accept_uncontrolled=True)).cell(64, "output_throughput")
    assert acc.verdict == J.WORSE and "control moved with it" in acc.uncontrolled


def test_a_real_effect_under_a_shifted_environment_stands_once_both_tests_clear():
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100, factor=0.97, factor_at={64: 1.20})
    c = grid(a, b).cell(64, "output_throughput")
    assert c.verdict == J.BETTER and not c.uncontrolled
    assert c.control_relative_pct == pytest.approx(20.0, abs=1.5)
    assert c.control_starts == (4, 4) and any("agrees" in r for r in c.reasons)


def test_a_control_measured_on_other_starts_vouches_for_nothing():
    # Cells and control measured on different server starts (a control re-measured another day).
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1, own_control_starts=False)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100, factor_at={64: 1.2}, own_control_starts=False)
    g = grid(a, b)
    c = g.cell(64, "output_throughput")
    assert g.control.state != J.CONTROL_ABSENT  # the check beside the grid has its runs ...
    assert c.verdict == J.UNCONTROLLED and "no control on the same server starts" in c.uncontrolled  # ... the cell is not


def test_a_backend_that_differs_at_the_control_is_no_verdict_elsewhere():
    # The backends truly differ by 4% at concurrency 2 and not at 64: relative to the control, 64 looks
    # 4% worse; the raw comparison (interleaved starts) says equal; no verdict either way.
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100, factor_at={2: 1.04})
    c = grid(a, b, settings=CompareSettings(accept_uncontrolled=True)).cell(64, "output_throughput")
    assert c.verdict == J.WITHIN_NOISE
    assert c.control_relative_pct == pytest.approx(-3.8, abs=1.0)
    assert any("differ at concurrency 2 itself" in r for r in c.reasons)


def test_every_metric_has_its_own_control_a_latency_only_host_cancels():
    # The candidate's host adds 15% TTFT everywhere (and nothing to throughput): no TTFT verdict.
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100)
    for r in b:
        r.summary["mean_ttft_ms"] *= 1.15
    c = grid(a, b).cell(64, "mean_ttft_ms")
    assert c.verdict != J.WORSE and abs(c.control_relative_pct or 99) < 1.0


def test_unequal_sides_keep_their_own_variance():
    """5 quiet starts against 2 loud ones: Welch weights, not a pooled variance (which is anti-conservative)."""
    quiet = np.log([100.0, 100.2, 99.9, 100.1, 99.8])
    loud = np.log([104.0, 97.0])
    from scipy import stats  # here, not at the top: 1 s of CPU in every worker's collection

    t = welch_moderated(quiet, loud, Prior(0.0, 0.0), Prior(0.0, 0.0))
    assert t is not None
    res = stats.ttest_ind(loud, quiet, equal_var=False)
    assert t.p_value == pytest.approx(res.pvalue) and t.df == pytest.approx(res.df)
    pooled = stats.ttest_ind(loud, quiet, equal_var=True)
    assert t.p_value > pooled.pvalue  # the pooled test would claim more than the data hold


def test_one_untimed_run_does_not_switch_the_time_rule_off():
    # Grouped in time (every baseline start before every candidate start), plus one candidate run whose
    # time is unknown: the sides still do not overlap, and the unknown time is said.
    a = sweeps("a", SNAP_A, range(0, 4), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(4, 8), LEVELS, first_id=100, factor_at={64: 1.2}, when0=10_000.0)
    untimed = b[-1]
    b[-1] = type(untimed)(**{**untimed.__dict__, "started_at": None, "finished_at": None})
    c = grid(a, b).cell(64, "output_throughput")
    assert c.verdict == J.UNCONTROLLED and "do not overlap in time" in c.uncontrolled
    assert any(r.startswith("time unknown") for r in c.reasons)


def imported(rid: int, conc: int, value: float, info: dict, *, start: str | None = None, tokens: bool = True,
             when: float = 0.0) -> dict:
    s = summary(value)
    if tokens:
        s["total_output_tokens"] = s["completed"] * 1024
    spec = make_run(rid, "x", concurrency=conc).spec
    from moe_tui.spec import BenchmarkSpec

    fp = BenchmarkSpec.from_dict(spec).fingerprint
    prov = {"source_file": "f.jsonl", "content_sha256": f"h{rid}", "server_info": info,
            **({"server_start": start} if start else {})}
    return {"id": rid, "fingerprint": fp, "spec": spec, "summary": s, "profile": {}, "status": "complete",
            "profile_name": "x", "provenance": prov, "started_at": when, "finished_at": when + 1}


def imported_side(first: int, backend: str | None, factor: float, *, info_extra: dict | None = None,
                  named: bool = True, tokens: bool = True) -> list[dict]:
    out = []
    for k in range(3):
        info = {**({"moe_runner_backend": backend} if backend else {}), **(info_extra or {"tp_size": 8})}
        for j, (conc, level) in enumerate(sorted(LEVELS.items())):
            v = level * (factor if conc == 64 else 1.0) * math.exp(OFFSETS[k] + JITTER[k * 2 + j])
            out.append(imported(first + 2 * k + j, conc, v, info, start=f"s{first}-{k}" if named else None,
                                tokens=tokens, when=100.0 * k + 10 * j + (first >= 100)))
    return out


def test_honest_imports_name_their_start_and_reach_a_verdict():
    a = imported_side(1, "flashinfer_cutlass", 1.0)
    b = imported_side(100, "flashinfer_cutedsl", 1.3)
    c = grid(a, b).cell(64, "output_throughput")
    assert c.verdict == J.BETTER and c.control_starts == (3, 3)


@pytest.mark.parametrize("what, kw, words", [
    ("no backend", {"backend": None}, "MoE backend the server resolved"),
    ("only a pid", {"info_extra": {"pid": 4242}}, "launch settings"),
    ("no token count", {"tokens": False}, "output length unknown"),
    ("no start", {"named": False}, "no server start identity"),
])
def test_missing_evidence_is_never_agreement(what, kw, words):
    backend = kw.pop("backend", "flashinfer_cutedsl")
    a = imported_side(1, "flashinfer_cutlass", 1.0, **kw)
    b = imported_side(100, backend, 1.3, **kw)
    c = grid(a, b).cell(64, "output_throughput")
    assert c.verdict == J.UNVERIFIED, what
    assert any(words in r for r in c.reasons), (what, c.reasons)


def test_percent_and_absolute_delta_agree_in_sign_and_say_what_they_are_on():
    """The issue's '-1.0% (+0.354 ms)': the % is on per-start geometric means, the absolute was on run
    means. Now the absolute is the same ratio on the baseline's mean, and a reason says which is which."""
    def one(rid: int, name: str, snap: dict, v: float, start: int) -> object:
        return make_run(rid, name, concurrency=64, summary=summary(v), profile=snap, when=float(rid), start=start)

    a = [one(1, "a", SNAP_A, 100.0, 1), one(2, "a", SNAP_A, 100.0, 1), one(3, "a", SNAP_A, 100.0, 1),
         one(4, "a", SNAP_A, 110.0, 2)]
    b = [one(5, "b", SNAP_B, 103.0, 3), one(6, "b", SNAP_B, 104.0, 4)]
    c = grid(a, b, settings=CompareSettings(accept_uncontrolled=True)).cell(64, "output_throughput")
    assert c.delta_pct is not None and c.delta is not None and c.delta_pct < 0 < c.candidate.mean - c.baseline.mean
    assert (c.delta < 0) == (c.delta_pct < 0)
    assert any("per-start geometric means" in r and "not of the run means shown" in r for r in c.reasons)


def test_within_noise_clear_of_zero_says_it_is_short_of_the_minimum_effect():
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100, factor_at={64: 1.021})
    c = grid(a, b, settings=CompareSettings(min_effect_pct=5.0)).cell(64, "output_throughput")
    assert c.verdict == J.WITHIN_NOISE and c.ci_low_pct is not None and c.ci_low_pct > 0
    assert "clear of 0, not of the ±5% minimum effect" in c.verdict_text


def test_the_control_concurrency_takes_no_share_of_the_familys_alpha():
    # Concurrencies 2 and 64: only 64 can carry a verdict, so the primary family is one cell and its
    # interval is the plain 95% one (the control cell read at the same level, never a verdict).
    a = sweeps("a", SNAP_A, range(0, 8, 2), LEVELS, first_id=1)
    b = sweeps("b", SNAP_B, range(1, 8, 2), LEVELS, first_id=100, factor_at={64: 1.20})
    g = grid(a, b)
    cell, control = g.cell(64, "output_throughput"), g.cell(2, "output_throughput")
    assert cell.ci_confidence == pytest.approx(0.95) and control.ci_confidence == pytest.approx(0.95)
    assert any("over 1 primary cell(s)" in r for r in cell.reasons)
    assert control.verdict != J.BETTER and control.verdict != J.WORSE
