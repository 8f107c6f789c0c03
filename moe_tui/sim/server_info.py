"""What the emulator says of itself at `/server_info` (SGLang 0.5.23's http_server.py
`get_server_info`: the server args as resolved, the scheduler's derived values from
`get_init_info`, `internal_states` as the scheduler reports them: no request counts, those are
/metrics gauges), plus the emulator's own `sim` block. `server_args` also feeds the startup line
`server_args=ServerArgs(...)`.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from moe_tui.records import SglangJson
from moe_tui.sim import SIM_VERSION
from moe_tui.sim.engine import TOKENIZER_DIR
from moe_tui.sim.memory import GRAPH_GIB, WEIGHTS_GIB

if TYPE_CHECKING:
    from moe_tui.sim.engine import SimEngine


def server_args(engine: SimEngine) -> SglangJson:
    a = engine.args
    return {
        "model_path": a.model_path, "tokenizer_path": str(TOKENIZER_DIR),
        "served_model_name": engine.served_model_name, "host": a.host, "port": a.port,
        "tp_size": a.tp_size, "ep_size": a.ep_size, "dp_size": 1,
        "moe_runner_backend": engine.resolved_backend, "moe_a2a_backend": "none",
        "quantization": a.quantization, "attention_backend": engine.attention_backend,
        "kv_cache_dtype": engine.kv_cache_dtype, "page_size": 64, "trust_remote_code": a.trust_remote_code,
        "mem_fraction_static": a.mem_fraction_static if a.mem_fraction_static else 0.85,
        "max_running_requests": engine.max_running, "chunked_prefill_size": engine.chunked_prefill,
        "stream_interval": a.stream_interval, "cuda_graph_max_bs_decode": a.cuda_graph_max_bs_decode,
        "cuda_graph_max_bs_prefill": a.cuda_graph_max_bs_prefill, "disable_cuda_graph": a.disable_cuda_graph,
        "disable_shared_experts_fusion": engine.disable_shared_experts_fusion,
        "enable_metrics": a.enable_metrics, "log_level": a.log_level, "random_seed": engine.random_seed,
        "context_length": engine.context_length, "dist_init_addr": a.dist_init_addr,
        "nnodes": a.nnodes, "node_rank": a.node_rank, "disable_radix_cache": a.disable_radix_cache,
        "expert_distribution_recorder_mode": a.expert_distribution_recorder_mode,
        # dataclasses.asdict(server_args) carries the keys as they are: the startup line and
        # /get_server_info show them (only a client holding the api key can ask for the latter)
        "api_key": a.api_key, "admin_api_key": getattr(a, "admin_api_key", None),
    }


def scheduler_info(engine: SimEngine) -> SglangJson:
    """What SGLang's scheduler adds to /server_info (scheduler.py get_init_info): derived values."""
    return {"max_total_num_tokens": engine.kv_pool,
            "max_req_input_len": engine.memory.max_req_input_len(engine.context_length)}


def internal_state(engine: SimEngine) -> SglangJson:
    return {
        "last_gen_throughput": round(engine.last_gen_throughput, 3),
        "token_usage": round(engine.token_usage(), 6),
        "memory_usage": {"weight": WEIGHTS_GIB, "kvcache": round(engine.memory.kv_gib, 2),
                         "token_capacity": engine.kv_pool, "graph": GRAPH_GIB},
        "avg_spec_accept_length": None,
        "sim_engine_steps": engine.sched.step_index,
        "sim_engine_lag_s": round(engine.engine_lag_s, 6),
        "sim_engine_lag_events": engine.engine_lag_events,
    }


def sim_settings(engine: SimEngine) -> SglangJson:
    return {k: v for k, v in vars(engine.args).items() if k.startswith("sim_")} | {
        "requested_moe_runner_backend": engine.requested_backend,
        "perf_row": engine.perf.name,
        "sim_seed": engine.sim_seed,  # the seed in force, drawn at start when none was given
        **engine.variance.describe(),
        "gpu_indices": engine.gpu_indices,
        "scheduler_pids": [p.pid for p in engine.children.schedulers],
        "detokenizer_pid": engine.children.detokenizer.pid if engine.children.detokenizer else None,
        "foreign_gpu_pid": engine.children.foreign_pid,
        "gpus_lost": sorted(engine.board.lost),
    }


def server_info(engine: SimEngine) -> SglangJson:
    """The whole `/server_info` body."""
    launch = shlex.join(["python", "-m", "sglang.launch_server", *engine.argv])
    return server_args(engine) | scheduler_info(engine) | {
        "launch_command": launch,
        "version": SIM_VERSION,
        "startup_time": dict(engine.startup_time),
        "status": engine.state,
        "internal_states": [internal_state(engine)],
        "frontend": "python",
        "simulated": True,
        "sim": sim_settings(engine),
    }
