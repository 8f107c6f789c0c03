"""Properties of the grid over random inputs, and its statistics under a known noise model.

- Hypothesis: over random pairs of runs with random spec changes, no delta is ever produced
  between different fingerprints, and every refusal names every differing field with both values.
- A/A: both sides drawn from the same noise model (each metric = true value x (1 + N(0, 5%)), a
  run-to-run CV in line with what repeated bench_serving runs show on a quiet box), 5 repeats per
  side at 5 concurrencies x 6 metrics, over 200 fixed seeds: "within noise" in >= 95% of cells.
- Power: a real 15% difference at concurrency 64 with the same 5% CV and 5 repeats per side is
  called (the right way) in >= 80% of seeds.
Seeds are fixed, so these tests are deterministic; the thresholds are the contract.
"""

from __future__ import annotations

import numpy as np
from compare_data import METRIC_KEYS, make_run, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_tui.compare import BETTER, WITHIN_NOISE, CompareSettings
from moe_tui.compare import REFUSED as DIFFERENT_SPEC
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.spec import BenchmarkSpec

# The statistics alone (the control gate is its own test): verdicts shown even when uncontrolled.
ACCEPT = CompareSettings(accept_uncontrolled=True)

SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)
CV = 0.05
TRUE = {"output_throughput": 1000.0, "mean_ttft_ms": 150.0, "p99_ttft_ms": 400.0, "mean_tpot_ms": 40.0,
        "mean_itl_ms": 39.0, "mean_e2e_latency_ms": 41000.0}

spec_changes = st.fixed_dictionaries({}, optional={
    "input_len": st.sampled_from([128, 1024, 4096]),
    "output_len": st.sampled_from([1, 512, 1024]),
    "range_ratio": st.sampled_from([0.0, 0.5, 1.0]),
    "num_prompts": st.sampled_from([100, 200]),
    "seed": st.integers(0, 3),
    "request_rate": st.sampled_from([float("inf"), 4.0]),
    "api": st.sampled_from(["generate", "completions"]),
    "client": st.sampled_from(["moe-tui", "sglang.bench_serving"]),
    "client_version": st.sampled_from(["", "0.5.23"]),
    "ignore_eos": st.booleans(),
    "temperature": st.sampled_from([0.0, 0.7]),
    "flush_cache": st.booleans(),
    "warmup_requests": st.sampled_from([0, 1]),
})
run_shape = st.tuples(st.sampled_from([1, 2, 64]), spec_changes,
                      st.sampled_from(["complete", "complete", "incomplete", "failed"]),
                      st.floats(10.0, 2000.0))


def _runs(name, shapes, start, snap):
    out = []
    for i, (conc, changes, status, value) in enumerate(shapes):
        out.append(make_run(start + i, name, concurrency=conc, status=status, profile=snap,
                            spec_changes=changes, summary={k: value for k in METRIC_KEYS}))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(run_shape, min_size=1, max_size=5), st.lists(run_shape, min_size=1, max_size=5))
def test_no_delta_across_fingerprints_and_refusals_name_fields(shapes_a, shapes_b):
    a, b = _runs("a", shapes_a, 1, SNAP_A), _runs("b", shapes_b, 100, SNAP_B)
    by_id = {r.id: r for r in a + b}
    g = build_grid_from_runs(a, b)
    for c in g.cells:
        pa, pb = g.point("baseline", c.concurrency), g.point("candidate", c.concurrency)
        if c.delta is not None:
            assert pa.fingerprint == pb.fingerprint == c.fingerprint
            used = {by_id[i].fingerprint for i in (*pa.run_ids, *pb.run_ids)}
            assert used == {c.fingerprint}
        if pa.fingerprint and pb.fingerprint and pa.fingerprint != pb.fingerprint:
            assert c.delta is None and c.verdict == DIFFERENT_SPEC and not c.comparable
            ca = BenchmarkSpec.from_dict(pa.spec).canonical_dict()
            cb = BenchmarkSpec.from_dict(pb.spec).canonical_dict()
            differing = [k for k in ca if ca[k] != cb[k]]
            assert differing
            for field in differing:
                assert f"{field}: " in c.refusal, (field, c.refusal)
            assert {d.field for d in c.spec_diffs} == set(differing)
        if c.verdict == DIFFERENT_SPEC:
            assert pa.fingerprint != pb.fingerprint


def _side(name, rng, start, concs, effect=None, repeats=5):
    runs = []
    rid = start
    for conc in concs:
        for _ in range(repeats):
            values = {}
            for key, true in TRUE.items():
                factor = 1.0
                if effect and conc in effect:
                    factor = effect[conc] if key == "output_throughput" else 1.0 / effect[conc]
                values[key] = true * factor * (1.0 + rng.normal(0.0, CV))
            # Interleaved in time (a, b, a, b): the sides overlap, as a campaign's repeats do.
            runs.append(make_run(rid, name, concurrency=conc, summary=values, when=float(rid % 1000) * 2 + (name == "b"),
                                 profile=SNAP_A if name == "a" else SNAP_B))
            rid += 1
    return runs


def test_aa_comparisons_are_within_noise_in_at_least_95_percent_of_cells():
    concs = (1, 2, 16, 64, 256)
    within = total = control_alarms = false_primary = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        g = build_grid_from_runs(_side("a", rng, 1, concs), _side("b", rng, 1000, concs), settings=ACCEPT)
        within += sum(c.verdict == WITHIN_NOISE for c in g.cells)
        false_primary += any(c.primary and c.verdict in (BETTER, "worse") for c in g.cells)
        total += len(g.cells)
        control_alarms += g.control.failed
    assert total == 200 * 5 * 6
    assert within / total >= 0.95, f"A/A within noise in only {within / total:.3%} of cells"
    # Holm over the primary family: a false primary verdict in at most ~5% of whole grids.
    assert false_primary / 200 <= 0.08, f"false primary verdicts in {false_primary} of 200 A/A grids"
    # The whole-comparison alarm uses a 99% CI: about 1% of A/A comparisons trip it.
    assert control_alarms / 200 <= 0.03, f"control check false alarms in {control_alarms} of 200 A/A comparisons"


def test_a_real_15_percent_difference_at_64_is_called_in_at_least_80_percent_of_seeds():
    called = called_latency = 0
    seeds = 200
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        g = build_grid_from_runs(_side("a", rng, 1, (2, 64)), _side("b", rng, 1000, (2, 64), effect={64: 1.15}),
                                 settings=ACCEPT)
        called += g.cell(64, "output_throughput").verdict == BETTER
        called_latency += g.cell(64, "mean_tpot_ms").verdict == BETTER
    assert called / seeds >= 0.80, f"15% throughput gain called in {called} of {seeds} seeds"
    # The secondary family has 10 cells here, and a verdict needs its Bonferroni interval (99.5%) beyond the
    # 2% minimum effect, not just a Holm p-value: that costs power at 5 runs of 5% noise (73% measured).
    assert called_latency / seeds >= 0.70, f"15% faster TPOT called in {called_latency} of {seeds} seeds"
