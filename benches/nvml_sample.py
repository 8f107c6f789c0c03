"""What GPU telemetry costs: NVML init time and the time of one full sample of all GPUs.

    python benches/nvml_sample.py [--n 200] [--load-seconds 40] [--out results.json]

Idle phase: `nvmlInit` time, the first sample (handles and static fields), the median / p90 of N
full samples (with and without psutil process names) and the median cost of each NVML query on
GPU 0. Load phase (`--load-seconds`, needs torch and a GPU): a child process runs a bf16 matmul loop
on every GPU while a `TelemetryThread` samples; it prints the samples, the sample cost under load,
the run summary and its suspect reasons, judged twice: with the child as "ours" and as a stranger.

Run it on a GPU box; without a driver it says so and exits 0. Results go in
benches/results/nvml-<gpu>-<date>.txt. Never changes any GPU setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui.telemetry import (  # noqa: E402
    NvmlSampler,
    SnapshotCollector,
    TelemetryThread,
    expand_descendants,
    foreign_processes,
    summarize_run,
    suspect_reasons,
)


def _ms(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "median_ms": round(statistics.median(ordered) * 1e3, 4),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e3, 4),
        "min_ms": round(ordered[0] * 1e3, 4),
        "max_ms": round(ordered[-1] * 1e3, 4),
        "n": len(ordered),
    }


def time_samples(sampler: NvmlSampler, n: int) -> dict[str, float]:
    costs = []
    for _ in range(n):
        start = time.perf_counter()
        sampler.sample()
        costs.append(time.perf_counter() - start)
    return _ms(costs)


def time_queries(n: int) -> dict[str, dict[str, float]]:
    """Median cost of each query the sampler makes, on GPU 0, straight through pynvml."""
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    queries = {
        "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        "memory": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "power": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        "power_limit": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
        "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "sm_clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "mem_clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "clock_events": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "processes": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
    }
    out = {}
    for name, fn in queries.items():
        costs = []
        for _ in range(n):
            start = time.perf_counter()
            try:
                fn()
            except pynvml.NVMLError:
                pass
            costs.append(time.perf_counter() - start)
        out[name] = _ms(costs)
    return out


def matmul_child(seconds: float) -> None:
    """The load: a bf16 matmul loop on every GPU for `seconds` (a child process, so its PID is
    a distinct GPU process to find)."""
    import torch

    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    mats = [(torch.randn(8192, 8192, dtype=torch.bfloat16, device=d),) * 2 for d in devices]
    for a, b in mats:
        a @ b
    for d in devices:
        torch.cuda.synchronize(d)
    print("ready", flush=True)
    end = time.monotonic() + seconds
    iters = 0
    start = time.monotonic()
    while time.monotonic() < end:
        for a, b in mats:
            for _ in range(20):
                a @ b
        for d in devices:
            torch.cuda.synchronize(d)
        iters += 20
    elapsed = time.monotonic() - start
    tflops = 2 * 8192**3 * iters / elapsed / 1e12
    print(f"matmul load done: {iters} iters per GPU in {elapsed:.1f} s, {tflops:.0f} TFLOP/s per GPU",
          flush=True)


def _line(snap) -> str:
    parts = []
    for g in snap.gpus:
        events = ",".join(g.clock_events) or "none"
        procs = ",".join(str(p.pid) for p in g.processes or ())
        parts.append(
            f"gpu{g.index} util {g.util_gpu_pct}% mem {g.util_mem_pct}% "
            f"{g.power_w} W/{g.power_limit_w} W {g.temperature_c} C "
            f"SM {g.sm_clock_mhz}/{g.sm_clock_max_mhz} MHz mem {g.mem_clock_mhz} MHz "
            f"events [{events}] pids [{procs}]"
        )
    cost = f"{snap.sample_seconds * 1e3:.3f} ms" if snap.sample_seconds is not None else "n/a"
    return f"t={snap.t:.2f} sample {cost} | " + " | ".join(parts)


def load_phase(sampler: NvmlSampler, seconds: float, interval: float) -> dict:
    child = subprocess.Popen(
        [sys.executable, __file__, "--matmul-child", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ready = child.stdout.readline().strip()
        if ready != "ready":
            return {"error": f"load child did not start (said {ready!r}, rc {child.poll()})"}
        collector = SnapshotCollector()
        thread = TelemetryThread(sampler, interval_s=interval, on_snapshot=collector)
        ours_while_alive: set[int] = set()
        with thread:
            time.sleep(min(3.0, seconds / 4))
            ours_while_alive = expand_descendants({child.pid})
            latest = thread.latest
            foreign_when_ours = foreign_processes(latest, {child.pid}) if latest else None
            foreign_when_not = foreign_processes(latest, set()) if latest else None
            # Sample cost under load, between the thread's ticks.
            under_load = time_samples(sampler, 100)
            child.wait(timeout=seconds + 60)
            time.sleep(interval * 2)  # a couple of samples after the load ends
        snaps = collector.snapshots
        for snap in snaps:
            print(_line(snap))
        done = child.stdout.read().strip()
        nvml_pids = sorted({p.pid for s in snaps for g in s.gpus for p in g.processes or ()})
        as_ours = summarize_run(snaps, ours_while_alive)
        as_stranger = summarize_run(snaps, set())
        return {
            "child_pid": child.pid,
            "child_said": done,
            "pids_nvml_listed": nvml_pids,
            "pid_namespace_matches": child.pid in nvml_pids,
            "foreign_with_child_ours": [vars(f) for f in foreign_when_ours or ()],
            "foreign_with_child_stranger": [vars(f) for f in foreign_when_not or ()],
            "sample_under_load": under_load,
            "thread_samples": len(snaps),
            "summary_child_ours": as_ours,
            "suspect_reasons_child_ours": suspect_reasons(as_ours),
            "suspect_reasons_child_stranger": suspect_reasons(as_stranger),
        }
    finally:
        if child.poll() is None:
            os.killpg(child.pid, 9)
            child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="samples to time (default 200)")
    parser.add_argument("--load-seconds", type=float, default=0.0, help="bf16 matmul load phase")
    parser.add_argument("--interval", type=float, default=0.5, help="sampling interval under load")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--matmul-child", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.matmul_child is not None:
        matmul_child(args.matmul_child)
        return 0

    sampler = NvmlSampler()
    start = time.perf_counter()
    first = sampler.sample()
    first_cost = time.perf_counter() - start
    if not first.available:
        print(first.reason)
        return 0
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "gpus": [g.name for g in first.gpus],
        "driver_version": first.driver_version,
        "cuda_driver_version": first.cuda_driver_version,
        "nvml_version": first.nvml_version,
        "nvml_init_ms": round(sampler.init_seconds * 1e3, 3),
        "first_sample_ms": round(first_cost * 1e3, 3),
        "sample_all_gpus_idle": time_samples(sampler, args.n),
        "sample_all_gpus_idle_no_names": time_samples(NvmlSampler(process_names=False), args.n),
        "query_gpu0_idle": time_queries(args.n),
    }
    print(f"{len(first.gpus)} GPU(s): {', '.join(g or 'n/a' for g in results['gpus'])}; "
          f"driver {first.driver_version}, CUDA {first.cuda_driver_version}, NVML {first.nvml_version}")
    print(f"nvmlInit {results['nvml_init_ms']} ms; first sample {results['first_sample_ms']} ms")
    print(f"full sample, idle: {results['sample_all_gpus_idle']}")
    print(f"full sample without process names, idle: {results['sample_all_gpus_idle_no_names']}")
    for name, stats in results["query_gpu0_idle"].items():
        print(f"  {name:<13} median {stats['median_ms']} ms")
    if args.load_seconds > 0:
        load = load_phase(sampler, args.load_seconds, args.interval)
        results["load"] = load
        for key in ("child_said", "pids_nvml_listed", "pid_namespace_matches", "foreign_with_child_ours",
                    "foreign_with_child_stranger", "sample_under_load", "thread_samples",
                    "suspect_reasons_child_ours", "suspect_reasons_child_stranger", "error"):
            if key in load:
                print(f"{key}: {load[key]}")
        if "summary_child_ours" in load:
            print("summary: " + json.dumps(load["summary_child_ours"], indent=1, sort_keys=True))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
