"""The emulator's startup: SGLang's log lines through load, KV allocation, CUDA graphs and warmup,
the process tree spawned before the load, GPU memory filling as each phase passes.

Log wording follows SGLang 0.5.23 (srt/model_executor/model_runner.py: "Load weight begin/end";
srt/mem_cache/kv_cache_configurator.py: "Memory pool end"; srt/model_executor/
model_runner_components/cuda_graph_setup.py: "Capture target decode CUDA graph begin/end";
srt/entrypoints/http_server.py: "The server is fired up and ready to roll!"); moe-tui's lifecycle
reads its phases from them (see docs/emulator.md). The HTTP port opens only once the engine is up
(weights, KV pool, autotune and CUDA graphs done), as SGLang's http_server.py starts uvicorn after
the engine's launch returns; warmup runs with the port open and /health_generate answering 503.
Failures follow sim/failure.py (the child's error, then the parent's kill of its tree).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from moe_tui.sim import SIM_VERSION
from moe_tui.sim.engine import SimEngine
from moe_tui.sim.failure import child_failed, maybe_startup_fault
from moe_tui.sim.memory import WEIGHTS_GIB
from moe_tui.sim.output import log, log_raw
from moe_tui.sim.server_info import server_args

T = TypeVar("T")
LOAD_PROGRESS_EVERY_S = 0.5  # a bar update this often (tqdm refreshes at most every 0.1 s; shards take longer)
SHARDS = 80
LOAD_DESC = "Loading safetensors checkpoint shards"


def _interval(seconds: float) -> str:
    """tqdm's format_interval: mm:ss (h:mm:ss past an hour)."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def load_bar(done: int, elapsed: float, total: int = SHARDS) -> str:
    """One update of SGLang's weight-load bar (model_loader/weight_utils.py's tqdm, bar format
    "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]")."""
    if done <= 0 or elapsed <= 0:
        remaining, rate = "?", "?it/s"
    else:
        per = done / elapsed
        remaining = _interval((total - done) / per)
        rate = f"{per:5.2f}it/s" if per >= 1 else f"{1 / per:5.2f}s/it"
    return f"{LOAD_DESC}: {100 * done / total:3.0f}% Completed | {done}/{total} [{_interval(elapsed)}<{remaining}, {rate}]"


def _bar(text: str, end: str = "") -> None:
    """A tqdm refresh: carriage return, the bar, no newline (one newline when the bar closes); to
    stderr, as tqdm writes."""
    sys.stderr.write("\r" + text + end)
    sys.stderr.flush()


async def _load_weights(engine: SimEngine, seconds: float) -> None:
    """Sleep through the load phase while the simulated GPUs' memory fills with weights, printing
    the checkpoint-shard progress bar a real load prints: `\r` updates and one newline at the end."""
    board = engine.board
    board.mem_phase = "loading"
    steps = max(1, int(seconds / 0.1))
    began = last_update = time.monotonic()
    _bar(load_bar(0, 0.0))
    for i in range(steps):
        await asyncio.sleep(seconds / steps)
        board.load_progress = (i + 1) / steps
        if time.monotonic() - last_update >= LOAD_PROGRESS_EVERY_S and i + 1 < steps:
            last_update = time.monotonic()
            _bar(load_bar(int(SHARDS * board.load_progress), last_update - began))
    final = load_bar(SHARDS, time.monotonic() - began)
    _bar(final)  # tqdm's close: the last refresh, then the newline
    _bar(final, "\n")


def _banner(engine: SimEngine) -> None:
    a = engine.args
    log_raw("=" * 78)
    log_raw(f"  SIMULATED SGLang server (moe-tui emulator {SIM_VERSION}): no GPU, no model.")
    log_raw("  Every number it produces comes from a performance model, not hardware.")
    log_raw("=" * 78)
    args_repr = ", ".join(f"{k}={v!r}" for k, v in server_args(engine).items())
    log(f"server_args=ServerArgs({args_repr})")
    for level, note in engine.backend_notes:
        log(note, level="WARNING server_args.py:" if level == "WARNING" else "")
    if not a.attention_backend:  # srt/arg_groups/model_overrides/deepseek_v2.py
        log("Use dsa attention backend for DeepSeek with DSA.")
    log("WARNING Setting page size to 64 for DeepSeek DSA.")
    if a.kv_cache_dtype == "auto":  # srt/arg_groups/overrides.py
        log(f"WARNING Setting KV cache dtype to {engine.kv_cache_dtype} for DeepSeek DSA on SM{engine.gpu.sm_major} "
            "device.")
    if engine.disable_shared_experts_fusion and not a.disable_shared_experts_fusion:
        log(f"Disable shared experts fusion for moe_runner_backend='{engine.resolved_backend}'.")


async def _spawn_children(engine: SimEngine) -> None:
    loop = asyncio.get_running_loop()
    try:
        pids = await loop.run_in_executor(None, engine.children.start)
    except (OSError, RuntimeError) as exc:
        # SGLang exits when a scheduler dies during init; so does the emulator (never hangs).
        log(f"Scheduler process failed to start: {exc} (SIMULATED)", engine.prefix, "ERROR")
        await loop.run_in_executor(None, engine.children.stop)
        os._exit(1)
    engine.board.set_holders(pids)
    engine.board.mem_phase = "context"
    titles = ", ".join(f"{p}" for p in engine.children.pids)
    log(f"Started {len(pids)} scheduler process(es) and the detokenizer (SIMULATED, pids {titles}) "
        f"on GPU(s) {','.join(map(str, engine.gpu_indices))}")


async def _load_and_pool(engine: SimEngine, t0: float) -> float:
    a, prefix = engine.args, engine.prefix
    maybe_startup_fault(engine, "distributed")  # 0.5.23 prints no line of its own for it
    log(f"Load weight begin. avail mem={engine.memory.mem_total_bytes / 2**30:.2f} GB", prefix)
    load = a.sim_load_seconds + a.sim_slow_start
    if a.sim_slow_start:
        log(f"Loading safetensors checkpoint shards is slow (SIMULATED slow start: "
            f"+{a.sim_slow_start:.1f} s)", prefix)
    if a.sim_startup_hang:
        _bar(load_bar(0, 0.0))
        await asyncio.Event().wait()  # SIMULATED hang: never finishes loading, prints nothing more
    await _load_weights(engine, load)
    maybe_startup_fault(engine, "load")
    refusal = engine.nvfp4_refusal()
    if refusal:  # raised while building the MoE layers, i.e. during the load (modelopt_quant.py)
        child_failed(engine, refusal, running=False)
    t1 = time.monotonic()
    engine.startup_time["load_weight"] = t1 - t0
    avail = engine.memory.mem_total_bytes / 2**30 - WEIGHTS_GIB
    log(f"Load weight end. elapsed={t1 - t0:.2f} s, type=GlmMoeDsaForCausalLM, "
        f"dtype=torch.bfloat16, avail mem={avail:.2f} GB, mem usage={WEIGHTS_GIB:.2f} GB.", prefix)
    if engine.memory.max_total_num_tokens <= 0:
        child_failed(engine, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                     f"Current value: mem_fraction_static={engine.memory.mem_fraction}", running=False)
    engine.board.mem_phase = "kv"
    log(f"Memory pool end. avail mem={engine.memory.kv_gib:.2f} GB", prefix)
    engine.startup_time["kv_cache_allocation"] = 0.0
    return t1


async def _autotune_and_graphs(engine: SimEngine, t1: float) -> None:
    a, prefix = engine.args, engine.prefix
    if a.sim_autotune_seconds and engine.resolved_backend.startswith("flashinfer"):
        log("Running FlashInfer autotune with cache: ~/.cache/sglang/flashinfer/autotune (SIMULATED)", prefix)
        await asyncio.sleep(a.sim_autotune_seconds)
        engine.startup_time["autotune"] = a.sim_autotune_seconds
        log("FlashInfer autotune completed.", prefix)
    if a.disable_cuda_graph:
        engine.startup_time["cuda_graph"] = 0.0
        return
    bs = engine.decode_graph_max_bs or 0
    backend = engine.attention_backend
    log(f"Capture target decode CUDA graph begin. backend={backend}, num_tokens_per_req=1, "
        f"avail mem={engine.memory.kv_gib:.2f} GB (SIMULATED, max bs {bs})", prefix)
    await asyncio.sleep(a.sim_graph_seconds)
    maybe_startup_fault(engine, "graphs")
    t2 = time.monotonic()
    engine.startup_time["cuda_graph"] = t2 - t1
    engine.board.mem_phase = "graphs"
    log(f"Capture target decode CUDA graph end. bs=[1, 2, 4, 8, ..., {bs}], elapsed={t2 - t1:.2f} s, "
        f"mem usage=2.10 GB, avail mem={max(0.0, engine.memory.kv_gib - 2.1):.2f} GB.", prefix)


async def _init_parallel(engine: SimEngine, join: Callable[[SimEngine], Awaitable[T]]) -> T:
    """A multi-node start's rendezvous (sim/internode.py), between the lines 0.5.23 prints around it
    (distributed/bootstrap.py; printed on one node too, where the emulator has nothing to wait for
    and keeps its log as it was)."""
    log("Init parallel begin.", engine.prefix)
    tic = time.monotonic()
    joined = await join(engine)
    log(f"Init parallel ends. elapsed={time.monotonic() - tic:.2f} s", engine.prefix)
    return joined


async def follower_startup(engine: SimEngine, join: Callable[[SimEngine], Awaitable[T]]) -> T:
    """A non-zero node rank's start: its schedulers, the rendezvous, its share of the weights."""
    t0 = time.monotonic()
    _banner(engine)
    await _spawn_children(engine)
    joined = await _init_parallel(engine, join)
    log(f"Load weight begin. avail mem={engine.memory.mem_total_bytes / 2**30:.2f} GB", engine.prefix)
    await _load_weights(engine, engine.args.sim_load_seconds + engine.args.sim_slow_start)
    log(f"Load weight end. elapsed={time.monotonic() - t0:.2f} s, type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={engine.memory.mem_total_bytes / 2**30 - WEIGHTS_GIB:.2f} GB, mem usage={WEIGHTS_GIB:.2f} GB.",
        engine.prefix)
    return joined


async def startup(engine: SimEngine) -> None:
    a, prefix = engine.args, engine.prefix
    t0 = time.monotonic()
    _banner(engine)
    await _spawn_children(engine)
    if a.nnodes > 1:
        from moe_tui.sim.internode import host_rendezvous

        engine.peers = await _init_parallel(engine, host_rendezvous)
    t1 = await _load_and_pool(engine, t0)
    await _autotune_and_graphs(engine, t1)
    total = time.monotonic() - t0
    engine.startup_time["total"] = total
    timings = ", ".join(f"{k}={v:.2f}" for k, v in engine.startup_time.items())
    log(f"Engine startup timings (s): {timings}")
    log(f"max_total_num_tokens={engine.kv_pool}, chunked_prefill_size="
        f"{engine.chunked_prefill}, max_prefill_tokens=16384, max_running_requests="
        f"{engine.max_running}, context_len={engine.context_length}", prefix)
    assert engine.open_port is not None, "the HTTP side (routes.SimServer) sets open_port before startup"
    if not await engine.open_port():  # only now, as SGLang's uvicorn starts after the engine is up
        return
    if engine.peers is not None:
        engine.peers.send("ready")  # the followers' schedulers are up as well: their dummy health servers start
    log_raw(f"INFO:     Started server process [{os.getpid()}]")
    log_raw("INFO:     Waiting for application startup.")
    log_raw("INFO:     Application startup complete.")
    log_raw(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
    await asyncio.sleep(a.sim_warmup_seconds)
    engine.startup_time["warmup"] = a.sim_warmup_seconds
    log_raw('INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
    engine.state = "ready"
    engine.ready_at = time.monotonic()
    log("The server is fired up and ready to roll!")
    engine.fault_task = asyncio.get_running_loop().create_task(engine.gpu_faults())
