"""Queueing an investigation: the controller's `add_investigation` op (what the TUI and the
runner socket call) stores one campaign whose items carry the cell's spec, the warmup and
fresh-start choices and their roles; a bad plan is refused whole. The store's schema upgrade keeps
`fresh_start` per queue item."""

from __future__ import annotations

import asyncio
import json

import pytest

from moe_tui import __version__, judgement
from moe_tui.investigate.model import CellEvidence, GridEvidence, SideEvidence
from moe_tui.investigate.planner import plan_investigation
from moe_tui.investigate.store import diagnostic_run_ids, investigations, under_investigation
from moe_tui.run.controller import Controller, ControllerError
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import SCHEMA_VERSION, Store
from moe_tui.store.queue import RunQueue


def evidence(a: str, b: str) -> GridEvidence:
    # As a recorded run's spec: the client's version filled in (the queue stores specs that way).
    spec = BenchmarkSpec(input_len=128, output_len=32, num_prompts=64, max_concurrency=64,
                         client_version=__version__).canonical_dict()

    def side(p, mean):
        return SideEvidence(p, n=1, mean=mean, run_ids=(1,), server_start_ids=(5,), warmup_pass=(True,),
                            run_seconds=12.0, warmup_seconds=3.0)

    cell = CellEvidence(64, "output_throughput", True, judgement.NOISE_UNKNOWN, side(a, 218.7), side(b, 249.2),
                        13.9, None, spec=spec, fingerprint=BenchmarkSpec.from_dict(spec).fingerprint)
    return GridEvidence(a, b, (64,), judgement.CONTROL_ABSENT, None, (cell,), {a: 20.0, b: 25.0},
                        jit_sides=("candidate",))


@pytest.fixture
def controller(env, tmp_path):
    env.profile("sim-a", "flashinfer_cutlass")
    env.profile("sim-b", "flashinfer_cutedsl")
    store = Store(tmp_path / "s.sqlite3")
    yield Controller(store, env.profiles, data_dir=env.data_dir, telemetry=False, use_lock=False)
    store.close()


def test_op_queues_one_campaign_with_roles_and_options(controller):
    plan = plan_investigation(evidence("sim-a", "sim-b"), 64)
    wire = json.loads(json.dumps(plan.to_dict()))  # as it crosses the runner socket
    result = asyncio.run(controller.call("add_investigation", plan=wire))
    items = RunQueue(controller.store).items(campaign_id=result["campaign_id"])
    assert [i.id for i in items] == result["item_ids"] and len(items) == len(plan.items)
    cold = [i for i in items if i.fresh_start and not i.warmup]
    assert cold and all(i.profile_name == "sim-b" for i in cold)
    # every fresh start with a warmup pass measures the control first (concurrency 2), then the cell
    assert all(i.spec.max_concurrency == 2 for i in items if i.fresh_start and i.warmup)
    cell_fp = evidence("sim-a", "sim-b").cells[0].fingerprint
    assert all(i.fingerprint == cell_fp for i in items if i.spec.max_concurrency == 64)

    (record,) = investigations(controller.store, "sim-a", "sim-b")
    assert record.name == "investigate:sim-a-vs-sim-b:c=64:output_throughput"
    assert record.definition["profiles_dir"] == str(controller.profiles_dir.resolve())
    assert [r["role"] for r in record.definition["item_roles"]] == [i.role for i in plan.items]
    assert record.state == "under investigation"
    assert set(under_investigation(controller.store, "sim-a", "sim-b")) == {(64, "output_throughput")}
    assert diagnostic_run_ids(controller.store) == set()  # no cold run has run yet


def test_op_refuses_an_unknown_profile_and_stores_nothing(controller):
    plan = plan_investigation(evidence("sim-a", "nope"), 64)
    with pytest.raises(ControllerError, match="nope"):
        asyncio.run(controller.call("add_investigation", plan=plan.to_dict()))
    assert RunQueue(controller.store).items() == [] and investigations(controller.store) == []


def test_a_bad_spec_in_the_plan_is_refused_whole(controller):
    wire = plan_investigation(evidence("sim-a", "sim-b"), 64).to_dict()
    wire["proposals"][-1]["items"][-1]["spec"]["output_len"] = 0
    with pytest.raises(Exception, match="output_len"):
        asyncio.run(controller.call("add_investigation", plan=wire))
    assert RunQueue(controller.store).items() == []


def test_schema_upgrade_adds_fresh_start_to_an_older_store(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite3"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE queue_items DROP COLUMN fresh_start")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with Store(path) as store:
        item = RunQueue(store).add_item("x", BenchmarkSpec())
        assert item.fresh_start is False
        assert store.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
