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

Modules: `base` (states, phases, errors, GPU facts), `parsing`, `teardown`, `preflight`,
`registry`, `managed` (ManagedServer), `manager` (ServerManager, recorded servers); every name is
importable from `moe_tui.servers` as before.

Why the child writes to the log file directly instead of a pipe: a server the user keeps
running must survive its controller's exit, and a pipe whose reader died turns every log write
into EPIPE. The file is also what `moe-tui server logs` reads from another process.

No Textual here: the TUI and the headless runner both subscribe with plain callbacks.
"""

from moe_tui.servers.base import (
    DEFAULT_GRACE_S,
    DEFAULT_RING_LINES,
    FAILED,
    KILL_CONFIRM_S,
    LIVE_STATES,
    LOG_TAIL_LINES,
    PHASE_AUTOTUNE,
    PHASE_GRAPHS,
    PHASE_LAUNCHING,
    PHASE_LOADING,
    PHASE_READY,
    PHASE_WARMUP,
    PHASES,
    READY,
    SERVER_ID_ENV,
    STARTING,
    STATES,
    STOPPED,
    STOPPING,
    EventCallback,
    ForeignGpuProcessError,
    GpuConflictError,
    GpuProbe,
    GpuView,
    PortInUseError,
    ServerError,
    ServerFailed,
    ServerInfoError,
    ServerStartError,
    no_gpu_view,
    nvml_gpu_view,
)
from moe_tui.servers.managed import (
    ManagedServer,
)
from moe_tui.servers.manager import (
    ServerManager,
    recorded_marker,
    recorded_server_alive,
    stop_recorded_server,
)
from moe_tui.servers.parsing import (
    PromSample,
    ServerInfo,
    metric_value,
    metrics_event,
    parse_prometheus_text,
    parse_server_info,
)
from moe_tui.servers.preflight import (
    check_gpus,
    check_port,
    port_holder,
    port_is_free,
    preflight,
)
from moe_tui.servers.registry import (
    install_exit_handlers,
    managed_servers,
    stop_all_managed,
)
from moe_tui.servers.teardown import (
    StopReport,
    _alive,
    _split_returncode,
    has_marker,
    processes_of,
    signal_name,
    terminate_server,
)

__all__ = [
    "DEFAULT_GRACE_S", "DEFAULT_RING_LINES", "FAILED", "KILL_CONFIRM_S", "LIVE_STATES", "LOG_TAIL_LINES",
    "PHASE_AUTOTUNE", "PHASE_GRAPHS", "PHASE_LAUNCHING", "PHASE_LOADING", "PHASE_READY", "PHASE_WARMUP", "PHASES",
    "READY", "SERVER_ID_ENV", "STARTING", "STATES", "STOPPED", "STOPPING", "EventCallback",
    "ForeignGpuProcessError", "GpuConflictError", "GpuProbe", "GpuView", "PortInUseError", "ServerError",
    "ServerFailed", "ServerInfoError", "ServerStartError", "no_gpu_view", "nvml_gpu_view", "ManagedServer",
    "ServerManager", "recorded_marker", "recorded_server_alive", "stop_recorded_server", "PromSample",
    "ServerInfo", "metric_value", "metrics_event", "parse_prometheus_text", "parse_server_info", "check_gpus",
    "check_port", "port_holder", "port_is_free", "preflight", "install_exit_handlers", "managed_servers",
    "stop_all_managed", "StopReport", "_alive", "_split_returncode", "has_marker", "processes_of", "signal_name",
    "terminate_server"
]
