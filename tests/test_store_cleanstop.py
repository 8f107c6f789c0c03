"""Fast start at any size (issue 34): a writable open runs `quick_check` (a pass over the whole file,
4.7 s warm at 5 GB) only after an unclean stop or when the file changed behind moe-tui, not on every
open: the TUI and then its runner each paid it on every start and re-attach."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from moe_tui.store import integrity
from moe_tui.store.db import Store
from moe_tui.store.errors import StoreDamaged


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """Every quick_check run, by the file's name."""
    ran: list[str] = []
    real = integrity.quick_check

    def counted(conn, *, full=False):
        ran.append("check")
        return real(conn, full=full)

    monkeypatch.setattr(integrity, "quick_check", counted)
    return ran


def _made(path) -> None:
    with Store(path) as s:
        s.create_run(profile_name="a", spec_json="{}", fingerprint="f", client="c")


def test_a_store_closed_cleanly_opens_again_without_a_check(tmp_path, checks):
    path = tmp_path / "s.sqlite3"
    _made(path)
    with Store(path) as first:
        assert first.integrity_checked == ""
        with Store(path) as second:  # this process has it open: the TUI and its in-process controller
            assert second.integrity_checked == ""
    with Store(path) as again:
        assert again.integrity_checked == "" and len(again.runs()) == 1
    assert checks == []


def test_a_file_changed_since_the_last_clean_close_is_checked_and_refused_when_damaged(tmp_path, checks):
    path = tmp_path / "s.sqlite3"
    _made(path)
    data = bytearray(path.read_bytes())
    data[4096 + 100:4096 + 400] = b"\xff" * 300  # a b-tree page of the runs table, overwritten
    path.write_bytes(bytes(data))
    with pytest.raises(StoreDamaged, match="is damaged"):
        Store(path)
    assert checks == ["check"]


def test_a_store_without_a_record_of_a_clean_close_is_checked_once(tmp_path, checks):
    path = tmp_path / "s.sqlite3"
    _made(path)
    (tmp_path / "s.sqlite3.clean").unlink()  # as a store last closed by an older moe-tui
    with Store(path) as s:
        assert s.integrity_checked == "no record of a clean close"
    with Store(path) as s:
        assert s.integrity_checked == ""
    assert checks == ["check"]


_HOLD = textwrap.dedent("""
    import os, sys
    from moe_tui.store.db import Store
    s = Store(sys.argv[1], writer=sys.argv[3] == "runner")
    print(repr(s.integrity_checked), flush=True)
    if sys.argv[2] == "die":
        os._exit(0)  # no close: as a killed runner, or a TUI gone with its SSH connection
    sys.stdin.readline()
    s.close()
""")


def _die(path, role: str) -> None:
    died = subprocess.run([sys.executable, "-c", _HOLD, str(path), "die", role], capture_output=True, text=True,
                          timeout=60)
    assert died.returncode == 0 and died.stdout.strip() == "''", died.stderr


@pytest.mark.integration
def test_only_the_runner_after_a_runner_killed_checks_and_a_tui_gone_with_ssh_is_no_reason(tmp_path, checks):
    """A TUI that died with its SSH connection: its re-attach does not check (a killed process
    leaves SQLite's files whole). A runner killed with the store open: the TUI's open does not
    check either, the next runner's does, once; a live process holding the store (a TUI, then
    its runner) is no reason to check."""
    path = tmp_path / "s.sqlite3"
    _made(path)
    _die(path, "tui")
    with Store(path) as s:
        assert s.integrity_checked == ""
    _die(path, "runner")
    with Store(path) as s:  # the TUI, starting again
        assert s.integrity_checked == ""
    assert checks == []
    with Store(path, writer=True) as s:  # the next runner
        assert s.integrity_checked == "the runner that had it open stopped without closing it"
    assert checks == ["check"]
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), "hold", "tui"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "''"
        with Store(path, writer=True) as s:  # the runner opens while the TUI holds it: no second check
            assert s.integrity_checked == ""
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    with Store(path, writer=True) as s:
        assert s.integrity_checked == ""
    assert checks == ["check"]


def test_a_store_left_open_when_the_machine_stopped_is_checked(tmp_path, checks):
    """A marker from an earlier boot: the machine stopped with the store open (a write cache that
    lied can leave a torn page), so the next open of any process checks."""
    import json

    path = tmp_path / "s.sqlite3"
    _made(path)
    folder = tmp_path / "s.sqlite3.open"
    (folder / "4242").write_text(json.dumps({"started": 1.0, "boot": "an-earlier-boot", "writer": False}))
    with Store(path) as s:
        assert s.integrity_checked == "the machine stopped while a process had it open"
    with Store(path) as s:
        assert s.integrity_checked == ""
    assert checks == ["check"]


def test_one_backup_is_kept_its_size_and_time_said_and_the_store_stays_free_meanwhile(tmp_path):
    """The hourly backup copied the whole store under the store's lock and kept two copies (the disk
    held three). Now: one copy, taken from a connection of its own while another thread holds the
    store handle's lock (a runner mid-write), with its size and time said."""
    import threading

    from moe_tui.store.backup import backup_path, backup_store

    path = tmp_path / "s.sqlite3"
    _made(path)
    prev = tmp_path / "s.sqlite3.backup.prev"
    prev.write_bytes(b"an older moe-tui's second copy")
    with Store(path) as store:
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store._lock:
                held.set()
                release.wait(60)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        result: list = []
        taker = threading.Thread(target=lambda: result.append(backup_store(store)))
        taker.start()
        taker.join(30)
        done = not taker.is_alive()
        release.set()
        holder.join(10)
        taker.join(30)
    assert done, "the backup waited for the store handle's lock"
    taken = result[0]
    assert taken.path == backup_path(path) and taken.bytes == taken.path.stat().st_size > 0
    assert "MB in" in taken.words() and "one copy kept" in taken.words()
    assert not prev.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if "backup" in p.name) == ["s.sqlite3.backup"]
    with Store(taken.path) as copy:
        assert len(copy.runs()) == 1
