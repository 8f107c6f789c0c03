"""What the grid's two newest withholding rules cost in power, beside the false verdicts they prevent.

Rule (a), `compare.confound._unbalanced`: both sides ran on the same machines (hostname) but in unequal
shares of their server starts: every cell is confounded. Each row draws `--grids` grids of `grid_sim` with
k nodes, each a speed offset of its own, every server start on one node placed by node blocks (repeat r of
both sides on node r mod k: `--node-blocks`), at random per start (Slurm placing each job anywhere), or all
on one node. Per row, judged by the shipped grid code:
- how often the rule fires (a grid whose shares differ), and the older 'different machines' rule (a side
  never on a node the other used);
- false: grids with any better/worse where the candidate has no true effect (the node offset only), the
  grid as shipped with the rule, without it (`_unbalanced` answering nothing, every other rule as shipped),
  with no hostname recorded (neither machine rule), and 'balanced': the rule kept, but each side reduced
  to the same number of starts per node (the earliest min(a, b) starts of each side on each node), so
  that shares are equal and the node offsets weigh alike on both sides (a stratified estimate with common
  weights) instead of a withheld grid;
- power: the same rows with a true +15% on throughput at c >= 16 (3% start noise there), as the share of
  those cells found 'better', the same four ways.

Rule (b), `grids.pair.confound_separate`: a concurrency that both profiles measured only in separate
one-profile campaigns (never interleaved) is confounded. Drawn as: the pair's own ABBA campaign (3 starts a
side over the default sweep, control 2 inside), then a campaign of the baseline alone and one of the
candidate alone at concurrency 10 (3 starts each, one after the other: what the grid keeps for that cell,
`separate_concurrencies`, has no control on those starts), the candidate's campaign slower by a
campaign-level offset. Reported at concurrency 10 only: false and power, with the rule
(`confound_separate` applied to the grid) and without it, as shipped and accepting uncontrolled verdicts.

Usage: nice python benches/aa_nodes.py [--grids 400] [--jobs N] [--out benches/results/aa_grid-nodes-DATE.md]
       [--only TEXT]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
from aa_grid import POWER_EFFECT, rate_text, with_power
from grid_sim import ACCEPT, METRICS, Builder, Scenario, draw, publish, study_args, verdicts

from moe_tui.compare import confound
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.compare.model import ComparisonGrid
from moe_tui.grids.pair import confound_separate

UNEQUAL = "machines in unequal shares"
APART = "different machines"
SEPARATE_CONC = 10  # the seed's concurrency queued one profile at a time
SEPARATE_STARTS = 3

NODE_ROWS: tuple[tuple[str, Scenario], ...] = (
    ("2 nodes, node 2 4% slower everywhere, node blocks", Scenario(nodes=(0.0, 0.04), placement="blocks")),
    ("2 nodes, node 2 4% slower everywhere, at random per start", Scenario(nodes=(0.0, 0.04), placement="random")),
    ("2 nodes, node 2 4% slower everywhere, all on one node", Scenario(nodes=(0.0, 0.04), placement="one")),
    ("2 equal nodes, at random per start", Scenario(nodes=(0.0, 0.0), placement="random")),
    ("2 nodes, node 2 4% slower only under load (c>=256), node blocks",
     Scenario(nodes=(0.0, 0.04), node_load=(256, 1024), placement="blocks")),
    ("2 nodes, node 2 4% slower only under load (c>=256), at random",
     Scenario(nodes=(0.0, 0.04), node_load=(256, 1024), placement="random")),
    ("2 nodes, node 2 8% slower only under load (c>=256), at random",
     Scenario(nodes=(0.0, 0.08), node_load=(256, 1024), placement="random")),
    ("2 nodes, node 2 15% slower only under load (c>=256), at random",
     Scenario(nodes=(0.0, 0.15), node_load=(256, 1024), placement="random")),
    ("node blocks, one candidate start lost (4 v 3: 2+2 vs 2+1), node 2 4% slower only under load",
     Scenario(nodes=(0.0, 0.04), node_load=(256, 1024), placement="blocks", starts=4, starts_b=3)),
    ("skewed (baseline 2/3 on node 1, candidate 2/3 on node 2), node 2 4% slower everywhere",
     Scenario(nodes=(0.0, 0.04), placement="skew")),
    ("skewed, node 2 8% slower only under load (c>=256)",
     Scenario(nodes=(0.0, 0.08), node_load=(256, 1024), placement="skew")),
    ("skewed, node 2 8% slower only under load, 9 starts a side",
     Scenario(nodes=(0.0, 0.08), node_load=(256, 1024), placement="skew", starts=9)),
    ("skewed, node 2 15% slower only under load, 9 starts a side",
     Scenario(nodes=(0.0, 0.15), node_load=(256, 1024), placement="skew", starts=9)),
    ("skewed 8+1 vs 1+8 (9 starts a side), node 2 8% slower only under load",
     Scenario(nodes=(0.0, 0.08), node_load=(256, 1024), placement="skew", starts=9, skew_every=9)),
    ("skewed 8+1 vs 1+8, node 2 8% slower everywhere",
     Scenario(nodes=(0.0, 0.08), placement="skew", starts=9, skew_every=9)),
    ("3 nodes 0/3/5% slower everywhere, at random", Scenario(nodes=(0.0, 0.03, 0.05), placement="random")),
    ("2 nodes, node 2 4% slower everywhere, at random, 5 starts a side",
     Scenario(nodes=(0.0, 0.04), placement="random", starts=5)),
    ("2 nodes, node 2 8% slower under load, at random, 5 starts a side",
     Scenario(nodes=(0.0, 0.08), node_load=(256, 1024), placement="random", starts=5)),
    ("2 nodes, node 2 15% slower under load, at random, 5 starts a side",
     Scenario(nodes=(0.0, 0.15), node_load=(256, 1024), placement="random", starts=5)),
    ("2 nodes, node 2 15% slower under load, node blocks, 5 starts a side",
     Scenario(nodes=(0.0, 0.15), node_load=(256, 1024), placement="blocks", starts=5)),
)

SEPARATE_ROWS: tuple[tuple[str, float], ...] = (
    ("separate campaigns, no campaign offset", 0.0),
    ("separate campaigns, the candidate's 3% slower", 0.03),
    ("separate campaigns, the candidate's 5% slower", 0.05),
)


@contextlib.contextmanager
def without_unbalanced() -> Iterator[None]:
    """Rule (a) off for the builds inside: `_unbalanced` finds nothing; every other rule as shipped."""
    shipped = confound._unbalanced
    confound._unbalanced = lambda *args, **kwargs: []  # type: ignore[assignment]
    try:
        yield
    finally:
        confound._unbalanced = shipped  # type: ignore[assignment]


def fired(g: ComparisonGrid, rule: str = UNEQUAL) -> bool:
    return any(c.field.startswith(rule) for cell in g.cells for c in cell.confounders)


def hostless(b: Builder) -> ComparisonGrid:
    """The grid of the same runs with no hostname recorded: neither machine rule can fire."""
    a, c = ([{**r, "provenance": {}} for r in b.runs[s]] for s in ("a", "b"))
    return build_grid_from_runs(a, c, baseline_name="a", candidate_name="b", metrics=METRICS, settings=ACCEPT)


def balanced_starts(b: Builder) -> frozenset[int]:
    """Each side's earliest min(a, b) starts on each node: equal shares, the same weight per node on both sides."""
    order = {side: list(dict.fromkeys(r["server_start_id"] for r in runs)) for side, runs in b.runs.items()}
    counts = {side: Counter(b.node_of[s] for s in starts) for side, starts in order.items()}
    keep: set[int] = set()
    for side, starts in order.items():
        left = {n: min(counts["a"][n], counts["b"][n]) for n in counts[side]}
        for s in starts:
            if left[b.node_of[s]] > 0:
                left[b.node_of[s]] -= 1
                keep.add(s)
    return frozenset(keep)


def node_row(rng: np.random.Generator, sc: Scenario, n: int) -> dict[str, float]:
    """Sums over n A/A grids and n power grids of one node scenario (divide by n for rates)."""
    out: Counter[str] = Counter()
    psc = with_power(sc)
    for kind, scen in (("aa", sc), ("power", psc)):
        for _ in range(n):
            b = draw(rng, scen)
            shipped = b.grid()
            with without_unbalanced():
                off = b.grid()
            ways = {"with": shipped, "without": off, "hostless": hostless(b),
                    "balanced": b.grid(keep=balanced_starts(b))}
            if kind == "aa":
                out["fired"] += fired(shipped)
                out["apart"] += fired(shipped, APART)
            for way, g in ways.items():
                tally(out, kind, way, verdicts(g, scen.effect))
    return dict(out)


def tally(out: Counter[str], kind: str, way: str, judged: tuple[bool, bool, float, float]) -> None:
    """Add one grid's judgement (`verdicts`: false as shipped, false accepting uncontrolled, found as shipped,
    found accepting uncontrolled) to the row's sums: false verdicts for an A/A grid, power for the other."""
    false_g, false_a, found_g, found_a = judged
    if kind == "aa":
        out[f"false {way}"] += false_g
        out[f"false {way} acc"] += false_a
    else:
        out[f"power {way}"] += found_g
        out[f"power {way} acc"] += found_a


def at(g: ComparisonGrid, conc: int) -> ComparisonGrid:
    """The grid reduced to one concurrency's cells (`verdicts` then judges only those)."""
    return dataclasses.replace(g, cells=tuple(c for c in g.cells if c.concurrency == conc))


def separate_row(rng: np.random.Generator, offset: float, n: int) -> dict[str, float]:
    """Sums over n A/A and n power grids of the separate-campaigns design, at concurrency 10 only."""
    out: Counter[str] = Counter()
    for kind, effect in (("aa", {}), ("power", {SEPARATE_CONC: POWER_EFFECT})):
        sc = Scenario(effect=effect, cv_by_conc={SEPARATE_CONC: 0.03} if effect else {})
        for _ in range(n):
            b = draw(rng, sc)  # the pair's own campaign
            for side in ("a", "b"):  # then each profile alone, one campaign after the other
                for _ in range(SEPARATE_STARTS):
                    b.start(side, (SEPARATE_CONC,), slower=offset if side == "b" else 0.0)
            g = b.grid()
            for way, grid in (("without", g), ("with", confound_separate(g, frozenset({SEPARATE_CONC})))):
                tally(out, kind, way, verdicts(at(grid, SEPARATE_CONC), effect))
                cell = grid.cell(SEPARATE_CONC, "output_throughput")
                out[f"{kind} {way} verdict {'uncontrolled' if cell.uncontrolled else cell.verdict}"] += 1
    return dict(out)


def run_row(task: tuple[str, int, int]) -> dict[str, float]:
    """One row's sums, from its own seed (the same whichever process runs it)."""
    kind, i, n = task
    if kind == "node":
        row = node_row(np.random.default_rng(2026_12_05 + 7919 * i), NODE_ROWS[i][1], n)
    else:
        row = separate_row(np.random.default_rng(2026_12_05 + 104729 * (i + 1)), SEPARATE_ROWS[i][1], n)
    name = (NODE_ROWS if kind == "node" else SEPARATE_ROWS)[i][0]
    print(name, {k: f"{v / n:.1%}" for k, v in sorted(row.items())}, flush=True)
    return row


def main() -> int:
    ap = study_args(__doc__.splitlines()[0], 400)
    ap.add_argument("--only", default=None, help="run only rows whose name contains this")
    ap.add_argument("--where", default="the 2-core dev box", help="the machine, for the table's header")
    ap.add_argument("--jobs", type=int, default=1, help="rows at once (processes; each row keeps its own seed)")
    args = ap.parse_args()
    started = time.perf_counter()
    n = args.grids
    tasks = [("node", i, name) for i, (name, _) in enumerate(NODE_ROWS)]
    tasks += [("separate", j, name) for j, (name, _) in enumerate(SEPARATE_ROWS)]
    tasks = [t for t in tasks if not args.only or args.only in t[2]]
    with concurrent.futures.ProcessPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(run_row, [(kind, i, n) for kind, i, _ in tasks]))
    nodes = [(name, row) for (kind, _, name), row in zip(tasks, rows) if kind == "node"]
    separate = [(name, row) for (kind, _, name), row in zip(tasks, rows) if kind == "separate"]
    elapsed = time.perf_counter() - started
    r = lambda row, key: rate_text(row.get(key, 0) / n, n)  # noqa: E731
    lines = [f"# Power and false verdicts of the node-share and separate-campaign rules ({args.date})", "",
             f"`nice python benches/aa_nodes.py --grids {n}`: {n} synthetic grids a row and kind (A/A, power), "
             "benches/grid_sim.py as in aa_grid (ABBA, 3 starts a side unless said, 1.5% start noise, half of it "
             "shared by a start's concurrencies, 0.5% run jitter; output tok/s, mean TTFT, mean TPOT), judged by "
             f"the shipped grid code; {elapsed:.0f} s on {args.where} ({args.jobs} process(es)). ± is the 95% binomial margin; where "
             "none (or all) of the grids did, the bound in brackets is the rule of three (3/n).", "",
             "## Rule (a): machines in unequal shares of the server starts", "",
             "Fires (a): grids whose node shares differ between the sides, each side on both nodes (rule (a): every "
             "cell confounded); fires (sets): grids where one side never ran on a node the other did ('different "
             "machines (hostname)', the older rule: the extreme of unequal shares). False: grids with any "
             "better/worse, no true effect (the node offsets only). Power: a true "
             f"+{POWER_EFFECT:.0%} on throughput at c >= 16 (3% start noise there), share of those cells found "
             "'better'. Ways: 'with' as shipped; 'no (a)' with `_unbalanced` off, every other rule as shipped (the "
             "control on the same starts still gates); 'no host' the same runs with no hostname recorded (neither "
             "machine rule); 'balanced' the rules kept, each side cut to the earliest min(a, b) of its starts on "
             "each node (equal shares, a stratified estimate with common weights; a side left with one start has "
             "no verdict).", "",
             "| placement and nodes | fires (a) | fires (sets) | false: with / no (a) / no host / balanced | "
             "power: with / no (a) / no host / balanced |", "|---|---:|---:|---|---|"]
    ways = ("with", "without", "hostless", "balanced")
    for suffix, title in (("", "As shipped (uncontrolled verdicts withheld):"),
                          (" acc", "Accepting uncontrolled verdicts (`--accept-uncontrolled`, labelled):")):
        if suffix:
            lines += ["", title, "", "| placement and nodes | fires (a) | fires (sets) | false: with / no (a) / "
                      "no host / balanced | power: with / no (a) / no host / balanced |", "|---|---:|---:|---|---|"]
        else:
            lines.insert(len(lines) - 2, title)
            lines.insert(len(lines) - 2, "")
        lines += [f"| {name} | {r(row, 'fired')} | {r(row, 'apart')} | "
                  f"{' / '.join(r(row, f'false {w}{suffix}') for w in ways)} | "
                  f"{' / '.join(r(row, f'power {w}{suffix}') for w in ways)} |" for name, row in nodes]
    lines += ["", "## Rule (b): a concurrency measured only in separate one-profile campaigns", "",
              f"The pair's ABBA campaign, then {SEPARATE_STARTS} starts of the baseline alone and {SEPARATE_STARTS} "
              f"of the candidate alone at concurrency {SEPARATE_CONC}, the candidate's campaign slower by the offset "
              f"on every metric. Judged at concurrency {SEPARATE_CONC} only; power: a true +{POWER_EFFECT:.0%} there "
              "(3% start noise). The last column: the throughput cell's state as shipped without the rule, in the A/A "
              "grids (the rule makes every one of them confounded).", "",
              "| design | false, shipped with / without | false, accepting with / without | power, shipped with / "
              "without | power, accepting with / without | throughput cell without the rule (A/A) |",
              "|---|---:|---:|---:|---:|---|"]
    for name, row in separate:
        states = ", ".join(f"{k.split()[-1]} {v / n:.0%}" for k, v in sorted(row.items())
                           if k.startswith("aa without verdict"))
        lines.append(f"| {name} | {r(row, 'false with')} / {r(row, 'false without')} | {r(row, 'false with acc')} / "
                     f"{r(row, 'false without acc')} | {r(row, 'power with')} / {r(row, 'power without')} | "
                     f"{r(row, 'power with acc')} / {r(row, 'power without acc')} | {states} |")
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
