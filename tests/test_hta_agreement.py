"""Holistic Trace Analysis reads what explain reads: per-kernel sums within 0.1% (issue #32).

HTA runs in its own environment (`make hta` builds .venv-hta from tools/hta/requirements.txt; `make
test` builds it first), through tools/hta/kernel_sums.py; explain's side is its own trace parser.
- The emulator's 8 TP ranks, written by its profiler (`SimProfiler` on a stub engine, as
  tests/sim/test_profiler_states.py drives it): CUDA-graph decode steps and eager decode steps above
  the captured batch. HTA finds a file's rank by Kineto's spacing (`"rank": 3`); the compact JSON the
  emulator wrote before (`"rank":3`) folded all 8 into rank 0, which fails here.
- Real torch-profiler traces recorded on an H200 (tools/record_real_trace.py; tests/data/), so the
  agreement is checked here without the device.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from moe_tui.sim.model import DEFAULT_ROW, StepPlan, load_backends
from moe_tui.sim.profiler import SimProfiler, parse_profile_request

pytestmark = pytest.mark.integration  # HTA runs as a process of its own environment

REPO = Path(__file__).resolve().parents[1]
HTA_PYTHON = REPO / ".venv-hta" / "bin" / "python"
DATA = Path(__file__).resolve().parent / "data"
REAL_TRACES = sorted(DATA.glob("*-TP-0.trace.json.gz"))  # every torch trace recorded on the device


def _agreement() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hta_agreement", REPO / "tools" / "hta" / "agreement.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def agreement(built_envs) -> ModuleType:
    if not HTA_PYTHON.exists():
        pytest.fail(f"no Holistic Trace Analysis environment at {HTA_PYTHON}: build it with `make hta` "
                    "(make test builds it first)")
    return _agreement()


def _emulator_traces(out: Path, world: int = 8) -> None:
    args = SimpleNamespace(sim_backends_file=None, sim_moe_slowdown_ms=0.0, tp_size=world, ep_size=1)
    engine = SimpleNamespace(args=args, completed_step=-1, time_scale=1.0, board=SimpleNamespace(speed=1.0),
                             decode_graph_max_bs=16, perf=load_backends()[DEFAULT_ROW], prefix="",
                             resolved_backend="flashinfer_cutlass", sim_seed=3)
    prof = SimProfiler(engine)  # type: ignore[arg-type]
    ok, why = prof.start(parse_profile_request({"output_dir": str(out), "num_steps": 6}))
    assert ok, why
    # decode batches of 8 (one graph replay each) and of 64 (above the captured 16: eager launches)
    for i, batch in enumerate((8, 64, 8, 64, 8, 8, 8)):
        prof.on_step(StepPlan(i, batch, 0), 0.004)
        engine.completed_step = i


def test_hta_reads_the_emulators_eight_ranks_and_agrees_with_explain(tmp_path, agreement):
    _emulator_traces(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 8 and all(f"-TP-{r}." in " ".join(files) for r in range(8)), files
    hta = agreement.hta_sums(tmp_path, str(HTA_PYTHON))
    mine = agreement.explain_sums(tmp_path)
    record = agreement.compare(mine, hta["ranks"])
    assert record["ranks_hta"] == [str(r) for r in range(8)], record  # one rank per file, by Kineto's spacing
    assert record["unmatched"] == [] and record["kernels"] >= 8 * 10, record
    assert record["worst_rel_diff"] <= 0.001, record
    assert record["agree"], record


@pytest.mark.parametrize("trace", REAL_TRACES, ids=lambda p: p.name)
def test_hta_agrees_with_explain_on_a_real_h200_trace(tmp_path, agreement, trace):
    (tmp_path / trace.name).write_bytes(trace.read_bytes())
    record = agreement.compare(agreement.explain_sums(tmp_path), agreement.hta_sums(tmp_path, str(HTA_PYTHON))["ranks"])
    assert record["kernels"] >= 20 and record["unmatched"] == [], record
    assert record["worst_rel_diff"] <= 0.001, record
    assert abs(record["explain_ms"] - record["hta_ms"]) <= 0.001 * record["hta_ms"], record


def test_real_traces_are_here():
    assert len(REAL_TRACES) >= 2, "tests/data keeps the H200 traces tools/record_real_trace.py recorded"
