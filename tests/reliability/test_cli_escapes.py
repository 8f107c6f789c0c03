"""Nothing stored or imported reaches the terminal as an escape code, in the CLI as in the TUI
(issue 36): a profile name that retitles the terminal and clears the screen, restored from an
archive, and a queue item's error carrying the same, print as inert text through `store usage`,
`import`, `queue list` and `compare`: the ESC and BEL bytes never reach stdout or stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration  # `moe-tui` commands run as subprocesses

# Retitle the terminal (OSC 0 ... BEL), clear the screen (CSI 2J), a C1 CSI (0x9b) moving the cursor.
EVIL = "evil\x1b]0;pwned\x07\x1b[2J\x9b5Aname"


def _cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env.env, capture_output=True,
                          text=True, timeout=60)


def _harmless(out: subprocess.CompletedProcess) -> str:
    text = out.stdout + out.stderr
    assert not any(c in text for c in "\x1b\x07\x9b"), repr(text)
    return text


def test_escape_codes_from_a_restored_archive_print_as_text(env, tmp_path):
    """An archive whose profile name and item error carry terminal escapes: import, store usage, queue list and compare print them inert."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store
    from moe_tui.store.queue import CampaignPlan, RunQueue

    spec = BenchmarkSpec.from_dict({"num_prompts": 4, "input_len": 32, "output_len": 8})
    with Store(env.db) as store:
        store.import_run(profile_name="plain", spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                         client="moe-tui", summary={"output_throughput": 100.0}, provenance={})
        RunQueue(store).add_campaign(CampaignPlan(profiles=("plain",), concurrencies=(1,), base_spec=spec,
                                                  warmup_pass=False))
    archive = tmp_path / "evil.jsonl"
    out = _cli(env, "store", "archive", str(archive), "--profile", "plain", "--prune")
    assert out.returncode == 0, out.stdout + out.stderr
    header, line = archive.read_text().splitlines()
    record = json.loads(line)
    record["run"]["profile_name"] = EVIL
    record["run"]["error"] = EVIL
    archive.write_text(header + "\n" + json.dumps(record) + "\n")
    with Store(env.db) as store, store.transaction() as tx:  # an item error as an edited store holds it
        tx.execute("UPDATE queue_items SET error = ?", (EVIL,))
    restored = _cli(env, "import", str(archive))
    assert restored.returncode == 0, _harmless(restored)
    _harmless(restored)
    usage = _cli(env, "store", "usage")
    assert usage.returncode == 0 and "evil" in _harmless(usage) and "name" in usage.stdout, usage.stdout
    listed = _cli(env, "queue", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    _harmless(listed)
    compare = _cli(env, "compare", EVIL, "plain")
    _harmless(compare)
