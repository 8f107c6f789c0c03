"""The TUI rows of benches/scale.py for two checkouts side by side, interleaved, on the same stores.

A shared box's load moves every figure by more than a change does: the two checkouts' fresh TUI
processes alternate (A B, then B A, ...) on each store size, and the table gives each one's
median of `--rounds` with the ratio. The same bench code measures both (`MOE_TUI_BENCH_TREE`
points the measured process at the other checkout's `moe_tui`).

    nice .venv/bin/python benches/scale_tui_vs.py --base /tmp/main-tree [--sizes 1000,10000] \\
        [--rounds 3] [--idle-s 10] [--dir /tmp/scale] --out-stem scale-tui-2core-<date>-w5
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
sys.path.insert(0, str(ROOT))

from benches.scale import build_store, tui_figures  # noqa: E402

ROWS = (  # (key, what, unit, goal)
    ("start_stall_ms", "event-loop stall, start incl. building the screens (max, wall)", "ms", "< 50 ms"),
    ("start_slice_cpu_ms", "longest event-loop callback at start, CPU", "ms", ""),
    ("prepared_s", "every screen built off screen, after start", "s", ""),
    ("queue_key_ms", "key `2` (Queue) to screen", "ms", "< 100 ms"),
    ("queue_visit_stall_ms", "event-loop stall, first visit to Queue (max, wall)", "ms", "< 50 ms"),
    ("queue_visit_slice_cpu_ms", "longest event-loop callback, first visit to Queue, CPU", "ms", ""),
    ("background_done_s", "the start's background reads done, after start", "s", ""),
    ("queue_idle_cpu_pct", "idle CPU on the Queue screen (after those)", "%", "< 2%"),
    ("queue_idle_stall_ms", "event-loop stall, idle on Queue (max, wall)", "ms", "< 50 ms"),
    ("grid_key_ms", "key `3` to the grid", "ms", "< 1 s"),
    ("grid_visit_stall_ms", "event-loop stall, first visit to the grid (max, wall)", "ms", "< 50 ms"),
    ("peak_rss_mb", "peak RSS", "MB", ""),
)


def _git_head(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or "(not a git checkout)"


def _median(trials: list[dict], key: str) -> float | None:
    values = [t[key] for t in trials if key in t]
    return statistics.median(values) if values else None


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} s" if unit == "s" else f"{value:.1f}%" if unit == "%" else f"{value:.0f} {unit}"


def table(sizes: list[dict], names: tuple[str, str]) -> list[str]:
    head = ["TUI", *(f"{s['runs']:,} runs: {n}" for s in sizes for n in (*names, "ratio")), "goal"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, what, unit, goal in ROWS:
        cells = []
        for s in sizes:
            a, b = _median(s["trials"][names[0]], key), _median(s["trials"][names[1]], key)
            cells += [_fmt(a, unit), _fmt(b, unit), f"{b / a:.2f}x" if a and b is not None else "-"]
        lines.append("| " + " | ".join([what, *cells, goal]) + " |")
    items = ", ".join(f"{_median(s['trials'][names[1]], 'queue_rows') or 0:,.0f}" for s in sizes)
    lines += ["", f"Queue items in the stores: {items}."]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the other checkout (e.g. main), measured first")
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--dir", default="/tmp/moe-tui-scale")
    parser.add_argument("--base-name", default="", help="what to call it (default: its git HEAD)")
    parser.add_argument("--this-name", default="", help="what to call this checkout (default: its git HEAD)")
    parser.add_argument("--out-stem", required=True)
    args = parser.parse_args()
    base, here = Path(args.base).resolve(), ROOT
    names = (args.base_name or f"base {_git_head(base)}", args.this_name or f"this {_git_head(here)}")
    sizes = []
    for n in (int(x) for x in args.sizes.split(",")):
        home, info = build_store(n, Path(args.dir))
        store = home / "data" / "moe-tui.sqlite3"
        trials: dict[str, list[dict]] = {names[0]: [], names[1]: []}
        loads = [os.getloadavg()[0]]
        for r in range(args.rounds):
            order = [(names[0], base), (names[1], here)]
            for name, tree in order if r % 2 == 0 else order[::-1]:
                figures = tui_figures(store, args.idle_s, tree)
                trials[name].append(figures)
                print(f"{info['runs']:,} runs, round {r + 1}, {name}: {figures}", flush=True)
            loads.append(os.getloadavg()[0])
        sizes.append({"runs": info["runs"], "trials": trials, "load_1min": loads})
        write(args, sizes, names)
    return 0


def write(args: argparse.Namespace, sizes: list[dict], names: tuple[str, str]) -> None:
    results = ROOT / "benches" / "results"
    date = datetime.date.today().isoformat()
    (results / f"{args.out_stem}.json").write_text(json.dumps(
        {"date": date, "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
         "names": names, "sizes": sizes}, indent=2) + "\n")
    loads = "; ".join(f"{s['runs']:,} runs: " + " / ".join(f"{x:.1f}" for x in s["load_1min"]) for s in sizes)
    md = [f"# Scale, the TUI rows: {names[0]} and {names[1]} side by side ({date})", "",
          f"Host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, shared with other "
          f"work (1-min load average before and after each round: {loads}). `benches/scale_tui_vs.py --base ... "
          f"--sizes {args.sizes} --rounds {args.rounds} --idle-s {args.idle_s:g}`: fresh TUI processes of the two "
          "checkouts alternate on the same stores; medians of the rounds. Wall-clock stalls include the time the "
          "loaded box did not run the process at all; the CPU rows (the longest single event-loop callback, this "
          "thread's CPU time) do not.", "", *table(sizes, names), ""]
    (results / f"{args.out_stem}.md").write_text("\n".join(md))
    print("\n".join(md), flush=True)


if __name__ == "__main__":
    sys.exit(main())
