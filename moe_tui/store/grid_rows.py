"""The grid's reads of the store (issue 34): a pair's cell rows through an index, the chosen runs by id,
and what changed since a grid was built.

A comparison grid first needs, per profile, only each run's concurrency, spec fingerprint, status and
times (to choose the spec per concurrency and say which others exist); it reads those from the covering
index `run_summaries_cells` (schema 9, `moe_tui.store.schema`), no table row and no JSON. It then reads
whole summaries (`store.summaries`) of the runs it judges alone: the chosen spec's runs at each
concurrency. An open grid asks `changed_since` for the rows whose `seq` moved since it was built, so a
new run is one indexed read, not a re-read of the pair.

`CellRow` is a slots dataclass: typed for mypy, no per-instance dict (a tenth of a dict's memory and no
hashing of field names per read); the rows hold only scalars, so a build with the collector frozen
(`compare.build`) does not walk them. All SQL of the grid lives here.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moe_tui.records import DecodedTexts, GridFactsJson
from moe_tui.store.summaries import RunSummary, facts_of, simulated_of, summary_of_row

if TYPE_CHECKING:
    from moe_tui.store.db import Store

_BATCH = 500  # ids per statement
# Every column in `run_summaries_cells`: the first read walks that index alone, no table row.
_CELL_COLUMNS = "run_id, concurrency, fingerprint, status, created_at, finished_at, simulated"


@dataclass(frozen=True, slots=True)
class CellRow:
    """One run as the grid's first read sees it: the names a spec choice reads (`compare.points`)."""

    id: int
    profile_name: str
    concurrency: int | None  # None: the spec has no readable max_concurrency (the run is read whole)
    fingerprint: str
    status: str
    order: tuple[float, int]  # (finished or created time, id), as `compare.runs.Run.order`
    simulated: bool | None  # None: not known yet (a foreign writer's row): read from the row itself


def _row(profile: str, r: Any) -> CellRow:
    when = r[5] or r[4] or 0.0
    return CellRow(id=int(r[0]), profile_name=profile, concurrency=r[1], fingerprint=r[2], status=r[3],
                   order=(float(when), int(r[0])), simulated=None if r[6] is None else bool(r[6]))


def _where(statuses: Sequence[str]) -> str:
    return f"profile_name = ? AND diagnostic = '' AND status IN ({','.join('?' * len(statuses))})"


def cell_rows(store: Store, profile: str, statuses: Sequence[str]) -> list[CellRow]:
    """Every run of `profile` a grid may use (not diagnostic, one of `statuses`), in id order."""
    rows = store.query(f"SELECT {_CELL_COLUMNS} FROM run_summaries WHERE {_where(statuses)} ORDER BY run_id",
                       (profile, *statuses))
    return [_row(profile, r) for r in rows]


def last_seq(store: Store) -> int:
    """The highest change mark of any summary row (read before the rows a grid is built from)."""
    return int(store.query("SELECT IFNULL(MAX(seq), 0) FROM run_summaries")[0][0])


def run_count(store: Store, profile: str) -> int:
    """Summary rows of `profile`, whatever their status: fewer than a grid counted means some were deleted."""
    return int(store.query("SELECT COUNT(*) FROM run_summaries WHERE profile_name = ?", (profile,))[0][0])


def changed_since(store: Store, profile: str, seq: int, statuses: Sequence[str]) -> list[tuple[int, CellRow | None]]:
    """(run id, its cell row, or None when it does not count for a grid: diagnostic, or another status)
    for every row of `profile` inserted or updated after `seq`, in seq order (an index range of `seq`)."""
    # `+profile_name`: walk the seq index from `seq` on (the few rows changed), not the profile's rows.
    rows = store.query(f"SELECT {_CELL_COLUMNS}, diagnostic FROM run_summaries WHERE seq > ? AND +profile_name = ?"
                       " ORDER BY seq", (seq, profile))
    return [(int(r[0]), _row(profile, r) if r[7] == "" and r[3] in statuses else None) for r in rows]


def summaries_by_id(store: Store, ids: Iterable[int]) -> list[RunSummary]:
    """Whole summaries of `ids` (in id order), each distinct JSON text decoded once."""
    wanted = sorted(set(ids))
    shared: DecodedTexts = {}
    out: list[RunSummary] = []
    for start in range(0, len(wanted), _BATCH):
        chunk = wanted[start:start + _BATCH]
        rows = store.query(f"SELECT * FROM run_summaries WHERE run_id IN ({','.join('?' * len(chunk))})"
                           " ORDER BY run_id", chunk)
        missing = [int(r["run_id"]) for r in rows if r["facts_json"] is None]
        computed = _computed_facts(store, missing) if missing else {}
        out += [summary_of_row(r, shared, computed) for r in rows]
    return out


def simulated_unknown(store: Store, ids: Sequence[int]) -> bool:
    """Whether any of `ids` (rows whose simulated mark is not stored yet) is simulated, from its row."""
    for start in range(0, len(ids), _BATCH):
        chunk = list(ids[start:start + _BATCH])
        rows = store.query("SELECT run_id, profile_json, facts_json, flags_json FROM run_summaries"
                           f" WHERE run_id IN ({','.join('?' * len(chunk))})", chunk)
        computed = _computed_facts(store, [int(r[0]) for r in rows if r[2] is None])
        for r in rows:
            facts: Mapping[str, Any] = computed.get(int(r[0])) or (json.loads(r[2]) if r[2] else {})
            if simulated_of(r[1], facts, r[3]):
                return True
    return False


def _computed_facts(store: Store, ids: Sequence[int]) -> dict[int, GridFactsJson]:
    """Grid facts a foreign writer left empty, computed here (a reader never writes them)."""
    out: dict[int, GridFactsJson] = {}
    for start in range(0, len(ids), _BATCH):
        chunk = list(ids[start:start + _BATCH])
        for r in store.query("SELECT id, provenance_json, telemetry_json, selfcheck_json FROM runs"
                             f" WHERE id IN ({','.join('?' * len(chunk))})", chunk):
            out[int(r[0])] = facts_of(r[1], r[2], r[3])
    return out


@dataclass(frozen=True, slots=True)
class PairCampaigns:
    """The campaigns that measured both profiles of a pair (their plans name both) and their runs' ids."""

    campaigns: int  # how many comparison campaigns have items of both profiles
    run_ids: frozenset[int]  # every run of either profile made by one of their queue items


def pair_campaigns(store: Store, baseline: str, candidate: str) -> PairCampaigns | None:
    """The pair's own campaigns (those with queue items of both profiles, `queue_items_profile_campaign`) and
    the runs their items made of either profile (`queue_items_campaign`, `runs_queue_item`): index reads, no
    run decoded. None when no comparison campaign holds both (imports, one-off runs, stores from before
    campaigns): an investigation or explain campaign alone does not make a pair's campaign (it measured one
    cell of a grid built from whatever was there); with one, its runs count with the pair's campaigns'.
    Items, not the plan's `campaign_profiles`: an investigation's campaign names no plan and measures both."""
    both = store.query(
        "SELECT c.id, c.policy IN ('investigation', 'explain') FROM campaigns c WHERE c.id IN ("
        "SELECT campaign_id FROM queue_items WHERE profile_name = ? AND campaign_id IS NOT NULL"
        " INTERSECT SELECT campaign_id FROM queue_items WHERE profile_name = ? AND campaign_id IS NOT NULL)",
        (baseline, candidate))
    if all(r[1] for r in both):
        return None
    shared = [int(r[0]) for r in both]
    ids: set[int] = set()
    for start in range(0, len(shared), _BATCH):
        chunk = shared[start:start + _BATCH]
        ids.update(int(r[0]) for r in store.query(
            "SELECT r.id FROM queue_items q JOIN runs r ON r.queue_item_id = q.id"
            f" WHERE q.campaign_id IN ({','.join('?' * len(chunk))}) AND q.profile_name IN (?, ?)",
            (*chunk, baseline, candidate)))
    return PairCampaigns(sum(1 for r in both if not r[1]), frozenset(ids))


def other_ids(store: Store, profile: str, statuses: Sequence[str]) -> list[int]:
    """Ids of `profile`'s rows that do not count for a grid (diagnostic, or another status: running)."""
    return [int(r[0]) for r in store.query(
        f"SELECT run_id FROM run_summaries WHERE profile_name = ? AND NOT ({_where(statuses)})",
        (profile, profile, *statuses))]


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    """What an investigation's evidence reads of a run the grid averaged (`investigate.store`)."""

    id: int
    server_start_id: int | None
    flags: tuple[str, ...]
    started_at: float | None
    finished_at: float | None
    warmup_s: float | None  # the warmup pass's duration, from the provenance (SQLite reads the one field)


def _number(value: object) -> float | None:
    """A stored number as the provenance wrote it (a numeric text too), else None."""
    try:
        return float(value) if isinstance(value, (int, float, str)) else None
    except ValueError:
        return None


def evidence_rows(store: Store, ids: Iterable[int]) -> dict[int, EvidenceRow]:
    """`ids`' evidence rows by id: one statement per batch, one provenance field each, never a whole run.
    Kept per store handle with the row's change mark (`seq`): a row read before is read again only
    when it changed (an open grid and `investigate` ask for the same runs again and again)."""
    wanted = sorted(set(ids))
    with _evidence_lock:
        kept = _evidence.setdefault(store, {})
    out: dict[int, EvidenceRow] = {}
    stale: list[int] = []
    for start in range(0, len(wanted), _BATCH):
        chunk = wanted[start:start + _BATCH]
        for rid, seq in store.query(f"SELECT run_id, seq FROM run_summaries WHERE run_id IN ({','.join('?' * len(chunk))})",
                                    chunk):
            hit = kept.get(int(rid))
            if hit is not None and seq is not None and hit[0] == seq:
                out[int(rid)] = hit[1]
            else:
                stale.append(int(rid))
    for start in range(0, len(stale), _BATCH):
        chunk = stale[start:start + _BATCH]
        for r in store.query(
                "SELECT r.id, r.server_start_id, r.flags_json, r.started_at, r.finished_at, CASE WHEN"
                " json_valid(r.provenance_json) THEN json_extract(r.provenance_json, '$.warmup_pass.duration_s') END,"
                f" s.seq FROM runs r JOIN run_summaries s ON s.run_id = r.id WHERE r.id IN ({','.join('?' * len(chunk))})",
                chunk):
            row = EvidenceRow(int(r[0]), r[1], tuple(json.loads(r[2]) if r[2] else ()), r[3], r[4], _number(r[5]))
            out[row.id] = row
            if r[6] is not None:
                kept[row.id] = (int(r[6]), row)
    return out


_evidence_lock = threading.Lock()
_evidence: weakref.WeakKeyDictionary[Store, dict[int, tuple[int, EvidenceRow]]] = weakref.WeakKeyDictionary()
