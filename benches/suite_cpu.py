"""Where `make test`'s CPU goes, by process kind: a clean clone of HEAD, `make install`, then `make test`
under BSD process accounting (every exiting process's CPU, daemons and forks included) with a one-line
`.pth` hook in the clone's venv logging each Python process's pid and argv. Prints the suite's wall,
the box's busy CPU seconds over it and the CPU by command (`python -m moe_tui.sim`, `moe_tui run`, the
xdist workers, ...), so a cut is measured where it lands. Needs root (acct(2)); run by hand, never by
`make test` (the two-`make test` figure is two of these at once: `--tag p1`, `--tag p2`).

    python benches/suite_cpu.py --tag a [--keep]   # writes benches/results/suite_cpu-<date>-<tag>.md
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ACCT_V3 = "<BBHIIIIIIf" + "H" * 8 + "16s"  # struct acct_v3 (linux/acct.h): 64 bytes a record
AHZ = 100  # acct's clock ticks a second


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_acct(path: Path) -> dict[int, tuple[int, str, float]]:
    """pid -> (ppid, comm, CPU seconds) of every process that exited while accounting was on."""
    data, size = path.read_bytes(), struct.calcsize(ACCT_V3)
    out: dict[int, tuple[int, str, float]] = {}
    for off in range(0, len(data) - size + 1, size):
        f = struct.unpack_from(ACCT_V3, data, off)
        pid, ppid, comm = f[6], f[7], f[-1].split(b"\0")[0].decode(errors="replace")
        out[pid] = (ppid, comm, (_comp(f[10]) + _comp(f[11])) / AHZ)
    return out


def kind(argv: str) -> str:
    """A command line reduced to what it runs: `PY -m moe_tui run`, `PY -m moe_tui.sim`, ..."""
    words = re.sub(r"\S*/bin/python[0-9.]*", "PY", argv).split()
    words = [w for w in words if w != "-u"]
    if len(words) >= 3 and words[1] == "-m":
        return " ".join(words[:4] if words[2] == "moe_tui" and len(words) > 3 else words[:3])
    if len(words) >= 2 and words[1] == "-c":
        return "PY -c (an xdist worker, or a test's inline script)"
    return " ".join(words[:2])[:60]


def by_kind(acct: dict[int, tuple[int, str, float]], argv: dict[int, str]) -> dict[str, list[float]]:
    """CPU and count per kind; a process that logged no argv (a fork, another venv's Python, a
    daemon) is counted under its parent's kind as a fork, else under its command name."""
    out: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for pid, (ppid, comm, cpu) in acct.items():
        name = kind(argv[pid]) if pid in argv else (f"fork of {kind(argv[ppid])}" if ppid in argv else comm)
        out[name][0] += 1
        out[name][1] += cpu
    return out


def busy_cpu_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def run(tag: str, keep: bool) -> str:
    clone, acct_file, argv_log = Path(f"/tmp/suite-cpu-{tag}"), Path(f"/tmp/suite-cpu-{tag}.acct"), Path(f"/tmp/suite-cpu-{tag}.argv")
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["make", "install"], cwd=clone, check=True, capture_output=True)
    site = subprocess.run([str(clone / ".venv/bin/python"), "-c", "import site; print(site.getsitepackages()[0])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "zz_suite_cpu_argv.pth").write_text(
        f"import os; open({str(argv_log)!r}, 'a').write(str(os.getpid()) + ' ' + open('/proc/self/cmdline', 'rb')"
        ".read().replace(b'\\0', b' ').decode(errors='replace')[:300] + '\\n')\n")
    for f in (acct_file, argv_log):
        f.unlink(missing_ok=True)
    acct_file.touch()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(str(acct_file).encode()) != 0:
        sys.exit(f"acct({acct_file}) failed: {os.strerror(ctypes.get_errno())} (needs root)")
    busy0, t0 = busy_cpu_s(), time.monotonic()
    try:
        done = subprocess.run(["make", "test"], cwd=clone, capture_output=True, text=True)
    finally:
        libc.acct(None)
    wall, busy = time.monotonic() - t0, busy_cpu_s() - busy0
    argv: dict[int, str] = {}
    for line in argv_log.read_text(errors="replace").splitlines():
        pid, _, rest = line.partition(" ")
        if pid.isdigit():
            argv.setdefault(int(pid), rest.strip())
    kinds = by_kind(read_acct(acct_file), argv)
    head = subprocess.run(["git", "log", "--oneline", "-1"], cwd=clone, capture_output=True, text=True).stdout.strip()
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ passed|^workers:|^RERUN|^FAILED", line)]
    lines = [f"# `make test` CPU by process kind, {date.today()} ({tag})", "",
             f"Commit: `{head}`. make test exit {done.returncode}, wall {wall:.0f} s; the box's busy CPU over it "
             f"{busy:.0f} s (both cores: {busy / wall / (os.cpu_count() or 1):.0%}); accounted "
             f"{sum(c for _, c in kinds.values()):.0f} s.", "", *[f"    {s}" for s in summary], "",
             "| CPU s | processes | s each | kind |", "|---|---|---|---|"]
    for name, (n, cpu) in sorted(kinds.items(), key=lambda kv: -kv[1][1])[:30]:
        lines.append(f"| {cpu:.1f} | {n:.0f} | {cpu / n:.2f} | `{name}` |")
    if not keep:
        shutil.rmtree(clone, ignore_errors=True)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", default="a", help="names the clone, the logs and the results file")
    ap.add_argument("--keep", action="store_true", help="keep the clone (its make test log is not kept otherwise)")
    args = ap.parse_args()
    report = run(args.tag, args.keep)
    out = REPO / "benches" / "results" / f"suite_cpu-{date.today()}-{args.tag}.md"
    out.write_text(report)
    print(report)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
