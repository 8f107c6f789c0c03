"""GPU faults of the simulated GPUs reach the stored run flags end to end: `moe-tui queue add` +
`moe-tui run` as real subprocesses (the runner samples the emulators' /sim/gpus, there being no
NVIDIA driver here), one profile per fault, and a clean one that must carry none of them."""

from __future__ import annotations

import json

import pytest

from moe_tui.judgement import SUSPECT_FLAGS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Runs of ~3 s at time scale 10: several 1 Hz telemetry samples land while the GPUs are busy.
SPEC = ["--num-prompts", "16", "--input-len", "32", "--output-len", "128"]
GPU_FLAGS = {"throttled", "clock_drop", "foreign_gpu_process", "gpu_lost"}


def test_power_cap_foreign_process_and_lost_gpu_flag_their_runs(env):
    profiles = {
        env.profile("sim-clean", "flashinfer_cutlass", time_scale=10): set(),
        env.profile("sim-capped", "flashinfer_cutlass", time_scale=10, gpu_power_limit_w=250):
            {"throttled", "clock_drop"},
        env.profile("sim-foreign", "flashinfer_cutlass", time_scale=10, gpu_foreign_process=3):
            {"foreign_gpu_process"},
        env.profile("sim-lost", "flashinfer_cutlass", time_scale=10, gpu_lost=5): {"gpu_lost"},
    }
    added = env.run("queue", "add", "--no-control", "--profiles", ",".join(profiles), "--concurrency", "8", "--repeats", "1",
                    "--profiles-dir", str(env.profiles), *SPEC)
    assert added.returncode == 0, added.stdout
    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=240)
    assert done.returncode == 0, done.stdout
    rows = env.query("SELECT profile_name, status, flags_json, telemetry_json FROM runs")
    assert len(rows) == 4
    for name, status, flags_json, telemetry_json in rows:
        flags = set(json.loads(flags_json))
        telemetry = json.loads(telemetry_json)
        assert status == "complete", (name, status)
        assert telemetry["available"] and telemetry["simulated"], (name, telemetry.get("reason"))
        assert flags & GPU_FLAGS == profiles[name], (name, flags, telemetry["overall"])
        assert profiles[name] <= SUSPECT_FLAGS
    by_name = {r[0]: json.loads(r[3]) for r in rows}
    assert by_name["sim-capped"]["overall"]["suspect_clock_events"] == ["sw_power_cap"]
    assert by_name["sim-lost"]["overall"]["gpus_lost"] == [5]
    assert [p["gpu"] for p in by_name["sim-foreign"]["foreign_processes"]] == [3]
    # the clean server's own schedulers held every GPU and were never called foreign
    assert by_name["sim-clean"]["foreign_processes"] == []
