"""Correctness gate math: first divergence, identical share, mean |logprob diff|, tolerance."""

from __future__ import annotations

import math

import pytest

from moe_tui.gate.correctness import NOT_COMPARABLE, OUTPUT_DIFFERS, PASSED, GateSample, Tolerance, compare_gate, compare_prompt

SURE = math.log(0.95)
TIE = math.log(0.45)


def sample(pid: str, ids: list[int], lps: list[float | None]) -> GateSample:
    return GateSample(pid, tuple(ids), tuple(lps))


def test_identical_outputs_pass_with_small_logprob_noise():
    base = [sample("a", [1, 2, 3, 4], [SURE, -0.2, -0.01, -0.5])]
    cand = [sample("a", [1, 2, 3, 4], [SURE + 0.01, -0.21, -0.01, -0.49])]
    verdict = compare_gate(base, cand)
    assert verdict.status == PASSED
    assert verdict.identical_share == 1.0 and verdict.first_divergence is None
    assert verdict.mean_abs_logprob_diff == pytest.approx((0.01 + 0.01 + 0 + 0.01) / 4)
    assert "100.0% identical tokens over 1 prompts" in verdict.words


def test_confident_divergence_is_output_differs_with_numbers():
    base = [sample("a", [1, 2, 3, 4], [SURE] * 4), sample("b", [5, 6], [SURE] * 2)]
    cand = [sample("a", [1, 2, 9, 9], [SURE] * 4), sample("b", [5, 6], [SURE] * 2)]
    verdict = compare_gate(base, cand)
    assert verdict.status == OUTPUT_DIFFERS and verdict.output_differs
    assert verdict.first_divergence == 2
    assert verdict.identical_share == pytest.approx(4 / 6)
    row = verdict.prompts[0]
    assert row.first_divergence == 2 and row.identical == 2 and row.compared == 4
    assert "prompt a diverges at token 2 where the baseline was sure (p=0.95 for id 3, candidate chose 9)" in verdict.words
    assert "1 of 2 prompts beyond tolerance" in verdict.words


def test_divergence_at_a_near_tie_is_tolerated():
    base = [sample("a", [1, 2, 3], [SURE, TIE, SURE])]
    cand = [sample("a", [1, 7, 8], [SURE, math.log(0.44), SURE])]
    row = compare_prompt(base[0], cand[0])
    assert row.accepted and "near tie" in row.why and row.first_divergence == 1
    assert compare_gate(base, cand).status == PASSED
    strict = Tolerance(near_tie_prob=0.4)
    assert compare_gate(base, cand, strict).status == OUTPUT_DIFFERS


def test_logprob_drift_beyond_tolerance_fails_even_with_same_tokens():
    base = [sample("a", [1, 2, 3], [-0.1, -0.1, -0.1])]
    cand = [sample("a", [1, 2, 3], [-0.5, -0.5, -0.5])]
    verdict = compare_gate(base, cand)
    assert verdict.status == OUTPUT_DIFFERS
    assert "mean |logprob diff| 0.400 nats over the shared prefix exceeds 0.1" in verdict.words
    assert compare_gate(base, cand, Tolerance(max_mean_abs_logprob_diff=0.5)).status == PASSED


def test_early_stop_is_a_divergence():
    base = [sample("a", [1, 2, 3], [SURE] * 3)]
    cand = [sample("a", [1, 2], [SURE] * 2)]
    row = compare_prompt(base[0], cand[0])
    assert row.first_divergence == 2 and row.compared == 3 and not row.accepted
    assert "candidate chose to stop" in row.why


def test_missing_logprob_at_divergence_is_not_assumed_a_tie():
    row = compare_prompt(sample("a", [1, 2], [None, None]), sample("a", [1, 3], [None, None]))
    assert not row.accepted and "no logprob" in row.why and row.mean_abs_logprob_diff is None


def test_not_comparable_cases():
    a = [sample("a", [1], [SURE])]
    assert compare_gate([], a).status == NOT_COMPARABLE
    assert "no gate samples for the candidate" in compare_gate(a, []).words
    assert "lacks prompt(s) a" in compare_gate(a, [sample("b", [1], [SURE])]).words
    differ = compare_gate(a, a, baseline_set="s1", candidate_set="s2")
    assert differ.status == NOT_COMPARABLE and "prompt sets differ (s1 vs s2)" in differ.words


def test_sample_round_trip():
    s = GateSample("p", (1, 2), (-0.5, None), "length")
    assert GateSample.from_dict(s.to_dict()) == s
