"""A profiled run: the controller's work for an `explain` queue item (after its warmup pass).

1. the run is created (provenance says `profiled`: the ProfileReq asked, the files kept);
2. expert-distribution recording starts only when the server runs with a recorder mode
   (`moe_tui.explain.recorder`: a real 0.5.23 server without one dies of the request); else the
   record says why there is none and names the profile variant that would have it. Every admin
   call carries the profile's api key (`Authorization: Bearer`), as SGLang checks them all;
3. the benchmark runs at the cell's concurrency; once the client has the whole concurrency in
   flight, `/start_profile` asks for `steps` decode steps (`profile_by_stage`, so prefill and
   decode land in separate files), into a fresh folder;
4. when every TP rank's DECODE trace is written (or `PROFILE_TIMEOUT_S` passed) the profiler is
   disarmed (`disarm`: a by-stage capture stays armed after its DECODE export in 0.5.23 and would
   capture the next prefill, the next run's warmup included) and the benchmark is
   stopped: its numbers are not wanted (the profiler slows the server, so a profiled run is never
   averaged into a cell: the store marks it `profiled` and grids leave it out);
5. the traces and the expert dump are moved under the data dir's `traces/run-<id>/` (owner-only,
   at most `MAX_KEPT_BYTES` together; a file beyond it is left out and said so) and named in the
   run's provenance (`profiled.files`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from moe_tui.events import BenchProgress, Event, RunStarted
from moe_tui.explain.recorder import server_recorder_mode, why_not_recorded
from moe_tui.explain.store import traces_dir
from moe_tui.profiles import ServerProfile
from moe_tui.records import ExplainDefinitionJson, FreeForm, ProfiledFactsJson, WarmupPassJson
from moe_tui.run.capture import CaptureCollector
from moe_tui.run.context import RunContext
from moe_tui.servers.keys import server_client
from moe_tui.store.queue import QueueItem
from moe_tui.trust import open_regular

if TYPE_CHECKING:
    from moe_tui.bench.result import BenchResult
    from moe_tui.run.items import ItemRunner
    from moe_tui.servers.managed import ManagedServer

PROFILE_TIMEOUT_S = 600.0
FULL_BATCH_WAIT_S = 120.0
START_ANSWER_S = 10.0
MAX_KEPT_BYTES = 256 * 1024 * 1024
# a configuration that never captures: no stage split, a start step no server reaches
DISARM_REQUEST = {"profile_by_stage": False, "start_step": 2**31 - 1, "activities": ["CPU"]}
EXPERT_DUMP_GLOB = "expert_distribution_recorder_*.pt"


async def _post(client: httpx.AsyncClient, path: str, body: FreeForm | None = None,
                timeout: float = 30.0) -> tuple[int, str]:
    try:
        r = await client.post(path, json=body, timeout=timeout)
        return r.status_code, r.text.strip()[:300]
    except httpx.HTTPError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def admin_headers(base_url: str) -> dict[str, str] | None:
    """The key the admin endpoints take from this server: its start's admin key, or the profile's api
    key (`servers.keys`; SGLang checks every route but /health and /metrics once a key is set)."""
    from moe_tui.servers.keys import auth_headers

    return auth_headers(base_url)


def keep_files(sources: list[Path], dest: Path, limit: int = MAX_KEPT_BYTES) -> tuple[list[str], list[str]]:
    """Move files into `dest` (0600) while they fit `limit` bytes together: (kept names, left-out
    notes). The server wrote these, so they are not trusted: only regular files of this user are
    kept (a link it planted is never followed, moved or chmodded: it could name any file of ours)."""
    kept: list[str] = []
    left: list[str] = []
    total = 0
    for src in sorted(sources):
        try:
            st = os.lstat(src)
        except OSError as exc:
            left.append(f"{src.name} left out: {exc.strerror or exc}")
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            why = "a symbolic link" if stat.S_ISLNK(st.st_mode) else (
                "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}")
            left.append(f"{src.name} left out: {why}, not a file the server wrote for us")
            continue
        if total + st.st_size > limit:
            left.append(f"{src.name} ({st.st_size} bytes) left out: over the {limit}-byte bound for one run")
            continue
        target = dest / src.name
        os.replace(src, target)  # a rename within the data dir: moves the entry itself, never a link's target
        if not _owner_only_regular(target):
            target.unlink(missing_ok=True)
            left.append(f"{src.name} left out: it changed while being kept")
            continue
        kept.append(src.name)
        total += st.st_size
    return kept, left


def _owner_only_regular(path: Path) -> bool:
    """Make `path` 0600 if it is (still) a regular file, never through a link; False otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        os.fchmod(fd, 0o600)
        return True
    finally:
        os.close(fd)


def expert_dumps(dump_dir: Path, since: float, limit: int = MAX_KEPT_BYTES) -> tuple[list[Path], list[str]]:
    """This run's expert dumps in `dump_dir` (the server start's own folder; checked all the same):
    regular files of this user written since `since`, at most `limit` bytes each;
    (paths, notes on the ones left out). A dump is a pickle: one planted by another user would be
    read as this server's expert load."""
    found: list[Path] = []
    notes: list[str] = []
    for p in dump_dir.glob(EXPERT_DUMP_GLOB):
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if st.st_mtime < since - 1.0:
            continue  # an older run's
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            notes.append(f"expert dump {p.name} not kept: " + ("a symbolic link" if stat.S_ISLNK(st.st_mode) else
                         "not a regular file" if not stat.S_ISREG(st.st_mode) else f"owned by uid {st.st_uid}, not you"))
        elif st.st_size > limit:
            notes.append(f"expert dump {p.name} not kept: {st.st_size} bytes, over the {limit}-byte bound")
        else:
            found.append(p)
    return found, notes


async def profiled_run(runner: ItemRunner, ctx: RunContext, item: QueueItem, profile: ServerProfile,
                       server: ManagedServer, warmup_info: WarmupPassJson | None,
                       definition: ExplainDefinitionJson) -> None:
    """The `explain` item's run (steps 1 to 5 of the module docstring): `runner` opens it and runs
    its benchmark, `ctx` carries its events, its stop and the item's close."""
    from moe_tui.run.recording import finished_run

    steps = int(definition.get("steps") or 12)  # .get: a definition stored by an older moe-tui
    opened = runner.open_run(item, profile, server, warmup_info)
    if opened is None:
        return
    spec, run_id, provenance_args = opened
    server_facts = provenance_args["server"]
    ctx.emit(RunStarted(run_id=run_id, queue_item_id=item.id, profile=profile.name, fingerprint=spec.fingerprint,
                         spec_summary=spec.describe() + f" (profiled, {steps} decode steps)"))
    ctx.status("profiling", f"#{item.id} {profile.name} conc={spec.max_concurrency} run {run_id}")
    dest = traces_dir(run_id)
    raw = dest / "incoming"
    raw.mkdir(mode=0o700, exist_ok=True)
    prefix = f"moe-tui-run{run_id}"
    req = {"output_dir": str(raw), "num_steps": steps, "profile_by_stage": True, "activities": ["CPU", "GPU"],
           "profile_prefix": prefix, "record_shapes": False, "with_stack": False}
    facts: ProfiledFactsJson = {"request": req, "steps": steps, "explain": definition.get("name"), "notes": [],
                             "concurrency": spec.max_concurrency,
                             "prefill": "EXTEND" in (definition.get("stages") or ())}
    world = int((server_facts.get("server_info") or {}).get("tp_size") or profile.tp_size or 1)
    full = asyncio.Event()
    collector = CaptureCollector(raw, prefix, world)

    def on_event(ev: Event) -> None:
        if isinstance(ev, BenchProgress) and ev.run_id == run_id and ev.in_flight >= spec.max_concurrency:
            full.set()

    unsub = ctx.subscribers.add(on_event)
    mode = server_recorder_mode(server_facts.get("server_info"), profile.extra_args)
    async with server_client(server.base_url, 30.0, admin_headers(server.base_url)) as client:
        if mode is None:  # never ask: a real server without a recorder dies of it (the whole tree)
            facts["expert_record"] = "not recorded: " + why_not_recorded(profile.name)
        else:
            code, text = await _post(client, "/start_expert_distribution_record")
            facts["expert_record"] = "recording" if code == 200 else f"not recorded: {text or code}"
        holder: list[asyncio.Task[BenchResult]] = []

        def start_bench() -> asyncio.Task[BenchResult]:
            holder.append(asyncio.create_task(runner.run_bench(spec, server, run_id=run_id, phase="timed")))
            return holder[0]

        try:
            await _profile_while(start_bench, full, client, req, collector, facts)
        finally:
            unsub()
            if ctx.work.bench_stop is not None:
                ctx.work.bench_stop.set()
        result: BenchResult | None = None
        bench_error: str | None = None
        try:
            result = await holder[0] if holder else None
        except Exception as exc:
            result, bench_error = None, f"benchmark could not run: {type(exc).__name__}: {exc}"
        if facts["expert_record"] == "recording":
            await _expert_dump(client, server, raw, facts)
    sources, discarded = collector.finish()
    kept, left = keep_files(sources, dest)
    shutil.rmtree(raw, ignore_errors=True)
    facts["files"], facts["notes"] = kept, facts["notes"] + discarded + left
    abort = ctx.work.abort_verdict or (("done", "") if any(k.endswith(".trace.json.gz") for k in kept)
                                   else ("failed", "profiled run: no trace was written; " + "; ".join(facts["notes"])))
    record = finished_run(
        run_id=run_id, item=item, spec=spec, server=server, result=result, bench_error=bench_error,
        provenance_args=provenance_args, client_limits=runner.client_limits(spec), telemetry_summary=None,
        gpu_snapshots=[], abort_verdict=abort)
    record.finish["provenance"]["profiled"] = facts
    ctx.recorder.store_run(record)
    ctx.work.current = None
    ctx.notice("info" if abort[0] == "done" else "warning",
                f"profiled run {run_id} ({profile.name}): {len(kept)} file(s) kept in {dest}")


async def _expert_dump(client: httpx.AsyncClient, server: ManagedServer, raw: Path, facts: ProfiledFactsJson) -> None:
    """Stop recording, dump, and copy this dump beside the traces: from the folder moe-tui made for
    this server start (moe_tui.servers.dumps), never /tmp or a folder a profile names."""
    from moe_tui.servers.dumps import expert_dump_dir

    await _post(client, "/stop_expert_distribution_record")
    since = time.time()
    code, text = await _post(client, "/dump_expert_distribution_record")
    facts["expert_record"] = "dumped" if code == 200 else f"dump failed: {text or code}"
    if server.server_id is None:
        facts["notes"].append("expert dump not kept: the server has no start of moe-tui's")
        return
    dump_dir = expert_dump_dir(server.server_id)
    dumps, notes = expert_dumps(dump_dir, since)
    facts["notes"].extend(notes)
    for p in dumps:
        try:
            fd = open_regular(p, follow_links=False, own=True, max_bytes=MAX_KEPT_BYTES)
            with os.fdopen(fd, "rb") as src, open(raw / p.name, "xb") as dst:
                shutil.copyfileobj(src, dst)
            p.unlink()  # kept beside the traces; the start's folder holds no second copy
        except OSError as exc:
            facts["notes"].append(f"expert dump {p.name} not kept: {exc.strerror or exc}")


async def _running(client: httpx.AsyncClient) -> int | None:
    """The server's running requests: /server_info's internal state, else the metrics gauge."""
    try:
        info = (await client.get("/server_info")).json()
        states = info.get("internal_states") or [{}]
        if isinstance(states[0], dict) and states[0].get("num_running_reqs") is not None:
            return int(states[0]["num_running_reqs"])
        for line in (await client.get("/metrics")).text.splitlines():
            if line.startswith("sglang:num_running_reqs"):
                return int(float(line.rsplit(" ", 1)[-1]))
    except (httpx.HTTPError, ValueError, TypeError, AttributeError, IndexError):
        return None
    return None


async def _wait_running(client: httpx.AsyncClient, concurrency: int, bench: asyncio.Task[BenchResult]) -> str:
    """Wait (up to FULL_BATCH_WAIT_S) until the server runs the whole concurrency, so the profiled
    decode steps are at the cell's batch; a server that says nothing is trusted to the client's count."""
    deadline = time.monotonic() + FULL_BATCH_WAIT_S
    while time.monotonic() < deadline and not bench.done():
        n = await _running(client)
        if n is None:
            return "unknown (the server reports no running count; the client had the concurrency in flight)"
        if n >= concurrency:
            return f"{n} running"
        await asyncio.sleep(0.1)
    return f"not seen within {FULL_BATCH_WAIT_S:.0f} s"


async def _ask_start(client: httpx.AsyncClient, req: FreeForm) -> asyncio.Task[tuple[int, str]]:
    """POST /start_profile and give it START_ANSWER_S to answer: some SGLang versions answer only
    once the profile is done, so the answer is awaited beside the trace folder."""
    start = asyncio.create_task(_post(client, "/start_profile", req, timeout=PROFILE_TIMEOUT_S))
    await asyncio.wait({start}, timeout=START_ANSWER_S)
    return start


async def _profile_while(start_bench: Callable[[], asyncio.Task[BenchResult]], full: asyncio.Event, client: httpx.AsyncClient,
                         req: FreeForm, collector: CaptureCollector, facts: ProfiledFactsJson) -> None:
    """Start the benchmark and the profile (once the batch is full; before the benchmark when the
    prefill is wanted too), wait for every rank's decode capture, then disarm the profiler."""
    if facts["prefill"]:
        start = await _ask_start(client, req)
        bench = start_bench()
        facts["notes"].append("prefill profiled too: the profile began with the benchmark, so on a real server the "
                              "first decode steps may run before the whole batch is in")
    else:
        bench = start_bench()
        waiter = asyncio.create_task(full.wait())
        await asyncio.wait({bench, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if bench.done():
            facts["notes"].append("the benchmark ended before the whole concurrency was in flight: nothing profiled")
            return
        facts["batch_full"] = await _wait_running(client, int(facts["concurrency"]), bench)
        start = await _ask_start(client, req)
    if start.done():
        code, text = start.result()
        facts["start_profile"] = {"status": code, "answer": text, "at": time.time()}
        if code != 200:  # only a definite refusal ends the wait
            facts["notes"].append(f"/start_profile answered {code or 'nothing'}: {text}")
            return
    deadline = time.monotonic() + PROFILE_TIMEOUT_S
    while not collector.poll() and time.monotonic() < deadline and not bench.done():
        await asyncio.sleep(0.2)
    if not start.done():
        start.cancel()
        facts["start_profile"] = {"status": None, "answer": "no answer while the traces were awaited"}
    complete = collector.poll()
    facts["decode_capture"] = collector.decode_stage
    if collector.decode_stage == "MIXED":
        facts["notes"].append("a prefill batch past num_steps ended the decode capture, so SGLang named it EXTEND: "
                              "kept as MIXED (decode steps with prefill batches between them)")
    code, text = await _post(client, "/stop_profile")  # nothing may go on profiling ("not in progress"
    facts["stop_profile"] = {"status": code, "answer": text}  # is the usual answer after num_steps)
    facts["disarm"] = await disarm(client)
    if not complete:
        facts["notes"].append(f"no complete set of {collector.world} ranks' decode traces after the benchmark or "
                              f"{PROFILE_TIMEOUT_S:.0f} s; /stop_profile answered {code}")
        await asyncio.sleep(0.5)


async def disarm(client: httpx.AsyncClient) -> str:
    """Leave the server's profiler unarmed. 0.5.23 keeps a by-stage configuration after its DECODE
    export, so the next prefill (the next run's warmup, a health probe's generate) would start a
    capture. A start with a `start_step` no server reaches and no stage split replaces it (the
    manager's `_init_profile`: only an init, nothing captured); a capture the armed profiler already
    began is stopped first (its files are discarded with the strays)."""
    code, text = await _post(client, "/start_profile", DISARM_REQUEST)
    if code == 500:  # "already in progress": the armed profiler began a capture
        await _post(client, "/stop_profile")
        code, text = await _post(client, "/start_profile", DISARM_REQUEST)
    return "disarmed" if code == 200 else f"not disarmed: {code or 'no answer'} {text}"
