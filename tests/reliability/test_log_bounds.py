"""A server's log costs bounded memory, and a stored log path is data (issue 36, "bounds").

- A log line that never ends (200 MB without a newline): the process following the server's log
  stays small, and `server logs -n 5` prints the last lines cut at 64 KiB each, reading from the
  end of the file, never the whole of it.
- A stored server start whose log path is /dev/zero or a named pipe (an archive can carry any
  path): `server logs` refuses it, naming the file, at once: no out-of-memory, no hang.
"""

from __future__ import annotations

import os
import sys

import pytest
from conftest import write_garbage_server
from runner_support import free_port

from tests.support.peak import run_measured

pytestmark = pytest.mark.integration  # `moe-tui` commands and a server run as processes

def _measured(env, *args: str, timeout: float = 120) -> tuple[int, int, int, str]:
    m = run_measured([sys.executable, "-m", "moe_tui", *args], env.env, timeout, markers=("line cut",))
    return m.returncode, m.stdout_bytes, m.peak_kib, m.output + (" CUT" if m.found else "")


def test_a_log_line_that_never_ends_costs_bounded_memory(env, tmp_path):
    """A server that logs 200 MB in one line: `server start` stays under 200 MB RSS; `server logs -n 5/-n 1000` print < 200 KB / 1 MB (the line cut), in bounded memory."""
    script = write_garbage_server(tmp_path, "endless-line")
    port = free_port()
    env.ports.append(port)
    (env.profiles / "endless.toml").write_text(
        f'name = "endless"\nengine = "sim"\nmodel_path = "GLM-5-NVFP4"\nmoe_runner_backend = "flashinfer_cutlass"\n'
        f'port = {port}\npython = "{script}"\nstartup_timeout_s = 60\n')
    try:
        code, _, rss_kib, text = _measured(env, "server", "start", "endless", "--profiles", str(env.profiles),
                                           "--keep", "--quiet")
        assert code == 0 and "Traceback" not in text, text
        assert rss_kib < 200 * 1024, f"following the log took {rss_kib // 1024} MB"
        (log_path,) = env.query("SELECT log_path FROM server_starts")
        assert os.path.getsize(log_path[0]) > 200 * 2**20
        code, printed, rss_kib, text = _measured(env, "server", "logs", "endless", "-n", "5")
        assert code == 0 and printed < 200 * 1024, (printed, text[-500:])
        code, printed, rss_kib, text = _measured(env, "server", "logs", "endless", "-n", "1000")
        assert code == 0 and printed < 1024 * 1024 and text.endswith(" CUT"), (printed, text[-500:])
        assert rss_kib < 200 * 1024, f"server logs -n 1000 took {rss_kib // 1024} MB"
    finally:
        env.run("server", "stop", "endless", timeout=60)


@pytest.mark.parametrize("kind", ["device", "pipe", "link"])
def test_server_logs_refuses_a_stored_path_that_is_not_a_log_file(env, tmp_path, kind):
    """A server start (as an archive may restore it) whose log is /dev/zero, a FIFO or a link: refused naming the file, exit 1, at once."""
    from moe_tui.store.db import Store

    target = {"device": "/dev/zero", "pipe": str(tmp_path / "pipe"), "link": str(tmp_path / "link")}[kind]
    if kind == "pipe":
        os.mkfifo(target)
    if kind == "link":
        (tmp_path / "secret").write_text("not a log\n")
        os.symlink(tmp_path / "secret", target)
    with Store(env.db) as store:
        store.record_server_start(profile_name="x", profile={"name": "x"}, argv=["sim"], env={}, log_path=target,
                                  pid=None, state="stopped")
    out = env.run("server", "logs", "x", "-n", "5", timeout=30)
    why = {"device": "is a device, not a regular file", "pipe": "is a named pipe, not a regular file",
           "link": "is a symbolic link (not followed)"}[kind]
    assert out.returncode == 1 and f"cannot read log {target}: {why}" in out.stdout, out.stdout
    assert "Traceback" not in out.stdout and "not a log" not in out.stdout


def test_the_line_splitter_holds_at_most_one_cut_line():
    """100 MiB without a newline in 1 MiB reads: one line of 64 KiB plus a note; nothing held; the next line is whole."""
    from moe_tui.servers.logtail import MAX_LINE_CHARS, LineSplitter

    splitter = LineSplitter()
    lines = []
    for _ in range(100):
        lines += splitter.feed(b"x" * (1 << 20))
        assert len(splitter._partial) <= MAX_LINE_CHARS
    lines += splitter.feed(b"tail\nnext line\n")
    assert len(lines) == 3 and lines[0].startswith("x" * MAX_LINE_CHARS) and "line cut" in lines[0]
    assert len(lines[0]) < MAX_LINE_CHARS + 100 and "end of the cut line" in lines[1] and lines[2] == "next line"
