"""What one benchmark run produced (`BenchResult`: status, summary, per-request records, self-check,
flags), the store-ready record of one request (`outcome_record`), and the spec as moe-tui's client
runs it (`native_spec`: client "moe-tui", this version filled in). `moe_tui.bench.engine` makes
them and re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moe_tui.records import BenchSummary, FreeForm, SpecJson
from moe_tui.spec import BenchmarkSpec

if TYPE_CHECKING:  # the client's modules (aiohttp, numpy) stay out of the runner, which only reads results
    from moe_tui.bench.client import RequestOutcome
    from moe_tui.bench.live import SelfCheck
    from moe_tui.export.records import BenchRequestJson, BenchResultJson

# Free-form payloads a result carries, named: their keys are not moe-tui's to fix.
ServerInfo = FreeForm  # SGLang's /server_info as the server answered
# bench_serving's summary by bench_serving's field names (records.BenchSummary).
Summary = BenchSummary
# A spec as its canonical dict (moe_tui.spec.BenchmarkSpec.canonical_dict), or {} in a result read back
# from a client that could not read its request (one shape per field in the published schema: FreeForm).
SpecDict = SpecJson | FreeForm
# One JSON object of the client process's output, as read back (`to_dict` / `from_dict`: decoded here,
# into BenchResult, and nowhere else).
JsonObject = FreeForm

CLIENT_NAME = "moe-tui"
STATUSES = ("complete", "incomplete", "failed")


@dataclass
class BenchResult:
    """The outcome of one benchmark run. `requests` match `Store.finish_run(requests=...)`."""

    status: str
    summary: Summary = field(default_factory=dict)
    requests: list[BenchRequestJson] = field(default_factory=list)
    selfcheck: SelfCheck = field(default_factory=dict)
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    error: str = ""
    flags: list[str] = field(default_factory=list)
    spec: SpecDict = field(default_factory=dict)
    fingerprint: str = ""
    client: str = CLIENT_NAME
    client_version: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    server_info: ServerInfo | None = None

    def to_dict(self) -> JsonObject:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def event_line(self) -> BenchResultJson:
        """The result as the client process's last line (docs/schemas/bench-result.schema.json)."""
        return {"type": "BenchResult", "status": self.status, "summary": self.summary,  # type: ignore[typeddict-item]
                "requests": self.requests, "selfcheck": self.selfcheck, "errors_by_kind": self.errors_by_kind,
                "error": self.error, "flags": self.flags, "spec": dict(self.spec), "fingerprint": self.fingerprint,
                "client": self.client, "client_version": self.client_version, "started_at": self.started_at,
                "finished_at": self.finished_at, "server_info": self.server_info}

    @classmethod
    def from_dict(cls, data: JsonObject) -> BenchResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if known.get("status") not in STATUSES:
            raise ValueError(f"benchmark result has status {known.get('status')!r}, expected one of {STATUSES}")
        return cls(**known)


def client_version() -> str:
    from moe_tui import __version__

    return __version__


def native_spec(spec: BenchmarkSpec) -> BenchmarkSpec:
    """`spec` as this client runs it: client "moe-tui" and this moe-tui's version filled in.

    The controller should store runs under this spec's fingerprint (the result carries the same).
    Raises SpecError when the spec names another client or another moe-tui version.
    """
    from moe_tui.spec import SpecError

    version = client_version()
    if spec.client != CLIENT_NAME:
        raise SpecError("client", f"this is the {CLIENT_NAME} client; the spec is for {spec.client!r}")
    if spec.client_version and spec.client_version != version:
        raise SpecError("client_version", f"the spec is for moe-tui {spec.client_version}, this is {version}")
    return spec if spec.client_version == version else spec.replace(client_version=version)


def outcome_record(o: RequestOutcome, wall_anchor: float, perf_anchor: float) -> BenchRequestJson:
    """Store-ready dict; sent_at in epoch seconds; itl is the per-token list (bench_serving's)."""
    from moe_tui.metrics import split_chunk_gaps  # numpy: the client's, not the runner's

    sent = None if o.sent_at is None else wall_anchor + (o.sent_at - perf_anchor)
    queued = None
    if o.sent_at is not None and o.dispatched_at is not None:
        queued = max(0.0, o.sent_at - o.dispatched_at)
    return {
        "idx": o.idx, "ok": o.ok, "sent_at": sent, "prompt_len": o.prompt_len, "output_len": o.output_len,
        "requested_output_len": o.requested_output_len,
        "ttft": o.ttft, "latency": o.latency, "itl": split_chunk_gaps(o.chunks) if o.chunks else [],
        "finish_reason": o.finish_reason, "error": o.error, "error_kind": o.error_kind,
        "http_status": o.http_status, "queued_s": queued, "chunks": len(o.chunks),
    }
