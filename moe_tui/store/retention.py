"""Retention for a store kept for months (issue 26): how big it is per profile and campaign, which
runs an age/profile/campaign selects, pruning them (their requests and GPU samples go with them, by
trigger) and giving the space back (`store.space`), and keeping per-request samples for the last N runs only (a setting the runner applies
after each run it stores). Also the reads that must not grow with the store: marked diagnostic
runs, the profiles with runs, and `generation` (what caches of store reads are keyed by).

`RetentionRecords` is a mixin of `moe_tui.store.db.Store` (like `store.records`; what it uses of it
is declared by `store.schema.StoreAccess`): writes go through the store's `transaction()`, reads
through `query()`. Archives (what `moe-tui import` reads back) live in `store.archive`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from moe_tui.records.store import CampaignUsageJson, ProfileUsageJson, StoreSpaceJson
from moe_tui.store.archive import ARCHIVE_KIND as ARCHIVE_KIND  # re-exported
from moe_tui.store.archive import ArchiveError as ArchiveError  # re-exported
from moe_tui.store.schema import StoreAccess
from moe_tui.store.space import Reclaimed, file_bytes, reclaim

KEEP_SAMPLES_KEY = "keep_samples_runs"  # queue_settings: per-request samples kept for the last N runs
KEEP_ALL = "all"  # that setting's value for "every run's"
# Without a setting: the newest 500 runs keep their per-request samples (what Run details' latency
# histograms read; the grid reads run summaries only), about 1 GB at the default spec.
DEFAULT_KEEP_SAMPLES_RUNS = 500
RETENTION_BATCH = 200  # runs whose samples the runner drops after one run at most
DEFAULT_WARN_BYTES = 20 * 1024**3  # the TUI says so past this (MOE_TUI_STORE_WARN_GB changes it)
_CHUNK = 500  # ids per statement (SQLite's variable limit is far above; keeps statements small)


@dataclass(frozen=True)
class Usage:
    """Bytes are the stored text's length (what pruning gives back), not pages."""

    file_bytes: int
    free_bytes: int
    runs: int
    profiles: tuple[ProfileUsageJson, ...]
    campaigns: tuple[CampaignUsageJson, ...]

    def to_dict(self) -> StoreSpaceJson:
        return {"file_bytes": self.file_bytes, "free_bytes": self.free_bytes, "runs": self.runs,
                "profiles": list(self.profiles), "campaigns": list(self.campaigns)}


REQUEST_ROW_BYTES, SAMPLE_ROW_BYTES = 64, 24  # a row's columns beside its JSON, roughly
RUN_BYTES = ("(LENGTH(spec_json) + LENGTH(profile_json) + LENGTH(provenance_json) + LENGTH(summary_json)"
             " + LENGTH(telemetry_json) + LENGTH(selfcheck_json))")
_REQUEST_BYTES = (f"(SELECT COALESCE(SUM(LENGTH(q.itl_json)) + COUNT(*) * {REQUEST_ROW_BYTES}, 0) FROM requests q"
                  " WHERE q.run_id = r.id)")
_SAMPLE_BYTES = (f"(SELECT COALESCE(SUM(LENGTH(g.sample_json)) + COUNT(*) * {SAMPLE_ROW_BYTES}, 0) FROM gpu_samples g"
                 " WHERE g.run_id = r.id)")
# A run's bytes: as stored when the runner wrote it, else counted (older runs, imports: slow on a big store).
_BYTES = ("COALESCE(r.stored_bytes, LENGTH(r.spec_json) + LENGTH(r.profile_json) + LENGTH(r.provenance_json)"
          f" + LENGTH(r.summary_json) + LENGTH(r.telemetry_json) + LENGTH(r.selfcheck_json) + {_REQUEST_BYTES}"
          f" + {_SAMPLE_BYTES})")


class RetentionRecords(StoreAccess):
    """Usage, selection, archive, prune, vacuum and sample retention (mixed into Store, which
    provides what `StoreAccess` declares)."""

    # -- reads that must not grow with the store (the grid's, the caches') ----------------------
    def diagnostic_run_ids(self, profiles: Sequence[str] | None = None) -> list[int]:
        """Runs marked as evidence about something other than the backends (`runs.diagnostic`,
        e.g. an investigation's cold runs), of `profiles` when given: an indexed read."""
        sql, params = "SELECT id FROM runs WHERE diagnostic != ''", list[Any]()
        if profiles is not None:
            sql += f" AND profile_name IN ({','.join('?' * len(profiles))})"
            params = list(profiles)
        return [int(r[0]) for r in self.query(sql + " ORDER BY id", params)]

    def profile_names_with_runs(self) -> list[str]:
        # A skip-scan of the (profile_name, ...) index: one seek per profile, not one row per run.
        return [r[0] for r in self.query(
            "WITH RECURSIVE p(name) AS (SELECT MIN(profile_name) FROM runs UNION ALL"
            " SELECT (SELECT MIN(profile_name) FROM runs WHERE profile_name > p.name) FROM p"
            " WHERE p.name IS NOT NULL) SELECT name FROM p WHERE name IS NOT NULL")]

    def generation(self) -> tuple[int, int]:
        """Changes whenever anything is committed to the store, by this handle or another process
        (a cache of what was read from it is keyed by this): (this handle's commits, data_version)."""
        return self._commits, int(self.query("PRAGMA data_version")[0][0])

    # -- how big ----------------------------------------------------------------------------------
    def file_bytes(self) -> int:
        """The store file and its WAL on disk."""
        return file_bytes(self.path)

    def usage(self) -> Usage:
        """Runs and bytes per profile and per campaign (a full read: a command's, not a screen's)."""
        per_run = (f"SELECT r.id, r.profile_name, r.finished_at, {_BYTES} AS bytes,"
                   " (SELECT COUNT(*) FROM requests q WHERE q.run_id = r.id) AS requests,"
                   " (SELECT COUNT(*) FROM gpu_samples g WHERE g.run_id = r.id) AS samples FROM runs r")
        profiles = [cast(ProfileUsageJson, dict(r)) for r in self.query(
            f"SELECT profile_name AS name, COUNT(*) AS runs, SUM(requests) AS requests, SUM(samples) AS gpu_samples,"
            f" SUM(bytes) AS bytes, MIN(finished_at) AS first_finished, MAX(finished_at) AS last_finished"
            f" FROM ({per_run}) GROUP BY profile_name ORDER BY bytes DESC, name")]
        campaigns = [cast(CampaignUsageJson, dict(r)) for r in self.query(
            f"SELECT c.id, c.name, (SELECT COUNT(*) FROM queue_items i WHERE i.campaign_id = c.id) AS items,"
            f" COUNT(p.id) AS runs, COALESCE(SUM(p.bytes), 0) AS bytes FROM campaigns c"
            f" LEFT JOIN queue_items i ON i.campaign_id = c.id LEFT JOIN ({per_run}) p ON p.id = i.run_id"
            f" GROUP BY c.id ORDER BY bytes DESC, c.id")]
        page = int(self.query("PRAGMA page_size")[0][0])
        free = int(self.query("PRAGMA freelist_count")[0][0]) * page
        runs = int(self.query("SELECT COUNT(*) FROM runs")[0][0])
        return Usage(self.file_bytes(), free, runs, tuple(profiles), tuple(campaigns))

    def size_notice(self) -> str | None:
        """Words for the TUI when the store has grown past MOE_TUI_STORE_WARN_GB (default 20 GB)."""
        import os

        raw = os.environ.get("MOE_TUI_STORE_WARN_GB")
        try:
            limit = float(raw) * 1024**3 if raw else DEFAULT_WARN_BYTES
        except ValueError:
            limit = DEFAULT_WARN_BYTES
        size = self.file_bytes()
        if size <= limit:
            return None
        return (f"the store is {size / 1024**3:.1f} GB (past {limit / 1024**3:g} GB): `moe-tui store usage` shows "
                "what takes the room; `moe-tui store archive --prune` or `store keep-samples N` keep it in bounds")

    # -- which runs -------------------------------------------------------------------------------
    def select_run_ids(self, *, older_than_s: float | None = None, profile: str | None = None,
                       campaign_id: int | None = None, now: float | None = None) -> list[int]:
        """Finished runs matching every given selector (a running run is never selected)."""
        where, params = ["status != 'running'"], list[Any]()
        if older_than_s is not None:
            where.append("COALESCE(finished_at, created_at) < ?")
            params.append((now if now is not None else time.time()) - older_than_s)
        if profile is not None:
            where.append("profile_name = ?")
            params.append(profile)
        if campaign_id is not None:
            where.append("(id IN (SELECT run_id FROM queue_items WHERE campaign_id = ? AND run_id IS NOT NULL)"
                         " OR queue_item_id IN (SELECT id FROM queue_items WHERE campaign_id = ?))")
            params += [campaign_id, campaign_id]
        return [int(r[0]) for r in self.query(f"SELECT id FROM runs WHERE {' AND '.join(where)} ORDER BY id", params)]

    # -- prune and give the space back ------------------------------------------------------------
    def delete_runs(self, run_ids: Sequence[int]) -> int:
        """Delete runs (their requests, GPU samples and summaries go by trigger), in one transaction.
        Running runs are refused. A queue item that measured one keeps its state (a done item is never
        re-run) with the note "run N pruned DATE" and no run id (nothing points at a missing run);
        restoring the archive links it again."""
        ids = sorted({int(i) for i in run_ids})
        deleted = 0
        with self.transaction() as tx:
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                running = [r[0] for r in tx.execute(f"SELECT id FROM runs WHERE status = 'running' AND id IN ({marks})",
                                                    chunk)]
                if running:
                    raise ValueError(f"runs {running[:5]} are still running: nothing deleted")
                deleted += tx.execute(f"DELETE FROM runs WHERE id IN ({marks})", chunk).rowcount
        return deleted

    def reclaim(self, *, full: bool = False, before: int | None = None) -> Reclaimed:
        """Give freed pages back to the file system (`store.space.reclaim`): how much came back."""
        return reclaim(self, full=full, before=before)

    # -- per-request samples for the last N runs --------------------------------------------------
    def keep_samples_runs(self) -> int | None:
        """Runs whose per-request samples are kept (the newest); None: every run's. Without a setting,
        `DEFAULT_KEEP_SAMPLES_RUNS`: per-run bytes (3.9 MB at the default spec) were kept without bound."""
        rows = self.query("SELECT value FROM queue_settings WHERE key = ?", (KEEP_SAMPLES_KEY,))
        if not rows:
            return DEFAULT_KEEP_SAMPLES_RUNS
        return None if rows[0][0] == KEEP_ALL else int(rows[0][0])

    def set_keep_samples_runs(self, n: int | None) -> None:
        """Keep per-request samples (requests, GPU samples) of the last `n` runs only; None: all."""
        if n is not None and n < 0:
            raise ValueError(f"keep samples for the last N runs: N must be >= 0, got {n}")
        with self.transaction() as tx:
            tx.execute("INSERT INTO queue_settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE"
                       " SET value = excluded.value", (KEEP_SAMPLES_KEY, KEEP_ALL if n is None else str(int(n))))

    def apply_sample_retention(self, *, batch: int | None = None) -> int:
        """Drop per-request samples of every run older than the last N (the setting); the runs, their
        summaries and flags stay. With `batch`, of at most that many runs, oldest first (the runner
        after each run: a backlog drains over the next runs, never in one long write). Returns how
        many runs lost samples (0 when every run's are kept)."""
        n = self.keep_samples_runs()
        if n is None:
            return 0
        with self.transaction() as tx:
            row = tx.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (max(n - 1, 0),)).fetchone()
            if row is None:
                return 0
            bound = int(row[0]) + (1 if n == 0 else 0)  # runs below it lose their samples
            limit = -1 if batch is None else int(batch)
            owners = sorted({r[0] for table in ("requests", "gpu_samples") for r in tx.execute(
                f"SELECT DISTINCT run_id FROM {table} WHERE run_id < ? ORDER BY run_id LIMIT ?", (bound, limit))})
            if batch is not None:
                owners = owners[:batch]
            for chunk in _chunks(owners):
                marks = ",".join("?" * len(chunk))
                tx.execute(f"UPDATE runs SET stored_bytes = {RUN_BYTES} WHERE stored_bytes IS NOT NULL"
                           f" AND id IN ({marks})", chunk)  # what is left of them: the run row
                tx.execute(f"DELETE FROM requests WHERE run_id IN ({marks})", chunk)
                tx.execute(f"DELETE FROM gpu_samples WHERE run_id IN ({marks})", chunk)
        return len(owners)


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield list(ids[i:i + _CHUNK])


