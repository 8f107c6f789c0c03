"""The ONE table that maps GPU kernel names to the classes a decode step's time is explained by.

A rule is tried against one of three views of the lower-cased name (`kernel_views`):
- `identity`: the kernel's qualified function name, without template arguments and parameter
  list (`moe::dev::finalize::finalizeKernelVecLoad`), and for FlashInfer's CuTe DSL kernels, whose
  names are `kernel_cutlass_kernel_<python module path><Class>_object_at_<arguments>`, the module
  path and class (`flashinfernormkernelsrmsnormRMSNormKernel`): there "cutlass" says nothing of
  what the kernel does, and a parameter type (`TmaWarpSpecializedGroupedGemmInput`,
  `KernelParams<cutlass::bfloat16_t>`) says nothing of the kernel either;
- `head`: the name without its parameter list (template arguments kept: CUTLASS's
  `device_kernel<GemmUniversal<GroupProblemShape...>>` is told by them);
- `full`: the whole name (DeepGEMM's grouped GEMMs differ from its dense ones only by the
  `(deep_gemm::GemmType)N` template argument).
Rules are tried top to bottom; the first match wins, so the order carries meaning: collectives
first; the specific cases that generic words would misfile next (DeepGEMM by GemmType, sampling
top-k, DSA indexer top-k, the router's logits GEMM, norms named "gemma", the MoE's own activation,
MoE helpers in GEMM-named namespaces); then MoE GEMMs, attention, routing, dense GEMMs,
quantization, norms and elementwise. A name no rule matches is "other"; the breakdown shows its
top names so a missing rule is seen, not hidden. Memory copies and sets count as elementwise.

`kernel_corpus.csv` beside this file lists real kernel names as builds emit them (FlashInfer
0.7.2, SGLang 0.5.23 and sgl-kernel, DeepGEMM, NCCL, DeepEP, cuBLAS, Triton and triton_kernels,
FlashAttention 3, FlashMLA, PyTorch), each with its source and the class it belongs to;
tests/test_kernel_corpus.py holds the rules to it, and the emulator's traces
(`moe_tui.sim.traces`) take their names from it. Idle gaps and launch overhead are not a name:
`moe_tui.explain.trace` measures them as the part of a step when no kernel runs on the GPU.
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
    pattern: str  # a regular expression, searched in the lower-cased view
    why: str
    on: str = "head"  # "identity", "head" or "full" (module docstring)


RULES: tuple[Rule, ...] = (
    Rule(COLLECTIVE, r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|"
                     r"custom_?ar|one_?shot|two_?shot|lamport|deep_?ep|nvshmem|mscclpp|multimem",
         "NCCL, SGLang/FlashInfer custom all-reduce, DeepEP dispatch/combine", "identity"),
    Rule(MOE_GEMM, r"deep_gemm::\w*gemm\w*<.*(\(deep_gemm::gemmtype\)[1-9]|gemmtype::[mk]?grouped|gemmtype::batched)",
         "DeepGEMM's grouped GEMMs (GemmType MGroupedContiguous, MGroupedMasked, ...)", "full"),
    Rule(ATTENTION, r"topk_transform|fast_topk|indexer|mqa_logits|^_fwd_(grouped_)?kernel(_stage\d)?$|^kernel_mha|xqa|fmha|"
                    r"merge_?states?",
         "DSA indexer (logits, top-k of the KV tokens), Triton/XQA/trtllm-gen attention, state merges", "identity"),
    Rule(DENSE_GEMM, r"deep_gemm::\w*gemm|router_gemm",
         "DeepGEMM's normal GEMMs, the router's logits GEMM", "identity"),
    Rule(NORM_ELEMENTWISE, r"sampling|rms_?norm|layer_?norm|::norm::|doactivation|moe::dev::activation",
         "sampling (its top-k is the vocabulary's), norms (Gemma's too), the MoE's activation between its GEMMs",
         "identity"),
    Rule(MOE_ROUTING, r"::finalize::|finalize_?moe|expertprefixsum|expert_offsets|problem_sizes|shuffle_rows|"
                      r"shuffle_mul_sum|fused_gate|bitmatrix|expand_?input_?rows|expertmaps|permute|moe_sum",
         "MoE helpers whose names or namespaces say GEMM or cutlass: maps, prefix sums, permute, combine",
         "identity"),
    Rule(MOE_GEMM, r"fused_moe|moe_?gemm|moegemm|cutlass_moe|grouped_?gemm|group_gemm|grouped_mm|"
                   r"groupproblemshape|ptrarray|m_?grouped|masked_?gemm|matmul_ogs|^bmm_|computestrides|"
                   r"moe.*(gemm|mm_|matmul)|expert.*(gemm|matmul)",
         "grouped/batched expert GEMMs of every MoE runner backend, and their argument setup"),
    Rule(ATTENTION, r"flash_?(fwd|bwd|mla|attn|decode|prefill)|flash::|fmha|attention|attn|sdpa|mla|paged|"
                    r"batchdecode|batchprefill|splitkv|rotary|rope|kv_?cache|store_kv|set_kv",
         "attention kernels (FlashInfer, FlashAttention, FlashMLA, cuDNN SDPA), RoPE, KV-cache writes"),
    Rule(MOE_ROUTING, r"topk|top_k|gating|router|routing|moe_align|align_block|count_and_sort|moe_sum|"
                      r"permute|expand_?input|finalize_?moe|sort|radix|searchsorted|scatter|gather|"
                      r"index|histogram|bincount",
         "router top-k, expert sort/align, token permute and unpermute/combine", "identity"),
    Rule(DENSE_GEMM, r"gemm(?!a)|gemv|matmul|nvjet|xmma|cublas|splitkreduce|cutlass|wgmma|hgemm|sgemm",
         "dense GEMMs: QKV/O projections, shared experts, LM head"),
    Rule(QUANTIZATION, r"quant|cvt_|fp4|fp8|e2m1|e4m3|nvfp4|mxfp|scale_?factor|block_?scale",
         "activation (de)quantization, scale-factor layout", "identity"),
    Rule(NORM_ELEMENTWISE, r"norm|elementwise|vectorized|unrolled|reduce|silu|gelu|swiglu|act_and_mul|"
                           r"activation|softmax|fill|copy|memcpy|memset|cast|triton_(poi|red|per)|"
                           r"add|mul|cat|where|clamp|argmax",
         "norms, activations, residual adds, casts, copies, sampling reductions"),
)

_COMPILED = tuple((r.kernel_class, r.on, re.compile(r.pattern)) for r in RULES)
_CUTE_DSL = re.compile(r"^kernel_cutlass_kernel_(.*?)(?:_object_at_.*)?$")


def _strip_templates(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def kernel_views(name: str) -> dict[str, str]:
    """The lower-cased name as the rules see it: identity, head and full (module docstring)."""
    full = name.lower().strip()
    head = full[5:] if full.startswith("void ") else full
    if head.endswith(")") and not head.startswith(("memcpy", "memset")):
        depth = 0  # cut the parameter list: the last top-level "(...)"
        for i in range(len(head) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(head[i], 0)
            if depth == 0:
                if i > 0 and head[i - 1] != " ":  # "memcpy dtod (device -> device)" is no parameter list
                    head = head[:i]
                break
    cute = _CUTE_DSL.match(head)
    if cute:  # module path and class: the "cutlass" of the prefix says nothing
        head = cute.group(1)
    identity = head if cute else _strip_templates(head).strip()
    return {"identity": identity, "head": head, "full": full}


@lru_cache(maxsize=8192)
def classify(name: str) -> str:
    """The class of one kernel name (`OTHER` when no rule matches)."""
    views = kernel_views(name)
    for cls, on, rx in _COMPILED:
        if rx.search(views[on]):
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
