"""The emulator's profiler as 0.5.23's SchedulerProfilerManager runs it, batch by batch (pure: a
stub engine, files into tmp_path): a by-stage configuration stays armed after its DECODE export,
a prefill batch past num_steps ends a decode capture under the EXTEND name, /stop_profile names
no stage, and a start with an unreachable start_step disarms."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

from moe_tui.sim.model import DEFAULT_ROW, StepPlan, load_backends
from moe_tui.sim.profiler import SimProfiler, parse_profile_request
from moe_tui.sim.traces import COMMON_SPLIT, LAYER_GROUPS


def _engine() -> SimpleNamespace:
    args = SimpleNamespace(sim_backends_file=None, sim_moe_slowdown_ms=0.0, tp_size=2, ep_size=1)
    return SimpleNamespace(args=args, completed_step=-1, time_scale=1.0, board=SimpleNamespace(speed=1.0),
                           decode_graph_max_bs=512,
                           perf=load_backends()[DEFAULT_ROW], prefix="", resolved_backend="flashinfer_cutlass",
                           sim_seed=1)


class Driver:
    def __init__(self, out: Path) -> None:
        self.e = _engine()
        self.p = SimProfiler(self.e)  # type: ignore[arg-type]
        self.out = out
        self.index = 0

    def batches(self, kinds: str) -> None:
        """'P' a prefill batch, 'D' a decode batch, in order."""
        for k in kinds:
            plan = StepPlan(self.index, 8, 512 if k == "P" else 0)
            self.p.on_step(plan, 0.01)
            self.e.completed_step = self.index
            self.index += 1

    def files(self) -> dict[str, list[str]]:
        """stage suffix -> the stages of the steps in rank 0's file."""
        out = {}
        for p in sorted(self.out.glob("*-TP-0*.trace.json.gz")):
            data = json.loads(gzip.open(p).read())
            # every step (b=8 decodes in each) runs the common dense GEMM once per layer group
            dense = [e for e in data["traceEvents"] if e.get("cat") == "kernel" and e["name"] == COMMON_SPLIT[4][1]]
            out[p.name.split("-TP-0")[1]] = len(dense) // LAYER_GROUPS
        return out


def test_by_stage_stays_armed_after_its_decode_export(tmp_path):
    d = Driver(tmp_path)
    assert d.p.start(parse_profile_request({"output_dir": str(tmp_path), "num_steps": 2, "profile_by_stage": True}))[0]
    d.batches("DDD")  # the third decode batch ends the 2-step decode capture
    assert d.files() == {"-DECODE.trace.json.gz": 2}
    decode = next(tmp_path.glob("*-TP-0-DECODE.trace.json.gz"))
    inode = decode.stat().st_ino
    assert not d.p.in_progress
    d.batches("P")  # no prefill seen yet: the prefill count is 0, so this one starts a capture
    assert d.p.in_progress
    d.batches("D")  # the decode count is past its target and a capture runs: exported again as DECODE
    assert not d.p.in_progress and decode.stat().st_ino != inode
    assert d.files() == {"-DECODE.trace.json.gz": 1}  # the prefill alone (stopped before the decode ran)


def test_a_prefill_past_num_steps_names_the_decode_capture_extend(tmp_path):
    d = Driver(tmp_path)
    d.p.start(parse_profile_request({"output_dir": str(tmp_path), "num_steps": 2, "profile_by_stage": True}))
    d.batches("P")
    d.batches("D")  # flushes the prefill capture (EXTEND, 1 step), starts the decode capture
    assert d.files() == {"-EXTEND.trace.json.gz": 1}
    d.batches("PP")  # the third prefill batch is past num_steps: the running decode capture ends as EXTEND
    assert d.files() == {"-EXTEND.trace.json.gz": 2}  # the decode step and one prefill, no DECODE file
    d.batches("DDDD")
    assert "-DECODE.trace.json.gz" not in d.files() and not d.p.in_progress


def test_stop_profile_names_no_stage_and_disarm_captures_nothing(tmp_path):
    d = Driver(tmp_path)
    d.p.start(parse_profile_request({"output_dir": str(tmp_path), "num_steps": 5, "profile_by_stage": True}))
    d.batches("DD")
    ok, message = d.p.start({})
    assert not ok and "already in progress" in message
    assert d.p.stop() == (True, "Succeeded.")
    assert d.files() == {".trace.json.gz": 2}
    rank1 = gzip.open(next(tmp_path.glob("*-TP-1.trace.json.gz"))).read().decode()
    assert '"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2}' in rank1  # Kineto's spacing
    assert d.p.stop() == (False, "Profiling is not in progress. Call /start_profile first.")
    # the client's disarm: no stage split, a start step no run reaches
    assert d.p.start(parse_profile_request({"profile_by_stage": False, "start_step": 2**31 - 1,
                                            "activities": ["CPU"], "unknown_field": 1}))[0]
    d.batches("PDDDDPDD")
    assert not d.p.in_progress and d.files() == {".trace.json.gz": 2}


def test_unknown_fields_are_ignored_bad_types_refused():
    assert parse_profile_request({"num_steps": 3, "profile_stages": ["decode"], "shape_discovery": True,
                                  "no_such_field": "x"}) == {"num_steps": 3, "profile_stages": ["decode"]}


def _events(path: Path) -> list[dict]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def test_decode_above_the_captured_batch_runs_eagerly_and_prefill_as_graph_segments(tmp_path):
    import pytest

    from moe_tui.explain import TraceError, read_rank

    d = Driver(tmp_path)
    d.e.decode_graph_max_bs = 4  # the batch of 8 is above it: eager decode
    d.p.start(parse_profile_request({"output_dir": str(tmp_path), "num_steps": 2, "profile_by_stage": True}))
    d.batches("PDDD")
    extend = next(tmp_path.glob("*-TP-0-EXTEND.trace.json.gz"))
    decode = next(tmp_path.glob("*-TP-0-DECODE.trace.json.gz"))
    ev = _events(decode)
    launches = {e["args"]["correlation"] for e in ev if e.get("name") == "cudaLaunchKernel"}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert not [e for e in ev if e.get("name") == "cudaGraphLaunch"]  # no graph: one launch per kernel
    assert len(launches) == len(kernels) and {k["args"]["correlation"] for k in kernels} == launches
    with pytest.raises(TraceError, match="no CUDA-graph launches"):
        read_rank(decode)
    assert read_rank(decode, steps=2).n_steps == 2
    # the prefill: breakable CUDA graphs, a launch per segment, attention eager between them
    ev = _events(extend)
    assert len([e for e in ev if e.get("name") == "cudaGraphLaunch"]) == LAYER_GROUPS
    eager = {e["args"]["correlation"] for e in ev if e.get("name") == "cudaLaunchKernel"}
    attention = {e["args"]["correlation"] for e in ev if e.get("cat") == "kernel" and "Prefill" in e["name"]}
    assert attention and attention <= eager
    assert read_rank(extend, steps=1).n_steps == 1  # segments are not steps


def test_decode_within_the_captured_batch_is_one_graph_a_step(tmp_path):
    from moe_tui.explain import read_rank

    d = Driver(tmp_path)
    d.p.start(parse_profile_request({"output_dir": str(tmp_path), "num_steps": 3, "profile_by_stage": True}))
    d.batches("DDDD")
    decode = next(tmp_path.glob("*-TP-0-DECODE.trace.json.gz"))
    assert len([e for e in _events(decode) if e.get("name") == "cudaGraphLaunch"]) == 3
    assert not [e for e in _events(decode) if e.get("name") == "cudaLaunchKernel"]
    assert read_rank(decode).n_steps == 3
