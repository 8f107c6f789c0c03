"""The issue-11 attacks, reproduced through the real CLI (`moe-tui import`, `compare`, `queue add`).

Each test stores runs through the command a user would run and asserts the state the grid now
gives in `moe-tui compare --format json` (the machine contract) or the text a user reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store

pytestmark = pytest.mark.integration  # starts real processes

ROOT = Path(__file__).resolve().parents[1]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MOE_TUI_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def two_profiles(tmp_path: Path) -> Path:
    """A profiles folder with two bare emulator profiles, a (cutlass) and b (cutedsl): enough to plan a queue."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name, backend in (("a", "flashinfer_cutlass"), ("b", "flashinfer_cutedsl")):
        (profiles / f"{name}.toml").write_text(f'name = "{name}"\nengine = "sim"\nmodel_path = "m"\n'
                                               f'moe_runner_backend = "{backend}"\n')
    return profiles


def record(conc: int, tput: float, backend: str, pid: int | None = None, **server: object) -> dict:
    """A bench_serving record; `pid` names the server start (none: the record carries no start identity)."""
    info = {"version": "0.5.23", "moe_runner_backend": backend, "model_path": "GLM-5", "tp_size": 8,
            "max_running_requests": 1024, "port": 30000, "random_seed": 7} | server
    if pid is not None:
        info["pid"] = pid
    return {"backend": "sglang", "dataset_name": "random-ids", "request_rate": float("inf"), "max_concurrency": conc,
            "random_input_len": 1024, "random_output_len": 1024, "random_range_ratio": 1.0, "server_info": info,
            "duration": 100.0, "completed": 64, "total_input_tokens": 65536, "total_output_tokens": 65536,
            "request_throughput": 0.64, "input_throughput": 655.36, "output_throughput": tput,
            "total_throughput": 1310.72, "mean_ttft_ms": 300.0, "mean_tpot_ms": 24.0, "mean_itl_ms": 24.0,
            "mean_e2e_latency_ms": 24852.0}


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


ASSUME = "seed=1,ignore_eos=true,warmup_requests=1,temperature=0,flush_cache=false"


def grid_json(home: Path, *args: str) -> dict:
    res = _cli(home, "compare", *args, "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def cell(grid: dict, conc: int, metric: str = "output_throughput") -> dict:
    return next(c for c in grid["cells"] if c["concurrency"] == conc and c["metric"] == metric)


def test_json_contract_keys_and_vocabulary(tmp_path):
    home = tmp_path / "h"
    f = write(tmp_path / "a.jsonl", [record(64, v, "a", pid=100 + i) for i, v in enumerate((200.0, 201.0, 199.0))])
    g = write(tmp_path / "b.jsonl", [record(64, v, "b", pid=200 + i) for i, v in enumerate((150.0, 151.0, 149.0))])
    for path in (f, g):
        assert _cli(home, "import", str(path), "--assume", ASSUME).returncode == 0
    grid = grid_json(home, "a", "b")
    # The two keys, plus the roofline % and the correctness gate (issue 15) under "extras".
    assert set(grid) == {"control", "cells", "extras", "sim_clock"} and grid["control"]["state"] == "absent"
    assert grid["sim_clock"] is None  # real (imported) runs: no emulator clock
    assert set(grid["extras"]) == {"gate", "roofline"} and set(grid["extras"]["roofline"]) == {"baseline", "candidate"}
    c = cell(grid, 64)
    assert set(c) == {"concurrency", "metric", "verdict", "n_baseline", "n_candidate", "delta_pct", "ci_pct",
                      "reasons", "starts_baseline", "starts_candidate", "baseline_mean", "candidate_mean",
                      "ci_confidence", "uncontrolled", "control_relative_pct", "control_relative_ci_pct",
                      "control_starts", "provisional", "provisional_reason", "ci_too_wide", "sim_time_scale"}
    assert c["ci_too_wide"] is False and c["sim_time_scale"] is None
    assert c["provisional"] is False and c["provisional_reason"] is None  # nothing queued for the cell
    # No control: no verdict, no delta; the means stay.
    assert c["verdict"] == "uncontrolled" and c["delta_pct"] is None and c["ci_pct"] is None
    assert c["baseline_mean"] == 200.0 and c["starts_baseline"] == 3 and "control absent" in c["reasons"][0]
    c = cell(grid_json(home, "a", "b", "--accept-uncontrolled"), 64)
    assert c["verdict"] == "worse" and c["n_baseline"] == 3 and len(c["ci_pct"]) == 2
    assert c["uncontrolled"].startswith("control absent") and c["ci_confidence"] == 0.95  # one cell in its family


def test_server_args_difference_confounds_and_is_named(tmp_path):
    """max_running_requests 1024 vs 8 in server_info got "-30.0% worse" before, with no warning."""
    home = tmp_path / "h"
    assume = ["--assume", "seed=1,ignore_eos=true,warmup_requests=1,temperature=0,flush_cache=true"]
    write(tmp_path / "a.jsonl", [record(64, v, "a", pid=i) for i, v in enumerate((200.0, 201.0, 199.0))])
    write(tmp_path / "b.jsonl", [record(64, v, "b", pid=10 + i, max_running_requests=8, quantization="fp8",
                                        port=31000, random_seed=99) for i, v in enumerate((140.0, 141.0, 139.0))])
    for name in ("a", "b"):
        assert _cli(home, "import", str(tmp_path / f"{name}.jsonl"), *assume).returncode == 0
    c = cell(grid_json(home, "a", "b"), 64)
    assert c["verdict"] == "confounded" and c["delta_pct"] is None
    joined = " ".join(c["reasons"])
    assert "max_running_requests: 1024 vs 8" in joined and "quantization: (absent) vs fp8" in joined
    assert "port" not in joined and "random_seed" not in joined  # identity and per-start values do not count
    text = _cli(home, "compare", "a", "b").stdout
    assert "confounded" in text and "max_running_requests: 1024 vs 8" in text
    # Declaring it varied makes it the comparison itself (quantization still confounds)
    c = cell(grid_json(home, "a", "b", "--vary", "moe_runner_backend,max_running_requests,quantization",
                       "--accept-uncontrolled"), 64)
    assert c["verdict"] == "worse"


def test_bench_serving_fields_unknown_until_assumed(tmp_path):
    home = tmp_path / "h"
    write(tmp_path / "a.jsonl", [record(64, v, "a") for v in (200.0, 201.0, 199.0)])
    write(tmp_path / "b.jsonl", [record(64, v, "b") for v in (150.0, 151.0, 149.0)])
    res = _cli(home, "import", str(tmp_path / "a.jsonl"))
    assert "spec fields unknown: seed" in res.stdout
    _cli(home, "import", str(tmp_path / "b.jsonl"))
    c = cell(grid_json(home, "a", "b"), 64)
    assert c["verdict"] == "unverified" and any("seed" in r and "--assume" in r for r in c["reasons"])


def test_reimport_is_not_stored_twice(tmp_path):
    """Importing the same file twice doubled n and narrowed the interval."""
    home = tmp_path / "h"
    f = write(tmp_path / "a.jsonl", [record(64, v, "a") for v in (200.0, 201.0)])
    assert _cli(home, "import", str(f)).returncode == 0
    res = _cli(home, "import", str(f))
    assert res.returncode == 0 and "already imported (run 1, same content)" in res.stdout
    assert "nothing new imported" in res.stdout
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        assert len(store.runs()) == 2


def test_moe_tui_bench_record_keeps_its_spec_and_fingerprint(tmp_path):
    """seed 7 became 42, ignore_eos false became true, the client became bench_serving."""
    home = tmp_path / "h"
    spec = BenchmarkSpec(client="moe-tui", client_version="0.1.0", seed=7, ignore_eos=False, max_concurrency=4,
                         num_prompts=16, flush_cache=True)
    rec = record(4, 100.0, "a") | {"spec": spec.canonical_dict(), "spec_fingerprint": spec.fingerprint,
                                   "client": "moe-tui 0.1.0", "flags": ["client-bound"], "status": "complete"}
    rec["total_output_tokens"] = 64 * 1024
    f = write(tmp_path / "m.jsonl", [rec])
    res = _cli(home, "import", str(f))
    assert res.returncode == 0, res.stderr
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        (run,) = store.runs()
    assert run.fingerprint == spec.fingerprint and run.spec["seed"] == 7 and run.spec["ignore_eos"] is False
    assert run.spec["client"] == "moe-tui" and run.client == "moe-tui 0.1.0"
    assert run.provenance["unknown_fields"] == [] and run.flags == ["client_bound"]
    assert run.provenance["server"]["sglang_version"] == "0.5.23"
    tampered = dict(rec, spec=dict(spec.canonical_dict(), seed=8))
    res = _cli(home, "import", str(write(tmp_path / "t.jsonl", [tampered])))
    assert res.returncode == 1 and "spec_fingerprint" in res.stderr and "nothing imported" in res.stderr


def test_output_tokens_checked_against_completed_times_output_len(tmp_path):
    home = tmp_path / "h"
    short = record(64, 200.0, "a") | {"total_output_tokens": 30000}
    res = _cli(home, "import", str(write(tmp_path / "s.jsonl", [short])))
    assert res.returncode == 0 and "total_output_tokens 30000 but completed 64 x output_len 1024" in res.stdout
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        assert store.runs()[0].flags == ["output_tokens_mismatch"]


def test_queue_add_interleaves_and_flushes_by_default(tmp_path):
    home = tmp_path / "h"
    profiles = two_profiles(tmp_path)
    res = _cli(home, "queue", "add", "--profiles", "a,b", "--concurrency", "2", "--repeats", "2",
               "--profiles-dir", str(profiles))
    assert res.returncode == 0, res.stderr
    res2 = _cli(home, "queue", "add", "--profiles", "a", "--concurrency", "2", "--no-flush-cache",
                "--profiles-dir", str(profiles))
    assert res2.returncode == 0, res2.stderr
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        rows = store.query("SELECT profile_name, spec_json FROM queue_items ORDER BY position, id")
    specs = [json.loads(r["spec_json"]) for r in rows]
    assert [r["profile_name"] for r in rows[:4]] == ["a", "b", "b", "a"]  # ABBA, counterbalanced
    assert len(rows) == 4 + 1  # no control-only starts: concurrency 2 is in every sweep
    assert all(s["flush_cache"] for s in specs[:-1]) and specs[-1]["flush_cache"] is False
