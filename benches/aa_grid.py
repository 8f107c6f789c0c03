"""Adversarial A/A, attack and power study of the comparison grid's rules, over synthetic server starts.

Each row draws `--grids` grids from a scenario (`grid_sim.Scenario`: concurrencies x output tok/s, mean TTFT
and mean TPOT; every start a whole sweep with the control concurrency 2 inside, ABBA order unless the row
says otherwise) and reports, with the grid as shipped ("gated") and accepting uncontrolled verdicts:
- the false-verdict rate: grids with any better/worse where the candidate has no true effect (or the wrong
  direction), with its 95% binomial margin;
- the power beside it: the same scenario with a true +15% on throughput at c >= 16 (3% start noise there
  unless the row sets its own), as the share of those cells found, with its margin.
Rows are the earlier study's models and every attack of issue #31 that can be drawn without servers.

Usage: nice python benches/aa_grid.py [--grids 400] [--out benches/results/aa_grid-DATE.md] [--only TEXT]
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np
from grid_sim import SEED_CONCS, SEED_EFFECT, Builder, Scenario, draw, publish, study_args, verdicts

POWER_EFFECT = 0.15


def with_power(sc: Scenario) -> Scenario:
    concs = [c for c in sc.concs if c >= 16]
    cv = {c: sc.cv_by_conc.get(c, max(0.03, sc.start_cv)) for c in concs}
    return dataclasses.replace(sc, effect={**sc.effect, **{c: POWER_EFFECT for c in concs}},
                               cv_by_conc={**sc.cv_by_conc, **cv})


def peeking(rng: np.random.Generator, sc: Scenario) -> Builder:
    """Re-run until it says something: one more start a side at a time up to 10, stop at the first verdict."""
    b = draw(rng, sc)
    for n in range(sc.starts, 11):
        if n > sc.starts:
            for side in ("a", "b") if n % 2 else ("b", "a"):
                b.start(side)
        fg, fa, _, _ = verdicts(b.grid(), sc.effect)
        if fa:
            break
    return b


ROWS: tuple[tuple[str, Scenario, Callable[[np.random.Generator, Scenario], Builder]], ...] = (
    ("A/A, 1.5% start noise, 3 starts a side", Scenario(), draw),
    ("A/A, noise growing 3x from c=1 to c=1024", Scenario(growth=3.0), draw),
    ("A/A, t(3) heavy-tailed noise", Scenario(heavy=True), draw),
    ("A/A, offsets independent across concurrencies", Scenario(start_corr=0.0), draw),
    ("A/A, 4% drift, grouped order", Scenario(drift=0.04, order="grouped"), draw),
    ("A/A, re-running until it says something, up to 10 a side", Scenario(start_cv=0.03), peeking),
    ("attack: candidate env 2.5% slower everywhere", Scenario(env=0.025), draw),
    ("attack: candidate env 5% slower everywhere", Scenario(env=0.05), draw),
    ("attack: host adds 15% TTFT on the candidate everywhere", Scenario(env_metric={"mean_ttft_ms": 0.15}), draw),
    ("attack: host 5% slower only under load (c>=256) in every other pair of starts",
     Scenario(periodic_load={256: 0.05, 1024: 0.05}, period=2), draw),
    ("attack: candidate on another machine, 5% slower only under load (c>=256)",
     Scenario(env_load={256: 0.05, 1024: 0.05}, other_host=True), draw),
    ("attack: 5 v 2 starts, 5% vs 1% noise", Scenario(starts=5, starts_b=2, start_cv=0.01, cv_b=0.05), draw),
    ("attack: 5 v 2 starts, 1% vs 5% noise", Scenario(starts=5, starts_b=2, start_cv=0.05, cv_b=0.01), draw),
    ("attack: 4% disturbance every other start, ABAB order",
     Scenario(periodic=0.04, period=1, order="abab"), draw),
    ("attack: ... the same disturbance, ABBA order (the default)", Scenario(periodic=0.04, period=1), draw),
    ("attack: one noisy concurrency (TTFT 10% at c=256)",
     Scenario(cv_by_metric_conc={("mean_ttft_ms", 256): 0.10}), draw),
    ("attack: the seed's sweep 1,10,64,256,1024 (+2 added), backends differ 2.8% at c=1",
     Scenario(concs=SEED_CONCS, effect={1: -0.028}), draw),
)


def seed_rows() -> list[tuple[str, Scenario]]:
    return [
        ("seed numbers, three sweeps a side, 1.5% start noise", Scenario(concs=SEED_CONCS, effect=dict(SEED_EFFECT))),
        ("seed numbers, three sweeps a side, 3% start noise",
         Scenario(concs=SEED_CONCS, effect=dict(SEED_EFFECT), start_cv=0.03)),
        ("A/A of the same design (seed sweep, 1.5%)", Scenario(concs=SEED_CONCS)),
    ]


def big_four(g, effect) -> bool:
    """The seed's four big cells right, as shipped: 10 and 64 better, 256 and 1024 worse."""
    from moe_tui import judgement as J

    want = {10: J.BETTER, 64: J.BETTER, 256: J.WORSE, 1024: J.WORSE}
    return all(g.cell(c, "output_throughput").verdict == v for c, v in want.items())


def rate_text(p: float, n: int) -> str:
    """The rate with its 95% margin (normal approximation); at 0 or 1, the rule-of-three bound instead
    (none of n grids: the true rate is under 3/n at 95%)."""
    if p == 0.0:
        return f"0.0% (< {300 / n:.1f}%)"
    if p == 1.0:
        return f"100.0% (> {100 - 300 / n:.1f}%)"
    return f"{p:.1%} ± {1.96 * math.sqrt(p * (1 - p) / n) * 100:.1f}"


def main() -> int:
    ap = study_args(__doc__.splitlines()[0], 400)
    ap.add_argument("--only", default=None, help="run only rows whose name contains this")
    args = ap.parse_args()
    started = time.perf_counter()
    n = args.grids
    table = []
    for i, (name, sc, how) in enumerate(ROWS):
        if args.only and args.only not in name:
            continue
        rng = np.random.default_rng(2026_12_04 + 7919 * i)
        fg = fa = 0.0
        for _ in range(n):
            g_false, a_false, _, _ = verdicts(how(rng, sc).grid(), sc.effect)
            fg += g_false
            fa += a_false
        psc = with_power(sc)
        pg = pa = 0.0
        for _ in range(n):
            _, _, found_g, found_a = verdicts(how(rng, psc).grid(), psc.effect)
            pg += found_g
            pa += found_a
        row = (name, fg / n, fa / n, pg / n, pa / n)
        table.append(row)
        print(f"{name}: false {row[1]:.1%} (accepting {row[2]:.1%}); power {row[3]:.1%} (accepting {row[4]:.1%})",
              flush=True)
    seeds = []
    for j, (name, sc) in enumerate(seed_rows()):
        if args.only and args.only not in name:
            continue
        rng = np.random.default_rng(2026_12_04 + 104729 * (j + 1))
        right = false = 0
        for _ in range(n):
            g = draw(rng, sc).grid()
            if sc.effect:
                right += big_four(g, sc.effect)
            false += verdicts(g, sc.effect)[0]
        seeds.append((name, right / n if sc.effect else None, false / n))
        print(f"{name}: four big cells right {right / n:.1%}, any false verdict {false / n:.1%}", flush=True)
    elapsed = time.perf_counter() - started
    lines = [f"# Adversarial A/A, attack and power study of the grid rules ({args.date})", "",
             f"`nice python benches/aa_grid.py --grids {n}`: {n} synthetic grids a row (benches/grid_sim.py: every "
             "server start a whole sweep with concurrency 2 inside, ABBA order unless said; 3 starts a side unless "
             "said; 1.5% start noise, half of it shared by a start's concurrencies, 0.5% run jitter; output tok/s, "
             f"mean TTFT, mean TPOT); {elapsed:.0f} s on the 2-core dev box. ± is the 95% binomial margin over the "
             f"{n} grids; where none (or all) of them did, the bound in brackets is the rule of three (3/n).", "",
             "False: grids with any better/worse where the candidate has no true effect (or the wrong direction). "
             f"Power: the same scenario with a true +{POWER_EFFECT:.0%} on throughput at c >= 16 (3% start noise "
             "there), as the share of those cells found 'better'. 'Shipped' is the grid as it ships (a verdict "
             "needs the control on the same starts to back it); 'accepting' is `--accept-uncontrolled`.", "",
             "| scenario | false, shipped | false, accepting | power, shipped | power, accepting |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {r[0]} | {rate_text(r[1], n)} | {rate_text(r[2], n)} | {rate_text(r[3], n)} | "
              f"{rate_text(r[4], n)} |" for r in table]
    lines += ["", "The seed question (its numbers: c=1 -2.8%, 10 +67%, 64 +14%, 256 -28%, 1024 -50%, c=2 equal), "
              "as a user's fixed design of three sweeps a side, one server start each, c=2 inside:", "",
              "| design | four big cells right | any false verdict |", "|---|---:|---:|"]
    lines += [f"| {s[0]} | {'-' if s[1] is None else rate_text(s[1], n)} | {rate_text(s[2], n)} |" for s in seeds]
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
