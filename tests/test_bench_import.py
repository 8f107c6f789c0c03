"""`moe-tui import FILE`: bench_serving JSONL lines become runs; a bad line stores nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from moe_tui.store.db import Store

pytestmark = pytest.mark.integration  # starts real processes

RECORD = {
    "backend": "sglang", "dataset_name": "random-ids", "request_rate": float("inf"), "max_concurrency": 16,
    "random_input_len": 1024, "random_output_len": 1024, "random_range_ratio": 1.0,
    "server_info": {"version": "0.5.23", "moe_runner_backend": "flashinfer_cutlass"},
    "duration": 100.0, "completed": 64, "total_input_tokens": 65536, "total_output_tokens": 65536,
    "request_throughput": 0.64, "input_throughput": 655.36, "output_throughput": 655.36,
    "total_throughput": 1310.72, "mean_ttft_ms": 300.0, "mean_tpot_ms": 24.0, "mean_itl_ms": 24.0,
    "mean_e2e_latency_ms": 24852.0, "concurrency": 15.9, "max_output_tokens_per_s": 700.0,
    "max_concurrent_requests": 16,
}


def _import(path, home, *extra):
    env = {"MOE_TUI_HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "moe_tui", "import", str(path), *extra],
                          capture_output=True, text=True, env=env, timeout=60)


def test_import_two_records(tmp_path):
    f = tmp_path / "bs.jsonl"
    second = dict(RECORD, max_concurrency=64, output_throughput=1603.0)
    f.write_text(json.dumps(RECORD) + "\n\n" + json.dumps(second) + "\n")
    proc = _import(f, tmp_path / "home")
    assert proc.returncode == 0, proc.stderr
    with Store(tmp_path / "home" / "data" / "moe-tui.sqlite3") as store:
        runs = store.runs()
    assert len(runs) == 2
    a, b = runs
    assert a.profile_name == "flashinfer_cutlass" and a.client == "sglang.bench_serving unknown"
    # the server's version is the server's, never the client's
    assert a.provenance["server"]["sglang_version"] == "0.5.23" and a.provenance["client"]["version"] == "unknown"
    assert a.spec["client"] == "sglang.bench_serving" and a.spec["max_concurrency"] == 16
    assert a.spec["num_prompts"] == 64 and a.spec["request_rate"] == "inf"
    assert a.summary["output_throughput"] == 655.36 and b.summary["output_throughput"] == 1603.0
    assert a.fingerprint != b.fingerprint
    assert "seed" in a.provenance["unknown_fields"] and a.provenance["line"] == 1 and b.provenance["line"] == 3
    assert a.flags == [] and a.status == "complete"


def test_bad_line_names_file_and_line_and_stores_nothing(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(RECORD) + "\n" + "{not json\n")
    proc = _import(f, tmp_path / "home", "--profile", "x")
    assert proc.returncode == 1
    assert f"{f}:2" in proc.stderr and "nothing imported" in proc.stderr
    with Store(tmp_path / "home" / "data" / "moe-tui.sqlite3") as store:
        assert store.runs() == []


def test_record_with_bad_spec_value_names_the_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(dict(RECORD, random_range_ratio=3.0)) + "\n")
    proc = _import(f, tmp_path / "home")
    assert proc.returncode == 1
    assert f"{f}:1" in proc.stderr and "range_ratio" in proc.stderr
