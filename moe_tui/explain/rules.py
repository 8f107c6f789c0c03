"""The ONE table that maps GPU kernel names to the classes a decode step's time is explained by.

A kernel name is lower-cased and tried against `RULES` top to bottom; the first match wins, so the
order carries meaning: collectives first (NCCL and custom all-reduce kernels say "gather" and
"reduce"), MoE GEMMs before dense GEMMs and quantization (their names carry "fp4", "e2m1",
"gemm"), dense GEMMs before quantization (an FP8 GEMM's name says "e4m3"), attention before
routing (a paged-attention kernel may say "index"), routing and permute before the generic
elementwise rules (PyTorch's index and sort kernels are elementwise-shaped).
A name no rule matches is "other"; the breakdown shows its top names so a missing rule is seen,
not hidden. Memory copies and sets (`gpu_memcpy`, `gpu_memset` events) count as elementwise.

The patterns come from kernel names the backends are known to launch (SGLang's triton
`fused_moe_kernel`, FlashInfer's CUTLASS and TensorRT-LLM MoE GEMMs, trtllm-gen `bmm_*`, DeepGEMM
`m_grouped`, CuTe-DSL grouped GEMMs, triton_kernels `matmul_ogs`, PyTorch's `_grouped_mm` CUTLASS
kernels with `GroupProblemShape`), from a real torch-profiler trace recorded on an H200
(tests/data/real-*-TP-0.trace.json.gz), and from the emulator's own traces (`moe_tui.sim.traces`).
Idle gaps and launch overhead are not a name: `moe_tui.explain.trace` measures them as the part
of a step when no kernel runs on the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

MOE_GEMM = "moe_gemm"
MOE_ROUTING = "moe_routing"
ATTENTION = "attention"
COLLECTIVE = "collective"
DENSE_GEMM = "dense_gemm"
NORM_ELEMENTWISE = "norm_elementwise"
QUANTIZATION = "quantization"
IDLE = "idle"
OTHER = "other"

# Display order and words (a class id is a stable key for JSON/CSV; the words are for people).
CLASSES: tuple[str, ...] = (MOE_GEMM, MOE_ROUTING, ATTENTION, COLLECTIVE, DENSE_GEMM, QUANTIZATION,
                            NORM_ELEMENTWISE, IDLE, OTHER)
CLASS_WORDS: dict[str, str] = {
    MOE_GEMM: "MoE GEMM", MOE_ROUTING: "MoE routing/permute", ATTENTION: "attention",
    COLLECTIVE: "all-reduce/collectives", DENSE_GEMM: "dense GEMM", QUANTIZATION: "quantization",
    NORM_ELEMENTWISE: "norms/elementwise", IDLE: "idle gaps + launch", OTHER: "other",
}


@dataclass(frozen=True)
class Rule:
    kernel_class: str
    pattern: str  # a regular expression, searched in the lower-cased kernel name
    why: str


RULES: tuple[Rule, ...] = (
    Rule(COLLECTIVE, r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|"
                     r"custom_?ar|one_?shot|two_?shot|lamport|deepep|nvshmem|mscclpp|multimem",
         "NCCL, SGLang/FlashInfer custom all-reduce, DeepEP dispatch/combine"),
    Rule(MOE_GEMM, r"fused_moe|moe_?gemm|moegemm|cutlass_moe|grouped_?gemm|group_gemm|grouped_mm|"
                   r"groupproblemshape|ptrarray|m_?grouped|masked_?gemm|matmul_ogs|^bmm_|"
                   r"moe.*(gemm|mm_|matmul)|expert.*(gemm|matmul)",
         "grouped/batched expert GEMMs of every MoE runner backend"),
    Rule(ATTENTION, r"flash_?(fwd|bwd|mla|attn|decode|prefill)|flash::|fmha|attention|attn|sdpa|mla|paged|"
                    r"batchdecode|batchprefill|merge_state|"
                    r"splitkv|rotary|rope|kv_?cache|store_kv|set_kv",
         "attention kernels (FlashInfer, FlashAttention, FlashMLA, cuDNN SDPA), RoPE, KV-cache writes"),
    Rule(MOE_ROUTING, r"topk|top_k|gating|router|routing|moe_align|align_block|count_and_sort|moe_sum|"
                      r"permute|expand_?input|finalize_?moe|sort|radix|searchsorted|scatter|gather|"
                      r"index|histogram|bincount",
         "router top-k, expert sort/align, token permute and unpermute/combine"),
    Rule(DENSE_GEMM, r"gemm|gemv|matmul|nvjet|xmma|cublas|splitkreduce|cutlass|wgmma|hgemm|sgemm",
         "dense GEMMs: QKV/O projections, shared experts, router logits, LM head"),
    Rule(QUANTIZATION, r"quant|cvt_|fp4|fp8|e2m1|e4m3|nvfp4|mxfp|scale_?factor|block_?scale",
         "activation (de)quantization, scale-factor layout"),
    Rule(NORM_ELEMENTWISE, r"norm|elementwise|vectorized|unrolled|reduce|silu|gelu|swiglu|act_and_mul|"
                           r"activation|softmax|fill|copy|memcpy|memset|cast|triton_(poi|red|per)|"
                           r"add|mul|cat|where|clamp|argmax",
         "norms, activations, residual adds, casts, copies, sampling reductions"),
)

_COMPILED = tuple((r.kernel_class, re.compile(r.pattern)) for r in RULES)


@lru_cache(maxsize=8192)
def classify(name: str) -> str:
    """The class of one kernel name (`OTHER` when no rule matches)."""
    low = name.lower()
    for cls, rx in _COMPILED:
        if rx.search(low):
            return cls
    return OTHER


def short_name(name: str, limit: int = 72) -> str:
    """A kernel name people can read: no 'void ', no parameter list, at most `limit` characters,
    control characters dropped (names come from untrusted trace files). Template arguments stay
    (up to the limit): `cutlass::device_kernel<...>` says nothing without them."""
    text = "".join(ch for ch in name if ch.isprintable()).strip()
    if text.startswith("_Z"):
        text = _unmangled_words(text)
    if text.startswith("void "):
        text = text[5:]
    cut = text.rfind("(")
    if text.endswith(")") and cut > 0 and text[cut - 1] != " ":  # a C++ parameter list, not "Memcpy DtoD (...)"
        text = text[:cut]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unmangled_words(name: str) -> str:
    """The identifiers of an Itanium-mangled name (`_ZN7cutlass13device_kernel...`) as
    `cutlass::device_kernel<at cuda ...>`: not a demangler, enough to tell kernels apart."""
    words, i = [], 2
    while i < len(name):
        sub = re.match(r"[ST][0-9A-Z]*_", name[i:])  # a substitution or template parameter: no name
        if sub is not None:
            i += len(sub.group(0))
            continue
        m = re.match(r"(\d+)", name[i:])
        if m is None:
            i += 1
            continue
        n, start = int(m.group(1)), i + len(m.group(1))
        word = name[start:start + n]
        if n and len(word) == n and re.fullmatch(r"[A-Za-z_][A-Za-z]\w*|[A-Za-z]", word):
            words.append(word)
            i = start + n
        else:
            i = start
    if len(words) < 2:
        return name
    return f"{words[0]}::{words[1]}" + (f"<{' '.join(words[2:])}>" if words[2:] else "")
