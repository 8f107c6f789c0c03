"""The emulator's profiler and expert-distribution endpoints (SGLang 0.5.23's), on a real emulator
process over loopback; its traces read back by the explain parser."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from moe_tui.explain import compare_sides, parse_trace_name, read_rank, side_breakdown
from moe_tui.explain.expert_load import expert_load
from moe_tui.explain.rules import ATTENTION, COLLECTIVE, MOE_GEMM, MOE_ROUTING, NORM_ELEMENTWISE, QUANTIZATION
from moe_tui.sim.traces import BACKEND_KERNELS
from tests.sim_helpers import sim_server
from tests.support import loopback

pytestmark = pytest.mark.integration  # starts real processes

FAST = ["--sim-load-seconds", "0.05", "--sim-graph-seconds", "0.05", "--sim-warmup-seconds", "0.05",
        "--sim-time-scale", "20", "--enable-metrics"]


def _load(base: str, n: int = 12, new_tokens: int = 40) -> list[threading.Thread]:
    def one(i: int) -> None:
        loopback.post(base + "/generate", json={"input_ids": list(range(10 + i, 110 + i)),
                                             "sampling_params": {"max_new_tokens": new_tokens, "ignore_eos": True}},
                   timeout=120).raise_for_status()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def _metric(base: str, name: str) -> int:
    """A gauge or counter from /metrics (0.5.23's internal_states carry no running count)."""
    for line in loopback.get(base + "/metrics").text.splitlines():
        if line.startswith(name):
            return int(float(line.rsplit(" ", 1)[-1]))
    raise AssertionError(f"no {name} in /metrics")


def _running(base: str) -> int:
    return _metric(base, "sglang:num_running_reqs")


def _profile(base: str, out: Path, n: int = 12, **req) -> list[Path]:
    """Profile the steady batch: start once all `n` requests run (as explain does after warmup)."""
    generated = _metric(base, "sglang:generation_tokens_total")
    threads = _load(base, n, new_tokens=400)
    # Steady: all `n` running and a decode step done since the last of them was prefilled (each has two
    # tokens). Requests that arrive together are prefilled in one step that counts them all running,
    # and a capture started then holds that prefill.
    while _running(base) < n or _metric(base, "sglang:generation_tokens_total") - generated < 2 * n:
        assert any(t.is_alive() for t in threads), "the load ended before the batch filled"
        time.sleep(0.01)  # a poll, not a spin
    r = loopback.post(base + "/start_profile", json={"output_dir": str(out)} | req)
    assert r.status_code == 200 and r.text == "Start profiling.\n"
    for t in threads:
        t.join()
    loopback.post(base + "/stop_profile")  # after num_steps it stopped by itself: answered 400 then
    return sorted(out.iterdir())


def test_profile_requests_follow_sglang(tmp_path):
    with sim_server(FAST) as sim:
        base = sim.base_url
        state = loopback.get(base + "/server_info").json()["internal_states"][0]
        assert "num_running_reqs" not in state and "num_queue_reqs" not in state  # 0.5.23 reports neither
        startup = sim.log_tail(400)  # 0.5.23 prints no line of its own before the load (no "Init torch distributed")
        assert "Load weight begin." in startup and "Init torch distributed" not in startup
        bad = loopback.post(base + "/start_profile", json={"num_steps": "ten"})
        assert bad.status_code == 400 and "num_steps" in bad.text
        stop = loopback.post(base + "/stop_profile")  # a failed ProfileReqOutput: the tokenizer manager raises
        assert (stop.status_code, stop.text) == (500, "Internal Server Error")
        # unknown fields are ignored, as 0.5.23's request struct does
        assert loopback.post(base + "/start_profile", json={"output_dir": str(tmp_path), "bogus": 1}).status_code == 200
        again = loopback.post(base + "/start_profile")
        assert (again.status_code, again.text) == (500, "Internal Server Error")
        for t in _load(base, n=4, new_tokens=8):
            t.join()
        assert loopback.post(base + "/stop_profile").text == "Stop profiling. This will take some time.\n"
        files = sorted(p.name for p in tmp_path.iterdir())
        assert files and all(parse_trace_name(f) is not None for f in files)
        assert len({parse_trace_name(f).profile_id for f in files}) == 1


def test_traces_by_stage_per_rank_with_backend_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path / "experts"))
    args = FAST + ["--tp-size", "2", "--ep-size", "2", "--moe-runner-backend", "triton",
                   "--expert-distribution-recorder-mode", "stat", "--expert-distribution-recorder-buffer-size", "64"]
    with sim_server(args) as sim:  # the emulator inherits the recorder folder from the environment
        base = sim.base_url
        assert loopback.post(base + "/start_expert_distribution_record").status_code == 200
        files = _profile(base, tmp_path / "t", num_steps=6, profile_prefix="explain")
        assert loopback.post(base + "/stop_expert_distribution_record").status_code == 200
        assert loopback.post(base + "/dump_expert_distribution_record").status_code == 200
    names = [parse_trace_name(p.name) for p in files]
    assert {(n.tp_rank, n.ep_rank, n.stage) for n in names} == {(0, 0, None), (1, 1, None)}
    assert all(p.name.startswith("explain-") for p in files)
    decode = [read_rank(p) for p in files]
    # 0.5.23 counts the batch before its predicate (forward_ct += 1, then the check target <= ct):
    # num_steps=6 captures the 5 batches after the start
    assert all(r.n_steps == 5 and r.step_source == "graph launches" for r in decode), [(r.n_steps, r.step_source) for r in decode]
    side = side_breakdown("triton", decode)
    for cls in (MOE_GEMM, MOE_ROUTING, ATTENTION, COLLECTIVE, NORM_ELEMENTWISE, QUANTIZATION):
        assert side.ms(cls) > 0, cls
    gemm_names = {k.name for k in side.kernels if k.kernel_class == MOE_GEMM}
    assert gemm_names == set(BACKEND_KERNELS["triton"][0])
    dumps = list((tmp_path / "experts").glob("expert_distribution_recorder_*.pt"))
    assert len(dumps) == 1
    load = expert_load(dumps[0])
    # one row per model layer, as 0.5.23 dumps: GLM-5's 78 layers, the first 3 dense (zero), 75 MoE
    assert load.experts == 256 and len(load.layers) == 78 and load.moe_layers == 75
    assert [lay.tokens for lay in load.layers[:3]] == [0, 0, 0] and load.layers[3].tokens > 0
    assert load.steps > 6
    import zipfile  # the whole circular buffer: 64 rows, the unused ones zero
    with zipfile.ZipFile(dumps[0]) as z:
        assert z.getinfo("archive/data/0").file_size == 64 * 78 * 256 * 4
    assert 1.2 < (load.mean_imbalance or 0) < 5


def _side(tmp_path: Path, name: str, extra: list[str]):
    with sim_server(FAST + ["--moe-runner-backend", "flashinfer_cutlass", "--tp-size", "2"] + extra) as sim:
        files = _profile(sim.base_url, tmp_path / name, num_steps=12, profile_by_stage=True)
    return side_breakdown(name, [read_rank(p) for p in files if "DECODE" in p.name])


def test_injected_moe_slowdown_lands_in_moe_gemm(tmp_path):
    injected = 5.0
    a = _side(tmp_path, "a", ["--sim-exact"])
    b = _side(tmp_path, "b", ["--sim-exact", "--sim-moe-slowdown-ms", str(injected)])
    expl = compare_sides(a, b, run_cv=0.0)  # --sim-exact: no run-to-run spread
    gemm = next(d for d in expl.classes if d.kernel_class == MOE_GEMM)
    assert gemm.delta_ms == pytest.approx(injected, rel=0.05)
    assert gemm.beyond_noise and gemm.share is not None and gemm.share > 0.9
    assert [d.kernel_class for d in expl.classes if d.beyond_noise] == [MOE_GEMM]


def test_a_a_pair_moves_no_class_beyond_noise(tmp_path):
    """Two starts of one profile, with the emulator's default start-to-start variance."""
    a = _side(tmp_path, "a", [])
    b = _side(tmp_path, "b", [])
    expl = compare_sides(a, b)
    assert not [d.kernel_class for d in expl.classes if d.beyond_noise]
    assert not expl.total.beyond_noise
    assert "within its noise" in expl.summary_lines()[0]



def test_expert_record_without_a_recorder_mode_kills_the_server():
    """0.5.23: the no-op recorder raises in the scheduler, which exits; the launcher kills its tree
    and the request is never answered."""
    with sim_server(FAST + ["--tp-size", "2"]) as sim:
        with pytest.raises(httpx.TransportError):
            loopback.post(sim.base_url + "/start_expert_distribution_record", timeout=60)
        assert sim.wait_exit(timeout=60) == -9  # kill_process_tree SIGKILLs the launcher itself
        log = sim.log_tail(200)
        assert "Scheduler hit an exception" in log
        assert "Exception: Please set ServerArgs.expert_distribution_recorder_mode" in log
        assert "It usually means one child failed." in log
