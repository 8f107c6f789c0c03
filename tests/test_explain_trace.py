"""The trace parser and the kernel-class table, on a real H200 torch-profiler trace and on
hand-made plain data (tests/data/real-*-TP-0.trace.json.gz: tools/record_real_trace.py, a
CUDA-graph MoE decode loop; B's expert FFN is twice as wide as A's, nothing else differs)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from moe_tui.explain import (
    CLASSES,
    TraceError,
    classify,
    compare_sides,
    parse_trace_name,
    profile_rank,
    read_rank,
    short_name,
    side_breakdown,
)
from moe_tui.explain.rules import (
    ATTENTION,
    COLLECTIVE,
    DENSE_GEMM,
    IDLE,
    MOE_GEMM,
    MOE_ROUTING,
    NORM_ELEMENTWISE,
    OTHER,
    QUANTIZATION,
)

DATA = Path(__file__).parent / "data"
REAL_A = DATA / "real-A-TP-0.trace.json.gz"
REAL_B = DATA / "real-B-TP-0.trace.json.gz"
# Every A/B pair recorded on the device (tools/record_real_trace.py): the first (torch 2.x, 2026-12-04) and
# the one recorded in the session that closed #32 (torch 2.11, cu130, 2026-12-05). Each is read the same way.
RECORDINGS = [
    pytest.param((REAL_A, REAL_B, DATA / "real-trace-meta.json"), id="h200-2026-12-04"),
    pytest.param((DATA / "h200-2026-12-05-A-TP-0.trace.json.gz", DATA / "h200-2026-12-05-B-TP-0.trace.json.gz",
                  DATA / "h200-2026-12-05-trace-meta.json"), id="h200-2026-12-05"),
]


@pytest.mark.parametrize("recording", RECORDINGS)
def test_real_trace_steps_are_the_graph_replays(recording):
    trace_a, _, meta_file = recording
    meta = json.loads(meta_file.read_text())
    assert meta["gpu"] == "NVIDIA H200" and meta["runs"][0]["mode"] == "cuda_graph"
    prof = read_rank(trace_a)
    assert prof.step_source == "graph launches"
    assert prof.n_steps == meta["shape"]["steps"]
    assert prof.rank == 0 and prof.stage is None
    # every step holds each layer's kernels: 2 layers x 2 grouped GEMMs (+ their data prep)
    for step in prof.steps:
        assert step[MOE_GEMM] > 0 and step[ATTENTION] > 0 and step[DENSE_GEMM] > 0 and step[MOE_ROUTING] > 0
        assert step[COLLECTIVE] == 0 and step[QUANTIZATION] == 0


@pytest.mark.parametrize("recording", RECORDINGS)
def test_real_trace_kernels_land_in_their_classes(recording):
    prof = read_rank(recording[0])
    by_class: dict[str, list[str]] = {}
    for k in prof.kernels:
        by_class.setdefault(k.kernel_class, []).append(k.name)
    assert any("GroupProblemShape" in n for n in by_class[MOE_GEMM])  # torch._grouped_mm's CUTLASS kernel
    assert any("sdpa" in n for n in by_class[ATTENTION])  # scaled_dot_product_attention (cuDNN)
    assert "silu_and_mul_kernel" in by_class[NORM_ELEMENTWISE]  # the triton kernel
    assert any("gatherTopK" in n for n in by_class[MOE_ROUTING])
    assert any("nvjet" in n for n in by_class[DENSE_GEMM])
    # what no rule claims is shown by name, not hidden: here cub's scan (the offsets' cumsum)
    assert by_class[OTHER] and all("Scan" in n for n in by_class[OTHER])


@pytest.mark.parametrize("recording", RECORDINGS)
def test_step_time_is_the_gpu_timeline(recording):
    """Classes plus idle add up to the time from the first step's start to the last kernel's end."""
    data = json.loads(gzip.decompress(recording[0].read_bytes()))
    prof = profile_rank(data)
    kernels = [e for e in data["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    end = max(e["ts"] + e["dur"] for e in kernels)
    total = sum(sum(s.values()) for s in prof.steps)
    first = [e for e in data["traceEvents"] if e.get("cat") == "cuda_runtime" and e["name"].startswith("cudaGraphLaunch")]
    corr = min(first, key=lambda e: e["ts"])["args"]["correlation"]
    start = min(e["ts"] for e in kernels if e.get("args", {}).get("correlation") == corr)
    assert total == pytest.approx((end - start) / 1000.0 + prof.overlap_ms, rel=1e-6)


@pytest.mark.parametrize("recording", RECORDINGS)
def test_real_pair_puts_the_wider_experts_in_moe_gemm_only(recording):
    a = side_breakdown("A", [read_rank(recording[0])])
    b = side_breakdown("B", [read_rank(recording[1])])
    expl = compare_sides(a, b)
    moved = {d.kernel_class for d in expl.classes if d.beyond_noise}
    assert moved == {MOE_GEMM}
    gemm = next(d for d in expl.classes if d.kernel_class == MOE_GEMM)
    assert gemm.delta_ms > 0.005
    assert expl.moved[0].kernel_class == MOE_GEMM


@pytest.mark.parametrize("name, cls", [
    ("fused_moe_kernel", MOE_GEMM),
    ("void tensorrt_llm::kernels::cutlass_kernels::MoeGemmKernel<...>", MOE_GEMM),
    ("bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s3_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f", MOE_GEMM),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<GemmType::MGroupedMasked>", MOE_GEMM),
    ("_p_matmul_ogs_NNT_bf16xbf16xmxfp4", MOE_GEMM),
    ("moe_align_block_size_kernel", MOE_ROUTING),
    ("void topkGatingSoftmax<4, 128>", MOE_ROUTING),
    ("expandInputRowsKernel", MOE_ROUTING),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", COLLECTIVE),
    ("cross_device_reduce_1stage", COLLECTIVE),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel", ATTENTION),
    ("fmha_v2_flash_attention_e4m3_fp32_64_128_S_q_paged_kv_192", ATTENTION),
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize64x64x128", DENSE_GEMM),
    ("cvt_fp16_to_fp4", QUANTIZATION),
    ("per_token_group_quant_8bit_kernel", QUANTIZATION),
    ("void at::native::rms_norm_kernel", NORM_ELEMENTWISE),
    ("Memcpy DtoD (Device -> Device)", NORM_ELEMENTWISE),
    ("some_unknown_thing", OTHER),
])
def test_rule_table(name, cls):
    assert classify(name) == cls


def test_mangled_names_read_as_their_identifiers():
    prof = read_rank(REAL_A)
    gemm = next(k.name for k in prof.kernels if k.name.startswith("_ZN7cutlass"))
    shown = short_name(gemm, 200)
    assert shown.startswith("cutlass::device_kernel<") and "GroupProblemShape" in shown
    assert short_name("_Z3foov") == "_Z3foov"  # one word: left as it is


def test_short_name_is_printable_and_bounded():
    assert short_name("void foo<int>(float*, int)") == "foo<int>"
    assert short_name("\x1b[31mred[/]" * 40, limit=20).isprintable()
    assert len(short_name("x" * 500)) == 72


@pytest.mark.parametrize("name, parts", [
    ("1733000000.123-TP-3.trace.json.gz", ("1733000000.123", 3, None)),
    ("1733000000.123-TP-0-DECODE.trace.json.gz", ("1733000000.123", 0, "DECODE")),
    ("run7-1733000000.1-TP-1-EP-1-EXTEND.trace.json.gz", ("run7-1733000000.1", 1, "EXTEND")),
])
def test_sglang_trace_names(name, parts):
    got = parse_trace_name(name)
    assert got is not None and (got.profile_id, got.tp_rank, got.stage) == parts
    assert parse_trace_name("notes.txt") is None


def _kernel(name, ts, dur, corr=None):
    args = {"correlation": corr} if corr is not None else {}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def test_eager_trace_needs_a_step_count():
    data = {"traceEvents": [_kernel("fused_moe_kernel", 0, 100), _kernel("rmsnorm", 150, 50)]}
    with pytest.raises(TraceError, match="num_steps"):
        profile_rank(data, source="eager.json")
    prof = profile_rank(data, steps=2)
    assert prof.step_source == "given" and prof.n_steps == 2
    assert sum(s[IDLE] for s in prof.steps) == pytest.approx(0.05)
    assert sum(s[MOE_GEMM] for s in prof.steps) == pytest.approx(0.1)


def test_malformed_events_are_skipped_and_counted():
    data = {"traceEvents": [_kernel("a_gemm", 0, 10), {"ph": "X", "cat": "kernel", "name": 5, "ts": 1, "dur": 1},
                            _kernel("b", "x", 1), _kernel("c", 1, -4), "junk", _kernel("d", float("nan"), 1)]}
    prof = profile_rank(data, steps=1)
    assert prof.skipped_events == 4
    assert [k.name for k in prof.kernels] == ["a_gemm"]


@pytest.mark.parametrize("content, words", [
    (b"not json", "not JSON"), (b'{"x": 1}', "traceEvents"), (b"[1, 2]", "traceEvents"),
])
def test_unreadable_files_name_the_file(tmp_path, content, words):
    p = tmp_path / "bad-TP-0.trace.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=words) as info:
        read_rank(p)
    assert "bad-TP-0.trace.json" in str(info.value)


def test_size_bound_and_empty_trace(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": [_kernel("k", 0, 1)] * 2000}).encode()))
    with pytest.raises(TraceError, match="bytes once decompressed"):
        read_rank(p, max_bytes=10_000)
    with pytest.raises(TraceError, match="no GPU kernel events"):
        profile_rank({"traceEvents": []})


def test_classes_are_complete():
    prof = read_rank(REAL_B)
    assert set(prof.steps[0]) == set(CLASSES)


def test_a_named_pipe_where_a_trace_should_be_is_refused_not_waited_on(tmp_path):
    """A FIFO named like a trace (planted, or a wrong path) hung `explain` on open: now refused at once, named."""
    import os
    import threading

    fifo = tmp_path / "run1-TP-0.trace.json.gz"
    os.mkfifo(fifo)
    caught: list[BaseException] = []

    def read() -> None:
        try:
            read_rank(fifo)
        except BaseException as exc:  # noqa: BLE001 (handed to the test thread)
            caught.append(exc)

    reader = threading.Thread(target=read, daemon=True)  # daemon: a regression hangs this thread, not the run
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), "read_rank blocked on a named pipe"
    assert len(caught) == 1 and isinstance(caught[0], TraceError)
    assert str(fifo) in str(caught[0]) and "named pipe" in str(caught[0])


@pytest.mark.parametrize("compress", [False, True])
def test_a_deeply_nested_trace_is_named_not_a_traceback(tmp_path, compress):
    """100,000 nested brackets raised RecursionError out of explain; now a TraceError naming the file."""
    raw = ("[" * 100_000 + "]" * 100_000).encode()
    p = tmp_path / ("deep-TP-0.trace.json" + (".gz" if compress else ""))
    p.write_bytes(gzip.compress(raw) if compress else raw)
    with pytest.raises(TraceError, match="nested too deeply to be a Chrome trace") as info:
        read_rank(p)
    assert str(p) in str(info.value)
