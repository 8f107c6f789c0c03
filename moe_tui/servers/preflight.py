"""Pre-start checks: the port is free (else the holder is named), no managed server uses an
overlapping GPU set, the GPU indices exist, no foreign process holds the GPUs (unless forced)."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

from moe_tui.judgement import SIM_ENGINE
from moe_tui.profiles import ServerProfile
from moe_tui.servers.base import ForeignGpuProcessError, GpuConflictError, GpuProbe, GpuView, PortInUseError

if TYPE_CHECKING:
    from moe_tui.servers.managed import ManagedServer

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


def check_port(profile: ServerProfile, live: Iterable[ManagedServer] = ()) -> None:
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
    profile: ServerProfile, live: Iterable[ManagedServer], view: GpuView | None, *, force: bool
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
    if profile.engine == SIM_ENGINE or view is None or not profile.gpus:
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


def preflight(profile: ServerProfile, live: Iterable[ManagedServer] = (), gpu_probe: GpuProbe | None = None,
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
