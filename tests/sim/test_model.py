"""Pure tests of the emulator's flag table, performance model and scheduler (no processes)."""

from __future__ import annotations

import pytest

from moe_tui.sim.args import MOE_RUNNER_BACKEND_CHOICES, build_sglang_parser, parse_args, sglang_flag_names
from moe_tui.sim.model import BatchScheduler, SeqState, load_backends, perf_for, predict_steady_state

# The seed session's sweep (output tok/s), input 1024 / output 1024.
SEED = {
    "flashinfer_cutlass": {1: 10.36, 2: 19.29, 10: 38.46, 64: 218.74, 256: 718.83, 1024: 1603.04},
    "flashinfer_cutedsl": {1: 10.07, 2: 19.24, 10: 64.29, 64: 249.23, 256: 515.58, 1024: 796.93},
}


@pytest.mark.parametrize("backend", sorted(SEED))
def test_model_reproduces_the_seed_sweep_at_time_scale_1(backend):
    backends = load_backends()
    for conc, target in SEED[backend].items():
        pred = predict_steady_state(backend, conc, 1024, 1024, backends=backends)
        assert abs(pred.output_throughput - target) / target < 0.10, (conc, pred)


def test_concurrency_2_tpot_is_about_101_ms_for_both():
    for backend in SEED:
        pred = predict_steady_state(backend, 2, 1024, 1024)
        assert 19.3 * 0.9 < pred.output_throughput < 19.3 * 1.1
        assert 95 < pred.mean_tpot_ms < 110


def test_time_scale_divides_durations():
    slow = predict_steady_state("flashinfer_cutlass", 10, 256, 256, num_prompts=20)
    fast = predict_steady_state("flashinfer_cutlass", 10, 256, 256, num_prompts=20, time_scale=50)
    assert fast.output_throughput == pytest.approx(slow.output_throughput * 50)
    assert fast.mean_tpot_ms == pytest.approx(slow.mean_tpot_ms / 50)


def test_unknown_backend_rows_fall_back_to_default():
    backends = load_backends()
    assert perf_for("lora_marlin", backends) is backends["default"]
    assert perf_for("flashinfer_cutedsl", backends).name == "flashinfer_cutedsl"
    assert set(backends) - {"default"} <= set(MOE_RUNNER_BACKEND_CHOICES)


def test_decode_interpolates_log_log_between_points():
    perf = perf_for("flashinfer_cutlass")
    lo, hi = perf.decode_ms(64), perf.decode_ms(256)
    mid = perf.decode_ms(128)
    assert lo < mid < hi
    assert mid == pytest.approx((lo * hi) ** 0.5, rel=1e-9)  # geometric mean at the log midpoint


def test_scheduler_caps_running_and_queues_fifo():
    sched = BatchScheduler(max_running=2, chunked_prefill_size=8192)
    seqs = [SeqState(str(i), 10, 3) for i in range(3)]
    for s in seqs:
        sched.add(s)
    plan = sched.plan()
    assert [s.rid for s in plan.first_token] == ["0", "1"] and sched.num_waiting == 1
    sched.plan()
    plan = sched.plan()  # third token of 0 and 1: both finish, "2" still waits this step
    assert sorted(s.rid for s in plan.finished) == ["0", "1"]
    plan = sched.plan()
    assert [s.rid for s in plan.first_token] == ["2"]


def test_chunked_prefill_spreads_a_long_prompt_over_steps():
    sched = BatchScheduler(max_running=8, chunked_prefill_size=100)
    seq = SeqState("a", 250, 2)
    sched.add(seq)
    assert [sched.plan().prefill_tokens for _ in range(3)] == [100, 100, 50]
    assert seq.first_token_step == 2


def test_bad_backends_file_names_the_file(tmp_path):
    bad = tmp_path / "b.toml"
    bad.write_text('[backends.default]\npoints = [[1, -3]]\nprefill_ms_per_token = 0.1\n')
    with pytest.raises(ValueError, match="b.toml.*backends.default"):
        load_backends(bad)


def test_flag_table_is_reusable_and_strict(capsys):
    names = sglang_flag_names()
    assert {"--moe-runner-backend", "--tp-size", "--cuda-graph-max-bs-decode"} <= names
    assert not any(n.startswith("--sim-") for n in names)
    build_sglang_parser().parse_args(["--tp-size", "8", "--moe-runner-backend", "flashinfer_cutedsl"])
    for argv, msg in ((["--cuda-graph-max-bs", "8"], "ambiguous option"),
                      (["--enable-piecewise-cuda-graph"], "unrecognized arguments"),
                      (["--moe-runner-backend", "nope"], "invalid choice")):
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2
        assert msg in capsys.readouterr().err
