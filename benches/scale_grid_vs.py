"""The grid of the latest campaign's pair (benches/scale.py's row) for two checkouts side by side, interleaved.

Issue 26: the latest campaign's two profiles hold thousands of runs a side at 100k runs. Each trial
is a fresh process of `benches/scale.py --grid-pair` pointed at one checkout (`MOE_TUI_BENCH_TREE`),
the checkouts alternating (A B, then B A, ...) so a shared box's load falls on both alike; the table
gives each one's median CPU over `--rounds` and the ratio. Stores as `benches/scale.py` builds them
(`--dir`, one folder per size).

    nice .venv/bin/python benches/scale_grid_vs.py --base /work/main [--sizes 1000,10000,100000] \\
        [--rounds 3] [--dir /tmp/scale] --out-stem scale-grid-2core-<date>-w5
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git_head(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "(not a git checkout)"


def trial(store: Path, tree: Path) -> dict:
    env = dict(os.environ, MOE_TUI_BENCH_TREE=str(tree))
    out = subprocess.run([sys.executable, str(ROOT / "benches" / "scale.py"), "--grid-pair", str(store), "--repeats", "1"],
                         capture_output=True, text=True, timeout=1800, env=env, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not Path(result["tree"]).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"measured {result['tree']}, not the checkout {tree}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the other checkout (e.g. main)")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/moe-tui-scale")
    parser.add_argument("--out-stem", default=f"scale-grid-{datetime.date.today().isoformat()}")
    args = parser.parse_args()
    trees = {"base": Path(args.base), "this": ROOT}
    heads = {k: _git_head(t) for k, t in trees.items()}
    rows = []
    for size in args.sizes.split(","):
        store = Path(args.dir) / size / "data" / "moe-tui.sqlite3"
        trials: dict[str, list[dict]] = {"base": [], "this": []}
        for r in range(args.rounds):
            for key in ("base", "this") if r % 2 == 0 else ("this", "base"):
                trials[key].append(trial(store, trees[key]))
        med = {k: statistics.median(t["latest_pair_grid_cpu_ms"] for t in v) for k, v in trials.items()}
        rows.append({"size": size, "runs": trials["this"][0]["latest_pair_runs"], "median_cpu_ms": med,
                     "trials_cpu_ms": {k: [t["latest_pair_grid_cpu_ms"] for t in v] for k, v in trials.items()},
                     "ratio": med["this"] / med["base"], "load": os.getloadavg()[0]})
        print(json.dumps(rows[-1]), flush=True)
    date = datetime.date.today().isoformat()
    out = ROOT / "benches" / "results"
    (out / f"{args.out_stem}.json").write_text(json.dumps(
        {"date": date, "host": platform.node(), "cpus": os.cpu_count(), "heads": heads, "rows": rows}, indent=2) + "\n")
    md = [f"# The grid of the latest campaign's pair, {heads['base']} (base) vs {heads['this']} (this), {date}", "",
          f"Host: {platform.node()}, {os.cpu_count()} CPUs (shared with other work), Python "
          f"{platform.python_version()}; `benches/scale_grid_vs.py --sizes {args.sizes} --rounds {args.rounds}`. "
          "CPU of a cold grid in a warm process (`benches/scale.py --grid-pair`), median of the rounds, "
          "the checkouts interleaved.", "",
          "| store | pair's runs | base | this | this / base | load (1 min) |", "|---|---|---|---|---|---|"]
    md += [f"| {r['size']} | {r['runs']:,.0f} | {r['median_cpu_ms']['base']:.0f} ms | {r['median_cpu_ms']['this']:.0f} ms "
           f"| {r['ratio']:.2f}x | {r['load']:.1f} |" for r in rows]
    (out / f"{args.out_stem}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
