"""The kernel-class rules against the corpus of real kernel names (moe_tui/explain/kernel_corpus.csv):
at least 100 names from the builds SGLang 0.5.23 runs, at least 95% in the class an expert gives
them, and the names the old rules got wrong (issue 32) each in its class."""

from __future__ import annotations

from collections import Counter

import pytest

from moe_tui.explain.rules import CLASSES, OTHER, classify
from moe_tui.kernel_corpus import load_corpus

CORPUS = load_corpus()


def test_corpus_is_large_and_broad():
    assert len(CORPUS) >= 100
    assert {k.kernel_class for k in CORPUS} <= set(CLASSES)
    projects = " ".join(k.project for k in CORPUS)
    for source in ("flashinfer 0.7.2", "sglang 0.5.23", "sgl-kernel", "DeepGEMM", "NCCL", "cuBLAS", "Triton",
                   "triton_kernels", "FlashAttention 3", "FlashMLA", "DeepEP", "PyTorch"):
        assert source.lower() in projects.lower() or source in " ".join(k.name for k in CORPUS), source
    by_class = Counter(k.kernel_class for k in CORPUS)
    assert all(by_class[c] >= 5 for c in CLASSES if c not in ("idle", OTHER)), by_class


def test_rules_agree_with_the_corpus():
    wrong = [(k.kernel_class, classify(k.name), k.name[:90]) for k in CORPUS if classify(k.name) != k.kernel_class]
    assert 1 - len(wrong) / len(CORPUS) >= 0.95, wrong


@pytest.mark.parametrize("fragment, cls", [
    # FlashInfer's CuTe DSL kernels carry "cutlass" in their names whatever they do
    ("flashinfernormkernelsrmsnormRMSNormKernel", "norm_elementwise"),
    ("flashinfernormkernelsfused_add_rmsnorm", "norm_elementwise"),
    ("nvfp4_quantizeNVFP4QuantizeSwizzledKernel", "quantization"),
    ("mxfp8_quantizeMXFP8QuantizeLinearKernel", "quantization"),
    # flashinfer_cutlass's MoE helpers live in tensorrt_llm::kernels::cutlass_kernels
    ("cutlass_kernels::blockExpertPrefixSumKernel", "moe_routing"),
    ("cutlass_kernels::globalExpertPrefixSumKernel", "moe_routing"),
    ("cutlass_kernels::expandInputRowsKernel", "moe_routing"),
    ("cutlass_kernels::doActivationKernel", "norm_elementwise"),
    ("moe::dev::finalize::finalizeKernelVecLoad", "moe_routing"),
    # GLM-5's DSA indexer top-k picks KV tokens, not experts
    ("topk_transform_decode_kernel", "attention"),
    ("fast_topk_kernel", "attention"),
    # no rule knew them
    ("kernel_mha", "attention"),
    ("moe_fused_gate_kernel<", "moe_routing"),
    # DeepGEMM's grouped GEMMs differ from its dense ones by GemmType only
    ("(deep_gemm::GemmType)2, deep_gemm::EpilogueIdentity", "moe_gemm"),
    ("sm100_fp8_gemm_1d1d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0, 0u, 4096u", "moe_gemm"),
    # and what must stay where it was
    ("(deep_gemm::GemmType)0, deep_gemm::EpilogueIdentity", "dense_gemm"),
    ("grouped_gemm_masked_blackwell", "moe_gemm"),
    ("flashinfer::sampling::TopKTopPSamplingFromProbKernel", "norm_elementwise"),
])
def test_the_old_misclassifications(fragment, cls):
    names = [k for k in CORPUS if fragment in k.name]
    assert len(names) == 1, fragment
    assert names[0].kernel_class == cls
    assert classify(names[0].name) == cls


def test_the_emulator_launches_corpus_names_only():
    """The emulator's traces name real kernels, of the class they stand for (never names shaped
    after the rules)."""
    from moe_tui.sim.traces import BACKEND_KERNELS, COMMON_SPLIT, DEFAULT_KERNELS, PREFILL_SPLIT

    by_name = {k.name: k.kernel_class for k in CORPUS}
    launched = [(cls, name) for cls, name, _ in COMMON_SPLIT] + [(cls, n) for cls, n, _ in PREFILL_SPLIT if n]
    for gemms, routing in [*BACKEND_KERNELS.values(), DEFAULT_KERNELS]:
        launched += [("moe_gemm", n) for n in gemms] + [("moe_routing", n) for n in routing]
    assert len(launched) > 25
    for cls, name in launched:
        assert by_name.get(name) == cls, name
