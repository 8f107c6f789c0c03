"""Two trees' `tui_overhead` trials side by side: one result file from single-trial runs of each.

On a shared box single figures move by more than the differences that matter, so the two trees
are measured in the same session, their trials interleaved (A, B, A, B, ...), each trial a fresh
process running that tree's own benches/tui_overhead.py with `--trials 1`. This script only
gathers those JSON files: CPU as the median of the trials, key latencies as every trial's p99 and
the worst of them, the pushed screens' first / second opens of every trial.

    for i in 1 2 3; do
      (cd BRANCH && python benches/tui_overhead.py --trials 1 --out-stem ab-branch-$i)
      (cd BASE   && python benches/tui_overhead.py --trials 1 --out-stem ab-base-$i)   # a scratch copy of main
    done
    python benches/tui_overhead_ab.py --base BASE/benches/results/ab-base-{1,2,3}.json \\
        --branch BRANCH/benches/results/ab-branch-{1,2,3}.json --base-name "main 7aca54a" \\
        --branch-name "i23scr c409659" --out-stem tui_overhead-2core-<date>-w5
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU = (("idle_cpu_pct", "CPU idle, readings repeat (% of a core)", 2.0),
       ("idle_busy_gpus_cpu_pct", "CPU idle, GPU utilisation changing each second", 2.0),
       ("live_cpu_pct", "CPU live (% of a core)", 6.0))


def summary(trials: list[dict]) -> dict:
    out: dict = {key: round(statistics.median(t[key] for t in trials), 2) for key, _, _ in CPU}
    out |= {f"{key}_trials": [t[key] for t in trials] for key, _, _ in CPU}
    out["key_p50_ms_trials"] = [t["key_p50_ms"] for t in trials]
    out["key_p99_ms_trials"] = [t["key_p99_ms"] for t in trials]
    out["key_p99_ms_worst"] = max(t["key_p99_ms"] for t in trials)
    out["first_visit_ms"] = [v for t in trials for v in t["first_visit_ms"]]
    out["pushed_ms"] = {name: [pair for t in trials for pair in t["pushed_ms"][name]] for name in trials[0]["pushed_ms"]}
    out["pushed_worst_ms"] = {name: max(max(p) for p in pairs) for name, pairs in out["pushed_ms"].items()}
    return out


def markdown(result: dict) -> str:
    base, branch = result["base"], result["branch"]
    bn, rn = result["base_name"], result["branch_name"]
    ok = lambda v, g: "ok" if v < g else "MISSED"  # noqa: E731
    lines = [
        f"# TUI overhead side by side, {result['date']}",
        "",
        f"Machine: {result['machine']}; {result['terminal']}. {bn} and {rn}, {result['trials']} single-trial runs each,",
        "interleaved in one session (each a fresh process running its own tree's benches/tui_overhead.py,",
        "same load: 8 GPUs at 1 Hz, a concurrency-1024 run's progress at 4 Hz, log lines at 10 Hz).",
        "The box is shared with other agents' work: compare the columns, not the figures with other files.",
        "",
        f"| measure | {bn} | {rn} | goal | {rn} |",
        "|---|---|---|---|---|",
    ]
    for key, label, goal in CPU:
        lines.append(f"| {label}, median (trials) | {base[key]} ({', '.join(map(str, base[key + '_trials']))}) | "
                     f"{branch[key]} ({', '.join(map(str, branch[key + '_trials']))}) | < {goal} | {ok(branch[key], goal)} |")
    lines += [
        f"| key to screen p50 (ms), per trial | {', '.join(map(str, base['key_p50_ms_trials']))} | "
        f"{', '.join(map(str, branch['key_p50_ms_trials']))} | | |",
        f"| key to screen p99 (ms) with first visits, per trial | {', '.join(map(str, base['key_p99_ms_trials']))} | "
        f"{', '.join(map(str, branch['key_p99_ms_trials']))} | < 100 | {ok(branch['key_p99_ms_worst'], 100)} |",
        f"| first visits (ms) | {', '.join(map(str, base['first_visit_ms']))} | "
        f"{', '.join(map(str, branch['first_visit_ms']))} | | |",
    ]
    for name, pairs in branch["pushed_ms"].items():
        fmt = lambda ps: ", ".join(f"{a} / {b}" for a, b in ps)  # noqa: E731
        lines.append(f"| pushed screen `{name}`: first / second open (ms), per trial | {fmt(base['pushed_ms'][name])} | "
                     f"{fmt(pairs)} | < 100 | {ok(branch['pushed_worst_ms'][name], 100)} |")
    lines.append("")
    if result.get("note"):
        lines += [result["note"], ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", nargs="+", required=True, type=Path)
    parser.add_argument("--branch", nargs="+", required=True, type=Path)
    parser.add_argument("--base-name", default="base")
    parser.add_argument("--branch-name", default="branch")
    parser.add_argument("--out-stem", required=True)
    parser.add_argument("--note", default="")
    ns = parser.parse_args()
    base = [json.loads(p.read_text()) for p in ns.base]
    branch = [json.loads(p.read_text()) for p in ns.branch]
    first = branch[0]
    result = {"date": first["date"], "machine": first["machine"], "python": first["python"],
              "terminal": first["terminal"], "seconds_per_phase": first["seconds_per_phase"],
              "trials": len(branch), "base_name": ns.base_name, "branch_name": ns.branch_name,
              "base": summary(base), "branch": summary(branch), "note": ns.note,
              "base_trials": base, "branch_trials": branch}
    out = ROOT / "benches" / "results" / ns.out_stem
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
