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
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # `moe-tui` commands run as subprocesses


def _cli(env, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env.env, capture_output=True, text=True,
                          timeout=timeout)


def _measured_run(env, throughput: float = 100.0) -> int:
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
                         flags=["client_bound", "simulated"], requests=[], finished_at=time.time() - 90 * 86400)
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
