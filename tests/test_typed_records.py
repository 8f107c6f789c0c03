"""The typed records (moe_tui/records.py) make a misspelt field a type error: mypy --strict, run on a
small file that reads and writes records the way moe-tui's code does, reports each misspelling by
name and accepts the right spellings. (Before the records, these were `dict[str, Any]`: mypy passed
every misspelling and the reader got a silent None.)"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent

SNIPPET = '''
from moe_tui.provenance import build_provenance
from moe_tui.records import WarmupPassJson
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.queue_item import QueueItem


def read(item: QueueItem) -> None:
    prov = build_provenance(spec=BenchmarkSpec(), profile={}, server=None)
    print(prov["gpu"]["gpu_names"], prov["server"]["resolved_backend"])  # right: no error
    print(prov["gpu"]["gpu_nmes"])  # line 10
    print(BenchmarkSpec().canonical_dict()["num_promts"])  # line 11
    print(item.to_dict()["profle_name"])  # line 12
    warm: WarmupPassJson = {"status": "failed", "eror": "x"}  # line 13
    print(warm)
'''


def test_a_misspelt_record_field_is_a_mypy_error(tmp_path):
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(textwrap.dedent(SNIPPET).lstrip("\n"))
    out, err, rc = api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
                            "--config-file", str(ROOT / "pyproject.toml"), "--follow-imports=silent", str(snippet)])
    errors = {int(m.group(1)): m.group(2) for m in re.finditer(r"misspelt\.py:(\d+): error: (.*)", out)}
    assert rc == 1, out + err
    assert set(errors) == {10, 11, 12, 13}, out  # the right spellings on line 9 pass
    assert 'TypedDict "GpuFactsJson" has no key "gpu_nmes"' in errors[10]
    assert 'TypedDict "SpecJson" has no key "num_promts"' in errors[11]
    assert 'TypedDict "QueueItemJson" has no key "profle_name"' in errors[12]
    assert '"eror"' in errors[13] and "WarmupPassJson" in errors[13]
