"""Bounded work and hostile input (issue 13): absurd specs, huge campaigns, duplicate profile
names, names that are markup, a bad MOE_TUI_HOME and a read-only store. Every test runs real
`moe-tui` subprocesses and asserts a message naming what and where, a non-zero exit, no
traceback, and that nothing stored changed."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from runner_support import speed_factor, tmpfs, write_profile

pytestmark = pytest.mark.integration  # starts real processes


def _refused(result, *needles: str) -> None:
    out = result.stdout
    assert result.returncode != 0, out
    assert "Traceback" not in out, out
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"


def test_absurd_spec_refused_before_any_allocation(env, seeded_store, store_digest):
    """--num-prompts 10000000 --max-concurrency 1000000: refused at once with the memory estimate, nothing added."""
    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30011)
    before = store_digest(seeded_store)
    t0 = time.monotonic()
    out = env.run("queue", "add", "--profiles", "ok", "--concurrency", "1000000", "--num-prompts", "10000000",
                  "--profiles-dir", str(env.profiles))
    took = time.monotonic() - t0
    _refused(out, "concurrency 1000000", "num_prompts=10000000", "GiB of client memory", "MOE_TUI_BENCH_MEMORY_LIMIT_GB")
    assert took < 15 * speed_factor(), f"refusal took {took:.1f} s: work was done before refusing"
    assert store_digest(seeded_store) == before
    bench = env.run("bench", "--base-url", "http://127.0.0.1:9", "--num-prompts", "10000000",
                    "--max-concurrency", "1000000")
    assert bench.returncode != 0 and "Traceback" not in bench.stdout, bench.stdout
    assert "GiB of client memory" in bench.stdout, bench.stdout


def test_campaign_over_the_cap_asks_for_yes(env, seeded_store, store_digest):
    """A 20,000-item campaign (10x the cap) is refused without --yes (naming the cap); with --yes it is
    queued and the queue summary `run --status` answers with counts in SQL, not every item."""
    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30012)
    before = store_digest(seeded_store)
    conc = ",".join(str(c) for c in range(1, 101))
    args = ["queue", "add", "--profiles", "ok", "--concurrency", conc, "--repeats", "200", "--num-prompts", "1",
            "--input-len", "8", "--output-len", "8", "--no-warmup-pass", "--profiles-dir", str(env.profiles)]
    _refused(env.run(*args), "20,000 items", "over the cap of 2,000", "MOE_TUI_CAMPAIGN_CAP", "--yes")
    assert store_digest(seeded_store) == before
    added = env.run(*args, "--yes", timeout=300)
    assert added.returncode == 0, added.stdout[-2000:]
    assert env.query("SELECT COUNT(*) FROM queue_items WHERE state = 'pending'")[0][0] >= 20_000
    # The queue summary a runner answers `run --status` with: counts in SQL, never every item.
    from moe_tui.store.db import Store
    from moe_tui.store.queue import RunQueue

    with Store(env.db) as store:
        queue = RunQueue(store)
        t0 = time.perf_counter()
        summary = queue.summary()
        took = time.perf_counter() - t0
    assert summary["counts"]["pending"] >= 20_000 and len(summary["pending_profiles"]) <= 10
    assert took < 1.0 * speed_factor(), f"queue summary took {took:.2f} s on 20,000 items"


def test_duplicate_profile_names_refuse_queue_add_run_and_tui(env, seeded_store, store_digest):
    """Two profile files with the same name: queue add, run and the TUI refuse, naming both files."""
    write_profile(env.profiles, "twin", "flashinfer_cutlass", 30013)
    (env.profiles / "twin.toml").rename(env.profiles / "a.toml")
    write_profile(env.profiles, "twin", "flashinfer_cutedsl", 30014)
    (env.profiles / "twin.toml").rename(env.profiles / "b.toml")
    before = store_digest(seeded_store)
    files = (str(env.profiles / "a.toml"), str(env.profiles / "b.toml"))
    for args in (("queue", "add", "--profiles", "twin", "--concurrency", "1", "--profiles-dir", str(env.profiles)),
                 ("run", "--profiles-dir", str(env.profiles)),
                 ("tui", "--profiles-dir", str(env.profiles), "--in-process")):
        _refused(env.run(*args), "profile name 'twin' is used by 2 files", *files)
    assert store_digest(seeded_store) == before


@pytest.mark.parametrize("name", ["a[/]b", "x\n# heading", "p|q", "[bold]red[/bold]"])
def test_markup_names_from_imported_records_refused(env, seeded_store, store_digest, tmp_path, name):
    """An imported record whose backend name is markup, a heading or a pipe is refused naming file and line."""
    record = {"backend": "sglang", "dataset_name": "random-ids", "random_input_len": 32, "random_output_len": 8,
              "random_range_ratio": 1.0, "num_prompts": 4, "max_concurrency": 1, "request_rate": float("inf"),
              "completed": 4, "duration": 1.0, "output_throughput": 10.0,
              "server_info": {"version": "0.5.23", "moe_runner_backend": name}}
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(record) + "\n")
    before = store_digest(seeded_store)
    _refused(env.run("import", str(path)), f"{path}:1", "may hold only letters, digits")
    assert store_digest(seeded_store) == before


def test_moe_tui_home_is_a_file(env, tmp_path):
    """MOE_TUI_HOME is a file: one line naming it, exit 2, no traceback."""
    bad = tmp_path / "not-a-dir"
    bad.write_text("x")
    env.env["MOE_TUI_HOME"] = str(bad)
    for args in (("queue", "list"), ("run", "--status"), ("compare", "a", "b")):
        _refused(env.run(*args), str(bad), "is a file, not a folder")


def _read_only(path) -> None:
    assert subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True).returncode == 0


def test_moe_tui_home_read_only_and_empty(env, tmp_path):
    """MOE_TUI_HOME on a read-only mount with nothing in it: a clear message naming the folder, no traceback."""
    with tmpfs(tmp_path / "ro", "8m", "0700") as mnt:
        _read_only(mnt)
        env.env["MOE_TUI_HOME"] = str(mnt)
        for args in (("queue", "list"), ("queue", "add", "--profiles", "x", "--concurrency", "1")):
            _refused(env.run(*args), f"cannot create data dir {mnt / 'data'}", "Read-only file system")


def test_read_only_store_reads_work_writes_refused(env, tmp_path):
    """Read-only store (read-only mount): queue list, compare and export to another folder work; writes are refused naming the read-only folder."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store
    from moe_tui.store.queue import CampaignPlan, RunQueue

    with tmpfs(tmp_path / "ro", "8m", "0700") as mnt:
        env.env["MOE_TUI_HOME"] = str(mnt)
        db = mnt / "data" / "moe-tui.sqlite3"
        spec = BenchmarkSpec.from_dict({"num_prompts": 4, "input_len": 32, "output_len": 8})
        (mnt / "data").mkdir(mode=0o700)
        with Store(db) as store:
            RunQueue(store).add_campaign(CampaignPlan(profiles=("a",), concurrencies=(1,), base_spec=spec,
                                                      warmup_pass=False))
            for name, tput in (("a", 100.0), ("b", 110.0)):
                store.import_run(profile_name=name, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                                 client="moe-tui", summary={"output_throughput": tput}, provenance={})
        before = db.read_bytes()
        write_profile(env.profiles, "a", "flashinfer_cutlass", 30015)
        _read_only(mnt)
        listed = env.run("queue", "list")
        assert listed.returncode == 0 and "pending 1" in listed.stdout, listed.stdout
        compared = env.run("compare", "a", "b")
        assert compared.returncode == 0 and "Traceback" not in compared.stdout, compared.stdout
        out_dir = tmp_path / "exports"
        exported = env.run("export", "a", "b", "--dir", str(out_dir))
        assert exported.returncode == 0, exported.stdout
        assert any(out_dir.iterdir())
        _refused(env.run("queue", "pause"), f"{db.parent} is not writable")
        _refused(env.run("queue", "retry", "1"), f"{db.parent} is not writable")
        _refused(env.run("queue", "add", "--profiles", "a", "--concurrency", "1", "--profiles-dir",
                         str(env.profiles)), str(db))
        assert db.read_bytes() == before
