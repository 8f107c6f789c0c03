"""The typed records (moe_tui/records/) make a misspelt field a type error: mypy --strict, run on a
small file that reads and writes records the way moe-tui's code does, reports each misspelling by
name and accepts the right spellings. (Before the records, these were `dict[str, Any]`: mypy passed
every misspelling and the reader got a silent None.)"""

from __future__ import annotations

import gc
import re
import textwrap
from pathlib import Path

import jsonschema
import pytest
from mypy import api

from moe_tui.profiles import ServerProfile
from moe_tui.servers.managed import ManagedServer
from tests.support.schemas import published

ROOT = Path(__file__).resolve().parent.parent

SNIPPET = '''
from moe_tui.provenance import build_provenance
from moe_tui.records import WarmupPassJson
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.queue_item import QueueItem
from moe_tui.servers.managed import ManagedServer
from moe_tui.store.db import Store
from moe_tui.explain.breakdown import Explanation
from moe_tui.investigate.model import cell_snapshot


def read(item: QueueItem) -> None:
    prov = build_provenance(spec=BenchmarkSpec(), profile={}, server=None)
    print(prov["gpu"]["gpu_names"], prov["server"]["resolved_backend"])  # right: no error
    print(prov["gpu"]["gpu_nmes"])  # line 14
    print(BenchmarkSpec().canonical_dict()["num_promts"])  # line 15
    print(item.to_dict()["profle_name"])  # line 16
    warm: WarmupPassJson = {"status": "failed", "eror": "x"}  # line 17
    print(warm)


def read_more(server: ManagedServer, store: Store, expl: Explanation) -> None:
    print(server.describe()["resolved_backend"], store.requests(1)[0]["ttft"])  # right: no error
    print(server.describe()["sglang_versoin"])  # line 23
    print(store.requests(1)[0]["ttf"])  # line 24
    print(expl.to_dict()["a"]["step_mss"])  # line 25
    print(cell_snapshot(None)["verdikt"])  # line 26
'''


def test_a_misspelt_record_field_is_a_mypy_error(tmp_path):
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(textwrap.dedent(SNIPPET).lstrip("\n"))
    thresholds = gc.get_threshold()
    try:
        out, err, rc = api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                                "--config-file", str(ROOT / "pyproject.toml"), "--follow-imports=silent",
                                str(snippet)])
    finally:
        # mypy raises the collector's thresholds for its own process (gc.set_threshold(200000, ...)):
        # in-process, that leaked into the worker's later tests (the QuietGc test saw no collection).
        gc.set_threshold(*thresholds)
    errors = {int(m.group(1)): m.group(2) for m in re.finditer(r"misspelt\.py:(\d+): error: (.*)", out)}
    assert rc == 1, out + err
    assert set(errors) == {14, 15, 16, 17, 23, 24, 25, 26}, out  # the right spellings on lines 13 and 22 pass
    assert 'TypedDict "GpuFactsJson" has no key "gpu_nmes"' in errors[14]
    assert 'TypedDict "SpecJson" has no key "num_promts"' in errors[15]
    assert 'TypedDict "QueueItemJson" has no key "profle_name"' in errors[16]
    assert '"eror"' in errors[17] and "WarmupPassJson" in errors[17]
    # wave 10: a managed server's description, a stored run's request rows, explain's and investigate's JSON
    assert 'TypedDict "ManagedServerJson" has no key "sglang_versoin"' in errors[23]
    assert 'TypedDict "RequestRowJson" has no key "ttf"' in errors[24]
    assert 'TypedDict "SideJson" has no key "step_mss"' in errors[25]
    assert 'TypedDict "CellSnapshotJson" has no key "verdikt"' in errors[26]


def test_a_managed_server_description_fits_the_published_run_status():
    """`run --status` lists each server's `describe()`; its schema (docs/schemas/run-status) is closed
    since the servers are typed (ManagedServerJson), so a renamed or added key fails here."""


    profile = ServerProfile(name="sim-x", engine="sim", model_path="/m", moe_runner_backend="flashinfer_cutlass",
                            port=30999)
    server = ManagedServer(profile)
    schema = published("run-status")
    described = {"$defs": schema["$defs"], "$ref": "#/$defs/ManagedServerJson"}
    jsonschema.validate(server.describe(), described, cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**server.describe(), "extra": 1}, described, cls=jsonschema.Draft202012Validator)


def test_run_status_text_names_each_server_by_its_profile():
    """`moe-tui run --status` printed '?' for every server: it read a key ("name") the servers'
    description never had; typed as ManagedServerJson, the reader uses "profile"."""
    from moe_tui.commands.run import status_text

    server = ManagedServer(ServerProfile(name="sim-x", engine="sim", model_path="/m",
                                         moe_runner_backend="flashinfer_cutlass", port=30999))
    text = status_text({"pid": 1, "data_dir": "/d", "working": False, "activity": "idle", "detail": "",
                        "current_item": None, "current_run_id": None, "last_progress": None, "last_finished": None,
                        "queue": {"counts": {}, "paused": False}, "session": {}, "servers": [server.describe()],
                        "telemetry": None})
    assert "\n  sim-x " in text and "port 30999" in text
