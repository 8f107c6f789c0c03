"""The emulator's command line: SGLang 0.5.23 launch flags (one table) plus its own `--sim-*` flags.

`SGLANG_FLAGS` is the single list of `python -m sglang.launch_server` flags our profiles use; other
modules (e.g. `moe_tui.profiles`) reuse it through `sglang_flag_names()` / `build_sglang_parser()`
to check a profile before a model load is paid. Parsing behaves like SGLang's argparse parser:
unknown flags exit 2 with `error: unrecognized arguments: ...`, and because abbreviations are
allowed, `--cuda-graph-max-bs` is rejected as ambiguous (it prefixes `-decode` and `-prefill`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from moe_tui.records import Options

# `--moe-runner-backend` choices of sglang 0.5.23 (shared/reference/SGLANG.md).
MOE_RUNNER_BACKEND_CHOICES: tuple[str, ...] = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm",
    "experimental_sgl_trtllm", "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4",
    "flashinfer_cutedsl", "flashinfer_megamoe", "cutlass", "aiter", "marlin", "humming",
    "experimental_sgl_marlin", "lora_cutedsl", "lora_triton", "lora_marlin", "hpc_ops", "megamoe",
    "intel_xpu",
)

SGLANG_VERSION_EMULATED = "0.5.23"
DEFAULT_MODEL_PATH = "GLM-5-NVFP4"
DEFAULT_MAX_RUNNING_REQUESTS = 1024
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_CONTEXT_LENGTH = 131072


@dataclass(frozen=True)
class FlagSpec:
    """One launch flag: its spellings (first is canonical) and argparse keyword arguments."""

    names: tuple[str, ...]
    kwargs: Options = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.kwargs.get("dest") or self.names[0].lstrip("-").replace("-", "_")


def _flag(*names: str, **kwargs: Any) -> FlagSpec:
    return FlagSpec(tuple(names), kwargs)


# The sglang launch flags the emulator understands. Defaults of None mean "SGLang decides";
# the emulator resolves them in `resolve_server_args`.
SGLANG_FLAGS: tuple[FlagSpec, ...] = (
    _flag("--model-path", "--model", type=str, default=DEFAULT_MODEL_PATH,
          help="model weights path (recorded; the emulator loads nothing)"),
    _flag("--served-model-name", type=str, default=None,
          help="name in /v1/models; the emulator appends ' (simulated)'"),
    _flag("--tensor-parallel-size", "--tp-size", type=int, default=1, dest="tp_size"),
    _flag("--expert-parallel-size", "--ep-size", "--ep", type=int, default=1, dest="ep_size"),
    _flag("--moe-runner-backend", type=str, default="auto", choices=MOE_RUNNER_BACKEND_CHOICES),
    _flag("--quantization", type=str, default=None),
    _flag("--host", type=str, default="127.0.0.1"),
    _flag("--port", type=int, default=30000),
    _flag("--enable-metrics", action="store_true"),
    _flag("--api-key", type=str, default=None),
    _flag("--admin-api-key", type=str, default=None),
    _flag("--trust-remote-code", action="store_true"),
    _flag("--mem-fraction-static", type=float, default=None),
    _flag("--max-running-requests", type=int, default=None),
    _flag("--stream-interval", type=int, default=1),
    _flag("--chunked-prefill-size", type=int, default=None),
    _flag("--cuda-graph-max-bs-decode", type=int, default=None),
    _flag("--cuda-graph-max-bs-prefill", type=int, default=None),
    _flag("--disable-shared-experts-fusion", action="store_true"),
    _flag("--expert-distribution-recorder-mode", type=str, default=None,
          choices=("per_token", "per_pass", "stat", "stat_approx")),
    _flag("--expert-distribution-recorder-buffer-size", type=int, default=1000),
    _flag("--attention-backend", type=str, default=None),
    _flag("--kv-cache-dtype", type=str, default="auto"),
    _flag("--log-level", type=str, default="info"),
    _flag("--random-seed", type=int, default=None),
    _flag("--context-length", type=int, default=None),
    _flag("--disable-cuda-graph", action="store_true"),
    _flag("--dist-init-addr", "--nccl-init-addr", type=str, default=None),
    _flag("--dist-timeout", type=int, default=None),
    _flag("--nnodes", type=int, default=1),
    _flag("--node-rank", type=int, default=0),
    _flag("--disable-radix-cache", action="store_true",
          help="no prefix cache: every prompt is prefilled in full"),
)

# The emulator's own flags. Startup phase lengths are wall seconds (not divided by the time scale).
SIM_FLAGS: tuple[FlagSpec, ...] = (
    _flag("--sim-load-seconds", type=float, default=1.0, help="length of the weight-load phase"),
    _flag("--sim-graph-seconds", type=float, default=0.5, help="length of the CUDA-graph phase"),
    _flag("--sim-warmup-seconds", type=float, default=0.3, help="length of the warmup phase"),
    _flag("--sim-time-scale", type=float, default=1.0,
          help="run the performance model S times faster (modelled durations divided by S)"),
    _flag("--sim-zero-delay", action="store_true",
          help="no modelled delay at all: steps run as fast as the process can (throughput bench)"),
    _flag("--sim-noise-pct", type=float, default=0.0,
          help="multiplicative gaussian noise on each step time, std dev in percent"),
    _flag("--sim-start-sigma", type=float, default=1.5, metavar="PCT",
          help="per-server-start performance factor, log-normal std dev in percent (recorded in "
               "/server_info as sim.perf_factor_start)"),
    _flag("--sim-drift-sigma", type=float, default=0.3, metavar="PCT",
          help="slow random drift within a start, percent per sqrt(modelled minute)"),
    _flag("--sim-drift-tau-min", type=float, default=10.0, metavar="MIN",
          help="how fast the random drift is pulled back to the start factor (modelled minutes)"),
    _flag("--sim-run-jitter", type=float, default=0.5, metavar="PCT",
          help="per-run performance factor std dev in percent, drawn when work resumes after an "
               "idle gap or a /flush_cache"),
    _flag("--sim-run-gap-seconds", type=float, default=0.25, metavar="S",
          help="idle wall seconds that end a 'run' for --sim-run-jitter"),
    _flag("--sim-exact", action="store_true",
          help="no run-to-run variance (start sigma, drift sigma and run jitter 0; --sim-noise-pct "
               "still applies): calibration and model tests"),
    _flag("--sim-seed", type=int, default=None,
          help="seed for noise and error-rate draws (default: fresh at every start, so repeats "
               "measured on separate starts see independent noise, as on a real GPU)"),
    _flag("--sim-drift-pct-per-min", type=float, default=0.0,
          help="slow step-time drift in percent per minute since ready (+ slower, - faster)"),
    _flag("--sim-backends-file", type=str, default=None,
          help="performance model TOML replacing the bundled backends.toml"),
    _flag("--sim-crash-after-requests", type=int, default=None, metavar="N",
          help="exit abruptly (non-zero) once the N-th request has started streaming"),
    _flag("--sim-startup-hang", action="store_true", help="never finish loading (never healthy)"),
    _flag("--sim-startup-fault", type=str, default=None, choices=("oom", "nccl", "cuda"),
          help="fail the start as SGLang does on this error (nccl at distributed init, cuda while "
               "loading, oom while capturing graphs): the child's traceback, then the parent kills "
               "its own tree and itself with SIGKILL"),
    _flag("--sim-autotune-seconds", type=float, default=0.0, metavar="S",
          help="a FlashInfer autotune pass of S wall seconds before the CUDA graphs (flashinfer_* MoE "
               "backends; SGLang runs it on a first start, model_executor/runner/flashinfer_autotune.py)"),
    _flag("--sim-slow-start", type=float, default=0.0, metavar="SECONDS",
          help="extra seconds of weight loading"),
    _flag("--sim-fallback-backend", type=str, default=None, choices=MOE_RUNNER_BACKEND_CHOICES,
          metavar="BACKEND", help="silently run BACKEND instead of --moe-runner-backend"),
    _flag("--sim-moe-slowdown-ms", type=float, default=0.0, metavar="MS",
          help="every decode step's MoE GEMMs take MS longer (modelled ms; the profiler's traces show it)"),
    _flag("--sim-jit-stall-ms", type=float, default=0.0, metavar="MS",
          help="first step at each new power-of-two batch bucket takes MS extra (modelled ms)"),
    _flag("--sim-merge-chunks-above", type=int, default=None, metavar="N",
          help="with more than N running requests the HTTP side falls behind and each stream's "
               "queued outputs go out merged in one chunk of ceil(running / N) tokens, as SGLang's "
               "tokenizer manager coalesces them (tokenizer_manager.py)"),
    _flag("--sim-error-rate", type=float, default=0.0, metavar="F",
          help="answer HTTP 500 to a seeded fraction F of generation requests"),
    _flag("--sim-cut-stream-after-tokens", type=int, default=None, metavar="N",
          help="close each stream abruptly (no [DONE]) after N tokens"),
    _flag("--sim-fault-output-drift-after", type=int, default=None, metavar="N",  # roofline/gate
          help="greedy outputs (return_logprob) leave the faithful continuation from output token N on"),
    _flag("--sim-hang-after-tokens", type=int, default=None, metavar="N",
          help="stop sending on each stream after N tokens, keeping the connection open"),
    _flag("--sim-orphan-children", type=float, default=0.0, metavar="SECONDS",
          help="children do not die with a killed parent (no PR_SET_PDEATHSIG, as in field reports "
               "of orphaned schedulers): they live SECONDS more, holding their GPU"),
    _flag("--sim-gpu", type=str, default="rtx-pro-6000", choices=("rtx-pro-6000", "h200"),
          help="the simulated card (sim/gpus.py GPU_PRESETS): RTX PRO 6000 Blackwell (the performance "
               "model's box) or H200, where SGLang 0.5.23 refuses NVFP4 MoE runners other than marlin"),
    _flag("--sim-gpu-power-limit-w", type=float, default=None, metavar="W",
          help="enforced power limit of each simulated GPU (default: the card's own); below ~90%% of "
               "the card's limit load hits the cap: power-cap throttle (sw_power_cap), lower SM clock, "
               "slower steps"),
    _flag("--sim-gpu-foreign-process", type=int, default=None, metavar="GPU",
          help="a foreign process (not of this server) appears on GPU index GPU"),
    _flag("--sim-gpu-lost", type=int, default=None, metavar="GPU",
          help="GPU index GPU falls off the bus (NVML answers GPU_IS_LOST for it)"),
    _flag("--sim-gpu-fault-after", type=float, default=0.0, metavar="SECONDS",
          help="wall seconds after ready before --sim-gpu-foreign-process / --sim-gpu-lost strike"),
)


class SGLangArgumentParser(argparse.ArgumentParser):
    """argparse with SGLang's failure mode (usage + `error: ...`, exit 2), nothing more."""


def _add(parser: argparse._ActionsContainer, specs: tuple[FlagSpec, ...]) -> None:
    # _ActionsContainer: argparse's common base of a parser and an argument group (no public name)
    for spec in specs:
        kwargs = dict(spec.kwargs)
        kwargs.setdefault("dest", spec.dest)
        parser.add_argument(*spec.names, **kwargs)


def build_sglang_parser(prog: str = "launch_server.py") -> argparse.ArgumentParser:
    """A parser of only the SGLang launch flags above (for checking profiles)."""
    parser = SGLangArgumentParser(prog=prog)
    _add(parser, SGLANG_FLAGS)
    return parser


def build_parser(prog: str = "python -m moe_tui.sim") -> argparse.ArgumentParser:
    """The emulator's full parser: SGLang launch flags plus `--sim-*` flags."""
    parser = SGLangArgumentParser(
        prog=prog,
        description="SGLang emulator (SIMULATED): accepts sglang.launch_server flags.",
    )
    group = parser.add_argument_group("sglang launch flags")
    _add(group, SGLANG_FLAGS)
    sim = parser.add_argument_group("emulator flags")
    _add(sim, SIM_FLAGS)
    return parser


def sglang_flag_names() -> frozenset[str]:
    """Every spelling of every SGLang flag the emulator (and our profiles) may pass."""
    return frozenset(name for spec in SGLANG_FLAGS for name in spec.names)


def parse_args(argv: list[str], prog: str = "python -m moe_tui.sim") -> argparse.Namespace:
    """Parse and validate; exits 2 with an argparse error for bad flags or values."""
    from moe_tui.sim.config_file import config_defaults, without_config

    parser = build_parser(prog)
    parser.set_defaults(**config_defaults(parser, argv))  # SGLang's --config: the file's values, argv wins
    args = parser.parse_args(without_config(argv))
    checks = [
        (args.tp_size >= 1, "--tp-size must be >= 1"),
        (args.ep_size >= 1, "--ep-size must be >= 1"),
        (0 < args.port < 65536, "--port must be in 1..65535"),
        (args.stream_interval >= 1, "--stream-interval must be >= 1"),
        (args.max_running_requests is None or args.max_running_requests >= 1,
         "--max-running-requests must be >= 1"),
        (args.sim_time_scale > 0, "--sim-time-scale must be > 0"),
        (0.0 <= args.sim_error_rate <= 1.0, "--sim-error-rate must be in [0, 1]"),
        (args.sim_noise_pct >= 0, "--sim-noise-pct must be >= 0"),
        (min(args.sim_load_seconds, args.sim_graph_seconds, args.sim_warmup_seconds, args.sim_slow_start,
             args.sim_autotune_seconds) >= 0,
         "--sim-*-seconds and --sim-slow-start must be >= 0"),
        (args.sim_merge_chunks_above is None or args.sim_merge_chunks_above >= 1,
         "--sim-merge-chunks-above must be >= 1"),
        (args.sim_crash_after_requests is None or args.sim_crash_after_requests >= 1,
         "--sim-crash-after-requests must be >= 1"),
        (args.sim_fault_output_drift_after is None or args.sim_fault_output_drift_after >= 0,
         "--sim-fault-output-drift-after must be >= 0"),
    ]
    gpus = (args.sim_gpu_foreign_process, args.sim_gpu_lost)
    checks += [
        (min(args.sim_start_sigma, args.sim_drift_sigma, args.sim_run_jitter) >= 0,
         "--sim-start-sigma, --sim-drift-sigma and --sim-run-jitter must be >= 0"),
        (args.sim_drift_tau_min > 0, "--sim-drift-tau-min must be > 0"),
        (args.sim_run_gap_seconds >= 0, "--sim-run-gap-seconds must be >= 0"),
        (args.sim_orphan_children >= 0, "--sim-orphan-children must be >= 0"),
        (args.sim_gpu_power_limit_w is None or args.sim_gpu_power_limit_w > 0, "--sim-gpu-power-limit-w must be > 0"),
        (args.sim_gpu_fault_after >= 0, "--sim-gpu-fault-after must be >= 0"),
        (all(g is None or g >= 0 for g in gpus), "--sim-gpu-foreign-process / --sim-gpu-lost take a GPU index >= 0"),
    ]
    for ok, message in checks:
        if not ok:
            parser.error(message)
    if args.nnodes < 1 or args.tp_size % args.nnodes:  # check_server_args (arg_groups/validation_hook.py): an assert
        print("Traceback (most recent call last):\nAssertionError: tp_size must be divisible by number of nodes",
              file=sys.stderr)
        raise SystemExit(1)
    if args.sim_exact:
        args.sim_start_sigma = args.sim_drift_sigma = args.sim_run_jitter = 0.0
    return args
