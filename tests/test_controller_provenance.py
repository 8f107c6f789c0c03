"""Provenance and run flags (pure): every source of doubt turns into a flag, and the provenance
dict names spec, profile, resolved server args, client, host and GPU facts."""

from __future__ import annotations

import json

import pytest

from moe_tui.provenance import RUN_FLAGS, build_provenance, run_flags
from moe_tui.spec import BenchmarkSpec


def _telemetry(**overall):
    base = {"available": True, "driver_version": "580.1", "cuda_driver_version": "13.0",
            "gpus": {"0": {"name": "NVIDIA RTX PRO 6000", "uuid": "GPU-1"}},
            "overall": {"suspect_clock_events": [], "sm_clock_drop_pct": 0.0, **overall},
            "foreign_processes": []}
    return base


def test_clean_run_has_no_flags():
    assert run_flags(completed=10, expected=10, errors=0, telemetry=_telemetry()) == []


def test_every_source_of_doubt_is_flagged():
    flags = run_flags(
        backend_mismatch=True, simulated=True, bench_flags=["client-bound"], completed=8, expected=10,
        errors=2, status="incomplete", warmup_pass=False,
        telemetry={**_telemetry(suspect_clock_events=["hw_thermal_slowdown"], sm_clock_drop_pct=25.0),
                   "foreign_processes": [{"gpu": 0, "pid": 1}]},
    )
    assert flags == sorted(["backend_mismatch", "simulated", "client_bound", "incomplete", "request_errors",
                            "no_warmup_pass", "throttled", "clock_drop", "foreign_gpu_process"])
    assert set(flags) <= set(RUN_FLAGS)


def test_missing_telemetry_is_not_a_flag():
    assert run_flags(completed=1, expected=1, telemetry={"available": False, "gpus": {}, "overall": {}}) == []


# host_facts asks `platform` for the processor, which runs `uname -p` the first time in a process:
# a process start, so this test belongs to the integration tier (it passed in the unit tier only
# when an earlier test on the same worker had made that call).
@pytest.mark.integration
def test_provenance_names_everything():
    spec = BenchmarkSpec(max_concurrency=10, num_prompts=50)
    profile = {"name": "cutedsl", "engine": "sglang", "moe_runner_backend": "flashinfer_cutedsl"}
    server = {"start_id": 3, "pid": 99, "base_url": "http://127.0.0.1:30000", "resolved_backend": "flashinfer_cutlass",
              "backend_mismatch": True, "sglang_version": "0.5.23",
              "server_info": {"moe_runner_backend": "flashinfer_cutlass", "tp_size": 8}}
    prov = build_provenance(spec=spec, profile=profile, server=server, started_at=1.0, finished_at=2.0,
                            telemetry=_telemetry())
    json.dumps(prov)
    assert prov["fingerprint"] == spec.fingerprint and prov["spec"]["max_concurrency"] == 10
    assert prov["simulated"] is False
    assert prov["server"]["requested_backend"] == "flashinfer_cutedsl"
    assert prov["server"]["resolved_backend"] == "flashinfer_cutlass" and prov["server"]["backend_mismatch"]
    assert prov["server"]["resolved_args"]["tp_size"] == 8 and prov["server"]["sglang_version"] == "0.5.23"
    assert prov["gpu"]["gpu_names"] == {"0": "NVIDIA RTX PRO 6000"} and prov["gpu"]["driver_version"] == "580.1"
    assert prov["client"]["name"] == "moe-tui" and prov["client"]["version"]
    assert prov["host"]["hostname"] and prov["host"]["python_version"] and prov["host"]["moe_tui_version"]
    sim = build_provenance(spec=spec, profile={"engine": "sim"}, server=None)
    assert sim["simulated"] is True and sim["gpu"]["available"] is False
