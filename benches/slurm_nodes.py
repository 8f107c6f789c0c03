"""A campaign over 2 Slurm nodes against the same campaign over 1 node (issue 37: at most 60% of the wall),
node-blocked.

Starts a real Slurm on this host (`tests/slurm/cluster.py`, root and Debian's packages needed) with 1
node, works one emulator campaign through `executors.dispatch.Dispatcher` (one whole node a job, each
sweep one job), then the same with 2 nodes, alternating 1/2/1/2 for `--rounds` rounds. The campaign:
base vs cand (flashinfer_cutlass vs flashinfer_cutedsl), concurrency 8 and the control (2), `--repeats`
repeats, ABBA order, both profiles on one `--sim-seed`. With node blocks (`node_blocks`: repeat r on
node r mod n, `sbatch --nodelist`) each repeat block, both sides and the control, runs on one node.
Per run it prints the wall, where each block ran (from the runs' recorded hostnames) and the grid's
verdicts (`moe-tui compare --format json`: each cell against its control on its own starts); at the
end the medians and their ratio, and writes them under benches/results/slurm_nodes-<date>.json.

    nice -n 10 .venv/bin/python benches/slurm_nodes.py [--rounds 2] [--repeats 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

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
COMPARED = ("output_throughput", "mean_tpot_ms", "mean_itl_ms", "mean_e2e_latency_ms")


def verdicts(home: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "moe_tui", "compare", "base", "cand", "--format", "json"],
                         env={**os.environ, "MOE_TUI_HOME": str(home)}, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"compare failed: {out.stdout}{out.stderr}")
    return {f"{c['metric']}@{c['concurrency']}": [c["verdict"], c["uncontrolled"], c["control_starts"]]
            for c in json.loads(out.stdout)["cells"] if c["metric"] in COMPARED}


def one(nodes: int, repeats: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"moe-tui-bench-slurm{nodes}-"))
    cluster = slurm_cluster.start(root / "slurm", nodes=nodes)
    try:
        profiles = root / "p"
        profiles.mkdir()
        write_profile(profiles, "base", "flashinfer_cutlass", 31001, time_scale=20, seed=7)
        write_profile(profiles, "cand", "flashinfer_cutedsl", 31002, time_scale=20, seed=7)
        data = root / "data"
        data.mkdir()
        (root / "tmp").mkdir()
        with Store(data / "moe-tui.sqlite3") as store:
            queue = RunQueue(store)
            plan = CampaignPlan(("base", "cand"), (8,), repeats, BenchmarkSpec.from_dict(SPEC, "bench"), control=True)
            _, items = queue.add_campaign(plan, "nodes bench")
            settings = SlurmSettings(gpus="exclusive", time_limit_s=600)
            executor = SlurmExecutor(lambda r: settings, env={**cluster.env, "TMPDIR": str(root / "tmp")})
            d = Dispatcher(store, profiles, data, executor, poll_s=0.3, result_grace_s=1.0, node_blocks=cluster.nodes)
            t0 = time.monotonic()
            d.adopt()
            while d.step():
                time.sleep(d.poll_s)
            wall = time.monotonic() - t0
            done = queue.counts()["done"]
            if done != len(items):
                raise SystemExit(f"{nodes} node(s): only {done} of {len(items)} items done")
            placed = store.query("SELECT r.profile_name, q.repeat_index, json_extract(r.provenance_json, '$.host.hostname'),"
                                 " r.server_start_id FROM runs r JOIN queue_items q ON q.id = r.queue_item_id")
        blocks: dict[int, set[str]] = {}
        for _, repeat, host, _ in placed:
            blocks.setdefault(repeat, set()).add(host)
        starts = Counter((p, h) for p, h, _ in {(p, h, s) for p, _, h, s in placed})
        return {"nodes": nodes, "wall_s": wall, "items": len(items), "jobs": d.counts["submitted"],
                "block_nodes": {str(r): sorted(h) for r, h in sorted(blocks.items())},
                "starts_per_side_and_node": {f"{p}@{h}": n for (p, h), n in sorted(starts.items())},
                "verdicts": verdicts(root)}
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=4, help="the campaign's repeats (blocks); a multiple of 2")
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        for nodes in (1, 2):
            runs.append(one(nodes, args.repeats))
            r = runs[-1]
            print(f"{nodes} node(s): {r['wall_s']:.1f} s for {r['items']} items in {r['jobs']} jobs; blocks on "
                  f"{r['block_nodes']}; starts {r['starts_per_side_and_node']}", flush=True)
            print(f"  verdicts: {json.dumps(r['verdicts'])}", flush=True)
    walls = {n: [r["wall_s"] for r in runs if r["nodes"] == n] for n in (1, 2)}
    m1, m2 = statistics.median(walls[1]), statistics.median(walls[2])
    ratio = m2 / m1
    blocked = all(len(h) == 1 for r in runs for h in r["block_nodes"].values())
    same = all(r["verdicts"] == runs[0]["verdicts"] for r in runs)
    print(f"median wall: 1 node {m1:.1f} s, 2 nodes {m2:.1f} s; 2-node / 1-node = {ratio:.0%} (target <= 60%); "
          f"every block on one node: {blocked}; the same verdicts in every run: {same}")
    date = time.strftime("%Y-%m-%d")
    out = REPO / "benches" / "results" / f"slurm_nodes-{date}.json"
    out.write_text(json.dumps({"date": date, "host": f"{os.cpu_count()} cores", "repeats": args.repeats,
                               "walls_s": walls, "median_1": m1, "median_2": m2, "ratio": ratio,
                               "every_block_on_one_node": blocked, "same_verdicts": same, "runs": runs},
                              indent=1) + "\n")
    print(out)
    return 0 if ratio <= 0.6 and blocked and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
