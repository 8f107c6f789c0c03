"""The emulator's startup: SGLang's log lines through load, KV allocation, CUDA graphs and warmup,
the process tree spawned at "Init torch distributed", GPU memory filling as each phase passes.

Log wording follows SGLang 0.5.23 (srt/model_executor/model_runner.py: "Load weight begin/end";
srt/mem_cache/kv_cache_configurator.py: "Memory pool end"; srt/model_executor/
model_runner_components/cuda_graph_setup.py: "Capture target decode CUDA graph begin/end";
srt/entrypoints/http_server.py: "The server is fired up and ready to roll!"); moe-tui's lifecycle
reads its phases from them (see docs/emulator.md).
"""

from __future__ import annotations

import asyncio
import os
import time

from moe_tui.sim import SIM_VERSION
from moe_tui.sim.engine import SimEngine
from moe_tui.sim.memory import WEIGHTS_GIB
from moe_tui.sim.output import log, log_raw


async def _load_weights(engine: SimEngine, seconds: float) -> None:
    """Sleep through the load phase while the simulated GPUs' memory fills with weights."""
    board = engine.board
    board.mem_phase = "loading"
    steps = max(1, int(seconds / 0.1))
    for i in range(steps):
        await asyncio.sleep(seconds / steps)
        board.load_progress = (i + 1) / steps


async def startup(engine: SimEngine) -> None:
    a, prefix = engine.args, engine.prefix
    t0 = time.monotonic()
    log_raw("=" * 78)
    log_raw(f"  SIMULATED SGLang server (moe-tui emulator {SIM_VERSION}): no GPU, no model.")
    log_raw("  Every number it produces comes from a performance model, not hardware.")
    log_raw("=" * 78)
    args_repr = ", ".join(f"{k}={v!r}" for k, v in engine.server_args_dict().items())
    log(f"server_args=ServerArgs({args_repr})")
    for level, note in engine.backend_notes:
        log(note, level="WARNING server_args.py:" if level == "WARNING" else "")
    if engine.disable_shared_experts_fusion and not a.disable_shared_experts_fusion:
        log(f"Disable shared experts fusion for moe_runner_backend='{engine.resolved_backend}'.")
    try:
        pids = await asyncio.get_running_loop().run_in_executor(None, engine.children.start)
    except (OSError, RuntimeError) as exc:
        # SGLang exits when a scheduler dies during init; so does the emulator (never hangs).
        log(f"Scheduler process failed to start: {exc} (SIMULATED)", prefix, "ERROR")
        await asyncio.get_running_loop().run_in_executor(None, engine.children.stop)
        os._exit(1)
    engine.board.set_holders(pids)
    engine.board.mem_phase = "context"
    titles = ", ".join(f"{p}" for p in engine.children.pids)
    log(f"Started {len(pids)} scheduler process(es) and the detokenizer (SIMULATED, pids {titles}) "
        f"on GPU(s) {','.join(map(str, engine.gpu_indices))}")
    log(f"Init torch distributed begin. tp_size={a.tp_size}, ep_size={a.ep_size}", prefix)
    log("Load weight begin. avail mem=139.80 GB", prefix)
    load = a.sim_load_seconds + a.sim_slow_start
    if a.sim_slow_start:
        log(f"Loading safetensors checkpoint shards is slow (SIMULATED slow start: "
            f"+{a.sim_slow_start:.1f} s)", prefix)
    if a.sim_startup_hang:
        log("Loading safetensors checkpoint shards: 0% Completed | 0/80 [00:00<?, ?it/s]", prefix)
        await asyncio.Event().wait()  # SIMULATED hang: never finishes loading
    await _load_weights(engine, load)
    t1 = time.monotonic()
    engine.startup_time["load_weight"] = t1 - t0
    log(f"Load weight end. elapsed={t1 - t0:.2f} s, type=GlmMoeDsaForCausalLM, "
        f"dtype=torch.bfloat16, avail mem={139.8 - WEIGHTS_GIB:.2f} GB, mem usage={WEIGHTS_GIB:.2f} GB.", prefix)
    if engine.memory.max_total_num_tokens <= 0:
        # SGLang's scheduler raises this (pool_configurator.py) and the launcher kills its tree.
        log("Scheduler hit an exception: RuntimeError: Not enough memory. Please try to increase "
            f"--mem-fraction-static. Current value: mem_fraction_static={engine.memory.mem_fraction}", prefix, "ERROR")
        await asyncio.get_running_loop().run_in_executor(None, engine.children.stop)
        os._exit(1)
    engine.board.mem_phase = "kv"
    log(f"Memory pool end. avail mem={engine.memory.kv_gib:.2f} GB", prefix)
    engine.startup_time["kv_cache_allocation"] = 0.0
    if a.disable_cuda_graph:
        engine.startup_time["cuda_graph"] = 0.0
    else:
        bs = a.cuda_graph_max_bs_decode or min(engine.max_running, 512)
        backend = a.attention_backend or "flashinfer"
        log(f"Capture target decode CUDA graph begin. backend={backend}, num_tokens_per_req=1, "
            f"avail mem=18.10 GB (SIMULATED, max bs {bs})", prefix)
        await asyncio.sleep(a.sim_graph_seconds)
        t2 = time.monotonic()
        engine.startup_time["cuda_graph"] = t2 - t1
        engine.board.mem_phase = "graphs"
        log(f"Capture target decode CUDA graph end. bs=[1, 2, 4, 8, ..., {bs}], elapsed={t2 - t1:.2f} s, "
            f"mem usage=2.10 GB, avail mem=16.00 GB.", prefix)
    total = time.monotonic() - t0
    engine.startup_time["total"] = total
    timings = ", ".join(f"{k}={v:.2f}" for k, v in engine.startup_time.items())
    log(f"Engine startup timings (s): {timings}")
    log(f"max_total_num_tokens={engine.kv_pool}, chunked_prefill_size="
        f"{engine.chunked_prefill}, max_prefill_tokens=16384, max_running_requests="
        f"{engine.max_running}, context_len={engine.context_length}", prefix)
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
