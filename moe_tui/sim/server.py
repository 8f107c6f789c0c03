"""The emulator's HTTP server and engine loop: SGLang's API on aiohttp, driven by `model`.

One asyncio process: the HTTP port opens at once (like SGLang's, `/v1/models` and `/model_info`
answer during load), a startup task prints SGLang-like log lines through the load, CUDA-graph and
warmup phases, and an engine task runs `BatchScheduler` steps against absolute wall-clock
deadlines (a step's modelled duration, divided by `--sim-time-scale`, after the previous one's
deadline; if the process falls behind by more than `MAX_CATCHUP_S` it re-bases and counts the
lag in `/server_info` instead of bursting tokens). Streams are woken by the engine every
`--stream-interval` tokens; chunk JSON is spliced from pre-escaped text so one process can
stream many thousands of chunks per second.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import shlex
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from tokenizers import Tokenizer

from moe_tui.sim import SIM_VERSION
from moe_tui.sim.args import (
    DEFAULT_CHUNKED_PREFILL_SIZE,
    DEFAULT_CONTEXT_LENGTH,
    DEFAULT_MAX_RUNNING_REQUESTS,
)
from moe_tui.sim.model import BatchScheduler, SeqState, load_backends, perf_for

TOKENIZER_DIR = Path(__file__).with_name("tokenizer")
MAX_CATCHUP_S = 0.05
HEALTH_CHECK_TIMEOUT_S = 20.0
DECODE_LOG_INTERVAL = 40
TOKEN_POOL_SIZE = 4_000_000  # modelled KV slots, only for `token_usage`
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling default
SIMULATED_SUFFIX = " (simulated)"
# Backends that make SGLang turn shared-experts fusion off (SGLANG.md).
DISABLES_SHARED_EXPERTS_FUSION = ("flashinfer_cutedsl", "flashinfer_trtllm")


class BadRequest(Exception):
    """A client error to answer with HTTP 400."""


# ---------------------------------------------------------------------------------------------
# Logging: SGLang-looking lines on stdout, flushed per line so a parent sees them live.


def log(message: str, prefix: str = "", level: str = "") -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    lvl = f" {level}" if level else ""
    sys.stdout.write(f"[{stamp}{prefix}]{lvl} {message}\n")
    sys.stdout.flush()


def log_raw(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# Output text: one long pseudo-random token stream, pre-decoded and pre-escaped once.


class TextBank:
    """Token ids a request 'generates' and their decoded text, sliced rather than rebuilt.

    Every request reads a window of one seeded stream of ids. The tokenizer decodes WordLevel
    ids by joining words with single spaces, so the decoded text of a window is a slice of one
    long string of " word" pieces (minus the first space); JSON escaping is done once up front.
    """

    SIZE = 1 << 17

    def __init__(self, tokenizer: Tokenizer, seed: int = 0) -> None:
        vocab = tokenizer.get_vocab()
        specials = {"<unk>", "<s>", "</s>", "<pad>"}
        words = sorted((i, w) for w, i in vocab.items() if w not in specials)
        rng = random.Random(seed)
        self.ids = [words[rng.randrange(len(words))][0] for _ in range(self.SIZE)]
        by_id = dict(words)
        text_parts = [json.dumps(" " + by_id[i])[1:-1] for i in self.ids]
        id_parts = [f"{i}," for i in self.ids]
        self.text = "".join(text_parts)
        self.id_csv = "".join(id_parts)
        self.text_pos = [0]
        self.id_pos = [0]
        for t, d in zip(text_parts, id_parts):
            self.text_pos.append(self.text_pos[-1] + len(t))
            self.id_pos.append(self.id_pos[-1] + len(d))

    def _slices(self, offset: int, count: int, data: str, pos: list[int]) -> str:
        parts = []
        while count > 0:
            take = min(count, self.SIZE - offset)
            parts.append(data[pos[offset]:pos[offset + take]])
            count -= take
            offset = 0
        return "".join(parts)

    def text_json(self, offset: int, count: int) -> str:
        """JSON-escaped decoded text of `count` tokens from `offset` (no surrounding quotes)."""
        return self._slices(offset, count, self.text, self.text_pos)[1:]

    def ids_csv(self, offset: int, count: int) -> str:
        return self._slices(offset, count, self.id_csv, self.id_pos)[:-1]

    def token_ids(self, offset: int, count: int) -> list[int]:
        return [self.ids[(offset + i) % self.SIZE] for i in range(count)]


# ---------------------------------------------------------------------------------------------
# Metrics


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: list[float]) -> None:
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.sum += value * times
        self.count += times
        for i, le in enumerate(self.buckets):
            if value <= le:
                self.counts[i] += times
                break

    def render(self, labels: str) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for le, c in zip(self.buckets, self.counts):
            running += c
            out.append(f'{self.name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f'{self.name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{self.name}_sum{{{labels}}} {self.sum}")
        out.append(f"{self.name}_count{{{labels}}} {self.count}")
        return out


LATENCY_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                   80.0, 120.0, 160.0, 240.0, 480.0, 960.0, 1920.0, 3840.0]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
               0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]


@dataclass
class Metrics:
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    num_requests_total: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(
        "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
        LATENCY_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(
        "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
        ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(
        "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
        LATENCY_BUCKETS))


# ---------------------------------------------------------------------------------------------
# Per-request state shared by the engine and the HTTP handler


@dataclass(eq=False)
class ReqState:
    seq: SeqState
    text_offset: int
    started: float
    event: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False
    first_token_time: float = 0.0
    finish_time: float = 0.0
    ordinal: int = 0  # 1-based count of generation requests (0 for health checks)


# ---------------------------------------------------------------------------------------------


class SimServer:
    """The emulated SGLang server: resolved args, engine loop, HTTP routes, faults."""

    def __init__(self, args: Any, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.requested_backend = args.moe_runner_backend
        self.resolved_backend, self.backend_notes = self._resolve_backend()
        backends = load_backends(args.sim_backends_file)
        self.perf = perf_for(self.resolved_backend, backends)
        self.served_model_name = self._served_name()
        self.max_running = args.max_running_requests or DEFAULT_MAX_RUNNING_REQUESTS
        self.chunked_prefill = (args.chunked_prefill_size if args.chunked_prefill_size is not None
                                else DEFAULT_CHUNKED_PREFILL_SIZE)
        self.context_length = args.context_length or DEFAULT_CONTEXT_LENGTH
        self.random_seed = args.random_seed if args.random_seed is not None else 0
        self.disable_shared_experts_fusion = (args.disable_shared_experts_fusion
                                              or self.resolved_backend
                                              in DISABLES_SHARED_EXPERTS_FUSION)
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
        self.noise_rng = random.Random(self.sim_seed)
        self.error_rng = random.Random(self.sim_seed + 1)
        self.time_scale = args.sim_time_scale
        self.zero_delay = args.sim_zero_delay
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
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []

    # -- resolution ------------------------------------------------------------------------

    def _resolve_backend(self) -> tuple[str, list[tuple[str, str]]]:
        a = self.args
        notes: list[tuple[str, str]] = []
        backend = a.moe_runner_backend
        if backend == "auto" and (a.quantization or "").startswith("modelopt_fp4"):
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

    def _served_name(self) -> str:
        name = self.args.served_model_name or self.args.model_path
        return name if "simulated" in name.lower() else name + SIMULATED_SUFFIX

    def server_args_dict(self) -> dict[str, Any]:
        a = self.args
        return {
            "model_path": a.model_path,
            "tokenizer_path": str(TOKENIZER_DIR),
            "served_model_name": self.served_model_name,
            "host": a.host,
            "port": a.port,
            "tp_size": a.tp_size,
            "ep_size": a.ep_size,
            "dp_size": 1,
            "moe_runner_backend": self.resolved_backend,
            "moe_a2a_backend": "none",
            "quantization": a.quantization,
            "attention_backend": a.attention_backend,
            "kv_cache_dtype": a.kv_cache_dtype,
            "trust_remote_code": a.trust_remote_code,
            "mem_fraction_static": a.mem_fraction_static if a.mem_fraction_static else 0.85,
            "max_running_requests": self.max_running,
            "chunked_prefill_size": self.chunked_prefill,
            "stream_interval": a.stream_interval,
            "cuda_graph_max_bs_decode": a.cuda_graph_max_bs_decode,
            "cuda_graph_max_bs_prefill": a.cuda_graph_max_bs_prefill,
            "disable_cuda_graph": a.disable_cuda_graph,
            "disable_shared_experts_fusion": self.disable_shared_experts_fusion,
            "enable_metrics": a.enable_metrics,
            "log_level": a.log_level,
            "random_seed": self.random_seed,
            "context_length": self.context_length,
            "dist_init_addr": a.dist_init_addr,
            "nnodes": a.nnodes,
            "node_rank": a.node_rank,
            "disable_radix_cache": False,
        }

    def sim_settings(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self.args).items() if k.startswith("sim_")} | {
            "requested_moe_runner_backend": self.requested_backend,
            "perf_row": self.perf.name,
            "sim_seed": self.sim_seed,  # the seed in force, drawn at start when none was given
        }

    # -- engine ----------------------------------------------------------------------------

    def submit(self, prompt_len: int, max_new_tokens: int, rid: str, ordinal: int) -> ReqState:
        seq = SeqState(rid, prompt_len, max_new_tokens)
        offset = (hash(rid) & 0x7FFFFFFF) % TextBank.SIZE
        st = ReqState(seq, offset, time.monotonic(), ordinal=ordinal)
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

    def _step_seconds(self, decode_batch: int, prefill_tokens: int) -> float:
        if self.zero_delay:
            return 0.0
        ms = self.perf.step_ms(decode_batch, prefill_tokens)
        if self.args.sim_jit_stall_ms and decode_batch > 0:
            bucket = 1 << (decode_batch - 1).bit_length()
            if bucket not in self.seen_jit_buckets:
                self.seen_jit_buckets.add(bucket)
                ms += self.args.sim_jit_stall_ms
                log(f"JIT compiling MoE kernels for batch bucket {bucket} "
                    f"(SIMULATED stall {self.args.sim_jit_stall_ms:.0f} ms)", " TP0")
        if self.args.sim_noise_pct:
            ms *= max(0.2, 1.0 + self.noise_rng.gauss(0.0, self.args.sim_noise_pct / 100.0))
        if self.args.sim_drift_pct_per_min and self.ready_at:
            minutes = (time.monotonic() - self.ready_at) / 60.0
            ms *= max(0.2, 1.0 + self.args.sim_drift_pct_per_min / 100.0 * minutes)
        return ms / 1000.0 / self.time_scale

    async def engine_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        deadline = loop.time()
        while True:
            if not self.sched.has_work():
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
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
            self._emit(plan, wall)

    def _emit(self, plan: Any, wall: float) -> None:
        now = time.monotonic()
        k = plan.index
        interval = self.stream_interval
        m = self.metrics
        new_tokens = plan.decode_batch + len(plan.first_token)
        m.generation_tokens_total += new_tokens
        m.prompt_tokens_total += sum(s.prompt_len for s in plan.first_token)
        if plan.decode_batch:
            m.itl.observe(wall, plan.decode_batch)
        for seq in plan.first_token:
            st: ReqState = seq.payload  # type: ignore[assignment]
            st.first_token_time = now
            m.ttft.observe(now - st.started)
            if seq.finish_step > k:
                self.buckets[(k - 1) % interval][id(st)] = st
            st.event.set()
        if plan.decode_batch:
            for st in self.buckets[k % interval].values():
                st.event.set()
        for seq in plan.finished:
            st = seq.payload  # type: ignore[assignment]
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
        self._steps_since_log += 1
        if plan.prefill_tokens and now - self._last_prefill_log >= 1.0:
            self._last_prefill_log = now
            log(f"Prefill batch, #new-seq: {len(plan.first_token)}, #new-token: "
                f"{plan.prefill_tokens}, #cached-token: 0, token usage: {self.token_usage():.2f}, "
                f"#running-req: {self.sched.num_running}, #queue-req: {self.sched.num_waiting}",
                " TP0")
        if (plan.decode_batch and self._steps_since_log >= DECODE_LOG_INTERVAL
                and now - self._last_decode_log >= 1.0):
            self._steps_since_log = 0
            self._last_decode_log = now
            log(f"Decode batch, #running-req: {plan.decode_batch}, #token: {self.used_tokens()}, "
                f"token usage: {self.token_usage():.2f}, cuda graph: "
                f"{not self.args.disable_cuda_graph}, gen throughput (token/s): "
                f"{self.last_gen_throughput:.2f}, #queue-req: {self.sched.num_waiting}", " TP0")

    def used_tokens(self) -> int:
        k = self.completed_step
        total = 0
        for seq in self.sched.decoding.values():
            total += seq.prompt_len + seq.tokens_at(k)
        for seq in self.sched.prefilling:
            total += seq.prompt_len - seq.prefill_left
        return total

    def token_usage(self) -> float:
        return min(1.0, self.used_tokens() / TOKEN_POOL_SIZE)

    # -- startup ---------------------------------------------------------------------------

    async def startup(self) -> None:
        a = self.args
        t0 = time.monotonic()
        log_raw("=" * 78)
        log_raw(f"  SIMULATED SGLang server (moe-tui emulator {SIM_VERSION}): no GPU, no model.")
        log_raw("  Every number it produces comes from a performance model, not hardware.")
        log_raw("=" * 78)
        args_repr = ", ".join(f"{k}={v!r}" for k, v in self.server_args_dict().items())
        log(f"server_args=ServerArgs({args_repr})")
        for level, note in self.backend_notes:
            log(note, level="WARNING server_args.py:" if level == "WARNING" else "")
        if self.disable_shared_experts_fusion and not a.disable_shared_experts_fusion:
            log(f"Disable shared experts fusion for moe_runner_backend="
                f"'{self.resolved_backend}'.")
        log(f"Init torch distributed begin. tp_size={a.tp_size}, ep_size={a.ep_size}", " TP0")
        log("Load weight begin. avail mem=94.50 GB", " TP0")
        load = a.sim_load_seconds + a.sim_slow_start
        if a.sim_slow_start:
            log(f"Loading safetensors checkpoint shards is slow (SIMULATED slow start: "
                f"+{a.sim_slow_start:.1f} s)", " TP0")
        if a.sim_startup_hang:
            log("Loading safetensors checkpoint shards: 0% Completed | 0/80 [00:00<?, ?it/s]",
                " TP0")
            await asyncio.Event().wait()  # SIMULATED hang: never finishes loading
        await asyncio.sleep(load)
        t1 = time.monotonic()
        self.startup_time["load_weight"] = t1 - t0
        log(f"Load weight end. elapsed={t1 - t0:.2f} s, type=GlmMoeDsaForCausalLM, "
            f"dtype=torch.bfloat16, avail mem=38.20 GB, mem usage=56.30 GB.", " TP0")
        log(f"KV Cache is allocated. #tokens: {TOKEN_POOL_SIZE}, K size: 9.80 GB, V size: 9.80 GB",
            " TP0")
        self.startup_time["kv_cache_allocation"] = 0.0
        if a.disable_cuda_graph:
            self.startup_time["cuda_graph"] = 0.0
        else:
            bs = a.cuda_graph_max_bs_decode or min(self.max_running, 512)
            log(f"Capture cuda graph begin. This can take up to several minutes. avail mem=18.10 GB"
                f" (max bs {bs})", " TP0")
            await asyncio.sleep(a.sim_graph_seconds)
            t2 = time.monotonic()
            self.startup_time["cuda_graph"] = t2 - t1
            log(f"Capture cuda graph end. Time elapsed: {t2 - t1:.2f} s. mem usage=2.10 GB. "
                f"avail mem=16.00 GB.", " TP0")
        total = time.monotonic() - t0
        self.startup_time["total"] = total
        timings = ", ".join(f"{k}={v:.2f}" for k, v in self.startup_time.items())
        log(f"Engine startup timings (s): {timings}")
        log(f"max_total_num_tokens={TOKEN_POOL_SIZE}, chunked_prefill_size="
            f"{self.chunked_prefill}, max_prefill_tokens=16384, max_running_requests="
            f"{self.max_running}, context_len={self.context_length}", " TP0")
        log_raw(f"INFO:     Started server process [{os.getpid()}]")
        log_raw("INFO:     Waiting for application startup.")
        log_raw("INFO:     Application startup complete.")
        log_raw(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        await asyncio.sleep(a.sim_warmup_seconds)
        self.startup_time["warmup"] = a.sim_warmup_seconds
        log_raw('INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
        self.state = "ready"
        self.ready_at = time.monotonic()
        log("The server is fired up and ready to roll!")

    # -- faults ----------------------------------------------------------------------------

    def _maybe_crash(self, st: ReqState) -> None:
        n = self.args.sim_crash_after_requests
        if n is not None and st.ordinal >= n:
            log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access "
                f"was encountered (SIMULATED crash after {n} requests)", " TP0", "ERROR")
            asyncio.get_running_loop().call_later(0.02, os._exit, 1)

    def _error_draw(self) -> bool:
        rate = self.args.sim_error_rate
        return rate > 0 and self.error_rng.random() < rate

    # -- HTTP helpers ----------------------------------------------------------------------

    @staticmethod
    def _native_error(message: str, status: int = 400) -> web.Response:
        return web.json_response({"error": {"message": message}}, status=status)

    @staticmethod
    def _openai_error(message: str, status: int = 400) -> web.Response:
        kind = "BadRequestError" if status == 400 else "InternalServerError"
        return web.json_response({"object": "error", "message": message, "type": kind,
                                  "param": None, "code": status}, status=status)

    @staticmethod
    async def _json_body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("Request body must be a JSON object")
        return body

    def _not_ready(self) -> str | None:
        if self.state == "loading":
            return "The server is not ready yet (SIMULATED: still starting up)."
        if self.state == "draining":
            return "The server is shutting down."
        return None

    def _prompt_len_from_text(self, text: Any, where: str) -> int:
        if not isinstance(text, str):
            raise BadRequest(f"{where} must be a string (batched requests are not emulated)")
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    @staticmethod
    def _prompt_len_from_ids(ids: Any, where: str) -> int:
        # type() is exact (rejects bool); min() after it keeps this cheap for long prompts.
        if (not isinstance(ids, list) or not all(type(i) is int for i in ids)
                or (ids and min(ids) < 0)):
            raise BadRequest(f"{where} must be a list of non-negative integer token ids "
                             "(batched requests are not emulated)")
        return len(ids)

    def _check_lengths(self, prompt_len: int, max_new: int) -> None:
        if prompt_len == 0:
            raise BadRequest("The input is empty: prompt has 0 tokens.")
        if prompt_len + max_new > self.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.context_length} tokens. You requested a total of {prompt_len + max_new} "
                f"tokens: {prompt_len} tokens from the input messages and {max_new} tokens for "
                f"the completion. Please reduce the number of tokens in the input messages or "
                f"the completion to fit within the limit.")

    @staticmethod
    def _int_param(value: Any, name: str, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(f"{name} must be a non-negative integer, got {value!r}")
        return value

    @staticmethod
    def _check_temperature(value: Any, name: str) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise BadRequest(f"{name} must be a non-negative number, got {value!r}")

    # -- generation routes -----------------------------------------------------------------

    def _parse_generate(self, body: dict[str, Any]) -> tuple[int, int, bool, str]:
        has_text = body.get("text") is not None
        has_ids = body.get("input_ids") is not None
        if has_text == has_ids:
            raise BadRequest("Either text or input_ids should be provided (exactly one).")
        prompt_len = (self._prompt_len_from_text(body["text"], "text") if has_text
                      else self._prompt_len_from_ids(body["input_ids"], "input_ids"))
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be a JSON object")
        max_new = self._int_param(sp.get("max_new_tokens"), "sampling_params.max_new_tokens",
                                  DEFAULT_MAX_NEW_TOKENS)
        self._check_temperature(sp.get("temperature"), "sampling_params.temperature")
        if "ignore_eos" in sp and not isinstance(sp["ignore_eos"], bool):
            raise BadRequest("sampling_params.ignore_eos must be a boolean")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be a boolean")
        rid = body.get("rid") or uuid.uuid4().hex
        if not isinstance(rid, str):
            raise BadRequest("rid must be a string")
        self._check_lengths(prompt_len, max_new)
        return prompt_len, max_new, stream, rid

    def _native_chunk(self, st: ReqState, n: int, final: bool) -> str:
        seq = st.seq
        finish = f'{{"type":"length","length":{n}}}' if final else "null"
        e2e = f',"e2e_latency":{time.monotonic() - st.started:.6f}' if final else ""
        return (f'{{"text":"{self.bank.text_json(st.text_offset, n)}","output_ids":['
                f'{self.bank.ids_csv(st.text_offset, n)}],"meta_info":{{"id":"{seq.rid}",'
                f'"finish_reason":{finish},"prompt_tokens":{seq.prompt_len},'
                f'"weight_version":"default","completion_tokens":{n},"cached_tokens":0{e2e}}}}}')

    async def handle_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._json_body(request)
            prompt_len, max_new, stream, rid = self._parse_generate(body)
        except BadRequest as exc:
            return self._native_error(str(exc))
        reason = self._not_ready()
        if reason:
            return self._native_error(reason, 503)
        if self._error_draw():
            return self._native_error("Internal server error (SIMULATED: --sim-error-rate)", 500)
        self.requests_started += 1
        st = self.submit(prompt_len, max_new, rid, self.requests_started)
        if not stream:
            return await self._generate_whole(request, st)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return await self._stream(request, resp, st, self._native_stream_chunks)

    async def _generate_whole(self, request: web.Request, st: ReqState) -> web.Response:
        try:
            while not st.finished:
                await st.event.wait()
                st.event.clear()
                if st.seq.tokens_at(self.completed_step) >= 1:
                    self._maybe_crash(st)
        except asyncio.CancelledError:
            self.abort(st)
            raise
        n = st.seq.max_new_tokens
        return web.Response(text=self._native_chunk(st, n, True),
                            content_type="application/json")

    async def _native_stream_chunks(self, st: ReqState, n: int, final: bool,
                                    sent_text_len: int) -> tuple[bytes, int]:
        return ("data: " + self._native_chunk(st, n, final) + "\n\n").encode(), 0

    async def _stream(self, request: web.Request, resp: web.StreamResponse, st: ReqState,
                      make_chunk: Any, tail: bytes = b"") -> web.StreamResponse:
        cut = self.args.sim_cut_stream_after_tokens
        hang = self.args.sim_hang_after_tokens
        sent = 0
        text_len = 0
        crashed_checked = False
        try:
            while True:
                await st.event.wait()
                st.event.clear()
                final = st.finished
                n = st.seq.max_new_tokens if final else st.seq.tokens_at(self.completed_step)
                if cut is not None and n > cut and not final:
                    n = max(cut, sent)
                if hang is not None and n > hang and not final:
                    n = max(hang, sent)
                if n > sent or final:
                    chunk, text_len = await make_chunk(st, n, final, text_len)
                    await resp.write(chunk)
                    sent = n
                if not crashed_checked and sent >= 1:
                    crashed_checked = True
                    self._maybe_crash(st)
                if cut is not None and sent >= cut and not final:
                    self.abort(st)
                    log(f"SIMULATED stream cut after {sent} tokens (rid={st.seq.rid})", " TP0")
                    if request.transport is not None:
                        request.transport.close()
                    return resp
                if hang is not None and sent >= hang and not final:
                    self.abort(st)
                    log(f"SIMULATED stream hang after {sent} tokens (rid={st.seq.rid})", " TP0")
                    while request.transport is not None and not request.transport.is_closing():
                        await asyncio.sleep(0.5)
                    return resp
                if final:
                    break
            if tail:
                await resp.write(tail)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.abort(st)
            raise
        return resp

    def _parse_completions(self, body: dict[str, Any]) -> tuple[int, int, bool, bool]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_len = self._prompt_len_from_text(prompt, "prompt")
        elif isinstance(prompt, list):
            prompt_len = self._prompt_len_from_ids(prompt, "prompt")
        else:
            raise BadRequest("prompt must be a string or a list of token ids")
        max_new = self._int_param(body.get("max_tokens"), "max_tokens", 16)
        self._check_temperature(body.get("temperature"), "temperature")
        if body.get("n", 1) != 1:
            raise BadRequest("n > 1 is not emulated")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be a boolean")
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise BadRequest("stream_options must be a JSON object")
        self._check_lengths(prompt_len, max_new)
        return prompt_len, max_new, stream, bool(opts.get("include_usage"))

    async def handle_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await self._json_body(request)
            prompt_len, max_new, stream, include_usage = self._parse_completions(body)
        except BadRequest as exc:
            return self._openai_error(str(exc))
        reason = self._not_ready()
        if reason:
            return self._openai_error(reason, 503)
        if self._error_draw():
            return self._openai_error("Internal server error (SIMULATED: --sim-error-rate)", 500)
        self.requests_started += 1
        rid = uuid.uuid4().hex
        st = self.submit(prompt_len, max_new, rid, self.requests_started)
        created = int(time.time())
        model = self.served_model_name
        head = {"id": rid, "object": "text_completion", "created": created, "model": model}
        if not stream:
            await self._generate_whole(request, st)
            text = json.loads(f'"{self.bank.text_json(st.text_offset, max_new)}"')
            return web.json_response(head | {
                "choices": [{"index": 0, "text": text, "logprobs": None,
                             "finish_reason": "length", "matched_stop": None}],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": max_new,
                          "total_tokens": prompt_len + max_new, "prompt_tokens_details": None},
            })
        head_json = json.dumps(head)[:-1]

        async def chunk(st: ReqState, n: int, final: bool, sent_len: int) -> tuple[bytes, int]:
            full = self.bank.text_json(st.text_offset, n)
            finish = '"length"' if final else "null"
            data = (f'{head_json}, "choices": [{{"index": 0, "text": "{full[sent_len:]}", '
                    f'"logprobs": null, "finish_reason": {finish}, "matched_stop": null}}], '
                    f'"usage": null}}')
            return ("data: " + data + "\n\n").encode(), len(full)

        tail = b""
        if include_usage:
            usage = {"prompt_tokens": prompt_len, "completion_tokens": max_new,
                     "total_tokens": prompt_len + max_new, "prompt_tokens_details": None}
            tail = ("data: " + json.dumps(head | {"choices": [], "usage": usage}) + "\n\n").encode()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return await self._stream(request, resp, st, chunk, tail)

    # -- status routes ---------------------------------------------------------------------

    async def handle_health(self, request: web.Request) -> web.Response:
        if self._not_ready():
            return web.Response(status=503)
        st = self.submit(1, 1, "HEALTH_CHECK_" + uuid.uuid4().hex, 0)
        try:
            await asyncio.wait_for(self._wait_finished(st), HEALTH_CHECK_TIMEOUT_S)
        except asyncio.TimeoutError:
            self.abort(st)
            log(f"Health check failed. Server couldn't get a response from detokenizer for last "
                f"{HEALTH_CHECK_TIMEOUT_S:.0f} seconds.", level="ERROR")
            return web.Response(status=503)
        return web.Response(status=200)

    @staticmethod
    async def _wait_finished(st: ReqState) -> None:
        while not st.finished:
            await st.event.wait()
            st.event.clear()

    async def handle_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.served_model_name, "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": self.args.model_path,
            "max_model_len": self.context_length}]})

    async def handle_model_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.args.model_path,
            "tokenizer_path": str(TOKENIZER_DIR),
            "served_model_name": self.served_model_name,
            "architectures": ["GlmMoeDsaForCausalLM"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "simulated": True,
        })

    def internal_state(self) -> dict[str, Any]:
        return {
            "last_gen_throughput": round(self.last_gen_throughput, 3),
            "num_running_reqs": self.sched.num_running,
            "num_queue_reqs": self.sched.num_waiting,
            "token_usage": round(self.token_usage(), 6),
            "memory_usage": {"weight": 56.3, "kvcache": 19.6, "token_capacity": TOKEN_POOL_SIZE,
                             "graph": 2.1},
            "avg_spec_accept_length": None,
            "sim_engine_steps": self.sched.step_index,
            "sim_engine_lag_s": round(self.engine_lag_s, 6),
            "sim_engine_lag_events": self.engine_lag_events,
        }

    async def handle_server_info(self, request: web.Request) -> web.Response:
        launch = shlex.join(["python", "-m", "sglang.launch_server", *self.argv])
        return web.json_response(self.server_args_dict() | {
            "launch_command": launch,
            "version": SIM_VERSION,
            "startup_time": dict(self.startup_time),
            "status": self.state,
            "internal_states": [self.internal_state()],
            "simulated": True,
            "sim": self.sim_settings(),
        })

    async def handle_flush_cache(self, request: web.Request) -> web.Response:
        timeout = request.query.get("timeout")
        try:
            wait_s = float(timeout) if timeout is not None else 0.0
        except ValueError:
            return web.Response(status=400, text=f"Invalid timeout {timeout!r}\n")
        deadline = time.monotonic() + wait_s
        while self.sched.has_work() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        ok = not self.sched.has_work()
        if ok:
            log("Cache flushed successfully!", " TP0")
        return web.Response(
            status=200 if ok else 400,
            text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                 "running or waiting requests, the operation will not be performed.)\n")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        name = self.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
        labels = f'model_name="{name}",engine_type="unified",tp_rank="0",pp_rank="0"'
        m = self.metrics
        lines: list[str] = []

        def gauge(metric: str, help_text: str, value: float) -> None:
            lines.extend([f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge",
                          f"{metric}{{{labels}}} {value}"])

        def counter(metric: str, help_text: str, value: float) -> None:
            lines.extend([f"# HELP {metric} {help_text}", f"# TYPE {metric} counter",
                          f"{metric}{{{labels}}} {value}"])

        gauge("sglang:num_running_reqs", "The number of running requests.", self.sched.num_running)
        gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
              self.sched.num_waiting)
        gauge("sglang:num_used_tokens", "The number of used tokens.", self.used_tokens())
        gauge("sglang:token_usage", "The token usage.", round(self.token_usage(), 6))
        gauge("sglang:gen_throughput", "The generation throughput (token/s).",
              round(self.last_gen_throughput, 3))
        gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0)
        counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                m.prompt_tokens_total)
        counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                m.generation_tokens_total)
        counter("sglang:num_requests_total", "Number of requests processed.", m.num_requests_total)
        for hist in (m.ttft, m.itl, m.e2e):
            lines.extend(hist.render(labels))
        return web.Response(text="\n".join(lines) + "\n",
                            content_type="text/plain", charset="utf-8")

    # -- app -------------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        from moe_tui.sim.outputs import greedy_outputs_middleware  # /generate with return_logprob

        app.middlewares.append(greedy_outputs_middleware(self.args, self._not_ready))
        r = app.router
        r.add_route("POST", "/generate", self.handle_generate)
        r.add_route("PUT", "/generate", self.handle_generate)
        r.add_post("/v1/completions", self.handle_completions)
        r.add_get("/health", self.handle_health)
        r.add_get("/health_generate", self.handle_health)
        r.add_get("/v1/models", self.handle_models)
        r.add_get("/model_info", self.handle_model_info)
        r.add_get("/get_model_info", self.handle_model_info)
        r.add_get("/server_info", self.handle_server_info)
        r.add_get("/get_server_info", self.handle_server_info)
        r.add_route("*", "/flush_cache", self.handle_flush_cache)
        if self.args.enable_metrics:
            r.add_get("/metrics", self.handle_metrics)
        return app

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stop = loop.create_future()
        runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.args.host, self.args.port, backlog=4096,
                           reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            log(f"Failed to bind {self.args.host}:{self.args.port}: {exc}", level="ERROR")
            await runner.cleanup()
            return 1
        for sig, how in ((signal.SIGTERM, "term"), (signal.SIGINT, "int")):
            loop.add_signal_handler(sig, self._on_signal, how)
        self._tasks = [asyncio.create_task(self.engine_loop()),
                       asyncio.create_task(self.startup())]
        code = await self._stop
        for task in self._tasks:
            task.cancel()
        await runner.cleanup()
        return code

    def _on_signal(self, how: str) -> None:
        assert self._stop is not None
        if self._stop.done():
            return
        if how == "int":
            log("Received SIGINT, exiting.")
            self._stop.set_result(0)
            return
        log("Received sigterm, shutting down gracefully (draining in-flight requests).")
        self.state = "draining"
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + 5.0
        while self.sched.has_work() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert self._stop is not None
        if not self._stop.done():
            self._stop.set_result(0)


def run_server(args: Any, argv: list[str]) -> int:
    server = SimServer(args, argv)
    return asyncio.run(server.serve())
