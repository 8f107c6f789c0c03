"""A campaign over 2 Slurm nodes against the same campaign over 1 node (issue 37: at most 60% of the wall).

Starts a real Slurm on this host (`tests/slurm/cluster.py`, root and Debian's packages needed) with 1
node, works a campaign of emulator items through `executors.dispatch.Dispatcher` (one whole node a job),
then the same with 2 nodes, alternating 1/2/1/2 for `--repeats` rounds; prints each wall, the medians
and their ratio, and writes them under benches/results/slurm_nodes-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from runner_support import write_profile  # noqa: E402

from moe_tui.executors.dispatch import Dispatcher  # noqa: E402
from moe_tui.executors.slurm import SlurmExecutor, SlurmSettings  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402
from moe_tui.store.db import Store  # noqa: E402
from moe_tui.store.queue import RunQueue  # noqa: E402
from tests.slurm import cluster as slurm_cluster  # noqa: E402


def one(nodes: int, items: int) -> float:
    root = Path(tempfile.mkdtemp(prefix=f"moe-tui-bench-slurm{nodes}-"))
    cluster = slurm_cluster.start(root / "slurm", nodes=nodes)
    try:
        profiles = root / "p"
        profiles.mkdir()
        write_profile(profiles, "base", "flashinfer_cutlass", 31001, time_scale=20)
        write_profile(profiles, "cand", "flashinfer_cutedsl", 31002, time_scale=20)
        data = root / "data"
        data.mkdir()
        with Store(data / "moe-tui.sqlite3") as store:
            queue = RunQueue(store)
            spec = BenchmarkSpec.from_dict({"input_len": 64, "output_len": 128, "num_prompts": 16, "max_concurrency": 2}, "bench")
            for i in range(items):
                queue.add_item("base" if i % 2 == 0 else "cand", spec, repeat_index=i // 2)
            settings = SlurmSettings(gpus="exclusive", time_limit_s=600)
            executor = SlurmExecutor(lambda r: settings, env={**cluster.env, "TMPDIR": str(root / "tmp")})
            (root / "tmp").mkdir()
            d = Dispatcher(store, profiles, data, executor, poll_s=0.3, result_grace_s=1.0)
            t0 = time.monotonic()
            d.adopt()
            while d.step():
                time.sleep(d.poll_s)
            wall = time.monotonic() - t0
            done = queue.counts()["done"]
            if done != items:
                raise SystemExit(f"{nodes} node(s): only {done} of {items} items done")
            return wall
    finally:
        cluster.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    walls: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for nodes in (1, 2):
            walls[nodes].append(one(nodes, args.items))
            print(f"{nodes} node(s): {walls[nodes][-1]:.1f} s for {args.items} items", flush=True)
    m1, m2 = statistics.median(walls[1]), statistics.median(walls[2])
    ratio = m2 / m1
    print(f"median wall: 1 node {m1:.1f} s, 2 nodes {m2:.1f} s; 2-node / 1-node = {ratio:.0%} (target <= 60%)")
    out = REPO / "benches" / "results" / f"slurm_nodes-{time.strftime('%Y-%m-%d')}.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "items": args.items, "walls_s": walls,
                               "median_1": m1, "median_2": m2, "ratio": ratio}, indent=1) + "\n")
    return 0 if ratio <= 0.6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
