"""Run summaries: the one row per run a comparison grid reads (issue 26), and how it is kept in step.

`run_summaries` (schema 8, `moe_tui.store.schema`) holds what a cell and its verdict need: status,
diagnostic mark, server start id, times, spec, profile snapshot, summary metrics, flags, and the
run's grid facts (`compare.runs.grid_facts`: the few provenance, telemetry and selfcheck fields the
flags, the confounder check and the roofline read). Triggers copy every column but the facts from
`runs` on each insert, update and delete, whoever writes; the store's write path (`create_run`,
`finish_run`, the imports, an archive's restore, the upgrade to schema 8) fills the facts in the same
transaction. A row whose facts a foreign writer left empty is computed at read time (never written
by a reader). A grid therefore decodes a few small JSON texts per run of the compared pair, never a
whole provenance, telemetry or per-request sample, whatever the store holds.

`SummaryRecords` is a mixin of `moe_tui.store.db.Store` (like `store.records`): writes through its
`transaction()`, reads through `query()`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moe_tui.records import (
    BenchSummary,
    DecodedTexts,
    GridFactsJson,
    ProfileSnapshot,
    SelfChecks,
    StoredProvenance,
    StoredSpec,
    StoredTelemetry,
)
from moe_tui.store.schema import _Tx

_BATCH = 500  # runs per statement while filling facts (the upgrade of a large store)


@dataclass(frozen=True)
class RunSummary:
    """A run as a grid sees it: the names match `store.RunRecord`, so `compare.runs.normalise` and
    the roofline read either; provenance, telemetry and selfcheck hold only the grid facts."""

    id: int
    profile_name: str
    fingerprint: str
    status: str
    diagnostic: str
    server_start_id: int | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    error: str
    spec: StoredSpec
    profile: ProfileSnapshot
    summary: BenchSummary
    flags: list[str]
    provenance: StoredProvenance  # grid facts only, like telemetry and selfcheck
    telemetry: StoredTelemetry
    selfcheck: SelfChecks


def _loads(text: str | None, default: Any) -> Any:
    return json.loads(text) if text else default


def facts_of(provenance_json: str | None, telemetry_json: str | None, selfcheck_json: str | None) -> GridFactsJson:
    from moe_tui.compare.runs import grid_facts

    return grid_facts(_loads(provenance_json, {}), _loads(telemetry_json, {}), _loads(selfcheck_json, {}))


def fill_facts(tx: _Tx, run_ids: Iterable[int] | None = None) -> int:
    """Compute and store the grid facts of `run_ids` (every run still without them when None) inside
    the caller's transaction. Returns how many rows were filled."""
    from moe_tui.store.records import _dump

    if run_ids is None:
        rows = tx.execute("SELECT r.id, r.provenance_json, r.telemetry_json, r.selfcheck_json FROM run_summaries s"
                          " JOIN runs r ON r.id = s.run_id WHERE s.facts_json IS NULL").fetchall()
    else:
        ids = sorted({int(i) for i in run_ids})
        rows = []
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start:start + _BATCH]
            rows += tx.execute("SELECT id, provenance_json, telemetry_json, selfcheck_json FROM runs"
                               f" WHERE id IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    facts = {int(r[0]): facts_of(r[1], r[2], r[3]) for r in rows}
    tx.executemany("UPDATE run_summaries SET facts_json = ? WHERE run_id = ?",
                   [(_dump(f), rid) for rid, f in facts.items()])
    fill_simulated(tx, facts)
    return len(rows)


def simulated_of(profile_json: str | None, facts: Mapping[str, Any], flags_json: str | None) -> bool:
    """The grid's "simulated" mark of one run, from what its Run holds (`compare.runs.is_simulated`)."""
    from moe_tui.judgement import is_simulated

    return is_simulated(profile=_loads(profile_json, {}), provenance=facts.get("provenance") or {},
                        flags=_loads(flags_json, []))


def fill_simulated(tx: _Tx, facts: Mapping[int, Mapping[str, Any]] | None = None) -> int:
    """Store the simulated mark of runs whose grid facts are known: those of `facts` (run id -> facts,
    just computed), else every row whose mark is unknown (the upgrade to schema 9). Returns how many."""
    if facts is None:
        rows = tx.execute("SELECT run_id, facts_json FROM run_summaries WHERE simulated IS NULL"
                          " AND facts_json IS NOT NULL LIMIT ?", (_BATCH,)).fetchall()
        facts = {int(r[0]): json.loads(r[1]) for r in rows}
    ids = sorted(facts)
    marks: list[tuple[int, int]] = []
    for start in range(0, len(ids), _BATCH):
        chunk = ids[start:start + _BATCH]
        for r in tx.execute("SELECT run_id, profile_json, flags_json FROM run_summaries"
                            f" WHERE run_id IN ({','.join('?' * len(chunk))})", chunk).fetchall():
            marks.append((int(simulated_of(r[1], facts[int(r[0])], r[2])), int(r[0])))
    tx.executemany("UPDATE run_summaries SET simulated = ? WHERE run_id = ?", marks)
    return len(marks)


class SummaryRecords:
    """The grid's read of run summaries (mixed into Store)."""

    if TYPE_CHECKING:  # provided by Store
        def transaction(self) -> AbstractContextManager[_Tx]: ...
        def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...

    def fill_missing_facts(self) -> int:
        """Grid facts for every run without them (the upgrade to schema 8; a run a foreign writer
        inserted), in batches of transactions so a large store is not locked for the whole pass."""
        filled = 0
        while True:
            ids = [int(r[0]) for r in self.query(
                "SELECT run_id FROM run_summaries WHERE facts_json IS NULL ORDER BY run_id LIMIT ?", (_BATCH,))]
            if not ids:
                break
            with self.transaction() as tx:
                filled += fill_facts(tx, ids)
        while True:  # facts known, simulated mark not (the upgrade to schema 9)
            with self.transaction() as tx:
                if not fill_simulated(tx):
                    return filled

    def run_summaries(self, *, profile_name: str, statuses: Sequence[str] | None = None,
                      exclude_diagnostic: bool = False) -> list[RunSummary]:
        """One profile's run summaries in id order (an indexed read of that profile alone);
        `exclude_diagnostic` leaves out runs marked as evidence about something else (cold, profiled)."""
        sql, params = "SELECT * FROM run_summaries WHERE profile_name = ?", [profile_name]
        if statuses:
            sql += f" AND status IN ({','.join('?' * len(statuses))})"
            params.extend(statuses)
        if exclude_diagnostic:
            sql += " AND diagnostic = ''"
        rows = self.query(sql + " ORDER BY run_id", params)
        missing = [int(r["run_id"]) for r in rows if r["facts_json"] is None]
        computed: dict[int, GridFactsJson] = {}
        if missing:  # left empty by a foreign writer: computed here, stored by the next write path
            marks = ",".join("?" * len(missing))
            for r in self.query(f"SELECT id, provenance_json, telemetry_json, selfcheck_json FROM runs WHERE id IN ({marks})",
                                missing):
                computed[int(r[0])] = facts_of(r[1], r[2], r[3])
        # Runs share their spec and profile JSON, and often their grid facts (one server start, one GPU
        # state): each distinct text is decoded once, and what a grid derives from it is derived once
        # (`compare.memo`). The decoded dicts are shared between runs: read them, never mutate them.
        shared: DecodedTexts = {}
        return [summary_of_row(r, shared, computed) for r in rows]


def _shared(text: str, shared: DecodedTexts) -> Any:
    if text not in shared:
        shared[text] = json.loads(text)
    return shared[text]


def summary_of_row(row: sqlite3.Row, shared: DecodedTexts, computed: Mapping[int, GridFactsJson]) -> RunSummary:
    """One run_summaries row as a RunSummary (`shared`: decoded JSON texts, shared between rows)."""
    rid = int(row["run_id"])
    facts: Mapping[str, Any] = computed.get(rid) or (_shared(row["facts_json"], shared) if row["facts_json"] else {})
    return RunSummary(
        id=rid, profile_name=row["profile_name"], fingerprint=row["fingerprint"], status=row["status"],
        diagnostic=row["diagnostic"], server_start_id=row["server_start_id"], created_at=row["created_at"],
        started_at=row["started_at"], finished_at=row["finished_at"], error=row["error"],
        spec=_shared(row["spec_json"], shared), profile=_shared(row["profile_json"], shared),
        summary=json.loads(row["summary_json"]), flags=json.loads(row["flags_json"]),
        provenance=facts.get("provenance") or {}, telemetry=facts.get("telemetry") or {},
        selfcheck=facts.get("selfcheck") or {},
    )
