"""Untrusted input costs nothing unbounded (issue 22, item 5), with real processes.

- One owner socket request with 1,000,000 concurrencies: refused at once, the runner answers
  the next request, nothing queued; 5,000 concurrencies (a short list) refused by the campaign limit.
- A server whose stream line never ends: `moe-tui bench` fails the request as a protocol error once
  the line passes 16 MiB, in bounded memory, instead of growing to the request timeout.
- A profile that is a link to /dev/zero, or a named pipe: refused naming the file (no hang, no
  out-of-memory).
- Terminal escape codes in a server log: `moe-tui server logs` prints them harmless.
- `moe-tui bench` stops within seconds of SIGTERM during its warmup request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from runner_support import free_port, scaled, wait_for

from tests.support.peak import run_measured

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEC = ["--num-prompts", "4", "--input-len", "16", "--output-len", "8", "--no-warmup-pass"]

# A server that looks healthy; its /generate either streams one line that never ends, or hangs.
ODD_SERVER = textwrap.dedent('''
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    mode, port = sys.argv[1], int(sys.argv[2])
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a):
            pass
        def _json(self, obj):
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self._json({"data": [{"id": "odd"}]} if self.path.startswith("/v1/models") else {})
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not self.path.startswith("/generate"):
                return self._json({})
            print("generate", flush=True)
            if mode == "hang":
                time.sleep(3600)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"text": "')
            chunk = b"a" * (1 << 20)
            try:
                while True:
                    self.wfile.write(chunk)
            except OSError:
                pass
    print("up", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
''')


@pytest.fixture
def odd_server(tmp_path):
    procs = []

    def start(mode: str):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-c", ODD_SERVER, mode, str(port)], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "up"
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def test_socket_request_with_a_million_concurrencies_is_refused_at_once(env):
    """add_campaign over the socket with 1,000,000 concurrencies: refused in seconds naming the limit; the runner answers on; nothing queued."""
    from moe_tui.run.client import RunnerOpError, call_runner_sync

    name = env.profile("sim-a", "flashinfer_cutlass")
    runner = env.popen("run", "--stay", "--profiles-dir", str(env.profiles))
    wait_for(lambda: env.run("run", "--status").returncode == 0, 60, "the runner answering")
    started = time.monotonic()
    with pytest.raises(RunnerOpError, match=r"args\.concurrencies: 1,000,000 entries, over the limit of 4,096"):
        call_runner_sync("add_campaign", env.data_dir, profiles=[name], concurrencies=list(range(1, 1_000_001)))
    with pytest.raises(RunnerOpError, match=r"campaign: 4,000 concurrencies, over the limit of 1,024"):
        call_runner_sync("add_campaign", env.data_dir, profiles=[name], concurrencies=list(range(1, 4001)))
    assert time.monotonic() - started < scaled(20)
    assert call_runner_sync("ping", env.data_dir, timeout=10)["pid"] == runner.pid
    assert env.query("SELECT COUNT(*) FROM queue_items") == [(0,)]
    assert env.run("run", "--stop").returncode == 0
    runner.wait(60)


def test_never_ending_stream_line_is_cut_at_the_line_limit(env, odd_server):
    """A server streaming one endless line: the request fails as a protocol error at 16 MiB; the client stays small."""
    _proc, url = odd_server("endless-line")
    out = run_measured(env.argv("bench", "--base-url", url, "--num-prompts", "1", "--max-concurrency", "1",
                                "--random-input-len", "8", "--random-output-len", "8", "--warmup-requests", "0",
                                "--vocab-size", "1000", "--request-timeout", "600"), env.env, scaled(120))
    assert out.returncode == 1 and "Traceback" not in out.output, out.output
    assert "over 16777216 bytes without an end of line" in out.output, out.output
    assert out.peak_kib < 400 * 1024, f"the bench process grew to {out.peak_kib / 1024:.0f} MB"


@pytest.mark.parametrize("kind", ["dev-zero-link", "fifo"])
def test_profile_that_is_not_a_regular_file_is_refused(env, kind):
    """A profile file that is a link to /dev/zero or a named pipe: refused naming it, at once (no hang, no OOM)."""
    env.profile("ok", "flashinfer_cutlass")
    bad = env.profiles / "bad.toml"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    out = env.run("profiles", "check", "--no-sglang", str(env.profiles), timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stdout, out.stdout
    why = "is a named pipe" if kind == "fifo" else "is a device"
    assert str(bad) in out.stdout and why in out.stdout and "not a regular file" in out.stdout, out.stdout


def test_server_log_escape_codes_never_reach_the_terminal(env, seeded_store, tmp_path):
    """Escape codes in a server's log (set the title, clear the screen): `moe-tui server logs` prints them harmless."""
    from moe_tui.store.db import Store

    log = tmp_path / "evil.log"
    log.write_bytes(b"ready\n\x1b]0;pwned title\x07\x1b[2J\x1b[31mred\x1b[0m \x9b6n bell\x07 done\n")
    with Store(seeded_store) as store:
        store.record_server_start(profile_name="evil", profile={"name": "evil"}, argv=["x"], env={},
                                  log_path=str(log), pid=None, state="stopped")
    out = env.run("server", "logs", "evil")
    assert out.returncode == 0, out.stdout
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and "\x9b" not in out.stdout, repr(out.stdout)
    assert "ready" in out.stdout and "red" in out.stdout and "done" in out.stdout


def test_bench_stops_promptly_on_sigterm_during_warmup(env, odd_server):
    """`moe-tui bench` given SIGTERM while its warmup request hangs: exits within seconds, saying nothing was measured."""
    server, url = odd_server("hang")
    bench = env.popen("bench", "--base-url", url, "--num-prompts", "2", "--random-input-len", "8",
                      "--random-output-len", "8", "--warmup-requests", "1", "--vocab-size", "1000")
    assert server.stdout.readline().strip() == "generate"  # the warmup request is at the server
    signalled = time.monotonic()
    bench.send_signal(signal.SIGTERM)
    out, _ = bench.communicate(timeout=scaled(30))
    took = time.monotonic() - signalled
    assert took < scaled(10), f"took {took:.1f} s after SIGTERM"
    assert bench.returncode == 1 and "Traceback" not in out, out
    assert "stopped before the timed phase" in out, out
