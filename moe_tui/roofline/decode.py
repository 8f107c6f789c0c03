"""The decode roofline: the most output tokens per second a GPU box can give one model at batch B.

One decode step at batch B (= the benchmark's concurrency, every stream decoding) must
- move bytes: every non-expert weight once (attention, dense MLPs, shared experts, routers, LM head),
  the routed experts the batch touches (expected distinct experts per MoE layer
  E = n (1 - (1 - k/n)^B), assuming each token picks its k experts independently and uniformly),
  and the KV cache of every stream (B x context x bytes per token per layer; MLA latents are read
  by every tensor-parallel rank, so that traffic is multiplied by the attention TP degree);
- do FLOPs: 2 x active parameters x B (each group at its tensor-core precision) plus attention
  over the context.
t_mem = bytes / (GPUs x HBM bandwidth), t_compute = sum(FLOPs_group / (GPUs x peak_group));
the ceiling is B / max(t_mem, t_compute) tokens/s. It is an upper bound: perfect overlap, perfect
balance over GPUs, no communication, no kernel launch gaps. See docs/roofline.md. Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import cast

from moe_tui.records.grid import RooflineRowJson
from moe_tui.roofline.gpu_specs import GpuSpec
from moe_tui.roofline.model_shape import COMPUTE_PRECISION, WEIGHT_BITS, ModelShape

# Bytes per KV element by --kv-cache-dtype; "auto" follows the model dtype.
KV_BYTES = {"fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8": 1.0, "fp4_e2m1": 0.5625, "bf16": 2.0,
            "bfloat16": 2.0, "fp16": 2.0, "float16": 2.0, "float32": 4.0}
# SGLang's DSA indexer keeps its key cache in FP8 with one FP32 scale per 128 elements.
INDEXER_SCALE_BYTES = 4.0


class RooflineError(ValueError):
    """Impossible inputs (batch < 1, no GPUs, unknown KV dtype); the message names the input."""


@dataclass(frozen=True)
class Roofline:
    """One decode ceiling and every term that makes it up (bytes, FLOPs, seconds)."""

    batch: int
    context: int
    gpu: str
    gpu_count: int
    hbm_gbps_total: float
    weight_bytes: dict[str, float]
    distinct_experts: float  # expected distinct routed experts touched per MoE layer
    kv_bytes: float
    kv_replication: int
    total_bytes: float
    flops: float
    attention_flops: float
    t_mem_s: float
    t_compute_s: float
    bound: str  # "memory" or "compute"
    ceiling_tok_s: float  # all streams together
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def per_stream_tok_s(self) -> float:
        return self.ceiling_tok_s / self.batch

    @property
    def step_ms(self) -> float:
        return 1000.0 * max(self.t_mem_s, self.t_compute_s)

    def to_dict(self) -> RooflineRowJson:
        data = asdict(self)  # the fields are the record's (tests/test_export_schemas.py checks the export)
        data["notes"] = list(self.notes)
        data["per_stream_tok_s"] = self.per_stream_tok_s
        data["step_ms"] = self.step_ms
        return cast(RooflineRowJson, data)

    def terms(self) -> list[tuple[str, str]]:
        """(term, value) lines in reading order, for run detail and the CLI."""
        gb = 1e9
        lines = [("batch (concurrency)", str(self.batch)), ("context per stream", f"{self.context} tokens"),
                 ("GPUs", f"{self.gpu_count} x {self.gpu}, {self.hbm_gbps_total:,.0f} GB/s together")]
        for group, value in self.weight_bytes.items():
            if value:
                lines.append((f"weights read: {group.replace('_', ' ')}", f"{value / gb:,.2f} GB"))
        lines += [("distinct experts per MoE layer", f"{self.distinct_experts:.1f}"),
                  ("KV cache read", f"{self.kv_bytes / gb:,.3f} GB (x{self.kv_replication} TP replicas)"),
                  ("bytes per step", f"{self.total_bytes / gb:,.2f} GB"),
                  ("FLOPs per step", f"{self.flops / 1e12:,.3f} TFLOP "
                                     f"({self.attention_flops / 1e12:,.3f} in attention)"),
                  ("memory time", f"{self.t_mem_s * 1e3:,.3f} ms"),
                  ("compute time", f"{self.t_compute_s * 1e3:,.3f} ms"),
                  ("bound by", self.bound),
                  ("ceiling", f"{self.ceiling_tok_s:,.1f} tok/s ({self.per_stream_tok_s:,.1f} per stream)")]
        return lines


def distinct_experts(n_experts: int, k: int, batch: int) -> float:
    """Expected distinct experts touched when `batch` tokens each pick k of n independently and
    uniformly: n (1 - (1 - k/n)^B). Real routers are skewed, so this overstates the experts
    touched (the ceiling is conservative there) at small B and is exact at B = 1."""
    if n_experts <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - k / n_experts) ** batch)


def kv_bytes_per_elem(kv_cache_dtype: str, model_dtype: str) -> float:
    dtype = (kv_cache_dtype or "auto").lower()
    if dtype == "auto":
        return 4.0 if model_dtype == "fp32" else 2.0
    if dtype not in KV_BYTES:
        raise RooflineError(f"kv_cache_dtype {kv_cache_dtype!r} unknown; known: auto, {', '.join(KV_BYTES)}")
    return KV_BYTES[dtype]


def kv_replication(shape: ModelShape, attention_tp: int) -> int:
    """How many GPUs read the same KV bytes. MLA: the latent is shared by all heads, so every TP
    rank reads all of it. GQA: heads shard over ranks; with fewer KV heads than ranks, each KV
    head is read by tp / kv_heads ranks."""
    if attention_tp <= 1:
        return 1
    if shape.attention_kind == "mla":
        return attention_tp
    kv_heads = max(1, shape.kv_elems_per_token // (2 * shape.attn_dims[0]))
    return max(1, attention_tp // kv_heads)


def _weight_bytes(shape: ModelShape, batch: int) -> tuple[dict[str, float], float]:
    per_group: dict[str, float] = dict(shape.group_params())
    touched = distinct_experts(shape.n_experts, shape.experts_per_token, batch)
    per_group["routed_experts"] = shape.moe_layers * touched * shape.expert_params
    out = {g: float(n) * WEIGHT_BITS[shape.precision[g]] / 8 for g, n in per_group.items()}
    return out, touched


def _kv_terms(shape: ModelShape, batch: int, context: int, kv_elem: float) -> tuple[float, float]:
    """(KV bytes read, attention FLOPs) per step, before TP replication."""
    attended = min(context, shape.index_topk) if shape.index_topk else context
    kv = batch * shape.layers * attended * shape.kv_elems_per_token * kv_elem
    score, value = shape.attn_dims
    flops = 2.0 * batch * shape.layers * attended * shape.heads * (score + value)
    if shape.index_topk:  # the DSA indexer scores every cached token
        kv += batch * shape.layers * context * (shape.index_head_dim + INDEXER_SCALE_BYTES)
        flops += 2.0 * batch * shape.layers * context * shape.index_heads * shape.index_head_dim
    return kv, flops


def _compute_seconds(shape: ModelShape, gpu: GpuSpec, gpu_count: int, batch: int,
                     attention_flops: float) -> tuple[float, float, list[str]]:
    groups = shape.group_params()
    groups["routed_experts"] = shape.moe_layers * shape.experts_per_token * shape.expert_params
    seconds, flops, notes = 0.0, 0.0, []
    for group, params in groups.items():
        group_flops = 2.0 * params * batch
        peak, note = gpu.peak_tflops(COMPUTE_PRECISION[shape.precision[group]])
        if note and params and note not in notes:
            notes.append(note)
        seconds += group_flops / (gpu_count * peak * 1e12)
        flops += group_flops
    attn_peak, _ = gpu.peak_tflops("bf16")
    seconds += attention_flops / (gpu_count * attn_peak * 1e12)
    return seconds, flops + attention_flops, notes


def decode_roofline(shape: ModelShape, gpu: GpuSpec, gpu_count: int, batch: int, context: int, *,
                    kv_cache_dtype: str = "auto", attention_tp: int = 1) -> Roofline:
    """The ceiling at batch `batch` with `context` tokens cached per stream."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise RooflineError(f"concurrency must be an integer >= 1, got {batch!r}")
    if gpu_count < 1:
        raise RooflineError(f"GPU count must be >= 1, got {gpu_count!r}")
    if context < 0:
        raise RooflineError(f"context must be >= 0 tokens, got {context!r}")
    weights, touched = _weight_bytes(shape, batch)
    kv, attn_flops = _kv_terms(shape, batch, context, kv_bytes_per_elem(kv_cache_dtype, shape.model_dtype))
    replicas = kv_replication(shape, attention_tp)
    kv *= replicas
    total = sum(weights.values()) + kv
    bandwidth = gpu_count * gpu.hbm_gbps * 1e9
    t_mem = total / bandwidth
    t_comp, flops, notes = _compute_seconds(shape, gpu, gpu_count, batch, attn_flops)
    bound = "memory" if t_mem >= t_comp else "compute"
    return Roofline(
        batch=batch, context=context, gpu=gpu.label, gpu_count=gpu_count,
        hbm_gbps_total=gpu_count * gpu.hbm_gbps, weight_bytes=weights, distinct_experts=touched,
        kv_bytes=kv, kv_replication=replicas, total_bytes=total, flops=flops, attention_flops=attn_flops,
        t_mem_s=t_mem, t_compute_s=t_comp, bound=bound, ceiling_tok_s=batch / max(t_mem, t_comp),
        notes=tuple(notes),
    )


def percent_of_roofline(measured_tok_s: float | None, ceiling: Roofline | None) -> float | None:
    """Measured output tok/s as a percentage of the ceiling; None when either is missing."""
    if measured_tok_s is None or ceiling is None or ceiling.ceiling_tok_s <= 0:
        return None
    return 100.0 * measured_tok_s / ceiling.ceiling_tok_s
