"""The emulator's engine: resolved server args, the continuous-batching loop, the prefix cache,
the variance model, the simulated GPUs and the child process tree. No HTTP here (`routes`); what it
reports of itself at `/server_info` is `server_info`.

The engine task runs `BatchScheduler` steps against absolute wall-clock deadlines (a step's
modelled duration, times the variance factor, divided by the throttled GPUs' speed and by
`--sim-time-scale`, after the previous one's deadline; if the process falls behind by more than
`MAX_CATCHUP_S` it re-bases and counts the lag in `/server_info` instead of bursting tokens).
Streams are woken every `--stream-interval` tokens through per-request events.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from moe_tui.sim.args import DEFAULT_CHUNKED_PREFILL_SIZE, DEFAULT_CONTEXT_LENGTH, DEFAULT_MAX_RUNNING_REQUESTS
from moe_tui.sim.failure import child_failed
from moe_tui.sim.gpus import GPU_PRESETS, SimGpuBoard, SimGpuWire
from moe_tui.sim.internode import Peers, internode_ms, moe_shape
from moe_tui.sim.memory import DEFAULT_MEM_FRACTION, WEIGHTS_GIB, MemoryBudget
from moe_tui.sim.model import BatchScheduler, SeqState, StepPlan, load_backends, perf_for
from moe_tui.sim.output import Metrics, TextBank, log
from moe_tui.sim.prefix_cache import RadixCache
from moe_tui.sim.procs import ChildProcs, log_prefix
from moe_tui.sim.variance import VarianceModel, VarianceSettings

TOKENIZER_DIR = Path(__file__).with_name("tokenizer")
MAX_CATCHUP_S = 0.05
DECODE_LOG_INTERVAL = 40
SIMULATED_SUFFIX = " (simulated)"
# Backends that make SGLang turn shared-experts fusion off (SGLANG.md).
DISABLES_SHARED_EXPERTS_FUSION = ("flashinfer_cutedsl", "flashinfer_trtllm")


@dataclass(eq=False)
class ReqState:
    """One request as the engine and its HTTP handler share it."""

    seq: SeqState
    text_offset: int
    started: float
    prompt_ids: list[int] | None = None  # inserted into the prefix cache after prefill, then dropped
    event: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False
    first_token_time: float = 0.0
    finish_time: float = 0.0
    ordinal: int = 0  # 1-based count of generation requests (0 for health checks)


def _req(seq: SeqState) -> ReqState:
    """The engine's request state a scheduled sequence carries (set by `SimEngine.submit`)."""
    st = seq.payload
    assert isinstance(st, ReqState)
    return st


class BusyMeter:
    """The share of the last second the engine spent in steps, in 0.1 s buckets (cheap at any rate)."""

    BUCKET_S = 0.1

    def __init__(self) -> None:
        self.buckets: collections.deque[list[float]] = collections.deque(maxlen=12)

    def add(self, t_end: float, seconds: float) -> None:
        slot = int(t_end / self.BUCKET_S)
        if self.buckets and self.buckets[-1][0] == slot:
            self.buckets[-1][1] += seconds
        else:
            self.buckets.append([slot, seconds])

    def share(self, now: float) -> float:
        first = int(now / self.BUCKET_S) - 10
        return min(1.0, sum(s for slot, s in self.buckets if slot > first))


def gpu_indices(tp_size: int) -> list[int]:
    """The GPU set as SGLang's processes see it: CUDA_VISIBLE_DEVICES, else 0..tp_size-1."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        listed = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        listed = []
    return listed[:tp_size] if len(listed) >= tp_size else list(range(tp_size))


class SimEngine:
    """Everything the emulated server is, except its HTTP routes."""

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args, self.argv = args, argv
        self.requested_backend = args.moe_runner_backend
        self.gpu = GPU_PRESETS[args.sim_gpu]
        self.resolved_backend, self.backend_notes = self._resolve_backend()
        self.kv_cache_dtype = self._resolve_kv_dtype()
        self.perf = perf_for(self.resolved_backend, load_backends(args.sim_backends_file))
        name = args.served_model_name or args.model_path
        self.served_model_name = name if "simulated" in name.lower() else name + SIMULATED_SUFFIX
        self.max_running = args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
        self.chunked_prefill = (args.chunked_prefill_size if args.chunked_prefill_size is not None
                                else DEFAULT_CHUNKED_PREFILL_SIZE)
        self.context_length = args.context_length or DEFAULT_CONTEXT_LENGTH
        self.random_seed = args.random_seed if args.random_seed is not None else 0
        # GLM-5 is a DSA model: SGLang picks the dsa attention backend when none is set
        # (srt/arg_groups/model_overrides/deepseek_v2.py).
        self.attention_backend = args.attention_backend or "dsa"
        self.open_port: Callable[[], Awaitable[bool]] | None = None  # set by the HTTP side (routes.SimServer)
        self.disable_shared_experts_fusion = (args.disable_shared_experts_fusion
                                              or self.resolved_backend in DISABLES_SHARED_EXPERTS_FUSION)
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
        self.bank = TextBank(self.tokenizer, seed=self.random_seed)
        self.sched = BatchScheduler(self.max_running, self.chunked_prefill)
        self.metrics = Metrics()
        self.state = "loading"  # loading -> ready -> draining
        self.startup_time: dict[str, float] = {}
        # A fixed seed makes a start reproducible; without one each start draws its own, else
        # every restart of a profile would replay the same "noise" and repeats would agree
        # perfectly with each other while differing from another profile's replay.
        self.sim_seed = args.sim_seed if args.sim_seed is not None else random.SystemRandom().randrange(2**31)
        self.variance = VarianceModel(VarianceSettings(
            start_sigma_pct=args.sim_start_sigma, drift_sigma_pct=args.sim_drift_sigma,
            drift_tau_min=args.sim_drift_tau_min, run_jitter_pct=args.sim_run_jitter,
            step_noise_pct=args.sim_noise_pct, drift_pct_per_min=args.sim_drift_pct_per_min), self.sim_seed)
        self.error_rng = random.Random(self.sim_seed + 1)
        # The KV pool SGLang derives from the memory this backend leaves (sim/memory.py): the
        # capacity behind `token_usage` and the prefix cache, and /server_info's max_total_num_tokens.
        self.memory = MemoryBudget(self.gpu.mem_total_bytes, args.mem_fraction_static or DEFAULT_MEM_FRACTION,
                                   self.perf.workspace_gib, kv_bytes_per_elem=1.0 if "fp8" in self.kv_cache_dtype else 2.0)
        self.kv_pool = max(1, self.memory.max_total_num_tokens)  # 1: startup fails first (startup.py)
        self.cache = None if args.disable_radix_cache else RadixCache(self.kv_pool)
        self.gpu_indices = gpu_indices(args.tp_size // max(1, args.nnodes))  # this node's share of the TP ranks
        self.board = SimGpuBoard(self.gpu_indices, weights_gib=WEIGHTS_GIB,
                                 mem_fraction=args.mem_fraction_static or DEFAULT_MEM_FRACTION,
                                 power_limit_w=args.sim_gpu_power_limit_w, seed=self.sim_seed, preset=self.gpu)
        self.children = ChildProcs(args.tp_size // max(1, args.nnodes), args.ep_size, orphan_seconds=args.sim_orphan_children)
        self.peers: Peers | None = None  # rank 0 of a multi-node start: its links to the other ranks (sim/internode.py)
        self.moe_shape = moe_shape(args.model_path)
        self.prefix = log_prefix(0, args.tp_size, args.ep_size)
        self.busy = BusyMeter()
        self.time_scale: float = args.sim_time_scale
        self.launch_time_scale: float = args.sim_time_scale
        self._clock_base_min = 0.0  # modelled minutes since ready, up to the last change of time scale
        self._clock_changed_at: float | None = None
        self.stream_interval = args.stream_interval
        self.buckets: list[dict[int, ReqState]] = [{} for _ in range(self.stream_interval)]
        self.completed_step = -1
        self.seen_jit_buckets: set[int] = set()
        self.engine_lag_s = 0.0
        self.engine_lag_events = 0
        self.ready_at = 0.0
        self.requests_started = 0
        self.last_gen_throughput = 0.0
        self._tp_window_tokens = 0
        self._tp_window_start = time.monotonic()
        self._last_decode_log = 0.0
        self._last_prefill_log = 0.0
        self._steps_since_log = 0
        self._prefill_window = [0, 0]  # cached, total prompt tokens since the last prefill log
        self._wake: asyncio.Event | None = None
        self.fault_task: asyncio.Task[None] | None = None
        # hook(plan, modelled seconds) after each step (the profiler, the expert-load recorder)
        self.step_hooks: list[Callable[[StepPlan, float], None]] = []

    # -- resolution ------------------------------------------------------------------------

    def _resolve_backend(self) -> tuple[str, list[tuple[str, str]]]:
        a = self.args
        notes: list[tuple[str, str]] = []
        backend = a.moe_runner_backend
        if backend == "auto" and (a.quantization or "").startswith("modelopt_fp4") and self.gpu.blackwell:
            notes.append(("INFO", "moe_runner_backend=auto with quantization=modelopt_fp4: "
                                  "using moe_runner_backend='flashinfer_cutlass'"))
            backend = "flashinfer_cutlass"
        if a.sim_fallback_backend and a.sim_fallback_backend != backend:
            notes.append(("WARNING", f"moe_runner_backend='{backend}' is not supported with "
                                     f"quantization={a.quantization!r} on this device; falling "
                                     f"back to moe_runner_backend='{a.sim_fallback_backend}'. "
                                     "(SIMULATED fallback: --sim-fallback-backend)"))
            backend = a.sim_fallback_backend
        return backend, notes

    def _resolve_kv_dtype(self) -> str:
        """DSA models (GLM-5) get an fp8_e4m3 KV cache from SM100 on, bfloat16 below, when none is
        set (srt/arg_groups/overrides.py, DeepSeek DSA kv_cache_dtype)."""
        asked = self.args.kv_cache_dtype
        if asked != "auto":
            return "bfloat16" if asked == "bf16" else asked
        return "fp8_e4m3" if self.gpu.blackwell else "bfloat16"

    def nvfp4_refusal(self) -> str | None:
        """0.5.23's error for an NVFP4 MoE runner below SM100 (srt/layers/quantization/modelopt_quant.py):
        only marlin (or auto, which falls back to it on SM80-SM90) runs there."""
        if (self.gpu.blackwell or not (self.args.quantization or "").startswith("modelopt_fp4")
                or self.resolved_backend in ("auto", "marlin")):
            return None
        return ("ValueError: Current platform does not support NVFP4 quantization with the selected MoE backend. "
                "Please use Blackwell and above, or use moe_runner_backend=marlin on SM80+.")

    # -- requests ----------------------------------------------------------------------------

    def submit(self, prompt_ids: list[int], max_new_tokens: int, rid: str, ordinal: int) -> ReqState:
        seq = SeqState(rid, len(prompt_ids), max_new_tokens)
        if self.cache is not None and ordinal:  # health checks neither hit nor fill the cache
            seq.cached_tokens = self.cache.match(prompt_ids)
            seq.prefill_left -= seq.cached_tokens
        offset = (hash(rid) & 0x7FFFFFFF) % TextBank.SIZE
        st = ReqState(seq, offset, time.monotonic(), prompt_ids if self.cache is not None and ordinal else None,
                      ordinal=ordinal)
        seq.payload = st
        self.sched.add(seq)
        assert self._wake is not None
        self._wake.set()
        return st

    def abort(self, st: ReqState) -> None:
        if not st.finished:
            self.sched.abort(st.seq)
            st.finished = True
            if st.seq.first_token_step >= 0:
                self.buckets[(st.seq.first_token_step - 1) % self.stream_interval].pop(id(st), None)

    def flush_cache(self) -> None:
        if self.cache is not None:
            self.cache.reset()
        self.variance.new_run()  # what a benchmark does between runs; the next run draws its jitter

    # -- the loop -----------------------------------------------------------------------------

    def _step_seconds(self, decode_batch: int, prefill_tokens: int) -> float:
        if self.args.sim_zero_delay:
            return 0.0
        ms = self.perf.step_ms(decode_batch, prefill_tokens)
        ms += internode_ms(decode_batch + prefill_tokens, self.args.nnodes, self.args.tp_size, self.moe_shape)
        if decode_batch > 0:
            ms += self.args.sim_moe_slowdown_ms
        if self.args.sim_jit_stall_ms and decode_batch > 0:
            bucket = 1 << (decode_batch - 1).bit_length()
            if bucket not in self.seen_jit_buckets:
                self.seen_jit_buckets.add(bucket)
                ms += self.args.sim_jit_stall_ms
                log(f"JIT compiling MoE kernels for batch bucket {bucket} "
                    f"(SIMULATED stall {self.args.sim_jit_stall_ms:.0f} ms)", self.prefix)
        wall_min = (time.monotonic() - self.ready_at) / 60.0 if self.ready_at else 0.0
        ms *= self.variance.step_factor(self.modelled_minutes(), wall_min)
        return ms / 1000.0 / self.time_scale / self.board.speed

    def modelled_minutes(self) -> float:
        """Minutes of the modelled box's time since ready: wall time times the time scale in force,
        piece by piece, so a slower clock set between runs never turns the drift back."""
        if not self.ready_at:
            return 0.0
        since = self._clock_changed_at or self.ready_at
        return self._clock_base_min + (time.monotonic() - since) / 60.0 * self.time_scale

    def set_time_scale(self, scale: float) -> None:
        """Run the clock `scale` times faster than real time from now on (moe-tui's runner slows it
        for a concurrency its client cannot keep up with; `judgement.sim_cell_time_scale`)."""
        self._clock_base_min = self.modelled_minutes()
        self._clock_changed_at = time.monotonic()
        self.time_scale = scale
        self.args.sim_time_scale = scale  # /server_info's sim settings say the clock in force

    async def engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        deadline = loop.time()
        idle_since = time.monotonic()
        while True:
            if not self.sched.has_work():
                self._wake.clear()
                idle_since = time.monotonic()
                await self._wake.wait()
                deadline = loop.time()
                if time.monotonic() - idle_since >= self.args.sim_run_gap_seconds:
                    self.variance.new_run()
            plan = self.sched.plan()
            duration = self._step_seconds(plan.decode_batch, plan.prefill_tokens)
            step_start = deadline
            deadline += duration
            now = loop.time()
            if deadline > now:
                await asyncio.sleep(deadline - now)
            else:
                lag = now - deadline
                if lag > MAX_CATCHUP_S:
                    # Fell behind the model: re-base rather than burst tokens to catch up.
                    self.engine_lag_s += lag
                    self.engine_lag_events += 1
                    deadline = now
                await asyncio.sleep(0)
            wall = loop.time() - step_start
            self.completed_step = plan.index
            mono = time.monotonic()
            self.busy.add(mono, wall)
            self.board.update(mono, self.busy.share(mono), self.sched.num_running / self.max_running)
            self._emit(plan, wall)
            for hook in self.step_hooks:
                hook(plan, duration)

    def _emit(self, plan: StepPlan, wall: float) -> None:
        now = time.monotonic()
        k, interval, m = plan.index, self.stream_interval, self.metrics
        new_tokens = plan.decode_batch + len(plan.first_token)
        m.generation_tokens_total += new_tokens
        if plan.decode_batch:
            m.itl.observe(wall, plan.decode_batch)
        if plan.first_token:
            self._first_tokens(plan, now)
        if plan.decode_batch and (k // interval) % self._merge_every() == 0:
            for st in self.buckets[k % interval].values():
                st.event.set()
        for seq in plan.finished:
            st = _req(seq)
            st.finished = True
            st.finish_time = now
            m.e2e.observe(now - st.started)
            m.num_requests_total += 1
            self.buckets[(seq.first_token_step - 1) % interval].pop(id(st), None)
            st.event.set()
        self._tp_window_tokens += new_tokens
        span = now - self._tp_window_start
        if span >= 1.0:
            self.last_gen_throughput = self._tp_window_tokens / span
            self._tp_window_tokens = 0
            self._tp_window_start = now
        self._log_step(plan, now)

    def _merge_every(self) -> int:
        """How many stream wake-ups fold into one chunk: 1, or under --sim-merge-chunks-above load
        ceil(running / N). SGLang's tokenizer manager sends a stream's queued outputs as one chunk
        when its HTTP side falls behind (tokenizer_manager.py `_wait_one_response`: the last of
        `out_list`, or `_coalesce_streaming_chunks`), so one chunk then carries many tokens."""
        above = self.args.sim_merge_chunks_above
        running = self.sched.num_running
        return 1 if above is None or running <= above else -(-running // above)

    def _first_tokens(self, plan: StepPlan, now: float) -> None:
        m, k = self.metrics, plan.index
        cached = sum(s.cached_tokens for s in plan.first_token)
        total = sum(s.prompt_len for s in plan.first_token)
        m.prompt_tokens_total += total
        m.cached_tokens_total += cached
        m.cache_hit_rate = cached / total if total else 0.0
        self._prefill_window[0] += cached
        self._prefill_window[1] += total
        for seq in plan.first_token:
            st = _req(seq)
            st.first_token_time = now
            m.ttft.observe(now - st.started)
            if self.cache is not None and st.prompt_ids is not None:
                self.cache.insert(st.prompt_ids)
                st.prompt_ids = None
            if seq.finish_step > k:
                self.buckets[(k - 1) % self.stream_interval][id(st)] = st
            st.event.set()

    def _log_step(self, plan: StepPlan, now: float) -> None:
        self._steps_since_log += 1
        if plan.prefill_tokens and now - self._last_prefill_log >= 1.0:
            self._last_prefill_log = now
            cached, _ = self._prefill_window
            self._prefill_window = [0, 0]
            log(f"Prefill batch, #new-seq: {len(plan.first_token)}, #new-token: "
                f"{plan.prefill_tokens}, #cached-token: {cached}, token usage: {self.token_usage():.2f}, "
                f"#running-req: {self.sched.num_running}, #queue-req: {self.sched.num_waiting}", self.prefix)
        if (plan.decode_batch and self._steps_since_log >= DECODE_LOG_INTERVAL
                and now - self._last_decode_log >= 1.0):
            self._steps_since_log = 0
            self._last_decode_log = now
            log(f"Decode batch, #running-req: {plan.decode_batch}, #token: {self.used_tokens()}, "
                f"token usage: {self.token_usage():.2f}, cuda graph: "
                f"{not self.args.disable_cuda_graph}, gen throughput (token/s): "
                f"{self.last_gen_throughput:.2f}, #queue-req: {self.sched.num_waiting}", self.prefix)

    def used_tokens(self) -> int:
        k = self.completed_step
        total = sum(seq.prompt_len + seq.tokens_at(k) for seq in self.sched.decoding.values())
        return total + sum(seq.prompt_len - seq.prefill_left for seq in self.sched.prefilling)

    @property
    def decode_graph_max_bs(self) -> int | None:
        """The largest decode batch a captured CUDA graph serves (None: CUDA graphs disabled)."""
        a = self.args
        return None if a.disable_cuda_graph else (a.cuda_graph_max_bs_decode or min(self.max_running, 512))

    def token_usage(self) -> float:
        return min(1.0, self.used_tokens() / self.kv_pool)

    def gpu_samples(self) -> list[SimGpuWire]:
        """The simulated GPUs now (what /sim/gpus serves)."""
        mono = time.monotonic()
        self.board.update(mono, self.busy.share(mono), self.sched.num_running / self.max_running)
        return self.board.sample(time.time(), mono)

    # -- faults ----------------------------------------------------------------------------

    def maybe_crash(self, st: ReqState) -> None:
        n = self.args.sim_crash_after_requests
        if n is not None and st.ordinal >= n:
            error = (f"RuntimeError: CUDA error: an illegal memory access was encountered (SIMULATED crash "
                     f"after {n} requests)")
            asyncio.get_running_loop().call_later(0.02, child_failed, self, error, True)

    def error_draw(self) -> bool:
        rate: float = self.args.sim_error_rate
        return rate > 0 and self.error_rng.random() < rate

    async def gpu_faults(self) -> None:
        """After ready (+ --sim-gpu-fault-after s): a foreign process appears, a GPU is lost."""
        a = self.args
        if a.sim_gpu_foreign_process is None and a.sim_gpu_lost is None:
            return
        await asyncio.sleep(a.sim_gpu_fault_after)
        if a.sim_gpu_foreign_process is not None:
            pid = await asyncio.get_running_loop().run_in_executor(None, self.children.start_foreign)
            self.board.foreign = (a.sim_gpu_foreign_process, pid)
            log(f"SIMULATED foreign process pid {pid} started on GPU {a.sim_gpu_foreign_process}", self.prefix)
        if a.sim_gpu_lost is not None:
            self.board.lost.add(a.sim_gpu_lost)
            log(f"SIMULATED GPU {a.sim_gpu_lost} lost: NVML answers NVML_ERROR_GPU_IS_LOST", self.prefix,
                "ERROR")
