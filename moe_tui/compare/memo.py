"""Values a grid derives from a run's decoded JSON, computed once per grid build and source, not per read.

Months of campaigns (issue 26): a grid of two profiles with thousands of runs each read every run's
provenance values three times (confounders, environment lines, provenance rows) and flattened every
run's resolved server args, with a JSON encode per value. Within one build (`build_scope`, entered
by `build_grid_from_runs`) `derived` keys such values by the identity of the objects they are a
function of: each run's own dicts (`compare.runs.normalise` keeps the decoded dicts, it does not
copy them), or dicts that many runs share (`store.summaries` decodes each distinct spec, profile
snapshot and grid-facts text once). Each entry holds its sources, so no id is reused while the scope
lives; the scope is dropped when the build ends. Outside a scope (a caller of one helper alone)
everything is computed as before. Cached values are shared between callers: read them, never mutate.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_Entries = dict[tuple[Any, ...], tuple[tuple[object, ...], Any]]
_scope: contextvars.ContextVar[_Entries | None] = contextvars.ContextVar("moe_tui_grid_memo", default=None)


# Kinds derived from one run's own (or its shared) decoded dicts alone: an open grid keeps them from one
# build to the next (`kept_scope`), so a new run costs its own derivations, not every run's again.
PER_RUN_KINDS = frozenset({"snapshot_text", "provenance_values", "profile_settings", "server_args", "run_flags"})


class Kept:
    """Derived values kept between builds of an open grid (per store handle, `grids.pair`): only the
    per-run kinds survive a build; `limit` entries at most (past it, the next build starts afresh)."""

    def __init__(self, limit: int = 400_000) -> None:
        self.entries: _Entries = {}
        self.limit = limit

    def after_build(self) -> None:
        if len(self.entries) > self.limit:
            self.entries = {}
            return
        for key in [k for k in self.entries if k[0] not in PER_RUN_KINDS]:
            del self.entries[key]


@contextlib.contextmanager
def build_scope(kept: Kept | None = None) -> Iterator[None]:
    """One grid build: derived values live until it ends (a nested scope shares the outer one), or, with
    `kept`, the per-run ones stay for the next build (their sources stay alive with them, so an id
    is never reused while its entry lives)."""
    if _scope.get() is not None:
        yield
        return
    token = _scope.set(kept.entries if kept is not None else {})
    try:
        yield
    finally:
        _scope.reset(token)
        if kept is not None:
            kept.after_build()


def derived(kind: str, sources: tuple[object, ...], compute: Callable[[], T]) -> T:
    """`compute()`, once per build for the same `kind` and the very same `sources` objects."""
    entries = _scope.get()
    if entries is None:
        return compute()
    key = (kind, *map(id, sources))
    hit = entries.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], sources, strict=True)):
        value: T = hit[1]
        return value
    value = compute()
    entries[key] = (sources, value)
    return value


def derived_by_value(kind: str, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, once per build for the same `kind` and an equal `key` (a canonical text of the
    sources, for values that runs repeat without sharing one object: each start's server args)."""
    entries = _scope.get()
    if entries is None:
        return compute()
    full = ("=", kind, key)
    if full in entries:
        value: T = entries[full][1]
        return value
    value = compute()
    entries[full] = ((), value)
    return value
