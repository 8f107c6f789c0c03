"""Where a grid build takes one side's runs from: keys per concurrency first, whole runs of a chosen spec after.

A grid chooses one spec per (side, concurrency) from what every run's key says (`compare.points.Keyed`:
fingerprint, status, time), then judges the chosen spec's runs alone. `RunSource` holds the keys and
the way to the whole runs: `memory_source` over runs already in hand (`build_grid_from_runs`), or
one that reads them from the store by id (`grids.pair`, from the index of `store.grid_rows`), so a
build decodes the runs it judges and no others. Every choice and every word of the grid is the same
from either (tests/test_grid_incremental.py builds both and compares).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from moe_tui.compare.points import Keyed
from moe_tui.compare.runs import Run, concurrency_of, is_simulated


@dataclass(frozen=True)
class RunSource:
    """One side's runs as a build reads them.

    `keys`: per concurrency, every run there (a whole Run or a key); `bad`: ids of runs whose spec has
    no concurrency (left out, with a warning); `of_spec(conc, fp)`: the whole runs of one spec at one
    concurrency; `every()`: all runs, whole (read only when none of the side's runs was used: the
    profile snapshot and provenance then come from its latest runs); `simulated()`: any run simulated."""

    keys: Mapping[int, Sequence[Keyed]]
    bad: tuple[int, ...]
    of_spec: Callable[[int, str], Sequence[Run]]
    every: Callable[[], Sequence[Run]]
    simulated: Callable[[], bool]


def group(runs: Iterable[Run]) -> tuple[dict[int, list[Run]], tuple[int, ...]]:
    """Runs per concurrency, and the ids of those whose spec names none (in the given order)."""
    by_conc: dict[int, list[Run]] = {}
    bad = []
    for run in runs:
        conc = concurrency_of(run)
        if conc is None:
            bad.append(run.id)
        else:
            by_conc.setdefault(conc, []).append(run)
    return by_conc, tuple(bad)


def memory_source(runs: Sequence[Run]) -> RunSource:
    """A side whose runs are all in hand."""
    by_conc, bad = group(runs)
    return RunSource(keys=by_conc, bad=bad,
                     of_spec=lambda conc, fp: [r for r in by_conc.get(conc, ()) if r.fingerprint == fp],
                     every=lambda: runs, simulated=lambda: any(is_simulated(r) for r in runs))
