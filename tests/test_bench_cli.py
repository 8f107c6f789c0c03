"""`moe-tui bench` end to end (real processes): summary block, JSONL append, event stream, and the
subprocess API the controller calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from moe_tui.bench.engine import native_spec
from moe_tui.bench.process import run_benchmark_subprocess
from moe_tui.sim.launch import start_sim
from moe_tui.spec import BenchmarkSpec

pytestmark = pytest.mark.integration  # starts real processes

FAST = ["--sim-time-scale", "50"]


@pytest.fixture(scope="module")
def sim():
    with start_sim(FAST) as s:
        yield s


def _bench(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_tui", "bench", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_summary_block_and_jsonl_append(sim, tmp_path):
    out = tmp_path / "runs.jsonl"
    args = ["--base-url", sim.base_url, "--backend", "sglang-oai", "--random-input-len", "32",
            "--random-output-len", "8", "--num-prompts", "10", "--max-concurrency", "4",
            "--output-file", str(out)]
    first = _bench(*args)
    assert first.returncode == 0, first.stderr
    for label in ("Serving Benchmark Result", "Backend:                                 sglang-oai",
                  "Successful requests:                     10", "Output token throughput (tok/s):",
                  "Mean TTFT (ms):", "P99 ITL (ms):", "Max ITL (ms):", "Status:                                  complete"):
        assert label in first.stdout
    assert _bench(*args, "--seed", "1").returncode == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    rec = [json.loads(line) for line in lines]
    assert rec[0]["backend"] == "sglang-oai" and rec[0]["completed"] == 10
    assert rec[0]["total_output_tokens"] == 80 and rec[0]["request_rate"] == float("inf")
    assert rec[0]["server_info"]["moe_runner_backend"]
    spec0 = BenchmarkSpec.from_dict(rec[0]["spec"])
    assert spec0.fingerprint == rec[0]["spec_fingerprint"] and spec0.api == "completions"
    assert rec[0]["spec_fingerprint"] != rec[1]["spec_fingerprint"]  # seeds differ
    for name in ("mean_ttft_ms", "p95_tpot_ms", "std_itl_ms", "p99_e2e_latency_ms", "concurrency",
                 "max_output_tokens_per_s", "max_concurrent_requests", "duration"):
        assert isinstance(rec[0][name], (int, float))


def test_events_stream_is_json_lines_ending_in_the_result(sim, tmp_path):
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(BenchmarkSpec(input_len=16, output_len=40, num_prompts=12, max_concurrency=3).to_toml())
    proc = _bench("--base-url", sim.base_url, "--spec-file", str(spec_file), "--num-prompts", "9",
                  "--events", "jsonl")
    assert proc.returncode == 0, proc.stderr
    objs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert objs[-1]["type"] == "BenchResult"
    assert all(o["type"] == "BenchProgress" for o in objs[:-1]) and len(objs) > 2
    result = objs[-1]
    assert result["status"] == "complete" and result["summary"]["completed"] == 9  # flag overrode file
    assert len(result["requests"]) == 9
    assert set(result["requests"][0]) >= {"idx", "ok", "sent_at", "prompt_len", "output_len", "ttft",
                                          "latency", "itl", "finish_reason", "error"}


def test_bad_flag_value_names_the_field(sim):
    proc = _bench("--base-url", sim.base_url, "--random-range-ratio", "1.5")
    assert proc.returncode == 2
    assert "range_ratio" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_bad_stall_timeout_is_refused(sim, value):
    proc = _bench("--base-url", sim.base_url, "--stall-timeout", value)
    assert proc.returncode == 2
    assert f"--stall-timeout must be > 0 seconds, got {float(value)}" in proc.stderr


@pytest.mark.parametrize("value", ["-0.5", "61", "nan"])
def test_bad_warmup_pause_is_refused(sim, value):
    proc = _bench("--base-url", sim.base_url, "--warmup-pause", value)
    assert proc.returncode == 2
    assert f"--warmup-pause must be 0 to 60 seconds, got {float(value)}" in proc.stderr


def test_subprocess_api_passes_both_request_limits_and_the_pause_to_the_child(sim):
    spec = BenchmarkSpec(input_len=16, output_len=4, num_prompts=2, max_concurrency=2)
    result = asyncio.run(run_benchmark_subprocess(spec, sim.base_url, request_timeout=45.0, stall_timeout=7.5,
                                                  warmup_pause=0.02))
    assert result.status == "complete", result.error
    assert result.selfcheck["request_timeout_s"] == 45.0 and result.selfcheck["stall_timeout_s"] == 7.5
    assert result.selfcheck["warmup_pause_s"] == 0.02
    default = asyncio.run(run_benchmark_subprocess(spec, sim.base_url))
    assert default.selfcheck["warmup_pause_s"] == 1.0  # bench_serving's pause


def test_subprocess_api_streams_progress_and_returns_the_result(sim):
    spec = BenchmarkSpec(input_len=16, output_len=60, num_prompts=12, max_concurrency=4)
    seen = []

    async def on_progress(event):
        seen.append(event)

    result = asyncio.run(run_benchmark_subprocess(spec, sim.base_url, on_progress, run_id=7))
    assert result.status == "complete", result.error
    assert result.fingerprint == native_spec(spec).fingerprint != spec.fingerprint
    assert result.spec["client_version"]
    assert result.summary["completed"] == 12 and len(result.requests) == 12
    assert seen and all(e.run_id == 7 for e in seen)
    assert seen[-1].completed == 12


def test_subprocess_api_stop_keeps_partial_results(tmp_path):
    spec = BenchmarkSpec(input_len=16, output_len=200, num_prompts=40, max_concurrency=2)

    async def go():
        stop = asyncio.Event()

        async def on_progress(event):
            if event.phase == "timed" and event.completed >= 2:
                stop.set()

        return await run_benchmark_subprocess(spec, sim_url, on_progress, stop=stop)

    with start_sim(["--sim-time-scale", "20"]) as s:
        sim_url = s.base_url
        result = asyncio.run(go())
    assert result.status == "incomplete"
    assert 2 <= result.summary["completed"] < 40
    assert result.errors_by_kind.get("cancelled", 0) > 0


def test_dead_child_gives_a_failed_result():
    # an "interpreter" that exits 1 at once: no result line ever comes
    result = asyncio.run(run_benchmark_subprocess(BenchmarkSpec(num_prompts=1), "http://127.0.0.1:9",
                                                  python="/bin/false"))
    assert result.status == "failed"
    assert "exited with code 1 without a result" in result.error
