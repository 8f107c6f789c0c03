"""Slurm chaos bench: random `scancel`s and nodes set DOWN under a small emulator campaign (issue 37).

Starts a real two-node Slurm on this host (`tests/slurm/cluster.py`: root and Debian's slurmctld,
slurmd, munge), queues one campaign (base vs cand, concurrency 8 and the control, `--repeats`
repeats: each sweep one job) and works it through `executors.dispatch.Dispatcher`. Every 2-6 s (seeded)
one event strikes a job that is RUNNING: `scancel` it, or set its node DOWN (the node is resumed 1-3 s
later, as an operator or ReturnToService would; never both nodes down at once). After `--events`
events the queue drains. Then it counts and checks:

  - kills (by kind), retries, items done, runs stored;
  - duplicates: items with more than one run (0), runs not `complete` (0);
  - lost: items not done, done items without their run (0);
  - processes left: anything carrying one of the jobs' private data dirs (0).

    nice -n 10 .venv/bin/python benches/slurm_chaos.py [--events 8] [--seed 1] [--repeats 3]

Prints the counts and writes benches/results/slurm_chaos-<date>.md; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from runner_support import write_profile  # noqa: E402

from moe_tui.executors.dispatch import Dispatcher  # noqa: E402
from moe_tui.executors.slurm import SlurmExecutor, SlurmSettings  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402
from moe_tui.store.db import Store  # noqa: E402
from moe_tui.store.queue import RunQueue  # noqa: E402
from moe_tui.store.queue_plan import CampaignPlan  # noqa: E402
from tests.slurm import cluster as slurm_cluster  # noqa: E402

SPEC = {"input_len": 64, "output_len": 128, "num_prompts": 16}
DRAIN_TIMEOUT_S = 900.0


def left_behind(root: Path) -> list[str]:
    """Live processes whose private data dir (MOE_TUI_HOME) is under `root`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("MOE_TUI_HOME", "").startswith(str(root)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:120]}")
    return found


def running_jobs(cluster: slurm_cluster.Cluster) -> list[tuple[str, str]]:
    out = cluster.cmd("squeue", "-h", "-t", "RUNNING", "-o", "%i %N", check=False)
    return [(p[0], p[1]) for p in (line.split() for line in out.splitlines()) if len(p) == 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="moe-tui-slurm-chaos-"))
    cluster = slurm_cluster.start(root / "slurm", nodes=2)
    lines: list[str] = []
    kills: Counter[str] = Counter()
    t0 = time.monotonic()
    try:
        profiles = root / "p"
        profiles.mkdir()
        write_profile(profiles, "base", "flashinfer_cutlass", 31001, time_scale=20)
        write_profile(profiles, "cand", "flashinfer_cutedsl", 31002, time_scale=20)
        data, tmp = root / "data", root / "tmp"
        data.mkdir()
        tmp.mkdir()
        with Store(data / "moe-tui.sqlite3") as store:
            queue = RunQueue(store)
            plan = CampaignPlan(("base", "cand"), (8,), args.repeats, BenchmarkSpec.from_dict(SPEC, "chaos"), control=True)
            _, items = queue.add_campaign(plan, "slurm chaos")
            settings = SlurmSettings(gpus="exclusive", time_limit_s=600)
            executor = SlurmExecutor(lambda r: settings, env={**cluster.env, "TMPDIR": str(tmp)})
            d = Dispatcher(store, profiles, data, executor, poll_s=0.3, result_grace_s=1.0, max_attempts=50,
                           on_line=lines.append)
            d.adopt()
            next_event = time.monotonic() + rng.uniform(2, 6)
            resume: dict[str, float] = {}
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while time.monotonic() < deadline:
                busy = d.step()
                now = time.monotonic()
                for node, when in list(resume.items()):
                    if now >= when:
                        cluster.cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)
                        del resume[node]
                if sum(kills.values()) < args.events and now >= next_event:
                    jobs = running_jobs(cluster)
                    if jobs:
                        job, node = rng.choice(jobs)
                        if rng.random() < 0.5 or resume:  # never both nodes down at once
                            cluster.cmd("scancel", job, check=False)
                            kills["scancel"] += 1
                            print(f"{now - t0:6.1f} s  scancel job {job} on {node}", flush=True)
                        else:
                            cluster.cmd("scontrol", "update", f"nodename={node}", "state=down", "reason=chaos")
                            resume[node] = now + rng.uniform(1, 3)
                            kills["node down"] += 1
                            print(f"{now - t0:6.1f} s  node {node} DOWN under job {job}", flush=True)
                        next_event = now + rng.uniform(2, 6)
                if not busy and not resume and sum(kills.values()) >= args.events:
                    break
                time.sleep(d.poll_s)
            wall = time.monotonic() - t0
            states = Counter(i.state for i in queue.items())
            runs = store.query("SELECT queue_item_id, status FROM runs")
            per_item = Counter(r[0] for r in runs)
            done_without_run = store.query("SELECT COUNT(*) FROM queue_items WHERE state = 'done' AND run_id IS NULL")[0][0]
        time.sleep(1.0)  # a killed job's processes end with its step: give the last one its moment
        left = left_behind(root)
    finally:
        cluster.stop()
    counts = {
        "events": sum(kills.values()), "scancel": kills["scancel"], "node down": kills["node down"],
        "jobs submitted": d.counts["submitted"], "retries": d.counts["retried"], "items": len(items),
        "items done": states["done"], "runs stored": len(runs),
        "duplicates": sum(n - 1 for n in per_item.values() if n > 1),
        "runs not complete": sum(1 for _, s in runs if s != "complete"),
        "lost": len(items) - states["done"] + done_without_run, "processes left": len(left),
    }
    ok = (counts["duplicates"] == counts["lost"] == counts["processes left"] == counts["runs not complete"] == 0
          and counts["runs stored"] == len(items) and counts["events"] == args.events)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(f"{summary}; wall {wall:.0f} s; {'OK' if ok else 'FAILED'}")
    for proc in left:
        print(f"left: {proc}")
    date = time.strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO / "benches" / "results" / f"slurm_chaos-{date}.md"
    table = "\n".join(f"| {k} | {v} |" for k, v in counts.items())
    out.write_text(f"# Slurm chaos bench, {date}\n\n`benches/slurm_chaos.py --events {args.events} --seed {args.seed} "
                   f"--repeats {args.repeats}` on a 2-node test cluster (one host), campaign base vs cand, concurrency 8 "
                   f"and the control, {args.repeats} repeats ({len(items)} items, each sweep one job); wall {wall:.0f} s; "
                   f"{'all checks passed' if ok else 'A CHECK FAILED'}.\n\n| count | value |\n|---|---|\n{table}\n\n"
                   "Dispatcher lines with 'retried':\n\n" + "\n".join(f"- {x}" for x in lines if "retried" in x) + "\n")
    print(out)
    shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
