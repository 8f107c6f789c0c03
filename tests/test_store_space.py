"""Disk that comes back (issue 34): pruning half a store, dropping per-request samples and vacuum give
their pages back to the file system and say how much, through `moe-tui store` as a user types it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from moe_tui.commands import store as store_cmd
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.errors import StoreError


def _fill(store: Store, runs: int, *, requests: int = 40, itl: int = 60) -> list[int]:
    """`runs` runs the way the runner stores them, each with per-request samples (most of the bytes)."""
    spec = BenchmarkSpec.from_dict({"max_concurrency": 4, "num_prompts": requests})
    ids = []
    for n in range(runs):
        rid = store.create_run(profile_name="a" if n % 2 else "b", spec_json=spec.canonical_json(),
                               fingerprint=spec.fingerprint, client="moe-tui")
        reqs = [{"idx": i, "ok": True, "ttft": 0.01 + i * 1e-4, "latency": 0.5,
                 "itl": [0.0021 + (n * i + k) * 1e-7 for k in range(itl)]} for i in range(requests)]
        store.finish_run(rid, status="complete", summary={"completed": requests, "output_throughput": 100.0 + n},
                         requests=reqs, gpu_samples=[(time.time() + i, {"gpus": {"0": {"util": i}}}) for i in range(5)])
        ids.append(rid)
    return ids


def _args(**kw) -> argparse.Namespace:
    base = {"older_than": None, "profile": None, "campaign": None, "archive": None, "yes": True, "full": False,
            "json": False}
    return argparse.Namespace(**{**base, **kw})


def test_pruning_half_the_store_frees_at_least_40_percent_of_the_file(tmp_path, capsys):
    with Store(tmp_path / "s.sqlite3") as store:
        _fill(store, 60, itl=150)
        store.query("PRAGMA wal_checkpoint(TRUNCATE)")
        before = store.file_bytes()
        assert store_cmd._prune(store, _args(profile="a")) == 0
        after = store.file_bytes()
        said = capsys.readouterr().out
        assert len(store.runs()) == 30
    # One 4 KB page came back before (an unfetched `PRAGMA incremental_vacuum` runs one step).
    assert after <= 0.6 * before, (before, after, said)
    assert "deleted 30 run(s)" in said and "MB freed (incremental)" in said
    freed = float(said.split("MB on disk, ")[1].split(" MB freed")[0].replace(",", ""))
    assert freed == pytest.approx((before - after) / 1e6, abs=0.11)


def test_keep_samples_gives_the_pages_back_and_says_so(tmp_path, capsys):
    with Store(tmp_path / "s.sqlite3") as store:
        _fill(store, 30)
        store.query("PRAGMA wal_checkpoint(TRUNCATE)")
        before = store.file_bytes()
        assert store_cmd._keep_samples(store, argparse.Namespace(runs="3")) == 0
        after = store.file_bytes()
        assert store.requests(1) == [] and len(store.requests(30)) == 40
    assert after <= 0.3 * before
    assert "MB freed" in capsys.readouterr().out


def test_vacuum_full_checks_the_free_space_first_and_changes_nothing_without_it(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    with Store(tmp_path / "s.sqlite3") as store:
        _fill(store, 4)
        runs = len(store.runs())
        Usage = namedtuple("Usage", "total used free")
        monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(10**9, 10**9 - 4096, 4096))
        with pytest.raises(StoreError, match=r"needs about .* GB free in .*, which has 0\.00 GB"):
            store.reclaim(full=True)
        assert len(store.runs()) == runs


def test_vacuum_of_a_store_without_free_pages_frees_nothing_and_says_zero(tmp_path):
    with Store(Path(tmp_path) / "s.sqlite3") as store:
        _fill(store, 2)
        done = store.reclaim()
        assert done.how == "incremental" and done.freed >= 0
        assert "MB freed" in done.words()


def test_an_archive_is_restored_one_line_at_a_time_all_or_nothing_and_only_once(tmp_path):
    """Each line is inserted before the next is read (memory holds one record, not the archive: a
    2.1 GB archive took 2.65 GB), a bad last line still undoes every insert, and a second import
    stores nothing twice."""
    import io

    with Store(tmp_path / "a.sqlite3") as source:
        _fill(source, 6, requests=3, itl=4)
        out = io.StringIO()
        source.archive_runs([r.id for r in source.runs()], out)
    lines = out.getvalue().splitlines()
    with Store(tmp_path / "b.sqlite3") as target:
        seen: list[int] = []

        def feed(extra: list[str] = []):  # noqa: B006  (read, never changed)
            for n, line in enumerate(lines + extra):
                if n >= 2:  # the run of the line before is in (inside the open transaction) before this is read
                    seen.append(int(target.query("SELECT COUNT(*) FROM runs")[0][0]))
                yield line

        restored, skipped = target.restore_archive(feed(), "a.jsonl")
        assert len(restored) == 6 and skipped == []
        assert seen == [1, 2, 3, 4, 5]
        again, skipped = target.restore_archive(iter(lines), "a.jsonl")
        assert again == [] and len(skipped) == 6
        from moe_tui.store.archive import ArchiveError

        with Store(tmp_path / "c.sqlite3") as fresh:
            with pytest.raises(ArchiveError, match=r"c\.jsonl:8: not JSON"):
                fresh.restore_archive(iter(lines + ["{broken"]), "c.jsonl")
            assert fresh.runs() == []


def test_per_request_samples_are_bounded_by_default_and_usage_says_what_grows(tmp_path, capsys, monkeypatch):
    """Per-run bytes grew without a limit: now the newest DEFAULT_KEEP_SAMPLES_RUNS runs keep their
    per-request samples unless the user says otherwise, latencies are stored to the microsecond, and
    `store usage` names what grows with every run and what is bounded."""
    from moe_tui.store import retention

    monkeypatch.setattr(retention, "DEFAULT_KEEP_SAMPLES_RUNS", 4)
    with Store(tmp_path / "s.sqlite3") as store:
        assert store.keep_samples_runs() == 4
        ids = _fill(store, 6, requests=2, itl=3)
        assert [bool(store.requests(i)) for i in ids] == [False, False, True, True, True, True]
        assert store.requests(ids[-1])[1]["itl"] == [round(0.0021 + (5 + k) * 1e-7, 6) for k in range(3)]
        text = store.query("SELECT itl_json FROM requests WHERE run_id = ? AND idx = 1", (ids[-1],))[0][0]
        assert text == "[0.0021,0.002101,0.002101]"  # 0.0021 + 5e-7 * k to the microsecond
        store_cmd._usage(store, _args())
        out = capsys.readouterr().out
        assert "what grows" in out and "per run, every run adds it" in out
        assert "kept: the last 4 runs' (the default): bounded" in out
        store.set_keep_samples_runs(None)
        assert store.keep_samples_runs() is None
        _fill(store, 1, requests=2, itl=3)
        assert bool(store.requests(ids[0])) is False and len(store.requests(ids[-1] + 1)) == 2
        store_cmd._usage(store, _args())
        assert "kept: every run's: grows with every run" in capsys.readouterr().out


def test_the_runner_drops_a_backlog_of_samples_a_batch_at_a_time(tmp_path, monkeypatch):
    from moe_tui.store import retention, runs

    with Store(tmp_path / "s.sqlite3") as store:
        store.set_keep_samples_runs(None)
        ids = _fill(store, 8, requests=1, itl=2)
        store.set_keep_samples_runs(1)
        monkeypatch.setattr(runs, "RETENTION_BATCH", 3)
        _fill(store, 1, requests=1, itl=2)  # the runner's next run: 3 of the 8 older runs lose theirs
        assert [bool(store.requests(i)) for i in ids] == [False] * 3 + [True] * 5
        assert store.apply_sample_retention() == 5  # the command: the rest at once
        assert retention.DEFAULT_KEEP_SAMPLES_RUNS == 500


def test_an_archive_line_without_an_end_is_refused_not_read_whole(tmp_path):
    import io

    from moe_tui.store.archive import ArchiveError, archive_lines

    header = '{"kind": "moe-tui-archive", "schema": 1, "runs": 1}\n'
    fh = io.StringIO(header + "[" * 5000)
    with Store(tmp_path / "s.sqlite3") as store:
        with pytest.raises(ArchiveError, match=r"x\.jsonl:2: a line longer than"):
            store.restore_archive(archive_lines(fh, "x.jsonl", limit=4096), "x.jsonl")
        assert store.runs() == []
    assert list(archive_lines(io.StringIO("a\nb"), "y")) == ["a\n", "b"]
