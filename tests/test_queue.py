"""RunQueue: campaigns, ordering policies and their server-start costs, edits, invalid operations
(which must change nothing), and crash recovery (running -> interrupted)."""

from __future__ import annotations

import sqlite3

import pytest

from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import (
    CampaignPlan,
    QueueError,
    RunQueue,
    order_keys,
    server_starts,
    warmup_spec,
)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "q.sqlite3") as s:
        yield s


@pytest.fixture
def queue(store):
    return RunQueue(store)


def _plan(**kw):
    base = dict(profiles=("A", "B"), concurrencies=(1, 2, 10, 64), repeats=3,
                base_spec=BenchmarkSpec(num_prompts=20, input_len=64, output_len=16))
    base.update(kw)
    return CampaignPlan(**base)


def _dump(store):
    """Every row of the queue tables: the whole state, to prove an invalid op changed nothing."""
    return (store.query("SELECT * FROM queue_items ORDER BY id"), store.query("SELECT * FROM campaigns"),
            store.query("SELECT * FROM queue_settings ORDER BY key"))


def _rows(dump):
    return [[tuple(r) for r in part] for part in dump]


# -- ordering and costs ---------------------------------------------------------------------------
def test_grouped_keeps_each_profile_together():
    keys = order_keys(["A", "B"], [1, 2], 2, "grouped")
    assert [k[0] for k in keys] == ["A"] * 4 + ["B"] * 4
    assert keys[:4] == [("A", 1, 0), ("A", 2, 0), ("A", 1, 1), ("A", 2, 1)]


def test_interleaved_alternates_sweeps_across_repeats():
    keys = order_keys(["A", "B"], [1, 2], 2, "interleaved")
    assert [k[0] for k in keys] == ["A", "A", "B", "B", "A", "A", "B", "B"]
    assert [k[2] for k in keys] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_alternating_switches_every_item():
    keys = order_keys(["A", "B"], [1, 2], 2, "alternating")
    assert [k[0] for k in keys] == ["A", "B"] * 4


def test_server_start_costs_per_policy():
    plan = _plan()  # 2 profiles x 4 concurrencies x 3 repeats = 24 items
    assert plan.start_costs() == {"abba": 6, "grouped": 2, "interleaved": 6, "alternating": 24}
    # ABBA: each sweep its own start even where one profile's two sweeps meet (B B): marked fresh.
    abba = plan.items("abba")
    assert [i.profile_name for i in abba[::4]] == ["A", "B", "B", "A", "A", "B"]
    assert [i.fresh_start for i in abba[::4]] == [False, False, True, False, True, False]
    # A server of the first profile already up saves one start.
    assert plan.start_costs(running="A")["grouped"] == 1
    assert server_starts(["A", "A", "B", "A"]) == 3
    assert server_starts([]) == 0


def test_prompts_scale_with_concurrency_with_a_minimum():
    plan = _plan(prompts_per_concurrency=4)
    assert [plan.num_prompts_for(c) for c in (1, 2, 10, 64)] == [20, 20, 40, 256]
    d = plan.definition()
    assert d["num_prompts_rule"]["prompts_per_concurrency"] == 4
    assert d["num_prompts_rule"]["min_prompts"] == 20
    assert d["server_starts"]["grouped"] == 2


def test_warmup_spec_same_shapes_other_prompts():
    spec = BenchmarkSpec(max_concurrency=64, num_prompts=640, seed=42)
    w = warmup_spec(spec)
    assert (w.max_concurrency, w.input_len, w.output_len, w.api) == (64, spec.input_len, spec.output_len, spec.api)
    assert w.num_prompts == 64 and w.seed != spec.seed
    assert warmup_spec(BenchmarkSpec(max_concurrency=1)).num_prompts == 8


def test_bad_campaigns_are_refused():
    with pytest.raises(QueueError, match="policy"):
        _plan(policy="random")
    with pytest.raises(QueueError, match="listed twice"):
        _plan(profiles=("A", "A"))
    with pytest.raises(QueueError, match="concurrency 0"):
        _plan(concurrencies=(0,))
    with pytest.raises(QueueError, match="repeats"):
        _plan(repeats=0)


# -- the persisted queue --------------------------------------------------------------------------
def test_add_campaign_in_one_step(queue, store):
    cid, items = queue.add_campaign(_plan(policy="interleaved", prompts_per_concurrency=2))
    assert len(items) == 24
    assert [i.profile_name for i in items[:8]] == ["A"] * 4 + ["B"] * 4
    assert all(i.state == "pending" and i.campaign_id == cid for i in items)
    assert items[3].spec.max_concurrency == 64 and items[3].spec.num_prompts == 128
    assert items[0].fingerprint == items[0].spec.fingerprint
    assert queue.campaign(cid)["definition"]["policy"] == "interleaved"
    # Same spec for the same concurrency across profiles: comparable by construction.
    assert {i.fingerprint for i in items if i.spec.max_concurrency == 10} == {items[2].fingerprint}


def test_claim_and_finish(queue):
    _, items = queue.add_campaign(_plan(repeats=1, concurrencies=(1,)))
    first = queue.claim_next()
    assert first.id == items[0].id and first.state == "running" and first.attempts == 1
    done = queue.finish(first.id, "done", run_id=7)
    assert done.state == "done" and done.run_id == 7
    with pytest.raises(QueueError, match="not running"):
        queue.finish(first.id, "failed")


def test_moves(queue):
    _, items = queue.add_campaign(_plan(repeats=1, concurrencies=(1, 2)))
    ids = [i.id for i in items]
    queue.move(ids[2], "up")
    assert [i.id for i in queue.items()] == [ids[0], ids[2], ids[1], ids[3]]
    queue.move(ids[3], "top")
    assert [i.id for i in queue.items()] == [ids[3], ids[0], ids[2], ids[1]]
    queue.move(ids[3], "bottom")
    queue.move(ids[0], "down")
    assert [i.id for i in queue.items()] == [ids[2], ids[0], ids[1], ids[3]]


def test_move_skips_over_items_that_are_not_pending(queue):
    _, items = queue.add_campaign(_plan(repeats=1, concurrencies=(1, 2)))
    ids = [i.id for i in items]
    queue.skip(ids[1])
    queue.move(ids[2], "up")  # passes the pending ids[0], jumping the skipped item between them
    pending = [i.id for i in queue.items(["pending"])]
    assert pending == [ids[2], ids[0], ids[3]]
    assert queue.next_pending().id == ids[2]
    assert [i.id for i in queue.items()] == [ids[2], ids[0], ids[1], ids[3]]


@pytest.mark.parametrize("op", [
    lambda q, ids: q.move(ids[0], "up"),          # past the start
    lambda q, ids: q.move(ids[-1], "down"),       # past the end
    lambda q, ids: q.move(ids[-1], "sideways"),
    lambda q, ids: q.move(999, "up"),             # unknown id
    lambda q, ids: q.retry(ids[1]),               # retry a done item
    lambda q, ids: q.retry(ids[2]),               # retry a pending item
    lambda q, ids: q.skip(ids[1]),                # skip a done item
    lambda q, ids: q.cancel(ids[0]),              # cancel the running item through the queue
    lambda q, ids: q.delete(ids[0]),              # delete the running item
    lambda q, ids: q.delete("x"),
    lambda q, ids: q.finish(ids[2], "done"),      # finish a pending item
    lambda q, ids: q.finish(ids[0], "pending"),
    lambda q, ids: q.items(["bogus"]),
])
def test_invalid_operations_raise_and_change_nothing(queue, store, op):
    _, items = queue.add_campaign(_plan(repeats=1, concurrencies=(1, 2)))
    ids = [i.id for i in items]
    a = queue.claim_next()
    queue.finish(a.id, "done")
    running = queue.claim_next()  # ids[1] is done, ids[0]... order: A1 done, A2 running
    ids = [running.id, a.id] + [i for i in ids if i not in (a.id, running.id)]
    queue.pause()
    before = _rows(_dump(store))
    with pytest.raises(QueueError) as info:
        op(queue, ids)
    assert str(info.value)  # a message a person can read
    assert _rows(_dump(store)) == before


def test_retry_done_item_message_is_clear(queue):
    queue.add_campaign(_plan(repeats=1, concurrencies=(1,), profiles=("A",)))
    item = queue.claim_next()
    queue.finish(item.id, "done")
    with pytest.raises(QueueError, match="is done"):
        queue.retry(item.id)


def test_skip_cancel_retry_delete_clear(queue):
    _, items = queue.add_campaign(_plan(repeats=1, concurrencies=(1, 2)))
    ids = [i.id for i in items]
    assert queue.skip(ids[0]).state == "skipped"
    assert queue.cancel(ids[1]).state == "cancelled"
    assert queue.retry(ids[0]).state == "pending"
    assert queue.retry(ids[1]).state == "pending"
    assert [i.id for i in queue.items()] == ids  # retried items keep their place
    queue.delete(ids[3])
    assert [i.id for i in queue.items()] == ids[:3]
    queue.cancel(ids[2])
    assert queue.clear(finished_only=True) == 1
    assert queue.clear() == 2
    assert queue.items() == []


def test_pause_flag_is_persisted(store, tmp_path):
    q = RunQueue(store)
    assert q.paused is False
    q.pause()
    store.close()
    with Store(tmp_path / "q.sqlite3") as again:
        assert RunQueue(again).paused is True
        RunQueue(again).resume()
        assert RunQueue(again).paused is False


def test_skip_profile_after_failed_start(queue):
    queue.add_campaign(_plan(repeats=1, concurrencies=(1, 2), policy="interleaved"))
    skipped = queue.skip_profile("A", "server of A failed to start")
    assert len(skipped) == 2
    assert {i.profile_name for i in queue.items(["pending"])} == {"B"}
    assert all(i.error == "server of A failed to start" for i in queue.items(["skipped"]))


def test_crash_recovery_running_becomes_interrupted(tmp_path):
    path = tmp_path / "crash.sqlite3"
    store = Store(path)
    q = RunQueue(store)
    q.add_campaign(_plan(repeats=1, concurrencies=(1, 2)))
    first = q.claim_next()
    q.finish(first.id, "done", run_id=1)
    second = q.claim_next()
    # Simulate a crash: the connection vanishes without any cleanup.
    store._conn.close()
    store2 = Store(path)
    q2 = RunQueue(store2)
    assert q2.item(second.id).state == "running"  # nothing changes until the lock holder recovers
    assert q2.recover_interrupted() == [second.id]
    assert q2.item(second.id).state == "interrupted"
    assert q2.item(first.id).state == "done" and q2.item(first.id).run_id == 1
    assert q2.retry(second.id).state == "pending"
    assert q2.next_pending().id == second.id
    store2.close()


def test_change_listener_called_after_commit(queue):
    seen = []
    queue.subscribe(seen.append)
    queue.add_campaign(_plan(repeats=1, concurrencies=(1,), profiles=("A",)))
    queue.pause()
    with pytest.raises(QueueError):
        queue.move(12345, "up")
    assert seen == ["campaign added", "paused"]


def test_store_rows_are_plain_sqlite(tmp_path):
    """Other tools (and the TUI) read the table directly: states are plain strings."""
    with Store(tmp_path / "x.sqlite3") as s:
        RunQueue(s).add_item("A", BenchmarkSpec())
    conn = sqlite3.connect(tmp_path / "x.sqlite3")
    assert conn.execute("SELECT profile_name, state FROM queue_items").fetchall() == [("A", "pending")]
    conn.close()


# -- the `moe-tui queue` command (in-process: no runner, so edits go to the store) -----------------
def test_queue_cli_add_list_edit(tmp_path, monkeypatch, capsys):
    import json as _json
    import shutil

    from moe_tui import cli
    from moe_tui.paths import bundled_demo_profiles_dir

    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    profiles = tmp_path / "profiles"
    shutil.copytree(bundled_demo_profiles_dir(), profiles)
    a, b = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"
    common = ["--profiles-dir", str(profiles), "--num-prompts", "10", "--prompts-per-concurrency", "2"]

    assert cli.main(["queue", "add", "--profiles", f"{a},{b}", "--concurrency", "1,64", "--repeats", "2",
                     "--order", "interleaved", "--dry-run", *common]) == 0
    out = capsys.readouterr().out
    assert "abba 4, interleaved 4 (chosen), grouped 2, alternating 12" in out and "nothing added" in out
    assert "conc 2,1,64" in out  # concurrency 2, the control, added beside the lowest of the sweep
    assert "n=128" in out  # 2 x 64 prompts at concurrency 64, the minimum 10 at concurrency 1

    assert cli.main(["queue", "add", "--profiles", f"{a},typo", "--concurrency", "1", *common]) == 4  # not found (commands.common)
    assert "no profile named 'typo'" in capsys.readouterr().err

    assert cli.main(["queue", "add", "--profiles", f"{a},{b}", "--concurrency", "1,64", "--repeats", "2",
                     "--order", "interleaved", "--no-control", *common]) == 0  # the control's own starts: test_compare_attacks
    assert "added campaign 1: 8 item(s)" in capsys.readouterr().out
    assert cli.main(["queue", "move", "3", "top"]) == 0
    assert cli.main(["queue", "skip", "2"]) == 0
    assert cli.main(["queue", "pause"]) == 0
    capsys.readouterr()
    assert cli.main(["queue", "retry", "1"]) == 1  # pending: nothing to retry
    assert "cannot retry" in capsys.readouterr().err
    assert cli.main(["queue", "move", "99", "up"]) == 4  # not found (commands.common)
    assert "no such item" in capsys.readouterr().err
    assert cli.main(["queue", "list", "--json"]) == 0
    listing = _json.loads(capsys.readouterr().out)
    assert listing["summary"]["paused"] is True
    assert [i["id"] for i in listing["items"]][:3] == [3, 1, 2]
    assert [i["state"] for i in listing["items"]][:3] == ["pending", "pending", "skipped"]
    assert cli.main(["queue", "list"]) == 0
    assert "queue PAUSED: pending 7, skipped 1" in capsys.readouterr().out
    assert cli.main(["queue", "clear", "--finished"]) == 0
    assert "removed 1 item(s)" in capsys.readouterr().out
