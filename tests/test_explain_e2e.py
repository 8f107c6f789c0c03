"""`moe-tui explain` end to end on real emulator servers: a measured cell, its profiled runs queued
and worked by `moe-tui run`, the traces and expert dumps kept owner-only with the runs, and the
breakdown: an injected MoE slowdown on the candidate lands in MoE GEMM within 5% of the injected
amount, and the profiled runs never enter the grid's cell."""

from __future__ import annotations

import json
import stat

import pytest
from runner_support import Env, wait_gone

from tests.support.schemas import validate_export

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIM = {"time_scale": 25, "load_seconds": 0.1, "graph_seconds": 0.05, "warmup_seconds": 0.05, "exact": True}
WORKLOAD = ["--input-len", "128", "--output-len", "160", "--num-prompts", "8", "--prompts-per-concurrency", "1"]
INJECTED_MS = 20.0
API_KEY = "k-explain-e2e"  # every admin call (profiler, expert recorder) must carry it


def add_profile(env: Env, name: str, recorder: bool = True, **sim: float) -> str:
    dumps = env.home / f"dumps-{name}"
    dumps.mkdir(parents=True, exist_ok=True)
    extra_args = ["--enable-metrics", *(["--expert-distribution-recorder-mode", "stat",
                                         "--expert-distribution-recorder-buffer-size", "200"] if recorder else [])]
    return env.profile(name, "flashinfer_cutlass", top={"tp_size": 2, "ep_size": 2, "extra_args": extra_args,
                                                         "api_key": API_KEY},
                       env={"SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR": str(dumps)}, **{**SIM, **sim})


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_explain_attributes_an_injected_moe_slowdown(env):
    # the baseline runs without a recorder mode: asking it for expert load would kill a real server
    a = add_profile(env, "sim-a", recorder=False)
    b = add_profile(env, "sim-b", moe_slowdown_ms=INJECTED_MS)
    pdir = ["--profiles-dir", str(env.profiles)]
    # two repeats a side: the grid measures the run-to-run spread explain judges its noise by
    ok(env.run("queue", "add", "--no-control", "--profiles", f"{a},{b}", "--concurrency", "8", "--repeats", "2", *pdir, *WORKLOAD))
    ok(env.run("run", *pdir, timeout=600))
    wait_gone(env)
    grid_before = json.loads(ok(env.run("compare", a, b, "--format", "json")))

    first = ok(env.run("explain", a, b, "-c", "8", "--yes", *pdir))
    assert "queued campaign" in first
    assert [line for line in first.splitlines() if "expert load not recorded" in line] == [
        line for line in first.splitlines() if line.startswith(f"expert load not recorded for {a}:")]
    assert f"{a}-expert-stat" in first
    pending = ok(env.run("explain", a, b, "-c", "8"))
    assert "profiled runs queued" in pending
    ok(env.run("run", *pdir, timeout=600))
    wait_gone(env)
    states = dict(env.query("SELECT state, count(*) FROM queue_items GROUP BY state"))
    assert set(states) == {"done"}, states

    out = json.loads(ok(env.run("explain", a, b, "-c", "8", "--format", "json")))
    validate_export("explain", out)  # the published contract (docs/schemas/explain.schema.json)
    assert out["run_cv"] is not None and out["run_cv"] < 0.01  # --sim-exact starts barely differ
    gemm = next(c for c in out["classes"] if c["class"] == "moe_gemm")
    assert gemm["delta_ms"] == pytest.approx(INJECTED_MS, rel=0.05)
    assert gemm["beyond_noise"] and gemm["share"] > 0.9
    assert [c["class"] for c in out["classes"] if c["beyond_noise"]] == ["moe_gemm"]
    assert set(out["expert_load"]) == {b} and out["expert_load"][b]["experts"] == 256
    assert any(f"{a}-expert-stat" in line for line in out["extras"])
    assert set(out["roofline"]) == {a, b}

    # the profiled runs keep their files owner-only and name them in provenance
    for side, run_id in out["run_ids"].items():
        prov = json.loads(env.query("SELECT provenance_json FROM runs WHERE id = ?", (run_id,))[0][0])
        files = prov["profiled"]["files"]
        assert prov["profiled"]["disarm"] == "disarmed"  # the by-stage profiler left unarmed
        assert prov["profiled"]["expert_record"].startswith("dumped" if side == "candidate" else "not recorded")
        assert any(f.endswith("-DECODE.trace.json.gz") for f in files), (side, prov["profiled"])
        folder = env.data_dir / "traces" / f"run-{run_id}"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        for f in files:
            assert stat.S_IMODE((folder / f).stat().st_mode) == 0o600

    # and never enter the cell
    grid_after = json.loads(ok(env.run("compare", a, b, "--format", "json")))
    assert grid_after["cells"] == grid_before["cells"]

    text = ok(env.run("explain", a, b, "-c", "8", "--plot", str(env.home / "bars.png")))
    assert "MoE GEMM +" in text and "of the gap" in text
    assert (env.home / "bars.png").read_bytes()[:4] == b"\x89PNG"
    exported = ok(env.run("export", a, b, "--dir", str(env.home / "out")))
    for ext in (".md", ".csv", ".json", ".png", ".svg"):
        assert f"{a}-vs-{b}-explain-c8{ext}" in exported
    assert "MoE GEMM" in (env.home / "out" / f"{a}-vs-{b}-explain-c8.md").read_text()
    no_prefill = env.run("explain", a, b, "-c", "8", "--stage", "extend")
    assert no_prefill.returncode == 1 and "kept no EXTEND trace" in no_prefill.stdout

    # with --prefill the first wave's prefill is profiled too and broken down on its own
    ok(env.run("explain", a, b, "-c", "8", "--again", "--prefill", "--yes", *pdir))
    ok(env.run("run", *pdir, timeout=600))
    wait_gone(env)
    prefill = json.loads(ok(env.run("explain", a, b, "-c", "8", "--stage", "extend", "--format", "json")))
    assert prefill["a"]["stage"] == "EXTEND" and prefill["a"]["classes"]["attention"]["ms"] > 0
    decode = json.loads(ok(env.run("explain", a, b, "-c", "8", "--format", "json")))
    assert next(c for c in decode["classes"] if c["class"] == "moe_gemm")["delta_ms"] == pytest.approx(
        INJECTED_MS, rel=0.05)
