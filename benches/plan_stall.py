"""The runner's loop while a 100k-item campaign is planned (issue 34 part 4): its lag, side by side.

A `Controller` (demo profiles, a fresh store, no servers) and a 5 ms heartbeat on its asyncio loop, the
loop that drives a benchmark in flight. Per phase, the heartbeat's lag (the sleep's overshoot) p50 / p99 /
max over `--seconds`:

- idle: nothing else on the loop;
- off the loop: `call("plan_campaign", ...)` as the TUI and the control socket send it, repeated
  for the whole phase (the plan is built in a worker thread: `run.facade`);
- on the loop: the same plan built by `QueueOps.plan_campaign` on the loop itself (what the op did
  before issue 34), for comparison;
- add off the loop: `call("add_campaign", ...)` of `--add-items` items (planned and written in a worker
  thread, `run.facade.add_campaign_off_loop`), repeated; and the same added on the loop (before).

    nice .venv/bin/python benches/plan_stall.py [--items 100000] [--seconds 6]

Writes benches/results/plan_stall-<date>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moe_tui.run.controller import Controller  # noqa: E402
from moe_tui.store.db import Store  # noqa: E402

DEMO = ROOT / "server_profiles" / "demo"
PROFILES = ["sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"]
CONCS = list(range(1, 51))  # 2 profiles x 50 concurrencies x 1000 repeats (the most a campaign may ask): 100k items


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) >= 2 else (values or [0.0])[0]


async def _phase(seconds: float, work) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    plans = 0
    end = loop.time() + seconds

    async def heartbeat() -> None:
        while loop.time() < end:
            t = loop.time()
            await asyncio.sleep(0.005)
            lags.append(max(0.0, loop.time() - t - 0.005) * 1000)

    async def load() -> None:
        nonlocal plans
        while work is not None and loop.time() < end:
            await work()
            plans += 1
            await asyncio.sleep(0)

    await asyncio.gather(heartbeat(), load())
    return {"p50_ms": _pct(lags, 50), "p99_ms": _pct(lags, 99), "max_ms": max(lags), "beats": len(lags),
            "plans": plans}


async def _measure(c: Controller, items: int, seconds: float, add_items: int) -> dict[str, dict[str, float]]:
    repeats = items // (len(PROFILES) * len(CONCS))
    args = {"profiles": PROFILES, "concurrencies": CONCS, "repeats": repeats, "spec": {"num_prompts": 64}}

    async def off_loop() -> None:
        plan = await c.call("plan_campaign", **args)
        assert plan["item_count"] >= items

    async def on_loop() -> None:
        c._ops.plan_campaign(PROFILES, CONCS, repeats, {"num_prompts": 64})

    add_args = {**args, "repeats": max(1, add_items // (len(PROFILES) * len(CONCS)))}

    async def add_off_loop() -> None:
        await c.call("add_campaign", **add_args)

    async def add_on_loop() -> None:
        c.add_campaign(**add_args)

    return {"idle": await _phase(seconds, None), "plan off the loop (now)": await _phase(seconds, off_loop),
            "plan on the loop (before)": await _phase(seconds, on_loop),
            f"add {add_args['repeats'] * len(PROFILES) * len(CONCS):,} items off the loop (now)":
                await _phase(seconds, add_off_loop),
            "add on the loop (before)": await _phase(seconds, add_on_loop)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--add-items", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.sqlite3") as store:
        c = Controller(store, DEMO, data_dir=tmp, telemetry=False, use_lock=False)
        started = time.monotonic()
        figures = asyncio.run(_measure(c, args.items, args.seconds, args.add_items))
        took = time.monotonic() - started
    date = datetime.date.today().isoformat()
    lines = [f"# The runner's loop while a {args.items:,}-item campaign is planned ({date})", "",
             f"Host: {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python "
             f"{platform.python_version()}; `nice .venv/bin/python benches/plan_stall.py --items {args.items} "
             f"--seconds {args.seconds:g} --add-items {args.add_items}` ({took:.0f} s). A 5 ms heartbeat on the "
             "controller's loop; its lag per phase.",
             "", "| phase | lag p50 | lag p99 | lag max | beats | plans built (or campaigns added) |", "|---|---|---|---|---|---|"]
    for phase, f in figures.items():
        lines.append(f"| {phase} | {f['p50_ms']:.2f} ms | {f['p99_ms']:.2f} ms | {f['max_ms']:.1f} ms | "
                     f"{f['beats']:.0f} | {f['plans']:.0f} |")
    idle, off = figures["idle"]["p99_ms"], figures["plan off the loop (now)"]["p99_ms"]
    add = next(f["p99_ms"] for k, f in figures.items() if k.startswith("add ") and k.endswith("(now)"))
    lines += ["", f"p99 while planning off the loop minus idle: {off - idle:+.2f} ms (goal: within 5 ms).",
              f"p99 while adding a campaign off the loop minus idle: {add - idle:+.2f} ms.", ""]
    (ROOT / "benches" / "results" / f"plan_stall-{date}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
