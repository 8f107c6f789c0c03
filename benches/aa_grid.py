"""Adversarial A/A and power study of the comparison grid's rules, over synthetic server starts (no servers).

Each grid: concurrencies 1, 2 (the control), 16, 64, 256, 1024 x three metrics (output throughput, the
primary family; mean TTFT and mean TPOT, the secondary). Both sides have identical launch settings
(only the MoE backend differs). A side's evidence is server starts: each start draws an offset
(start-to-start noise, the unit) and every run on it its own small noise (run noise); every start runs
every concurrency once, and the control concurrency gets the extra control-only starts the campaign
plan adds (`queue_plan.control_starts_needed`). Starts alternate A, B, A, B in time (interleaved)
unless a row says grouped. Values are log-normal around the base (a slow start is slow on every metric).

Rows (each `--grids` grids, default 500; a "false verdict" is any better/worse in an A/A grid, reported
for the whole grid (both families) with the control gate on, and with uncontrolled verdicts accepted):
- equal noise 1.5% a start; noise growing 3x from c=1 to c=1024; t(3) noise (heavy tails);
- starts shared 3+1 and 2x2 (4 runs on 2 starts a side, start noise 2%, run noise 0.3%);
- 4% drift over the campaign with grouped order (all baseline starts, then all candidate starts);
- re-running until better: 3 starts a side, then one more a side at a time up to 10, stopping at the
  first better/worse (the grid's plan is each run's own; no sequential correction is applied);
- a 5% slower environment (the candidate's machine) with and without the control concurrency;
- power: +15% at c >= 16, start noise 3% there (1.5% at the control), 3 starts a side interleaved;
- the seed's pattern: control equal, c=16 +67%, c=1024 -48%, at 1.5% noise: both verdicts kept.

Usage: nice python benches/aa_grid.py [--grids 500] [--out benches/results/aa_grid-2026-12-02.md]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui import judgement as J  # noqa: E402
from moe_tui.compare import METRIC_BY_KEY, CompareSettings, build_grid_from_runs  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402
from moe_tui.store.queue_plan import control_starts_needed  # noqa: E402

CONCS = (1, 2, 16, 64, 256, 1024)
CONTROL = 2
METRICS = tuple(METRIC_BY_KEY[k] for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"))
BASE = {1: 10.4, 2: 19.3, 16: 120.0, 64: 220.0, 256: 600.0, 1024: 1100.0}
SPECS = {c: BenchmarkSpec(max_concurrency=c, num_prompts=max(128, 2 * c)) for c in CONCS}
ACCEPT = CompareSettings(accept_uncontrolled=True)
CONTROL_STARTS = control_starts_needed(J.CONTROL_PLAN_NOISE_PCT, J.CONTROL_MARGIN_PCT)


def snapshot(backend: str) -> dict:
    return {"name": backend, "engine": "sglang", "model_path": "m", "moe_runner_backend": backend, "tp_size": 8,
            "ep_size": 8, "quantization": "fp4", "gpus": list(range(8)), "host": "127.0.0.1", "port": 30000,
            "extra_args": [], "env": {}, "python": "", "description": "", "sim": {}}


SNAPS = {"a": snapshot("flashinfer_cutlass"), "b": snapshot("flashinfer_cutedsl")}


class Scenario:
    """How one grid's evidence is drawn."""

    def __init__(self, *, starts: int = 3, start_cv: float = 0.015, run_cv: float = 0.005, growth: float = 1.0,
                 heavy: bool = False, shared: tuple[int, ...] | None = None, drift: float = 0.0,
                 grouped: bool = False, effect: dict[int, float] | None = None, env: float = 0.0,
                 control: bool = True, cv_by_conc: dict[int, float] | None = None) -> None:
        self.starts, self.start_cv, self.run_cv, self.growth = starts, start_cv, run_cv, growth
        self.heavy, self.shared, self.drift, self.grouped = heavy, shared, drift, grouped
        self.effect, self.env, self.control = effect or {}, env, control
        self.cv_by_conc = cv_by_conc or {}

    def noise(self, rng: np.random.Generator) -> float:
        if self.heavy:  # Student t(3) scaled to unit variance
            return float(rng.standard_t(3) / math.sqrt(3.0))
        return float(rng.standard_normal())

    def cv(self, conc: int) -> float:
        if conc in self.cv_by_conc:
            return self.cv_by_conc[conc]
        # growth g: the noise multiplies by g from c=1 to c=1024, log-linearly
        return self.start_cv * self.growth ** (math.log2(conc) / 10.0)


class Builder:
    def __init__(self, rng: np.random.Generator, sc: Scenario) -> None:
        self.rng, self.sc = rng, sc
        self.runs: dict[str, list[dict]] = {"a": [], "b": []}
        self.next_id = self.next_start = 1
        self.clock = 1_000_000.0

    def start(self, side: str, concs: tuple[int, ...], runs_per_start: int = 1, when: float | None = None) -> None:
        sc = self.sc
        sid, self.next_start = self.next_start, self.next_start + 1
        offset = {c: self.sc.noise(self.rng) for c in concs}
        t = self.clock if when is None else when
        self.clock += 600.0
        horizon = max(1.0, self.total_time)
        for c in concs:
            mult = (1.0 + (sc.effect.get(c, 0.0) if side == "b" else 0.0)) * (1.0 - (sc.env if side == "b" else 0.0))
            mult *= 1.0 - sc.drift * (t - 1_000_000.0) / horizon
            for _ in range(runs_per_start):
                z = math.exp(sc.cv(c) * offset[c] + sc.run_cv * self.sc.noise(self.rng))
                summary = {"output_throughput": BASE[c] * mult * z, "mean_ttft_ms": 50.0 * c / mult / z,
                           "mean_tpot_ms": 20.0 / mult / z, "completed": SPECS[c].num_prompts,
                           "total_output_tokens": SPECS[c].num_prompts * SPECS[c].output_len, "failed": 0}
                self.runs[side].append({
                    "id": self.next_id, "fingerprint": SPECS[c].fingerprint, "spec": SPECS[c].canonical_dict(),
                    "summary": summary, "profile": SNAPS[side], "status": "complete", "profile_name": side,
                    "server_start_id": sid, "started_at": t - 60.0, "finished_at": t})
                self.next_id += 1

    total_time = 0.0

    def grid(self, settings: CompareSettings | None = None):
        return build_grid_from_runs(self.runs["a"], self.runs["b"], baseline_name="a", candidate_name="b",
                                    metrics=METRICS, settings=settings)


def draw(rng: np.random.Generator, sc: Scenario) -> Builder:
    b = Builder(rng, sc)
    concs = CONCS if sc.control else tuple(c for c in CONCS if c not in J.CONTROL_CONCURRENCIES)
    extra = max(0, CONTROL_STARTS - sc.starts) if sc.control else 0
    b.total_time = 600.0 * 2 * (sc.starts + extra)
    order = ([("a", i) for i in range(sc.starts)] + [("b", i) for i in range(sc.starts)] if sc.grouped
             else [(s, i) for i in range(sc.starts) for s in ("a", "b")])
    for side, i in order:
        if sc.shared:
            # uneven starts: a start holds `shared[i]` runs of each concurrency
            if i < len(sc.shared):
                b.start(side, concs, runs_per_start=sc.shared[i])
        else:
            b.start(side, concs)
    ctl = ([("a", i) for i in range(extra)] + [("b", i) for i in range(extra)] if sc.grouped
           else [(s, i) for i in range(extra) for s in ("a", "b")])
    for side, _ in ctl:
        b.start(side, (CONTROL,))
    return b


def false_verdicts(g) -> tuple[bool, bool]:
    """(as shipped, accepting uncontrolled), from one grid built accepting uncontrolled verdicts: a cell
    the gate would withhold carries the reason in `uncontrolled`, so one build answers both."""
    shown = [c for c in g.cells if c.verdict in (J.BETTER, J.WORSE)]
    return any(not c.uncontrolled for c in shown), bool(shown)


def rate(grids: int, seed: int, sc: Scenario, judge: Callable[[Builder], tuple[float, float]]) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    hits = [0.0, 0.0]
    for _ in range(grids):
        gated, accepted = judge(draw(rng, sc))
        hits[0] += gated
        hits[1] += accepted
    return hits[0] / grids, hits[1] / grids


def aa(b: Builder) -> tuple[float, float]:
    return false_verdicts(b.grid(ACCEPT))


def peeking(b: Builder) -> tuple[float, float]:
    """Re-run until better: one more start a side at a time up to 10, stop at the first verdict."""
    out = [False, False]
    for n in range(b.sc.starts, 11):
        if n > b.sc.starts:
            for side in ("a", "b"):
                b.start(side, CONCS)
        gated, accepted = false_verdicts(b.grid(ACCEPT))
        out = [out[0] or gated, out[1] or accepted]
        if accepted:  # the accepting user stops here; the gated user would too at a gated verdict
            break
    return out[0], out[1]


def power(b: Builder) -> tuple[float, float]:
    """Share of the affected throughput cells (c >= 16) that say better."""
    g = b.grid(ACCEPT)
    cells = [g.cell(c, "output_throughput") for c in (16, 64, 256, 1024)]
    return (sum(c.verdict == J.BETTER and not c.uncontrolled for c in cells) / 4,
            sum(c.verdict == J.BETTER for c in cells) / 4)


def seed_pattern(b: Builder) -> tuple[float, float]:
    g = b.grid(ACCEPT)
    hi, lo = g.cell(16, "output_throughput"), g.cell(1024, "output_throughput")
    kept = hi.verdict == J.BETTER and lo.verdict == J.WORSE
    return kept and not (hi.uncontrolled or lo.uncontrolled), kept


ROWS: tuple[tuple[str, Scenario, Callable, str], ...] = (
    ("A/A, equal noise 1.5% a start, 3 starts a side", Scenario(), aa, "<= 5%"),
    ("A/A, noise growing 3x from c=1 to c=1024", Scenario(growth=3.0), aa, "<= 5%"),
    ("A/A, t(3) noise", Scenario(heavy=True), aa, "<= 5%"),
    ("A/A, starts shared 3+1 (2% start noise)", Scenario(starts=2, shared=(3, 1), start_cv=0.02, run_cv=0.003),
     aa, "<= 5%"),
    ("A/A, starts shared 2x2 (2% start noise)", Scenario(starts=2, shared=(2, 2), start_cv=0.02, run_cv=0.003),
     aa, "<= 5%"),
    ("A/A, 4% drift, grouped order", Scenario(drift=0.04, grouped=True), aa, "<= 5%"),
    ("A/A, re-running until better, up to n=10", Scenario(), peeking, "<= 5%"),
    ("A/A, re-running until better, up to n=10, 3% noise", Scenario(start_cv=0.03), peeking, "<= 5%"),
    ("candidate env 5% slower, control concurrency planned", Scenario(env=0.05), aa, "<= 5%"),
    ("candidate env 5% slower, no control concurrency", Scenario(env=0.05, control=False), aa, "<= 5%"),
    ("power: +15% at c>=16, 3% noise there, 3 starts a side",
     Scenario(effect={c: 0.15 for c in (16, 64, 256, 1024)}, cv_by_conc={16: 0.03, 64: 0.03, 256: 0.03, 1024: 0.03}),
     power, ">= 80%"),
    ("seed pattern: control equal, c=16 +67%, c=1024 -48%", Scenario(effect={16: 0.67, 1024: -0.48}),
     seed_pattern, "kept (>= 80%)"),
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", type=int, default=500, help="grids per row")
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    ap.add_argument("--only", default=None, help="run only rows whose name contains this")
    args = ap.parse_args()
    started = time.perf_counter()
    results = []
    for i, (name, sc, judge, target) in enumerate(ROWS):
        if args.only and args.only not in name:
            continue
        gated, accepted = rate(args.grids, 2026_12_02 + 7919 * i, sc, judge)
        results.append((name, target, gated, accepted))
        print(f"{name}: gated {gated:.1%}, accepting uncontrolled {accepted:.1%} (target {target})", flush=True)
    elapsed = time.perf_counter() - started
    lines = [f"# Adversarial A/A and power study of the grid rules ({args.date})", "",
             f"`nice python benches/aa_grid.py --grids {args.grids}`: {args.grids} synthetic grids a row "
             f"(concurrencies {', '.join(map(str, CONCS))} x output tok/s, mean TTFT, mean TPOT; control at "
             f"c={CONTROL} with {CONTROL_STARTS} starts a side as planned); seeds 20261202 + 7919 x row; "
             f"{elapsed:.0f} s on one core of the shared 2-core dev box.", "",
             "A false verdict is any better/worse in a grid with no true effect (both families). 'gated' is the "
             "grid as shipped (a verdict needs the control to agree); 'accepting uncontrolled' is "
             "`--accept-uncontrolled` (the statistics alone).", "",
             "| scenario | target | gated | accepting uncontrolled |", "|---|---|---:|---:|"]
    lines += [f"| {n} | {t} | {g:.1%} | {a:.1%} |" for n, t, g, a in results]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
