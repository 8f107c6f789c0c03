"""A command run inside a small wrapper process that reports the command's peak memory.

The wrapper's waited-for children are the command and whatever the command reaped, so its
RUSAGE_CHILDREN.ru_maxrss is the command's own peak. The test worker's RUSAGE_CHILDREN is no use for
that: it holds the largest process any earlier test on that worker reaped (a 418 MB one failed a
100 MB bound that way once the test order changed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_WRAPPER = (
    "import json, resource, subprocess, sys\n"
    "markers = json.loads(sys.argv[1])\n"
    "p = subprocess.run(sys.argv[2:], capture_output=True)\n"
    "sys.stdout.buffer.write(p.stdout[-4000:] + p.stderr[-4000:])\n"
    "print('\\n' + json.dumps({'exit': p.returncode, 'bytes': len(p.stdout),\n"
    "                          'peak_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,\n"
    "                          'found': [m for m in markers if m.encode() in p.stdout]}))\n"
)


@dataclass(frozen=True)
class Measured:
    returncode: int
    output: str  # the tail of its stdout, then of its stderr
    stdout_bytes: int
    peak_kib: int
    found: tuple[str, ...]  # the markers its whole stdout contained


def run_measured(argv: Sequence[str], env: Mapping[str, str], timeout: float,
                 markers: Sequence[str] = ()) -> Measured:
    """Run `argv` to the end; its exit status, output tail, stdout size, peak RSS and `markers` seen."""
    out = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(list(markers)), *argv], env=dict(env),
                         capture_output=True, text=True, timeout=timeout)
    text, _, last = out.stdout.rstrip("\n").rpartition("\n")
    report = json.loads(last)
    return Measured(report["exit"], text + out.stderr, report["bytes"], report["peak_kib"], tuple(report["found"]))
