"""The emulator's profiler endpoints, as SGLang 0.5.23 serves them (http_server.py, io_struct.py
`ProfileReqInput`, scheduler_components/profiler_manager.py):

- `POST|GET /start_profile`, body (all optional) `{output_dir, start_step, num_steps, activities,
  profile_by_stage, merge_profiles, profile_prefix, record_shapes, with_stack,
  detailed_annotations}`. `output_dir` defaults to $SGLANG_TORCH_PROFILER_DIR, else /tmp; the
  profile id is the start's `time.time()`. With `num_steps` the profile stops by itself after that
  many forward steps (with `profile_by_stage`: that many prefill and that many decode steps, one
  file each, `-EXTEND` / `-DECODE`); `start_step` delays the start to that forward step. Starting
  while a profile runs answers "Profiling is already in progress. Call /stop_profile first.".
- `POST|GET /stop_profile`: stops and writes the traces ("Profiling is not in progress..." if none).
Traces: `moe_tui.sim.traces` (one gzipped Chrome trace per TP rank, SGLang's file names). The
emulator keeps at most `MAX_STEPS` steps of one profile (SGLang keeps all; a bounded emulator
cannot fill a disk).

Expert load: `/start_expert_distribution_record`, `/stop_expert_distribution_record`,
`/dump_expert_distribution_record` need `--expert-distribution-recorder-mode` (else SGLang's
"Please set ServerArgs.expert_distribution_recorder_mode ..." error); see `moe_tui.sim.expert_load`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from moe_tui.sim.gpus import GPU_NAME
from moe_tui.sim.model import DEFAULT_ROW, StepPlan, load_backends
from moe_tui.sim.output import log
from moe_tui.sim.traces import StepRecord, write_traces

if TYPE_CHECKING:
    from moe_tui.sim.engine import SimEngine
    from moe_tui.sim.expert_load import SimExpertRecorder

MAX_STEPS = 512
PROFILE_FIELDS = {  # ProfileReqInput's fields and their JSON types
    "output_dir": (str,), "start_step": (int,), "num_steps": (int,), "activities": (list,),
    "profile_by_stage": (bool,), "merge_profiles": (bool,), "profile_prefix": (str,),
    "record_shapes": (bool,), "with_stack": (bool,), "detailed_annotations": (bool,),
    "profile_stages": (list,), "profile_id": (str,),
}
ACTIVITIES = ("CPU", "GPU", "MEM", "RPD", "CUDA_PROFILER")


class ProfileRequestError(ValueError):
    """A /start_profile body SGLang's parser would refuse (HTTP 400)."""


def parse_profile_request(body: object) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ProfileRequestError("the body must be a JSON object (ProfileReqInput)")
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key not in PROFILE_FIELDS:
            raise ProfileRequestError(f"unknown ProfileReqInput field {key!r}")
        if value is None:
            continue
        types = PROFILE_FIELDS[key]
        if not isinstance(value, types) or (types == (int,) and isinstance(value, bool)):
            raise ProfileRequestError(f"{key} must be {types[0].__name__}, got {type(value).__name__}")
        out[key] = value
    for key in ("start_step", "num_steps"):
        if out.get(key) is not None and out[key] < 0:
            raise ProfileRequestError(f"{key} must be >= 0")
    bad = [a for a in out.get("activities") or () if a not in ACTIVITIES]
    if bad:
        raise ProfileRequestError(f"unknown activities {bad}; choices {list(ACTIVITIES)}")
    return out


@dataclass
class _Profile:
    profile_id: str
    output_dir: Path
    prefix: str
    num_steps: int | None
    start_at: int | None  # forward step index to start at (start_step), None: at once
    by_stage: bool
    gpu: bool
    steps: dict[str, list[StepRecord]] = field(default_factory=lambda: {"DECODE": [], "EXTEND": [], "": []})
    started: bool = False
    done_stages: set[str] = field(default_factory=set)  # with profile_by_stage: stages written


class SimProfiler:
    """Profiler state of one emulated server (every TP rank at once)."""

    def __init__(self, engine: SimEngine) -> None:
        self.e = engine
        self.current: _Profile | None = None
        self.written: list[str] = []
        self._reference = load_backends(engine.args.sim_backends_file)[DEFAULT_ROW]

    # -- requests -------------------------------------------------------------------------------
    def start(self, req: dict[str, Any]) -> tuple[bool, str]:
        if self.current is not None:
            return False, "Profiling is already in progress. Call /stop_profile first."
        out_dir = req.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        start_step = req.get("start_step")
        start_at = max(start_step, self.e.completed_step + 2) if start_step else None
        self.current = _Profile(
            profile_id=req.get("profile_id") or str(time.time()), output_dir=Path(out_dir).expanduser(),
            prefix=req.get("profile_prefix") or "", num_steps=req.get("num_steps") or None, start_at=start_at,
            by_stage=bool(req.get("profile_by_stage")), gpu="GPU" in (req.get("activities") or ["CPU", "GPU"]))
        self.current.started = start_at is None
        log(f"Profiling starts. Traces will be saved to: {self.current.output_dir} "
            f"(with profile id: {self.current.profile_id})", self.e.prefix)
        return True, "Succeeded"

    def stop(self) -> tuple[bool, str]:
        if self.current is None:
            return False, "Profiling is not in progress. Call /start_profile first."
        prof, self.current = self.current, None
        paths = []
        for stage, steps in prof.steps.items():
            if steps and prof.gpu:
                paths += self._write(prof, steps, stage or None)
        self.written += [str(p) for p in paths]
        log(f"Profiling done. Traces are saved to: {prof.output_dir}", self.e.prefix)
        return True, "Succeeded."

    # -- the engine's hook ----------------------------------------------------------------------
    def on_step(self, plan: StepPlan, duration_s: float) -> None:
        """After each engine step (with the wall seconds it was given)."""
        prof = self.current
        if prof is None:
            return
        if not prof.started:
            if plan.index + 1 < (prof.start_at or 0):
                return
            prof.started = True
        # SGLang runs prefill in forward passes of their own (EXTEND) unless mixed chunking is on; the
        # emulator folds chunked prefill into decode steps, so a step that prefills anything is an
        # EXTEND step and only a pure decode step is DECODE: the decode breakdown is prefill-free.
        stage = "EXTEND" if plan.prefill_tokens > 0 else "DECODE"
        key = stage if prof.by_stage else ""
        modelled = duration_s * 1000.0 * self.e.time_scale * self.e.board.speed
        b, perf = plan.decode_batch, self.e.perf
        slowdown = float(getattr(self.e.args, "sim_moe_slowdown_ms", 0.0) or 0.0) if b > 0 else 0.0
        rec = StepRecord(plan.index, stage, time.time() - duration_s, modelled, perf.step_ms(b, plan.prefill_tokens),
                         self._reference.decode_ms(b) if b > 0 else 0.0, perf.decode_ms(b), slowdown)
        bucket = prof.steps[key]
        if stage in prof.done_stages:
            return
        if prof.by_stage and stage == "DECODE" and prof.steps["EXTEND"] and "EXTEND" not in prof.done_stages:
            # SGLang flushes the prefill trace when the first decode batch of the profile comes
            self.written += [str(p) for p in self._write(prof, prof.steps["EXTEND"], "EXTEND")]
            prof.steps["EXTEND"] = []
            prof.done_stages.add("EXTEND")
        if len(bucket) < MAX_STEPS:
            bucket.append(rec)
        if prof.num_steps:
            if prof.by_stage:
                if len(bucket) >= prof.num_steps:  # this stage is complete: write it now
                    self.written += [str(p) for p in self._write(prof, bucket, stage)]
                    prof.steps[key] = []
                    prof.done_stages.add(stage)
                    if stage == "DECODE" or prof.done_stages >= {"EXTEND", "DECODE"}:
                        self.stop()  # the decode target ends the profile (a pending prefill part is written)
            elif len(bucket) >= prof.num_steps:
                self.stop()

    def _write(self, prof: _Profile, steps: list[StepRecord], stage: str | None) -> list[Path]:
        a = self.e.args
        return write_traces(prof.output_dir, steps, self.e.resolved_backend, profile_id=prof.profile_id,
                            world=a.tp_size, ep_size=a.ep_size, stage=stage, prefix=prof.prefix,
                            gpu_name=GPU_NAME + " (simulated)",
                            seed=self.e.sim_seed)

    # -- HTTP -----------------------------------------------------------------------------------
    async def handle_start(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw.strip() else None
            req = parse_profile_request(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return web.json_response({"error": {"message": f"Invalid ProfileReqInput: {exc}"}}, status=400)
        ok, message = self.start(req)
        if not ok:
            return web.Response(text=message + "\n", status=400)
        return web.Response(text="Start profiling.\n")

    async def handle_stop(self, request: web.Request) -> web.Response:
        ok, message = self.stop()
        if not ok:
            return web.Response(text=message + "\n", status=400)
        return web.Response(text="Stop profiling. This will take some time.\n")


def add_routes(app: web.Application, profiler: SimProfiler, expert: SimExpertRecorder | None = None) -> None:
    r = app.router
    r.add_route("*", "/start_profile", profiler.handle_start)
    r.add_route("*", "/stop_profile", profiler.handle_stop)
    if expert is not None:
        r.add_route("*", "/start_expert_distribution_record", expert.handle_start)
        r.add_route("*", "/stop_expert_distribution_record", expert.handle_stop)
        r.add_route("*", "/dump_expert_distribution_record", expert.handle_dump)
