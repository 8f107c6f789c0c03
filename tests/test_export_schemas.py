"""The published JSON contract: docs/schemas/<name>.schema.json is what `moe_tui.export.records` says
(generated with msgspec from the TypedDicts that `moe_tui.export.schemas` indexes), and every JSON export moe-tui writes from a real store
validates against its schema (jsonschema, Draft 2020-12).

To regenerate the schemas after an intended change of a record: `MOE_TUI_REGEN_SCHEMAS=1 pytest
tests/test_export_schemas.py -k published`, then read the diff before committing it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from moe_tui.export.schemas import EXPORTS
from tests.support.schemas import SCHEMAS, published, validate_export

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def generated(name: str) -> dict[str, Any]:
    """The schema of export `name` from its record type: closed objects (a key the record does not
    name is an error), except the payloads the records call free-form."""
    what, record = EXPORTS[name]
    schema = msgspec.json.schema(record)
    for definition in schema.get("$defs", {}).values():
        if definition.get("type") == "object" and "properties" in definition:
            definition["additionalProperties"] = False
    return {"$schema": DIALECT, "$id": f"https://moe-tui.invalid/schemas/{name}.schema.json",
            "title": name, "description": f"What `{what}` writes (moe_tui/export/records.py, grid_records.py).", **schema}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_published_schema_is_the_records(name):
    schema = generated(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    if os.environ.get("MOE_TUI_REGEN_SCHEMAS"):
        SCHEMAS.mkdir(parents=True, exist_ok=True)
        (SCHEMAS / f"{name}.schema.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    assert published(name) == schema, f"docs/schemas/{name}.schema.json differs from moe_tui/export/records.py"


def test_every_schema_file_is_an_export():
    assert sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")) == sorted(EXPORTS)


def test_a_misspelt_or_missing_field_fails_its_schema():
    """The schemas are closed: what the unit tests below rely on to catch a renamed field."""
    schema = published("queue-add")
    good = {"dry_run": True, "campaign_id": None, "name": "x", "item_ids": [], "planned": 2, "profiles_dir": None}
    jsonschema.validate(good, schema)
    for bad in ({**good, "planed": 2}, {k: v for k, v in good.items() if k != "name"}, {**good, "planned": "2"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_an_explanation_of_real_traces_fits_its_schema():
    """`explain --format json`'s body, from two real torch profiler traces (tests/data): the store's
    part (roofline, expert load, run ids) is checked on a real store by tests/test_explain_e2e.py."""
    from moe_tui.explain import compare_sides, read_rank, side_breakdown
    from moe_tui.explain.render import to_json

    data = Path(__file__).parent / "data"
    a = side_breakdown("A", [read_rank(data / "real-A-TP-0.trace.json.gz")])
    b = side_breakdown("B", [read_rank(data / "real-B-TP-0.trace.json.gz")])
    text = to_json(compare_sides(a, b), {"extras": ["a line"], "simulated": False})
    _valid("explain", json.loads(text))


# -- every export, written from a real store ------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real small store: two emulator profiles, one cell (concurrency 2) measured once a side by
    the runner, then investigated: with one run a side and no other cell to lend a spread, the planner
    proposes its pilot (3 a side: 2 more each), whatever the numbers (a 2-a-side start could already
    be enough for the planner on a loaded box, and then nothing was proposed: a CI failure)."""
    from runner_support import Env

    env = Env(tmp_path_factory.mktemp("exports"))
    try:
        a = env.profile("sim-a", "flashinfer_cutlass")
        b = env.profile("sim-b", "flashinfer_cutedsl")
        added = env.run("queue", "add", "--profiles", f"{a},{b}", "--concurrency", "2", "--repeats", "1",
                        "--profiles-dir", str(env.profiles), "--no-control", "--num-prompts", "4",
                        "--input-len", "32", "--output-len", "8", "--no-warmup-pass")
        assert added.returncode == 0, added.stdout
        done = env.run("run", "--until-empty", "--profiles-dir", str(env.profiles), timeout=150)
        assert done.returncode == 0, done.stdout
        plan = _json(env, "investigate", a, b, "--concurrency", "2", "--only", "repeats", "--cap", "3", "--yes",
                     "--profiles-dir", str(env.profiles), "--format", "json")
        _valid("investigate-plan", plan)
        assert [len(p["items"]) for p in plan["proposals"]] == [4], plan["notes"]
        done = env.run("run", "--until-empty", "--profiles-dir", str(env.profiles), timeout=150)
        assert done.returncode == 0, done.stdout
        yield env
    finally:
        env.cleanup()


def _stdout(env, *args: str, check: bool = True) -> str:
    """`moe-tui ARGS`'s stdout alone (stderr carries plans and notes)."""
    from runner_support import scaled

    out = subprocess.run(env.argv(*args), env=env.env, capture_output=True, text=True, timeout=scaled(120),
                         start_new_session=True)
    assert out.returncode == 0 or not check, out.stdout + out.stderr
    return out.stdout


def _json(env, *args: str) -> Any:
    return json.loads(_stdout(env, *args))


_valid = validate_export


@pytest.mark.integration
@pytest.mark.slow  # two short campaigns on the emulator (~20 s on an idle 2-core box), then 16 commands
def test_every_export_from_a_real_store_fits_its_schema(store, tmp_path):
    env = store
    grid = _json(env, "compare", "sim-a", "sim-b", "--format", "json")
    _valid("compare", grid)
    assert {c["concurrency"] for c in grid["cells"]} == {2}
    _valid("export", _json(env, "export", "sim-a", "sim-b", "-o", str(tmp_path / "x"), "--format", "json"))
    listed = _json(env, "queue", "list", "--format", "json")
    _valid("queue-list", listed)
    assert len(listed["items"]) == 6
    _valid("queue-add", _json(env, "queue", "add", "--profiles", "sim-a,sim-b", "--concurrency", "2",
                              "--profiles-dir", str(env.profiles), "--dry-run", "--format", "json"))
    plan = _json(env, "investigate", "sim-a", "sim-b", "--concurrency", "2", "--dry-run", "--format", "json",
                 "--profiles-dir", str(env.profiles))
    _valid("investigate-plan", plan)
    reports = _json(env, "investigate", "sim-a", "sim-b", "--concurrency", "2", "--report", "--format", "json",
                    "--profiles-dir", str(env.profiles))
    assert len(reports) == 1 and reports[0]["state"] == "complete"
    for report in reports:
        _valid("investigate-report", report)
    _valid("roofline", _json(env, "roofline", "sim-a", "--profiles-dir", str(env.profiles), "--format", "json"))
    # doctor --box on a box without GPUs: failing checks (exit 1), one object all the same.
    _valid("doctor", json.loads(_stdout(env, "doctor", "--box", "--profiles-dir", str(env.profiles),
                                        "--format", "json", check=False)))
    _valid("profiles-check", _json(env, "profiles", "check", str(env.profiles), "--format", "json"))
    _valid("profiles-show", _json(env, "profiles", "show", "sim-a", "--profiles-dir", str(env.profiles),
                                  "--format", "json"))
    servers = _json(env, "server", "status", "--format", "json")
    assert len(servers) == 2
    for row in servers:
        _valid("server-status", row)
    _valid("store-usage", _json(env, "store", "usage", "--format", "json"))
    _stdout(env, "run", "--detach", "--stay", "--profiles-dir", str(env.profiles))
    try:
        status = _json(env, "run", "--status", "--format", "json")
    finally:
        _stdout(env, "run", "--stop")
    _valid("run-status", status)
    assert status["queue"]["counts"]["done"] == 6
    # Without a GPU the snapshot says why (and the command exits 1); it is one object all the same.
    _valid("gpus", json.loads(_stdout(env, "gpus", "--format", "json", check=False)))
    added = _json(env, "queue", "add", "--profiles", "sim-a", "--concurrency", "4", "--profiles-dir",
                  str(env.profiles), "--format", "json")  # last: it adds to the queue listed above
    _valid("queue-add", added)
    assert len(added["items"]) == 1


@pytest.mark.integration
def test_bench_event_lines_fit_their_schemas(tmp_path):
    from moe_tui.sim.launch import start_sim

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"num_prompts": 3, "input_len": 16, "output_len": 4, "max_concurrency": 2}))
    from runner_support import Env

    env = Env(tmp_path)
    with start_sim(["--sim-zero-delay"]) as sim:
        out = _stdout(env, "bench", "--events", "jsonl", "--spec-file", str(spec), "--base-url", sim.base_url,
                      "--vocab-size", "1000")
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines and lines[-1]["type"] == "BenchResult" and lines[-1]["status"] == "complete", out[-2000:]
    assert len(lines[-1]["requests"]) == 3
    _valid("bench-result", lines[-1])
    assert any(line["type"] == "BenchProgress" for line in lines[:-1])
    for line in lines[:-1]:
        _valid("bench-progress", line)
    with start_sim(["--sim-zero-delay"]) as sim:
        _stdout(env, "bench", "--spec-file", str(spec), "--base-url", sim.base_url, "--vocab-size", "1000",
                "--output-file", str(tmp_path / "records.jsonl"))
    (record,) = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert record["completed"] == 3 and record["status"] == "complete"
    _valid("bench-record", record)
