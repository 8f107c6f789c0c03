"""Recording a finished run: what the controller stores when a timed benchmark ends.

- `finished_run(...)` turns a benchmark result (or the error that prevented one) into the run's
  status, flags, provenance and the queue item's verdict: pure, no I/O.
- `RunRecorder.store(...)` writes it: the run with its requests and GPU samples AND the closing of
  its queue item, in ONE store transaction (`Store.finish_run(close_item=...)`), so a crash
  between the two cannot leave a measured item to be run again. If the store cannot take it
  (locked past every retry, disk full, gone read-only), the record goes to a spill file beside
  the store (`<data dir>/spill/run-<id>.json`; if that filesystem is full too, a private
  `mkdtemp` folder under the temp dir whose prefix is keyed by the store's path) and `RunSpilled` is raised: the worker stops and
  the runner exits non-zero saying where the result is. Nothing finished is dropped.
- `RunRecorder.import_spilled()` (every controller start, before crash recovery) writes spilled
  records into the store, each in one transaction, and deletes their files. Only files that are
  ours and private are read (`moe_tui.trust`), and only to complete a run still `running` of the
  item they name: a stored run is never overwritten. Any other file is moved aside and named.
  The temp-dir fallback is a `mkdtemp` folder (0700, unguessable name), never a fixed /tmp path.

Recovery also recognises a stored complete run for an item's current attempt
(`RunQueue.recover_interrupted`), so a store written by an older version is not re-run either.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from moe_tui.judgement import FLAG_OUTPUT_TOKENS_MISMATCH
from moe_tui.profiles import ProfileSettings
from moe_tui.provenance import build_provenance, run_flags
from moe_tui.records import (
    BenchSummary,
    ClientLimitsJson,
    FreeForm,
    GpuSnapshotJson,
    NoTelemetryJson,
    ProvenanceJson,
    QueueFactsJson,
    ServerLoadJson,
    SimClockJson,
    TelemetrySummaryJson,
    WarmupPassJson,
)
from moe_tui.run.evidence import token_evidence
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.errors import StoreError
from moe_tui.store.records import _json_default
from moe_tui.trust import aside_note, set_aside, untrusted_dir_reason, untrusted_reason

if TYPE_CHECKING:
    import ctypes

    from moe_tui.bench.live import SelfCheck  # numpy's import (0.1 s) stays out of the runner
    from moe_tui.bench.result import BenchResult
    from moe_tui.export.records import BenchRequestJson
    from moe_tui.servers.managed import ManagedServer
    from moe_tui.store.db import RunRecord
    from moe_tui.store.queue import QueueItem
    from moe_tui.telemetry import TelemetrySnapshot

SPILL_PREFIX = "run-"


def _spill_json_default(value: Any) -> Any:
    """The store's JSON rules, worded for the spill file."""
    return _json_default(value, verb="spill")


class ProvenanceArgs(TypedDict):
    """What a run's provenance is built from at its start (`moe_tui.run.items.ItemRunner.open_run`), kept
    to build it again, completed, when the run ends (`finished_run`)."""

    spec: BenchmarkSpec
    profile: ProfileSettings
    server: FreeForm  # ManagedServer.describe() and SGLang's /server_info (the server's own words)
    queue_item: QueueFactsJson
    warmup: WarmupPassJson | None
    started_at: float
    sim_clock: SimClockJson | None


class FinishArgs(TypedDict):
    """`Store.finish_run`'s keyword arguments for one run (what a spill file keeps of it too)."""

    status: str
    summary: BenchSummary
    flags: list[str]
    telemetry: TelemetrySummaryJson | NoTelemetryJson
    selfcheck: SelfCheck
    provenance: ProvenanceJson
    requests: list[BenchRequestJson]
    gpu_samples: list[tuple[float, GpuSnapshotJson]]  # (wall time, the snapshot) of each one taken
    error: str
    finished_at: float


class RunSpilled(RuntimeError):
    """The store could not take a finished run; it is safe in a spill file (the message says where)."""


@dataclass
class FinishedRun:
    """Everything `Store.finish_run` takes for one run, plus the item's verdict."""

    run_id: int
    item_id: int
    item_state: str
    item_error: str
    status: str
    finish: FinishArgs

    def to_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "item_id": self.item_id, "item_state": self.item_state,
                           "item_error": self.item_error, "status": self.status, "finish": self.finish},
                          default=_spill_json_default, allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> FinishedRun:
        data = json.loads(text)
        finish = cast(FinishArgs, dict(data["finish"]))  # written by to_json from a FinishArgs
        finish["gpu_samples"] = [(float(t), s) for t, s in finish.get("gpu_samples") or ()]
        return cls(int(data["run_id"]), int(data["item_id"]), str(data["item_state"]), str(data["item_error"]),
                   str(data["status"]), finish)


def finished_run(*, run_id: int, item: QueueItem, spec: BenchmarkSpec, server: ManagedServer,
                 result: BenchResult | None, bench_error: str | None, provenance_args: ProvenanceArgs,
                 client_limits: ClientLimitsJson, telemetry_summary: TelemetrySummaryJson | None,
                 gpu_snapshots: list[TelemetrySnapshot], abort_verdict: tuple[str, str] | None,
                 server_load: ServerLoadJson | None = None) -> FinishedRun:
    """The stored form of a timed run: status, flags, provenance, and the item's verdict.
    `server_load`: `disturbance.load_summary` of the run (kept in the self-check; flags foreign load)."""
    finished = time.time()
    summary: BenchSummary = {}
    requests: list[BenchRequestJson] = []
    selfcheck: SelfCheck = {}
    bench_flags: list[str] = []
    if result is None:
        status, error = "failed", bench_error or ""
        client_facts = dict(client_limits)
    else:
        status, summary, requests = result.status, result.summary or {}, result.requests or []
        selfcheck, error, bench_flags = result.selfcheck or {}, result.error or "", list(result.flags or [])
        client_facts = {"name": result.client, "version": result.client_version, **client_limits}
    completed = sum(1 for r in requests if r.get("ok"))
    errors = sum(1 for r in requests if not r.get("ok"))
    provenance = build_provenance(**provenance_args, bench_client=client_facts, finished_at=finished,
                                  telemetry=telemetry_summary)
    flags = run_flags(
        backend_mismatch=bool(server.backend_mismatch), backend_unverified=server.resolved_backend is None,
        simulated=provenance["simulated"], bench_flags=bench_flags, completed=completed,
        expected=spec.num_prompts if status != "failed" else None, errors=errors, status=status,
        telemetry=telemetry_summary, warmup_pass=item.warmup, server_load=server_load,
    )
    if server_load is not None:
        selfcheck = {**selfcheck, "server_load": server_load}
    tokens_off = token_evidence(spec, requests, summary) if status != "failed" else None
    if tokens_off is not None:  # the server's counts do not hold: never a clean run
        selfcheck = {**selfcheck, "output_tokens": tokens_off}
        flags = sorted({*flags, FLAG_OUTPUT_TOKENS_MISMATCH})
    if abort_verdict is not None and status == "complete" and completed < spec.num_prompts:
        status = "incomplete"
    if abort_verdict is not None:
        state, item_error = abort_verdict
    elif status == "complete":
        state, item_error = "done", ""
    else:
        state, item_error = "failed", f"run {run_id} {status}: {error}".rstrip(": ")
    finish: FinishArgs = {"status": status, "summary": summary, "flags": flags, "telemetry": telemetry_summary or {},
              "selfcheck": selfcheck, "provenance": provenance, "requests": requests,
              "gpu_samples": [(s.wall, s.to_dict()) for s in gpu_snapshots if s.available],
              "error": error, "finished_at": finished}
    return FinishedRun(run_id, item.id, state, item_error, status, finish)


def release_memory() -> None:
    """Between items: collect cycles and hand freed heap back to the OS. An item's transient
    data (request records, ITL lists, JSON of the store write) is freed in Python, but glibc keeps
    the pages in its arenas, so RSS would ratchet up item after item; `malloc_trim` returns them.
    A no-op where there is no glibc."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            _libc = ctypes.CDLL(name) if name else False
        except OSError:
            _libc = False
    if _libc and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


_libc: ctypes.CDLL | Literal[False] | None = None  # None: not looked up yet; False: no libc


class RunRecorder:
    """Stores finished runs, spilling them to files when the store cannot take them."""

    def __init__(self, store: Store, notice: Callable[[str, str], None] | None = None):
        self.store = store
        self._notice = notice or (lambda level, message: None)
        self._refused_dirs: dict[Path, str] = {}

    def spill_dirs(self) -> list[Path]:
        """Where spilled runs are, in order: beside the store, then this store's private folders
        under the temp dir (made by `mkdtemp`: 0700 and unguessable, found again by their prefix
        and trusted only when ours and private)."""
        found = [self.store.path.parent / "spill"]
        prefix = self._temp_prefix()
        temp = Path(tempfile.gettempdir())
        with contextlib.suppress(OSError):
            for candidate in sorted(temp.glob(f"{prefix}*")):
                reason = untrusted_dir_reason(candidate)
                if reason is None:
                    found.append(candidate)
                elif candidate not in self._refused_dirs:
                    self._refused_dirs[candidate] = reason
        return found

    def _new_temp_dir(self) -> Path:
        return Path(tempfile.mkdtemp(prefix=self._temp_prefix(), dir=tempfile.gettempdir()))

    def _temp_prefix(self) -> str:
        key = hashlib.sha256(str(self.store.path.resolve()).encode()).hexdigest()[:16]
        return f"moe-tui-spill-{os.getuid()}-{key}-"

    def store_run(self, record: FinishedRun) -> bool:
        """Run + item in one transaction. Returns whether the item was closed. Raises RunSpilled."""
        try:
            return self.store.finish_run(record.run_id, **record.finish,
                                         close_item=(record.item_id, record.item_state, record.item_error))
        except StoreError as exc:
            where = self._spill(record)
            raise RunSpilled(f"{exc}; run {record.run_id} of item #{record.item_id} ({record.status}) was saved "
                             f"to the spill file {where} and is stored on the next start") from None

    def _spill(self, record: FinishedRun) -> Path:
        text = record.to_json()
        failures = []
        dirs: list[Path | None] = [*self.spill_dirs(), None]  # None: a new private temp folder
        for directory in dirs:
            path: Path | None = None
            try:
                if directory is None:
                    directory = self._new_temp_dir()
                path = directory / f"{SPILL_PREFIX}{record.run_id}.json"
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory, 0o700)
                refused = untrusted_dir_reason(directory)
                if refused is not None:
                    raise OSError(f"{directory} {refused}")
                tmp = path.with_suffix(".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                return path
            except OSError as exc:
                failures.append(f"{directory or 'a new temp folder'}: {exc.strerror or exc}")
                if path is not None:
                    with contextlib.suppress(OSError):
                        path.with_suffix(".tmp").unlink()
        raise StoreError(f"run {record.run_id} could be neither stored in {self.store.path} nor spilled ("
                         + "; ".join(failures) + ")")

    def spilled_files(self) -> list[Path]:
        found = []
        for directory in self.spill_dirs():
            with contextlib.suppress(OSError):
                found += sorted(directory.glob(f"{SPILL_PREFIX}*.json"))
        return found

    def import_spilled(self) -> list[str]:
        """Store every spilled run (before crash recovery marks their runs and items). Returns one
        line per file for the start-up notice. A file is read only if it is ours and private
        (`moe_tui.trust`); it then only completes a run still `running` whose item it names. Any
        other file (foreign, loose, a link, unreadable, for a run already stored or not there) is
        moved aside, named, and never written into the store."""
        files = self.spilled_files()  # notes the folders it refused
        lines = [f"spill folder {d} not used: it {why} (another user's? remove it)"
                 for d, why in self._refused_dirs.items()]
        for path in files:
            reason = untrusted_reason(path)
            if reason is not None:
                lines.append(aside_note(path, reason, set_aside(path, "untrusted")))
                continue
            try:
                record = FinishedRun.from_json(path.read_text())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                lines.append(aside_note(path, f"unreadable ({type(exc).__name__}: {str(exc)[:200]})",
                                        set_aside(path, "unreadable")))
                continue
            stored = self.store.run(record.run_id)
            conflict = _conflict(record, stored)
            if conflict is not None:
                lines.append(aside_note(path, conflict, set_aside(path, "conflict")))
                continue
            try:
                self.store.finish_run(record.run_id, **record.finish,
                                      close_item=(record.item_id, record.item_state, record.item_error))
            except (StoreError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
                lines.append(aside_note(path, f"could not be stored ({type(exc).__name__}: {str(exc)[:200]})",
                                        set_aside(path, "unstorable")))
                continue
            path.unlink()
            lines.append(f"stored run {record.run_id} of item #{record.item_id} ({record.status}) from spill file {path}")
        return lines


def _conflict(record: FinishedRun, stored: RunRecord | None) -> str | None:
    """Why `record` may not complete the stored run: only a run still `running`, of the same queue
    item, is completed from a spill file. A stored result is never overwritten."""
    if stored is None:
        return f"run {record.run_id} is not in the store"
    if stored.status != "running":
        return f"run {record.run_id} is already stored ({stored.status}); a stored run is never overwritten"
    if stored.queue_item_id != record.item_id:
        return (f"it names item #{record.item_id}, but run {record.run_id} measured item "
                f"#{stored.queue_item_id}")
    return None
