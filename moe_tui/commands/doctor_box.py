"""`moe-tui doctor --box`: is this machine ready to run the profiles? One line per check, each
ok / warn / fail with what to do about it; `--json` for a script; exit 1 when a check fails.

Checks (each a function returning `Check`s, its probes passed in so tests can stand in for them):
- `nvml`: the driver and NVML answer, with one sample's latency and the driver version;
- `gpus`: the GPU indices the profiles name against the GPUs present;
- `sglang`: SGLang importable by each profile's python, its version (moe-tui is checked against
  0.5.23) and FlashInfer's;
- `profile <name>`: the profile's launch args through SGLang's own parser (the emulator's for
  sim profiles);
- `port <n>`: each profile's port free (else who holds it);
- `disk`: free space where logs, traces and the profiler's output go;
- `recorder <name>`: whether `explain` can record expert load on that profile's server;
- `throttle`: NVML's clock-event reasons that make a run measure the cooling or power budget;
- `data dir`: moe-tui's data dir exists, is writable and owner-only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.records import FreeForm

if TYPE_CHECKING:
    from moe_tui.profiles import ServerProfile
    from moe_tui.telemetry import TelemetrySnapshot

OK, WARN, FAIL = "ok", "warn", "fail"
DISK_WARN_BYTES = 20 * 2**30  # a profiled run keeps up to 256 MB; a day of logs and traces, more
DISK_FAIL_BYTES = 2 * 2**30
SGLANG_VERSION = "0.5.23"
FLASHINFER_VERSION = "0.7.2"
_VERSIONS = ("import json, importlib.metadata as m\nout = {}\nfor d in ('sglang', 'flashinfer-python'):\n"
             "    try:\n        out[d] = m.version(d)\n    except m.PackageNotFoundError:\n        out[d] = None\n"
             "try:\n    import sglang.srt.server_args  # noqa\n    out['import'] = None\nexcept Exception as exc:\n"
             "    out['import'] = f'{type(exc).__name__}: {exc}'\nprint(json.dumps(out))")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok, warn, fail
    detail: str
    fix: str = ""

    def line(self) -> str:
        fix = f"  -> {self.fix}" if self.fix and self.status != OK else ""
        return f"{self.status.upper():4} {self.name}: {self.detail}{fix}"


# -- NVML, GPUs, throttle ---------------------------------------------------------------------------
def nvml_checks(sample: Callable[[], TelemetrySnapshot], profiles: Sequence[ServerProfile]) -> list[Check]:
    """nvml, gpus and throttle from one NVML sample (timed)."""
    from moe_tui.telemetry.data import SUSPECT_CLOCK_EVENTS

    began = time.monotonic()
    snap = sample()
    took_ms = (time.monotonic() - began) * 1000.0
    needed = sorted({i for p in profiles if p.engine == "sglang" for i in p.gpus})
    fix = ("install the NVIDIA driver (nvidia-smi must list the GPUs) and nvidia-ml-py in moe-tui's env "
           "(pip install nvidia-ml-py)")
    if not snap.available:
        why = snap.reason or "NVML unavailable"
        gpus = Check("gpus", FAIL if needed else WARN,
                     f"cannot see the GPUs ({why}); the profiles name {needed or 'none'}", fix)
        return [Check("nvml", FAIL, why, fix), gpus,
                Check("throttle", WARN, "not checked: no NVML sample", fix)]
    out = [Check("nvml", OK, f"driver {snap.driver_version or '?'} (CUDA {snap.cuda_driver_version or '?'}), "
                             f"{len(snap.gpus)} GPU(s), one sample in {took_ms:.1f} ms")]
    present = {g.index: g for g in snap.gpus}
    missing = [i for i in needed if i not in present]
    lost = [g.index for g in snap.gpus if g.lost]
    names = sorted({g.name or "?" for g in snap.gpus})
    if missing or lost:
        out.append(Check("gpus", FAIL, f"the profiles name GPU(s) {needed}; present: {sorted(present)} "
                                       f"({', '.join(names)}){f'; lost: {lost}' if lost else ''}",
                         "fix the profiles' 'gpus' key, or reseat / reset the lost GPU (nvidia-smi -r)"))
    else:
        out.append(Check("gpus", OK, f"the profiles' GPU(s) {needed or 'none'} present ({', '.join(names)})"))
    hot = {g.index: sorted(set(g.clock_events) & SUSPECT_CLOCK_EVENTS) for g in snap.gpus}
    hot = {i: r for i, r in hot.items() if r}
    out.append(Check("throttle", WARN, "clock events now: " + "; ".join(f"GPU {i}: {', '.join(r)}"
                                                                        for i, r in sorted(hot.items())),
                     "check cooling and power limits (nvidia-smi -q -d PERFORMANCE) before measuring")
               if hot else Check("throttle", OK, "no power or thermal clock events"))
    return out


# -- SGLang, profiles ---------------------------------------------------------------------------------
def _pythons(profiles: Sequence[ServerProfile]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in profiles:
        if p.engine == "sglang":
            out.setdefault(p.python or sys.executable, []).append(p.name)
    return out


def probe_versions(python: str) -> FreeForm:
    """SGLang's and FlashInfer's versions in `python`, and why SGLang does not import (or None)."""
    try:
        proc = subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"cannot run {python}: {exc}"}
    try:
        data: FreeForm = json.loads(proc.stdout.strip().splitlines()[-1])
        return data
    except (ValueError, IndexError):
        return {"error": f"{python} answered no versions (exit {proc.returncode}): {proc.stderr.strip()[-200:]}"}


def sglang_checks(profiles: Sequence[ServerProfile],
                  probe: Callable[[str], FreeForm] = probe_versions) -> list[Check]:
    out: list[Check] = []
    for python, names in _pythons(profiles).items():
        v = probe(python)
        who = f"{python} (profiles {', '.join(names)})"
        pip = f"{python} -m pip install 'sglang=={SGLANG_VERSION}'"
        if v.get("error"):
            out.append(Check("sglang", FAIL, f"{who}: {v['error']}", "set the profiles' 'python' to SGLang's interpreter"))
        elif not v.get("sglang"):
            out.append(Check("sglang", FAIL, f"{who}: SGLang is not installed", pip))
        elif v.get("import"):
            out.append(Check("sglang", FAIL, f"{who}: SGLang {v['sglang']} does not import: {v['import']}",
                             "fix its environment (CUDA, torch) until `python -c 'import sglang.srt.server_args'` works"))
        else:
            fi = v.get("flashinfer-python")
            ok = v["sglang"] == SGLANG_VERSION and fi == FLASHINFER_VERSION
            out.append(Check("sglang", OK if ok else WARN,
                             f"{who}: SGLang {v['sglang']}, FlashInfer {fi or 'not installed'}",
                             f"moe-tui's SGLang facts are checked against SGLang {SGLANG_VERSION} with FlashInfer "
                             f"{FLASHINFER_VERSION}: {pip}"))
    if not out:
        out.append(Check("sglang", OK, "no profile runs SGLang (emulator profiles only)"))
    return out


def profile_checks(profiles: Sequence[ServerProfile], sglang_ready: bool) -> list[Check]:
    """Each profile's launch args through SGLang's parser (the emulator's for sim profiles)."""
    from moe_tui.commands.profiles import _SGLANG_PARSE, STUB_FILE, _check_with_emulator_parser

    out: list[Check] = []
    for p in profiles:
        name = f"profile {p.name}"
        args = p.argv()[3:]
        if p.engine == "sim":
            problem, _ = _check_with_emulator_parser(args)
            out.append(Check(name, FAIL, f"the emulator rejects its args: {problem}", f"edit {p.source}")
                       if problem else Check(name, OK, "accepted by the emulator's parser"))
            continue
        if not sglang_ready:
            out.append(Check(name, WARN, "not checked: SGLang is not importable here", "see the sglang check"))
            continue
        try:
            proc = subprocess.run([p.python or sys.executable, "-c", _SGLANG_PARSE, str(STUB_FILE), *args],
                                  capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            out.append(Check(name, FAIL, f"cannot run its python: {exc}", f"fix 'python' in {p.source}"))
            continue
        if proc.returncode == 0:
            out.append(Check(name, OK, "accepted by SGLang's parser"))
        else:
            tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            out.append(Check(name, FAIL, f"SGLang's parser rejects its args: {tail}",
                             f"edit {p.source} (`moe-tui profiles check` says more)"))
    return out


# -- ports, disk, recorder, data dir --------------------------------------------------------------------
def port_checks(profiles: Sequence[ServerProfile]) -> list[Check]:
    from moe_tui.servers.preflight import port_holder, port_is_free

    out: list[Check] = []
    for port, names in sorted(_by_port(profiles).items()):
        host = next(p.host for p in profiles if p.port == port)
        if port_is_free(host, port):
            out.append(Check(f"port {port}", OK, f"free ({', '.join(names)})"))
            continue
        pid, who = port_holder(port)
        held = f"held by pid {pid} ({who})" if pid else "in use (holder not visible)"
        out.append(Check(f"port {port}", FAIL, f"{held}; needed by {', '.join(names)}",
                         "stop that process (moe-tui server stop / kill the pid) or give the profile another port"))
    return out


def _by_port(profiles: Sequence[ServerProfile]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for p in profiles:
        out.setdefault(p.port, []).append(p.name)
    return out


def disk_checks(folders: dict[str, Path], usage: Callable[[Path], int] | None = None) -> list[Check]:
    """Free bytes under each folder (the nearest existing parent is measured)."""
    def free(path: Path) -> int:
        while not path.exists() and path != path.parent:
            path = path.parent
        return shutil.disk_usage(path).free

    measure = usage or free
    out = []
    for what, path in folders.items():
        left = measure(path)
        status = FAIL if left < DISK_FAIL_BYTES else WARN if left < DISK_WARN_BYTES else OK
        out.append(Check("disk", status, f"{what} {path}: {left / 2**30:.1f} GiB free",
                         f"free space under {path} (at least {DISK_WARN_BYTES // 2**30} GiB for logs and traces)"))
    return out


def recorder_checks(profiles: Sequence[ServerProfile]) -> list[Check]:
    from moe_tui.explain.recorder import RECORDER_FLAG, recorder_mode, variant_name

    out = []
    for p in profiles:
        mode = recorder_mode(p.extra_args)
        out.append(Check(f"recorder {p.name}", OK, f"explain records expert load ({RECORDER_FLAG} {mode})") if mode
                   else Check(f"recorder {p.name}", WARN, f"no {RECORDER_FLAG}: explain skips expert load on it "
                                                          f"(asking would kill the server)",
                              f"use a variant ({variant_name(p.name)}) with \"{RECORDER_FLAG}\", \"stat\" in extra_args"))
    return out


def data_dir_check() -> Check:
    from moe_tui import paths

    try:
        d = paths.data_dir()
    except (OSError, paths.DataDirError) as exc:
        return Check("data dir", FAIL, str(exc), "set MOE_TUI_HOME to a writable folder")
    if not os.access(d, os.W_OK):
        return Check("data dir", FAIL, f"{d} is not writable", f"chown/chmod {d} or set MOE_TUI_HOME")
    mode = d.stat().st_mode & 0o777
    if mode & 0o077:
        return Check("data dir", WARN, f"{d} is mode {mode:o}: others can read runs and traces", f"chmod 700 {d}")
    return Check("data dir", OK, f"{d} (owner-only, writable)")


# -- all of them ---------------------------------------------------------------------------------------
def run_checks(profiles: Sequence[ServerProfile], problems: Sequence[str] = ()) -> list[Check]:
    from moe_tui import paths
    from moe_tui.telemetry import NvmlSampler

    checks = [Check("profiles", FAIL, p, "fix the file (`moe-tui profiles check`)") for p in problems]
    checks += nvml_checks(NvmlSampler(process_names=False).sample, profiles)
    versions = sglang_checks(profiles)
    checks += versions
    checks += profile_checks(profiles, sglang_ready=all(c.status != FAIL for c in versions))
    checks += port_checks(profiles)
    folders = {"profiler output": Path(os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp"))}
    try:
        folders = {"data dir (logs, traces)": paths.data_dir(writable=False)} | folders
    except paths.DataDirError:
        pass  # the data dir check says why
    checks += disk_checks(folders)
    checks += recorder_checks([p for p in profiles if p.engine == "sglang"])
    checks.append(data_dir_check())
    return checks


def report(checks: Sequence[Check], as_json: bool) -> int:
    failed = any(c.status == FAIL for c in checks)
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        for c in checks:
            print(c.line())
        counts = {s: sum(c.status == s for c in checks) for s in (OK, WARN, FAIL)}
        print(f"{counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail")
    return 1 if failed else 0
