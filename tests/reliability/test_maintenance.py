"""Store maintenance never loses or fakes data (issue 36, "maintenance that hurts the store").

- An edited archive (10x the throughput, flags removed) restored by `moe-tui import` comes back
  marked imported (source "import", its provenance naming the file), never as a measured run.
- `doctor` tells a locked store from a damaged one and never repairs a store another process
  holds; `--repair` keeps the file it replaces beside the restored one, under a name of its own.
- A store file that is a link to a named pipe: `doctor` names it instead of hanging.
- `store vacuum` / `store archive` on a held lock or a full disk: a clear message, no traceback,
  nothing left behind; `store archive` never follows a `.partial` link planted beside its output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # `moe-tui` commands run as subprocesses


def _cli(env, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env.env, capture_output=True, text=True,
                          timeout=timeout)


def _measured_run(env, throughput: float = 100.0, requests: int = 0) -> int:
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store

    spec = BenchmarkSpec.from_dict({"num_prompts": 4, "max_concurrency": 2})
    with Store(env.db) as store:
        start = store.record_server_start(profile_name="a", profile={"name": "a"}, argv=["sim"], env={},
                                          log_path="/dev/null", pid=1, state="ready")
        rid = store.create_run(profile_name="a", spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                               client="moe-tui", profile={"name": "a"}, server_start_id=start,
                               provenance={"engine": "sim"})
        store.finish_run(rid, status="complete", summary={"completed": 4, "output_throughput": throughput},
                         flags=["client_bound", "simulated"], finished_at=time.time() - 90 * 86400,
                         requests=[{"idx": i, "ok": True, "ttft": 0.01, "latency": 0.5, "itl": [0.0123456] * 100}
                                   for i in range(requests)])
    return rid


def test_an_edited_archive_comes_back_marked_imported(env, tmp_path):
    """Archive, edit (10x throughput, flags removed), prune, import: the run is back but marked imported wherever it is read."""
    from moe_tui.compare.evidence import is_import
    from moe_tui.compare.runs import normalise
    from moe_tui.export.results import run_row
    from moe_tui.store.db import Store

    rid = _measured_run(env)
    archive = tmp_path / "old.jsonl"
    out = _cli(env, "store", "archive", str(archive), "--older-than", "30", "--prune")
    assert out.returncode == 0, out.stdout + out.stderr
    header, line = archive.read_text().splitlines()
    record = json.loads(line)
    summary = json.loads(record["run"]["summary_json"])
    summary["output_throughput"] *= 10
    record["run"]["summary_json"] = json.dumps(summary)
    record["run"]["flags_json"] = "[]"
    archive.write_text(header + "\n" + json.dumps(record) + "\n")
    back = _cli(env, "import", str(archive))
    assert back.returncode == 0 and "restored 1 run(s)" in back.stdout, back.stdout + back.stderr
    with Store(env.db) as store:
        (run,) = store.runs()
    assert run.id == rid and run.summary["output_throughput"] == 1000.0  # the file's numbers, as written...
    assert run.source == "import" and run.provenance["source_file"] == str(archive)  # ...but never as measured
    assert run.provenance["restored_from"] == {"file": str(archive), "line": 2, "id": rid, "source": "moe-tui"}
    assert run_row(run)["source"] == "import"
    assert is_import(normalise(run, "restored run"))


# Holds the store the way another program can: exclusive locking mode after a write (every other
# connection, readers included, gets "database is locked"), or merely open (psutil sees the file).
HOLDER = """
import sqlite3, sys, time
mode, path = sys.argv[1], sys.argv[2]
if mode == "lock":
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA locking_mode=EXCLUSIVE")
    c.execute("BEGIN EXCLUSIVE")
    c.execute("CREATE TABLE IF NOT EXISTS held (x)")
    c.execute("COMMIT")
else:
    f = open(path, "rb")
print("held", flush=True)
time.sleep(600)
"""


def _hold(env, mode: str, path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, mode, str(path)], stdout=subprocess.PIPE, text=True)
    env.procs.append(proc)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _let_go(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(10)


def _runs(env) -> list[tuple]:
    return env.query("SELECT id, status FROM runs ORDER BY id")


def test_doctor_tells_a_locked_store_from_a_damaged_one_and_repairs_nothing(env):
    """A sound store held in exclusive mode by another process: doctor says LOCKED (exit 2), --repair replaces nothing (13 stays 13)."""
    _measured_run(env)
    assert _cli(env, "doctor", "--backup").returncode == 0
    _measured_run(env)  # after the backup: a repair from it would lose this run
    before = _runs(env)
    holder = _hold(env, "lock", env.db)
    try:
        for argv in (["doctor"], ["doctor", "--repair"]):
            out = _cli(env, *argv)
            assert out.returncode == 2 and "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
            assert "LOCKED by another process" in out.stdout and "DAMAGED" not in out.stdout, out.stdout
            assert f"pid {holder.pid}" in out.stdout and "nothing was changed" in out.stdout, out.stdout
    finally:
        _let_go(holder)
    assert not list(env.data_dir.glob("*.damaged-*"))
    assert _runs(env) == before and len(before) == 2


def test_repair_never_replaces_a_store_held_open_and_keeps_every_replaced_file(env):
    """A damaged store another process has open: --repair refuses (exit 2); once let go, two repairs in a row keep both replaced files."""
    from test_store_health import _corrupt_a_page_of

    _measured_run(env)
    assert _cli(env, "doctor", "--backup").returncode == 0
    _corrupt_a_page_of(env.db, "runs")
    damaged = env.db.read_bytes()
    holder = _hold(env, "open", env.db)
    try:
        out = _cli(env, "doctor", "--repair")
        assert out.returncode == 2 and f"held open by pid {holder.pid}" in out.stdout, out.stdout + out.stderr
        assert env.db.read_bytes() == damaged and not list(env.data_dir.glob("*.damaged-*"))
    finally:
        _let_go(holder)
    first = _cli(env, "doctor", "--repair")
    assert first.returncode == 0, first.stdout + first.stderr
    _corrupt_a_page_of(env.db, "runs")
    second_damaged = env.db.read_bytes()
    second = _cli(env, "doctor", "--repair")
    assert second.returncode == 0, second.stdout + second.stderr
    kept = sorted(p.read_bytes() for p in env.data_dir.glob("moe-tui.sqlite3.damaged-*") if not p.name.endswith(("-wal", "-shm")))
    assert sorted([damaged, second_damaged]) == kept  # each replaced file kept, none overwritten


def test_doctor_names_a_store_that_links_to_a_named_pipe(env, tmp_path):
    """The store file is a link to a FIFO: doctor names it (exit 1) within seconds instead of hanging."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    env.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.symlink(fifo, env.db)
    out = _cli(env, "doctor", timeout=30)
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert f"(a link to {fifo}) is a named pipe, not a store file" in out.stdout, out.stdout


def test_one_runner_per_store_even_through_a_link(env, tmp_path):
    """Data dir B's store links to A's: while a runner holds A, `moe-tui run` on B is refused, naming the store."""
    _measured_run(env)
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True, mode=0o700)
    os.symlink(env.db, other / "data" / "moe-tui.sqlite3")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom moe_tui.run.rendezvous import RunnerLock\n"
                               "RunnerLock(sys.argv[1]).acquire()\nprint('held', flush=True)\ntime.sleep(600)",
                               str(env.data_dir)], stdout=subprocess.PIPE, text=True)
    env.procs.append(holder)
    try:
        assert holder.stdout.readline().strip() == "held"
        out = subprocess.run([sys.executable, "-m", "moe_tui", "run"], env={**env.env, "MOE_TUI_HOME": str(other)},
                             capture_output=True, text=True, timeout=60)
        text = out.stdout + out.stderr
        assert out.returncode != 0 and "Traceback" not in text, text
        assert f"another moe-tui runner already works the store {env.db}" in text, text
    finally:
        _let_go(holder)
    assert _runs(env) == [(1, "complete")]


def _limited(bytes_: int):
    """For preexec_fn: files this process writes stop growing at `bytes_` (EFBIG, as on a full disk)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (bytes_, bytes_))


def test_vacuum_and_archive_on_a_full_disk_or_a_held_lock_fail_cleanly(env, tmp_path):
    """vacuum with the lock held, vacuum --full and archive on a full disk: a clear message naming the file, no traceback, no partial file, the store unchanged."""
    for _ in range(3):
        _measured_run(env, requests=1000)  # an archive of megabytes
    before = _runs(env)
    holder = _hold(env, "lock", env.db)
    try:
        held = subprocess.run([sys.executable, "-m", "moe_tui", "store", "vacuum"],
                              env={**env.env, "MOE_TUI_STORE_BUSY_TIMEOUT_S": "1", "MOE_TUI_STORE_WRITE_RETRY_S": "1"},
                              capture_output=True, text=True, timeout=60)
    finally:
        _let_go(holder)
    assert held.returncode == 1 and "Traceback" not in held.stderr, held.stderr
    assert str(env.db) in held.stderr and "locked" in held.stderr, held.stderr
    archive = tmp_path / "old.jsonl"
    full = subprocess.run([sys.executable, "-m", "moe_tui", "store", "archive", str(archive), "--older-than", "30"],
                          env=env.env, capture_output=True, text=True, timeout=60, preexec_fn=_limited(256 * 1024))
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    assert f"writing archive {archive} failed (File too large); nothing archived, no partial file left" in full.stderr
    assert not archive.exists() and not list(tmp_path.glob(".old.jsonl*"))
    size = env.db.stat().st_size
    vac = subprocess.run([sys.executable, "-m", "moe_tui", "store", "vacuum", "--full"], env=env.env,
                         capture_output=True, text=True, timeout=60, preexec_fn=_limited(size // 4))
    assert vac.returncode == 1 and "Traceback" not in vac.stderr, vac.stderr
    assert f"vacuum of store file {env.db} failed, nothing changed" in vac.stderr, vac.stderr
    assert _runs(env) == before


def test_archive_never_follows_a_planted_partial_link(env, tmp_path):
    """A `.partial` link planted beside the archive (the old fixed name) pointing at a victim file: the victim is untouched and the archive whole."""
    _measured_run(env)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    archive = tmp_path / "old.jsonl"
    os.symlink(victim, tmp_path / "old.jsonl.partial")
    out = _cli(env, "store", "archive", str(archive), "--older-than", "30")
    assert out.returncode == 0, out.stdout + out.stderr
    assert victim.read_text() == "precious\n"
    assert archive.read_text().startswith('{"kind": "moe-tui-archive"') and not archive.is_symlink()
    assert (archive.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize("kind", ["device", "pipe", "folder"])
def test_import_refuses_what_is_not_a_regular_file(env, tmp_path, kind):
    """`moe-tui import` of /dev/zero, a named pipe or a folder: refused naming it, exit 1, at once (no out-of-memory, no hang)."""
    target = {"device": "/dev/zero", "pipe": str(tmp_path / "pipe"), "folder": str(tmp_path)}[kind]
    if kind == "pipe":
        os.mkfifo(target)
    out = _cli(env, "import", target, timeout=30)
    why = {"device": "is a device", "pipe": "is a named pipe", "folder": "is a folder"}[kind]
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"moe-tui import: {target} {why}, not a regular file; nothing imported" in out.stderr, out.stderr


def _archive_line(env, tmp_path) -> tuple[Path, str, dict]:
    _measured_run(env)
    archive = tmp_path / "a.jsonl"
    assert _cli(env, "store", "archive", str(archive), "--older-than", "30", "--prune").returncode == 0
    header, line = archive.read_text().splitlines()
    return archive, header, json.loads(line)


@pytest.mark.parametrize("edit, said", [
    ("nested", "a.jsonl:2: JSON nested too deeply to be a moe-tui archive record"),
    ("huge-time", "a.jsonl:2: run finished_at 1e+308 is not a time in seconds between 0 and 1e+10"),
    ("nan-time", "a.jsonl:2: run created_at nan is not a time in seconds"),
    ("sample-time", "a.jsonl:2: a GPU sample is [t, sample_json], t a time in seconds"),
])
def test_an_archive_with_absurd_nesting_or_times_is_named_and_nothing_restored(env, tmp_path, edit, said):
    """Deeply nested JSON, a 1e308 or NaN timestamp, an absurd GPU sample time: a clear error naming file:line, no traceback, nothing restored."""
    archive, header, record = _archive_line(env, tmp_path)
    if edit == "nested":
        line = "[" * 100_000 + "]" * 100_000
    else:
        if edit == "huge-time":
            record["run"]["finished_at"] = 1e308
        elif edit == "nan-time":
            record["run"]["created_at"] = float("nan")
        else:
            record["gpu_samples"] = [[1e308, "{}"]]
        line = json.dumps(record)
    archive.write_text(header + "\n" + line + "\n")
    out = _cli(env, "import", str(archive))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert said in out.stderr and "nothing imported" in out.stderr, out.stderr
    assert _runs(env) == []


def test_a_deeply_nested_benchmark_record_is_named(env, tmp_path):
    """A bench_serving JSONL line of 100,000 brackets: `import` names file:line, no traceback."""
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    out = _cli(env, "import", str(path))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"{path}:1: JSON nested too deeply to be a benchmark record" in out.stderr, out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user (uid nobody)")
def test_archive_never_follows_a_partial_link_planted_by_uid_nobody(env, tmp_path):
    """uid nobody (a setuid child) plants `.partial` links in a shared sticky folder, at the archive's old fixed name and at guesses: the victim is untouched, the archive whole and ours."""
    _measured_run(env)
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="moe-tui-shared-", dir="/tmp"))  # reachable by nobody
    shared.chmod(0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    try:
        archive = shared / "old.jsonl"
        pid = os.fork()
        if pid == 0:  # the other user: links only (it cannot write the victim itself)
            code = 1
            try:
                os.setgid(65534)
                os.setuid(65534)
                os.symlink(victim, str(archive) + ".partial")
                for n in range(8):
                    os.symlink(victim, shared / f".old.jsonl.{n}.partial")
                code = 0
            finally:
                os._exit(code)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert os.lstat(str(archive) + ".partial").st_uid == 65534
        out = _cli(env, "store", "archive", str(archive), "--older-than", "30")
        assert out.returncode == 0, out.stdout + out.stderr
        assert victim.read_text() == "precious\n" and victim.stat().st_mode & 0o777 == 0o644
        assert archive.read_text().startswith('{"kind": "moe-tui-archive"') and not archive.is_symlink()
        st = archive.stat()
        assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o600
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_doctor_says_it_waits_for_a_watchdogs_sweep_and_then_backs_up(env):
    """A dead runner's watchdog holds the lock while it sweeps: `doctor --backup` says it waits (it was silent up
    to 30 s), then goes on once the watchdog lets go. The holder lets go only after that line is read: no clock."""
    _measured_run(env)
    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom moe_tui.run.rendezvous import RunnerLock\n"
                               "RunnerLock(sys.argv[1]).acquire(role='watchdog')\nprint('held', flush=True)\n"
                               "sys.stdin.readline()", str(env.data_dir)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    env.procs.append(holder)
    assert holder.stdout.readline().strip() == "held"
    doctor = subprocess.Popen([sys.executable, "-m", "moe_tui", "doctor", "--backup"], env=env.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.procs.append(doctor)
    first = doctor.stdout.readline()
    assert f"waiting for the watchdog (pid {holder.pid})" in first, first
    holder.communicate("\n", timeout=30)  # the sweep ends: the watchdog lets go of the lock
    rest, _ = doctor.communicate(timeout=60)
    assert doctor.returncode == 0 and "Traceback" not in rest, first + rest
    assert "is using" not in rest and "backup" in rest, first + rest
