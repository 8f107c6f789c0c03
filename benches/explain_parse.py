"""How long the explain parser takes on traces the size a real TP8 GLM-5 decode profile writes.

A real decode step of a 78-layer MoE model launches about 20 kernels a layer (~1,600 a step);
`moe-tui explain` profiles 12 decode steps a side, one gzipped Chrome trace per TP rank. This
writes such a trace (kernels in CUDA-graph replays, plus a host event per kernel as torch's CPU
activity adds), then times `read_rank` (load + gunzip + JSON + per-step classes) in a fresh
process and reads that process's peak resident memory, per rank. Target: under 3 s and under 400 MB per rank on the project's 2-core box,
so 8 ranks x 2 sides explain in well under a minute.

    .venv/bin/python benches/explain_parse.py [--steps 12] [--kernels 1600]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui.sim.traces import BACKEND_KERNELS, COMMON_SPLIT  # noqa: E402

TARGET_S, TARGET_MB = 3.0, 400.0
CHILD = """
import json, resource, sys, time
from moe_tui.explain import read_rank
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
prof = read_rank(sys.argv[1])
seconds = time.perf_counter() - t0
print(json.dumps([seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, base, prof.n_steps]))
"""


def synthetic_trace(path: Path, steps: int, kernels: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    names = [n for _, n, _ in COMMON_SPLIT] + [n for g, r in BACKEND_KERNELS.values() for n in (*g, *r)]
    events: list[dict] = []
    t, corr = 1.0e15, 0
    for _ in range(steps):
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": t,
                       "dur": 6.0, "args": {"correlation": corr}})
        t += 20.0
        for _ in range(kernels):
            dur = rng.uniform(5.0, 120.0)
            name = rng.choice(names)
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t, "dur": dur,
                           "args": {"correlation": corr, "device": 0, "stream": 7, "grid": [132, 1, 1]}})
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::" + name[:20], "pid": 1, "tid": 1,
                           "ts": t, "dur": 3.0, "args": {"External id": corr}})
            t += dur + rng.uniform(0.5, 3.0)
    with gzip.open(path, "wt") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    return len(events)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--kernels", type=int, default=1600, help="kernels per decode step")
    ap.add_argument("--out", default=None, help="results file (default benches/results/explain_parse-DATE.md)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-TP-0-DECODE.trace.json.gz"
        n = synthetic_trace(path, args.steps, args.kernels)
        size = path.stat().st_size
        child = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True,
                               cwd=Path(__file__).resolve().parents[1])
        seconds, peak_mb, base_mb, steps = json.loads(child.stdout)
    ok = seconds < TARGET_S and peak_mb < TARGET_MB
    text = (f"# explain parser, {dt.date.today().isoformat()}\n\n"
            f"one rank: {args.steps} steps x {args.kernels} kernels ({n} events, {size / 1e6:.1f} MB gzipped): "
            f"{seconds:.2f} s, peak resident {peak_mb:.0f} MB ({base_mb:.0f} MB before reading); {steps} steps read "
            f"(target < {TARGET_S:g} s and < {TARGET_MB:g} MB: {'met' if ok else 'NOT met'})\n")
    print(text)
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / f"explain_parse-{dt.date.today()}.md"
    out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
