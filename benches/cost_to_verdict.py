"""The least cost to a trustworthy verdict: the seed question replayed on the emulator's noise model.

Designs, each over `--grids` draws of `grid_sim` (start noise, run jitter, noise growing with concurrency,
drift over the campaign; every start a sweep with concurrency 2 inside, ABBA order), judged by the grid
code as shipped:
- fixed k: k server starts a side, every concurrency on each, one look at alpha 0.05;
- sequential: looks after 2, 3, ..., `--max-starts` starts a side; each new start is a sweep of concurrency
  2 plus only the cells still undecided; every look judges at alpha 0.05 / (number of looks) (Bonferroni
  over the looks: the family-wise false-verdict rate stays at most 0.05 however the looks fall, a
  conservative group-sequential boundary); a cell is settled by a better/worse verdict or by an interval
  wholly inside the minimum effect (no practical difference), and given up as 'not settled' once neither is
  in reach at the cap (futility: the estimate lies closer to the minimum effect than the interval's
  half-width at the cap); the plan stops when no primary cell is open.

Reported per design: server starts and emulated box-minutes (the model's time to serve each run's
prompts, summed), the share of primary cells settled, the seed's four big cells right (10 and 64 better,
256 and 1024 worse), false verdicts in the same design's A/A grids, and power at +15% (3% start noise).

Usage: nice python benches/cost_to_verdict.py [--grids 200] [--out benches/results/cost_to_verdict-DATE.md]
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
from grid_sim import CONTROL, SEED_CONCS, SEED_EFFECT, Builder, Scenario, publish, study_args, verdicts

from moe_tui import judgement as J
from moe_tui.compare import CompareSettings
from moe_tui.compare.model import ComparisonGrid

FUTILITY = False  # set by --futility
NOISE = dict(start_cv=0.015, run_cv=0.005, growth=2.0, drift=0.02)
SEED = Scenario(concs=SEED_CONCS, effect=dict(SEED_EFFECT), **NOISE)  # type: ignore[arg-type]
AA = Scenario(concs=SEED_CONCS, **NOISE)  # type: ignore[arg-type]
POWER = Scenario(concs=SEED_CONCS, effect={c: 0.15 for c in (10, 64, 256, 1024)},
                 cv_by_conc={c: 0.03 for c in (10, 64, 256, 1024)}, **NOISE)  # type: ignore[arg-type]
BIG_FOUR = {10: J.BETTER, 64: J.BETTER, 256: J.WORSE, 1024: J.WORSE}


def settled(g: ComparisonGrid, conc: int, min_effect: float) -> bool:
    c = g.cell(conc, "output_throughput")
    if c.verdict in (J.BETTER, J.WORSE):
        return True
    return (c.verdict == J.WITHIN_NOISE and c.ci_low_pct is not None and c.ci_high_pct is not None
            and -min_effect < c.ci_low_pct and c.ci_high_pct < min_effect)


def futile(g: ComparisonGrid, conc: int, min_effect: float, cap: int) -> bool:
    """Neither a verdict nor an interval inside the minimum effect is in reach at the cap: the standard error
    (the interval's half-width over its t quantile) shrinks as 1/sqrt(starts), and at `cap` starts a side its
    quantile is taken at the cap's degrees of freedom; a cell whose estimate sits closer to the minimum effect
    than that projected half-width is reported 'not settled' and gets no more starts."""
    from moe_tui.compare.stats import t_ppf

    c = g.cell(conc, "output_throughput")
    if (c.delta_pct is None or c.ci_low_pct is None or c.ci_high_pct is None or c.df is None
            or c.ci_confidence is None):
        return False
    n = min(c.n_starts_baseline, c.n_starts_candidate)
    q = 0.5 + c.ci_confidence / 2.0
    se = (c.ci_high_pct - c.ci_low_pct) / 2 / t_ppf(q, c.df)
    half_at_cap = t_ppf(q, 2 * cap - 2) * se * (n / cap) ** 0.5
    return abs(abs(c.delta_pct) - min_effect) < half_at_cap


def primary(sc: Scenario) -> list[int]:
    return [c for c in sc.concs if c != CONTROL]


def fixed(k: int) -> Callable[[np.random.Generator, Scenario], tuple[Builder, ComparisonGrid]]:
    def run(rng: np.random.Generator, sc: Scenario) -> tuple[Builder, ComparisonGrid]:
        b = Builder(rng, dataclasses.replace(sc, starts=k))
        for i in range(k):
            for side in (("a", "b") if i % 2 == 0 else ("b", "a")):
                b.start(side)
        return b, b.grid(CompareSettings())
    return run


def sequential(looks: tuple[tuple[int, float], ...]) -> Callable[[np.random.Generator, Scenario],
                                                                tuple[Builder, ComparisonGrid]]:
    """Looks at (starts a side, alpha) with the alphas summing to at most FAMILY_ALPHA (Bonferroni over the
    looks: valid however the looks depend on each other); after a look only the undecided cells (and
    concurrency 2) run on the next starts."""
    assert sum(a for _, a in looks) <= J.FAMILY_ALPHA + 1e-12
    cap = looks[-1][0]

    def run(rng: np.random.Generator, sc: Scenario) -> tuple[Builder, ComparisonGrid]:
        b = Builder(rng, dataclasses.replace(sc, starts=cap))
        open_cells = set(primary(sc))
        at = dict(looks)
        g = None
        for i in range(cap):
            concs = tuple(sorted({CONTROL} | open_cells))
            for side in (("a", "b") if i % 2 == 0 else ("b", "a")):
                b.start(side, concs)
            if i + 1 in at:
                settings = CompareSettings(alpha=at[i + 1])
                g = b.grid(settings)
                open_cells = {c for c in open_cells if not settled(g, c, settings.min_effect_pct)}
                if i + 1 < cap and FUTILITY:
                    open_cells = {c for c in open_cells if not futile(g, c, settings.min_effect_pct, cap)}
                if not open_cells:
                    break
        assert g is not None
        return b, g
    return run


def main() -> int:
    ap = study_args(__doc__.splitlines()[0], 200)
    ap.add_argument("--looks", action="append", default=None,
                    help="a sequential plan's looks, STARTS_A_SIDE:ALPHA,... (alphas add up to at most 0.05); "
                         "repeatable (default: 2:0.01,3:0.04 and 2:0.01,5:0.04)")
    ap.add_argument("--futility", action="store_true", help="stop cells that cannot settle by the cap")
    args = ap.parse_args()
    n = args.grids
    global FUTILITY
    FUTILITY = args.futility
    designs = [("fixed 3 starts a side", fixed(3)), ("fixed 5 starts a side", fixed(5))]
    for text in args.looks or ["2:0.01,3:0.04", "2:0.01,5:0.04"]:
        looks = tuple((int(k), float(a)) for k, a in (x.split(":") for x in text.split(",")))
        designs.append(("sequential, looks " + ", ".join(f"{k} a side at alpha {a:g}" for k, a in looks)
                        + (" (futility)" if FUTILITY else ""), sequential(looks)))
    started = time.perf_counter()
    rows = []
    for j, (name, design) in enumerate(designs):
        rng = np.random.default_rng(2026_12_04 + 31 * j)
        starts, minutes, done, right = [], [], [], 0
        for _ in range(n):
            b, g = design(rng, SEED)
            starts.append(b.next_start - 1)
            minutes.append(b.gpu_minutes)
            cells = primary(SEED)
            done.append(sum(settled(g, c, g.settings.min_effect_pct) for c in cells) / len(cells))
            right += all(g.cell(c, "output_throughput").verdict == v for c, v in BIG_FOUR.items())
        false = power = 0.0
        for _ in range(n):
            false += verdicts(design(rng, AA)[1], {})[0]
            power += verdicts(design(rng, POWER)[1], POWER.effect)[2]
        rows.append((name, float(np.median(starts)), float(np.mean(starts)), float(np.median(minutes)),
                     float(np.mean(done)), right / n, false / n, power / n))
        r = rows[-1]
        print(f"{name}: starts median {r[1]:g} (mean {r[2]:.1f}), box-minutes median {r[3]:.0f}, "
              f"settled {r[4]:.0%}, big four right {r[5]:.1%}, A/A false {r[6]:.1%}, power {r[7]:.1%}", flush=True)
    base = rows[0]
    lines = [f"# Cost to a trustworthy verdict: the seed question ({args.date})", "",
             f"`nice python benches/cost_to_verdict.py --grids {n}`: {n} draws per design and question "
             f"({time.perf_counter() - started:.0f} s on the 2-core dev box). Noise model (benches/grid_sim.py): "
             "1.5% start noise growing 2x from c=1 to c=1024, half shared by a start's concurrencies, 0.5% run "
             "jitter, 2% drift over the campaign; every start a sweep with concurrency 2 inside, ABBA order. "
             "The seed's effects: c=1 -2.8%, 10 +67%, 64 +14%, 256 -28%, 1024 -50%. Box-minutes: the model's "
             "time to serve every run's prompts (num_prompts x output_len / throughput), summed.", "",
             "| design | server starts (median, mean) | of fixed-3 | box-minutes (median) | of fixed-3 | "
             "primary cells settled | four big cells right | A/A false verdicts | power at +15% |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:g}, {r[2]:.1f} | {r[2] / base[2]:.0%} | {r[3]:.0f} | {r[3] / base[3]:.0%} | "
                     f"{r[4]:.0%} | {r[5]:.1%} | {r[6]:.1%} | {r[7]:.1%} |")
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
