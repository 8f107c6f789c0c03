"""A damaged store is never written into, and `moe-tui doctor --repair` restores it (issue 22, item 3).

Real runner and emulator fill a store; `moe-tui doctor --backup` takes a checked online backup;
a later run is stored after it. Then a page in the middle of the file (the per-request records
of the later run) is overwritten with garbage, as a failing disk would:

- `moe-tui queue add` and `moe-tui run` refuse to write, name the file and say how to recover;
  the file stays byte-identical.
- `moe-tui doctor` reports the damage (exit 1) and changes nothing.
- `moe-tui doctor --repair` moves the damaged file aside, restores the backup, and names the run
  the backup lacks as lost; the restored store is sound and the queue works again.
"""

from __future__ import annotations

import os
import sqlite3

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = ["--concurrency", "1", "--num-prompts", "6", "--input-len", "16", "--output-len", "32", "--no-warmup-pass"]


def _add(env, name):
    out = env.run("queue", "add", "--profiles", name, "--profiles-dir", str(env.profiles), *SPEC)
    assert out.returncode == 0, out.stdout
    return out


def _corrupt_a_page_of(db, table: str) -> int:
    """Overwrite one page holding `table`'s rows (a leaf in the middle of the file) with garbage."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' "
                                        "ORDER BY pageno", (table,))]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    total = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    page = pages[-1]
    assert 1 < page < total or len(pages) == 1, (pages, total)
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(bytes((i * 37 + 11) % 256 for i in range(size)))
    return page


def test_damaged_store_refuses_writes_and_doctor_repair_restores_the_backup(env):
    """A corrupted page mid-file: queue add and run refuse (file unchanged, recovery hint); doctor --repair restores the backup and names the lost run."""
    name = env.profile("sim-a", "flashinfer_cutlass")
    _add(env, name)
    assert env.run("run", "--profiles-dir", str(env.profiles)).returncode == 0
    backup = env.run("doctor", "--backup")
    assert backup.returncode == 0 and "backup taken" in backup.stdout, backup.stdout
    backup_file = env.db.with_name(env.db.name + ".backup")
    assert backup_file.exists() and (backup_file.stat().st_mode & 0o777) == 0o600
    _add(env, name)
    second = env.run("run", "--profiles-dir", str(env.profiles))
    assert second.returncode == 0, second.stdout
    assert env.query("SELECT id, status FROM runs") == [(1, "complete"), (2, "complete")]
    sound = env.run("doctor")
    assert sound.returncode == 0 and "sound" in sound.stdout, sound.stdout

    _corrupt_a_page_of(env.db, "requests")
    damaged = env.db.read_bytes()
    for argv in (["queue", "add", "--profiles", name, "--profiles-dir", str(env.profiles), *SPEC],
                 ["run", "--profiles-dir", str(env.profiles)]):
        out = env.run(*argv)
        assert out.returncode != 0 and "Traceback" not in out.stdout, out.stdout
        assert f"store file {env.db} is damaged" in out.stdout and "refusing to write" in out.stdout, out.stdout
        assert "moe-tui doctor --repair" in out.stdout
        assert env.db.read_bytes() == damaged
    check = env.run("doctor")
    assert check.returncode == 1 and "DAMAGED" in check.stdout and "--repair" in check.stdout, check.stdout
    assert env.db.read_bytes() == damaged

    repair = env.run("doctor", "--repair")
    out = repair.stdout
    assert repair.returncode == 0 and "Traceback" not in out, out
    (aside,) = env.data_dir.glob("moe-tui.sqlite3.damaged-*[0-9]")
    assert aside.read_bytes() == damaged and f"moved to {aside}" in out
    assert "runs: ids 2..2 are not in the backup" in out and f"lost run 2: {name} (complete" in out, out
    assert "the restored store is sound" in out
    assert env.query("SELECT id, status FROM runs") == [(1, "complete")]
    assert (env.db.stat().st_mode & 0o777) == 0o600
    _add(env, name)  # the queue works again on the restored store
    assert env.run("run", "--profiles-dir", str(env.profiles)).returncode == 0
    assert env.run("doctor").returncode == 0


def test_doctor_without_a_backup_says_so_and_changes_nothing(env, seeded_store):
    """Damaged store and no backup: doctor --repair refuses, naming the missing backup; the file is unchanged."""
    _corrupt_a_page_of(seeded_store, "queue_items")
    before = seeded_store.read_bytes()
    out = env.run("doctor", "--repair")
    assert out.returncode == 1 and "Traceback" not in out.stdout, out.stdout
    assert "no backup at" in out.stdout and "nothing changed" in out.stdout, out.stdout
    assert seeded_store.read_bytes() == before
    assert not list(seeded_store.parent.glob("*.damaged-*"))
    assert os.path.exists(seeded_store)
