"""The benchmark functions a queue item runs: `default_bench` (moe-tui's client out of process, in
the item's client process when it has one, or sglang.bench_serving), `bench_serving_bench`
(SGLang's own client), `spec_as_run` (the spec as the client runs it) and `tokenizer_for`.
`moe_tui.run.items.ItemRunner` calls them; the controller re-exports them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.events import BenchProgress
from moe_tui.judgement import SIM_ENGINE
from moe_tui.profiles import ServerProfile
from moe_tui.spec import BenchmarkSpec

if TYPE_CHECKING:
    from moe_tui.bench.process import ClientProcess
    from moe_tui.bench.result import BenchResult


def spec_as_run(spec: BenchmarkSpec) -> BenchmarkSpec:
    """The spec as the benchmark client will run it, its version filled in: moe-tui's own, or the
    sglang.bench_serving client's. A spec for another version is refused (ValueError) rather than
    silently re-labelled."""
    if spec.client == "moe-tui":
        from moe_tui.bench.result import native_spec

        return native_spec(spec)
    from moe_tui.bench.sglang_adapter import check_spec_matches_client, require_client

    client = require_client()
    check_spec_matches_client(spec, client)
    return spec if spec.client_version else spec.replace(client_version=client.version)


def tokenizer_for(profile: ServerProfile) -> str:
    """What sglang.bench_serving loads as the tokenizer: the emulator's bundled one, or the
    model's own folder (offline: the client must not reach a hub)."""
    if profile.engine == SIM_ENGINE:
        return str(Path(__file__).resolve().parents[1] / "sim" / "tokenizer")
    return profile.model_path


async def bench_serving_bench(spec: BenchmarkSpec, base_url: str, *,
                              on_progress: Callable[[BenchProgress], None] | None = None,
                              stop: asyncio.Event | None = None, run_id: int | None = None,
                              tokenizer: str | None = None) -> BenchResult:
    """SGLang's own client (`moe_tui.bench.sglang_adapter.run_bench_serving`), unmodified, as a
    BenchResult. No live progress and no early stop: bench_serving offers neither; a skip waits
    for it (up to the controller's grace period) and then abandons the result."""
    import tempfile

    from moe_tui import paths
    from moe_tui.bench.result import BenchResult
    from moe_tui.bench.sglang_adapter import BenchServingError, require_client, run_bench_serving
    from moe_tui.servers.keys import key_for

    client = require_client()
    started = time.time()
    log_file = paths.logs_dir() / f"bench_serving-run{run_id if run_id is not None else 'warmup'}-{int(started)}.log"
    with tempfile.TemporaryDirectory(prefix="moe-tui-bench-serving-") as tmp:
        try:
            record = await asyncio.to_thread(
                run_bench_serving, spec, base_url=base_url, output_file=Path(tmp) / "out.jsonl",
                log_file=log_file, tokenizer=tokenizer, client=client, output_details=False,
                api_key=key_for(base_url))
        except BenchServingError as exc:
            return BenchResult(status="failed", error=str(exc), spec=spec.canonical_dict(),
                               fingerprint=spec.fingerprint, client="sglang.bench_serving",
                               client_version=client.version, started_at=started, finished_at=time.time())
    completed = int(record.get("completed") or 0)
    status = "complete" if completed >= spec.num_prompts else "incomplete" if completed else "failed"
    summary = {k: v for k, v in record.items() if k != "server_info"}
    summary.setdefault("failed", max(0, spec.num_prompts - completed))
    return BenchResult(status=status, summary=summary, spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                       client="sglang.bench_serving", client_version=client.version, started_at=started,
                       finished_at=time.time(), server_info=record.get("server_info"),
                       error="" if status == "complete" else f"{completed} of {spec.num_prompts} completed; "
                                                                 f"log {log_file}")


async def default_bench(spec: BenchmarkSpec, base_url: str, *, on_progress: Callable[[BenchProgress], None],
                        stop: asyncio.Event, run_id: int | None, tokenizer: str | None = None,
                        request_timeout: float | None = None, stall_timeout: float | None = None,
                        warmup_pause: float | None = None, client: ClientProcess | None = None) -> BenchResult:
    """The benchmark, out of process (`moe_tui.bench.process`): in `client` (the item's client
    process) when given, else in a process of its own. A busy or crashing client cannot stall the
    controller or the TUI, and its CPU is its own. sglang.bench_serving takes neither timeout (it
    has no such options): they apply to moe-tui's client only."""
    if spec.client == "sglang.bench_serving":
        return await bench_serving_bench(spec, base_url, on_progress=on_progress, stop=stop, run_id=run_id,
                                         tokenizer=tokenizer)
    from moe_tui.bench.process import run_benchmark_subprocess
    from moe_tui.bench.settings import API_KEY_ENV
    from moe_tui.servers.keys import key_for

    key = key_for(base_url)  # the server's API key reaches the child in its environment or stdin only
    if client is not None:
        return await client.run(spec, base_url, on_progress, stop=stop, run_id=run_id, api_key=key,
                                request_timeout=request_timeout, stall_timeout=stall_timeout,
                                warmup_pause=warmup_pause)
    child_env = {**os.environ, API_KEY_ENV: key} if key else None

    return await run_benchmark_subprocess(spec, base_url, on_progress=on_progress, stop=stop, run_id=run_id,
                                          request_timeout=request_timeout, stall_timeout=stall_timeout,
                                          warmup_pause=warmup_pause, env=child_env)
