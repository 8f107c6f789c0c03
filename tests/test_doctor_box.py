"""`moe-tui doctor --box`: each check's ok/warn/fail with its fix, from stand-in probes (NVML
samples, SGLang versions, disk usage) and real ones (a held port, this box's missing driver)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from moe_tui.commands.doctor_box import FAIL, OK, WARN, disk_checks, nvml_checks, port_checks, recorder_checks, sglang_checks
from moe_tui.profiles import profile_from_dict
from moe_tui.telemetry.data import GpuSample, TelemetrySnapshot

REPO = Path(__file__).resolve().parent.parent


def _profile(name: str = "p", *, gpus=(0, 1, 2, 3), port: int = 30000, extra=()):
    return profile_from_dict({"name": name, "engine": "sglang", "model_path": "/models/x", "moe_runner_backend": "triton",
                              "tp_size": len(gpus), "gpus": list(gpus), "port": port, "extra_args": list(extra)})


def _snap(n: int, bits: int = 0) -> TelemetrySnapshot:
    gpus = tuple(GpuSample(index=i, t=0.0, wall=0.0, name="NVIDIA H200", clock_event_bits=bits if i == 1 else 0)
                 for i in range(n))
    return TelemetrySnapshot(t=0.0, wall=0.0, gpus=gpus, driver_version="580.65", cuda_driver_version="13.0")


def by_name(checks):
    return {c.name: c for c in checks}


def test_nvml_gpus_and_throttle():
    c = by_name(nvml_checks(lambda: _snap(8), [_profile()]))
    assert c["nvml"].status == OK and "driver 580.65" in c["nvml"].detail and "one sample in" in c["nvml"].detail
    assert c["gpus"].status == OK and c["throttle"].status == OK
    c = by_name(nvml_checks(lambda: _snap(2, bits=0x040), [_profile()]))  # hw_thermal on GPU 1
    assert c["gpus"].status == FAIL and "[0, 1, 2, 3]" in c["gpus"].detail and "'gpus'" in c["gpus"].fix
    assert c["throttle"].status == WARN and "GPU 1: hw_thermal" in c["throttle"].detail
    off = TelemetrySnapshot(t=0.0, wall=0.0, available=False, reason="no NVIDIA driver: NVML Shared Library Not Found")
    c = by_name(nvml_checks(lambda: off, [_profile()]))
    assert c["nvml"].status == FAIL and "driver" in c["nvml"].fix and c["gpus"].status == FAIL


def test_sglang_versions():
    p = [_profile()]
    ok = sglang_checks(p, lambda py: {"sglang": "0.5.23", "flashinfer-python": "0.7.2", "import": None})
    assert [c.status for c in ok] == [OK] and "FlashInfer 0.7.2" in ok[0].detail
    old = sglang_checks(p, lambda py: {"sglang": "0.5.20", "flashinfer-python": "0.6.0", "import": None})
    assert old[0].status == WARN and "sglang==0.5.23" in old[0].fix
    missing = sglang_checks(p, lambda py: {"sglang": None, "flashinfer-python": None, "import": "ModuleNotFoundError"})
    assert missing[0].status == FAIL and "pip install" in missing[0].fix
    broken = sglang_checks(p, lambda py: {"sglang": "0.5.23", "import": "ImportError: libcuda.so.1"})
    assert broken[0].status == FAIL and "libcuda" in broken[0].detail


def test_disk_recorder_and_a_held_port(tmp_path):
    gib = 2**30
    real = disk_checks({"a": tmp_path / "x" / "y"})  # the real disk, measured at the nearest existing parent
    assert len(real) == 1 and "GiB free" in real[0].detail
    sizes = iter([100 * gib, 5 * gib, gib // 2])
    assert [c.status for c in disk_checks({"a": tmp_path, "b": tmp_path, "c": tmp_path},
                                          usage=lambda _p: next(sizes))] == [OK, WARN, FAIL]
    rec = by_name(recorder_checks([_profile("a"), _profile("b", extra=["--enable-eplb"])]))
    assert rec["recorder a"].status == WARN and "a-expert-stat" in rec["recorder a"].fix
    assert rec["recorder b"].status == OK
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        held = port_checks([_profile(port=port)])[0]
    assert held.status == FAIL and held.name == f"port {port}" and "another port" in held.fix


@pytest.mark.integration
def test_doctor_box_on_this_box_says_what_is_missing(tmp_path):
    env = dict(os.environ, MOE_TUI_HOME=str(tmp_path / "home"))
    proc = subprocess.run([sys.executable, "-m", "moe_tui", "doctor", "--box", "--json", "--profiles-dir",
                           str(REPO / "server_profiles")], capture_output=True, text=True, env=env, timeout=300)
    out = json.loads(proc.stdout)
    checks = {c["name"]: c for c in out["checks"]}
    assert {"nvml", "gpus", "sglang", "throttle", "data dir"} <= set(checks)
    assert any(n.startswith("port ") for n in checks) and any(n.startswith("recorder ") for n in checks)
    assert all(c["fix"] for c in out["checks"] if c["status"] != OK)
    if checks["nvml"]["status"] == FAIL:  # a box without the driver (the CI box): says so, exits 1
        assert proc.returncode == 1 and not out["ok"] and "driver" in checks["nvml"]["fix"]
    text = subprocess.run([sys.executable, "-m", "moe_tui", "doctor", "--json"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert text.returncode == 2 and "--json goes with --box" in text.stdout
