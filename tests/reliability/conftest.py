"""Fixtures for the reliability suite (bad input, faults, security).

- `env`: a private MOE_TUI_HOME (also set in this process), a profiles folder, `moe-tui`
  subprocesses and emulators that are always killed at the end (`tests/runner_support.Env`).
- `seeded_store`: that home's store holding a campaign, an imported run and a server start, so
  "nothing already stored changes" is checked against real rows, not an empty file.
- `store_digest(path)`: per table, the row count and a SHA-256 over every row in rowid order;
  equal digests before/after a command mean it changed nothing in the store.
- `garbage_server(mode)`: a tiny real HTTP server on loopback that looks healthy but answers
  garbage (`info-not-json`, `sse-garbage`) or well-formed streams whose token counts lie
  (`count-x2`, `count-neg`, `count-huge`, `count-short`), or that first logs one 200 MB line
  without an end (`endless-line`); it can also be launched as a profile's `python`.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runner_support import Env, free_port, runner_env, scaled  # noqa: E402, F401  (runner_env: the fixture env)


def digest(db: Path) -> dict[str, tuple[int, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {}
        for table in tables:
            h = hashlib.sha256()
            rows = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
            for row in rows:
                h.update(repr(row).encode())
            out[table] = (len(rows), h.hexdigest())
        out["#user_version"] = (conn.execute("PRAGMA user_version").fetchone()[0], "")
        return out
    finally:
        conn.close()


@pytest.fixture
def store_digest():
    return digest


@pytest.fixture
def seeded_store(env):
    """The env's store with rows in every table that matters; returns its path."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store
    from moe_tui.store.queue import CampaignPlan, RunQueue

    spec = BenchmarkSpec.from_dict({"num_prompts": 4, "input_len": 32, "output_len": 8})
    with Store(env.db) as store:
        RunQueue(store).add_campaign(CampaignPlan(profiles=("seed-a", "seed-b"), concurrencies=(1, 4),
                                                  base_spec=spec, warmup_pass=False))
        store.import_run(profile_name="seed-a", spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                         client="moe-tui", summary={"output_throughput": 123.4}, provenance={"seed": True})
        store.record_server_start(profile_name="seed-a", profile={"name": "seed-a"}, argv=["x"], env={},
                                  log_path="/dev/null", pid=None, state="stopped")
    assert all(n for table, (n, _) in digest(env.db).items()
               if table in ("queue_items", "runs", "server_starts", "campaigns"))
    return env.db


# A server that passes readiness but answers garbage. Standard library only; `--port N` anywhere
# in argv (so it also runs as a profile's `python`, which gets the emulator's flags).
GARBAGE_SERVER = textwrap.dedent('''
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    mode = sys.argv[sys.argv.index("--garbage-mode") + 1] if "--garbage-mode" in sys.argv else "info-not-json"
    port = int(sys.argv[sys.argv.index("--port") + 1])
    INFO = {"moe_runner_backend": "flashinfer_cutlass", "version": "0.5.23", "tp_size": 1}
    MODEL = {"model_path": "garbage", "tokenizer_path": TOKENIZER, "served_model_name": "garbage"}

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a):
            pass
        def _send(self, code, body, ctype="application/json"):
            data = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            path = self.path.split("?")[0]
            if path in ("/health", "/health_generate"):
                return self._send(200, "")
            if path in ("/server_info", "/get_server_info"):
                if mode == "info-not-json":
                    return self._send(200, "<html>502 Bad Gateway</html>", "text/html")
                return self._send(200, json.dumps(INFO))
            if path == "/model_info":
                return self._send(200, json.dumps(MODEL))
            if path == "/v1/models":
                return self._send(200, json.dumps({"data": [{"id": "garbage"}]}))
            return self._send(404, "{}")
        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            if self.path.startswith("/flush_cache"):
                return self._send(200, "")
            if mode.startswith("count-"):
                return self._lying_stream(json.loads(body)["sampling_params"]["max_new_tokens"])
            body = "data: {this is not json\\n\\ndata: \\x00\\x01garbage\\n\\ndata: [DONE]\\n\\n"
            return self._send(200, body, "text/event-stream")

        def _lying_stream(self, asked):
            # A well-formed /generate stream whose completion_tokens lie: count-x2 twice the tokens
            # sent, count-neg -5, count-huge 3e7, count-short stops at half with finish "length".
            sent = asked // 2 if mode == "count-short" else asked
            lines = []
            for i in range(1, sent + 1):
                count = {"count-x2": 2 * i, "count-neg": -5, "count-huge": 3e7}.get(mode, i)
                reason = {"type": "length", "length": asked} if i == sent else None
                meta = {"id": "lie", "completion_tokens": count, "finish_reason": reason}
                lines.append("data: " + json.dumps({"text": "a" * i, "output_ids": [7] * i, "meta_info": meta}))
            lines.append("data: [DONE]")
            return self._send(200, "\\n\\n".join(lines) + "\\n\\n", "text/event-stream")

    print(f"garbage server ({mode}) on 127.0.0.1:{port}", flush=True)
    if mode == "endless-line":  # 200 MB of log in one line that never ends, then serve as usual
        block = b"a" * (1 << 20)
        for _ in range(200):
            sys.stdout.buffer.write(block)
        sys.stdout.buffer.flush()
    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
''')


def write_garbage_server(directory: Path, mode: str) -> Path:
    """An executable script (shebang: this Python) serving garbage in `mode`."""
    path = directory / f"garbage_{mode.replace('-', '_')}.py"
    body = GARBAGE_SERVER.replace('else "info-not-json"', f'else "{mode}"')
    # the emulator's tokenizer, so a runner can size its prompts (a liar must look like a server)
    body = body.replace("TOKENIZER", repr(str(Path(__file__).resolve().parents[2] / "moe_tui" / "sim" / "tokenizer")))
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@pytest.fixture
def garbage_server(tmp_path):
    """Start `garbage_server(mode)` -> base URL; every one started is killed at the end."""
    procs: list[subprocess.Popen] = []

    def start(mode: str) -> str:
        port = free_port()
        script = write_garbage_server(tmp_path, mode)
        proc = subprocess.Popen([str(script), "--port", str(port)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        import urllib.request

        deadline = time.monotonic() + scaled(10)
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"garbage server did not come up: {proc.stdout.read() if proc.poll() is not None else ''}")

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(5)
