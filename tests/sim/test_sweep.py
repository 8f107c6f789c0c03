"""The seed's concurrency sweep, replayed fast against two real emulator processes.

At `--sim-time-scale 75`, workload random-ids 128 in / 512 out, one wave of prompts per
concurrency (num_prompts = max(C, 2)), the cutedsl/cutlass output-throughput ratio at every
concurrency must be within 10% of the seed session's ratio, and each measured throughput within
15% of the model's prediction for that exact workload (the gap is HTTP overhead squeezed 75x).
"""

from __future__ import annotations

import asyncio

import pytest

from moe_tui.sim.loadgen import run_load
from moe_tui.sim.model import predict_steady_state
from tests.sim_helpers import sim_server

pytestmark = pytest.mark.integration  # starts real processes

SEED = {
    "flashinfer_cutlass": {1: 10.36, 2: 19.29, 10: 38.46, 64: 218.74, 256: 718.83, 1024: 1603.04},
    "flashinfer_cutedsl": {1: 10.07, 2: 19.24, 10: 64.29, 64: 249.23, 256: 515.58, 1024: 796.93},
}
TIME_SCALE = 75
INPUT_LEN, OUTPUT_LEN = 128, 512


@pytest.mark.slow
def test_seed_sweep_ratios_at_fast_time_scale():
    measured: dict[tuple[str, int], float] = {}
    for backend in SEED:
        args = ["--sim-exact", "--moe-runner-backend", backend, "--sim-time-scale", str(TIME_SCALE),
                "--stream-interval", "64"]
        with sim_server(args) as sim:
            for conc in SEED[backend]:
                n = max(conc, 2)
                res = asyncio.run(run_load(sim.base_url, conc, n, INPUT_LEN, OUTPUT_LEN))
                assert res.failed == 0 and res.completed == n, res.errors
                pred = predict_steady_state(backend, conc, INPUT_LEN, OUTPUT_LEN,
                                            time_scale=TIME_SCALE, num_prompts=n)
                assert abs(res.output_throughput / pred.output_throughput - 1) < 0.15, (
                    backend, conc, res, pred)
                measured[backend, conc] = res.output_throughput
    for conc in SEED["flashinfer_cutlass"]:
        seed_ratio = SEED["flashinfer_cutedsl"][conc] / SEED["flashinfer_cutlass"][conc]
        ratio = measured["flashinfer_cutedsl", conc] / measured["flashinfer_cutlass", conc]
        assert abs(ratio / seed_ratio - 1) < 0.10, (conc, ratio, seed_ratio)
