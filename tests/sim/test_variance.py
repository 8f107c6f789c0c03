"""Run-to-run variance like hardware's: the model on plain data (per-start factor spread, seeded
reproducibility, run jitter, bounded drift), then the real emulator recording its start factor in
/server_info and two unseeded starts measuring different speeds."""

from __future__ import annotations

import statistics
import time

import pytest

from moe_tui.sim.variance import VarianceModel, VarianceSettings
from tests.sim_helpers import sim_server
from tests.support import loopback


def test_start_factors_spread_like_the_sigma_asked():
    factors = [VarianceModel(VarianceSettings(start_sigma_pct=1.5), seed).start_factor for seed in range(2000)]
    spread = statistics.pstdev(factors)
    assert 0.013 < spread < 0.017, spread
    assert abs(statistics.fmean(factors) - 1.0) < 0.002


def test_a_seed_reproduces_a_start_and_runs_draw_jitter():
    a = VarianceModel(VarianceSettings(), 42)
    b = VarianceModel(VarianceSettings(), 42)
    assert a.start_factor == b.start_factor
    runs_a = [a.new_run() for _ in range(5)]
    assert runs_a == [b.new_run() for _ in range(5)]
    assert len(set(runs_a)) == 5 and all(abs(r - 1) < 0.03 for r in runs_a)
    assert a.runs == 5


def test_exact_settings_leave_every_factor_at_one():
    model = VarianceModel(VarianceSettings(start_sigma_pct=0, drift_sigma_pct=0, run_jitter_pct=0), 3)
    model.new_run()
    assert model.step_factor(30.0) == 1.0


def test_drift_wanders_but_stays_bounded():
    model = VarianceModel(VarianceSettings(start_sigma_pct=0, run_jitter_pct=0, drift_sigma_pct=0.3,
                                           drift_tau_min=10.0), 9)
    factors = [model.slow_factor(m / 10) for m in range(1, 6000)]  # 10 modelled hours
    assert len(set(factors)) > 100  # it moves
    # stationary sd = sigma * sqrt(tau / 2) ~ 0.67%: a 10-hour walk stays well within 4%.
    assert max(abs(f - 1) for f in factors) < 0.04


def _tokens_per_second(base_url: str) -> float:
    payload = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}
    with loopback.Client(timeout=30) as client:
        start = time.perf_counter()
        for _ in range(3):
            client.post(base_url + "/generate", json=payload).raise_for_status()
        return 180 / (time.perf_counter() - start)


@pytest.mark.integration
def test_each_start_records_its_factor_and_a_big_sigma_shows():
    # A 30% start sigma makes two starts' speeds differ far beyond timing noise, while
    # /server_info names the factor each drew (and the seed that drew it).
    args = ["--moe-runner-backend", "flashinfer_cutlass", "--sim-time-scale", "60", "--sim-start-sigma", "30",
            "--sim-run-jitter", "0", "--sim-drift-sigma", "0"]
    seen = []
    for seed in ("1", "2"):
        with sim_server(args + ["--sim-seed", seed]) as sim:
            sim_info = loopback.get(sim.base_url + "/server_info", timeout=10).json()["sim"]
            seen.append((sim_info["perf_factor_start"], _tokens_per_second(sim.base_url)))
    (f1, tps1), (f2, tps2) = seen
    assert f1 != f2
    # Step time scales with the factor, so throughput scales with its inverse.
    assert abs((tps1 / tps2) / (f2 / f1) - 1) < 0.15, seen


def test_variance_flags_parse_like_sglangs_parser():
    import pytest

    from moe_tui.sim.args import parse_args

    exact = parse_args(["--sim-exact", "--sim-noise-pct", "2"])
    assert (exact.sim_start_sigma, exact.sim_drift_sigma, exact.sim_run_jitter, exact.sim_noise_pct) == (0, 0, 0, 2)
    assert parse_args([]).sim_start_sigma == 1.5
    for bad in (["--sim-start-sigma", "-1"], ["--sim-drift-tau-min", "0"], ["--sim-gpu-lost", "-2"],
                ["--sim-start-sigmaa", "1"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(bad)
        assert exc.value.code == 2
