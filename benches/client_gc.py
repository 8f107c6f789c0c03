"""The benchmark client's loop lag in a campaign, with and without the collector kept out of the
timed phase (issue #31, part 2), side by side in one run.

Each round runs the same short campaign twice through the real runner (`moe-tui queue add` then
`moe-tui run --until-empty`, a private MOE_TUI_HOME each), once with `MOE_TUI_BENCH_GC=auto`
(Python's automatic collection during the timed phase, as before) and once without (the default:
`moe_tui.bench.live.QuietGc`), in alternating order, while the process table is kept busy with
`--sleepers` idle processes (the runner's simulated GPU telemetry scans it every second for
foreign GPU processes, as NVML's does on a GPU host). Per run, from the store: the loop's own lag
(max, count of late wake-ups), the collections seen during the timed phase and their longest
pause, and whether the run was flagged client-bound or to re-measure. Printed and written to
benches/results/client_gc-<date>.md with medians and the ratio.

The default workload (the demo's profiles at time scale 50, concurrency 10, 40 prompts of 512 output
tokens) allocates enough in its timed phase for Python's full (generation 2) collection to fall
inside it (what the H200 host's single 50-73 ms late wake-ups look like); smaller runs here
collected just after their timed phase.

    .venv/bin/python benches/client_gc.py [--rounds 2] [--sleepers 300] [--concurrency 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "server_profiles" / "demo"
ARMS = {"before (collector on)": {"MOE_TUI_BENCH_GC": "auto"}, "after (QuietGc)": {}}


def profiles_at(folder: Path, time_scale: float) -> Path:
    """The demo's two profiles with their clock at `time_scale`."""
    folder.mkdir(parents=True, exist_ok=True)
    for src in PROFILES.glob("*.toml"):
        (folder / src.name).write_text(src.read_text().replace("time_scale = 10", f"time_scale = {time_scale:g}"))
    return folder


def campaign(home: Path, extra_env: dict[str, str], args: argparse.Namespace, profiles: Path) -> list[dict]:
    env = {**os.environ, "MOE_TUI_HOME": str(home), **extra_env}
    moe = [sys.executable, "-m", "moe_tui"]
    subprocess.run([*moe, "queue", "add", "--profiles", "sim-flashinfer-cutlass,sim-flashinfer-cutedsl",
                    "--concurrency", args.concurrency, "--repeats", str(args.repeats), "--input-len", "128",
                    "--output-len", str(args.output_len), "--num-prompts", "4", "--prompts-per-concurrency",
                    str(args.ppc), "--no-control", "--profiles-dir", str(profiles)], env=env, check=True,
                   capture_output=True)
    subprocess.run([*moe, "run", "--until-empty", "--profiles-dir", str(profiles)], env=env, check=False,
                   capture_output=True, timeout=1800)
    conn = sqlite3.connect(home / "data" / "moe-tui.sqlite3")
    try:
        rows = conn.execute("SELECT selfcheck_json, flags_json FROM runs WHERE status != 'running'").fetchall()
    finally:
        conn.close()
    return [{**json.loads(s or "{}"), "flags": json.loads(f or "[]")} for s, f in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sleepers", type=int, default=300)
    ap.add_argument("--concurrency", default="10")
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--ppc", type=int, default=4, help="prompts per concurrency")
    ap.add_argument("--time-scale", type=float, default=50.0)
    args = ap.parse_args()
    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.sleepers)]
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    t0 = time.time()
    try:
        with tempfile.TemporaryDirectory(prefix="moe-tui-client-gc-") as tmp:
            profiles = profiles_at(Path(tmp) / "profiles", args.time_scale)
            for r in range(args.rounds):
                order = list(ARMS) if r % 2 == 0 else list(reversed(ARMS))
                for arm in order:
                    home = Path(tmp) / f"r{r}-{'after' if not ARMS[arm] else 'before'}"
                    runs[arm] += campaign(home, ARMS[arm], args, profiles)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    lines = [f"# client_gc {dt.date.today()}: the client's loop lag in a campaign, collector on vs kept out",
             "", f"{os.cpu_count()} CPUs, load1 {os.getloadavg()[0]:.1f} at the end, {args.rounds} rounds "
             f"(arms alternated), campaign: the demo's two sim profiles at time scale {args.time_scale:g} x "
             f"c={args.concurrency} x {args.repeats} repeats, in=128 out={args.output_len}, "
             f"max(4, {args.ppc} x concurrency) prompts, {args.sleepers} idle processes in the table, "
             f"simulated GPU telemetry on; {time.time() - t0:.0f} s in all.", "",
             "| arm | runs | own lag max ms, median | p90 | runs with a late own wake-up | collections in timed phase (runs) "
             "| longest collector pause ms | client-bound | re-measure |", "|---|---|---|---|---|---|---|---|---|"]
    medians = {}
    for arm, rs in runs.items():
        own = sorted(float(r.get("loop_own_lag_max_ms") or 0.0) for r in rs)
        medians[arm] = statistics.median(own) if own else float("nan")
        p90 = own[int(0.9 * (len(own) - 1))] if own else float("nan")
        late = sum(1 for r in rs if (r.get("loop_own_lag_late") or 0) > 0)
        gc_runs = sum(1 for r in rs if (r.get("gc_collections_timed") or 0) > 0)
        pause = max((float(r.get("gc_pause_max_ms") or 0.0) for r in rs), default=0.0)
        bound = sum(1 for r in rs if "client_bound" in r["flags"])
        again = sum(1 for r in rs if "client_lag_once" in r["flags"])
        lines.append(f"| {arm} | {len(rs)} | {medians[arm]:.2f} | {p90:.2f} | {late} | {gc_runs} | {pause:.1f} | "
                     f"{bound} | {again} |")
    before, after = medians["before (collector on)"], medians["after (QuietGc)"]
    lines += ["", f"median own-lag max, before / after: {before / after:.2f}x" if after else ""]
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "benches" / "results" / f"client_gc-{dt.date.today()}.md"
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
