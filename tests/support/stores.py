"""Stores for tests: a demo run (tests/ui/fakes.demo_runs) as the row `Store.import_runs` takes, and a
store in a test's folder holding the demo campaign's runs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store


def stored_row(r: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """A demo run as an import row (`Store.import_runs`), with `changes` over its fields."""
    row = dict(profile_name=r["profile_name"], spec_json=BenchmarkSpec.from_dict(r["spec"]).canonical_json(),
               fingerprint=r["fingerprint"], client="moe-tui", summary=r["summary"], provenance=r["provenance"],
               profile=r["profile"], started_at=r["started_at"], finished_at=r["finished_at"], source="moe-tui")
    row.update(changes)
    return row


@contextmanager
def store_of(folder: Path, runs: Iterable[Mapping[str, Any]]) -> Iterator[Store]:
    """A store at `folder`/store.sqlite3 holding `runs` (in that order), closed after."""
    s = Store(folder / "store.sqlite3")
    s.import_runs([stored_row(r) for r in runs])
    try:
        yield s
    finally:
        s.close()
