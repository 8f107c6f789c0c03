"""The emulator is consistent with the set-up it claims (8 x RTX PRO 6000 Blackwell, GLM-5-NVFP4)
as SGLang 0.5.23 would resolve it: the GPU's NVML name and memory, the dsa attention backend, an
fp8 KV cache on Blackwell (bfloat16 on an H200), an H200 preset that refuses NVFP4 MoE runners as
modelopt_quant.py does, the real metric labels, and the roofline's default KV dtype."""

from __future__ import annotations

import pytest

from moe_tui.roofline.inputs import roofline_setup
from moe_tui.sim.launch import FAST_START, SimProcess, start_sim
from tests.support import loopback

pytestmark = pytest.mark.integration

PROFILE = {"name": "p", "engine": "sim", "model_path": "GLM-5-NVFP4", "tp_size": 8,
           "quantization": "modelopt_fp4", "gpus": list(range(8)), "extra_args": []}


def test_default_is_the_blackwell_box_with_glm5s_resolved_attention():
    with start_sim(["--tp-size", "2", "--quantization", "modelopt_fp4", "--enable-metrics", *FAST_START]) as sim:
        info = loopback.get(sim.base_url + "/server_info", timeout=10).json()
        gpus = loopback.get(sim.base_url + "/sim/gpus", timeout=10).json()["gpus"]
        metrics = loopback.get(sim.base_url + "/metrics", timeout=10).text
        lines = list(sim.lines)
    assert {g["name"] for g in gpus} == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert {g["mem_total_bytes"] for g in gpus} == {97_887 * 2**20} and {g["power_limit_w"] for g in gpus} == {600.0}
    assert info["attention_backend"] == "dsa" and info["page_size"] == 64
    assert info["kv_cache_dtype"] == "fp8_e4m3" and info["moe_runner_backend"] == "flashinfer_cutlass"
    assert any("Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM12 device." in ln for ln in lines)
    assert any("Use dsa attention backend for DeepSeek with DSA." in ln for ln in lines)
    running = next(ln for ln in metrics.splitlines() if ln.startswith("sglang:num_running_reqs{"))
    assert 'moe_ep_rank="0"' in running and 'tp_rank="0"' in running
    ttft = next(ln for ln in metrics.splitlines() if ln.startswith("sglang:time_to_first_token_seconds_count{"))
    assert "is_streaming=" in ttft


def test_h200_preset_refuses_an_nvfp4_moe_runner_as_0_5_23_does():
    with SimProcess(["--sim-gpu", "h200", "--quantization", "modelopt_fp4",
                     "--moe-runner-backend", "flashinfer_cutlass"]) as sim:
        code = sim.wait_exit(timeout=30)
        lines = list(sim.lines)
    assert code == -9  # SGLang's launcher kills its own tree, itself included (SIGKILL)
    assert any("Current platform does not support NVFP4 quantization with the selected MoE backend" in ln
               for ln in lines)
    assert any("Received sigquit from a child process" in ln for ln in lines)


def test_h200_preset_runs_marlin_with_a_bf16_kv_cache():
    with start_sim(["--sim-gpu", "h200", "--quantization", "modelopt_fp4", "--moe-runner-backend", "marlin",
                    *FAST_START]) as sim:
        info = loopback.get(sim.base_url + "/server_info", timeout=10).json()
        gpus = loopback.get(sim.base_url + "/sim/gpus", timeout=10).json()["gpus"]
    assert {g["name"] for g in gpus} == {"NVIDIA H200"}
    assert info["kv_cache_dtype"] == "bfloat16" and info["moe_runner_backend"] == "marlin"


@pytest.mark.parametrize(("gpu", "kv"), [("NVIDIA RTX PRO 6000 Blackwell Server Edition", "fp8_e4m3"),
                                         ("NVIDIA H200", "bf16")])
def test_roofline_assumes_sglangs_default_kv_dtype_before_a_run_recorded_one(gpu, kv):
    setup = roofline_setup(PROFILE, context=1024, nvml_names=[gpu] * 8)
    assert setup.kv_cache_dtype == kv
    # a recorded run's resolved dtype still wins
    assert roofline_setup(PROFILE, context=1024, nvml_names=[gpu] * 8,
                          resolved_args={"kv_cache_dtype": "bf16"}).kv_cache_dtype == "bf16"
