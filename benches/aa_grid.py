"""A/A and power study of the comparison grid's rules, over synthetic repeats (no servers).

Runs `moe_tui.compare.build_grid_from_runs` on synthetic grids of 4 concurrencies (1, 2, 10, 64) x 6
metrics, with identical launch settings on both sides (only the MoE backend differs), for noise of 3%
and 6% (coefficient of variation per run), n = 3 and 5 repeats per side, and two noise models:
"correlated" (one factor per run moves every metric: a slow run has lower throughput and higher
latencies) and "independent" (each metric its own noise). Scenarios:
- A/A: no difference; rate of grids with any false primary verdict (target <= 5%) and any at all;
- +15% / +10%: the candidate is faster at concurrencies 10 and 64 (throughput up, latencies down);
  rate at which each affected primary cell says "better" (target >= 80% for +15% at 3%, n=3);
- env -10%: the candidate is 10% slower at every concurrency; rate of control "differs" (>= 90%);
- seed: -2.8% at concurrency 1, equal at 2 (the seed's honest pattern); rate of "differs" (<= 1%).

Usage: python benches/aa_grid.py [--grids N] [--out benches/results/aa_grid-2026-12-01.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui import judgement as J  # noqa: E402
from moe_tui.compare import METRICS, build_grid_from_runs  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402

CONCS = (1, 2, 10, 64)
BASE = {1: 10.36, 2: 19.29, 10: 38.5, 64: 220.0}
SPECS = {c: BenchmarkSpec(max_concurrency=c, num_prompts=max(10, 4 * c)) for c in CONCS}


def snapshot(backend: str) -> dict:
    return {"name": backend, "engine": "sglang", "model_path": "m", "moe_runner_backend": backend, "tp_size": 8,
            "ep_size": 8, "quantization": "fp4", "gpus": list(range(8)), "host": "127.0.0.1", "port": 30000,
            "extra_args": [], "env": {}, "python": "", "description": "", "sim": {}}


SNAPS = {"a": snapshot("flashinfer_cutlass"), "b": snapshot("flashinfer_cutedsl")}


def side_runs(rng: np.random.Generator, side: str, n: int, cv: float, correlated: bool,
              effect: dict[int, float], start: int) -> list[dict]:
    runs = []
    rid = start
    for conc in CONCS:
        spec = SPECS[conc]
        for _ in range(n):
            z = rng.standard_normal(len(METRICS))
            if correlated:
                z[:] = z[0]
            mult = 1.0 + effect.get(conc, 0.0)
            summary = {}
            for i, m in enumerate(METRICS):
                if m.higher_is_better:
                    summary[m.key] = BASE[conc] * mult * (1 + cv * z[i])
                else:  # latencies move the other way; the noise factor likewise
                    summary[m.key] = 100.0 * conc / mult * (1 - cv * z[i])
            summary["completed"], summary["failed"] = spec.num_prompts, 0
            runs.append({"id": rid, "fingerprint": spec.fingerprint, "spec": spec.canonical_dict(),
                         "summary": summary, "profile": SNAPS[side], "status": "complete", "profile_name": side})
            rid += 1
    return runs


def grid(rng, n, cv, correlated, effect_b=None, effect_a=None):
    a = side_runs(rng, "a", n, cv, correlated, effect_a or {}, 1)
    b = side_runs(rng, "b", n, cv, correlated, effect_b or {}, 10_000)
    return build_grid_from_runs(a, b, baseline_name="a", candidate_name="b")


def study(grids: int, n: int, cv: float, correlated: bool, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    res: dict[str, float] = {}
    fp = fa = 0
    for _ in range(grids):
        g = grid(rng, n, cv, correlated)
        verdicts = [c for c in g.cells if c.verdict in (J.BETTER, J.WORSE)]
        fp += any(c.primary for c in verdicts)
        fa += bool(verdicts)
    res["aa_any_false_primary"] = fp / grids
    res["aa_any_false"] = fa / grids
    for eff in (0.15, 0.10):
        hits = 0
        for _ in range(grids):
            g = grid(rng, n, cv, correlated, effect_b={10: eff, 64: eff})
            hits += sum(g.cell(c, "output_throughput").verdict == J.BETTER for c in (10, 64))
        res[f"power_{int(eff * 100)}"] = hits / (2 * grids)
    differs = 0
    for _ in range(grids):
        g = grid(rng, n, cv, correlated, effect_b={c: -0.10 for c in CONCS})
        differs += g.control.state == J.CONTROL_DIFFERS
    res["env10_differs"] = differs / grids
    differs = 0
    for _ in range(grids):
        g = grid(rng, n, cv, correlated, effect_b={1: -0.028})
        differs += g.control.state == J.CONTROL_DIFFERS
    res["seed_differs"] = differs / grids
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=400, help="grids per scenario and configuration")
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    args = ap.parse_args()
    rows = []
    started = time.perf_counter()
    for cv in (0.03, 0.06):
        for n in (3, 5):
            for correlated in (True, False):
                r = study(args.grids, n, cv, correlated, seed=int(cv * 1000) * 100 + n * 10 + correlated)
                rows.append((cv, n, "correlated" if correlated else "independent", r))
                print(f"cv {cv:.0%} n={n} {rows[-1][2]}: {r}", flush=True)
    elapsed = time.perf_counter() - started
    lines = [f"# A/A and power study of the grid rules ({args.date})", "",
             f"`python benches/aa_grid.py --grids {args.grids}`: {args.grids} synthetic grids per scenario and "
             "configuration (4 concurrencies x 6 metrics; only the MoE backend differs); "
             f"{elapsed:.0f} s on the shared 2-core dev box.", "",
             "Targets (issue 11): A/A any false primary verdict <= 5%; +15% at 3% noise, n=3 >= 80% per affected "
             "cell; env 10% slower -> control differs >= 90% (n=3, 3%); seed pattern -> differs <= 1%.", "",
             "| noise | n | noise model | A/A any false primary | A/A any false (all 24 cells) | power +15% | "
             "power +10% | env -10% differs | seed pattern differs |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for cv, n, model, r in rows:
        lines.append(f"| {cv:.0%} | {n} | {model} | {r['aa_any_false_primary']:.1%} | {r['aa_any_false']:.1%} | "
                     f"{r['power_15']:.1%} | {r['power_10']:.1%} | {r['env10_differs']:.1%} | "
                     f"{r['seed_differs']:.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
