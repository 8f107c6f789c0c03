"""Runner memory over a long campaign: is the headless runner's RSS flat per item?

A private MOE_TUI_HOME, two emulator profiles (fast model) and one campaign of `--items` tiny
items in the *alternating* order, so every item restarts a server (the worst case for per-item
state: server handles, log buffers, store rows, benchmark children, events). `moe-tui run` works
it; after each finished item the runner's RSS is read (psutil) and, after `--warmup` items,
fitted with a line. Target (issue 13): RSS flat within 5 MB after warm-up over 300 items.

    .venv/bin/python benches/runner_memory.py --items 300 [--out benches/results/runner_memory-DATE.md]

With --tracemalloc the same campaign is worked in this process by a Controller with tracemalloc
on, and the allocation sites that grew most between the warm-up mark and the end are printed
(how the per-item growth was found).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))  # tests.support: the helpers tests and benches share
from runner_support import free_port, write_profile  # noqa: E402

SPEC = {"num_prompts": 2, "input_len": 16, "output_len": 8}
SPEC_FLAGS = ["--num-prompts", "2", "--input-len", "16", "--output-len", "8", "--no-warmup-pass"]


def _setup(tmp: Path) -> tuple[Path, dict]:
    profiles = tmp / "p"
    profiles.mkdir()
    for name, backend in (("mem-a", "flashinfer_cutlass"), ("mem-b", "flashinfer_cutedsl")):
        write_profile(profiles, name, backend, free_port(), time_scale=50)
    env = {**os.environ, "MOE_TUI_HOME": str(tmp / "h"), "PYTHONPATH": str(REPO)}
    return profiles, env


def _done(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=10) as conn:
            return conn.execute("SELECT COUNT(*) FROM queue_items WHERE state NOT IN ('pending', 'running')"
                                ).fetchone()[0]
    except sqlite3.Error:
        return 0


def measure(items: int) -> list[tuple[int, float, float]]:
    """(items finished, RSS MB, seconds) after each finished item."""
    import psutil

    with tempfile.TemporaryDirectory(prefix="moe-tui-mem-") as tmp_name:
        tmp = Path(tmp_name)
        profiles, env = _setup(tmp)
        repeats = items // 2
        add = subprocess.run([sys.executable, "-m", "moe_tui", "queue", "add", "--profiles", "mem-a,mem-b",
                              "--concurrency", "1", "--repeats", str(repeats), "--order", "alternating",
                              "--profiles-dir", str(profiles), *SPEC_FLAGS], env=env, capture_output=True, text=True)
        if add.returncode:
            raise SystemExit(add.stdout + add.stderr)
        db = tmp / "h" / "data" / "moe-tui.sqlite3"
        runner = subprocess.Popen([sys.executable, "-m", "moe_tui", "run", "--profiles-dir", str(profiles)],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        proc = psutil.Process(runner.pid)
        samples, last, t0 = [], 0, time.monotonic()
        try:
            while runner.poll() is None:
                done = _done(db)
                if done != last:
                    last = done
                    samples.append((done, proc.memory_info().rss / 2**20, time.monotonic() - t0))
                    if done % 25 == 0:
                        print(f"{done} items, RSS {samples[-1][1]:.1f} MB", flush=True)
                time.sleep(0.05)
        finally:
            if runner.poll() is None:
                runner.terminate()
                runner.wait(60)
        return samples


def fit(samples: list[tuple[int, float, float]], warmup: int) -> dict:
    after = [(n, rss) for n, rss, _ in samples if n >= warmup]
    xs, ys = [n for n, _ in after], [r for _, r in after]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(1e-9, sum((x - mx) ** 2 for x in xs))
    return {"items": samples[-1][0], "warmup": warmup, "rss_at_warmup": after[0][1], "rss_end": after[-1][1],
            "rss_min": min(ys), "rss_max": max(ys), "spread": max(ys) - min(ys), "slope_mb_per_item": slope,
            "growth_over_run": slope * (xs[-1] - xs[0]), "seconds": samples[-1][2]}


def report(result: dict, samples: list, out: Path | None) -> str:
    rows = "\n".join(f"| {n} | {rss:.1f} |" for n, rss, _ in samples if n % 25 == 0 or n == samples[-1][0])
    verdict = "PASS" if result["spread"] <= 5.0 else "FAIL"
    text = f"""# Runner memory over a {result['items']}-item campaign ({dt.date.today().isoformat()})

`benches/runner_memory.py --items {result['items']}`: `moe-tui run` on two emulator profiles in the
alternating order (a server restart every item), items of {SPEC['num_prompts']} prompts; RSS of the
runner process after each finished item. Machine: {os.cpu_count()} cores, shared with other work.

- after warm-up ({result['warmup']} items): RSS {result['rss_at_warmup']:.1f} MB -> {result['rss_end']:.1f} MB at item {result['items']}
- spread after warm-up (max - min): **{result['spread']:.2f} MB** (target: within 5 MB) -> **{verdict}**
- fitted slope: {result['slope_mb_per_item'] * 1000:.1f} KB per item ({result['growth_over_run']:.2f} MB over the run)
- wall time: {result['seconds']:.0f} s

| items done | runner RSS (MB) |
|---:|---:|
{rows}
"""
    if out is not None:
        out.write_text(text)
    return text


async def _traced(items: int, warmup: int) -> None:
    import gc
    import tracemalloc

    from moe_tui.run.controller import Controller
    from moe_tui.store.db import Store
    from tests.support.controller import work_until_empty

    with tempfile.TemporaryDirectory(prefix="moe-tui-memtrace-") as tmp_name:
        tmp = Path(tmp_name)
        profiles, _ = _setup(tmp)
        with Store(tmp / "s.sqlite3") as store:
            c = Controller(store, profiles, data_dir=tmp / "d")
            c.add_campaign(["mem-a", "mem-b"], [1], repeats=items // 2, spec=SPEC, policy="alternating",
                           warmup_pass=False)
            finished: list[int] = []
            c.subscribe(lambda ev: finished.append(1) if type(ev).__name__ == "RunFinished" else None)
            snaps = {}

            def snapshot_at_marks() -> None:
                for mark in (warmup, items - 2):
                    if len(finished) >= mark and mark not in snaps:
                        gc.collect()
                        snaps[mark] = tracemalloc.take_snapshot()

            await work_until_empty(c, snapshot_at_marks, before=lambda: tracemalloc.start(20))
            await c.shutdown("bench over")
        print(f"traced memory growth between item {warmup} and {items - 2}:")
        for stat in snaps[items - 2].compare_to(snaps[warmup], "traceback")[:10]:
            print(f"{stat.size_diff / 1024:+.1f} KiB in {stat.count_diff:+d} blocks")
            for line in stat.traceback.format()[-6:]:
                print("   ", line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args()
    if args.tracemalloc:
        asyncio.run(_traced(args.items, args.warmup))
        return 0
    samples = measure(args.items)
    result = fit(samples, args.warmup)
    print(report(result, samples, args.out))
    return 0 if result["spread"] <= 5.0 else 1


if __name__ == "__main__":
    sys.exit(main())
