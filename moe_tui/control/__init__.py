"""The control package: the client side of the runner, one typed API for the TUI, the CLI and tests.

What lives here:
- `api`: `ControlClient` (the ABC every client implements) and its frozen view rows
  (`ServerRow`, `QueueRow`, `QueueWindow`, `ControlSnapshot`, `CampaignRequest`, `RunView`);
- `clients`: `InProcessClient` (a controller on its own loop thread) and `AttachedClient` (a
  detached runner over its Unix socket);
- `reads`: what both read straight from the store (through `store`/`queue` read functions);
- `live`: `LiveState`, core events and GPU snapshots folded into "now" (pure Python);
- `launch`: `connect`, the one startup of a client (attach, start a runner, or host in-process);
- `loop_thread`: an asyncio loop on a daemon thread for the async core.

May import: the core (spec, profiles, metrics, compare, judgement, events), the services (store,
queue, telemetry, export), controller and runner. Never Textual: `moe_tui.ui` imports this
package, not the other way round. Telemetry view types (and the batch jobs' node rows) are
re-exported here so that the UI needs no service import of its own.
"""

from __future__ import annotations

from moe_tui.control.api import (
    CampaignPreview,
    CampaignRequest,
    ControlClient,
    ControlSnapshot,
    QueueRow,
    QueueWindow,
    RunView,
    ServerRow,
)
from moe_tui.control.live import BenchLive, LiveState, ServerLive
from moe_tui.executors.nodes import NodeGpuRow, NodeRow
from moe_tui.telemetry import SUSPECT_CLOCK_EVENTS, GpuSample, TelemetrySnapshot

__all__ = [
    "SUSPECT_CLOCK_EVENTS",
    "BenchLive",
    "CampaignPreview",
    "CampaignRequest",
    "ControlClient",
    "ControlSnapshot",
    "GpuSample",
    "LiveState",
    "NodeGpuRow",
    "NodeRow",
    "QueueRow",
    "QueueWindow",
    "RunView",
    "ServerLive",
    "ServerRow",
    "TelemetrySnapshot",
]
