"""Issue 23 item 6: one spec, one id. A queued spec is stored as its run will record it (the
benchmark client's version filled in), so the queue row, the run, the grid and the exports all
name the same fingerprint."""

from __future__ import annotations

import pytest

from moe_tui.bench.engine import native_spec
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue


@pytest.fixture
def queue(tmp_path):
    store = Store(tmp_path / "store.sqlite3")
    yield RunQueue(store)
    store.close()


def test_a_moe_tui_spec_is_queued_under_the_fingerprint_its_run_records(queue):
    asked = BenchmarkSpec(client="moe-tui", max_concurrency=4, num_prompts=8)
    assert asked.client_version == ""
    item = queue.add_item("a", asked)
    assert item.spec.client_version != ""
    assert item.fingerprint == native_spec(asked).fingerprint == native_spec(item.spec).fingerprint
    assert item.fingerprint != asked.fingerprint  # the old second id


@pytest.mark.integration  # asks the client env's python for its sglang version
def test_an_sglang_spec_gets_the_installed_clients_version(queue):
    from moe_tui.bench.sglang_adapter import locate_client
    from moe_tui.run.items import spec_as_run

    if locate_client() is None:
        pytest.skip("no sglang.bench_serving client here (make sglang-client)")
    asked = BenchmarkSpec(client="sglang.bench_serving", max_concurrency=4, num_prompts=8)
    item = queue.add_item("a", asked)
    assert item.fingerprint == spec_as_run(asked).fingerprint == spec_as_run(item.spec).fingerprint


def test_a_spec_that_names_its_version_is_kept_as_asked(queue):
    asked = BenchmarkSpec(client="moe-tui", client_version="0.0.1", max_concurrency=4, num_prompts=8)
    assert queue.add_item("a", asked).fingerprint == asked.fingerprint
