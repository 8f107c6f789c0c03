"""Holistic Trace Analysis' per-kernel sums of a folder of torch-profiler traces, as JSON on stdout.

Runs in HTA's own environment (`make hta`, .venv-hta: HTA 0.5.0 pins pandas/plotly/jupyterlab of its
own), never in moe-tui's. Output: {"hta": version, "ranks": {"<rank>": {"<kernel name>": sum_us}}},
from HTA's public `TraceAnalysis.get_gpu_kernel_breakdown` (every kernel, memory kernels included, no
top-k folding into "others"). HTA finds each file's rank by the pattern `"rank": N` (Kineto's
spacing), so a compactly written trace folds every rank into rank 0 and shows here as missing ranks.

HTA rounds sub-microsecond timestamps to whole microseconds by default (ceil the start, floor the
end); that is its own rounding, not a disagreement, so it is turned off (HTA_DISABLE_NS_ROUNDING=1)
unless `--keep-rounding` is given.

    .venv-hta/bin/python tools/hta/kernel_sums.py TRACE_DIR [--keep-rounding]
"""

from __future__ import annotations

import json
import logging
import os
import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: kernel_sums.py TRACE_DIR [--keep-rounding]", file=sys.stderr)
        return 2
    if "--keep-rounding" not in argv:
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.WARNING)  # HTA logs a warning per file; stdout carries only the JSON
    from importlib.metadata import version

    from hta.trace_analysis import TraceAnalysis

    analyzer = TraceAnalysis(trace_dir=argv[0])
    _, per_kernel = analyzer.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**9,
                                                      include_memory_kernels=True)
    ranks: dict[str, dict[str, float]] = {}
    for rank, name, sum_us in per_kernel[["rank", "name", "sum (us)"]].itertuples(index=False):
        by_name = ranks.setdefault(str(int(rank)), {})
        by_name[str(name)] = by_name.get(str(name), 0.0) + float(sum_us)
    print(json.dumps({"hta": version("HolisticTraceAnalysis"), "ranks": ranks}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
