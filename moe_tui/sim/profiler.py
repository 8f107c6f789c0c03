"""The emulator's profiler endpoints, as SGLang 0.5.23 serves them (http_server.py, io_struct.py
`ProfileReqInput`, scheduler_components/profiler_manager.py):

- `POST|GET /start_profile`, body (all optional) `{output_dir, start_step, num_steps, activities,
  profile_by_stage, merge_profiles, profile_prefix, record_shapes, with_stack,
  detailed_annotations}`; unknown fields are ignored. `output_dir` defaults to
  $SGLANG_TORCH_PROFILER_DIR, else /tmp; the profile id is the start's `time.time()`. With
  `num_steps` the capture stops by itself after that many forward steps; with `profile_by_stage`
  captures start and stop on batches of each stage (`SimProfiler._predicate`, the manager's
  `_profile_batch_predicate`, armed state and EXTEND naming included); `start_step` delays the
  start to that forward step.
- `POST|GET /stop_profile`: stops the running capture and writes it (no stage in the name).
- A failed request ("Profiling is already in progress. Call /stop_profile first.", "Profiling is
  not in progress. Call /start_profile first.") answers 500, as 0.5.23's tokenizer manager raises
  on a failed ProfileReqOutput; a body that is not a ProfileReqInput answers 400.
Traces: `moe_tui.sim.traces` (one gzipped Chrome trace per TP rank, SGLang's file names). The
emulator keeps at most `MAX_STEPS` steps of one profile (SGLang keeps all; a bounded emulator
cannot fill a disk).

Expert load: `/start_expert_distribution_record`, `/stop_expert_distribution_record`,
`/dump_expert_distribution_record` need `--expert-distribution-recorder-mode`: without one the
scheduler raises and the whole server dies, as 0.5.23's does; see `moe_tui.sim.expert_load`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from moe_tui.records import SglangJson
from moe_tui.sim.gpus import GPU_NAME
from moe_tui.sim.model import DEFAULT_ROW, StepPlan, load_backends
from moe_tui.sim.output import log
from moe_tui.sim.traces import StepRecord, step_launch, write_traces

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


def parse_profile_request(body: object) -> SglangJson:
    """The known fields of a ProfileReqInput body, type-checked; unknown fields are ignored, as
    0.5.23's request struct does (extra fields ignored)."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ProfileRequestError("the body must be a JSON object (ProfileReqInput)")
    out: SglangJson = {}
    for key, value in body.items():
        if key not in PROFILE_FIELDS or value is None:
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
class _Config:
    """What the last /start_profile set (SchedulerProfilerManager's fields); it outlives a capture."""

    profile_id: str
    output_dir: Path
    prefix: str
    by_stage: bool
    gpu: bool
    start_ct: int | None = None  # profiler_start_forward_ct
    target_ct: int | None = None  # profiler_target_forward_ct
    prefill_ct: int | None = None
    decode_ct: int | None = None
    target_prefill: int | None = None
    target_decode: int | None = None


class SimProfiler:
    """Profiler state of one emulated server (every TP rank at once), the state machine of 0.5.23's
    SchedulerProfilerManager: `/start_profile` configures (and, unless by stage or with a
    start_step, starts a capture); before each batch `_predicate` starts and stops captures; a
    capture's steps are written when it stops, named by the stage it was stopped for.

    As in 0.5.23, a by-stage configuration is never cleared: after its DECODE export the next
    prefill batch starts a new capture when no prefill was seen yet (prefill count 0), and the
    decode after it exports again under the DECODE name; a prefill batch past `num_steps` ends a
    running (decode) capture under the EXTEND name."""

    def __init__(self, engine: SimEngine) -> None:
        self.e = engine
        self.config: _Config | None = None
        self.capture: list[StepRecord] | None = None  # the steps of the running capture
        self.written: list[str] = []
        self._reference = load_backends(engine.args.sim_backends_file)[DEFAULT_ROW]

    @property
    def in_progress(self) -> bool:
        return self.capture is not None

    def _forward_ct(self) -> int:
        return self.e.completed_step + 1

    # -- requests -------------------------------------------------------------------------------
    def start(self, req: SglangJson) -> tuple[bool, str]:
        if self.in_progress:
            return False, "Profiling is already in progress. Call /stop_profile first."
        out_dir = req.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        old = self.config
        cfg = _Config(profile_id=req.get("profile_id") or str(time.time()), output_dir=Path(out_dir).expanduser(),
                      prefix=req.get("profile_prefix") or "", by_stage=bool(req.get("profile_by_stage")),
                      gpu="GPU" in (req.get("activities") or ["CPU", "GPU"]))
        if old is not None:  # counters the request does not set survive, as the manager's fields do
            cfg.prefill_ct, cfg.decode_ct = old.prefill_ct, old.decode_ct
            cfg.target_prefill, cfg.target_decode = old.target_prefill, old.target_decode
        start_step, num_steps = req.get("start_step"), req.get("num_steps")
        if start_step:
            cfg.start_ct = max(start_step, self._forward_ct() + 1)
        if num_steps:
            if cfg.by_stage:
                cfg.prefill_ct = cfg.decode_ct = 0
                cfg.target_prefill = cfg.target_decode = num_steps
            elif start_step:
                cfg.target_ct = (cfg.start_ct or 0) + num_steps
            else:
                cfg.target_ct = self._forward_ct() + num_steps
        self.config = cfg
        if not (cfg.by_stage or start_step):
            self._start_capture(None)
        return True, "Succeeded"

    def stop(self, stage: str | None = None) -> tuple[bool, str]:
        """`_stop_profile(stage)`: write the running capture, named for `stage` (none from
        /stop_profile, whatever the configuration)."""
        cfg, steps = self.config, self.capture
        if cfg is None or steps is None:
            return False, "Profiling is not in progress. Call /start_profile first."
        self.capture = None
        cfg.start_ct = None
        if steps and cfg.gpu:
            self.written += [str(p) for p in self._write(cfg, steps, stage)]
        log(f"Profiling done. Traces are saved to: {cfg.output_dir}", self.e.prefix)
        return True, "Succeeded."

    def _start_capture(self, stage: str | None) -> None:
        assert self.config is not None
        self.capture = []
        log(f"Profiling starts{f' for {stage}' if stage else ''}. Traces will be saved to: {self.config.output_dir} "
            f"(with profile id: {self.config.profile_id})", self.e.prefix)

    # -- the engine's hook ----------------------------------------------------------------------
    def _predicate(self, stage: str, forward_ct: int) -> None:
        """`_profile_batch_predicate`, before a batch of `stage` runs."""
        cfg = self.config
        if cfg is None:
            return
        if cfg.by_stage:
            if cfg.prefill_ct is None or cfg.decode_ct is None:
                return  # by stage without num_steps on a fresh manager: nothing counted
            if stage == "EXTEND":
                if cfg.prefill_ct == 0:
                    self._start_capture(stage)
                cfg.prefill_ct += 1
                if cfg.prefill_ct > (cfg.target_prefill or 0) and self.in_progress:
                    self.stop("EXTEND")
            else:
                if cfg.decode_ct == 0:
                    if self.in_progress:
                        self.stop("EXTEND")  # "force trace flush": the prefill capture so far
                    self._start_capture(stage)
                cfg.decode_ct += 1
                if cfg.decode_ct > (cfg.target_decode or 0) and self.in_progress:
                    self.stop("DECODE")
            return
        if cfg.target_ct and cfg.target_ct <= forward_ct:
            self.stop()
        if cfg.start_ct and cfg.start_ct == forward_ct:
            self._start_capture(None)

    def on_step(self, plan: StepPlan, duration_s: float) -> None:
        """After each engine step (with the wall seconds it was given): the predicate SGLang runs
        before the batch, then the batch into the running capture."""
        if self.config is None:
            return
        # SGLang runs prefill in forward passes of their own (EXTEND) unless mixed chunking is on; the
        # emulator folds chunked prefill into decode steps, so a step that prefills anything is an
        # EXTEND step and only a pure decode step is DECODE.
        stage = "EXTEND" if plan.prefill_tokens > 0 else "DECODE"
        self._predicate(stage, plan.index + 1)
        if self.capture is None or len(self.capture) >= MAX_STEPS:
            return
        modelled = duration_s * 1000.0 * self.e.time_scale * self.e.board.speed
        b, perf = plan.decode_batch, self.e.perf
        slowdown = float(getattr(self.e.args, "sim_moe_slowdown_ms", 0.0) or 0.0) if b > 0 else 0.0
        self.capture.append(StepRecord(plan.index, stage, time.time() - duration_s, modelled,
                                       perf.step_ms(b, plan.prefill_tokens),
                                       self._reference.decode_ms(b) if b > 0 else 0.0, perf.decode_ms(b), slowdown,
                                       step_launch(stage, b, self.e.decode_graph_max_bs)))

    def _write(self, prof: _Config, steps: list[StepRecord], stage: str | None) -> list[Path]:
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
            return self._failed(message)
        return web.Response(text="Start profiling.\n")

    async def handle_stop(self, request: web.Request) -> web.Response:
        ok, message = self.stop()
        if not ok:
            return self._failed(message)
        return web.Response(text="Stop profiling. This will take some time.\n")

    def _failed(self, message: str) -> web.Response:
        """A failed ProfileReqOutput: the tokenizer manager raises RuntimeError(message), which the
        HTTP server answers as FastAPI does an unhandled error: 500, the message only in the log."""
        log(f"Exception in ASGI application: RuntimeError: {message}", self.e.prefix, "ERROR")
        return web.Response(text="Internal Server Error", status=500)


def add_routes(app: web.Application, profiler: SimProfiler, expert: SimExpertRecorder | None = None) -> None:
    r = app.router
    r.add_route("*", "/start_profile", profiler.handle_start)
    r.add_route("*", "/stop_profile", profiler.handle_stop)
    if expert is not None:
        r.add_route("*", "/start_expert_distribution_record", expert.handle_start)
        r.add_route("*", "/stop_expert_distribution_record", expert.handle_stop)
        r.add_route("*", "/dump_expert_distribution_record", expert.handle_dump)
