"""Store records beside the runs: server starts (one row per launched SGLang server) and correctness
gate samples (issue 15, `moe_tui.gate.probe`), plus the JSON encoding every store column shares.

`StartAndGateRecords` is a mixin of `moe_tui.store.db.Store` (what it uses of it is declared by
`moe_tui.store.schema.StoreAccess`): it writes through the store's `transaction()` and reads
through its `query()`, so locking, retries and read-only refusal stay in one place. Import `Store`
from `moe_tui.store.db`, never this mixin alone.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from moe_tui.records import GateSamplesRow, ServerStartRow
from moe_tui.store.schema import StoreAccess


class StartAndGateRecords(StoreAccess):
    """Server-start and gate-sample reads and writes (mixed into Store, which provides what
    `StoreAccess` declares)."""

    # -- server starts --------------------------------------------------------------------------
    def record_server_start(
        self, *, profile_name: str, profile: Mapping[str, Any], argv: list[str],
        env: Mapping[str, str], log_path: str, pid: int | None, state: str = "starting",
    ) -> int:
        with self.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO server_starts (profile_name, profile_json, argv_json, env_json, log_path,"
                " pid, started_at, state) VALUES (?,?,?,?,?,?,?,?)",
                (profile_name, _dump(profile), _dump(argv), _dump(dict(env)), log_path, pid, time.time(), state),
            )
            return int(cur.lastrowid or 0)

    _SERVER_START_COLUMNS = {
        "pid", "ready_at", "stopped_at", "state", "reason", "resolved_backend", "backend_mismatch",
        "sglang_version", "server_info_json", "model_info_json", "exit_code", "exit_signal", "log_tail",
    }

    def update_server_start(self, start_id: int, **fields: Any) -> None:
        for key in ("server_info", "model_info"):
            if key in fields:
                fields[key + "_json"] = _dump(fields.pop(key))
        bad = set(fields) - self._SERVER_START_COLUMNS
        if bad:
            raise ValueError(f"unknown server_starts columns: {sorted(bad)}")
        if not fields:
            return
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as tx:
            tx.execute(f"UPDATE server_starts SET {sets} WHERE id = ?", (*fields.values(), start_id))

    def server_start(self, start_id: int) -> ServerStartRow | None:
        rows = self.query("SELECT * FROM server_starts WHERE id = ?", (start_id,))
        return _server_start_dict(rows[0]) if rows else None

    def server_starts(self, profile_name: str | None = None, limit: int = 100) -> list[ServerStartRow]:
        if profile_name is None:
            rows = self.query("SELECT * FROM server_starts ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self.query(
                "SELECT * FROM server_starts WHERE profile_name = ? ORDER BY id DESC LIMIT ?",
                (profile_name, limit),
            )
        return [_server_start_dict(r) for r in rows]

    def server_start_ids_in_states(self, states: Iterable[str]) -> list[int]:
        """Ids of the server starts recorded in one of `states` (e.g. the live ones)."""
        states = list(states)
        rows = self.query(f"SELECT id FROM server_starts WHERE state IN ({','.join('?' * len(states))}) "
                          "ORDER BY id", states)
        return [int(r[0]) for r in rows]

    # -- imports ----------------------------------------------------------------------------------
    def imported_runs_by_hash(self, hashes: Iterable[str]) -> dict[str, int]:
        """content hash -> id of the imported run that carries it, for `hashes` only (an indexed
        lookup, `runs_import_hash`: an import does not read every imported run)."""
        wanted = sorted(set(hashes))
        found: dict[str, int] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            for row in self.query("SELECT json_extract(provenance_json, '$.content_sha256'), MAX(id) FROM runs"
                                  " WHERE source = 'import' AND json_extract(provenance_json, '$.content_sha256')"
                                  f" IN ({','.join('?' * len(chunk))}) GROUP BY 1", chunk):
                found[row[0]] = int(row[1])
        return found

    # -- correctness gate samples (issue 15; moe_tui/gate/probe.py) -------------------------------------
    def record_gate_samples(
        self, *, profile_name: str, prompt_set: str, samples: Sequence[Mapping[str, Any]],
        campaign_id: int | None = None, server_start_id: int | None = None,
        resolved_backend: str | None = None,
    ) -> int:
        """Store one gate pass (every prompt's token ids and logprobs); returns its id."""
        with self.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO gate_samples (created_at, profile_name, campaign_id, server_start_id, prompt_set,"
                " resolved_backend, samples_json) VALUES (?,?,?,?,?,?,?)",
                (time.time(), profile_name, campaign_id, server_start_id, prompt_set, resolved_backend,
                 _dump(list(samples))),
            )
            return int(cur.lastrowid or 0)

    def gate_samples(self, profile_name: str, *, campaign_id: int | None = None,
                     server_start_ids: Sequence[int] | None = None) -> GateSamplesRow | None:
        """The latest gate pass of a profile (of that campaign, of one of those server starts, when
        given), or None."""
        sql = "SELECT * FROM gate_samples WHERE profile_name = ?"
        params: list[Any] = [profile_name]
        if campaign_id is not None:
            sql += " AND campaign_id = ?"
            params.append(campaign_id)
        if server_start_ids is not None:
            sql += f" AND server_start_id IN ({','.join('?' * len(server_start_ids))})"
            params.extend(server_start_ids)
        rows = self.query(sql + " ORDER BY created_at DESC, id DESC LIMIT 1", params)
        if not rows:
            return None
        row = dict(rows[0])
        row["samples"] = json.loads(row.pop("samples_json"))
        return cast(GateSamplesRow, row)  # the table's columns (store.schema), samples decoded


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=_json_default, allow_nan=True)


def _json_default(value: Any, verb: str = "store") -> Any:
    """JSON for what the store (and the spill file, `moe_tui.run.recording`) keeps beyond plain JSON:
    sets and tuples as lists, paths as strings; anything else is refused naming its type."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot {verb} {type(value).__name__} as JSON")


def _server_start_dict(row: sqlite3.Row) -> ServerStartRow:
    d = dict(row)
    for key in ("profile_json", "argv_json", "env_json", "server_info_json", "model_info_json"):
        raw = d.pop(key)
        d[key[: -len("_json")]] = json.loads(raw) if raw else None
    d["backend_mismatch"] = bool(d["backend_mismatch"])
    return cast(ServerStartRow, d)  # the table's columns (store.schema), JSON ones decoded
