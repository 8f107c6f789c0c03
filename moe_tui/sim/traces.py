"""The emulator's kernel model and torch-profiler trace writer (what `/start_profile` leaves behind).

Kernel model: one modelled step's time (the performance model's `step_ms`, times the variance
factor the engine applied) split into kernels, so that a trace's breakdown explains the
emulator's own differences between backends:
- the backend-independent part of a decode step (attention, all-reduce, dense GEMMs, norms,
  quantization, launch gaps) is `COMMON_SHARE` of the `default` row's step time at that batch
  (at most `COMMON_CAP` of this backend's own), split by `COMMON_SPLIT`;
- the rest is the backend's MoE: `ROUTING_SHARE` routing/permute, the remainder its grouped GEMMs;
- an injected MoE slowdown (`--sim-moe-slowdown-ms`) goes wholly to the MoE GEMMs;
- a step that prefills (EXTEND) adds its prefill time split by `PREFILL_SPLIT`.
Each backend launches kernels under its own names (`BACKEND_KERNELS`): real names from the
explain corpus (`moe_tui.kernel_corpus`), each checked to be of the class it stands for, never
names written to fit the rules. A step's kernels are written for `LAYER_GROUPS` groups of layers
(one event per kernel per group, the group's time in it) to keep a trace small.

Launches (`step_launch`): a decode step up to the captured batch size is one cudaGraphLaunch whose
kernels share its correlation id; above it (or without CUDA graphs) each kernel has its own
cudaLaunchKernel; a prefill step is breakable CUDA graphs: one cudaGraphLaunch per layer group, the
attention between them launched eagerly.

Trace format: torch profiler's Chrome trace as `export_chrome_trace` writes it (traceEvents with
`cuda_runtime` launch events on the host and `kernel` events on the device sharing a
`correlation` id, `deviceProperties`, `distributedInfo`, `displayTimeUnit`), gzipped, one file per
TP rank, named as SGLang's profiler_manager names them:
`[<prefix>-]<profile_id>-TP-<rank>[-EP-<rank>][-<stage>].trace.json.gz`.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

from moe_tui.kernel_corpus import corpus_name
from moe_tui.records import TraceEvent

COMMON_SHARE = 0.45
COMMON_CAP = 0.8
ROUTING_SHARE = 0.08
LAYER_GROUPS = 4
STEP_JITTER = 0.004  # per kernel, per step and rank: what two replays of one graph differ by
# Kernel names: real ones, drawn from the explain corpus (moe_tui/explain/kernel_corpus.csv) by a
# fragment that names exactly one entry; never written here to fit the rules.
COMMON_SPLIT_FRAGMENTS = (  # (class, corpus fragment, share of the common part): GLM-5's decode on Blackwell
    ("attention", "flash_fwd_splitkv_mla_fp8_sparse_kernel", 0.24),  # DSA sparse MLA, fp8 KV
    ("attention", "sm100_fp8_paged_mqa_logits", 0.05),  # DSA indexer logits
    ("attention", "topk_transform_decode_kernel", 0.05),  # DSA indexer top-k
    ("collective", "allreduce_fusion_kernel_oneshot_lamport", 0.22),
    ("dense_gemm", "nvjet_sm100_tst_256x104_64x4_4x1_v_bz_TNT", 0.20),
    ("norm_elementwise", "flashinfernormkernelsfused_add_rmsnorm", 0.06),  # CuTe DSL
    ("norm_elementwise", "flashinfer::activation::act_and_mul_kernel", 0.04),
    ("quantization", "nvfp4_quantizeNVFP4QuantizeSwizzledKernel", 0.06),  # CuTe DSL
)
COMMON_IDLE = 0.08  # of the common part: launch overhead and host gaps between replays
PREFILL_SPLIT_FRAGMENTS: tuple[tuple[str, str | None, float], ...] = (
    ("moe_gemm", None, 0.45),  # None: the backend's own GEMM names
    ("dense_gemm", "nvjet_sm100_tst_256x128_64x5_2x2_2cta_h_bz_TNT", 0.20),
    ("attention", "flashinfer::BatchPrefillWithRaggedKVCacheKernel", 0.25),
    ("norm_elementwise", "flashinfer::norm::FusedAddRMSNormKernel", 0.10),
)
# backend -> (MoE GEMM kernel fragments, routing/permute kernel fragments); times split evenly among them.
BACKEND_FRAGMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "flashinfer_cutlass": (("MainloopSm100ArrayTmaUmmaWarpSpecializedBlockScaled", "computeStridesTmaWarpSpecializedKernel"),
                           ("fusedBuildExpertMapsSortFirstTokenKernel", "cutlass_kernels::expandInputRowsKernel",
                            "cutlass_kernels::finalizeMoeRoutingKernel")),
    "flashinfer_cutedsl": (("grouped_gemm_masked_blackwell",), ("moe_fused_gate_kernel<", "shuffle_rows_kernel")),
    "flashinfer_trtllm": (("bmm_MxE4m3_MxE2m1MxE4m3", "bmm_Bfloat16_MxE2m1MxE4m3"),
                          ("routingDeepSeek::routingMainKernel", "finalizeKernelVecLoad")),
    "triton": (("fused_moe_kernel",), ("void moe_align_block_size_kernel", "_moe_sum_reduce_kernel")),
    "deep_gemm": (("sm100_fp8_gemm_1d1d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0, 0u, 4096u",),
                  ("_fwd_kernel_ep_scatter_1", "_fwd_kernel_ep_gather")),
    "cutlass": (("__get_group_gemm_starts",), ("compute_arg_sorts", "shuffle_rows_kernel", "apply_shuffle_mul_sum_kernel")),
    "triton_kernel": (("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1_swiglu", "_p_matmul_ogs_NNT"),
                      ("_topk_forward", "_routing_compute_indx")),
}
DEFAULT_FRAGMENTS = (("fused_moe_kernel",), ("void moe_align_block_size_kernel", "count_and_sort_expert_tokens_kernel"))


def _real(fragment: str, kernel_class: str) -> str:
    """The corpus name `fragment` picks, which must be of `kernel_class` (else the emulator's own
    breakdown would move time between classes)."""
    return corpus_name(fragment, kernel_class)


COMMON_SPLIT = tuple((cls, _real(f, cls), share) for cls, f, share in COMMON_SPLIT_FRAGMENTS)
PREFILL_SPLIT: tuple[tuple[str, str | None, float], ...] = tuple(
    (cls, None if f is None else _real(f, cls), share) for cls, f, share in PREFILL_SPLIT_FRAGMENTS)
BACKEND_KERNELS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    backend: (tuple(_real(f, "moe_gemm") for f in gemms), tuple(_real(f, "moe_routing") for f in routing))
    for backend, (gemms, routing) in BACKEND_FRAGMENTS.items()}
DEFAULT_KERNELS = (tuple(_real(f, "moe_gemm") for f in DEFAULT_FRAGMENTS[0]),
                   tuple(_real(f, "moe_routing") for f in DEFAULT_FRAGMENTS[1]))


# How a step's kernels reach the GPU in 0.5.23: a decode batch up to the captured size replays one
# CUDA graph (GRAPH); above it, or with --disable-cuda-graph, it runs eagerly, one launch per kernel
# (EAGER); a prefill runs as breakable CUDA graphs by default, one graph per segment replayed in
# turn with the attention launched eagerly between them (SEGMENTS).
GRAPH, EAGER, SEGMENTS = "graph", "eager", "segments"


def step_launch(stage: str, decode_batch: int, graph_max_bs: int | None) -> str:
    """GRAPH, EAGER or SEGMENTS for a step (`graph_max_bs` None: CUDA graphs disabled)."""
    if graph_max_bs is None:
        return EAGER
    if stage == "EXTEND":
        return SEGMENTS
    return GRAPH if decode_batch <= graph_max_bs else EAGER


@dataclass(frozen=True)
class StepRecord:
    """One engine step the profiler saw."""

    index: int
    stage: str  # "DECODE" or "EXTEND"
    start_s: float  # wall clock (time.time) when the step began
    modelled_ms: float  # the step's modelled duration, variance applied
    base_ms: float  # the performance model's step_ms, before variance
    reference_ms: float  # the default row's decode time at this batch (the common part's base)
    decode_ms: float  # this backend's decode time at this batch (the prefill part is the rest)
    slowdown_ms: float  # injected MoE slowdown (modelled ms, before variance)
    launch: str = GRAPH  # how the step's kernels were launched: GRAPH, EAGER or SEGMENTS


def step_kernels(rec: StepRecord, backend: str) -> list[tuple[str, str, float]]:
    """(class, kernel name, ms) for one step, in launch order; the entry of class "idle" is the
    time no kernel runs. Sums to `rec.modelled_ms`."""
    gemms, routing = BACKEND_KERNELS.get(backend, DEFAULT_KERNELS)
    factor = rec.modelled_ms / (rec.base_ms + rec.slowdown_ms) if rec.base_ms + rec.slowdown_ms > 0 else 0.0
    common = min(COMMON_SHARE * rec.reference_ms, COMMON_CAP * rec.decode_ms)
    moe = rec.decode_ms - common
    out: list[tuple[str, str, float]] = [("idle", "", common * COMMON_IDLE * factor)]
    for cls, name, share in COMMON_SPLIT:
        out.append((cls, name, common * share * factor))
    out += [("moe_routing", n, moe * ROUTING_SHARE / len(routing) * factor) for n in routing]
    out += [("moe_gemm", n, (moe * (1 - ROUTING_SHARE) + rec.slowdown_ms) / len(gemms) * factor) for n in gemms]
    prefill = rec.base_ms - rec.decode_ms
    if prefill > 0:
        for cls, kernel, share in PREFILL_SPLIT:
            names = gemms if kernel is None else (kernel,)
            out += [(cls, n, prefill * share / len(names) * factor) for n in names]
    return out


def trace_name(profile_id: str, rank: int, *, ep_size: int = 1, stage: str | None = None, prefix: str = "") -> str:
    parts = [profile_id, f"TP-{rank}"] + ([f"EP-{rank}"] if ep_size > 1 else [])
    return (f"{prefix}-" if prefix else "") + "-".join(parts) + (f"-{stage}" if stage else "") + ".trace.json.gz"


def rank_trace(steps: list[StepRecord], backend: str, *, rank: int, world: int, gpu_name: str,
               seed: int) -> TraceEvent:
    """One rank's Chrome trace of `steps` (a dict ready for json.dumps)."""
    rng = random.Random(seed * 1009 + rank)
    pid_host, tid_host, stream = os.getpid(), os.getpid(), 7
    events: list[TraceEvent] = [
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"GPU {rank} (simulated)"}},
        {"ph": "M", "name": "process_name", "pid": pid_host, "tid": 0, "args": {"name": f"sglang::scheduler_TP{rank}"}},
    ]
    corr = 1000 * (rank + 1)
    # Steps laid back to back on the modelled clock (the engine runs them so while it has work),
    # from the first step's wall time: a time-scaled emulator still writes modelled durations.
    t_step = steps[0].start_s * 1e6 if steps else 0.0
    for rec in steps:
        parts = step_kernels(rec, backend)
        idle_us, kernels = parts[0][2] * 1000.0, parts[1:]
        gap = idle_us / 2.0 / max(len(kernels) * LAYER_GROUPS, 1)
        t = t_step + idle_us / 2.0  # launch latency before the step's first kernel
        host = t_step
        for _group in range(LAYER_GROUPS):
            segment: int | None = None  # the correlation of this layer group's graph, once launched
            if rec.launch == GRAPH and _group == 0 or rec.launch == SEGMENTS:
                corr += 1
                segment = corr
                events.append(_runtime("cudaGraphLaunch", pid_host, tid_host, host, corr, 311))
                host += 6.0
            graph_corr = segment if rec.launch != GRAPH else corr
            for cls, name, ms in kernels:
                eager = rec.launch == EAGER or (rec.launch == SEGMENTS and cls == "attention")
                if eager:  # its own launch: cudaLaunchKernel on the host, the kernel sharing its id
                    corr += 1
                    events.append(_runtime("cudaLaunchKernel", pid_host, tid_host, host, corr, 211))
                    host += 4.0
                dur = max(ms * 1000.0 / LAYER_GROUPS * (1.0 + rng.gauss(0.0, STEP_JITTER)), 0.001)
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": stream,
                               "ts": round(t, 3), "dur": round(dur, 3),
                               "args": {"correlation": corr if eager else graph_corr, "device": rank, "stream": stream,
                                        "grid": [132, 1, 1], "block": [128, 1, 1]}})
                t += dur + gap
        t_step = max(t, t_step + rec.modelled_ms * 1000.0)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": gpu_name, "computeMajor": 12, "computeMinor": 0}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": events, "traceName": "", "displayTimeUnit": "ms",
    }


def _runtime(name: str, pid: int, tid: int, ts: float, corr: int, cbid: int) -> TraceEvent:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
            "dur": 6.0 if name == "cudaGraphLaunch" else 4.0, "args": {"correlation": corr, "cbid": cbid}}


def write_traces(out_dir: str | Path, steps: list[StepRecord], backend: str, *, profile_id: str, world: int,
                 ep_size: int, stage: str | None, prefix: str, gpu_name: str, seed: int) -> list[Path]:
    """One gzipped trace per TP rank; the paths written."""
    out = Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rank in range(world):
        path = out / trace_name(profile_id, rank, ep_size=ep_size, stage=stage, prefix=prefix)
        data = rank_trace(steps, backend, rank=rank, world=world, gpu_name=gpu_name, seed=seed)
        data["traceName"] = str(path)
        tmp = path.with_name(path.name + ".part")
        with gzip.open(tmp, "wt", compresslevel=6) as fh:
            json.dump(data, fh)  # Kineto's spacing ("rank": 3): HTA finds a trace's rank by that pattern
        tmp.replace(path)  # a reader polling the folder never sees half a file
        written.append(path)
    return written
