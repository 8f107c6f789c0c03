"""The store's schema (ordered migrations, one per `PRAGMA user_version` step), `_Tx`, the
connection as seen inside one of `moe_tui.store.db.Store`'s transactions, and `StoreAccess`, what
the Store's record parts (`store.records`, `store.retention`) use of the Store."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

SCHEMA_VERSION = 11
_ADD_COLUMN = re.compile(r"\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s+(\w+)", re.IGNORECASE)

# Months of data (issue 26). Indices for every read that must not grow with the store: a pair of
# profiles' runs, a campaign's items, the queue's plan counts per profile, runs by age (prune).
# `runs.diagnostic` marks a run on itself as evidence about something other than the backends
# ('cold': an investigation's deliberately cold run), so clearing the queue items that used to say
# so cannot put it back into a cell's mean; a trigger marks it when the item's run is attached and
# the UPDATE backfills existing stores. Deleting a run deletes its requests and GPU samples by
# trigger too, so a delete from a shell without `PRAGMA foreign_keys` orphans nothing.
_COLD_ROLE = """json_extract(c.definition_json, '$.item_roles[' || (SELECT COUNT(*) FROM queue_items q2
            WHERE q2.campaign_id = {item}.campaign_id AND q2.id < {item}.id) || '].role') = 'cold'"""
_INVESTIGATION = "c.policy = 'investigation' AND json_extract(c.definition_json, '$.kind') = 'investigation'"
_SCALE_MIGRATION = f"""
    ALTER TABLE runs ADD COLUMN diagnostic TEXT NOT NULL DEFAULT '';
    CREATE INDEX IF NOT EXISTS runs_profile_status ON runs(profile_name, status, id);
    CREATE INDEX IF NOT EXISTS runs_diagnostic ON runs(profile_name, id) WHERE diagnostic != '';
    CREATE INDEX IF NOT EXISTS runs_finished ON runs(finished_at);
    CREATE INDEX IF NOT EXISTS runs_queue_item ON runs(queue_item_id);
    CREATE INDEX IF NOT EXISTS queue_items_campaign ON queue_items(campaign_id, id);
    CREATE INDEX IF NOT EXISTS queue_items_plan ON queue_items(profile_name, fingerprint, state);
    CREATE INDEX IF NOT EXISTS queue_items_run ON queue_items(run_id);
    CREATE INDEX IF NOT EXISTS campaigns_policy ON campaigns(policy, id);
    CREATE TRIGGER IF NOT EXISTS runs_delete_children AFTER DELETE ON runs BEGIN
        DELETE FROM requests WHERE run_id = OLD.id;
        DELETE FROM gpu_samples WHERE run_id = OLD.id;
    END;
    CREATE TRIGGER IF NOT EXISTS queue_items_mark_cold AFTER UPDATE OF run_id ON queue_items
    WHEN NEW.run_id IS NOT NULL AND NEW.campaign_id IS NOT NULL BEGIN
        UPDATE runs SET diagnostic = 'cold' WHERE id = NEW.run_id AND EXISTS (
            SELECT 1 FROM campaigns c WHERE c.id = NEW.campaign_id AND {_INVESTIGATION}
            AND {_COLD_ROLE.format(item="NEW")});
    END;
    UPDATE runs SET diagnostic = 'cold' WHERE id IN (
        SELECT q.run_id FROM queue_items q JOIN campaigns c ON c.id = q.campaign_id
        WHERE q.run_id IS NOT NULL AND {_INVESTIGATION} AND {_COLD_ROLE.format(item="q")});
"""

# A profiled run (`explain`) ran under the profiler, which slows the server: marked 'profiled' on the
# run itself, like a cold run, so no grid averages it in whatever happens to its queue item.
_PROFILED_MIGRATION = """
    CREATE TRIGGER IF NOT EXISTS queue_items_mark_profiled AFTER UPDATE OF run_id ON queue_items
    WHEN NEW.run_id IS NOT NULL AND NEW.campaign_id IS NOT NULL BEGIN
        UPDATE runs SET diagnostic = 'profiled' WHERE id = NEW.run_id AND EXISTS (
            SELECT 1 FROM campaigns c WHERE c.id = NEW.campaign_id AND c.policy = 'explain'
            AND json_extract(c.definition_json, '$.kind') = 'explain');
    END;
    UPDATE runs SET diagnostic = 'profiled' WHERE id IN (
        SELECT q.run_id FROM queue_items q JOIN campaigns c ON c.id = q.campaign_id
        WHERE q.run_id IS NOT NULL AND c.policy = 'explain' AND json_extract(c.definition_json, '$.kind') = 'explain');
"""

# The grid reads one summary row per run (issue 26, `moe_tui.store.summaries`): what a cell and its
# verdict need (status, diagnostic mark, start id, times, spec, profile snapshot, summary, flags) and
# `facts_json`, the few provenance/telemetry/selfcheck fields it reads (`compare.runs.grid_facts`).
# Triggers keep every column but the facts in step with `runs` whatever writes it; a change of the
# provenance, telemetry or selfcheck empties the facts, which the store's write path fills in the same
# transaction (and a reader computes where a foreign writer left them empty). `campaign_profiles`
# names the profiles a campaign planned, so a grid finds its pair's campaigns through an index (it
# searched every definition's text); `runs_import_hash` finds an imported record's earlier copy by
# its content hash (an import read every imported run). A pruned run's queue item keeps its state with a note
# ("run 12 pruned 2026-12-02") and no dangling run id: a done item is never re-run.
_SUMMARY_COLUMNS = ("profile_name, fingerprint, status, diagnostic, server_start_id, created_at, started_at,"
                    " finished_at, error, spec_json, profile_json, summary_json, flags_json")
_SUMMARY_VALUES = ", ".join(f"NEW.{c.strip()}" for c in _SUMMARY_COLUMNS.split(","))
_SUMMARY_MIGRATION = f"""
    CREATE TABLE IF NOT EXISTS run_summaries (
        run_id INTEGER PRIMARY KEY,
        profile_name TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        status TEXT NOT NULL,
        diagnostic TEXT NOT NULL DEFAULT '',
        server_start_id INTEGER,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        error TEXT NOT NULL DEFAULT '',
        spec_json TEXT NOT NULL,
        profile_json TEXT NOT NULL,
        summary_json TEXT NOT NULL,
        flags_json TEXT NOT NULL,
        facts_json TEXT
    );
    CREATE INDEX IF NOT EXISTS run_summaries_profile ON run_summaries(profile_name, status, diagnostic, run_id);
    CREATE TRIGGER IF NOT EXISTS runs_summary_insert AFTER INSERT ON runs BEGIN
        INSERT OR REPLACE INTO run_summaries (run_id, {_SUMMARY_COLUMNS}, facts_json)
        VALUES (NEW.id, {_SUMMARY_VALUES}, NULL);
    END;
    CREATE TRIGGER IF NOT EXISTS runs_summary_update AFTER UPDATE OF {_SUMMARY_COLUMNS}, provenance_json,
        telemetry_json, selfcheck_json ON runs BEGIN
        UPDATE run_summaries SET ({_SUMMARY_COLUMNS}, facts_json) = ({_SUMMARY_VALUES},
            CASE WHEN NEW.provenance_json IS OLD.provenance_json AND NEW.telemetry_json IS OLD.telemetry_json
                 AND NEW.selfcheck_json IS OLD.selfcheck_json THEN facts_json END)
        WHERE run_id = NEW.id;
    END;
    CREATE TRIGGER IF NOT EXISTS runs_summary_delete AFTER DELETE ON runs BEGIN
        DELETE FROM run_summaries WHERE run_id = OLD.id;
        UPDATE queue_items SET run_id = NULL, updated_at = (julianday('now') - 2440587.5) * 86400.0,
            error = ltrim(error || '; run ' || OLD.id || ' pruned ' || date('now'), '; ')
        WHERE run_id = OLD.id;
    END;
    INSERT OR IGNORE INTO run_summaries (run_id, {_SUMMARY_COLUMNS}, facts_json)
        SELECT id, {_SUMMARY_COLUMNS}, NULL FROM runs;
    UPDATE queue_items SET run_id = NULL, error = ltrim(error || '; run ' || run_id || ' pruned', '; ')
        WHERE run_id IS NOT NULL AND run_id NOT IN (SELECT id FROM runs);
    CREATE INDEX IF NOT EXISTS runs_import_hash ON runs(json_extract(provenance_json, '$.content_sha256'))
        WHERE source = 'import';
    CREATE TABLE IF NOT EXISTS campaign_profiles (
        profile_name TEXT NOT NULL,
        campaign_id INTEGER NOT NULL,
        PRIMARY KEY (profile_name, campaign_id)
    );
    CREATE TRIGGER IF NOT EXISTS campaigns_profiles_insert AFTER INSERT ON campaigns BEGIN
        INSERT OR IGNORE INTO campaign_profiles (profile_name, campaign_id)
        SELECT DISTINCT json_extract(p.value, '$[0]'), NEW.id
        FROM json_each(CASE WHEN json_valid(NEW.definition_json) THEN NEW.definition_json ELSE '{{}}' END,
                       '$.planned_items') p
        WHERE json_type(p.value) = 'array' AND json_type(p.value, '$[0]') = 'text';
    END;
    CREATE TRIGGER IF NOT EXISTS campaigns_profiles_delete AFTER DELETE ON campaigns BEGIN
        DELETE FROM campaign_profiles WHERE campaign_id = OLD.id;
    END;
    INSERT OR IGNORE INTO campaign_profiles (profile_name, campaign_id)
        SELECT DISTINCT json_extract(p.value, '$[0]'), c.id
        FROM campaigns c, json_each(CASE WHEN json_valid(c.definition_json) THEN c.definition_json ELSE '{{}}' END,
                                    '$.planned_items') p
        WHERE json_type(p.value) = 'array' AND json_type(p.value, '$[0]') = 'text';
"""

# A grid that reads what it judges (issue 34): each summary row carries its concurrency (from the spec,
# NULL where the spec has none a grid can read: such a row is read whole), whether it is simulated (the
# grid's banner; set with the grid facts by the write path, NULL while unknown: computed at read time)
# and `seq`, bumped on every insert and update, so an open grid reads only what changed since it was
# built. `run_summaries_cells` covers the grid's first read: per profile, each run's concurrency, spec,
# status and times, without a table row (the spec is then chosen per concurrency, and only the chosen
# spec's runs are read whole).
_CONCURRENCY = """CASE WHEN json_valid({spec}) AND json_type({spec}, '$.max_concurrency') IN ('integer', 'real')
            THEN CAST(json_extract({spec}, '$.max_concurrency') AS INTEGER) END"""
_NEXT_SEQ = "(SELECT IFNULL(MAX(seq), 0) + 1 FROM run_summaries)"
_CELLS_MIGRATION = f"""
    ALTER TABLE run_summaries ADD COLUMN concurrency INTEGER;
    ALTER TABLE run_summaries ADD COLUMN simulated INTEGER;
    ALTER TABLE run_summaries ADD COLUMN seq INTEGER;
    UPDATE run_summaries SET concurrency = {_CONCURRENCY.format(spec="spec_json")}, seq = run_id;
    DROP TRIGGER IF EXISTS runs_summary_insert;
    DROP TRIGGER IF EXISTS runs_summary_update;
    CREATE TRIGGER runs_summary_insert AFTER INSERT ON runs BEGIN
        INSERT OR REPLACE INTO run_summaries (run_id, {_SUMMARY_COLUMNS}, facts_json, concurrency, simulated, seq)
        VALUES (NEW.id, {_SUMMARY_VALUES}, NULL, {_CONCURRENCY.format(spec="NEW.spec_json")}, NULL, {_NEXT_SEQ});
    END;
    CREATE TRIGGER runs_summary_update AFTER UPDATE OF {_SUMMARY_COLUMNS}, provenance_json,
        telemetry_json, selfcheck_json ON runs BEGIN
        UPDATE run_summaries SET ({_SUMMARY_COLUMNS}, facts_json, concurrency, simulated, seq) = ({_SUMMARY_VALUES},
            CASE WHEN NEW.provenance_json IS OLD.provenance_json AND NEW.telemetry_json IS OLD.telemetry_json
                 AND NEW.selfcheck_json IS OLD.selfcheck_json THEN facts_json END,
            {_CONCURRENCY.format(spec="NEW.spec_json")}, NULL, {_NEXT_SEQ})
        WHERE run_id = NEW.id;
    END;
    CREATE INDEX IF NOT EXISTS run_summaries_cells ON run_summaries(profile_name, diagnostic, status, concurrency,
        fingerprint, finished_at, created_at, simulated, run_id);
    CREATE UNIQUE INDEX IF NOT EXISTS run_summaries_seq ON run_summaries(seq);
"""

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE server_starts (
        id INTEGER PRIMARY KEY,
        profile_name TEXT NOT NULL,
        profile_json TEXT NOT NULL,
        argv_json TEXT NOT NULL,
        env_json TEXT NOT NULL,
        log_path TEXT NOT NULL,
        pid INTEGER,
        started_at REAL NOT NULL,
        ready_at REAL,
        stopped_at REAL,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        resolved_backend TEXT,
        backend_mismatch INTEGER NOT NULL DEFAULT 0,
        sglang_version TEXT,
        server_info_json TEXT,
        model_info_json TEXT,
        exit_code INTEGER,
        exit_signal INTEGER,
        log_tail TEXT
    );
    CREATE TABLE campaigns (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        name TEXT NOT NULL,
        policy TEXT NOT NULL,
        definition_json TEXT NOT NULL
    );
    CREATE TABLE queue_items (
        id INTEGER PRIMARY KEY,
        position REAL NOT NULL,
        campaign_id INTEGER REFERENCES campaigns(id),
        profile_name TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        repeat_index INTEGER NOT NULL DEFAULT 0,
        warmup INTEGER NOT NULL DEFAULT 1,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        run_id INTEGER,
        error TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX queue_items_state ON queue_items(state, position);
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        status TEXT NOT NULL,
        profile_name TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        client TEXT NOT NULL,
        profile_json TEXT NOT NULL DEFAULT '{}',
        provenance_json TEXT NOT NULL DEFAULT '{}',
        summary_json TEXT NOT NULL DEFAULT '{}',
        flags_json TEXT NOT NULL DEFAULT '[]',
        telemetry_json TEXT NOT NULL DEFAULT '{}',
        selfcheck_json TEXT NOT NULL DEFAULT '{}',
        queue_item_id INTEGER,
        server_start_id INTEGER,
        source TEXT NOT NULL DEFAULT 'moe-tui',
        error TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX runs_profile_fp ON runs(profile_name, fingerprint);
    CREATE TABLE requests (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        ok INTEGER NOT NULL,
        sent_at REAL,
        prompt_len INTEGER,
        output_len INTEGER,
        ttft REAL,
        latency REAL,
        itl_json TEXT NOT NULL DEFAULT '[]',
        finish_reason TEXT,
        error TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, idx)
    );
    CREATE TABLE gpu_samples (
        id INTEGER PRIMARY KEY,
        run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
        t REAL NOT NULL,
        sample_json TEXT NOT NULL
    );
    CREATE INDEX gpu_samples_run ON gpu_samples(run_id, t);
    """,
    # Queue-wide settings (the persisted pause flag). IF NOT EXISTS: early version-1 stores made
    # this table on the fly.
    2: """
    CREATE TABLE IF NOT EXISTS queue_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # Correctness gate samples (issue 15, moe_tui/gate/probe.py): one row per gate pass of a profile's
    # server, every prompt's greedy token ids and logprobs in samples_json. IF NOT EXISTS, so the
    # integrator may renumber this migration freely.
    3: """
    CREATE TABLE IF NOT EXISTS gate_samples (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        profile_name TEXT NOT NULL,
        campaign_id INTEGER,
        server_start_id INTEGER,
        prompt_set TEXT NOT NULL,
        resolved_backend TEXT,
        samples_json TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS gate_samples_profile ON gate_samples(profile_name, created_at);
    """,
    # Investigations (issue 17): an item may ask for a fresh server start before it runs.
    4: """
    ALTER TABLE queue_items ADD COLUMN fresh_start INTEGER NOT NULL DEFAULT 0;
    """,
    5: _SCALE_MIGRATION,
    6: _PROFILED_MIGRATION,
    # Months of data, second part (issue 26): `runs.stored_bytes`, what a run and its samples take
    # (set when the runner stores it; NULL: counted when asked), keeps `moe-tui store usage` quick;
    # the queue read in order (the Queue screen, claim) walks an index instead of sorting.
    7: """
    ALTER TABLE runs ADD COLUMN stored_bytes INTEGER;
    CREATE INDEX IF NOT EXISTS queue_items_position ON queue_items(position, id);
    """,
    8: _SUMMARY_MIGRATION,
    9: _CELLS_MIGRATION,
    # Executors (issue 37, `moe_tui.store.jobs`): one row per batch job an item became (Slurm), its
    # state as the scheduler said it, and how the controller settled it. IF NOT EXISTS: renumber freely.
    10: """
    CREATE TABLE IF NOT EXISTS executor_jobs (
        id INTEGER PRIMARY KEY,
        executor TEXT NOT NULL,
        name TEXT NOT NULL,
        job_id TEXT,
        queue_item_id INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        state TEXT NOT NULL,
        node TEXT NOT NULL DEFAULT '',
        reason TEXT NOT NULL DEFAULT '',
        result_path TEXT NOT NULL,
        submitted_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        ended_seen_at REAL,
        cancel_asked INTEGER NOT NULL DEFAULT 0,
        settled_at REAL,
        outcome TEXT NOT NULL DEFAULT '',
        run_id INTEGER
    );
    CREATE INDEX IF NOT EXISTS executor_jobs_open ON executor_jobs(executor, settled_at);
    CREATE INDEX IF NOT EXISTS executor_jobs_item ON executor_jobs(queue_item_id, id);
    """,
    # The pair's own campaigns (issue 34, `store.grid_rows.pair_campaigns`): the campaigns whose items
    # include both profiles of a grid, from one covering index per profile. IF NOT EXISTS: renumber freely.
    11: """
    CREATE INDEX IF NOT EXISTS queue_items_profile_campaign ON queue_items(profile_name, campaign_id);
    """,
}


class _Tx:
    """The connection inside a transaction; only statement-level calls are allowed."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, rows)

    def executescript_in_tx(self, script: str) -> None:
        # executescript() would COMMIT first; run the statements one by one inside our transaction.
        for statement in _split_sql(script):
            if not self._adds_existing_column(statement):
                self._conn.execute(statement)

    def _adds_existing_column(self, statement: str) -> bool:
        """ADD COLUMN of a column the table already has (SQLite has no IF NOT EXISTS for it): a
        store another branch's build already upgraded, or a migration renumbered on merge."""
        found = _ADD_COLUMN.match(statement)
        if found is None:
            return False
        table, column = found.groups()
        return any(row[1] == column for row in self._conn.execute(f"PRAGMA table_info({table})"))


class StoreAccess(Protocol):
    """What the Store's record mixins use of `moe_tui.store.db.Store`, declared once: they write
    through its `transaction()` and read through its `query()`, so locking, retries and read-only
    refusal stay in one place; retention also takes the lock and the connection for VACUUM (no
    transaction may be open around it) and reads the commit count for `generation`."""

    path: Path
    _lock: threading.RLock
    _conn: sqlite3.Connection
    _commits: int

    def transaction(self) -> AbstractContextManager[_Tx]: ...

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]: ...


def _split_sql(script: str) -> list[str]:
    statements, current = [], []
    for line in script.splitlines():
        current.append(line)
        if sqlite3.complete_statement("\n".join(current)):
            statement = "\n".join(current).strip()
            if statement:
                statements.append(statement)
            current = []
    return statements
