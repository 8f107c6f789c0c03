"""Server lifecycle: start, watch and stop one SGLang server (or its emulator) per profile.

What lives here:

- `ManagedServer`: one profile's server as a child process in its own session (process group),
  with stdin closed and stdout+stderr written straight to a per-start log file. The log file is
  tailed into an in-memory ring buffer (and `ServerLogLine` events), and startup phases are read
  from SGLang's log lines. States: stopped, starting, ready, failed, stopping; every change emits
  `ServerStateChanged` with a reason. Ready means `/health_generate` answered 200 (`/v1/models`
  answers before warmup and is not readiness). After ready, `/server_info` and `/model_info` are
  read: the resolved MoE backend, the SGLang version and every resolved arg go to the store, and a
  resolved backend other than the profile's is flagged `backend_mismatch` (a silent fallback).
  While starting or ready, an exit or a health check that stops answering is a failure with the
  exit code, signal and log tail. While ready, `/health` is probed and `/metrics` scraped
  (`ServerMetrics` events).
- `ServerManager`: several `ManagedServer`s by profile name, one subscriber list for all.
- Pre-start checks (`preflight`): the port is free (else the holder is named), no managed server
  in this process uses an overlapping GPU set, the GPU indices exist, and no foreign process holds
  the GPUs (refused unless forced). GPU facts come from an injectable `GpuProbe` (NVML by default).
- `terminate_server`: the stop that leaves nothing behind: descendants are collected *before*
  signalling (SGLang's schedulers can be reparented away from the group), SIGTERM to the group and
  to each of them, a grace period, SIGKILL, then a scan of the whole process table for any
  process of the group or carrying this start's `MOE_TUI_SERVER_ID` environment marker, and
  (with NVML) a check that the GPUs no longer list any of them. It is plain synchronous code, so
  the CLI can stop a server started by another process and exit handlers can use it.
- A module-level registry of live servers with `install_exit_handlers()` (atexit, SIGTERM,
  SIGHUP) that stops every server the user did not mark `keep_running`.
- `parse_prometheus_text` and `parse_server_info`: pure parsers with clear errors.

Why the child writes to the log file directly instead of a pipe: a server the user keeps
running must survive its controller's exit, and a pipe whose reader died turns every log write
into EPIPE. The file is also what `moe-tui server logs` reads from another process.

No Textual here: the TUI and the headless runner both subscribe with plain callbacks.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from moe_tui.events import Event, Notice, ServerLogLine, ServerMetrics, ServerStateChanged
from moe_tui.profiles import ServerProfile, redact_argv, redact_env

# -- states and phases ---------------------------------------------------------------------------
STOPPED, STARTING, READY, FAILED, STOPPING = "stopped", "starting", "ready", "failed", "stopping"
STATES = (STOPPED, STARTING, READY, FAILED, STOPPING)
LIVE_STATES = (STARTING, READY, STOPPING)

PHASE_LAUNCHING = "launching"
PHASE_LOADING = "loading weights"
PHASE_GRAPHS = "capturing graphs"
PHASE_WARMUP = "warmup"
PHASE_READY = "ready"
PHASES = (PHASE_LAUNCHING, PHASE_LOADING, PHASE_GRAPHS, PHASE_WARMUP, PHASE_READY)

# Log line fragments (SGLang's own wording, which the emulator reproduces) -> phase reached.
_PHASE_MARKERS: tuple[tuple[str, str], ...] = (
    ("Load weight begin", PHASE_LOADING),
    ("Load weight end", PHASE_LOADING),
    ("Capture cuda graph begin", PHASE_GRAPHS),
    ("Capture cuda graph end", PHASE_WARMUP),
    ("Application startup complete", PHASE_WARMUP),
    ("Uvicorn running on", PHASE_WARMUP),
    ("The server is fired up and ready to roll", PHASE_WARMUP),
)

SERVER_ID_ENV = "MOE_TUI_SERVER_ID"
LOG_TAIL_LINES = 50
DEFAULT_RING_LINES = 2000
# SGLang drains in-flight requests on SIGTERM (about 20 s); the emulator has nothing to drain.
DEFAULT_GRACE_S = {"sglang": 20.0, "sim": 3.0}
KILL_CONFIRM_S = 10.0

EventCallback = Callable[[Event], None]


class ServerError(RuntimeError):
    """A server could not be started, became unusable, or did not stop cleanly."""


class ServerStartError(ServerError):
    """A pre-start check refused the start. The message names the port, GPUs or process."""


class PortInUseError(ServerStartError):
    def __init__(self, message: str, *, port: int, holder_pid: int | None, holder_name: str | None):
        super().__init__(message)
        self.port = port
        self.holder_pid = holder_pid
        self.holder_name = holder_name


class GpuConflictError(ServerStartError):
    """Another managed server uses some of the same GPUs, or a GPU index does not exist."""


class ForeignGpuProcessError(ServerStartError):
    """A process that is not ours holds one of the profile's GPUs (start with force=True to override)."""


class ServerFailed(ServerError):
    """The server failed while starting or running; `event` carries exit code, signal and log tail."""

    def __init__(self, message: str, event: ServerStateChanged | None = None):
        super().__init__(message)
        self.event = event


class ServerInfoError(ValueError):
    """`/server_info` answered something that is not a usable SGLang server-info object."""


# -- GPU facts (injectable so tests and machines without NVML do not depend on it) -------------
@dataclass(frozen=True)
class GpuView:
    """What the machine says about its GPUs: how many, and which processes use each (None = unknown)."""

    count: int | None
    processes: Mapping[int, tuple[tuple[int, str | None], ...] | None] = field(default_factory=dict)

    def pids_on(self, gpus: Iterable[int]) -> dict[int, list[tuple[int, str | None]]]:
        out: dict[int, list[tuple[int, str | None]]] = {}
        for g in gpus:
            procs = self.processes.get(g)
            if procs:
                out[g] = list(procs)
        return out


GpuProbe = Callable[[], "GpuView | None"]

_NVML_SAMPLER: Any = None


def nvml_gpu_view() -> GpuView | None:
    """GPU count and compute processes from NVML (moe_tui.telemetry); None without a driver."""
    global _NVML_SAMPLER
    try:
        from moe_tui.telemetry import NvmlSampler
    except ImportError:
        return None
    if _NVML_SAMPLER is None:
        _NVML_SAMPLER = NvmlSampler()
    snapshot = _NVML_SAMPLER.sample()
    if not snapshot.available:
        return None
    processes = {
        g.index: None if g.processes is None else tuple((p.pid, p.name) for p in g.processes)
        for g in snapshot.gpus
    }
    return GpuView(count=len(snapshot.gpus), processes=processes)


def no_gpu_view() -> GpuView | None:
    """A probe for machines (and tests) where GPU facts are not to be consulted."""
    return None


# -- pure parsers --------------------------------------------------------------------------------
_PROM_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class PromSample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_prometheus_text(text: str) -> list[PromSample]:
    """Prometheus text exposition format -> samples. Comments and malformed lines are skipped
    (one odd line from a server must not blank the whole panel)."""
    samples: list[PromSample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            continue
        value_text = m.group("value")
        try:
            value = float(value_text)
        except ValueError:
            lowered = value_text.lower()
            if lowered in ("nan", "+inf", "-inf", "inf"):
                value = float(lowered.replace("+", ""))
            else:
                continue
        labels = {k: bytes(v, "utf-8").decode("unicode_escape") for k, v in _PROM_LABEL.findall(m.group("labels") or "")}
        samples.append(PromSample(m.group("name"), labels, value))
    return samples


def metric_value(samples: Sequence[PromSample], name: str) -> float | None:
    """One gauge's value; several label sets (one per engine / DP rank) are summed."""
    values = [s.value for s in samples if s.name == name and not math.isnan(s.value)]
    return sum(values) if values else None


def metrics_event(profile: str, samples: Sequence[PromSample], healthy: bool) -> ServerMetrics:
    # token_usage is a fraction per rank: the mean is the meaningful aggregate, not the sum.
    usage = [s.value for s in samples if s.name == "sglang:token_usage" and not math.isnan(s.value)]
    return ServerMetrics(
        profile=profile,
        healthy=healthy,
        running_requests=metric_value(samples, "sglang:num_running_reqs"),
        queued_requests=metric_value(samples, "sglang:num_queue_reqs"),
        token_usage=(sum(usage) / len(usage)) if usage else None,
        gen_throughput=metric_value(samples, "sglang:gen_throughput"),
    )


@dataclass(frozen=True)
class ServerInfo:
    resolved_backend: str
    version: str | None
    args: dict[str, Any]


def parse_server_info(payload: str | bytes | Mapping[str, Any]) -> ServerInfo:
    """`/server_info` body -> resolved backend, version and the whole resolved args dict.

    Raises ServerInfoError naming what is wrong (not JSON, not an object, no moe_runner_backend).
    """
    if isinstance(payload, (str, bytes)):
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            snippet = payload[:80] if isinstance(payload, str) else payload[:80].decode("utf-8", "replace")
            raise ServerInfoError(f"/server_info is not JSON ({exc}); it began {snippet!r}") from None
    else:
        data = payload
    if not isinstance(data, Mapping):
        raise ServerInfoError(f"/server_info is a JSON {type(data).__name__}, expected an object")
    args = dict(data)
    # Some SGLang versions nest the resolved args; accept both shapes.
    nested = args.get("server_args")
    source = nested if isinstance(nested, Mapping) and "moe_runner_backend" in nested else args
    backend = source.get("moe_runner_backend")
    if not isinstance(backend, str) or not backend:
        raise ServerInfoError(
            f"/server_info has no moe_runner_backend string (got {backend!r}); "
            f"keys: {', '.join(sorted(map(str, args))[:20]) or 'none'}"
        )
    version = args.get("version")
    return ServerInfo(backend, version if isinstance(version, str) else None, args)


# -- the process table ---------------------------------------------------------------------------
def _alive(proc: Any, popen: subprocess.Popen | None = None) -> bool:
    """True while a process exists and is not a zombie (a zombie holds no memory or GPU)."""
    import psutil

    if popen is not None and proc.pid == popen.pid:
        return popen.poll() is None
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def processes_of(leader_pid: int | None, marker: str | None, *, leader_verified: bool = True) -> list[Any]:
    """Every live process that belongs to a server: the leader, its descendants, members of its
    process group, and any process whose environment carries `MOE_TUI_SERVER_ID=marker`
    (readable for our own user's processes; this is what finds reparented schedulers).

    `leader_verified=False` (the leader is gone or may be a reused PID) skips the leader, its
    children and its group, unless a member of that group carries the marker."""
    import psutil

    found: dict[int, Any] = {}
    me = os.getpid()
    if leader_pid is not None and leader_verified:
        with contextlib.suppress(psutil.Error):
            leader = psutil.Process(leader_pid)
            found[leader.pid] = leader
            for child in leader.children(recursive=True):
                found[child.pid] = child
    group: dict[int, Any] = {}
    for proc in psutil.process_iter():
        if proc.pid == me or proc.pid in found:
            continue
        if leader_pid is not None:
            with contextlib.suppress(OSError):
                if os.getpgid(proc.pid) == leader_pid:
                    group[proc.pid] = proc
        if marker:
            with contextlib.suppress(psutil.Error, OSError):
                if proc.environ().get(SERVER_ID_ENV) == marker:
                    found[proc.pid] = proc
    # A group member proves the group id is still ours only if the group id is held by a process
    # we know (a live, verified leader, or any member with our marker): group ids are never
    # reused while a member lives.
    if group and (leader_verified or any(pid in found for pid in group)):
        found.update(group)
    return [p for p in found.values() if _alive(p)]


def has_marker(pid: int, marker: str) -> bool:
    import psutil

    try:
        return psutil.Process(pid).environ().get(SERVER_ID_ENV) == marker
    except (psutil.Error, OSError):
        return False


@dataclass(frozen=True)
class StopReport:
    """What a stop did and what it found afterwards. `clean` is the promise kept."""

    signalled: tuple[int, ...] = ()
    sent_sigkill: bool = False
    survivors: tuple[int, ...] = ()  # processes of the server still alive after SIGKILL
    gpu_checked: bool = False
    gpu_holders: tuple[int, ...] = ()  # server PIDs NVML still lists on the profile's GPUs
    exit_code: int | None = None
    exit_signal: int | None = None
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.survivors and not self.gpu_holders

    def describe(self) -> str:
        parts = [f"stopped {len(self.signalled)} process(es) in {self.seconds:.1f} s"]
        if self.sent_sigkill:
            parts.append("SIGKILL was needed")
        if self.survivors:
            parts.append(f"STILL ALIVE: pids {', '.join(map(str, self.survivors))}")
        if self.gpu_holders:
            parts.append(f"NVML still lists pids {', '.join(map(str, self.gpu_holders))} on the GPUs")
        return "; ".join(parts)


def _signal_all(group_id: int | None, procs: Sequence[Any], sig: int) -> None:
    if group_id is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group_id, sig)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)


def _wait_gone(procs: Sequence[Any], popen: subprocess.Popen | None, timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if _alive(p, popen)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def terminate_server(
    leader_pid: int | None,
    marker: str | None,
    *,
    grace_s: float,
    popen: subprocess.Popen | None = None,
    gpus: Sequence[int] = (),
    gpu_probe: GpuProbe | None = None,
) -> StopReport:
    """Stop a server's whole process tree and confirm nothing of it is left. Idempotent; safe to
    call on a server that already exited. `leader_pid` must be the session leader (the pid of a
    child started with start_new_session=True), so its pid is the process group id."""
    began = time.monotonic()

    def verified() -> bool:
        if leader_pid is None:
            return False
        if popen is not None:
            return popen.poll() is None
        return bool(marker) and has_marker(leader_pid, marker)

    def group_of(found: Sequence[Any]) -> int | None:
        # killpg only while the group id provably is ours (see processes_of).
        if leader_pid is None:
            return None
        if verified():
            return leader_pid
        for proc in found:
            with contextlib.suppress(OSError):
                if os.getpgid(proc.pid) == leader_pid:
                    return leader_pid
        return None

    procs = processes_of(leader_pid, marker, leader_verified=verified())  # before any signal
    all_pids = {p.pid for p in procs}
    sent_kill = False
    if procs:
        _signal_all(group_of(procs), procs, signal.SIGTERM)
        alive = _wait_gone(procs, popen, grace_s)
        if alive:
            sent_kill = True
            _signal_all(group_of(alive), alive, signal.SIGKILL)
            _wait_gone(alive, popen, KILL_CONFIRM_S)
    # A last look over the whole table: anything of the group or with our marker that appeared
    # meanwhile (a child forked during shutdown) is killed too.
    late = processes_of(leader_pid, marker, leader_verified=verified())
    if late:
        sent_kill = True
        all_pids.update(p.pid for p in late)
        _signal_all(group_of(late), late, signal.SIGKILL)
        late = _wait_gone(late, popen, KILL_CONFIRM_S)
    exit_code = exit_signal = None
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)  # reap our child so it does not linger as a zombie
        exit_code, exit_signal = _split_returncode(popen.returncode)
    gpu_checked, holders = False, ()
    if gpus and gpu_probe is not None:
        view = gpu_probe()
        if view is not None:
            gpu_checked = True
            listed = {pid for procs_ in view.pids_on(gpus).values() for pid, _ in procs_}
            holders = tuple(sorted(listed & (all_pids | ({leader_pid} if leader_pid else set()))))
    return StopReport(
        signalled=tuple(sorted(all_pids)), sent_sigkill=sent_kill,
        survivors=tuple(sorted(p.pid for p in late)), gpu_checked=gpu_checked, gpu_holders=holders,
        exit_code=exit_code, exit_signal=exit_signal, seconds=time.monotonic() - began,
    )


def _split_returncode(rc: int | None) -> tuple[int | None, int | None]:
    if rc is None:
        return None, None
    if rc < 0:
        return None, -rc
    return rc, None


def signal_name(sig: int | None) -> str:
    if sig is None:
        return ""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# -- pre-start checks ----------------------------------------------------------------------------
def port_holder(port: int) -> tuple[int | None, str | None]:
    """(pid, name) of the process listening on `port`, where the OS lets us see it."""
    import psutil

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError):
        return None, None
    for conn in conns:
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            if conn.pid is None:
                return None, None
            try:
                proc = psutil.Process(conn.pid)
                cmd = " ".join(proc.cmdline()[:4])
                return conn.pid, f"{proc.name()} ({cmd})" if cmd else proc.name()
            except psutil.Error:
                return conn.pid, None
    return None, None


def port_is_free(host: str, port: int) -> bool:
    bind_host = "0.0.0.0" if host in ("", "localhost") else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as uvicorn sets it: a port in TIME_WAIT is usable, a listener is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError:
            return False
    return True


def check_port(profile: ServerProfile, live: Iterable["ManagedServer"] = ()) -> None:
    for other in live:
        if other.profile.port == profile.port and other.profile.name != profile.name:
            raise PortInUseError(
                f"port {profile.port} is already used by managed server '{other.profile.name}' "
                f"(pid {other.pid}); stop it first",
                port=profile.port, holder_pid=other.pid, holder_name=f"moe-tui server {other.profile.name}",
            )
    if port_is_free(profile.host, profile.port):
        return
    pid, name = port_holder(profile.port)
    if pid is not None:
        who = f"pid {pid}" + (f" {name}" if name else "")
    else:
        who = "a process this user cannot see (another user, or another container)"
    raise PortInUseError(
        f"port {profile.port} ({profile.host}) needed by profile '{profile.name}' is in use by {who}",
        port=profile.port, holder_pid=pid, holder_name=name,
    )


def check_gpus(
    profile: ServerProfile, live: Iterable["ManagedServer"], view: GpuView | None, *, force: bool
) -> list[str]:
    """Raise for a GPU conflict; return warnings (foreign processes when forced)."""
    mine = set(profile.gpus)
    for other in live:
        if other.profile.name == profile.name:
            continue
        shared = sorted(mine & set(other.profile.gpus))
        if shared:
            raise GpuConflictError(
                f"profile '{profile.name}' needs GPU(s) {', '.join(map(str, shared))}, which managed "
                f"server '{other.profile.name}' ({other.state}) is using; stop it first"
            )
    warnings: list[str] = []
    # The emulator touches no GPU: the machine's GPUs are not its business.
    if profile.engine == "sim" or view is None or not profile.gpus:
        return warnings
    if view.count is not None:
        missing = sorted(g for g in profile.gpus if g >= view.count)
        if missing:
            raise GpuConflictError(
                f"profile '{profile.name}' lists GPU index {', '.join(map(str, missing))}, but NVML "
                f"reports {view.count} GPU(s) (indices 0..{view.count - 1})"
            )
    holders = view.pids_on(profile.gpus)
    if holders:
        desc = "; ".join(
            f"GPU {g}: " + ", ".join(f"pid {pid}" + (f" ({name})" if name else "") for pid, name in procs)
            for g, procs in sorted(holders.items())
        )
        message = f"profile '{profile.name}': foreign processes hold its GPUs: {desc}"
        if not force:
            raise ForeignGpuProcessError(message + " (start with force to override; numbers would be suspect)")
        warnings.append(message + " (starting anyway: forced)")
    return warnings


def preflight(profile: ServerProfile, live: Iterable["ManagedServer"] = (), gpu_probe: GpuProbe | None = None,
              *, force: bool = False) -> list[str]:
    """Every pre-start check: raises ServerStartError (port, GPUs) or returns warnings to show."""
    live = list(live)
    check_port(profile, live)
    view = gpu_probe() if gpu_probe is not None else None
    warnings = check_gpus(profile, live, view, force=force)
    if profile.binds_beyond_loopback:
        warnings.append(
            f"profile '{profile.name}' binds {profile.host}:{profile.port}: the server is reachable "
            "from other machines (SGLang has no authentication by default)"
        )
    return warnings


# -- the registry of live servers (for overlap checks and exit handlers) ------------------------
_REGISTRY_LOCK = threading.RLock()
_REGISTRY: set["ManagedServer"] = set()
_HANDLERS_INSTALLED = False


def managed_servers() -> list["ManagedServer"]:
    """Every server this process started and has not yet seen stopped."""
    with _REGISTRY_LOCK:
        return list(_REGISTRY)


def stop_all_managed(reason: str = "moe-tui is exiting") -> list[StopReport]:
    """Synchronously stop every registered server not marked keep_running (exit handlers)."""
    reports = []
    for server in managed_servers():
        if server.keep_running:
            continue
        with contextlib.suppress(Exception):
            reports.append(server.stop_sync(reason))
    return reports


def install_exit_handlers(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """Stop managed servers (except keep_running ones) at interpreter exit and on SIGTERM/SIGHUP.

    Call once from the main thread of the program that owns servers (not at import: a library
    must not take over signals). A handler that was installed before is chained to afterwards;
    with none, the signal's default action runs, so the exit status still says "killed by SIGTERM".
    """
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all_managed)
    for sig in signals:
        previous = signal.getsignal(sig)

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            stop_all_managed(f"moe-tui got {signal_name(signum)}")
            if callable(previous):
                previous(signum, frame)
                return
            if previous == signal.SIG_IGN:
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


# -- the managed server --------------------------------------------------------------------------
class ManagedServer:
    """One profile's server process. Create, `subscribe`, then `await start()` / `wait_ready()` /
    `stop()`. Every method runs on the asyncio loop that called `start()`, except `stop_sync()`,
    which is for exit handlers and may run with no loop."""

    def __init__(
        self,
        profile: ServerProfile,
        *,
        store: Any = None,
        keep_running: bool = False,
        grace_s: float | None = None,
        ready_poll_s: float = 0.5,
        health_interval_s: float = 5.0,
        health_timeout_s: float = 20.0,
        health_failures: int = 3,
        metrics_interval_s: float = 1.0,
        ring_lines: int = DEFAULT_RING_LINES,
        gpu_probe: GpuProbe | None = nvml_gpu_view,
        stop_on_failure: bool = True,
        python: str | None = None,
    ):
        self.profile = profile
        self.store = store
        self.keep_running = keep_running
        self.grace_s = DEFAULT_GRACE_S.get(profile.engine, 20.0) if grace_s is None else grace_s
        self.ready_poll_s = ready_poll_s
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.health_failures = health_failures
        self.metrics_interval_s = metrics_interval_s
        self.gpu_probe = gpu_probe
        self.stop_on_failure = stop_on_failure
        # SGLang's /health pushes a 1-token generation through the scheduler: a controller may
        # pause the probes during a timed run so they do not share the batch with it. Exit
        # detection goes on regardless.
        self.health_paused = False
        self.python = python
        self.log_lines: collections.deque[str] = collections.deque(maxlen=ring_lines)
        self.warnings: list[str] = []
        self._subscribers: list[EventCallback] = []
        self._reset()

    def _reset(self) -> None:
        self.state = STOPPED
        self.phase = ""
        self.reason = ""
        self.pid: int | None = None
        self.start_id: int | None = None
        self.server_id: str | None = None
        self.log_path: Path | None = None
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.resolved_backend: str | None = None
        self.backend_mismatch = False
        self.sglang_version: str | None = None
        self.server_info: dict[str, Any] | None = None
        self.model_info: dict[str, Any] | None = None
        self.server_info_error: str | None = None
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.failure: ServerStateChanged | None = None
        self.last_metrics: ServerMetrics | None = None
        self.metrics_exposed: bool | None = None
        self.last_stop: StopReport | None = None
        self._popen: subprocess.Popen | None = None
        self._log_file: Any = None
        self._log_reader: Any = None
        self._partial = ""
        self._tasks: list[asyncio.Task] = []
        self._client: Any = None
        self._stop_task: asyncio.Task | None = None
        self._stopping = False
        self._ready_event: asyncio.Event | None = None
        self._done_event: asyncio.Event | None = None
        self._deadline = 0.0

    # -- events -------------------------------------------------------------------------------
    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call `callback(event)` for every event of this server (on the loop's thread, or the
        exiting thread for stop_sync). A TUI posts a message from it; a runner prints or queues."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # a broken consumer must not take the lifecycle down
                print(f"moe-tui: server event subscriber failed: {exc!r}", file=sys.stderr)

    def _set_state(self, state: str, reason: str, **extra: Any) -> ServerStateChanged:
        self.state = state
        self.reason = reason
        event = ServerStateChanged(
            profile=self.profile.name, state=state, reason=reason, phase=self.phase, pid=self.pid,
            port=self.profile.port, resolved_backend=self.resolved_backend,
            backend_mismatch=self.backend_mismatch, **extra,
        )
        self._emit(event)
        return event

    def _notice(self, level: str, message: str) -> None:
        if level == "warning":
            self.warnings.append(message)
        self._emit(Notice(level=level, message=message))

    def _record(self, **fields: Any) -> None:
        if self.store is not None and self.start_id is not None:
            try:
                self.store.update_server_start(self.start_id, **fields)
            except Exception as exc:  # the server lifecycle goes on; the person is told
                self._emit(Notice(level="error", message=f"store update for {self.profile.name} failed: {exc}"))

    # -- properties for the UI ------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.profile.base_url

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    def log_tail(self, n: int = LOG_TAIL_LINES) -> list[str]:
        lines = list(self.log_lines)
        return lines[-n:] if n else lines

    # -- start ----------------------------------------------------------------------------------
    async def start(self, *, force: bool = False) -> None:
        """Run the pre-start checks, launch the child and return while it starts (state starting).
        Idempotent while starting or ready. Raises ServerStartError when a check refuses."""
        if self.state in (STARTING, READY):
            return
        if self.state == STOPPING and self._stop_task is not None:
            await asyncio.shield(self._stop_task)
        if self.state == FAILED and self._done_event is not None:
            await self._done_event.wait()  # the failure's cleanup must not close the new start's files
        live = [s for s in managed_servers() if s is not self and s.is_live]
        probe = self.gpu_probe if self.profile.engine != "sim" else None
        warnings = await asyncio.to_thread(preflight, self.profile, live, probe, force=force)

        self._reset()
        self.log_lines.clear()
        self.warnings = []
        for message in warnings:
            self._notice("warning", message)

        from moe_tui import paths

        self.server_id = f"{self.profile.name}-{uuid.uuid4().hex[:12]}"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = paths.logs_dir() / f"{self.profile.name}-{stamp}-{self.server_id[-12:]}.log"
        argv = self.profile.argv(self.python)
        ours = {SERVER_ID_ENV: self.server_id, "PYTHONUNBUFFERED": "1"}
        env = {**os.environ, **self.profile.launch_env(), **ours}
        recorded_env = redact_env({**self.profile.launch_env(), **ours})
        if self.store is not None:
            self.start_id = self.store.record_server_start(
                profile_name=self.profile.name, profile=self.profile.snapshot(), argv=redact_argv(argv),
                env=recorded_env, log_path=str(self.log_path), pid=None, state=STARTING,
            )
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_file.write(f"# moe-tui: {' '.join(redact_argv(argv))}\n".encode())
        try:
            self._popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
                env=env, start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            self._log_file.close()
            reason = f"cannot launch {argv[0]}: {exc.strerror or exc}"
            self._record(state=FAILED, reason=reason, stopped_at=time.time())
            self.failure = self._set_state(FAILED, reason)
            raise ServerStartError(reason) from None
        self.pid = self._popen.pid
        self.started_at = time.time()
        self._deadline = time.monotonic() + self.profile.startup_timeout_s
        self._record(pid=self.pid)
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)
        self._log_reader = open(self.log_path, "rb")
        self._ready_event = asyncio.Event()
        self._done_event = asyncio.Event()
        import httpx

        self._client = httpx.AsyncClient(base_url=self.base_url, trust_env=False, timeout=10.0)
        self.phase = PHASE_LAUNCHING
        self._set_state(STARTING, f"launched pid {self.pid} on port {self.profile.port}")
        self._tasks = [
            asyncio.create_task(self._follow_log(), name=f"{self.name}-log"),
            asyncio.create_task(self._watch_exit(), name=f"{self.name}-exit"),
            asyncio.create_task(self._await_ready(), name=f"{self.name}-ready"),
        ]

    async def wait_ready(self, timeout: float | None = None) -> "ManagedServer":
        """Until ready. Raises ServerFailed (with the failure event) if it failed or was stopped."""
        if self.state == READY:
            return self
        if self._ready_event is None or self._done_event is None:
            raise ServerFailed(f"server '{self.name}' was not started", self.failure)
        ready = asyncio.create_task(self._ready_event.wait())
        done = asyncio.create_task(self._done_event.wait())
        try:
            await asyncio.wait({ready, done}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            done.cancel()
        if self.state == READY:
            return self
        if self.state in (FAILED, STOPPED, STOPPING):
            raise ServerFailed(f"server '{self.name}' {self.state}: {self.reason}", self.failure)
        raise asyncio.TimeoutError(f"server '{self.name}' not ready after {timeout} s (still {self.state})")

    # -- background work ------------------------------------------------------------------------
    def _drain_log(self) -> None:
        if self._log_reader is None:
            return
        chunk = self._log_reader.read()
        if not chunk:
            return
        text = self._partial + chunk.decode("utf-8", "replace")
        *lines, self._partial = text.replace("\r\n", "\n").split("\n")
        for line in lines:
            self.log_lines.append(line)
            self._emit(ServerLogLine(profile=self.name, line=line))
            if self.state == STARTING:
                self._phase_from(line)

    def _phase_from(self, line: str) -> None:
        for marker, phase in _PHASE_MARKERS:
            if marker in line:
                if PHASES.index(phase) > PHASES.index(self.phase or PHASE_LAUNCHING):
                    self.phase = phase
                    self._set_state(STARTING, f"phase: {phase}")
                return

    async def _follow_log(self) -> None:
        while True:
            self._drain_log()
            if self._popen is None or self._popen.poll() is not None and self.state not in (STARTING, READY):
                self._drain_log()
                return
            await asyncio.sleep(0.1)

    async def _watch_exit(self) -> None:
        assert self._popen is not None
        while True:
            rc = self._popen.poll()
            if self._stopping:
                return
            if rc is not None:
                code, sig = _split_returncode(rc)
                how = f"killed by {signal_name(sig)}" if sig else f"exit code {code}"
                when = "while starting" if self.state == STARTING else "while ready"
                await self._fail(f"server process exited {when} ({how})", exit_code=code, exit_signal=sig)
                return
            if self.state == STARTING and time.monotonic() >= self._deadline:
                await self._fail(
                    f"not ready within startup_timeout_s={self.profile.startup_timeout_s:g} s "
                    f"(last phase: {self.phase or 'none'})"
                )
                return
            await asyncio.sleep(0.1)

    async def _await_ready(self) -> None:
        import httpx

        while self.state == STARTING:
            try:
                resp = await self._client.get("/health_generate", timeout=max(self.ready_poll_s * 4, 5.0))
                if resp.status_code == 200:
                    await self._become_ready()
                    return
            except httpx.HTTPError:
                pass  # not listening yet, or warming up
            await asyncio.sleep(self.ready_poll_s)

    async def _get_json(self, path: str) -> tuple[Any, str | None]:
        """(parsed body or raw text, error text)."""
        import httpx

        try:
            resp = await self._client.get(path, timeout=10.0)
        except httpx.HTTPError as exc:
            return None, f"GET {path} failed: {exc!r}"
        if resp.status_code != 200:
            return resp.text, f"GET {path} answered HTTP {resp.status_code}"
        return resp.text, None

    async def _become_ready(self) -> None:
        info_text, info_err = await self._get_json("/server_info")
        model_text, model_err = await self._get_json("/model_info")
        if self.state != STARTING:
            return
        self.ready_at = time.time()
        self.phase = PHASE_READY
        fields: dict[str, Any] = {"ready_at": self.ready_at}
        if info_err is None:
            try:
                info = parse_server_info(info_text)
            except ServerInfoError as exc:
                info_err = str(exc)
            else:
                self.server_info = info.args
                self.resolved_backend = info.resolved_backend
                self.sglang_version = info.version
                self.backend_mismatch = (
                    self.profile.moe_runner_backend != "auto"
                    and info.resolved_backend != self.profile.moe_runner_backend
                )
                fields.update(server_info=info.args, resolved_backend=info.resolved_backend,
                              sglang_version=info.version, backend_mismatch=int(self.backend_mismatch))
        if model_err is None:
            try:
                parsed = json.loads(model_text)
                self.model_info = parsed if isinstance(parsed, dict) else {"value": parsed}
            except ValueError:
                model_err = f"/model_info is not JSON; it began {model_text[:80]!r}"
        if model_err is None:
            fields["model_info"] = self.model_info
        reason = f"/health_generate answered 200 after {self.ready_at - (self.started_at or self.ready_at):.1f} s"
        if info_err is not None:
            self.server_info_error = info_err
            reason += f"; resolved backend UNKNOWN: {info_err}"
            self._notice("error", f"server '{self.name}': cannot verify the MoE backend: {info_err}")
        elif self.backend_mismatch:
            reason += (f"; BACKEND MISMATCH: profile asks {self.profile.moe_runner_backend}, "
                       f"server resolved {self.resolved_backend}")
            self._notice("warning", f"server '{self.name}' silently fell back: profile asks "
                                    f"{self.profile.moe_runner_backend}, /server_info says {self.resolved_backend}")
        if model_err is not None:
            reason += f"; {model_err}"
        fields.update(state=READY, reason=reason)
        self._record(**fields)
        self._set_state(READY, reason)
        assert self._ready_event is not None
        self._ready_event.set()
        self._tasks.append(asyncio.create_task(self._watch_health(), name=f"{self.name}-health"))
        self._tasks.append(asyncio.create_task(self._scrape_metrics(), name=f"{self.name}-metrics"))

    async def _watch_health(self) -> None:
        import httpx

        failures = 0
        self._healthy = True
        while self.state == READY:
            await asyncio.sleep(self.health_interval_s)
            if self.state != READY:
                return
            if self.health_paused:
                failures = 0
                continue
            error = None
            try:
                resp = await self._client.get("/health", timeout=self.health_timeout_s)
                if resp.status_code != 200:
                    error = f"/health answered HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                error = f"/health did not answer: {exc!r}"
            if self.state != READY:
                return
            self._healthy = error is None
            if self.metrics_exposed is False:
                self.last_metrics = ServerMetrics(profile=self.name, healthy=self._healthy)
                self._emit(self.last_metrics)
            failures = 0 if error is None else failures + 1
            if failures >= self.health_failures:
                await self._fail(f"health stopped answering ({failures} checks in a row; last: {error})")
                return

    async def _scrape_metrics(self) -> None:
        import httpx

        while self.state == READY:
            try:
                resp = await self._client.get("/metrics", timeout=max(self.metrics_interval_s * 2, 2.0))
            except httpx.HTTPError:
                resp = None
            if self.state != READY:
                return
            if resp is not None and resp.status_code == 404:
                self.metrics_exposed = False  # started without --enable-metrics
                return
            if resp is not None and resp.status_code == 200:
                self.metrics_exposed = True
                self.last_metrics = metrics_event(self.name, parse_prometheus_text(resp.text),
                                                  getattr(self, "_healthy", True))
                self._emit(self.last_metrics)
            await asyncio.sleep(self.metrics_interval_s)

    async def _fail(self, reason: str, *, exit_code: int | None = None, exit_signal: int | None = None) -> None:
        if self._stopping or self.state not in (STARTING, READY):
            return
        self._stopping = True  # nothing else may fail or stop it concurrently
        self._drain_log()
        if self._partial:
            self.log_lines.append(self._partial)
            self._partial = ""
        tail = tuple(self.log_tail(LOG_TAIL_LINES))
        self.exit_code, self.exit_signal = exit_code, exit_signal
        self._record(state=FAILED, reason=reason, exit_code=exit_code, exit_signal=exit_signal,
                     log_tail="\n".join(tail), stopped_at=time.time())
        self.failure = self._set_state(FAILED, reason, exit_code=exit_code, exit_signal=exit_signal, log_tail=tail)
        me = asyncio.current_task()
        for task in self._tasks:
            if task is not me:
                task.cancel()
        if self.stop_on_failure:
            report = await asyncio.to_thread(self._terminate)
            if not report.clean:
                self._notice("error", f"server '{self.name}' after failure: {report.describe()}")
        await self._close()

    def _terminate(self) -> StopReport:
        report = terminate_server(
            self.pid, self.server_id, grace_s=self.grace_s, popen=self._popen,
            gpus=self.profile.gpus if self.profile.engine != "sim" else (), gpu_probe=self.gpu_probe,
        )
        self.last_stop = report
        return report

    async def _close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
        self._close_files()
        with _REGISTRY_LOCK:
            _REGISTRY.discard(self)
        if self._done_event is not None:
            self._done_event.set()

    def _close_files(self) -> None:
        for f in (self._log_file, self._log_reader):
            if f is not None:
                with contextlib.suppress(Exception):
                    f.close()

    # -- stop -----------------------------------------------------------------------------------
    async def stop(self, reason: str = "stopped by request") -> StopReport | None:
        """SIGTERM the group, wait grace_s, SIGKILL, confirm nothing is left. Idempotent: a
        concurrent call waits for the same stop; a stopped server returns the last report."""
        if self._stop_task is not None:
            return await asyncio.shield(self._stop_task)
        if self.state not in (STARTING, READY):
            if self.state == FAILED and self._done_event is not None:
                await self._done_event.wait()  # the failure path is already cleaning up
                if self.last_stop is None and self._popen is not None:  # stop_on_failure=False
                    self.last_stop = await asyncio.to_thread(self._terminate)
            return self.last_stop
        self._stop_task = asyncio.create_task(self._stop(reason))
        return await asyncio.shield(self._stop_task)

    async def _stop(self, reason: str) -> StopReport:
        self._stopping = True
        me = asyncio.current_task()
        for task in self._tasks:
            if task is not me:
                task.cancel()
        self._set_state(STOPPING, reason)
        self._record(state=STOPPING, reason=reason)
        report = await asyncio.to_thread(self._terminate)
        self._drain_log()
        self.exit_code, self.exit_signal = report.exit_code, report.exit_signal
        final = f"{reason}; {report.describe()}"
        self._record(state=STOPPED, reason=final, stopped_at=time.time(), exit_code=report.exit_code,
                     exit_signal=report.exit_signal)
        self._set_state(STOPPED, final, exit_code=report.exit_code, exit_signal=report.exit_signal)
        if not report.clean:
            self._notice("error", f"server '{self.name}' did not stop cleanly: {report.describe()}")
        await self._close()
        return report

    def stop_sync(self, reason: str = "moe-tui is exiting") -> StopReport | None:
        """Blocking stop for exit handlers (no event loop needed). Same guarantees as stop()."""
        if self.state not in (STARTING, READY, STOPPING) and self._popen is None:
            return self.last_stop
        if self.state in (STOPPED,) or (self.state == FAILED and self.last_stop is not None):
            return self.last_stop
        self._stopping = True
        report = self._terminate()
        self.exit_code, self.exit_signal = report.exit_code, report.exit_signal
        if self.state != FAILED:
            final = f"{reason}; {report.describe()}"
            self._record(state=STOPPED, reason=final, stopped_at=time.time(),
                         exit_code=report.exit_code, exit_signal=report.exit_signal)
            self._set_state(STOPPED, final, exit_code=report.exit_code, exit_signal=report.exit_signal)
        self._close_files()
        with _REGISTRY_LOCK:
            _REGISTRY.discard(self)
        return report

    def describe(self) -> dict[str, Any]:
        """Plain data for status displays."""
        return {
            "profile": self.name, "state": self.state, "phase": self.phase, "reason": self.reason,
            "pid": self.pid, "port": self.profile.port, "base_url": self.base_url,
            "start_id": self.start_id, "log_path": str(self.log_path) if self.log_path else None,
            "resolved_backend": self.resolved_backend, "backend_mismatch": self.backend_mismatch,
            "server_info_error": self.server_info_error, "sglang_version": self.sglang_version,
            "keep_running": self.keep_running, "exit_code": self.exit_code, "exit_signal": self.exit_signal,
        }


class ServerManager:
    """The servers of one program, by profile name, with one subscriber list for all of them.

    `server_options` are passed to each ManagedServer (grace_s, health_interval_s, gpu_probe, ...).
    """

    def __init__(self, store: Any = None, **server_options: Any):
        self.store = store
        self.server_options = server_options
        self.servers: dict[str, ManagedServer] = {}
        self._subscribers: list[EventCallback] = []

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def _forward(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:
                print(f"moe-tui: server event subscriber failed: {exc!r}", file=sys.stderr)

    def get(self, name: str) -> ManagedServer | None:
        return self.servers.get(name)

    def server_for(self, profile: ServerProfile, **overrides: Any) -> ManagedServer:
        """The handle for this profile (created if new; replaced if the profile changed and the
        old one is not live)."""
        current = self.servers.get(profile.name)
        if current is not None and (current.profile == profile or current.is_live):
            return current
        server = ManagedServer(profile, store=self.store, **{**self.server_options, **overrides})
        server.subscribe(self._forward)
        self.servers[profile.name] = server
        return server

    async def start(self, profile: ServerProfile, *, force: bool = False, keep_running: bool | None = None,
                    wait: bool = True, timeout: float | None = None) -> ManagedServer:
        current = self.servers.get(profile.name)
        if current is not None and current.is_live and current.profile != profile:
            raise ServerStartError(
                f"server '{profile.name}' is running with a different version of the profile; stop it first"
            )
        server = self.server_for(profile)
        if keep_running is not None:
            server.keep_running = keep_running
        await server.start(force=force)
        if wait:
            await server.wait_ready(timeout)
        return server

    async def stop(self, name: str, reason: str = "stopped by request") -> StopReport | None:
        server = self.servers.get(name)
        if server is None:
            raise KeyError(f"no managed server named '{name}'")
        return await server.stop(reason)

    async def stop_all(self, reason: str = "stopping all servers", *, include_kept: bool = True) -> list[StopReport]:
        targets = [s for s in self.servers.values() if include_kept or not s.keep_running]
        results = await asyncio.gather(*(s.stop(reason) for s in targets))
        return [r for r in results if r is not None]

    def live(self) -> list[ManagedServer]:
        return [s for s in self.servers.values() if s.is_live]


# -- servers started by another moe-tui process (the CLI's stop/status) -------------------------
def recorded_marker(start: Mapping[str, Any]) -> str | None:
    env = start.get("env") or {}
    marker = env.get(SERVER_ID_ENV)
    return marker if isinstance(marker, str) else None


def recorded_server_alive(start: Mapping[str, Any]) -> bool:
    """Is the server of a store `server_starts` row still running? Checks the marker, not just the
    PID (PIDs are reused)."""
    marker = recorded_marker(start)
    pid = start.get("pid")
    if marker is None:
        return False
    if pid and has_marker(int(pid), marker):
        return True
    return bool(processes_of(None, marker))


def stop_recorded_server(start: Mapping[str, Any], *, grace_s: float | None = None,
                         gpu_probe: GpuProbe | None = nvml_gpu_view) -> StopReport:
    """Stop a server recorded in the store (possibly started by another process)."""
    marker = recorded_marker(start)
    pid = start.get("pid")
    profile = start.get("profile") or {}
    engine = profile.get("engine", "sglang")
    # Only treat the PID as the group leader if it is provably ours: PIDs are reused.
    leader = int(pid) if pid and marker and has_marker(int(pid), marker) else None
    return terminate_server(
        leader, marker, grace_s=DEFAULT_GRACE_S.get(engine, 20.0) if grace_s is None else grace_s,
        gpus=tuple(profile.get("gpus") or ()) if engine != "sim" else (), gpu_probe=gpu_probe,
    )
