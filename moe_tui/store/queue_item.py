"""A queue item as read from the store (`QueueItem`), its states, and `list_page`: one page of
the queue under structured filters (state, campaign, profile), what `moe-tui queue list` prints.

A queue of months holds 100,000 items; `queue list` printed every one. A page is read through the
indexes a filter has (`queue_items_state`, `queue_items_campaign`, `queue_items_plan`, else
`queue_items_position`), its total counted with the same filter, and only the page's specs parsed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from moe_tui.records import QueueItemJson
from moe_tui.spec import BenchmarkSpec, SpecError
from moe_tui.store.db import Store
from moe_tui.store.queue_plan import QueueError

ITEM_STATES = ("pending", "running", "done", "failed", "skipped", "cancelled", "interrupted")
RETRYABLE_STATES = frozenset({"failed", "interrupted", "skipped", "cancelled"})
FINISHED_STATES = frozenset({"done", "failed", "skipped", "cancelled", "interrupted"})

@dataclass(frozen=True)
class QueueItem:
    id: int
    position: float
    campaign_id: int | None
    profile_name: str
    spec: BenchmarkSpec
    fingerprint: str
    repeat_index: int
    warmup: bool
    state: str
    attempts: int
    run_id: int | None
    error: str
    created_at: float
    updated_at: float
    fresh_start: bool = False  # stop and start its server before it, even if that server is up

    def to_dict(self) -> QueueItemJson:
        """JSON-safe (the spec in canonical form)."""
        return {
            "id": self.id, "position": self.position, "campaign_id": self.campaign_id,
            "profile_name": self.profile_name, "spec": self.spec.canonical_dict(),
            "fingerprint": self.fingerprint, "repeat_index": self.repeat_index,
            "warmup": self.warmup, "state": self.state, "attempts": self.attempts,
            "run_id": self.run_id, "error": self.error, "created_at": self.created_at,
            "updated_at": self.updated_at, "concurrency": self.spec.max_concurrency,
            "num_prompts": self.spec.num_prompts, "fresh_start": self.fresh_start,
        }

    def describe(self) -> str:
        return (f"#{self.id} {self.profile_name} conc={self.spec.max_concurrency} "
                f"n={self.spec.num_prompts} rep={self.repeat_index} [{self.state}]")


def _check_states(states: Iterable[str]) -> None:
    for s in states:
        if s not in ITEM_STATES:
            raise QueueError(f"unknown queue item state {s!r}; states: {', '.join(ITEM_STATES)}")


@functools.lru_cache(maxsize=4096)
def _spec_from_json(text: str) -> BenchmarkSpec:
    """A queue holds few distinct specs and many items of each: parse each one once (specs are immutable)."""
    return BenchmarkSpec.from_json(text)


def _item(row: Any) -> QueueItem:
    try:
        spec = _spec_from_json(row["spec_json"])
    except SpecError:
        BenchmarkSpec.from_json(row["spec_json"], f"queue item {row['id']}")  # the same error, naming the item
        raise
    return QueueItem(
        id=row["id"], position=row["position"], campaign_id=row["campaign_id"],
        profile_name=row["profile_name"], spec=spec,
        fingerprint=row["fingerprint"], repeat_index=row["repeat_index"], warmup=bool(row["warmup"]),
        state=row["state"], attempts=row["attempts"], run_id=row["run_id"], error=row["error"],
        created_at=row["created_at"], updated_at=row["updated_at"],
        fresh_start=bool(row["fresh_start"]) if "fresh_start" in row.keys() else False,
    )


def list_page(store: Store, *, states: Sequence[str] | None = None, campaign_id: int | None = None,
              profile: str | None = None, offset: int = 0, limit: int | None = None) -> tuple[int, list[QueueItem]]:
    """(items the filters keep, `limit` of them from `offset` in queue order); `limit` None: all."""
    where, params = [], list[Any]()
    if states:
        _check_states(states)
        where.append(f"state IN ({','.join('?' * len(states))})")
        params += list(states)
    if campaign_id is not None:
        where.append("campaign_id = ?")
        params.append(int(campaign_id))
    if profile is not None:
        where.append("profile_name = ?")
        params.append(profile)
    if offset < 0 or (limit is not None and limit < 1):
        raise QueueError(f"queue page: offset must be >= 0 and the page size >= 1 (got {offset}, {limit})")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = int(store.query(f"SELECT COUNT(*) FROM queue_items{clause}", params)[0][0])
    page = f" LIMIT {int(limit)} OFFSET {int(offset)}" if limit is not None else f" LIMIT -1 OFFSET {int(offset)}"
    rows = store.query(f"SELECT * FROM queue_items{clause} ORDER BY position, id{page}", params)
    return total, [_item(r) for r in rows]
