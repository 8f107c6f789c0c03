"""What a comparison varies and what confounds it: the fields a comparison varies (`DEFAULT_VARY`,
their other spellings `VARY_ALIASES`, `varied`), the three kinds of resolved server args (a setting
that confounds, a value derived from the varied backend, a per-start value: `server_arg_kind`),
the profile keys that only identify a profile, and the environment facts that confound.

Part of `moe_tui.judgement` (which re-exports every name: import them from there or here). Pure
data and pure functions over the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# What a comparison varies unless told otherwise; every other difference confounds.
DEFAULT_VARY: frozenset[str] = frozenset({"moe_runner_backend"})
# Other spellings of a varied field: the emulator reports the profile's ask and its model row.
VARY_ALIASES: Mapping[str, tuple[str, ...]] = {
    # The emulator's models of a backend's own behaviour (its performance row, JIT compile stalls,
    # drifting greedy outputs, a silent fallback) are part of the simulated backend, under both the
    # profile's spelling (`[sim] jit_stall_ms`) and /server_info's (`sim.sim_jit_stall_ms`).
    "moe_runner_backend": ("moe_runner_backend", "resolved_backend", "sim.requested_moe_runner_backend",
                           "sim.perf_row", "sim.jit_stall_ms", "sim.sim_jit_stall_ms",
                           "sim.fault_output_drift_after", "sim.sim_fault_output_drift_after",
                           "sim.fallback_backend", "sim.sim_fallback_backend"),
}

# Profile snapshot keys that identify a profile but cannot change a measurement ("python" is NOT
# here: another interpreter is another SGLang install).
PROFILE_IDENTITY_KEYS: frozenset[str] = frozenset({"name", "description", "port", "host", "source",
                                                   "startup_stall_s"})
# -- resolved server args: three kinds --------------------------------------------------------------
# SGLang 0.5.23's /server_info (srt/entrypoints/http_server.py `server_info`, srt/utils/common.py
# `build_server_info`) is `ServerArgs.resolved_dict()` (every resolved launch setting) plus the
# launch command, the scheduler's init info (srt/managers/scheduler.py `get_init_info`: status,
# max_total_num_tokens, max_req_input_len, startup_time), kv_events, internal_states, version and
# frontend. Its keys (dotted for nested dicts) are of three kinds, decided here and nowhere else:
# - SETTING: a resolved launch setting; a difference between the sides confounds. Every key not
#   listed below is a setting (an unknown key of a newer SGLang is treated as one: the safe side).
# - DERIVED: a value SGLang computes from the compared backend or from the memory it leaves: shown
#   beside the grid (`SERVER_ARGS_SHOWN`), never a confounder. Its inputs (memory fraction, GPUs,
#   context length, backend) are settings or environment and are compared themselves.
# - PER_START: identity, addresses and values that differ at every start: ignored.
SETTING, DERIVED, PER_START = "setting", "derived", "per_start"
SERVER_ARG_KINDS = (SETTING, DERIVED, PER_START)
SERVER_ARGS_DERIVED: Mapping[str, str] = {
    "max_total_num_tokens": "the KV pool in tokens: sized from the memory left after weights, the MoE backend's "
                            "workspace and CUDA graphs (srt/managers/tp_worker.py get_worker_info, reported by "
                            "srt/managers/scheduler.py get_init_info); it caps the running batch",
    "max_req_input_len": "min(context_len - 1, KV pool - 1) - 5 (srt/managers/tp_worker.py get_worker_info)",
    "disable_shared_experts_fusion": "set true for the flashinfer_cutedsl, flashinfer_trtllm(_routed), "
                                     "experimental_sgl_trtllm and lora MoE runners (srt/arg_groups/overrides.py)",
    "speculative_moe_runner_backend": "defaults to moe_runner_backend (srt/arg_groups/overrides.py)",
}
# Derived keys shown beside the grid, with what they mean to a reader.
SERVER_ARGS_SHOWN: Mapping[str, str] = {
    "max_total_num_tokens": "KV pool (tokens)",
    "max_req_input_len": "max request input (tokens)",
}
# The derived key whose difference is called out: the KV pool limits how many requests run at once.
KV_POOL_KEY = "max_total_num_tokens"
SERVER_ARGS_PER_START: Mapping[str, str] = {
    "host": "address", "port": "address", "dist_init_addr": "address", "nccl_port": "address",
    "metrics_http_port": "address", "served_model_name": "identity", "pid": "per start",
    "random_seed": "per start (a fresh draw unless set)", "sim.sim_seed": "the emulator's seed in force",
    "launch_command": "each of its args is compared on its own (the profile)",
    "version": "compared as sglang_version (environment)", "status": "live state (scheduler.py get_init_info)",
    "internal_states": "live scheduler state (http_server.py server_info)",
    "startup_time": "seconds per start phase", "log_requests_target": "a log path",
    "file_storage_path": "a path", "decode_log_interval": "log cadence",
    "kv_event_sources": "live publisher endpoints (scheduler.py get_init_info)",
    # The emulator's own per-start draws (its start's speed, drift and run factor, the children's
    # pids, what its faults did): like a pid, they differ at every start.
    "sim.perf_factor_start": "per start", "sim.perf_factor_drift": "per start", "sim.perf_factor_run": "per start",
    "sim.runs_seen": "per start", "sim.foreign_gpu_pid": "per start", "sim.gpus_lost": "per start",
}
SERVER_ARGS_PER_START_PREFIXES: tuple[str, ...] = ("startup_time.", "internal_states", "kv_event_sources.")
# Any key naming a process id (a leader's, a scheduler's, a detokenizer's) is per start.
SERVER_ARGS_PER_START_SUFFIXES: tuple[str, ...] = ("_pid", "_pids")
# Older names of the per-start set, kept for their importers.
SERVER_ARGS_IGNORED: frozenset[str] = frozenset(SERVER_ARGS_PER_START)
SERVER_ARGS_IGNORED_PREFIXES = SERVER_ARGS_PER_START_PREFIXES
SERVER_ARGS_IGNORED_SUFFIXES = SERVER_ARGS_PER_START_SUFFIXES
# Server args SGLang derives from a compared setting (a subset of SERVER_ARGS_DERIVED, by cause).
DERIVED_SERVER_ARGS: Mapping[str, tuple[str, ...]] = {
    "moe_runner_backend": ("disable_shared_experts_fusion", "speculative_moe_runner_backend"),
}
# Environment provenance that confounds (another stack or other GPUs) vs. what is only listed beside
# the control check (a different host or clocks seen say "look", not "another measurement").
# Different machines confound too: a slowdown of one box under load looks exactly like a backend's effect
# there, and no control at low load can see it. Both sides may share several hosts (a balanced set).
ENVIRONMENT_CONFOUNDERS: tuple[str, ...] = ("sglang_version", "gpu_names", "driver_version", "hostname")
ENVIRONMENT_BALANCED_OK: frozenset[str] = frozenset({"hostname"})
ENVIRONMENT_LISTED: tuple[str, ...] = ("sm_clock_max_seen_mhz", "sm_clock_min_mhz", "cuda_version",
                                       "platform", "python_version")


def server_arg_kind(key: str) -> str:
    """SETTING, DERIVED or PER_START for a flat (dotted) /server_info key."""
    if (key in SERVER_ARGS_PER_START or key.startswith(SERVER_ARGS_PER_START_PREFIXES)
            or key.endswith(SERVER_ARGS_PER_START_SUFFIXES)):
        return PER_START
    if key in SERVER_ARGS_DERIVED:
        return DERIVED
    return SETTING


def server_arg_ignored(key: str) -> bool:
    return server_arg_kind(key) == PER_START


def derived_from_varied(key: str, vary: Iterable[str]) -> bool:
    """A resolved server arg that SGLang sets from one of the varied settings (see DERIVED_SERVER_ARGS)."""
    return any(field_name(key) in DERIVED_SERVER_ARGS.get(field_name(v), ()) for v in vary)


def field_name(key: str) -> str:
    """One name per setting across sources: "extra_args --max-running-requests" -> "max_running_requests"."""
    key = key.strip()
    for prefix in ("extra_args ", "env ", "sim "):
        if key.startswith(prefix):
            key = key[len(prefix):] if prefix == "extra_args " else key.replace(" ", ".", 1)
    return key.lstrip("-").replace("-", "_")


def varied(key: str, vary: Iterable[str]) -> bool:
    """True when `key` (any source's spelling) is one of the compared fields."""
    name = field_name(key)
    for v in vary:
        if name == field_name(v) or name in VARY_ALIASES.get(field_name(v), ()):
            return True
    return False
