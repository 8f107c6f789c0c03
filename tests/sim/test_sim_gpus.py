"""Simulated GPUs served by the real emulator at /sim/gpus: memory filled as SGLang fills it,
utilization and power following load, the power-cap throttle (NVML's sw_power_cap bit, a lower SM
clock, slower steps), a foreign process appearing on a GPU, a GPU lost."""

from __future__ import annotations

import time

import psutil
import pytest

from moe_tui.sim.gpus import BIT_GPU_IDLE, BIT_SW_POWER_CAP, MEM_TOTAL_BYTES, SM_CLOCK_MAX_MHZ
from moe_tui.sim.launch import start_sim
from tests.sim_helpers import Loaded
from tests.support import loopback

pytestmark = pytest.mark.integration  # starts real processes

ARGS = ["--tp-size", "2", "--moe-runner-backend", "flashinfer_cutlass", "--sim-time-scale", "20", "--sim-exact"]


def gpus(base_url: str) -> list[dict]:
    return loopback.get(base_url + "/sim/gpus", timeout=10).json()["gpus"]


def sample_under_load(base_url: str, warm_s: float = 1.75) -> tuple[list[dict], float]:
    with Loaded(base_url) as loaded:
        time.sleep(warm_s)
        snapshot = gpus(base_url)
    assert loaded.rate is not None
    return snapshot, loaded.rate


def test_idle_gpus_hold_weights_and_kv_and_say_idle():
    with start_sim(ARGS + ["--mem-fraction-static", "0.8"]) as sim:
        idle = gpus(sim.base_url)
    assert [g["index"] for g in idle] == [0, 1]
    for g in idle:
        assert g["clock_event_bits"] == BIT_GPU_IDLE and g["util_gpu_pct"] == 0
        # the KV pool is allocated up front: ~80% of the card plus context and CUDA graphs
        assert 0.8 < g["mem_used_bytes"] / MEM_TOTAL_BYTES < 0.9 and g["lost"] is False
        assert len(g["processes"]) == 1


def test_load_raises_util_and_power_without_throttle_by_default():
    with start_sim(ARGS) as sim:
        busy, _ = sample_under_load(sim.base_url)
    for g in busy:
        assert g["util_gpu_pct"] > 50 and g["power_w"] > 300
        assert g["clock_event_bits"] == 0 and g["sm_clock_mhz"] == SM_CLOCK_MAX_MHZ
        assert g["power_w"] < g["power_limit_w"]


def engine_steps_per_second(base_url: str) -> tuple[list[dict], float]:
    """Under a steady load, the engine's own step rate (not the client's pace) and a GPU sample."""
    def steps() -> tuple[int, float]:
        state = loopback.get(base_url + "/server_info", timeout=10).json()["internal_states"][0]
        return state["sim_engine_steps"], time.monotonic()

    with Loaded(base_url, 16, output_len=16):
        time.sleep(1.0)
        s0, t0 = steps()
        time.sleep(1.2)
        s1, t1 = steps()
        snapshot = gpus(base_url)
    return snapshot, (s1 - s0) / (t1 - t0)


def test_a_low_power_limit_throttles_clocks_and_slows_the_engine():
    # Time scale 5: steps of ~20 ms, so the engine, not a loaded client, sets the step rate.
    slow = [a if a != "20" else "5" for a in ARGS]
    with start_sim(slow) as sim:
        _, free_rate = engine_steps_per_second(sim.base_url)
    with start_sim(slow + ["--sim-gpu-power-limit-w", "300"]) as sim:
        capped, capped_rate = engine_steps_per_second(sim.base_url)
    for g in capped:
        assert g["clock_event_bits"] & BIT_SW_POWER_CAP
        assert g["power_w"] <= 300 and g["sm_clock_mhz"] < 0.9 * SM_CLOCK_MAX_MHZ
    # Steps wait for the slowest GPU's clock: the engine steps slower by about the clock ratio. The
    # emulator's own per-step host time does not scale with the clock, and on a loaded 2-core box it
    # dilutes the ratio (0.85 seen for a 0.73 clock ratio beside three other test workers): the
    # bound allows that much, and "clearly slower" still has to hold.
    ratio = min(g["sm_clock_mhz"] for g in capped) / SM_CLOCK_MAX_MHZ
    assert capped_rate < 0.95 * free_rate and capped_rate / free_rate < ratio + 0.15, (capped_rate, free_rate, ratio)


def test_foreign_process_and_lost_gpu_faults():
    with start_sim(ARGS + ["--sim-gpu-foreign-process", "1", "--sim-gpu-lost", "0"]) as sim:
        info = loopback.get(sim.base_url + "/server_info", timeout=10).json()["sim"]
        deadline = time.monotonic() + 10
        while info["foreign_gpu_pid"] is None and time.monotonic() < deadline:
            time.sleep(0.1)
            info = loopback.get(sim.base_url + "/server_info", timeout=10).json()["sim"]
        now = gpus(sim.base_url)
        foreign = info["foreign_gpu_pid"]
        assert foreign and psutil.pid_exists(foreign)
        # outside the server's tree: not a descendant of the emulator
        assert foreign not in {p.pid for p in psutil.Process(sim.proc.pid).children(recursive=True)}
        assert now[0]["lost"] is True and now[0].get("util_gpu_pct") is None and now[0]["processes"] is None
        assert foreign in [p["pid"] for p in now[1]["processes"]] and info["gpus_lost"] == [0]
        foreign_proc = psutil.Process(foreign)
    # the foreign process goes when the emulator does (its pipe closes)
    deadline = time.monotonic() + 10
    while foreign_proc.is_running() and foreign_proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not foreign_proc.is_running() or foreign_proc.status() == psutil.STATUS_ZOMBIE
