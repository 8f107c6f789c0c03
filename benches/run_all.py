"""`make bench`: run every benchmark in turn, each writing its dated results under benches/results/.

Benchmarks are run by hand, never by `make test`: the machines are shared and noisy, so each
script compares side by side within one run and reports medians and ratios. `--quick` passes the
scripts' own quick modes where they have one. NVML figures need a GPU: on a machine without a
driver `nvml_sample.py` only reports that (the H200 results came from `tools/nvml_probe.py`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHES: list[tuple[str, list[str], list[str]]] = [
    # script, full args, quick args
    ("sim_throughput.py", [], []),
    ("client_headroom.py", [], ["--quick", "--repeats", "1"]),
    ("nvml_sample.py", [], ["--n", "50"]),
    ("tui_overhead.py", [], ["--seconds", "5"]),
    ("explain_parse.py", [], ["--steps", "4"]),
    ("aa_emulator.py", ["--seeds", "10"], ["--seeds", "2"]),
    ("scale.py", ["--sizes", "24,1000,10000,100000"], ["--sizes", "1000", "--repeats", "1", "--idle-s", "3"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the scripts' quick modes")
    parser.add_argument("--only", help="run only benchmarks whose file name contains this")
    args = parser.parse_args()
    failed = []
    for script, full, quick in BENCHES:
        if args.only and args.only not in script:
            continue
        argv = [sys.executable, str(HERE / script), *(quick if args.quick else full)]
        print(f"== {script} {' '.join(argv[2:])}", flush=True)
        started = time.monotonic()
        code = subprocess.call(argv, cwd=HERE.parent)
        print(f"== {script}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code != 0:
            failed.append(script)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
