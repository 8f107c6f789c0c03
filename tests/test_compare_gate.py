"""Issue 20's attacks on the verdict, through the real CLI (`moe-tui import`, `queue add/cancel/clear`,
`compare --format json`): the control gates, a server start is the unit, stopping and time are seen,
missing evidence is not agreement, and no delta is shown without a verdict.

Runs come in as a user's bench_serving records (`moe-tui import`), or, where a run's time, server start
and queue item matter, recorded through the store the way the runner records them (create_run with the
start id, finish_run closing the queue item).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_compare_attacks import ASSUME, _cli, cell, grid_json, record, two_profiles, write

from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store


def _import(home: Path, path: Path, *extra: str) -> None:
    res = _cli(home, "import", str(path), "--assume", ASSUME, *extra)
    assert res.returncode == 0, res.stderr


def _side(tmp: Path, name: str, backend: str, series: dict[int, list[float]], pid0: int, **kw) -> Path:
    """One file of records: per concurrency, one record per server start (pid0, pid0+1, ...)."""
    recs = [record(conc, v, backend, pid=pid0 + i, **kw) for conc, vals in series.items() for i, v in enumerate(vals)]
    return write(tmp / f"{name}.jsonl", recs)


@pytest.mark.integration
def test_an_absent_or_inconclusive_control_withholds_the_verdict(tmp_path):
    """A 5% slower machine said "worse -5%" at concurrency 64 when the control was absent or had 2 runs a side."""
    home = tmp_path / "h"
    _import(home, _side(tmp_path, "a", "a", {2: [19.3, 19.2], 64: [200.0, 203.0, 198.0]}, 100))
    _import(home, _side(tmp_path, "b", "b", {2: [18.4, 18.3], 64: [190.0, 192.5, 188.0]}, 200))
    grid = grid_json(home, "a", "b")
    assert grid["control"]["state"] == "inconclusive" and "2 vs 2 server starts" in grid["control"]["text"]
    c = cell(grid, 64)
    assert c["verdict"] == "uncontrolled" and c["delta_pct"] is None and c["ci_pct"] is None
    # The environment is 5% slower on the candidate's starts: against the control on those same starts the
    # cell is -0.4%, so the raw -5% is the environment, not the backend.
    assert "worse withheld: the control moved with it" in c["reasons"][0]
    assert c["baseline_mean"] == 200.333333333333333 or abs(c["baseline_mean"] - 200.3333) < 1e-3  # means stay
    shown = cell(grid_json(home, "a", "b", "--accept-uncontrolled"), 64)
    assert shown["verdict"] == "worse" and shown["uncontrolled"].startswith("the control moved with it")
    text = _cli(home, "compare", "a", "b", "--accept-uncontrolled").stdout
    assert "worse (uncontrolled)" in text
    # The exports label it too (Markdown and CSV), and without the flag carry no delta.
    out = _cli(home, "export", "a", "b", "--accept-uncontrolled", "--dir", str(tmp_path / "x"))
    assert out.returncode == 0, out.stderr
    md, csv_path = (Path(p) for p in out.stdout.split()[:2])
    assert "**worse** (uncontrolled)" in md.read_text() and "worse (uncontrolled)" in csv_path.read_text()
    out = _cli(home, "export", "a", "b", "--dir", str(tmp_path / "y"))
    row = next(r for r in csv_path.__class__(out.stdout.split()[1]).read_text().splitlines()
               if r.startswith("64,output_throughput"))
    assert ",uncontrolled," in row and ",,," in row  # no delta, no interval


@pytest.mark.integration
def test_a_quiet_control_is_judged_with_its_own_noise_and_then_gates_open(tmp_path):
    """The control cell is much quieter than the grid: with the grid's pooled noise it was inconclusive."""
    home = tmp_path / "h"
    ctl_a, ctl_b = [19.30, 19.31, 19.29, 19.30], [19.29, 19.30, 19.31, 19.30]
    _import(home, _side(tmp_path, "a", "a", {2: ctl_a, 64: [200.0, 212.0, 190.0, 204.0]}, 100))
    _import(home, _side(tmp_path, "b", "b", {2: ctl_b, 64: [150.0, 159.0, 143.0, 152.0]}, 200))
    grid = grid_json(home, "a", "b")
    assert grid["control"]["state"] == "agrees" and "from its own noise" in grid["control"]["text"]
    c = cell(grid, 64)
    assert c["verdict"] == "worse" and c["uncontrolled"] is None and c["delta_pct"] < -20


@pytest.mark.integration
def test_a_slower_environment_is_caught_by_the_control(tmp_path):
    home = tmp_path / "h"
    _import(home, _side(tmp_path, "a", "a", {2: [19.30, 19.35, 19.25], 64: [200.0, 201.0, 199.0]}, 100))
    _import(home, _side(tmp_path, "b", "b", {2: [18.33, 18.40, 18.30], 64: [190.0, 191.0, 189.0]}, 200))
    grid = grid_json(home, "a", "b")
    assert grid["control"]["state"] == "differs"
    c = cell(grid, 64)
    assert c["verdict"] == "uncontrolled" and "the control moved with it" in c["reasons"][0] and c["delta_pct"] is None
    assert abs(c["control_relative_pct"]) < 1.0 and c["control_starts"] == [3, 3]


@pytest.mark.integration
def test_a_server_start_is_the_unit_and_imports_need_one(tmp_path):
    home = tmp_path / "h"
    ctl = {2: [19.30, 19.31, 19.29, 19.30]}
    one_start = [record(64, v, "a", pid=7) for v in (200.0, 201.0, 199.0)]  # three runs, one server start
    write(tmp_path / "a.jsonl", [record(2, v, "a", pid=100 + i) for i, v in enumerate(ctl[2])] + one_start)
    _import(home, tmp_path / "a.jsonl")
    _import(home, _side(tmp_path, "b", "b", {2: ctl[2], 64: [150.0, 151.0, 149.0]}, 200))
    c = cell(grid_json(home, "a", "b"), 64)
    assert c["verdict"] == "noise_unknown" and "3 run(s) from 1 server start(s)" in c["reasons"][0]
    assert c["starts_baseline"] == 1 and c["delta_pct"] is None
    # 3 + 1: four runs on two starts are two samples, not four.
    three_one = [record(64, v, "c", pid=p) for v, p in ((200.0, 7), (201.0, 7), (199.0, 7), (204.0, 8))]
    write(tmp_path / "c.jsonl", [record(2, v, "c", pid=300 + i) for i, v in enumerate(ctl[2])] + three_one)
    _import(home, tmp_path / "c.jsonl")
    c = cell(grid_json(home, "c", "b", "--accept-uncontrolled"), 64)
    assert c["n_baseline"] == 4 and c["starts_baseline"] == 2
    # No pid in server_info: the sample size is unknown.
    write(tmp_path / "d.jsonl", [record(64, v, "d") for v in (200.0, 201.0, 199.0)])
    _import(home, tmp_path / "d.jsonl")
    c = cell(grid_json(home, "d", "b"), 64)
    assert c["verdict"] == "unverified" and "no server start identity" in " ".join(c["reasons"])


@pytest.mark.integration
def test_output_length_difference_and_thin_percentiles_withhold(tmp_path):
    home = tmp_path / "h"
    assume = "seed=1,ignore_eos=false,warmup_requests=1,temperature=0,flush_cache=false"
    short = [dict(record(64, v, "b", pid=200 + i), total_output_tokens=45875) for i, v in enumerate((140.0, 141.0, 139.0))]
    write(tmp_path / "a.jsonl", [record(64, v, "a", pid=100 + i) for i, v in enumerate((200.0, 201.0, 199.0))])
    write(tmp_path / "b.jsonl", short)
    for name in ("a", "b"):
        assert _cli(home, "import", str(tmp_path / f"{name}.jsonl"), "--assume", assume).returncode == 0
    grid = grid_json(home, "a", "b", "--accept-uncontrolled")
    c = cell(grid, 64)
    assert c["verdict"] == "output_differs" and c["delta_pct"] is None
    assert "output tokens per request differ: a 1024.0 vs b 716.8 (-30.0%" in c["reasons"][0]
    # P99 from 8 requests a run: the cell says the rule.
    thin = [dict(record(64, v, "p", pid=300 + i), completed=8, p99_ttft_ms=900.0 + i, total_output_tokens=8192)
            for i, v in enumerate((200.0, 201.0, 199.0))]
    thin_b = [dict(record(64, v, "q", pid=400 + i), completed=8, p99_ttft_ms=700.0 + i, total_output_tokens=8192)
              for i, v in enumerate((150.0, 151.0, 149.0))]
    for name, recs in (("p", thin), ("q", thin_b)):
        _import(home, write(tmp_path / f"{name}.jsonl", recs))
    c = cell(grid_json(home, "p", "q", "--accept-uncontrolled"), 64, "p99_ttft_ms")
    assert c["verdict"] == "unreliable" and "at least 100 completed requests a run" in c["reasons"][0]


@pytest.mark.integration
def test_the_same_backend_on_both_sides_is_refused(tmp_path):
    home = tmp_path / "h"
    _import(home, _side(tmp_path, "a", "x", {64: [200.0, 201.0, 199.0]}, 100), "--profile", "one")
    _import(home, _side(tmp_path, "b", "x", {64: [150.0, 151.0, 149.0]}, 200), "--profile", "two")
    c = cell(grid_json(home, "one", "two", "--accept-uncontrolled"), 64)
    assert c["verdict"] == "refused" and "the compared setting did not change" in c["reasons"][0]


def _record_run(store: Store, profile: str, backend: str, spec: BenchmarkSpec, tput: float, start: int,
                when: float, item: int | None = None) -> None:
    """What the runner records for a timed run: the server start, times, and the closed queue item."""
    prov = {"server": {"resolved_backend": backend}}
    rid = store.create_run(profile_name=profile, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                           client="moe-tui", provenance=prov, server_start_id=start, queue_item_id=item)
    store.finish_run(rid, status="complete", summary={"output_throughput": tput, "completed": 128,
                                                      "total_output_tokens": 128 * spec.output_len},
                     finished_at=when, close_item=(item, "done", "") if item else None)


def _starts(store: Store, name: str) -> list[int]:
    return [store.record_server_start(profile_name=name, profile={}, argv=[], env={}, log_path="", pid=None)
            for _ in range(3)]


@pytest.mark.integration
def test_sides_apart_in_time_are_said_and_withheld(tmp_path):
    """Baseline runs five days before the candidate's gave byte-identical output to interleaved ones."""
    home = tmp_path / "h"
    spec64, spec2 = BenchmarkSpec(max_concurrency=64), BenchmarkSpec(max_concurrency=2)
    day = 86400.0
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        sa, sb = _starts(store, "a"), _starts(store, "b")
        for i in range(3):
            _record_run(store, "a", "ka", spec64, 200.0 + i, sa[i], 1e9 + i * 600)
            _record_run(store, "b", "kb", spec64, 150.0 + i, sb[i], 1e9 + 5 * day + i * 600)
            _record_run(store, "a", "ka", spec2, 19.3 + i * 0.01, sa[i], 1e9 + i * 600 + 60)
            _record_run(store, "b", "kb", spec2, 19.3 + i * 0.01, sb[i], 1e9 + 5 * day + i * 600 + 60)
    grid = grid_json(home, "a", "b")
    assert grid["control"]["state"] == "agrees" and grid["control"]["overlapping"] is False
    c = cell(grid, 64)
    assert c["verdict"] == "uncontrolled" and c["delta_pct"] is None
    assert "do not overlap in time" in c["reasons"][0] and "5.0 days apart" in c["reasons"][0]


@pytest.mark.integration
def test_a_plan_cut_short_is_said_until_re_planned(tmp_path):
    home = tmp_path / "h"
    profiles = two_profiles(tmp_path)
    res = _cli(home, "queue", "add", "--profiles", "a,b", "--concurrency", "64", "--repeats", "3",
               "--profiles-dir", str(profiles), "--no-control")
    assert res.returncode == 0, res.stderr
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        items = store.query("SELECT id, profile_name, spec_json FROM queue_items ORDER BY position, id")
        sa, sb = _starts(store, "a"), _starts(store, "b")
        starts = {"a": iter(sa), "b": iter(sb)}
        for n, it in enumerate(items[:4]):  # two repeats a side done, interleaved
            spec = BenchmarkSpec.from_dict(json.loads(it["spec_json"]))
            backend = "flashinfer_cutlass" if it["profile_name"] == "a" else "flashinfer_cutedsl"
            value = (200.0 if it["profile_name"] == "a" else 150.0) + n % 2
            _record_run(store, it["profile_name"], backend, spec, value, next(starts[it["profile_name"]]),
                        1e9 + n * 600, item=it["id"])
    assert _cli(home, "queue", "cancel", str(items[4]["id"])).returncode == 0
    c = cell(grid_json(home, "a", "b", "--accept-uncontrolled"), 64)
    assert c["verdict"] == "interim" and c["delta_pct"] is None  # b's third repeat is still pending
    assert _cli(home, "queue", "clear").returncode == 0  # the rest of the plan is gone
    c = cell(grid_json(home, "a", "b", "--accept-uncontrolled"), 64)
    assert c["verdict"] == "cut_short" and c["delta_pct"] is None
    assert "2 run(s) done of 3 planned" in " ".join(c["reasons"])
    # A re-plan of the cell (a new campaign) replaces the cut plan: interim again until it is done.
    res = _cli(home, "queue", "add", "--profiles", "a,b", "--concurrency", "64", "--repeats", "1",
               "--profiles-dir", str(profiles), "--no-control")
    assert res.returncode == 0, res.stderr
    assert cell(grid_json(home, "a", "b", "--accept-uncontrolled"), 64)["verdict"] == "interim"


@pytest.mark.integration
def test_core_stays_free_of_textual():
    code = "import sys, moe_tui.compare.evidence, moe_tui.compare.stats; assert 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.integration
def test_a_reimport_with_a_changed_tag_is_the_same_run(tmp_path):
    """Re-importing the same records with another tag doubled n and turned "within noise" into "worse"."""
    home = tmp_path / "h"
    recs = [record(64, v, "a", pid=100 + i) | {"tag": "first"} for i, v in enumerate((200.0, 201.0))]
    _import(home, write(tmp_path / "a.jsonl", recs))
    res = _cli(home, "import", str(write(tmp_path / "a2.jsonl", [r | {"tag": "again"} for r in recs])),
               "--assume", ASSUME)
    assert res.returncode == 0 and "nothing new imported" in res.stdout, res.stdout
    with Store(home / "data" / "moe-tui.sqlite3") as store:
        assert len(store.runs()) == 2


def test_the_prompt_vocabulary_is_in_the_fingerprint_and_old_fingerprints_hold(tmp_path):
    """A different --vocab-size (other prompt tokens) kept the same fingerprint."""
    from moe_tui.cli import build_parser
    from moe_tui.commands.bench import spec_from_args

    def spec_of(*flags: str) -> BenchmarkSpec:
        return spec_from_args(build_parser().parse_args(["bench", "--base-url", "http://127.0.0.1:1", *flags]))

    plain, other = spec_of(), spec_of("--vocab-size", "32000")
    assert plain.fingerprint != other.fingerprint and other.vocab_size == 32000
    assert [d.field for d in plain.diff(other)] == ["vocab_size"]
    assert spec_of("--tokenizer", "/m/tok").fingerprint != plain.fingerprint
    # A spec stored before these fields existed (schema 1 without them) loads to the same fingerprint.
    stored = {k: v for k, v in BenchmarkSpec().canonical_dict().items()}
    assert "vocab_size" not in stored and BenchmarkSpec.from_dict(stored).fingerprint == BenchmarkSpec().fingerprint


@pytest.mark.integration
def test_the_plan_carries_the_control_in_every_sweep(tmp_path):
    home = tmp_path / "h"
    profiles = two_profiles(tmp_path)
    args = ["queue", "add", "--profiles", "a,b", "--concurrency", "1,64", "--repeats", "3", "--profiles-dir",
            str(profiles), "--dry-run"]
    first = _cli(home, *args)
    assert first.returncode == 0, first.stderr
    assert "concurrency 2 runs in every sweep" in first.stdout and "no control-only starts" in first.stdout
    # concurrency 2 added beside 1 (never "the lowest of the sweep"), once per sweep: 3 repeats a side
    assert first.stdout.count("conc=2 ") == 2 * 3 and "conc 2,1,64" in first.stdout
    assert "abba 6 (chosen)" in first.stdout
