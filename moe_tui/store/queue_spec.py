"""The spec a queue item is stored with: the one its run will record (one fingerprint everywhere).

A spec asked for without a client version ("" by default) fingerprints differently from the same
spec once the benchmark client fills its version in at run time, so the queue showed one spec id
and the run, the grid and the exports another. The queue stores the spec as it will run.
"""

from __future__ import annotations

from moe_tui.spec import BenchmarkSpec


def spec_as_queued(spec: BenchmarkSpec, versions: dict[str, str] | None = None) -> BenchmarkSpec:
    """`spec` with its benchmark client's version filled in, as the run will record it: a queued
    spec without one had a fingerprint of its own (the queue showed one id, its run and exports
    another). moe-tui's own version, or the installed sglang.bench_serving's; left empty only
    when that client is not installed (the run then fails saying so). `versions` caches lookups."""
    if spec.client_version:
        return spec
    cache = versions if versions is not None else {}
    if spec.client not in cache:
        if spec.client == "moe-tui":
            from moe_tui import __version__

            cache[spec.client] = __version__
        else:
            try:
                from moe_tui.bench.sglang_adapter import locate_client

                client = locate_client()
            except Exception:  # no client (or a broken override): the run will say why
                client = None
            cache[spec.client] = client.version if client is not None else ""
    return spec.replace(client_version=cache[spec.client]) if cache[spec.client] else spec
