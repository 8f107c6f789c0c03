"""How much load the native client sustains on one core, next to sglang.bench_serving, same server.

Runs the emulator pinned to the other cores and each client pinned to CPU 0 (os.sched_setaffinity),
one client process at a time, alternating moe-tui / bench_serving (A B B A A B ...) for `--repeats`
rounds on one emulator per scenario, so drift and the neighbours' load hit both alike. Reported:
the median over the repetitions of each client, the ratio moe-tui / bench_serving, and the
1-minute load average before each run (the dev box is shared: a load above the core count means
every process got a fraction of a core).

1. streamed tokens/s: long streams against `--sim-zero-delay` (no modelled time: the emulator
   steps as fast as its process goes, so its own speed may be the limit: its CPU use is reported);
2. requests/s: one-token requests against `--sim-zero-delay`;
3. client-added TTFT at concurrency 1024 and about 1,600 tok/s (flashinfer_cutlass model, real
   time, one wave of 1024 requests, no warmup request): each client's mean TTFT minus the
   emulator's own mean TTFT over the same requests (the `sglang:time_to_first_token_seconds`
   histogram's sum/count, scraped before and after the run: it runs from the request's arrival
   in the handler to the first token's emission), plus the model's prediction;
4. the same with spread arrivals: Poisson 130 requests/s (about 1,560 tok/s in steady state),
   concurrency cap 1024.
For moe-tui the connection pool figures of its selfcheck are kept too (connections pre-opened
before the timed phase, time taken, connections the timed phase still opened).

Against the zero-delay emulator the *server* may be the limit (it is one Python process on one
core building cumulative /generate lines): then both clients' wall throughputs meet the same
ceiling and say little about the clients. So each run also reports `cpu_capacity_tok_s` /
`cpu_capacity_req_s`: output tokens (requests) divided by the client process's CPU seconds beyond
its fixed cost (the median CPU of two runs of the same spec with one prompt: interpreter, imports,
tokenizer, warmup), i.e. what one core could sustain if the server kept up. Process CPU comes from
RUSAGE_CHILDREN around each client process, the same way for both clients.

`--baseline-tree DIR` adds a third client: moe-tui run from another source tree (e.g. `git archive
<commit> moe_tui | tar -x -C DIR`), for before/after figures in the same run.
Writes benches/results/client_headroom-<date>.json and .txt; with `--only`, rows of other
scenarios already in today's files are kept, and so are the hand-written notes of the .txt.

    .venv/bin/python benches/client_headroom.py [--quick] [--repeats 3] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moe_tui.bench.sglang_adapter import locate_client, parse_bench_serving_jsonl  # noqa: E402
from moe_tui.sim.launch import start_sim  # noqa: E402
from moe_tui.sim.model import predict_steady_state  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402
from tests.support.agreement import start_bench_serving  # noqa: E402

CLIENT_CPU = 0
PICKED = ("completed", "duration", "output_throughput", "request_throughput", "mean_ttft_ms",
          "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms")
TTFT_BACKEND = "flashinfer_cutlass"
POOL_KEYS = ("connections_preopened", "connections_preopen_s", "connections_opened_timed")
RATIO_KEYS = ("output_throughput", "request_throughput", "cpu_capacity_tok_s", "cpu_capacity_req_s")


def _pin() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})


def _children_cpu_s() -> float:
    """CPU seconds of finished, waited-for child processes so far (a client run's own tree)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ours(spec: BenchmarkSpec, url: str, tree: Path | None = None) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory() as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(spec.to_json())
        t, cpu = time.time(), _children_cpu_s()
        proc = subprocess.run([sys.executable, "-m", "moe_tui", "bench", "--events", "jsonl", "--spec-file",
                               str(spec_file), "--base-url", url], capture_output=True, text=True,
                              preexec_fn=_pin, timeout=900, env=env, cwd=str(tree or ROOT))
        wall, cpu = time.time() - t, _children_cpu_s() - cpu
    try:
        last = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": proc.stdout[-2000:] + proc.stderr[-2000:]}
    check = last["selfcheck"]
    return {"wall_s": wall, "process_cpu_s": cpu, "status": last["status"],
            **{k: last["summary"].get(k) for k in PICKED},
            "loop_lag_p50_ms": check.get("loop_lag_p50_ms"), "loop_lag_p99_ms": check.get("loop_lag_p99_ms"),
            "client_cpu_fraction": check.get("client_cpu_fraction"), "client_bound": check.get("client_bound"),
            **{k: check.get(k) for k in POOL_KEYS}}


def run_theirs(client, spec: BenchmarkSpec, url: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "o.jsonl"
        t, cpu = time.time(), _children_cpu_s()
        proc = start_bench_serving(client, spec, url, out, preexec_fn=_pin)
        stdout, _ = proc.communicate(timeout=900)
        wall, cpu = time.time() - t, _children_cpu_s() - cpu
        if proc.returncode != 0:
            return {"error": stdout[-4000:]}
        summary = parse_bench_serving_jsonl(out)[-1]
    return {"wall_s": wall, "process_cpu_s": cpu, **{k: summary.get(k) for k in PICKED}}


def server_ttft(base_url: str) -> tuple[float, int]:
    """(sum of seconds, count) of the emulator's time-to-first-token histogram."""
    text = urllib.request.urlopen(base_url + "/metrics", timeout=10).read().decode()
    values = {}
    for part in ("sum", "count"):
        m = re.search(rf"^sglang:time_to_first_token_seconds_{part}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
        values[part] = float(m.group(1)) if m else 0.0
    return values["sum"], int(values["count"])


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def scenario(name: str, sim_args: list[str], spec: BenchmarkSpec, client, repeats: int,
             baseline: Path | None) -> dict:
    other = sorted(set(range(os.cpu_count() or 1)) - {CLIENT_CPU}) or [CLIENT_CPU]
    null_spec = spec.replace(num_prompts=1)

    def runners_for(s: BenchmarkSpec) -> dict:
        out = {"moe_tui": lambda url: run_ours(s, url)}
        if client:
            out["bench_serving"] = lambda url: run_theirs(client, s, url)
        if baseline is not None:
            out["moe_tui_baseline"] = lambda url: run_ours(s, url, baseline)
        return out

    runners, null_runners = runners_for(spec), runners_for(null_spec)
    runs: dict[str, list[dict]] = {who: [] for who in runners}
    null_cpu: dict[str, list[float]] = {who: [] for who in runners}
    with start_sim(sim_args + ["--max-running-requests", "4096", "--enable-metrics"]) as sim:
        os.sched_setaffinity(sim.proc.pid, set(other))
        sim_ps = psutil.Process(sim.proc.pid)
        order = list(runners)
        # The fixed CPU cost of each client process (interpreter, imports, tokenizer, warmup, one
        # request): subtracted from a full run's process CPU to get the CPU its timed phase used.
        for who in order * 2:
            null_cpu[who].append(null_runners[who](sim.base_url).get("process_cpu_s", 0.0))
        for rep in range(repeats):
            for who in (order if rep % 2 == 0 else order[::-1]):
                load = os.getloadavg()[0]
                s0, n0 = server_ttft(sim.base_url)
                c0 = sim_ps.cpu_times()
                run = runners[who](sim.base_url)
                c1 = sim_ps.cpu_times()
                s1, n1 = server_ttft(sim.base_url)
                run.update(load1_before=load, repetition=rep,
                           server_mean_ttft_ms=(s1 - s0) / (n1 - n0) * 1000 if n1 > n0 else None,
                           server_ttft_count=n1 - n0)
                if "wall_s" in run:
                    run["sim_cpu_fraction"] = (c1.user + c1.system - c0.user - c0.system) / run["wall_s"]
                if run.get("mean_ttft_ms") is not None and run["server_mean_ttft_ms"] is not None:
                    run["client_added_ttft_ms"] = run["mean_ttft_ms"] - run["server_mean_ttft_ms"]
                if "process_cpu_s" in run:
                    # What one core could sustain if the server were never the limit: work done per
                    # client CPU-second of the run beyond the fixed cost.
                    timed_cpu = run["process_cpu_s"] - statistics.median(null_cpu[who])
                    run["timed_cpu_s"] = timed_cpu
                    if timed_cpu > 0:
                        run["cpu_capacity_tok_s"] = run["output_throughput"] * run["duration"] / timed_cpu
                        run["cpu_capacity_req_s"] = run["completed"] / timed_cpu
                runs[who].append(run)
                print(json.dumps({"scenario": name, "client": who, **run}), flush=True)
    medians = {who: {k: _median(rs, k) for k in (*PICKED, *RATIO_KEYS[2:], "client_added_ttft_ms",
                                                  "server_mean_ttft_ms", "timed_cpu_s", "load1_before",
                                                  "sim_cpu_fraction", "client_cpu_fraction", "loop_lag_p99_ms",
                                                  *POOL_KEYS)}
               for who, rs in runs.items()}
    row = {"scenario": name, "spec": spec.describe(), "sim_args": sim_args, "repeats": repeats,
           "null_run_cpu_s": null_cpu, "median": medians, "runs": runs}
    if "bench_serving" in medians:
        ours, theirs = medians["moe_tui"], medians["bench_serving"]
        row["ratio_moe_tui_over_bench_serving"] = {
            k: ours[k] / theirs[k] for k in RATIO_KEYS if ours.get(k) and theirs.get(k)}
    return row


def _fmt(value) -> str:
    return "-" if value is None else f"{value:10.1f}" if abs(value) >= 10 or value == 0 else f"{value:10.3f}"


def text_report(info: dict) -> str:
    lines = [f"client_headroom {info['date']} (--quick={info['quick']}), {info['cpus']} CPUs, clients pinned to "
             f"CPU {info['client_cpu']}, bench_serving {info['bench_serving']}, python {info['python']}",
             f"medians of {info['repeats']} repetitions per client, clients alternated on one emulator per scenario;",
             "load1 = 1-minute load average before each run (shared 2-core box: above 2, every process got a",
             "fraction of a core; bench_serving and moe-tui ran under the same conditions, in turn).", ""]
    for row in info["rows"]:
        med = row["median"]
        who = list(med)
        lines.append(f"{row['scenario']}: {row['spec']}")
        lines.append("  " + " " * 22 + "".join(f"{w:>18}" for w in who))
        for key in ("output_throughput", "request_throughput", "cpu_capacity_tok_s", "cpu_capacity_req_s",
                    "timed_cpu_s", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
                    "server_mean_ttft_ms", "client_added_ttft_ms", "client_cpu_fraction", "loop_lag_p99_ms",
                    "sim_cpu_fraction", "load1_before", *POOL_KEYS):
            if all(med[w].get(key) is None for w in who):
                continue
            lines.append(f"  {key:22}" + "".join(f"{_fmt(med[w].get(key)):>18}" for w in who))
        ratio = row.get("ratio_moe_tui_over_bench_serving")
        if ratio:
            lines.append("  ratio moe-tui / bench_serving: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))
        if row.get("predicted"):
            p = row["predicted"]
            lines.append(f"  model prediction: {p['output_throughput']:.0f} tok/s, mean TTFT {p['mean_ttft_ms']:.0f} ms")
        for w in who:
            per_run = ", ".join(f"{r.get('output_throughput') or 0:.0f}@{r['load1_before']:.1f}" for r in row["runs"][w])
            lines.append(f"  {w} per run (output tok/s @ load1): {per_run}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions per client and scenario")
    ap.add_argument("--baseline-tree", type=Path, default=None,
                    help="also run moe-tui from this source tree (before/after figures)")
    ap.add_argument("--only", default=None, help="run only scenarios whose name contains this")
    a = ap.parse_args()
    q = 4 if a.quick else 1
    client = locate_client()
    ttft_spec = BenchmarkSpec(input_len=16, output_len=12, num_prompts=1024, max_concurrency=1024,
                              warmup_requests=0)
    spread_spec = ttft_spec.replace(request_rate=130.0)
    scenarios = [
        ("streamed tokens/s (zero-delay emulator)", ["--sim-zero-delay"],
         BenchmarkSpec(input_len=16, output_len=1024, num_prompts=256 // q, max_concurrency=128,
                       warmup_requests=1)),
        ("requests/s (1 output token, zero-delay emulator)", ["--sim-zero-delay"],
         BenchmarkSpec(input_len=16, output_len=1, num_prompts=4000 // q, max_concurrency=64,
                       warmup_requests=1)),
        (f"client-added TTFT at concurrency 1024, ~1,600 tok/s ({TTFT_BACKEND} model, real time)",
         ["--moe-runner-backend", TTFT_BACKEND], ttft_spec),
        (f"client-added TTFT at concurrency 1024, Poisson 130 req/s (~1,560 tok/s steady; {TTFT_BACKEND} model, "
         "real time)", ["--moe-runner-backend", TTFT_BACKEND], spread_spec),
    ]
    rows = []
    for name, sim_args, spec in scenarios:
        if a.only and a.only not in name:
            continue
        row = scenario(name, sim_args, spec, client, a.repeats, a.baseline_tree)
        if spec is ttft_spec:
            p = predict_steady_state(TTFT_BACKEND, spec.max_concurrency, spec.input_len, spec.output_len,
                                     num_prompts=spec.num_prompts)
            row["predicted"] = {"output_throughput": p.output_throughput, "mean_ttft_ms": p.mean_ttft_ms}
        rows.append(row)
    info = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "client_cpu": CLIENT_CPU,
            "python": sys.version.split()[0], "quick": a.quick, "repeats": a.repeats,
            "bench_serving": None if client is None else client.version, "rows": rows}
    out = ROOT / "benches" / "results" / f"client_headroom-{info['date']}.json"
    notes = ""
    if a.only and out.exists():  # a partial re-run: keep today's other rows and the notes
        old = json.loads(out.read_text())
        fresh = {row["scenario"] for row in rows}
        kept = [row for row in old.get("rows", []) if row["scenario"] not in fresh]
        order = [row["scenario"] for row in old.get("rows", [])]
        rows.extend(kept)
        rows.sort(key=lambda row: order.index(row["scenario"]) if row["scenario"] in order else len(order))
        old_text = out.with_suffix(".txt").read_text() if out.with_suffix(".txt").exists() else ""
        if "\nNotes (" in old_text:
            notes = old_text[old_text.index("\nNotes ("):]
    out.write_text(json.dumps(info, indent=1))
    out.with_suffix(".txt").write_text(text_report(info) + "\n" + notes)
    print(text_report(info))
    print(f"wrote {out} and {out.with_suffix('.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
