"""Nothing trusted that should not be (issue 22, item 1), with real runner processes.

- Spill files are read back only when they are ours and private: one planted by another user,
  one left readable by others, a malformed one, one for a run already stored and one for a run
  that does not exist are each moved aside and named at the next runner start, never parsed into
  the store and never a crash; the stored runs stay exactly as they were.
- The temp-dir fallback is a `mkdtemp` folder of ours: a folder with its prefix made first by
  another user is refused and named, and its files are never read.
- The store never lets a later write overwrite a stored run (`finish_run` of a finished run).
- A data dir or store owned by another user is refused for writing, naming the owner.
- A `runner.json` that is not ours and private is ignored.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOBODY = 65534
SPEC = ["--num-prompts", "4", "--input-len", "16", "--output-len", "8", "--no-warmup-pass"]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files owned by another user")


def _one_campaign(env) -> None:
    name = env.profile("sim-a", "flashinfer_cutlass")
    add = env.run("queue", "add", "--profiles", name, "--concurrency", "1", "--repeats", "2",
                  "--profiles-dir", str(env.profiles), *SPEC)
    assert add.returncode == 0, add.stdout
    first = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert first.returncode == 0, first.stdout
    assert env.query("SELECT id, status FROM runs ORDER BY id") == [(1, "complete"), (2, "complete")]


def _record(run_id: int, item_id: int, tok_s: float = 99999.0) -> str:
    """A well-formed spill record claiming `run_id` measured `tok_s` (and dropping every flag)."""
    return json.dumps({"run_id": run_id, "item_id": item_id, "item_state": "done", "item_error": "",
                       "status": "complete", "finish": {"status": "complete", "summary": {"output_throughput": tok_s},
                                                        "flags": [], "requests": [], "gpu_samples": []}})


def _plant(path: Path, text: str, mode: int = 0o600, uid: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(text)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def _runs(env) -> list[tuple]:
    return env.query("SELECT id, status, summary_json, flags_json FROM runs ORDER BY id")


@pytest.mark.integration
def test_planted_loose_malformed_and_conflicting_spill_files_are_set_aside(env):
    """Spill files readable by others, malformed, for a stored run, for a future run: moved aside and named at the next start; stored runs unchanged."""
    _one_campaign(env)
    before = _runs(env)
    spill = env.data_dir / "spill"
    loose = _plant(spill / "run-1.json", _record(1, 1), mode=0o644)
    malformed = _plant(spill / "run-7.json", '{"run_id": 1, "finish": [not json')
    wrong_types = _plant(spill / "run-8.json", json.dumps({"run_id": "x", "item_id": {}, "finish": 3}))
    conflict = _plant(spill / "run-2.json", _record(2, 2))
    future = _plant(spill / "run-50.json", _record(50, 1))
    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    out = again.stdout
    assert again.returncode == 0, out
    assert "Traceback" not in out
    assert _runs(env) == before  # nothing overwritten: same summary, same flags (simulated kept)
    assert all("simulated" in json.loads(r[3]) for r in before)
    for path, why in ((loose, "readable or writable by others (mode 0644)"), (malformed, "unreadable"),
                      (wrong_types, "unreadable"), (conflict, "run 2 is already stored (complete)"),
                      (future, "run 50 is not in the store")):
        assert not path.exists(), path
        assert f"{path} not trusted: " in out and why in out, (path, out)
        (moved,) = spill.glob(path.name + ".*")
        assert f"moved aside to {moved}" in out
    third = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert third.returncode == 0 and "not trusted" not in third.stdout, third.stdout  # set aside once


@pytest.mark.integration
@needs_root
def test_spill_planted_by_another_user_is_never_read(env, tmp_path):
    """Another user's spill file (in the data dir, or a temp folder with the fallback's prefix made first): refused, named; run 1 keeps its number and flags."""
    from moe_tui.run.recording import RunRecorder
    from moe_tui.store.db import Store

    tmpdir = tmp_path / "t"
    tmpdir.mkdir(mode=0o1777)
    os.chmod(tmpdir, 0o1777)
    env.env["TMPDIR"] = str(tmpdir)
    _one_campaign(env)
    before = _runs(env)
    foreign = _plant(env.data_dir / "spill" / "run-1.json", _record(1, 1), uid=NOBODY)
    with Store(env.db) as store:
        prefix = RunRecorder(store)._temp_prefix()
    squatted = tmpdir / f"{prefix}squat"  # the other user guessed the prefix and made it first
    squatted.mkdir(mode=0o777)
    _plant(squatted / "run-1.json", _record(1, 1), uid=NOBODY)
    os.chown(squatted, NOBODY, NOBODY)
    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    out = again.stdout
    assert again.returncode == 0 and "Traceback" not in out, out
    assert _runs(env) == before
    assert f"{foreign} not trusted: belongs to uid {NOBODY}" in out, out
    assert f"spill folder {squatted} not used: it belongs to uid {NOBODY}" in out, out
    assert (squatted / "run-1.json").exists()  # another user's file: left alone, never read


def test_a_stored_run_is_never_overwritten(env, seeded_store, store_digest):
    """finish_run of a run already stored (any later write or import): refused naming the run; the store is unchanged."""
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    before = store_digest(seeded_store)
    with Store(seeded_store) as store:
        (run,) = store.runs()
        assert run.status == "complete"
        with pytest.raises(StoreError, match=rf"run {run.id} .* is not running .* never overwritten; nothing changed"):
            store.finish_run(run.id, status="complete", summary={"output_throughput": 99999.0})
        with pytest.raises(StoreError, match="run 999 .* is not running"):
            store.finish_run(999, status="failed")
    assert store_digest(seeded_store) == before


@pytest.mark.integration
@needs_root
def test_data_dir_and_store_of_another_user_are_refused_for_writing(env, seeded_store, store_digest):
    """A store, or a data dir, owned by another user: writes refused naming the owner; nothing changed."""
    before = store_digest(seeded_store)
    env.profile("seed-a", "flashinfer_cutlass")
    os.chown(seeded_store, NOBODY, NOBODY)
    add = env.run("queue", "add", "--profiles", "seed-a", "--concurrency", "1", "--profiles-dir", str(env.profiles),
                  *SPEC)
    assert add.returncode != 0 and "Traceback" not in add.stdout
    assert f"store file {seeded_store} belongs to uid {NOBODY}, not to you" in add.stdout, add.stdout
    os.chown(seeded_store, 0, 0)
    os.chown(env.data_dir, NOBODY, NOBODY)
    add = env.run("queue", "add", "--profiles", "seed-a", "--concurrency", "1", "--profiles-dir", str(env.profiles),
                  *SPEC)
    assert add.returncode != 0 and "Traceback" not in add.stdout
    assert f"data dir {env.data_dir} belongs to uid {NOBODY}, not to you" in add.stdout, add.stdout
    os.chown(env.data_dir, 0, 0)
    assert store_digest(seeded_store) == before


@pytest.mark.integration
@needs_root
def test_runner_json_of_another_user_is_ignored(env, tmp_path):
    """A runner.json not ours (or loose) is never believed: `run --status` does not follow its socket path."""
    import socket

    env.data_dir.mkdir(parents=True, mode=0o700)
    bait = tmp_path / "bait.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(bait))
    server.listen(1)
    info = _plant(env.data_dir / "runner.json", json.dumps({"pid": 2**22, "socket": str(bait)}), uid=NOBODY)
    try:
        status = env.run("run", "--status")
        assert status.returncode == 1 and "Traceback" not in status.stdout
        assert str(bait) not in status.stdout and str(env.data_dir / "runner.sock") in status.stdout, status.stdout
        os.chown(info, 0, 0)
        os.chmod(info, 0o644)
        status = env.run("run", "--status")
        assert str(bait) not in status.stdout, status.stdout
    finally:
        server.close()
        info.unlink()


@pytest.mark.integration
def test_spill_fallback_is_a_private_mkdtemp_folder(env, tmp_path):
    """With the data dir's spill folder unusable, a run is spilled into a fresh 0700 mkdtemp folder (never a fixed /tmp path)."""
    script = f"""
import os, sys, tempfile
tempfile.tempdir = {str(tmp_path)!r}
from moe_tui.run.recording import FinishedRun, RunRecorder
from moe_tui.store.db import Store
store = Store({str(env.db)!r})
open(store.path.parent / "spill", "w").close()  # a file where the folder should be
rec = RunRecorder(store)
print(rec._spill(FinishedRun(1, 1, "done", "", "complete", {{"status": "complete"}})))
"""
    out = subprocess.run([env.argv()[0], "-c", script], env=env.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path.parent.parent == tmp_path and path.parent.name.startswith(f"moe-tui-spill-{os.getuid()}-")
    assert len(path.parent.name) > len(f"moe-tui-spill-{os.getuid()}-") + 17  # a random tail after the key
    assert (path.parent.stat().st_mode & 0o777) == 0o700 and (path.stat().st_mode & 0o777) == 0o600
