"""Synthetic server starts for the grid studies (`aa_grid.py`, `cost_to_verdict.py`): no servers, the grid's code.

The noise model, per side and server start: every start draws an offset per concurrency (start-to-start
noise, the unit of evidence; `start_corr` of it shared by every concurrency of the start, since a slow start is
partly slow everywhere), every run on it a small run jitter, noise may grow with concurrency, and a drift,
a periodic disturbance or an environment factor may act on one side, one metric or heavy load only. Values
are log-normal around the base. Starts run in a stated order (ABAB, ABBA, grouped), each a whole sweep
that includes the control concurrency 2 (as `queue_plan` plans it).

Machines: with `nodes` (a speed offset per node) every start runs on one node, recorded as its hostname,
placed by node blocks (repeat r of both sides on node r mod k, as the Slurm dispatcher's `--node-blocks`
pins them), at random per start (Slurm placing each job anywhere), all on the first node, or skewed the
same way in every grid (the case the unequal-shares rule names: a faster node weighs more on one side).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui import judgement as J  # noqa: E402
from moe_tui.compare import METRIC_BY_KEY, CompareSettings, build_grid_from_runs  # noqa: E402
from moe_tui.compare.model import ComparisonGrid  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402

CONTROL = J.CONTROL_CONCURRENCY
METRICS = tuple(METRIC_BY_KEY[k] for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"))
# The seed's baseline (flashinfer_cutlass on 8 RTX PRO 6000, GLM-5-NVFP4), tok/s; 16 interpolated.
BASE = {1: 10.36, 2: 19.29, 10: 38.46, 16: 60.0, 64: 218.74, 256: 718.83, 1024: 1603.04}
SEED_EFFECT = {1: -0.028, 10: 0.67, 64: 0.14, 256: -0.28, 1024: -0.50}
SEED_CONCS = (1, 2, 10, 64, 256, 1024)
ACCEPT = CompareSettings(accept_uncontrolled=True)


def spec_for(conc: int) -> BenchmarkSpec:
    return BenchmarkSpec(max_concurrency=conc, num_prompts=max(128, 2 * conc))


def snapshot(backend: str) -> dict:
    return {"name": backend, "engine": "sglang", "model_path": "m", "moe_runner_backend": backend, "tp_size": 8,
            "ep_size": 8, "quantization": "fp4", "gpus": list(range(8)), "host": "127.0.0.1", "port": 30000,
            "extra_args": [], "env": {}, "python": "", "description": "", "sim": {}}


SNAPS = {"a": snapshot("flashinfer_cutlass"), "b": snapshot("flashinfer_cutedsl")}


@dataclass
class Scenario:
    """How one grid's evidence is drawn (fractions, not percent)."""

    concs: tuple[int, ...] = (1, 2, 16, 64, 256, 1024)
    starts: int = 3  # per side (starts_b overrides the candidate's)
    starts_b: int | None = None
    start_cv: float = 0.015
    cv_b: float | None = None  # the candidate's start noise when it differs
    run_cv: float = 0.005
    start_corr: float = 0.5  # share of a start's offset (variance) common to all its concurrencies
    growth: float = 1.0  # noise multiplies by this from c=1 to c=1024
    cv_by_conc: dict[int, float] = field(default_factory=dict)
    cv_by_metric_conc: dict[tuple[str, int], float] = field(default_factory=dict)
    heavy: bool = False
    order: str = "abba"  # abab | abba | grouped
    drift: float = 0.0  # over the whole campaign, on every run
    periodic: float = 0.0  # a disturbance alternating every `period` starts, on every run
    period: int = 1
    periodic_load: dict[int, float] = field(default_factory=dict)  # ... at these concurrencies only
    effect: dict[int, float] = field(default_factory=dict)  # the candidate's true effect on throughput
    env: float = 0.0  # the candidate's environment slower on every metric and concurrency
    env_metric: dict[str, float] = field(default_factory=dict)  # ... on one metric only (latency up)
    env_load: dict[int, float] = field(default_factory=dict)  # ... at some concurrencies only
    other_host: bool = False  # the candidate on another machine (recorded hostname)
    nodes: tuple[float, ...] = ()  # per node, how much slower it is (fraction); () = one machine, box-a
    node_load: tuple[int, ...] = ()  # the node offsets act at these concurrencies only (() = everywhere)
    # blocks (--node-blocks) | random (each start anywhere) | one (the first node) | skew (2 nodes: the
    # baseline two thirds on node 1, the candidate two thirds on node 2, every grid: a systematic imbalance)
    placement: str = "blocks"
    skew_every: int = 3  # with skew: every this-many-th start of a side on the other side's node

    def cv(self, side: str, conc: int, metric: str = "") -> float:
        if (metric, conc) in self.cv_by_metric_conc:
            return self.cv_by_metric_conc[(metric, conc)]
        if conc in self.cv_by_conc:
            base = self.cv_by_conc[conc]
        else:
            base = (self.cv_b if side == "b" and self.cv_b is not None else self.start_cv) * \
                self.growth ** (math.log2(conc) / 10.0)
        return base * ((self.cv_b / self.start_cv) if side == "b" and self.cv_b is not None
                       and conc in self.cv_by_conc else 1.0)


class Builder:
    """One grid's runs, start by start."""

    def __init__(self, rng: np.random.Generator, sc: Scenario) -> None:
        self.rng, self.sc = rng, sc
        self.runs: dict[str, list[dict]] = {"a": [], "b": []}
        self.next_id = self.next_start = 1
        self.position = 0  # starts made so far (time)
        self.horizon = 2 * max(sc.starts, sc.starts_b or sc.starts)
        self.gpu_minutes = 0.0
        self.node_of: dict[int, int] = {}  # server start id -> node index (with `nodes`)
        self.repeats = {"a": 0, "b": 0}  # starts made so far per side: the repeat index of the next one

    def noise(self) -> float:
        if self.sc.heavy:  # Student t(3) scaled to unit variance
            return float(self.rng.standard_t(3) / math.sqrt(3.0))
        return float(self.rng.standard_normal())

    def place(self, side: str) -> int:
        """The node of the side's next start (`Scenario.placement`)."""
        sc, k = self.sc, len(self.sc.nodes)
        if sc.placement == "random":
            return int(self.rng.integers(k))
        if sc.placement == "blocks":
            return self.repeats[side] % k
        if sc.placement == "skew":  # every `skew_every`-th start of a side on the other node: 2+1 vs 1+2, ...
            first = int(self.repeats[side] % sc.skew_every == sc.skew_every - 1)
            return first if side == "a" else 1 - first
        return 0

    def start(self, side: str, concs: tuple[int, ...] | None = None, slower: float = 0.0) -> None:
        """One server start of `side` measuring `concs` (every one of the scenario's by default); `slower`:
        this start's environment slower by that fraction on every metric (a campaign's day, say)."""
        sc = self.sc
        concs = concs or sc.concs
        sid, self.next_start = self.next_start, self.next_start + 1
        node = self.place(side) if sc.nodes else None
        if node is not None:
            self.node_of[sid] = node
        self.repeats[side] += 1
        t = 1_000_000.0 + 600.0 * self.position
        shared = self.noise()
        mult_t = 1.0 - sc.drift * self.position / max(1, self.horizon)
        disturbed = bool((self.position // sc.period) % 2)
        if sc.periodic and disturbed:
            mult_t *= 1.0 - sc.periodic
        self.position += 1
        for c in concs:
            own = self.noise()
            z_start = math.sqrt(sc.start_corr) * shared + math.sqrt(1.0 - sc.start_corr) * own
            eff = 1.0 + (sc.effect.get(c, 0.0) if side == "b" else 0.0)
            env = (1.0 - sc.env) * (1.0 - sc.env_load.get(c, 0.0)) if side == "b" else 1.0
            env *= 1.0 - (sc.periodic_load.get(c, 0.0) if disturbed else 0.0)
            env *= 1.0 - slower
            if node is not None and (not sc.node_load or c in sc.node_load):
                env *= 1.0 - sc.nodes[node]
            values = {}
            for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
                z = math.exp(sc.cv(side, c, m) * z_start + sc.run_cv * self.noise())
                speed = eff * env * mult_t * z
                lat_env = (1.0 + sc.env_metric.get(m, 0.0)) if side == "b" else 1.0
                values[m] = (BASE.get(c, 10.0 * c) * speed if m == "output_throughput"
                             else (50.0 * c if m == "mean_ttft_ms" else 20.0) / speed * lat_env)
            spec = spec_for(c)
            self.gpu_minutes += spec.num_prompts * spec.output_len / values["output_throughput"] / 60.0
            summary = {**values, "completed": spec.num_prompts, "failed": 0,
                       "total_output_tokens": spec.num_prompts * spec.output_len}
            prov = {"hostname": f"node{node + 1}" if node is not None
                    else "box-b" if side == "b" and sc.other_host else "box-a"}
            self.runs[side].append({
                "id": self.next_id, "fingerprint": spec.fingerprint, "spec": spec.canonical_dict(),
                "summary": summary, "profile": SNAPS[side], "status": "complete", "profile_name": side,
                "server_start_id": sid, "started_at": t - 60.0, "finished_at": t, "provenance": prov})
            self.next_id += 1

    def grid(self, settings: CompareSettings = ACCEPT, keep: frozenset[int] | None = None) -> ComparisonGrid:
        """The grid of the runs so far (only those of the server starts in `keep`, when given)."""
        a, b = ([r for r in self.runs[s] if keep is None or r["server_start_id"] in keep] for s in ("a", "b"))
        return build_grid_from_runs(a, b, baseline_name="a", candidate_name="b", metrics=METRICS, settings=settings)


def order(sc: Scenario, na: int, nb: int) -> list[str]:
    """Sides in time order for na and nb starts."""
    if sc.order == "grouped":
        return ["a"] * na + ["b"] * nb
    out: list[str] = []
    i = 0
    while out.count("a") < na or out.count("b") < nb:
        pair = ("a", "b") if sc.order == "abab" or i % 2 == 0 else ("b", "a")
        out += [s for s in pair if out.count(s) < (na if s == "a" else nb)]
        i += 1
    return out


def draw(rng: np.random.Generator, sc: Scenario) -> Builder:
    b = Builder(rng, sc)
    for side in order(sc, sc.starts, sc.starts_b or sc.starts):
        b.start(side)
    return b


def verdicts(g: ComparisonGrid, effect: dict[int, float]) -> tuple[bool, bool, float, float]:
    """(any false verdict as shipped, any accepting uncontrolled, share of true effects found as shipped,
    and accepting): false = better/worse where the candidate has no true effect on that metric, or the
    wrong direction; found = the right verdict on a throughput cell with a true effect of at least 5%."""
    false_gated = false_acc = False
    found_g = found_a = 0
    targets = [c for c, e in effect.items() if abs(e) >= 0.05 and c in g.concurrencies]
    for cell in g.cells:
        if cell.verdict not in (J.BETTER, J.WORSE):
            continue
        true = effect.get(cell.concurrency, 0.0)
        # latency follows throughput in this model: an effect shows on every metric, in its own direction
        right = (true > 0.02 and cell.verdict == J.BETTER) or (true < -0.02 and cell.verdict == J.WORSE)
        if not right:
            false_acc = True
            false_gated = false_gated or not cell.uncontrolled
        elif cell.metric == "output_throughput" and cell.concurrency in targets:
            found_a += 1
            found_g += not cell.uncontrolled
    n = max(1, len(targets))
    return false_gated, false_acc, found_g / n, found_a / n


def study_args(description: str, grids: int) -> argparse.ArgumentParser:
    """The options every grid study takes: draws a row, where its Markdown goes, the date it is stamped with."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--grids", type=int, default=grids, help="synthetic grids per row")
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    return ap


def publish(lines: list[str], out: str | None) -> None:
    """Print a study's Markdown and write it where --out says."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
