"""Fixtures of the server tests: a private data dir and store, and the servers a test made (none
survives it, whatever happens)."""

from __future__ import annotations

import pytest

from moe_tui.servers import ManagedServer
from moe_tui.store.db import Store
from tests.support.servers import marked_processes


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def store(home):
    s = Store(home / "store.sqlite3")
    yield s
    s.close()


@pytest.fixture
def tracked():
    """Servers made by a test; whatever happens, nothing of theirs survives the test."""
    made: list[ManagedServer] = []
    yield made
    markers = {s.server_id for s in made if s.server_id}
    for server in made:
        server.stop_sync("test teardown")
    for proc in marked_processes(markers):
        proc.kill()
