"""`moe-tui store` (issue 26) over a real store written through the runner's store API: usage per
profile and campaign, an archive that `moe-tui import` reads back with nothing lost, prune by
age/profile/campaign that frees space and leaves no orphans, per-request samples kept for the last
N runs, and bad input that changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue

DAY = 86400.0
pytestmark = pytest.mark.integration  # `moe-tui store` and `moe-tui import` run as subprocesses


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, MOE_TUI_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _write_run(store: Store, profile: str, *, conc: int, age_days: float = 0.0, item: int | None = None) -> int:
    """One run the way the runner stores it: a server start, create_run, finish_run with samples."""
    spec = BenchmarkSpec.from_dict({"max_concurrency": conc, "num_prompts": 4})
    start = store.record_server_start(profile_name=profile, profile={"name": profile}, argv=["sim"], env={},
                                      log_path="/dev/null", pid=1, state="ready")
    rid = store.create_run(profile_name=profile, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                           client="moe-tui", profile={"name": profile}, queue_item_id=item, server_start_id=start)
    requests = [{"idx": i, "ok": True, "ttft": 0.01 * i, "latency": 0.5, "itl": [0.002] * 50} for i in range(4)]
    store.finish_run(rid, status="complete", summary={"completed": 4, "output_throughput": 100.0 + conc},
                     flags=["simulated"], telemetry={"available": False}, requests=requests,
                     gpu_samples=[(time.time() + i, {"gpus": {"0": {"util": 50 + i}}}) for i in range(3)],
                     finished_at=time.time() - age_days * DAY,
                     close_item=(item, "done", "") if item is not None else None)
    return rid


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        queue = RunQueue(store)
        cid, items = queue.add_planned_campaign("old-sweep", "grouped", {}, [
            __import__("moe_tui.store.queue", fromlist=["PlannedItem"]).PlannedItem("a", BenchmarkSpec.from_dict(
                {"max_concurrency": c, "num_prompts": 4}), 0, True) for c in (1, 2)])
        for it in items:
            claimed = queue.claim_next()
            assert claimed is not None and claimed.id == it.id
            _write_run(store, "a", conc=it.spec.max_concurrency, age_days=40, item=it.id)
        _write_run(store, "a", conc=4, age_days=1)
        _write_run(store, "b", conc=1, age_days=40)
        _write_run(store, "b", conc=2, age_days=1)
    return home


def _dump_runs(path: Path) -> list[tuple]:
    """Everything stored about every run, comparable across stores (ids included)."""
    with Store(path) as s:
        out = []
        for r in s.runs():
            start = s.server_start(r.server_start_id) if r.server_start_id else None
            out.append((r.id, r.profile_name, r.fingerprint, r.spec, r.summary, r.flags, r.provenance,
                        r.telemetry, r.finished_at, r.created_at, r.queue_item_id,
                        (start["profile_name"], start["started_at"]) if start else None,
                        s.requests(r.id), s.gpu_samples(r.id)))
        return out


def _unmarked(rows: list[tuple]) -> list[tuple]:
    """`_dump_runs` rows without the marks a restore adds (a restored run is an import)."""
    return [(*r[:6], {k: v for k, v in r[6].items() if k not in ("source_file", "restored_from")}, *r[7:])
            for r in rows]


def _restored_ids(path: Path) -> set[int]:
    with Store(path) as s:
        return {r.id for r in s.runs() if r.source == "import" and "restored_from" in r.provenance}


def test_usage_names_profiles_and_campaigns(home):
    out = _cli(home, "store", "usage", "--json")
    assert out.returncode == 0, out.stderr
    usage = json.loads(out.stdout)
    by_name = {p["name"]: p for p in usage["profiles"]}
    assert (by_name["a"]["runs"], by_name["b"]["runs"], usage["runs"]) == (3, 2, 5)
    assert by_name["a"]["requests"] == 12 and by_name["a"]["gpu_samples"] == 9 and by_name["a"]["bytes"] > 0
    (camp,) = usage["campaigns"]
    assert (camp["name"], camp["items"], camp["runs"]) == ("old-sweep", 2, 2)
    text = _cli(home, "store", "usage")
    assert text.returncode == 0 and "old-sweep" in text.stdout and "every run" in text.stdout


def test_archive_prune_then_import_gives_back_every_run_exactly(home, tmp_path):
    path = home / "data" / "moe-tui.sqlite3"
    everything = _dump_runs(path)
    archive = tmp_path / "old.jsonl"
    out = _cli(home, "store", "archive", str(archive), "--older-than", "30", "--prune")
    assert out.returncode == 0, out.stderr
    assert "archived 3 run(s)" in out.stdout and "deleted 3 run(s)" in out.stdout
    left = _dump_runs(path)
    assert [r[0] for r in left] == [r[0] for r in everything if r[8] > time.time() - 30 * DAY]
    with Store(path) as s:  # no request or GPU sample outlives its run
        assert s.query("SELECT COUNT(*) FROM requests WHERE run_id NOT IN (SELECT id FROM runs)")[0][0] == 0
        assert s.query("SELECT COUNT(*) FROM gpu_samples WHERE run_id NOT IN (SELECT id FROM runs)")[0][0] == 0
    back = _cli(home, "import", str(archive))
    assert back.returncode == 0 and "restored 3 run(s)" in back.stdout, back.stdout + back.stderr
    restored = _dump_runs(path)
    assert _unmarked(restored) == everything
    old_ids = {r[0] for r in everything if r[8] <= time.time() - 30 * DAY}
    assert _restored_ids(path) == old_ids  # marked imported; the runs never pruned are not
    again = _cli(home, "import", str(archive))  # a second import stores nothing twice
    assert again.returncode == 0 and "3 already in the store" in again.stdout
    assert _dump_runs(path) == restored


def test_archive_into_a_fresh_store_keeps_server_starts(home, tmp_path):
    archive = tmp_path / "all.jsonl"
    assert _cli(home, "store", "archive", str(archive), "--older-than", "0").returncode == 0
    fresh = tmp_path / "fresh"
    assert _cli(fresh, "import", str(archive)).returncode == 0
    assert _unmarked(_dump_runs(fresh / "data" / "moe-tui.sqlite3")) == _dump_runs(home / "data" / "moe-tui.sqlite3")


def test_prune_by_profile_and_campaign_needs_yes_and_frees_pages(home):
    path = home / "data" / "moe-tui.sqlite3"
    dry = _cli(home, "store", "prune", "--profile", "b")
    assert dry.returncode == 1 and "2 run(s) match" in dry.stdout and "nothing deleted" in dry.stdout
    assert len(_dump_runs(path)) == 5
    with Store(path) as s:
        (cid,) = [c["id"] for c in RunQueue(s).campaigns()]
    out = _cli(home, "store", "prune", "--campaign", str(cid), "--yes")
    assert out.returncode == 0 and "deleted 2 run(s)" in out.stdout, out.stderr
    with Store(path) as s:
        assert sorted(r.profile_name for r in s.runs()) == ["a", "b", "b"]
        assert s.query("PRAGMA freelist_count")[0][0] == 0  # incremental vacuum gave the pages back


@pytest.mark.parametrize("args", [("prune", "--yes"), ("prune", "--older-than", "-3", "--yes"),
                                  ("keep-samples", "some")])
def test_bad_input_is_named_and_changes_nothing(home, args):
    before = _dump_runs(home / "data" / "moe-tui.sqlite3")
    out = _cli(home, "store", *args)
    assert out.returncode == 1 and out.stderr.startswith("moe-tui store"), out.stderr
    assert _dump_runs(home / "data" / "moe-tui.sqlite3") == before


def _bad_json_column(line: str) -> str:
    record = json.loads(line)
    record["run"]["summary_json"] = "{not json"
    return json.dumps(record)


@pytest.mark.parametrize("broken", [lambda line: '{"run": {"id": "x"}}', _bad_json_column,
                                    lambda line: line.replace('"run": {', '"run": {"x; DROP TABLE runs": 1, ', 1)])
def test_a_broken_archive_line_is_named_and_nothing_is_restored(home, tmp_path, broken):
    archive = tmp_path / "a.jsonl"
    assert _cli(home, "store", "archive", str(archive), "--profile", "a", "--prune").returncode == 0
    lines = archive.read_text().splitlines()
    archive.write_text("\n".join([*lines[:2], broken(lines[2]), *lines[3:]]) + "\n")
    out = _cli(home, "import", str(archive))
    assert out.returncode == 1 and f"{archive}:3" in out.stderr and "nothing imported" in out.stderr
    assert sorted(r[1] for r in _dump_runs(home / "data" / "moe-tui.sqlite3")) == ["b", "b"]


def test_per_request_samples_kept_for_the_last_n_runs(home):
    path = home / "data" / "moe-tui.sqlite3"
    out = _cli(home, "store", "keep-samples", "2")
    assert out.returncode == 0 and "dropped from 3" in out.stdout, out.stdout + out.stderr
    with Store(path) as s:
        ids = [r.id for r in s.runs()]
        assert [bool(s.requests(i)) for i in ids] == [False, False, False, True, True]
        assert [bool(s.gpu_samples(i)) for i in ids] == [False, False, False, True, True]
        assert all(r.summary["completed"] == 4 for r in s.runs())  # summaries stay
        newest = _write_run(s, "b", conc=8)  # the runner's next run: the setting applies
        ids = [r.id for r in s.runs()]
        assert [bool(s.requests(i)) for i in ids] == [False] * 4 + [True, True] and ids[-1] == newest
    assert _cli(home, "store", "keep-samples", "all").returncode == 0
    with Store(path) as s:
        assert s.keep_samples_runs() is None  # every run's, said so (no setting: the default 500)


def test_the_store_says_when_it_has_grown_past_its_threshold(home, monkeypatch):
    with Store(home / "data" / "moe-tui.sqlite3") as s:
        assert s.size_notice() is None  # a small store under the 20 GB default
        monkeypatch.setenv("MOE_TUI_STORE_WARN_GB", str(s.file_bytes() / 2 / 1024**3))
        words = s.size_notice()
        assert words is not None and "moe-tui store usage" in words and "past" in words


def test_usage_reads_the_bytes_recorded_with_each_run_and_they_match_a_recount(home):
    """`runs.stored_bytes` (set by finish_run, kept right when older runs' samples are dropped)
    agrees with counting the stored text again, so `store usage` needs no full read of a big store."""
    path = home / "data" / "moe-tui.sqlite3"
    assert _cli(home, "store", "keep-samples", "2").returncode == 0  # three runs lose their samples
    with Store(path) as s:
        assert s.query("SELECT COUNT(*) FROM runs WHERE stored_bytes IS NULL")[0][0] == 0
        recorded = {p["name"]: p["bytes"] for p in s.usage().profiles}
        with s.transaction() as tx:  # forget them: usage counts the stored text itself
            tx.execute("UPDATE runs SET stored_bytes = NULL")
        counted = {p["name"]: p["bytes"] for p in s.usage().profiles}
    assert recorded == counted and recorded["b"] > 4 * 50 * 6  # 4 requests of 50 latencies, "0.002," each
