""""Not found" exits 4 in every command that names a thing (issue 23): a profile, a run's cell, a queue
item, a campaign, a file. In-process (`cli.main`) on a real store in a private data dir; each case
also checks that stderr names what was missing and that nothing stored changed."""

from __future__ import annotations

import pytest

from moe_tui.cli import build_parser, main
from moe_tui.commands.common import EXIT_CODES_HELP, EXIT_NOT_FOUND
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue
from tests.test_run_summaries import A, B, _fill, _spec


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    from moe_tui.paths import store_path

    with Store(store_path()) as store:
        _fill(store)
        RunQueue(store).add_item(A, _spec(2))
    return tmp_path


CASES = [
    (["queue", "retry", "999"], "queue item 999: no such item"),
    (["queue", "skip", "999"], "queue item 999: no such item"),
    (["queue", "cancel", "999"], "queue item 999: no such item"),
    (["queue", "delete", "999"], "queue item 999: no such item"),
    (["queue", "move", "999", "up"], "queue item 999: no such item"),
    (["store", "archive", "out.jsonl", "--profile", "nobody"], "--profile nobody: no such profile"),
    (["store", "prune", "--campaign", "999", "--yes"], "--campaign 999: no such campaign"),
    (["import", "missing.jsonl"], "missing.jsonl: no such file"),
    (["compare", "nobody", B], "nobody"),
    (["export", A, "nobody", "--dir", "exports"], "nobody"),
    (["investigate", A, B, "-c", "999", "--dry-run"], "no cell at concurrency 999"),
    (["explain", A, B, "-c", "999"], "no cell at concurrency 999"),
    (["roofline", "nobody"], "nobody"),
    (["profiles", "show", "nobody"], "nobody"),
    (["gate", "nobody"], "nobody"),
]


@pytest.mark.parametrize(("argv", "named"), CASES, ids=[" ".join(c[0][:2]) + f" {i}" for i, c in enumerate(CASES)])
def test_not_found_exits_4_and_names_it(home, capsys, argv, named):
    from moe_tui.paths import store_path

    def state(store: Store) -> list:
        return [tuple(r) for r in store.query("SELECT id, status FROM runs ORDER BY id")] + [
            (i.id, i.state) for i in RunQueue(store).items()]

    with Store(store_path()) as store:
        before = state(store)
    assert main(argv) == EXIT_NOT_FOUND
    assert named in capsys.readouterr().err
    with Store(store_path()) as store:
        assert state(store) == before
    assert not (home / "out.jsonl").exists()


def test_every_command_help_says_the_exit_codes_once():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    for name, child in sub.choices.items():
        assert child.format_help().replace("\n", " ").count("4 not found") == 1, name
    assert "4 not found" in EXIT_CODES_HELP
