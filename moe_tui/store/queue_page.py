"""One page of the run queue for a view that scrolls through it: counts per state, the number of
items a filter keeps, and `limit` items from an offset in the queue's order (position, id).

A queue of months holds 100,000 items; a screen shows forty. Reading one page walks the
`queue_items_position` index to its offset (from the nearer end) and reads only the page's rows;
the counts walk the `queue_items_state` index. At 100,000 items a page costs a few ms of CPU
against 0.8 s for every item; the `/` filter is a scan of every item (0.4 s at 100,000).

The filter is the Queue screen's `/`: every word must appear, case-insensitively (ASCII letters, as
SQLite's LIKE folds them), in the item's text "ID PROFILE conc N STATE CAMPAIGN NOTE FINGERPRINT".
Words are bound as parameters with LIKE's wildcards escaped, so `%`, `_`, quotes and backslashes
are matched as typed, never as SQL or patterns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from moe_tui.store.db import Store

ORDER = "ORDER BY q.position, q.id"
# What a filter word is matched against: the same text the screen shows for an item.
_TEXT = ("(q.id || ' ' || q.profile_name || ' conc ' || COALESCE(json_extract(q.spec_json, '$.max_concurrency'), 0)"
         " || ' ' || q.state || ' ' || COALESCE(c.name, '') || ' ' || q.error || ' ' || q.fingerprint)")
_COLUMNS = ("q.id, q.position, q.campaign_id, q.profile_name, q.fingerprint, q.repeat_index, q.state, q.attempts,"
            " q.run_id, q.error, json_extract(q.spec_json, '$.max_concurrency') AS concurrency, c.name AS campaign")
_FROM = "FROM queue_items q LEFT JOIN campaigns c ON c.id = q.campaign_id"


@dataclass(frozen=True)
class QueuePage:
    offset: int  # where `rows` start among the items the filter keeps (0: the first)
    total: int  # items the filter keeps (every item without one)
    rows: Sequence[Any] = ()  # sqlite3.Row, read by column name (`_COLUMNS`)
    counts: dict[str, int] = field(default_factory=dict)  # every item per state, filter or not
    current: Any = None  # the row of the item asked for as `current`, wherever it is (None if gone)


def like_pattern(word: str) -> str:
    """`word` as a LIKE pattern that matches it anywhere, taken literally (ESCAPE '\\')."""
    escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _filter(words: Sequence[str]) -> tuple[list[str], list[Any]]:
    kept = [w for w in words if w]
    return [f"{_TEXT} LIKE ? ESCAPE '\\'" for _ in kept], [like_pattern(w) for w in kept]


def _where(conditions: Sequence[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def counts(store: Store) -> dict[str, int]:
    """Items per state (states with none are left out)."""
    return {r[0]: int(r[1]) for r in store.query("SELECT state, COUNT(*) FROM queue_items GROUP BY state")}


def index_of(store: Store, item_id: int, words: Sequence[str] = ()) -> int | None:
    """Where the item is among the items the filter keeps (0: first); None if gone or filtered out."""
    conditions, params = _filter(words)
    found = store.query(f"SELECT q.position {_FROM}{_where(['q.id = ?', *conditions])}", [int(item_id), *params])
    if not found:
        return None
    position = found[0][0]
    before = "(q.position < ? OR (q.position = ? AND q.id < ?))"
    return int(store.query(f"SELECT COUNT(*) {_FROM}{_where([before, *conditions])}",
                           [position, position, int(item_id), *params])[0][0])


def read_page(store: Store, *, offset: int = 0, limit: int = 100, words: Sequence[str] = (),
              around: int | None = None, current: int | None = None) -> QueuePage:
    """`limit` items from `offset` among those the filter `words` keeps. With `around` (an item
    id): if that item is kept but not within the page asked for, the page is centred on it instead
    (a view keeps its highlighted item after the queue changed under it). The offset is clamped so
    that the page is full where the queue allows."""
    if limit < 1:
        raise ValueError(f"queue page: limit must be at least 1, got {limit}")
    conditions, params = _filter(words)
    where = _where(conditions)
    every = counts(store)
    total = int(store.query(f"SELECT COUNT(*) {_FROM}{where}", params)[0][0]) if where else sum(every.values())
    offset = max(0, int(offset))
    if around is not None:
        at = index_of(store, around, words)
        if at is not None and not offset <= at < offset + limit:
            offset = at - limit // 2
    offset = max(0, min(offset, total - limit))
    from_end = total - offset - limit
    if 0 <= from_end < offset:  # nearer the end: walk the index from there (End at 100,000 items)
        rows = store.query(f"SELECT {_COLUMNS} {_FROM}{where} ORDER BY q.position DESC, q.id DESC LIMIT ? OFFSET ?",
                           [*params, int(limit), from_end])[::-1]
    else:
        rows = store.query(f"SELECT {_COLUMNS} {_FROM}{where} {ORDER} LIMIT ? OFFSET ?", [*params, int(limit), offset])
    now = None
    if current is not None:
        now = next((r for r in rows if r["id"] == current), None)
        if now is None:
            found = store.query(f"SELECT {_COLUMNS} {_FROM} WHERE q.id = ?", [int(current)])
            now = found[0] if found else None
    return QueuePage(offset=offset, total=total, rows=rows, counts=every, current=now)
