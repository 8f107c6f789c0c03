"""ModelShape: what a Hugging Face `config.json` says about a (MoE) decoder, as the roofline needs it.

Layer counts (dense vs MoE), hidden size, experts (routed, per token, shared, expert width),
attention (MLA with its latent ranks, or GQA/MHA; a DeepSeek-sparse-attention indexer if present),
vocabulary, and the storage precision of each weight group (attention, dense MLP, routed experts,
shared experts, routers, LM head) read from `quantization_config` and the server's
`--quantization`. Parameter counts per group are computed here. Pure: takes a dict, reads nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Bits stored per weight, scales included: NVFP4 = 4-bit values + one FP8 scale per 16;
# MXFP4 = 4-bit + one 8-bit scale per 32; FP8 block scales (1 per 128x128) are negligible.
WEIGHT_BITS = {"nvfp4": 4.5, "mxfp4": 4.25, "fp8": 8.0, "bf16": 16.0, "fp32": 32.0}
# Which tensor-core rate computes each storage format (W4A4 NVFP4 runs on FP4 tensor cores).
COMPUTE_PRECISION = {"nvfp4": "fp4", "mxfp4": "fp4", "fp8": "fp8", "bf16": "bf16", "fp32": "fp32"}

GROUPS = ("attention", "dense_mlp", "routed_experts", "shared_experts", "routers", "lm_head")
# A module name standing for each group, matched against the checkpoint's exclude list.
_PROBE_MODULES = {
    "attention": "model.layers.3.self_attn.o_proj",
    "dense_mlp": "model.layers.0.mlp.down_proj",
    "routed_experts": "model.layers.3.mlp.experts.0.down_proj",
    "shared_experts": "model.layers.3.mlp.shared_experts.down_proj",
    "lm_head": "lm_head",
}


class ModelConfigError(ValueError):
    """config.json lacks or misstates a field; the message names the field and the file."""


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden: int
    layers: int
    dense_layers: int
    vocab: int
    n_experts: int
    experts_per_token: int
    expert_params: int  # one routed expert (gate + up + down)
    shared_params: int  # all shared experts of one MoE layer
    dense_mlp_params: int  # one dense MLP layer
    attention_params: int  # one layer's attention (+ DSA indexer)
    attention_kind: str  # "mla" or "gqa"
    heads: int
    kv_elems_per_token: int  # per layer: MLA latent + rope key, or 2 x kv_heads x head_dim
    attn_dims: tuple[int, int]  # (score dim, value dim) per head per attended token
    index_topk: int | None  # DSA: attended tokens per query; None = dense attention
    index_head_dim: int
    index_heads: int
    precision: Mapping[str, str] = field(default_factory=dict)  # group -> WEIGHT_BITS key
    model_dtype: str = "bf16"

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.n_experts else 0

    @property
    def router_params(self) -> int:
        return self.n_experts * self.hidden

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    def group_params(self) -> dict[str, int]:
        """Parameters stored per group, whole model (embeddings excluded: decode reads one row)."""
        return {
            "attention": self.layers * self.attention_params,
            "dense_mlp": self.dense_layers_or_all * self.dense_mlp_params,
            "routed_experts": self.moe_layers * self.n_experts * self.expert_params,
            "shared_experts": self.moe_layers * self.shared_params,
            "routers": self.moe_layers * self.router_params,
            "lm_head": self.lm_head_params,
        }

    @property
    def dense_layers_or_all(self) -> int:
        return self.dense_layers if self.n_experts else self.layers

    def active_params(self) -> int:
        """Parameters one token multiplies with (k routed experts per MoE layer)."""
        groups = self.group_params()
        groups["routed_experts"] = self.moe_layers * self.experts_per_token * self.expert_params
        return sum(groups.values())

    def total_params(self) -> int:
        return sum(self.group_params().values())


def _int(cfg: Mapping[str, Any], where: str, *names: str, default: int | None = None) -> int:
    for name in names:
        if name in cfg and cfg[name] is not None:
            value = cfg[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ModelConfigError(f"{where}: field '{name}': expected a non-negative integer, got {value!r}")
            return value
    if default is not None:
        return default
    raise ModelConfigError(f"{where}: field '{names[0]}' is missing")


def _dense_layer_count(cfg: Mapping[str, Any], layers: int, where: str) -> int:
    types = cfg.get("mlp_layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if t == "dense")
    only = cfg.get("mlp_only_layers")  # Qwen-MoE style
    if isinstance(only, list):
        return len(only)
    return min(layers, _int(cfg, where, "first_k_dense_replace", default=0))


def _attention(cfg: Mapping[str, Any], hidden: int, where: str) -> dict[str, Any]:
    heads = _int(cfg, where, "num_attention_heads")
    if cfg.get("kv_lora_rank"):
        kv_lora = _int(cfg, where, "kv_lora_rank")
        q_lora = _int(cfg, where, "q_lora_rank", default=0)
        rope = _int(cfg, where, "qk_rope_head_dim")
        nope = _int(cfg, where, "qk_nope_head_dim")
        v_dim = _int(cfg, where, "v_head_dim")
        q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
        params = q + hidden * (kv_lora + rope) + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        index_topk = cfg.get("index_topk")
        index_dim = _int(cfg, where, "index_head_dim", default=0) if index_topk else 0
        index_heads = _int(cfg, where, "index_n_heads", default=0) if index_topk else 0
        if index_topk:
            params += (q_lora or hidden) * index_heads * index_dim + hidden * index_dim + hidden * index_heads
        # Absorbed MLA decode: scores over the latent + rope key, values over the latent.
        return {"attention_kind": "mla", "heads": heads, "attention_params": params,
                "kv_elems_per_token": kv_lora + rope, "attn_dims": (kv_lora + rope, kv_lora),
                "index_topk": int(index_topk) if index_topk else None,
                "index_head_dim": index_dim, "index_heads": index_heads}
    kv_heads = _int(cfg, where, "num_key_value_heads", default=heads)
    head_dim = _int(cfg, where, "head_dim", default=hidden // max(heads, 1))
    params = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    return {"attention_kind": "gqa", "heads": heads, "attention_params": params,
            "kv_elems_per_token": 2 * kv_heads * head_dim, "attn_dims": (head_dim, head_dim),
            "index_topk": None, "index_head_dim": 0, "index_heads": 0}


def _model_dtype(cfg: Mapping[str, Any]) -> str:
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    return "fp32" if dtype in ("float32", "fp32") else "bf16"


def _quant_format(cfg: Mapping[str, Any], quantization: str) -> str | None:
    """Storage format of quantized weights, or None when the checkpoint is not quantized."""
    qc = cfg.get("quantization_config") or {}
    method = str(qc.get("quant_method") or "").lower()
    algo = str(qc.get("quant_algo") or "").upper()
    arg = (quantization or "").lower()
    if "fp4" in arg or "FP4" in algo:
        return "mxfp4" if "mxfp4" in arg or "MXFP4" in algo or method == "mxfp4" else "nvfp4"
    if method == "mxfp4":
        return "mxfp4"
    if "fp8" in arg or "FP8" in algo or method == "fp8":
        return "fp8"
    if method in ("modelopt",):
        return "nvfp4" if "FP4" in algo else "fp8"
    return None


def _excluded(module: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        pattern = str(pattern)
        if fnmatch.fnmatchcase(module, pattern) or module == pattern or module.startswith(pattern + "."):
            return True
    return False


def weight_precisions(cfg: Mapping[str, Any], quantization: str = "") -> dict[str, str]:
    """Storage format per weight group: the quantized format unless the checkpoint's exclude
    list (`exclude_modules` / `ignore` / `modules_to_not_convert`) names the group's modules.
    Routers always stay at the model dtype (quantizers leave them out)."""
    base = _model_dtype(cfg)
    fmt = _quant_format(cfg, quantization)
    out = {group: base for group in GROUPS}
    if fmt is None:
        return out
    qc = cfg.get("quantization_config") or {}
    patterns = list(qc.get("exclude_modules") or qc.get("ignore") or qc.get("modules_to_not_convert") or [])
    for group, module in _PROBE_MODULES.items():
        out[group] = base if _excluded(module, patterns) else fmt
    return out


def model_shape(cfg: Mapping[str, Any], where: str = "config.json", *, quantization: str = "",
                overrides: Mapping[str, str] | None = None) -> ModelShape:
    """Parse a config.json dict. `overrides` maps group -> format (from a profile's [roofline])."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError(f"{where}: expected a JSON object")
    if isinstance(cfg.get("text_config"), Mapping):  # multimodal wrappers keep the LM inside
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
    hidden = _int(cfg, where, "hidden_size")
    layers = _int(cfg, where, "num_hidden_layers")
    n_experts = _int(cfg, where, "n_routed_experts", "num_experts", "num_local_experts", default=0)
    k = _int(cfg, where, "num_experts_per_tok", "moe_topk", default=0) if n_experts else 0
    if n_experts and not 1 <= k <= n_experts:
        raise ModelConfigError(f"{where}: field 'num_experts_per_tok': must be in [1, {n_experts}], got {k}")
    inter = _int(cfg, where, "intermediate_size", default=0)
    moe_inter = _int(cfg, where, "moe_intermediate_size", default=inter) if n_experts else 0
    if "shared_expert_intermediate_size" in cfg:
        shared = 3 * hidden * _int(cfg, where, "shared_expert_intermediate_size")
    else:
        shared = _int(cfg, where, "n_shared_experts", default=0) * 3 * hidden * moe_inter
    precision = weight_precisions(cfg, quantization)
    for group, fmt in (overrides or {}).items():
        if group not in GROUPS or fmt not in WEIGHT_BITS:
            raise ModelConfigError(f"{where}: weight override {group}={fmt!r}: groups {', '.join(GROUPS)}, "
                                   f"formats {', '.join(WEIGHT_BITS)}")
        precision[group] = fmt
    return ModelShape(
        name=str(cfg.get("_name_or_path") or (cfg.get("architectures") or ["model"])[0]),
        hidden=hidden, layers=layers, dense_layers=_dense_layer_count(cfg, layers, where),
        vocab=_int(cfg, where, "vocab_size"), n_experts=n_experts, experts_per_token=k,
        expert_params=3 * hidden * moe_inter, shared_params=shared,
        dense_mlp_params=3 * hidden * inter, precision=precision, model_dtype=_model_dtype(cfg),
        **_attention(cfg, hidden, where),
    )
