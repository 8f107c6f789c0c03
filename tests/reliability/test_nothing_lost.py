"""Nothing finished is ever lost (issue 13, rows 1-5), with real processes on loopback.

- A server frozen mid-run (SIGSTOP, then SIGCONT) makes a stored run flagged `server_stall`,
  with the stall's start and length in its self-check: never a clean number.
- Another process holding the store's write lock past the busy timeout: the runner waits it out
  (retry with backoff) and stores the run; held past every retry, the run goes to a spill file,
  the runner exits 1 naming it, and the next start stores it: one run per item, no re-run.
- The data dir's filesystem filling mid-run: the runner exits non-zero saying why; the run is
  spilled (outside the full filesystem) and stored by the next start.
- A runner killed between storing a run and closing its item: the next start recognises the
  stored run of the item's current attempt and does not measure it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest
from runner_support import speed_factor, tmpfs, wait_for, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = ["--input-len", "32", "--output-len", "32", "--no-warmup-pass"]


def _add(env, name: str, prompts: int, conc: int = 2, repeats: int = 1):
    out = env.run("queue", "add", "--profiles", name, "--concurrency", str(conc), "--repeats", str(repeats),
                  "--num-prompts", str(prompts), "--profiles-dir", str(env.profiles), *SPEC)
    assert out.returncode == 0, out.stdout


def _running_run(env):
    if not env.db.exists():
        return None
    rows = env.query("SELECT r.id FROM runs r JOIN queue_items q ON q.run_id = r.id "
                     "WHERE r.status = 'running' AND q.state = 'running'")
    return rows[0][0] if rows else None


def _timed_requests_done(env, at_least: int) -> bool:
    """The runner's live progress (over its control socket) shows the timed phase under way."""
    from moe_tui.run.client import call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable

    try:
        progress = (call_runner_sync("snapshot", env.data_dir, timeout=5.0) or {}).get("last_progress") or {}
    except (RunnerUnavailable, OSError):
        return False
    return progress.get("phase") == "timed" and progress.get("completed", 0) >= at_least


def _one_complete_run_per_item(env) -> None:
    items = env.query("SELECT id, state, run_id FROM queue_items ORDER BY id")
    assert all(state == "done" for _, state, _ in items), items
    complete = env.query("SELECT queue_item_id, id FROM runs WHERE status = 'complete' ORDER BY queue_item_id")
    assert sorted(r[0] for r in complete) == [i[0] for i in items], (items, complete)  # nothing duplicated
    assert {r[1] for r in complete} == {i[2] for i in items}


def test_server_frozen_mid_run_is_flagged_stall(env):
    """Server frozen 8 s mid-run (SIGSTOP, SIGCONT): the stored run is flagged server_stall with the stall's start and length."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=2)
    _add(env, name, prompts=24)
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    run_id = wait_for(lambda: _running_run(env), 60, "a run in progress")
    wait_for(lambda: _timed_requests_done(env, 2), 60, "timed requests under way")
    (emulator,) = env.emulators()
    emulator.send_signal(signal.SIGSTOP)
    frozen_at = time.time()
    try:
        time.sleep(8.0)  # longer than the 5 s floor of judgement.stall_threshold_s
    finally:
        emulator.send_signal(signal.SIGCONT)
    out, _ = runner.communicate(timeout=120 * speed_factor())
    assert runner.returncode == 0, out
    assert "Traceback" not in out
    (status, flags, selfcheck), = env.query("SELECT status, flags_json, selfcheck_json FROM runs WHERE id = ?",
                                            (run_id,))
    flags, stall = json.loads(flags), json.loads(selfcheck)["server_stall"]
    assert "server_stall" in flags, (status, flags, stall, frozen_at,
                                     env.query("SELECT started_at, finished_at FROM runs"))
    assert stall["length_s"] >= 5.0 and stall["length_s"] <= 8.0 + 5.0, stall
    assert frozen_at - 2.0 <= stall["start"] <= frozen_at + 2.0, (stall, frozen_at)
    compare = env.run("compare", name, name)
    assert "Traceback" not in compare.stdout
    wait_gone(env)


class _WriteLockHolder:
    """Another process (a sqlite3 shell, a backup) holding the store's write lock."""

    def __init__(self, db):
        self.proc = subprocess.Popen(
            ["python3", "-c", "import sqlite3,sys\n"
             f"c=sqlite3.connect({str(db)!r}, isolation_level=None, timeout=60)\n"
             "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.readline()\n"
             "c.execute('ROLLBACK')"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
        self.proc.wait(10)


def test_write_lock_held_past_busy_timeout_is_waited_out(env):
    """Another process holds the store's write lock 3x the busy timeout at the end of a run: the run is stored, nothing lost."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=10)
    _add(env, name, prompts=16, repeats=2)
    env.env.update(MOE_TUI_STORE_BUSY_TIMEOUT_S="2", MOE_TUI_STORE_WRITE_RETRY_S=str(60 * speed_factor()))
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: _running_run(env), 60, "a run in progress")
    holder = _WriteLockHolder(env.db)
    try:
        time.sleep(6.0)  # the run ends while the lock is held; the busy timeout (2 s) runs out
    finally:
        holder.release()
    out, _ = runner.communicate(timeout=120 * speed_factor())
    assert runner.returncode == 0, out
    assert "Traceback" not in out and "internal error" not in out
    _one_complete_run_per_item(env)
    assert env.query("SELECT COUNT(*) FROM runs") == [(2,)]
    wait_gone(env)


def test_write_lock_held_past_every_retry_spills_then_next_start_stores(env):
    """Write lock held past every retry: the run goes to a spill file, the runner exits 1 naming it; the next start stores it, no re-run."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=10)
    _add(env, name, prompts=16)
    env.env.update(MOE_TUI_STORE_BUSY_TIMEOUT_S="1", MOE_TUI_STORE_WRITE_RETRY_S="1")
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    run_id = wait_for(lambda: _running_run(env), 60, "a run in progress")
    holder = _WriteLockHolder(env.db)
    try:
        out, _ = runner.communicate(timeout=120 * speed_factor())
    finally:
        holder.release()
    assert runner.returncode == 1, out
    assert "Traceback" not in out
    assert f"run {run_id} of item #1 (complete) was saved to the spill file" in out, out
    assert str(env.db) in out and "locked" in out
    spill = env.data_dir / "spill" / f"run-{run_id}.json"
    assert spill.exists() and (spill.stat().st_mode & 0o777) == 0o600
    assert env.query("SELECT state FROM queue_items") == [("running",)]

    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert again.returncode == 0, again.stdout
    assert f"stored run {run_id} of item #1 (complete) from spill file {spill}" in again.stdout
    assert not spill.exists()
    _one_complete_run_per_item(env)
    assert env.query("SELECT COUNT(*) FROM runs") == [(1,)]  # stored once, never measured again
    wait_gone(env)


def test_killed_between_storing_run_and_closing_item_does_not_rerun(env):
    """Runner killed between storing the run and closing its item: the next start recognises the stored run, no re-run."""
    name = env.profile("sim-a", "flashinfer_cutlass", time_scale=20)
    _add(env, name, prompts=4, repeats=2)
    first = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert first.returncode == 0, first.stdout
    _one_complete_run_per_item(env)
    # The state a runner that wrote the two apart leaves when killed between them: the run of the
    # item's current attempt is complete, the item still `running`.
    conn = sqlite3.connect(env.db)
    conn.execute("UPDATE queue_items SET state = 'running' WHERE id = 2")
    conn.commit()
    conn.close()
    again = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
    assert again.returncode == 0, again.stdout
    assert "Traceback" not in again.stdout
    _one_complete_run_per_item(env)
    assert env.query("SELECT COUNT(*) FROM runs") == [(2,)]  # 2 repeats asked, 2 runs: n is right
    wait_gone(env)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs")
def test_data_dir_filesystem_fills_mid_run(env, tmp_path):
    """Data dir's filesystem fills mid-run: the runner exits 1 saying why, the run is spilled outside it; the next start stores it."""
    with tmpfs(tmp_path / "small", "6m") as mnt:
        try:
            env.home = mnt / "h"
            env.env["MOE_TUI_HOME"] = str(env.home)
            spill_tmp = tmp_path / "t"
            spill_tmp.mkdir()
            env.env["TMPDIR"] = str(spill_tmp)
            name = env.profile("sim-a", "flashinfer_cutlass", time_scale=4)
            _add(env, name, prompts=24)
            runner = env.popen("run", "--profiles-dir", str(env.profiles))
            run_id = wait_for(lambda: _running_run(env), 60, "a run in progress")
            wait_for(lambda: _timed_requests_done(env, 2), 60, "timed requests under way")
            with open(mnt / "filler", "wb", buffering=0) as f:  # eat every free block (unbuffered: nothing left to flush at close)
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
            out, _ = runner.communicate(timeout=120 * speed_factor())
            assert runner.returncode == 1, out
            assert "Traceback" not in out
            assert "full" in out and str(env.db) in out, out
            spilled = list(spill_tmp.rglob(f"run-{run_id}.json"))
            assert len(spilled) == 1 and f"saved to the spill file {spilled[0]}" in out, out
            assert (spilled[0].stat().st_mode & 0o777) == 0o600
            (mnt / "filler").unlink()
            again = env.run("run", "--profiles-dir", str(env.profiles), timeout=120)
            assert again.returncode == 0, again.stdout
            assert f"from spill file {spilled[0]}" in again.stdout, again.stdout
            spilled_status = out.split(f"run {run_id} of item #1 (", 1)[1].split(")", 1)[0]
            # Stored as measured, the item closed with that very run; nothing measured twice.
            (status, error), = env.query("SELECT status, error FROM runs WHERE id = ?", (run_id,))
            assert status == spilled_status, (status, error)
            (state, item_run), = env.query("SELECT state, run_id FROM queue_items")
            assert item_run == run_id and state == ("done" if status == "complete" else "failed"), (state, error)
            assert env.query("SELECT COUNT(*) FROM runs") == [(1,)]
            wait_gone(env)
        finally:
            env.cleanup()
