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
Each backend launches kernels under its own names (`BACKEND_KERNELS`), names the class table of
`moe_tui.explain.rules` knows. A step's kernels are written for `LAYER_GROUPS` groups of layers
(one event per kernel per group, the group's time in it) to keep a trace small.

Trace format: torch profiler's Chrome trace as `export_chrome_trace` writes it (traceEvents with
`cuda_runtime` cudaGraphLaunch events on the host and `kernel` events on the device sharing a
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
from typing import Any

COMMON_SHARE = 0.45
COMMON_CAP = 0.8
ROUTING_SHARE = 0.08
LAYER_GROUPS = 4
STEP_JITTER = 0.004  # per kernel, per step and rank: what two replays of one graph differ by
COMMON_SPLIT = (  # (class, kernel name, share of the common part)
    ("attention", "void flash::flash_mla_decode_kernel<cutlass::bfloat16_t, 64, 64>", 0.34),
    ("collective", "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>", 0.22),
    ("dense_gemm", "nvjet_sm120_tst_128x64_64x8_2x1_v_bz_TNT", 0.20),
    ("norm_elementwise", "void flashinfer::norm::FusedAddRMSNormKernel<8, __nv_bfloat16>", 0.06),
    ("norm_elementwise", "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, silu>", 0.04),
    ("quantization", "void cvt_fp16_to_fp4<__nv_bfloat16, false>", 0.06),
)
COMMON_IDLE = 0.08  # of the common part: launch overhead and host gaps between replays
PREFILL_SPLIT: tuple[tuple[str, str | None, float], ...] = (
    ("moe_gemm", None, 0.45),  # None: the backend's own GEMM names
    ("dense_gemm", "nvjet_sm120_tst_256x128_64x4_2x1_v_bz_TNT", 0.20),
    ("attention", "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<128, bf16>", 0.25),
    ("norm_elementwise", "void flashinfer::norm::FusedAddRMSNormKernel<8, __nv_bfloat16>", 0.10),
)
# backend -> (MoE GEMM kernel names, routing/permute kernel names); times split evenly among them.
BACKEND_KERNELS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "flashinfer_cutlass": (
        ("void tensorrt_llm::kernels::cutlass_kernels::moe_gemm_kernel_fp4<gemm1, cutlass::arch::Sm120>",
         "void tensorrt_llm::kernels::cutlass_kernels::moe_gemm_kernel_fp4<gemm2, cutlass::arch::Sm120>"),
        ("void tensorrt_llm::kernels::expandInputRowsKernel<__nv_fp4_e2m1>",
         "void tensorrt_llm::kernels::finalizeMoeRoutingKernel<__nv_bfloat16>")),
    "flashinfer_cutedsl": (
        ("cutlass_cute_dsl_masked_grouped_gemm_nvfp4_sm120_gate_up", "cutlass_cute_dsl_masked_grouped_gemm_nvfp4_sm120_down"),
        ("void flashinfer::moe_permute_kernel<__nv_bfloat16>", "void flashinfer::moe_unpermute_kernel<__nv_bfloat16>")),
    "flashinfer_trtllm": (
        ("bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm120",
         "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm120"),
        ("void moe::dev::routing::routingDeepSeek::routingMainKernel<float>",
         "void moe::dev::finalize::finalizeKernel<__nv_bfloat16>")),
    "triton": (("fused_moe_kernel",), ("moe_align_block_size_kernel", "moe_sum_reduce_kernel")),
    "deep_gemm": (("void deep_gemm::sm100_fp8_m_grouped_gemm_masked_impl<128, 128>",),
                  ("ep_scatter_kernel", "ep_gather_kernel")),
    "cutlass": (("void cutlass_moe_fp4_grouped_gemm_sm120<gate_up>", "void cutlass_moe_fp4_grouped_gemm_sm120<down>"),
                ("moe_align_block_size_kernel", "void sglang::moe_permute_rows<__nv_bfloat16>")),
    "triton_kernel": (("_p_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x64x1_swiglu", "_p_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x64x1"),
                      ("_routing_compute_indx", "_routing_memset_indx")),
}
DEFAULT_KERNELS = (("void sglang::moe_grouped_gemm_kernel<__nv_fp4_e2m1>",),
                   ("void sglang::biased_grouped_topk_kernel<float>", "void sglang::moe_permute_kernel<bf16>"))


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
               seed: int) -> dict[str, Any]:
    """One rank's Chrome trace of `steps` (a dict ready for json.dumps)."""
    rng = random.Random(seed * 1009 + rank)
    pid_host, tid_host, stream = os.getpid(), os.getpid(), 7
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"GPU {rank} (simulated)"}},
        {"ph": "M", "name": "process_name", "pid": pid_host, "tid": 0, "args": {"name": f"sglang::scheduler_TP{rank}"}},
    ]
    corr = 1000 * (rank + 1)
    # Steps laid back to back on the modelled clock (the engine runs them so while it has work),
    # from the first step's wall time: a time-scaled emulator still writes modelled durations.
    t_step = steps[0].start_s * 1e6 if steps else 0.0
    for rec in steps:
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": pid_host,
                       "tid": tid_host, "ts": round(t_step, 3), "dur": 6.0, "args": {"correlation": corr, "cbid": 311}})
        parts = step_kernels(rec, backend)
        idle_us, kernels = parts[0][2] * 1000.0, parts[1:]
        gap = idle_us / 2.0 / max(len(kernels) * LAYER_GROUPS, 1)
        t = t_step + idle_us / 2.0  # launch latency before the replay's first kernel
        for _group in range(LAYER_GROUPS):
            for _cls, name, ms in kernels:
                dur = max(ms * 1000.0 / LAYER_GROUPS * (1.0 + rng.gauss(0.0, STEP_JITTER)), 0.001)
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": stream,
                               "ts": round(t, 3), "dur": round(dur, 3),
                               "args": {"correlation": corr, "device": rank, "stream": stream,
                                        "grid": [132, 1, 1], "block": [128, 1, 1]}})
                t += dur + gap
        t_step = max(t, t_step + rec.modelled_ms * 1000.0)
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": gpu_name, "computeMajor": 12, "computeMinor": 0}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": events, "traceName": "", "displayTimeUnit": "ms",
    }


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
            json.dump(data, fh, separators=(",", ":"))
        tmp.replace(path)  # a reader polling the folder never sees half a file
        written.append(path)
    return written
