"""RunQueue: the persistent run queue (SQLite `queue_items` + `campaigns`), campaigns and ordering.

An item is one benchmark to run: (profile name, BenchmarkSpec, repeat index), plus whether a
warmup pass precedes it. A *campaign* adds many items in one step; how it is planned and ordered
lives in `moe_tui.store.queue_plan` (re-exported here).

Item states and what may happen to them:

    pending ──claim──► running ──► done | failed | skipped | cancelled
       │                  └── (process died) ──► interrupted   (on recovery, see below)
       ├─ skip ──► skipped      "pass over it for now"; retry brings it back
       └─ cancel ► cancelled    "withdrawn"; retry brings it back too
    failed | interrupted | skipped | cancelled ──retry──► pending (keeps its place)

`done` is final (retrying a done item is an error: re-measure with a new item); a done item whose
run was pruned stays done, its run id cleared and its note saying when (`store.schema`). A running item is
changed only by its controller (`finish`); asking the queue to skip/cancel/delete it is an error
that names the controller op to use instead. Items that were never attempted because their
profile's server failed to start are marked `skipped` with the reason (see `skip_profile`).

Crash safety: every mutation is one `BEGIN IMMEDIATE` transaction, validated inside it, so an
invalid operation (unknown id, retry of a done item, move past the end) raises `QueueError` and
changes nothing. After a crash, `recover_interrupted()` turns items left `running` into
`interrupted` (offered for retry); it must be called only by the process holding the runner lock
(the controller does), never by a reader such as the TUI, or it would interrupt a live run.

The item as read (`QueueItem`), its states and a filtered page of items: `moe_tui.store.queue_item`.
Ordering policies and their server-start costs: see `moe_tui.store.queue_plan`. The pause flag lives in
the store's `queue_settings` table.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from moe_tui.events import Subscribers
from moe_tui.records import CampaignRowJson, QueueSummaryJson
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue_item import FINISHED_STATES, ITEM_STATES, RETRYABLE_STATES, QueueItem, _check_states, _item
from moe_tui.store.queue_plan import (
    ORDER_POLICIES,
    WARMUP_MIN_PROMPTS,
    WARMUP_SEED_OFFSET,
    CampaignPlan,
    PlannedItem,
    QueueError,
    QueueNotFound,
    order_keys,
    server_starts,
    warmup_spec,
)
from moe_tui.store.queue_spec import spec_as_queued

__all__ = [
    "FINISHED_STATES", "ITEM_STATES", "MOVE_DIRECTIONS", "ORDER_POLICIES", "RETRYABLE_STATES",
    "WARMUP_MIN_PROMPTS", "WARMUP_SEED_OFFSET", "CampaignPlan", "PlannedItem", "QueueError",
    "QueueItem", "QueueNotFound", "RunQueue", "order_keys", "server_starts", "warmup_spec",
]

MOVE_DIRECTIONS = ("up", "down", "top", "bottom")

ChangeListener = Callable[[str], None]


class RunQueue:
    """The queue in the store. Thread-safe through the store's lock; one transaction per call."""

    def __init__(self, store: Store):
        self.store = store
        self._listeners: Subscribers[str] = Subscribers("queue changes")

    # -- change notification ------------------------------------------------------------------
    def subscribe(self, listener: ChangeListener) -> Callable[[], None]:
        """`listener(reason)` after each committed mutation; returns the unsubscribe function.
        A broken listener must not undo a committed change or hide it from others: it is logged
        and kept (`events.Subscribers`)."""
        return self._listeners.add(listener)

    def _changed(self, reason: str) -> None:
        self._listeners.emit(reason)

    # -- reading ------------------------------------------------------------------------------
    def campaign_names(self) -> dict[int, str]:
        """Campaign id -> name, for every campaign."""
        return {int(r[0]): r[1] for r in self.store.query("SELECT id, name FROM campaigns")}

    def items(self, states: Iterable[str] | None = None, campaign_id: int | None = None) -> list[QueueItem]:
        sql, params = "SELECT * FROM queue_items", list[Any]()
        where = []
        if states is not None:
            states = list(states)
            _check_states(states)
            where.append(f"state IN ({','.join('?' * len(states))})")
            params += states
        if campaign_id is not None:
            where.append("campaign_id = ?")
            params.append(campaign_id)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY position, id"
        return [_item(r) for r in self.store.query(sql, params)]

    def light_items(self) -> list[Any]:
        """Every item in queue order (rows read by column name) with its concurrency and campaign
        name, without parsing and validating each spec (what a view of a queue of tens of
        thousands needs, many times)."""
        rows = self.store.query(
            "SELECT q.id, q.position, q.campaign_id, q.profile_name, q.fingerprint, q.repeat_index, q.state,"
            " q.attempts, q.run_id, q.error, json_extract(q.spec_json, '$.max_concurrency') AS concurrency,"
            " c.name AS campaign FROM queue_items q LEFT JOIN campaigns c ON c.id = q.campaign_id"
            " ORDER BY q.position, q.id")
        return rows  # sqlite3.Row: read by column name, no per-item dict

    def item(self, item_id: int) -> QueueItem:
        rows = self.store.query("SELECT * FROM queue_items WHERE id = ?", (int(item_id),))
        if not rows:
            raise QueueNotFound(f"queue item {item_id}: no such item")
        return _item(rows[0])

    def next_pending(self) -> QueueItem | None:
        rows = self.store.query(
            "SELECT * FROM queue_items WHERE state = 'pending' ORDER BY position, id LIMIT 1")
        return _item(rows[0]) if rows else None

    def running(self) -> list[QueueItem]:
        return self.items(["running"])

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in ITEM_STATES}
        for row in self.store.query("SELECT state, COUNT(*) FROM queue_items GROUP BY state"):
            counts[row[0]] = row[1]
        return counts

    def campaign_plan(self, profiles: Sequence[str]) -> tuple[list[dict[str, Any]], dict[tuple[int, str, str], int]]:
        """`compare.plan_counts`' inputs for `profiles`: items per (campaign, profile, requested
        fingerprint, state), and what each campaign's definition planned (`planned_items`: cleared
        items still count as cut). Indexed reads (`queue_items_plan`, `campaign_profiles`)."""
        names = list(dict.fromkeys(profiles))
        marks = ",".join("?" * len(names))
        rows = [{"campaign_id": r[0], "profile_name": r[1], "fingerprint": r[2], "state": r[3], "n": r[4]}
                for r in self.store.query("SELECT campaign_id, profile_name, fingerprint, state, COUNT(*) FROM queue_items"
                                          f" WHERE profile_name IN ({marks})"
                                          " GROUP BY campaign_id, profile_name, fingerprint, state", names)]
        expected: dict[tuple[int, str, str], int] = {}
        for cid, definition in self.store.query(
                "SELECT c.id, c.definition_json FROM campaigns c WHERE c.id IN (SELECT campaign_id FROM"
                f" campaign_profiles WHERE profile_name IN ({marks})) ORDER BY c.id", names):
            try:
                for profile, fp, n in json.loads(definition).get("planned_items") or []:
                    expected[(int(cid), str(profile), str(fp))] = int(n)
            except (ValueError, TypeError, AttributeError):
                continue  # an older or foreign definition: its cleared items cannot be counted
        return rows, expected

    @property
    def paused(self) -> bool:
        rows = self.store.query("SELECT value FROM queue_settings WHERE key = 'paused'")
        return bool(rows) and rows[0][0] == "1"

    def summary(self, upcoming: int = 10) -> QueueSummaryJson:
        """Counts per state and the next `upcoming` pending items' profiles: a few SQL queries on
        indexed columns, never every item loaded (`run --status` stays instant on a huge queue)."""
        counts = self.counts()
        rows = self.store.query("SELECT id, profile_name FROM queue_items WHERE state = 'pending'"
                                " ORDER BY position, id LIMIT ?", (int(upcoming),))
        return {
            "paused": self.paused,
            "counts": counts,
            "total": sum(counts.values()),
            "next_item_id": rows[0][0] if rows else None,
            "pending_profiles": [r[1] for r in rows],
            "pending_profiles_shown": len(rows),
        }

    def campaign(self, campaign_id: int) -> CampaignRowJson:
        rows = self.store.query("SELECT * FROM campaigns WHERE id = ?", (campaign_id,))
        if not rows:
            raise QueueNotFound(f"campaign {campaign_id}: no such campaign")
        row = rows[0]
        return {"id": row["id"], "name": row["name"], "policy": row["policy"],
                "created_at": row["created_at"], "definition": json.loads(row["definition_json"])}

    def campaigns(self, policy: str | None = None) -> list[CampaignRowJson]:
        """Every campaign (of one ordering policy when given: an indexed read), oldest first."""
        sql, params = "SELECT * FROM campaigns", list[Any]()
        if policy is not None:
            sql, params = sql + " WHERE policy = ?", [policy]
        return [{"id": r["id"], "name": r["name"], "policy": r["policy"], "created_at": r["created_at"],
                 "definition": json.loads(r["definition_json"])} for r in self.store.query(sql + " ORDER BY id", params)]

    def newest_campaign(self) -> CampaignRowJson | None:
        """The newest campaign (one row by the primary key), or None without one."""
        rows = self.store.query("SELECT * FROM campaigns ORDER BY id DESC LIMIT 1")
        return None if not rows else {"id": rows[0]["id"], "name": rows[0]["name"], "policy": rows[0]["policy"],
                                      "created_at": rows[0]["created_at"],
                                      "definition": json.loads(rows[0]["definition_json"])}

    # -- adding -------------------------------------------------------------------------------
    def add_campaign(self, plan: CampaignPlan, name: str | None = None) -> tuple[int, list[QueueItem]]:
        """All of the plan's items, appended in the plan's order, with the campaign row: one
        transaction. Returns (campaign id, items)."""
        planned = plan.items()
        now = time.time()
        with self.store.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO campaigns (created_at, name, policy, definition_json) VALUES (?,?,?,?)",
                (now, name or plan.default_name(), plan.policy, json.dumps(plan.definition(), sort_keys=True)),
            )
            campaign_id = int(cur.lastrowid or 0)  # an INSERT always sets it
            self._insert(tx, planned, campaign_id, now)
        self._changed("campaign added")
        return campaign_id, self.items(campaign_id=campaign_id)  # one query, not one per item

    def add_item(self, profile_name: str, spec: BenchmarkSpec, *, repeat_index: int = 0,
                 warmup: bool = True) -> QueueItem:
        if not profile_name:
            raise QueueError("queue item: profile name must not be empty")
        with self.store.transaction() as tx:
            (item_id,) = self._insert(tx, [PlannedItem(profile_name, spec, repeat_index, warmup)], None, time.time())
        self._changed("item added")
        return self.item(item_id)

    def add_planned_campaign(self, name: str, policy: str, definition: Mapping[str, Any],
                             planned: Sequence[PlannedItem]) -> tuple[int, list[QueueItem]]:
        """A campaign of explicit items (an investigation: items of their own concurrency, warmup
        and fresh-start choice), appended in the given order with its row: one transaction."""
        if not planned:
            raise QueueError(f"campaign {name!r}: no items to add")
        now = time.time()
        with self.store.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO campaigns (created_at, name, policy, definition_json) VALUES (?,?,?,?)",
                (now, name, policy, json.dumps(definition, sort_keys=True)))
            campaign_id = int(cur.lastrowid or 0)
            ids = self._insert(tx, planned, campaign_id, now)
        self._changed("campaign added")
        return campaign_id, [self.item(i) for i in ids]

    @staticmethod
    def _insert(tx: Any, planned: Sequence[PlannedItem], campaign_id: int | None, now: float) -> list[int]:
        top = tx.execute("SELECT COALESCE(MAX(position), 0) FROM queue_items").fetchone()[0]
        ids = []
        # The spec as its run will record it (one fingerprint everywhere); once per distinct spec
        # object, so a large campaign's few specs keep their cached canonical JSON.
        versions: dict[str, str] = {}
        as_queued: dict[int, BenchmarkSpec] = {}
        planned = [p if (q := as_queued.setdefault(id(p.spec), spec_as_queued(p.spec, versions))) is p.spec
                   else dataclasses.replace(p, spec=q) for p in planned]
        for offset, p in enumerate(planned, start=1):
            cur = tx.execute(
                "INSERT INTO queue_items (position, campaign_id, profile_name, spec_json, fingerprint,"
                " repeat_index, warmup, state, attempts, created_at, updated_at, fresh_start)"
                " VALUES (?,?,?,?,?,?,?, 'pending', 0, ?, ?, ?)",
                (float(int(top) + offset), campaign_id, p.profile_name, p.spec.canonical_json(),
                 p.spec.fingerprint, p.repeat_index, int(p.warmup), now, now, int(p.fresh_start)),
            )
            ids.append(int(cur.lastrowid))
        return ids

    # -- editing ------------------------------------------------------------------------------
    def move(self, item_id: int, direction: str) -> QueueItem:
        """Reorder a pending item among the pending items: up, down, top, bottom. Moving the first
        up (or the last down) is an error. Positions are renumbered 1..n in the same transaction."""
        if direction not in MOVE_DIRECTIONS:
            raise QueueError(f"queue item {item_id}: direction must be one of "
                             f"{', '.join(MOVE_DIRECTIONS)}, got {direction!r}")
        with self.store.transaction() as tx:
            row = _get(tx, item_id)
            if row["state"] != "pending":
                raise QueueError(f"queue item {item_id} is {row['state']}: only pending items can be moved")
            order = [r[0] for r in tx.execute("SELECT id FROM queue_items ORDER BY position, id")]
            pending = [r[0] for r in tx.execute(
                "SELECT id FROM queue_items WHERE state = 'pending' ORDER BY position, id")]
            k = pending.index(item_id)
            if direction in ("up", "top") and k == 0:
                raise QueueError(f"queue item {item_id} is already first of the pending items")
            if direction in ("down", "bottom") and k == len(pending) - 1:
                raise QueueError(f"queue item {item_id} is already last of the pending items")
            target = {"up": pending[k - 1] if k > 0 else None, "down": pending[k + 1] if k + 1 < len(pending) else None,
                      "top": pending[0], "bottom": pending[-1]}[direction]
            order.remove(item_id)
            at = order.index(target)
            order.insert(at if direction in ("up", "top") else at + 1, item_id)
            now = time.time()
            tx.executemany("UPDATE queue_items SET position = ? WHERE id = ?",
                           [(float(n), i) for n, i in enumerate(order, start=1)])
            tx.execute("UPDATE queue_items SET updated_at = ? WHERE id = ?", (now, item_id))
        self._changed(f"item {item_id} moved {direction}")
        return self.item(item_id)

    def skip(self, item_id: int, reason: str = "skipped by user") -> QueueItem:
        return self._set_state(item_id, "skipped", {"pending"}, reason, "skip")

    def cancel(self, item_id: int, reason: str = "cancelled by user") -> QueueItem:
        return self._set_state(item_id, "cancelled", {"pending"}, reason, "cancel")

    def retry(self, item_id: int) -> QueueItem:
        """failed / interrupted / skipped / cancelled -> pending, in its old place."""
        return self._set_state(item_id, "pending", RETRYABLE_STATES, "", "retry")

    def _set_state(self, item_id: int, state: str, allowed: set[str] | frozenset[str], error: str,
                   verb: str) -> QueueItem:
        with self.store.transaction() as tx:
            row = _get(tx, item_id)
            if row["state"] not in allowed:
                raise QueueError(_refusal(item_id, row["state"], verb, allowed))
            tx.execute("UPDATE queue_items SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                       (state, error, time.time(), item_id))
        self._changed(f"item {item_id} {verb}")
        return self.item(item_id)

    def delete(self, item_id: int) -> None:
        """Remove an item that is not running. Its runs (if any) stay in the store."""
        with self.store.transaction() as tx:
            row = _get(tx, item_id)
            if row["state"] == "running":
                raise QueueError(_refusal(item_id, "running", "delete", set()))
            tx.execute("DELETE FROM queue_items WHERE id = ?", (item_id,))
        self._changed(f"item {item_id} deleted")

    def clear(self, finished_only: bool = False) -> int:
        """Remove every item that is not running (or only finished ones). Returns how many."""
        states = sorted(FINISHED_STATES) if finished_only else sorted(set(ITEM_STATES) - {"running"})
        with self.store.transaction() as tx:
            cur = tx.execute(f"DELETE FROM queue_items WHERE state IN ({','.join('?' * len(states))})", states)
            n = cur.rowcount
        self._changed("queue cleared")
        return n

    def pause(self) -> None:
        self._set_setting("paused", "1")
        self._changed("paused")

    def resume(self) -> None:
        self._set_setting("paused", "0")
        self._changed("resumed")

    def _set_setting(self, key: str, value: str) -> None:
        with self.store.transaction() as tx:
            tx.execute("INSERT INTO queue_settings (key, value) VALUES (?, ?) "
                       "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    # -- the controller's side (only the process holding the runner lock calls these) --------
    def claim_next(self) -> QueueItem | None:
        """Atomically take the first pending item: pending -> running, attempts + 1."""
        with self.store.transaction() as tx:
            row = tx.execute(
                "SELECT id FROM queue_items WHERE state = 'pending' ORDER BY position, id LIMIT 1").fetchone()
            if row is None:
                return None
            tx.execute("UPDATE queue_items SET state = 'running', attempts = attempts + 1, error = '',"
                       " updated_at = ? WHERE id = ?", (time.time(), row[0]))
        self._changed(f"item {row[0]} running")
        return self.item(row[0])

    def attach_run(self, item_id: int, run_id: int) -> None:
        with self.store.transaction() as tx:
            tx.execute("UPDATE queue_items SET run_id = ?, updated_at = ? WHERE id = ?",
                       (run_id, time.time(), item_id))

    def finish(self, item_id: int, state: str, *, run_id: int | None = None, error: str = "") -> QueueItem:
        """running -> done / failed / skipped / cancelled / interrupted (the controller's verdict)."""
        if state not in FINISHED_STATES:
            raise QueueError(f"queue item {item_id}: cannot finish as {state!r}")
        with self.store.transaction() as tx:
            row = _get(tx, item_id)
            if row["state"] != "running":
                raise QueueError(f"queue item {item_id} is {row['state']}, not running: cannot finish it")
            tx.execute("UPDATE queue_items SET state = ?, error = ?, run_id = COALESCE(?, run_id),"
                       " updated_at = ? WHERE id = ?", (state, error, run_id, time.time(), item_id))
        self._changed(f"item {item_id} {state}")
        return self.item(item_id)

    def skip_profile(self, profile_name: str, reason: str) -> list[int]:
        """Pending items of a profile whose server just failed to start become `skipped` with the
        reason (so the queue does not retry a broken server over and over); `retry` revives them."""
        with self.store.transaction() as tx:
            ids = [r[0] for r in tx.execute(
                "SELECT id FROM queue_items WHERE state = 'pending' AND profile_name = ?", (profile_name,))]
            tx.execute("UPDATE queue_items SET state = 'skipped', error = ?, updated_at = ?"
                       " WHERE state = 'pending' AND profile_name = ?", (reason, time.time(), profile_name))
        if ids:
            self._changed(f"{len(ids)} item(s) of {profile_name} skipped")
        return ids

    def recover_interrupted(self, reason: str = "interrupted: the runner stopped while it ran") -> list[int]:
        """After a crash or a kill: items left `running` become `interrupted`. Lock holder only.
        An item whose CURRENT attempt already has a complete run stored (a runner killed between
        storing the run and closing the item, in versions that wrote them apart) becomes `done`
        with that run: it is never measured twice."""
        attempt = "json_extract(r.provenance_json, '$.queue_item.attempt')"
        with self.store.transaction() as tx:
            tx.execute(
                "UPDATE queue_items SET state = 'done', error = '', updated_at = ?, run_id = ("
                f" SELECT MAX(r.id) FROM runs r WHERE r.queue_item_id = queue_items.id AND r.status = 'complete'"
                f" AND {attempt} = queue_items.attempts)"
                " WHERE state = 'running' AND EXISTS (SELECT 1 FROM runs r WHERE r.queue_item_id = queue_items.id"
                f" AND r.status = 'complete' AND {attempt} = queue_items.attempts)", (time.time(),))
            ids = [r[0] for r in tx.execute("SELECT id FROM queue_items WHERE state = 'running'")]
            tx.execute("UPDATE queue_items SET state = 'interrupted', error = ?, updated_at = ?"
                       " WHERE state = 'running'", (reason, time.time()))
        if ids:
            self._changed(f"{len(ids)} item(s) interrupted")
        return ids

    def retry_interrupted(self) -> list[int]:
        """Every interrupted item back to pending (what `moe-tui run` does on start by default)."""
        with self.store.transaction() as tx:
            ids = [r[0] for r in tx.execute("SELECT id FROM queue_items WHERE state = 'interrupted'")]
            tx.execute("UPDATE queue_items SET state = 'pending', error = '', updated_at = ?"
                       " WHERE state = 'interrupted'", (time.time(),))
        if ids:
            self._changed(f"{len(ids)} interrupted item(s) requeued")
        return ids


# ---------------------------------------------------------------------------------------------
def _get(tx: Any, item_id: Any) -> Any:
    try:
        key = int(item_id)
    except (TypeError, ValueError):
        raise QueueError(f"queue item {item_id!r}: an item id is a whole number") from None
    row = tx.execute("SELECT * FROM queue_items WHERE id = ?", (key,)).fetchone()
    if row is None:
        raise QueueNotFound(f"queue item {item_id}: no such item")
    return row


def _refusal(item_id: int, state: str, verb: str, allowed: Iterable[str]) -> str:
    if state == "running":
        hint = {"skip": "skip_current", "cancel": "skip_current", "delete": "skip_current, then delete"}.get(verb, "")
        extra = f" (ask the runner: {hint})" if hint else ""
        return f"queue item {item_id} is running: only its controller can change it{extra}"
    if verb == "retry" and state == "done":
        return f"queue item {item_id} is done: a done item is not retried (add a new item to measure again)"
    return f"queue item {item_id} is {state}: cannot {verb} it (only {', '.join(sorted(allowed))} items)"
