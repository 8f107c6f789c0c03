"""Running a campaign: the runner process, its controller and what a run leaves behind.

`runner` (the detached process that owns a data dir, its control socket) and `client` (how the CLI and
the TUI talk to it), `controller` (the queue worker: servers, benchmarks, telemetry) with its parts
`items` (one queue item, timed), `ops` (requests from the socket), `telemetry` (NVML sampling),
`profiled` (a profiled run for `explain`), `recording` (a finished run into the store), `watchdog`
and `orphans` (nothing left holding a GPU when a runner dies), `bounds` (limits on what one request asks).
"""
