"""What moe-tui's benchmark client costs to start, per process and per queue item, before and after
issue #35 part 5, side by side in one run (alternating, medians and ratios).

- start CPU of one client process (user + sys): before, `python -m moe_tui bench --events jsonl`
  (the command line the runner started twice per item) against a closed port, so the run ends at
  its first connection (the kernel's accounting of the reaped child); exec'd,
  `python -m moe_tui.bench.worker` with its stdin closed, so it exits once its imports are done
  (likewise); forked, a client forked by the zygote (`moe_tui.bench.zygote`, what the runner now
  does), read from /proc once it waits for its first request.
- one item's client work against the emulator (`moe-tui sim --sim-zero-delay`): the warmup pass
  (`store.queue.warmup_spec`) and the timed run. Before: two `moe-tui bench --events jsonl`
  processes, one after the other; after: one `moe_tui.bench.process.ClientProcess`, exec'd or
  forked by the zygote (the runner's way), started first, then asked for both runs. Per item: the
  client processes' CPU (for the ClientProcess arms read from /proc just before it ends), and the
  wall time from "warmup pass wanted" to the timed run's result, without the process start for the
  ClientProcess arms (forked: milliseconds; exec'd: the start CPU row).

Printed and written to benches/results/client_start-<date>.md.

    .venv/bin/python benches/client_start.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from moe_tui.bench.engine import native_spec  # noqa: E402
from moe_tui.bench.process import ClientProcess  # noqa: E402
from moe_tui.bench.zygote import Zygote  # noqa: E402
from moe_tui.sim.launch import start_sim  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402
from moe_tui.store.queue import warmup_spec  # noqa: E402

TICK_S = 0.01
SPEC = BenchmarkSpec(num_prompts=16, input_len=64, output_len=16, max_concurrency=4)


def reaped_cpu_s(argv: list[str], stdin: int | None = subprocess.DEVNULL) -> float:
    """User + sys seconds of one child process, from wait4's accounting."""
    proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def old_argv(spec_file: Path, base_url: str) -> list[str]:
    return [sys.executable, "-m", "moe_tui", "bench", "--events", "jsonl", "--spec-file", str(spec_file),
            "--base-url", base_url, "--vocab-size", "1000"]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def item_before(base_url: str, tmp: Path) -> tuple[float, float]:
    """Warmup pass and timed run as two `moe-tui bench` processes: (client CPU s, wall s)."""
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    for n, spec in enumerate((warmup_spec(SPEC), SPEC)):
        path = tmp / f"spec{n}.json"
        path.write_text(native_spec(spec).to_json())
        out = subprocess.run(old_argv(path, base_url), capture_output=True, check=False)
        assert b'"status": "complete"' in out.stdout.splitlines()[-1], out.stderr[-500:]
    return children_cpu_s() - cpu0, time.perf_counter() - t0


def proc_cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def item_after(base_url: str, zygote: Zygote | None) -> tuple[float, float]:
    """Warmup pass and timed run in one ClientProcess, started first: (client CPU s, wall s of the runs)."""
    client = ClientProcess(zygote=zygote)
    await client.start()
    assert client.proc is not None
    await asyncio.sleep(1.5)  # ready (imports done) before the clock starts: the start is its own row
    t0 = time.perf_counter()
    for spec in (warmup_spec(SPEC), SPEC):
        result = await client.run(spec, base_url, vocab_size=1000)
        assert result.status == "complete", result.error
    wall = time.perf_counter() - t0
    cpu = proc_cpu_s(client.proc.pid)
    await client.close()
    return cpu, wall


async def forked_start_cpu_s(zygote: Zygote) -> float:
    client = ClientProcess(zygote=zygote)
    await client.start()
    assert client.proc is not None
    await asyncio.sleep(0.5)  # waiting for its first request by now
    cpu = proc_cpu_s(client.proc.pid)
    await client.close()
    return cpu


async def forked_rounds(rounds: int, base_url: str | None) -> list[tuple[float, float]] | list[float]:
    zygote = Zygote()
    try:
        if base_url is None:
            return [await forked_start_cpu_s(zygote) for _ in range(rounds)]
        return [await item_after(base_url, zygote) for _ in range(rounds)]
    finally:
        await zygote.close()


def row(name: str, before: list[float], *afters: list[float]) -> str:
    cells = [f"{statistics.median(before):.3f} s"]
    for after in afters:
        # /proc counts CPU in clock ticks (10 ms): a process that used less reads 0, counted here as
        # one tick, so its ratio is a lower bound ("at least").
        ratios = [x / max(y, TICK_S) for x, y in zip(before, after)]
        floor = "at least " if any(y < TICK_S for y in after) else ""
        cells += [f"{statistics.median(after):.3f} s",
                  f"{floor}{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"]
    return f"| {name} | " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        spec_file = tmp / "one.json"
        spec_file.write_text(native_spec(BenchmarkSpec(num_prompts=1)).to_json())
        start_before, start_exec = [], []
        reaped_cpu_s(old_argv(spec_file, "http://127.0.0.1:9"))  # warm the page cache, not counted
        for _ in range(args.rounds):
            start_before.append(reaped_cpu_s(old_argv(spec_file, "http://127.0.0.1:9")))
            start_exec.append(reaped_cpu_s([sys.executable, "-m", "moe_tui.bench.worker"]))
        start_fork = asyncio.run(forked_rounds(args.rounds, None))
        cpu_before, wall_before, cpu_exec, wall_exec = [], [], [], []
        with start_sim(["--sim-zero-delay"]) as sim:
            for _ in range(args.rounds):
                c, w = item_before(sim.base_url, tmp)
                cpu_before.append(c)
                wall_before.append(w)
                c, w = asyncio.run(item_after(sim.base_url, None))
                cpu_exec.append(c)
                wall_exec.append(w)
            forked = asyncio.run(forked_rounds(args.rounds, sim.base_url))
        cpu_fork, wall_fork = [c for c, _ in forked], [w for _, w in forked]
    lines = [
        f"# Benchmark client start, {dt.date.today().isoformat()} (benches/client_start.py, {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs)",
        "",
        f"Item: warmup pass ({warmup_spec(SPEC).describe()}) then timed run ({SPEC.describe()}) against "
        "`moe-tui sim --sim-zero-delay`. Medians; ratio before/after per round, median (min-max).",
        "",
        "| figure | before (2 x moe-tui bench) | one process, exec'd | before/exec'd | one process, forked "
        "by the zygote | before/forked |",
        "|---|---|---|---|---|---|",
        row("start CPU of one client process", start_before, start_exec, start_fork),
        row("client CPU per item (user+sys)", cpu_before, cpu_exec, cpu_fork),
        row("wall, warmup pass wanted -> timed result", wall_before, wall_exec, wall_fork),
        "",
        "raw: " + json.dumps({"start_before": start_before, "start_exec": start_exec, "start_fork": start_fork,
                              "cpu_before": cpu_before, "cpu_exec": cpu_exec, "cpu_fork": cpu_fork,
                              "wall_before": wall_before, "wall_exec": wall_exec, "wall_fork": wall_fork}),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "benches" / "results" / f"client_start-{dt.date.today().isoformat()}.md"
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
