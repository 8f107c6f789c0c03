"""`moe-tui compare` and `moe-tui export` as subprocesses over a temporary store (MOE_TUI_HOME)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compare_data import golden_runs

from moe_tui.store.db import Store

pytestmark = pytest.mark.integration  # starts real processes


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MOE_TUI_HOME=str(home))
    for name in ("COLUMNS", "LINES"):  # a pilot test in the same worker may have set them: the text width is tested on its own
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A store holding the golden scenario: imported runs, plus one run through create/finish."""
    home = tmp_path_factory.mktemp("home")
    from moe_tui import paths

    old = os.environ.get("MOE_TUI_HOME")
    os.environ["MOE_TUI_HOME"] = str(home)
    try:
        with Store(paths.store_path()) as store:
            a, b = golden_runs()
            for r in a + b:
                # the sweep's server start, as a record names it (moe-tui import --server-start)
                named = {**r.provenance, "server_start": f"start-{r.server_start_id}"} if r.server_start_id else r.provenance
                r = dataclasses.replace(r, provenance=named)
                if r.id == 2:  # one run the way the controller records it
                    rid = store.create_run(profile_name=r.profile_name, spec_json=json.dumps(r.spec),
                                           fingerprint=r.fingerprint, client=r.client, profile=r.profile,
                                           provenance=r.provenance)
                    store.finish_run(rid, status=r.status, summary=r.summary, flags=r.flags, selfcheck=r.selfcheck)
                    continue
                store.import_run(profile_name=r.profile_name, spec_json=json.dumps(r.spec), fingerprint=r.fingerprint,
                                 client=r.client, summary=r.summary, provenance=r.provenance, status=r.status,
                                 flags=r.flags, profile=r.profile, started_at=r.started_at, finished_at=r.finished_at)
    finally:
        if old is None:
            os.environ.pop("MOE_TUI_HOME", None)
        else:
            os.environ["MOE_TUI_HOME"] = old
    return home


def test_compare_text_table(home):
    res = _cli(home, "compare", "glm5-cutlass", "glm5-cutedsl")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("glm5-cutlass (baseline) vs glm5-cutedsl (candidate)")
    assert "different spec: output_len: 1024 vs 512" in out and "no run: glm5-cutedsl at concurrency 256" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("10 ") and "Output tok/s" in ln]
    assert len(lines) == 1 and "+67.0%" in lines[0] and "better" in lines[0]
    header = next(ln for ln in out.splitlines() if ln.startswith("conc"))
    assert header.index("delta") == lines[0].index("+67.0%")  # aligned columns


def test_compare_csv_to_file_and_fingerprint(home, tmp_path):
    target = tmp_path / "grid.csv"
    res = _cli(home, "compare", "glm5-cutlass", "glm5-cutedsl", "--format", "csv", "-o", str(target))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(target)
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert len(rows) == 6 * 6
    fp = next(r["baseline_fingerprint"] for r in rows if r["concurrency"] == "10")
    res = _cli(home, "compare", "glm5-cutlass", "glm5-cutedsl", "--format", "csv", "--fingerprint", fp[:8])
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert {r["concurrency"] for r in rows} == {"10"}


def test_compare_markdown(home):
    res = _cli(home, "compare", "glm5-cutlass", "glm5-cutedsl", "--format", "markdown")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# moe-tui comparison: glm5-cutlass vs glm5-cutedsl")
    assert "## Provenance" in res.stdout and "![" not in res.stdout  # no plot without export


def test_unknown_profile_is_named_with_the_known_ones(home):
    res = _cli(home, "compare", "glm5-cutlass", "glm5-cutedls")
    assert res.returncode == 4 and res.stdout == ""  # not found (commands.common)
    assert "'glm5-cutedls' (did you mean 'glm5-cutedsl'?)" in res.stderr
    assert "profiles with runs: glm5-cutedsl, glm5-cutlass" in res.stderr


def test_export_writes_four_files_and_prints_them(home, tmp_path):
    out_dir = tmp_path / "exports"
    res = _cli(home, "export", "glm5-cutlass", "glm5-cutedsl", "--dir", str(out_dir))
    assert res.returncode == 0, res.stderr
    printed = [Path(p) for p in res.stdout.split()]
    # The four, then the roofline and gate tables when the grid carries them (every file written is printed).
    assert [p.suffix for p in printed[:4]] == [".md", ".csv", ".png", ".svg"]
    assert [p.name.rsplit("-", 1)[-1] for p in printed[4:]] in ([], ["roofline.csv", "gate.csv"])
    assert sorted(printed) == sorted(out_dir.iterdir())
    assert all(p.parent == out_dir and p.is_file() and p.stat().st_size > 0 for p in printed)
    md = printed[0].read_text()
    assert f"]({printed[2].name})" in md and "Generated by moe-tui" in md


def test_export_default_dir_is_under_moe_tui_home(home):
    res = _cli(home, "export", "glm5-cutlass", "glm5-cutedsl")
    assert res.returncode == 0, res.stderr
    assert all(Path(p).is_relative_to(home) for p in res.stdout.split())
