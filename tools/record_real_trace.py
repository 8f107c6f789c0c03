"""Record small real torch-profiler traces of a CUDA-graph MoE decode loop (issue #25's parser fixture).

Two configurations, A (base) and B (the MoE expert FFN made 2x wider, so only the MoE GEMMs grow), each
profiled over a few decode steps and written as SGLang names its traces:
``$OUT/<profile_id>-TP-0.trace.json.gz``. A step = one CUDA-graph replay (norm, QKV GEMM, SDPA
attention, O GEMM, router GEMM + softmax/topk + sort permute, grouped GEMM up, triton silu_and_mul,
grouped GEMM down, unpermute/combine) x LAYERS, then an eager "sampling" tail outside the graph, as
SGLang runs it. ``$OUT/meta.json`` says what ran (torch version, GPU, grouped_mm or bmm, steps).

Runs on CPU too (no graph, no triton) so the script itself can be checked without a GPU.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time
import traceback

import torch
import torch.nn.functional as F

OUT = os.environ.get("OUT", "/tmp/trace_out")
CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
DT = torch.bfloat16 if CUDA else torch.float32
BATCH, HIDDEN, HEADS, HEAD_DIM, KV_LEN = 16, 1024, 8, 128, 512
EXPERTS, TOPK, LAYERS, STEPS = 8, 2, 2, 4
META: dict[str, object] = {"torch": torch.__version__, "device": DEV, "errors": []}

try:
    import triton
    import triton.language as tl

    @triton.jit
    def silu_and_mul_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        gate = tl.load(x_ptr + row * 2 * n_cols + cols, mask=mask).to(tl.float32)
        up = tl.load(x_ptr + row * 2 * n_cols + n_cols + cols, mask=mask).to(tl.float32)
        out = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(out_ptr + row * n_cols + cols, out.to(out_ptr.dtype.element_ty), mask=mask)

    HAVE_TRITON = CUDA
except Exception as exc:  # CPU check: no triton
    HAVE_TRITON = False
    META["errors"].append(f"triton: {exc!r}")  # type: ignore[union-attr]


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[-1] // 2
    if not HAVE_TRITON:
        return F.silu(x[:, :n]) * x[:, n:]
    out = torch.empty(x.shape[0], n, device=x.device, dtype=x.dtype)
    silu_and_mul_kernel[(x.shape[0],)](x, out, n, BLOCK=triton.next_power_of_2(n))
    return out


class Layer:
    def __init__(self, inter: int, use_grouped: bool) -> None:
        g = torch.Generator(device="cpu").manual_seed(0)

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) * 0.02).to(DEV, DT)

        self.inter, self.use_grouped = inter, use_grouped
        self.norm_w = torch.ones(HIDDEN, device=DEV, dtype=DT)
        self.wqkv, self.wo = w(HIDDEN, 3 * HEADS * HEAD_DIM), w(HEADS * HEAD_DIM, HIDDEN)
        self.k_cache, self.v_cache = w(BATCH, HEADS, KV_LEN, HEAD_DIM), w(BATCH, HEADS, KV_LEN, HEAD_DIM)
        self.w_gate = w(HIDDEN, EXPERTS)
        self.w_up, self.w_down = w(EXPERTS, HIDDEN, 2 * inter), w(EXPERTS, inter, HIDDEN)
        self.cap = BATCH * TOPK  # per-expert capacity for the bmm fallback (worst case)

    def experts(self, x_sorted: torch.Tensor, expert_sorted: torch.Tensor) -> torch.Tensor:
        if self.use_grouped:
            # no bincount: it reads the max back to the host, which a graph capture forbids
            counts = torch.zeros(EXPERTS, device=DEV, dtype=torch.int64)
            counts.index_add_(0, expert_sorted, torch.ones_like(expert_sorted))
            offs = torch.cumsum(counts, 0).to(torch.int32)
            h = torch._grouped_mm(x_sorted, self.w_up, offs=offs)
            return torch._grouped_mm(silu_and_mul(h), self.w_down, offs=offs)
        # bmm fallback: scatter each routed token into its expert's capacity slot
        slot = torch.arange(x_sorted.shape[0], device=DEV)
        first = torch.searchsorted(expert_sorted, expert_sorted, right=False)
        slot = slot - first
        buf = torch.zeros(EXPERTS, self.cap, HIDDEN, device=DEV, dtype=DT)
        buf[expert_sorted, slot] = x_sorted
        h = torch.bmm(buf, self.w_up)
        h = silu_and_mul(h.reshape(EXPERTS * self.cap, -1)).reshape(EXPERTS, self.cap, -1)
        y = torch.bmm(h, self.w_down)
        return y[expert_sorted, slot]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = F.rms_norm(x, (HIDDEN,), self.norm_w)
        q, _k, _v = (h @ self.wqkv).split(HEADS * HEAD_DIM, dim=-1)
        q = q.view(BATCH, HEADS, 1, HEAD_DIM)
        attn = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache)
        x = x + attn.reshape(BATCH, HEADS * HEAD_DIM) @ self.wo
        h = F.rms_norm(x, (HIDDEN,), self.norm_w)
        probs = torch.softmax((h @ self.w_gate).float(), dim=-1)
        weights, experts = torch.topk(probs, TOPK, dim=-1)
        flat = experts.reshape(-1)
        expert_sorted, order = torch.sort(flat, stable=True)
        token_of = order // TOPK
        y = self.experts(h.index_select(0, token_of), expert_sorted)
        out = torch.zeros_like(h, dtype=torch.float32)
        out.index_add_(0, token_of, y.float() * weights.reshape(-1)[order, None])
        return x + out.to(DT)


def build(inter: int, use_grouped: bool):  # -> (step function, static input)
    layers = [Layer(inter, use_grouped) for _ in range(LAYERS)]
    x0 = (torch.randn(BATCH, HIDDEN) * 0.1).to(DEV, DT)

    def forward(x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = layer(x)
        return x

    return forward, x0


def grouped_mm_works() -> bool:
    if not CUDA or not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.randn(48, 64, device=DEV, dtype=DT)
        b = torch.randn(3, 64, 32, device=DEV, dtype=DT)
        offs = torch.tensor([16, 32, 48], device=DEV, dtype=torch.int32)
        got = torch._grouped_mm(a, b, offs=offs)
        ref = torch.cat([a[16 * i: 16 * (i + 1)] @ b[i] for i in range(3)])
        torch.cuda.synchronize()
        err = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
        META["grouped_mm_rel_err"] = err
        return err < 0.02
    except Exception as exc:
        META["errors"].append(f"grouped_mm: {exc!r}")  # type: ignore[union-attr]
        return False


def make_step(inter: int, use_grouped: bool):
    forward, x0 = build(inter, use_grouped)
    static_in = x0.clone()
    for _ in range(3):  # warmup: triton compile, cuBLAS handles, autotune, before capture
        forward(static_in)
    if not CUDA:
        return (lambda: forward(static_in)), "eager"
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            forward(static_in)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            static_out = forward(static_in)
        graph.replay()
        torch.cuda.synchronize()

        def replay() -> torch.Tensor:
            graph.replay()
            return static_out

        return replay, "cuda_graph"
    except Exception as exc:
        META["errors"].append(f"graph capture ({inter}, grouped={use_grouped}): {exc!r}")  # type: ignore[union-attr]
        torch.cuda.synchronize()
        return (lambda: forward(static_in)), "eager"


def record(profile_id: str, inter: int, use_grouped: bool) -> dict[str, object]:
    step, mode = make_step(inter, use_grouped)
    acts = [torch.profiler.ProfilerActivity.CPU]
    if CUDA:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    raw = os.path.join("/tmp", f"{profile_id}.json")
    with torch.profiler.profile(activities=acts, record_shapes=False, with_stack=False) as prof:
        for i in range(STEPS):
            with torch.profiler.record_function(f"decode_step_{i}"):
                logits = step()
                # the eager tail outside the graph, as SGLang samples: argmax over a vocab slice
                torch.argmax(logits.float() @ torch.ones(HIDDEN, 256, device=DEV), dim=-1)
        if CUDA:
            torch.cuda.synchronize()
    prof.export_chrome_trace(raw)
    dest = os.path.join(OUT, f"{profile_id}-TP-0.trace.json.gz")
    with open(raw, "rb") as src, gzip.open(dest, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    with open(raw) as fh:
        events = json.load(fh).get("traceEvents", [])
    kernels: dict[str, int] = {}
    for ev in events:
        if ev.get("cat") == "kernel":
            kernels[ev["name"][:160]] = kernels.get(ev["name"][:160], 0) + 1
    return {"file": os.path.basename(dest), "bytes": os.path.getsize(dest), "mode": mode,
            "inter": inter, "grouped_mm": use_grouped, "events": len(events), "kernels": kernels}


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    t0 = time.time()
    if CUDA:
        META["gpu"] = torch.cuda.get_device_name(0)
    use_grouped = grouped_mm_works()
    META["shape"] = {"batch": BATCH, "hidden": HIDDEN, "heads": HEADS, "head_dim": HEAD_DIM,
                     "kv_len": KV_LEN, "experts": EXPERTS, "topk": TOPK, "layers": LAYERS, "steps": STEPS}
    runs = []
    for pid, inter in (("real-A", 1024), ("real-B", 2048)):
        try:
            runs.append(record(pid, inter, use_grouped))
        except Exception:
            META["errors"].append(f"{pid}: {traceback.format_exc()[-1500:]}")  # type: ignore[union-attr]
            if use_grouped:  # one retry on the bmm path
                try:
                    runs.append(record(pid, inter, False))
                except Exception:
                    META["errors"].append(f"{pid} bmm: {traceback.format_exc()[-1500:]}")  # type: ignore[union-attr]
    META["runs"], META["seconds"] = runs, round(time.time() - t0, 1)
    with open(os.path.join(OUT, "meta.json"), "w") as fh:
        json.dump(META, fh, indent=1)
    print(json.dumps({k: v for k, v in META.items() if k != "runs"}, indent=1))
    for r in runs:
        print(r["file"], r["bytes"], r["mode"], r["grouped_mm"], r["events"])
        for name, n in sorted(r["kernels"].items()):  # type: ignore[union-attr]
            print(f"  {n:4d} {name}")
    return 0 if len(runs) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
