"""A profile's runs as a grid reads them from the store, kept up to date by what changed (issue 34).

`ProfileRows` holds one profile's cell rows (`store.grid_rows.CellRow`: concurrency, spec, status, time,
from an index) and the whole runs a grid judged (decoded once, kept while they do not change).
`refresh` reads only the rows whose change mark (`seq`) moved since the last read, so a new run in an
open grid costs one indexed read and the decode of that run, not a re-read of the pair; rows that
disappeared (a prune) make it read everything again. `source()` is what `compare.build_grid_from_sources`
reads: the keys per concurrency and the chosen spec's runs, read whole on first use.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from moe_tui.compare.runs import Run, concurrency_of, normalise
from moe_tui.compare.sources import RunSource
from moe_tui.store import grid_rows
from moe_tui.store.grid_rows import CellRow
from moe_tui.store.summaries import RunSummary

if TYPE_CHECKING:
    from moe_tui.compare.points import Keyed
    from moe_tui.store.db import Store

RUN_STATUSES = ("complete", "incomplete", "failed")


class ProfileRows:
    """One profile's grid rows and the whole runs read so far (not thread-safe: one reader at a time)."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.rows: dict[int, CellRow] = {}
        self.others: set[int] = set()  # rows that do not count for a grid (diagnostic, running, ...)
        self.runs: dict[int, Run] = {}  # whole runs read (the chosen specs'), by id
        self.summaries: dict[int, RunSummary] = {}  # the same runs as stored (the roofline reads these)
        self.seq = -1  # the change mark the rows are current to; -1: never read

    def refresh(self, store: Store) -> int:
        """Bring the rows up to date; returns how many rows were read."""
        if self.seq < 0:
            return self._read_all(store)
        seq = grid_rows.last_seq(store)
        changed = grid_rows.changed_since(store, self.profile, self.seq, RUN_STATUSES)
        for rid, row in changed:
            self.runs.pop(rid, None)
            self.summaries.pop(rid, None)
            self.rows.pop(rid, None)
            self.others.discard(rid)
            if row is None:
                self.others.add(rid)
            else:
                self.rows[rid] = row
        self.seq = max(seq, self.seq)
        if len(self.rows) + len(self.others) != grid_rows.run_count(store, self.profile):  # rows were deleted
            return self._read_all(store)
        return len(changed)

    def _read_all(self, store: Store) -> int:
        self.seq = grid_rows.last_seq(store)  # first: a change while reading is read again next time
        rows = grid_rows.cell_rows(store, self.profile, RUN_STATUSES)
        self.rows = {r.id: r for r in rows}
        self.others = set(grid_rows.other_ids(store, self.profile, RUN_STATUSES))
        self.runs, self.summaries = {}, {}
        return len(rows)

    def whole(self, store: Store, ids: Sequence[int]) -> list[Run]:
        """The runs of `ids`, whole: decoded once, kept until they change."""
        missing = [i for i in ids if i not in self.runs]
        for summary in grid_rows.summaries_by_id(store, missing):
            self.runs[summary.id] = normalise(summary, f"{self.profile} run")
            self.summaries[summary.id] = summary
        return [self.runs[i] for i in ids if i in self.runs]

    def counted(self, keep: Collection[int] | None) -> int:
        """How many of the rows a grid may use are left out by `keep` (the pair's campaigns' runs)."""
        return 0 if keep is None else sum(1 for rid in self.rows if rid not in keep)

    def source(self, store: Store, keep: Collection[int] | None = None) -> RunSource:
        """The rows as a grid build reads them (runs read whole when the build asks for them); `keep`: the
        runs of the pair's own campaigns (`store.grid_rows.pair_campaigns`), None: every row."""
        rows = sorted((r for r in self.rows.values() if keep is None or r.id in keep), key=lambda r: r.id)
        keys: dict[int, list[Keyed]] = {}
        unreadable = [r.id for r in rows if r.concurrency is None]
        for r in rows:
            if r.concurrency is not None:
                keys.setdefault(r.concurrency, []).append(r)
        bad = []
        for run in self.whole(store, unreadable):  # no concurrency in SQL's reading of the spec: Python's
            conc = concurrency_of(run)
            if conc is None:
                bad.append(run.id)
            else:
                keys.setdefault(conc, []).append(run)

        def of_spec(conc: int, fp: str) -> list[Run]:
            here = keys.get(conc, ())
            whole = [k for k in here if isinstance(k, Run) and k.fingerprint == fp]
            return whole + self.whole(store, [k.id for k in here if isinstance(k, CellRow) and k.fingerprint == fp])

        def simulated() -> bool:
            if any(r.simulated for r in rows):
                return True
            return grid_rows.simulated_unknown(store, [r.id for r in rows if r.simulated is None])

        return RunSource(keys=keys, bad=tuple(bad), of_spec=of_spec,
                         every=lambda: self.whole(store, [r.id for r in rows]), simulated=simulated)
