"""`moe-tui queue list` pages (issue 34): a queue of months holds 100,000 items and `queue list` printed
every one. A default page, filters by state, campaign and profile, `--page`, `--limit` and `--all`."""

from __future__ import annotations

import json

import pytest

from moe_tui import cli
from moe_tui.paths import store_path
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import PlannedItem, RunQueue


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    with Store(store_path()) as store:
        queue = RunQueue(store)
        for name, profile, n in (("sweep-a", "a", 70), ("sweep-b", "b", 40)):
            queue.add_planned_campaign(name, "grouped", {}, [
                PlannedItem(profile, BenchmarkSpec.from_dict({"max_concurrency": 1 + i % 4, "num_prompts": 4}), i, False)
                for i in range(n)])
        queue.skip(3)
        queue.skip(80)
    return tmp_path


def _listed(capsys, *args: str) -> dict:
    assert cli.main(["queue", "list", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_queue_list_shows_one_page_by_default_and_says_how_to_see_more(home, capsys):
    assert cli.main(["queue", "list"]) == 0
    out = capsys.readouterr().out
    assert "items 1-50 of 110; next: --page 2 (or --all)" in out
    assert sum(1 for line in out.splitlines() if line.strip()[:1].isdigit()) == 50
    page = _listed(capsys)
    assert [i["id"] for i in page["items"]] == list(range(1, 51)) and page["total"] == 110 and page["more"]
    last = _listed(capsys, "--page", "3")
    assert [i["id"] for i in last["items"]] == list(range(101, 111)) and not last["more"]
    assert len(_listed(capsys, "--all")["items"]) == 110


def test_queue_list_filters_by_state_campaign_and_profile(home, capsys):
    assert [i["id"] for i in _listed(capsys, "--state", "skipped")["items"]] == [3, 80]
    b = _listed(capsys, "--campaign", "2", "--limit", "5")
    assert b["total"] == 40 and [i["id"] for i in b["items"]] == [71, 72, 73, 74, 75]
    both = _listed(capsys, "--profile", "b", "--state", "skipped")
    assert both["total"] == 1 and both["items"][0]["id"] == 80


@pytest.mark.parametrize("args, code, words", [
    (["--campaign", "9"], 4, "campaign 9: no such campaign"),
    (["--page", "0"], 1, "--page and --limit must be at least 1"),
    (["--state", "lost"], 1, "unknown queue item state 'lost'"),
])
def test_bad_queue_list_filters_are_named(home, capsys, args, code, words):
    assert cli.main(["queue", "list", *args]) == code
    assert words in capsys.readouterr().err
