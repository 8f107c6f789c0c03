"""How much load the native client sustains on one core, next to sglang.bench_serving, same server.

Runs the emulator with `--sim-zero-delay` (no modelled time: steps as fast as its process goes),
pinned to the other cores, and each client pinned to CPU 0 with os.sched_setaffinity:
1. streamed tokens/s: many long streams (the emulator's own speed may be the limit: its CPU
   use is reported so the reader can tell);
2. requests/s: one-token requests;
3. client-added latency at concurrency 1024 and about 1,600 tok/s (the seed's flashinfer_cutlass
   operating point, real time scale): the client's event-loop lag (how late a ready chunk is
   read and stamped), and mean/p99 TTFT from both clients at the same load.
Writes benches/results/client_headroom-<date>.json and .txt.

    .venv/bin/python benches/client_headroom.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moe_tui.bench.sglang_adapter import bench_serving_args, client_env, locate_client, parse_bench_serving_jsonl  # noqa: E402
from moe_tui.sim.launch import start_sim  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402

CLIENT_CPU = 0


def _pin() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})


def run_ours(spec: BenchmarkSpec, url: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(spec.to_json())
        t = time.time()
        proc = subprocess.run([sys.executable, "-m", "moe_tui", "bench", "--events", "jsonl", "--spec-file",
                               str(spec_file), "--base-url", url], capture_output=True, text=True,
                              preexec_fn=_pin, timeout=900)
        wall = time.time() - t
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "status": last["status"], "summary": last["summary"], "selfcheck": last["selfcheck"]}


def run_theirs(client, spec: BenchmarkSpec, url: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "o.jsonl"
        argv = client.argv_prefix + bench_serving_args(spec.replace(client="sglang.bench_serving"), base_url=url,
                                                       output_file=out) + ["--tokenize-prompt"]
        t = time.time()
        proc = subprocess.run(argv, env=client_env(client=client), capture_output=True, text=True,
                              preexec_fn=_pin, timeout=900)
        wall = time.time() - t
        if proc.returncode != 0:
            return {"error": proc.stdout[-2000:] + proc.stderr[-2000:]}
        return {"wall_s": wall, "summary": parse_bench_serving_jsonl(out)[-1]}


def _pick(summary: dict) -> dict:
    keys = ("completed", "duration", "output_throughput", "request_throughput", "mean_ttft_ms",
            "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms")
    return {k: summary.get(k) for k in keys}


def scenario(name: str, sim_args: list[str], spec: BenchmarkSpec, client) -> dict:
    other = sorted(set(range(os.cpu_count() or 1)) - {CLIENT_CPU}) or [CLIENT_CPU]
    with start_sim(sim_args + ["--max-running-requests", "4096"]) as sim:
        os.sched_setaffinity(sim.proc.pid, set(other))
        sim_ps = psutil.Process(sim.proc.pid)
        c0 = sim_ps.cpu_times()
        ours = run_ours(spec, sim.base_url)
        c1 = sim_ps.cpu_times()
        theirs = run_theirs(client, spec, sim.base_url) if client else {"error": "no sglang client env"}
    row = {
        "scenario": name, "spec": spec.describe(), "sim_args": sim_args,
        "moe_tui": {**_pick(ours["summary"]), "status": ours["status"],
                    "loop_lag_p50_ms": ours["selfcheck"].get("loop_lag_p50_ms"),
                    "loop_lag_p99_ms": ours["selfcheck"].get("loop_lag_p99_ms"),
                    "client_cpu_fraction": ours["selfcheck"].get("client_cpu_fraction"),
                    "client_bound": ours["selfcheck"].get("client_bound"),
                    "sim_cpu_fraction_during_run": (c1.user + c1.system - c0.user - c0.system) / ours["wall_s"]},
        "bench_serving": _pick(theirs["summary"]) if "summary" in theirs else theirs,
    }
    print(json.dumps(row, indent=1), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    a = ap.parse_args()
    q = 4 if a.quick else 1
    client = locate_client()
    rows = [
        scenario("streamed tokens/s (zero-delay emulator)", ["--sim-zero-delay"],
                 BenchmarkSpec(input_len=16, output_len=1024, num_prompts=256 // q, max_concurrency=128,
                               warmup_requests=1), client),
        scenario("requests/s (1 output token, zero-delay emulator)", ["--sim-zero-delay"],
                 BenchmarkSpec(input_len=16, output_len=1, num_prompts=4000 // q, max_concurrency=64,
                               warmup_requests=1), client),
        scenario("client-added latency at concurrency 1024, ~1,600 tok/s (flashinfer_cutlass model)",
                 ["--moe-runner-backend", "flashinfer_cutlass"],
                 BenchmarkSpec(input_len=16, output_len=24 // (2 if a.quick else 1), num_prompts=2048 // q,
                               max_concurrency=1024, warmup_requests=1), client),
    ]
    info = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "client_cpu": CLIENT_CPU,
            "python": sys.version.split()[0], "quick": a.quick,
            "bench_serving": None if client is None else client.version, "rows": rows}
    out = ROOT / "benches" / "results" / f"client_headroom-{info['date']}.json"
    out.write_text(json.dumps(info, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
