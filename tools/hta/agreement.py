"""Explain's per-kernel sums against Holistic Trace Analysis' on one folder of traces.

Explain's side: `moe_tui.explain.trace.read_rank` on each `*.trace.json[.gz]` (rank from SGLang's
file name, as explain reads a capture), its `kernels` totals. HTA's side: `tools/hta/kernel_sums.py`
run by HTA's own python (`.venv-hta`, `make hta`), which finds each file's rank by Kineto's
`"rank": N`. For every rank and every kernel name either side saw: the relative difference of the
two sums. Agreement: the same ranks, the same names, every sum within `--tolerance` (0.1%).

    python tools/hta/agreement.py TRACE_DIR [--hta-python .venv-hta/bin/python] [--steps N]

Prints one JSON object (ranks, kernels, the worst relative difference, total ms per side) and
exits 0 when they agree, 1 when not, 2 when a side could not be read.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
KERNEL_SUMS = Path(__file__).resolve().with_name("kernel_sums.py")
TOLERANCE = 0.001


def explain_sums(trace_dir: Path, steps: int | None = None) -> dict[str, dict[str, float]]:
    """rank -> kernel name -> microseconds, as explain counts them."""
    from moe_tui.explain.trace import read_rank

    out: dict[str, dict[str, float]] = {}
    for path in sorted(trace_dir.iterdir()):
        if path.name.endswith((".trace.json", ".trace.json.gz")):
            prof = read_rank(path, steps=steps)
            out[str(prof.rank)] = {k.name: k.total_ms * 1000.0 for k in prof.kernels}
    return out


def hta_sums(trace_dir: Path, hta_python: str) -> dict[str, Any]:
    done = subprocess.run([hta_python, str(KERNEL_SUMS), str(trace_dir)], capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"HTA failed ({hta_python}): {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def compare(explain: dict[str, dict[str, float]], hta: dict[str, dict[str, float]],
            tolerance: float = TOLERANCE) -> dict[str, Any]:
    """The agreement record of two rank -> kernel -> us maps."""
    worst, worst_at, unmatched = 0.0, "", []
    totals = {"explain_ms": 0.0, "hta_ms": 0.0}
    kernels = 0
    for rank in sorted(set(explain) | set(hta), key=int):
        a, b = explain.get(rank, {}), hta.get(rank, {})
        totals["explain_ms"] += sum(a.values()) / 1000.0
        totals["hta_ms"] += sum(b.values()) / 1000.0
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                unmatched.append(f"rank {rank}: {name[:80]} only in {'explain' if name in a else 'HTA'}")
                continue
            kernels += 1
            rel = abs(a[name] - b[name]) / max(abs(b[name]), 1e-9)
            if rel > worst:
                worst, worst_at = rel, f"rank {rank}: {name[:80]}"
    return {"ranks_explain": sorted(explain, key=int), "ranks_hta": sorted(hta, key=int), "kernels": kernels,
            "unmatched": unmatched, "worst_rel_diff": worst, "worst_at": worst_at, "tolerance": tolerance,
            **{k: round(v, 6) for k, v in totals.items()},
            "agree": not unmatched and worst <= tolerance and sorted(explain) == sorted(hta)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace_dir", type=Path)
    ap.add_argument("--hta-python", default=str(REPO / ".venv-hta" / "bin" / "python"))
    ap.add_argument("--steps", type=int, default=None, help="the ProfileReq's num_steps (EXTEND traces)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE)
    args = ap.parse_args(argv)
    try:
        hta = hta_sums(args.trace_dir, args.hta_python)
        mine = explain_sums(args.trace_dir, args.steps)
    except (OSError, RuntimeError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    record = {"hta": hta.get("hta"), **compare(mine, hta["ranks"], args.tolerance)}
    print(json.dumps(record, indent=1))
    return 0 if record["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
