"""The grid's view of stored runs: normalised records, their flags, provenance values, spec diffs.

`normalise` turns a `store.RunRecord` (or a mapping with the same names) into the grid's plain
`Run`; `run_flags_in_words` finds every flag a run carries from its flags and its stored
telemetry, selfcheck, provenance and summary (so a run imported without flags is judged alike);
`provenance_values` flattens what a run says about how it was measured. Also the number formatting
every renderer shares. Pure functions over plain data.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moe_tui import judgement as J
from moe_tui.compare.memo import derived
from moe_tui.compare.model import CompareError
from moe_tui.profiles import ProfileError, SettingDiff, profile_diff, profile_from_dict
from moe_tui.records import GridFactsJson
from moe_tui.spec import BenchmarkSpec, FieldDiff, SpecError

# Spec fields an imported record did not carry, named in its provenance (legacy: "assumed_fields"
# with the "spec-assumed" flag, from imports made before --assume existed).
UNKNOWN_FIELDS_KEY = "unknown_fields"
LEGACY_ASSUMED_FLAG = "spec_assumed"


@dataclass(frozen=True)
class Run:
    id: int
    profile_name: str
    status: str
    fingerprint: str
    spec: Mapping[str, Any]
    summary: Mapping[str, Any]
    flags: tuple[str, ...]
    profile: Mapping[str, Any]
    provenance: Mapping[str, Any]
    telemetry: Mapping[str, Any]
    selfcheck: Mapping[str, Any]
    error: str
    order: tuple[float, int]  # (finished or created time, id): "most recent" is the largest
    server_start_id: int | None = None  # the server start that measured it (None: not known, e.g. imported)
    # When it was measured: its finish time, known only where its start was recorded too (an import that
    # carried no times is stamped with the import's time, which says nothing about drift).
    measured_at: float | None = None


# What a cell and its verdict read from a run's provenance, telemetry and selfcheck (beside its summary,
# flags, spec and profile snapshot): its "grid facts". The store keeps them in the run's summary row
# (`moe_tui.store.summaries`), so a grid never decodes a whole provenance or telemetry. A key maps to
# True (kept whole) or to the keys kept under it ("*": every key, each pruned alike). Top-level
# scalars and lists of the provenance are kept too (`provenance_values` lists the flat ones). Every
# read of these dicts in compare/ and grids.extras must stay inside this tree: tests/test_run_summaries.py
# builds each grid from full runs and from their facts and asserts they agree.
_GRID_FACTS: dict[str, Any] = {
    "provenance": {
        "server": {"engine": True, "sglang_version": True, "resolved_backend": True, "resolved_args": True,
                   "backend_mismatch": True, "requested_backend": True},
        "server_info": True,  # an import's record of the server (confounders, its start, simulated)
        "gpu": {"gpu_names": True, "driver_version": True, "sm_clock_max_seen_mhz": True,
                "sm_clock_min_mhz": True, "cuda_driver_version": True},
        "host": {"hostname": True, "platform": True, "python_version": True, "moe_tui_version": True},
        "client": {"name": True, "version": True},
        "queue_item": {"requested_fingerprint": True},
    },
    "telemetry": {
        "overall": {"suspect_clock_events": True, "sm_clock_drop_pct": True},
        "gpus": {"*": {"suspect_clock_events": True, "name": True}},
        "foreign_processes": True, "driver_version": True, "cuda_driver_version": True,
    },
    "selfcheck": {"client_bound": True, "client_bound_reasons": True},
}


def _kept(value: Any, keep: Any) -> Any:
    if keep is True or not isinstance(value, Mapping):
        return value
    if "*" in keep:
        return {k: _kept(v, keep["*"]) for k, v in value.items()}
    return {k: _kept(value[k], keep[k]) for k in keep if k in value}


def grid_facts(provenance: Mapping[str, Any], telemetry: Mapping[str, Any],
               selfcheck: Mapping[str, Any]) -> GridFactsJson:
    """The parts of a run's provenance, telemetry and selfcheck that a grid reads (`_GRID_FACTS`)."""
    prov = {k: v for k, v in provenance.items() if not isinstance(v, Mapping)}
    prov.update(_kept({k: v for k, v in provenance.items() if isinstance(v, Mapping)}, _GRID_FACTS["provenance"]))
    return GridFactsJson(provenance=prov, telemetry=_kept(dict(telemetry), _GRID_FACTS["telemetry"]),
                         selfcheck=_kept(dict(selfcheck), _GRID_FACTS["selfcheck"]))


def normalise(run: object, where: str) -> Run:
    """A RunRecord (or a mapping with the same names) as the grid's plain record."""
    if isinstance(run, Run):
        return run
    get = _fields(run)
    rid = get("id")
    fp = get("fingerprint")
    spec = get("spec")
    if rid is None or not isinstance(fp, str) or not fp or not isinstance(spec, Mapping):
        raise CompareError(f"{where}: a run needs an id, a fingerprint and a spec dict, got {run!r:.200}")
    when = get("finished_at") or get("created_at") or 0.0
    return Run(
        id=int(rid), profile_name=str(get("profile_name") or ""),
        status=str(get("status", "complete")), fingerprint=fp, spec=_plain(spec),
        summary=_plain(get("summary")), flags=tuple(get("flags") or ()),
        profile=_plain(get("profile")), provenance=_plain(get("provenance")),
        telemetry=_plain(get("telemetry")), selfcheck=_plain(get("selfcheck")),
        error=str(get("error") or ""), order=(float(when), int(rid)),
        server_start_id=_start_id(get("server_start_id")),
        measured_at=_time(get("finished_at")) if get("started_at") else None,
    )


def _fields(run: object) -> Callable[..., Any]:
    """How to read a run's fields: a mapping's `get`, else its attributes (asked once a run, not per field)."""
    if isinstance(run, Mapping):
        return run.get
    return lambda name, default=None: getattr(run, name, default)


def _plain(value: Any) -> dict[str, Any]:
    """The run's decoded dict itself, not a copy (a Run is read, never written): runs that share one
    decoded object (`store.summaries`) share what is derived from it (`compare.memo`)."""
    return value if type(value) is dict else dict(value or {})


def _time(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _start_id(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def concurrency_of(run: Run) -> int | None:
    value = run.spec.get("max_concurrency")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return int(value)


def unknown_spec_fields(run: Run) -> tuple[str, ...]:
    """Spec fields the run's source did not record and nobody confirmed (imports)."""
    prov = run.provenance
    unknown = prov.get(UNKNOWN_FIELDS_KEY)
    if isinstance(unknown, list):
        return tuple(sorted(str(u) for u in unknown))
    if LEGACY_ASSUMED_FLAG in {J.normalise_flag(f) for f in run.flags} and isinstance(prov.get("assumed_fields"), list):
        return tuple(sorted(str(u) for u in prov["assumed_fields"]))
    return ()


def snapshot_text(profile: Mapping[str, Any]) -> str:
    """A profile snapshot as canonical text, its source file left out (to tell snapshots apart); once
    per build and snapshot object (`compare.memo`: the runs of a profile share one decoded snapshot)."""
    return derived("snapshot_text", (profile,), lambda: json.dumps(
        {k: v for k, v in profile.items() if k != "source"}, sort_keys=True))


def requested_fingerprint(run: Run) -> str:
    """The queue item's fingerprint (the spec as asked) when the run came from the queue."""
    item = run.provenance.get("queue_item")
    requested = item.get("requested_fingerprint") if isinstance(item, Mapping) else None
    return requested if isinstance(requested, str) else run.fingerprint


# -- flags ------------------------------------------------------------------------------------------
def run_flags_in_words(run: object) -> list[tuple[str, str]]:
    """(flag code, words) for every flag of one run, from its flags and stored telemetry/selfcheck/summary
    (once per run within a build, and between builds of an open grid: `compare.memo`)."""
    r = normalise(run, "run")
    return list(derived("run_flags", (r,), lambda: _run_flags_in_words(r)))


def _run_flags_in_words(r: Run) -> list[tuple[str, str]]:
    found: dict[str, str] = {}

    def add(code: str, text: str) -> None:
        found.setdefault(code, f"run {r.id}: {text}")

    for raw in r.flags:
        code = J.normalise_flag(raw)
        if code in ("complete", J.FLAG_SIMULATED, LEGACY_ASSUMED_FLAG):
            continue  # the status is re-derived; simulated is the grid's banner; spec-assumed -> unverified
        add(code, J.flag_words(code))
    failed = r.summary.get("failed")
    if isinstance(failed, (int, float)) and failed > 0:
        total = (r.summary.get("completed") or 0) + failed
        found[J.FLAG_REQUEST_ERRORS] = f"run {r.id}: {failed:g} of {total:g} requests failed"
    if r.status in ("incomplete", "failed"):
        add(J.FLAG_INCOMPLETE, f"{r.status}{': ' + r.error if r.error else ''}")
    prov = r.provenance
    asked = r.profile.get("moe_runner_backend") or dig(prov, ("server", "requested_backend"))
    resolved = next((v for v in (dig(prov, p) for p in dict(PROVENANCE_FIELDS)["resolved_backend"]) if v), None)
    mismatch = prov.get("backend_mismatch") or dig(prov, ("server", "backend_mismatch"))
    if mismatch or (asked and resolved and asked != resolved):
        found[J.FLAG_BACKEND_MISMATCH] = (
            f"run {r.id}: server resolved MoE backend {resolved!s} but the profile asks {asked!s}"
            if asked and resolved else f"run {r.id}: MoE backend mismatch (silent fallback)")
    if r.selfcheck.get("client_bound"):
        reasons = r.selfcheck.get("client_bound_reasons")
        detail = "; ".join(map(str, reasons)) if isinstance(reasons, list) and reasons else "the client could not keep up"
        found[J.FLAG_CLIENT_BOUND] = f"run {r.id}: client-bound ({detail})"
    _telemetry_flags(r, found)
    return sorted(found.items())


def _telemetry_flags(r: Run, found: dict[str, str]) -> None:
    tel = r.telemetry
    if not tel:
        return
    overall = tel.get("overall") or {}
    throttles = sorted(set(overall.get("suspect_clock_events") or ())
                       | {e for g in (tel.get("gpus") or {}).values() for e in (g.get("suspect_clock_events") or ())})
    if throttles:
        found[J.FLAG_THROTTLED] = f"run {r.id}: GPU throttled ({', '.join(throttles)})"
    drop = overall.get("sm_clock_drop_pct")
    if isinstance(drop, (int, float)) and drop >= J.CLOCK_DROP_SUSPECT_PCT:
        found[J.FLAG_CLOCK_DROP] = f"run {r.id}: SM clock dropped {drop:.0f}% under load"
    foreign = tel.get("foreign_processes")
    if foreign:
        who = ", ".join(f"pid {p.get('pid')} on GPU {p.get('gpu')}" for p in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        found[J.FLAG_FOREIGN_GPU_PROCESS] = f"run {r.id}: foreign GPU process ({who}{more})"


def run_suspect_flags(run: object) -> list[tuple[str, str]]:
    """The flags among `run_flags_in_words` that make the run suspect (judgement.SUSPECT_FLAGS)."""
    return [(c, t) for c, t in run_flags_in_words(run) if c in J.SUSPECT_FLAGS]


# -- spec and profile differences -------------------------------------------------------------------
def spec_field_diffs(baseline_spec: Mapping[str, Any], candidate_spec: Mapping[str, Any],
                     baseline_fp: str = "", candidate_fp: str = "") -> tuple[FieldDiff, ...]:
    """Every spec field that differs, both values; never empty when the fingerprints differ."""
    try:
        diffs = BenchmarkSpec.from_dict(baseline_spec).diff(BenchmarkSpec.from_dict(candidate_spec))
    except SpecError:
        keys = list(dict.fromkeys([*baseline_spec, *candidate_spec]))
        diffs = [FieldDiff(k, baseline_spec.get(k), candidate_spec.get(k)) for k in keys
                 if baseline_spec.get(k) != candidate_spec.get(k)]
    if not diffs and baseline_fp != candidate_fp:
        # The stored specs read the same but were fingerprinted differently (another spec schema
        # or a hand-edited store): still not the same measurement, and we say exactly that.
        diffs = [FieldDiff("fingerprint", baseline_fp[:12], candidate_fp[:12])]
    return tuple(diffs)


def snapshot_diff(baseline: Mapping[str, Any], candidate: Mapping[str, Any],
                  vary: frozenset[str] = J.DEFAULT_VARY) -> list[SettingDiff]:
    """Launch settings that differ between two stored profile snapshots, classified by `vary`:
    kind "backend" (a compared field), "identity" (judgement.PROFILE_IDENTITY_KEYS) or "launch"."""
    a = {k: v for k, v in baseline.items() if k != "source"}
    b = {k: v for k, v in candidate.items() if k != "source"}
    try:
        raw = profile_diff(profile_from_dict(a, "baseline profile snapshot"),
                           profile_from_dict(b, "candidate profile snapshot"))
    except (ProfileError, TypeError, KeyError, AttributeError, ValueError):
        raw = [SettingDiff(k, a.get(k), b.get(k), "launch") for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    out = []
    for d in raw:
        kind = ("backend" if J.varied(d.key, vary)
                else "identity" if d.key in J.PROFILE_IDENTITY_KEYS else "launch")
        out.append(SettingDiff(d.key, d.baseline, d.candidate, kind))
    return out
# -- provenance -----------------------------------------------------------------------------------
# (shown key, where to look in a run's provenance dict, first hit wins). The nested paths are
# moe_tui.provenance.build_provenance's layout; the flat ones cover runs imported from elsewhere.
PROVENANCE_FIELDS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("engine", (("server", "engine"), ("engine",))),
    ("simulated", (("simulated",), ("server", "resolved_args", "simulated"), ("server_info", "simulated"))),
    ("sglang_version", (("server", "sglang_version"), ("sglang_version",), ("server", "resolved_args", "version"),
                        ("server_info", "version"))),
    ("resolved_backend", (("server", "resolved_backend"), ("resolved_backend",),
                          ("server", "resolved_args", "moe_runner_backend"), ("server_info", "moe_runner_backend"))),
    ("gpu_names", (("gpu", "gpu_names"), ("gpu_names",))),
    ("driver_version", (("gpu", "driver_version"), ("driver_version",))),
    ("sm_clock_max_seen_mhz", (("gpu", "sm_clock_max_seen_mhz"),)),
    ("sm_clock_min_mhz", (("gpu", "sm_clock_min_mhz"),)),
    ("cuda_version", (("gpu", "cuda_driver_version"), ("cuda_driver_version",), ("cuda_version",))),
    ("hostname", (("host", "hostname"), ("hostname",))),
    ("platform", (("host", "platform"), ("platform",))),
    ("python_version", (("host", "python_version"), ("python_version",))),
    ("moe_tui_version", (("host", "moe_tui_version"), ("moe_tui_version",))),
    ("client", (("client", "name"),)),
    ("client_version", (("client", "version"),)),
) + tuple((key, (("server", "resolved_args", key), ("server_info", key))) for key in J.SERVER_ARGS_SHOWN)
PROVENANCE_ORDER = tuple(k for k, _ in PROVENANCE_FIELDS)
# Flat keys that are per-run by nature (times, pids, paths) or shown elsewhere (spec, profile).
_VOLATILE_MARKERS = ("time", "_at", "pid", "run_id", "server_start", "log", "argv", "env", "started",
                     "finished", "duration", "uptime", "port", "command", "queue", "url", "path", "executable")
_NOT_PROVENANCE = {"spec", "fingerprint", "spec_summary", "profile", "provenance_schema", "warmup_pass",
                   "server_info", "server", "client", "host", "gpu", "cuda_driver_version", "requested_backend",
                   "backend_mismatch", "unknown_fields", "assumed_fields", "confirmed_fields",
                   "content_sha256", "content_sha256_labelled", "source_file", "line", "output_tokens_check"}
NOT_RECORDED = "(not recorded)"


def dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if type(data) is not dict and not isinstance(data, Mapping):  # the cheap test first: decoded JSON is dicts
            return None
        data = data.get(key)
    return data


def provenance_values(run: Run) -> dict[str, str]:
    """What the run says about how it was measured, flat and in words (once per build and run: `compare.memo`)."""
    return derived("provenance_values", (run.provenance, run.telemetry, run.profile), lambda: _provenance_values(run))


def _provenance_values(run: Run) -> dict[str, str]:
    out: dict[str, str] = {}
    prov = run.provenance
    for key, paths in PROVENANCE_FIELDS:
        for path in paths:
            value = dig(prov, path)
            if value is not None and value != {} and value != "":
                out[key] = render_value(value)
                break
    for key, value in prov.items():
        if key in out or key in _NOT_PROVENANCE or isinstance(value, Mapping) or value is None:
            continue
        if any(m in key for m in _VOLATILE_MARKERS):
            continue
        out[key] = render_value(value)
    # Telemetry stored with the run fills what provenance lacks (imported or older runs).
    tel = run.telemetry
    for key, src in (("driver_version", "driver_version"), ("cuda_version", "cuda_driver_version")):
        if tel.get(src) and key not in out:
            out[key] = render_value(tel[src])
    if "gpu_names" not in out and isinstance(tel.get("gpus"), Mapping):
        names = {k: g.get("name") for k, g in tel["gpus"].items() if isinstance(g, Mapping)}
        if any(names.values()):
            out["gpu_names"] = render_value(names)
    if "engine" not in out and run.profile.get("engine"):
        out["engine"] = str(run.profile["engine"])
    return out


def render_value(value: object) -> str:
    if isinstance(value, Mapping) and all(str(k).isdigit() for k in value):
        # {gpu index: name}: in index order, so "8 x NVIDIA RTX PRO 6000" when they agree.
        value = [value[k] for k in sorted(value, key=lambda k: int(k))]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value) and len(set(value)) == 1:
        return f"{len(value)} x {value[0]}"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def side_provenance(runs: Sequence[Run]) -> dict[str, str]:
    values: dict[str, list[str]] = {}
    for run in sorted(runs, key=lambda r: r.order):
        for key, value in provenance_values(run).items():
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    return {k: v[0] if len(v) == 1 else "mixed: " + " | ".join(v) for k, v in values.items()}


def is_simulated(run: Run) -> bool:
    return J.is_simulated(profile=run.profile, provenance=run.provenance, flags=run.flags)


# -- formatting -----------------------------------------------------------------------------------
def format_number(x: float | None) -> str:
    """Four significant-ish digits a person reads: 1603.0, 218.7, 38.46, 0.123."""
    if x is None or not math.isfinite(x):
        return "-" if x is None else str(x)
    ax = abs(x)
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    if ax == 0:
        return "0"
    return f"{x:#.3g}"


def signed(x: float, text: str) -> str:
    return text if text.startswith("-") else "+" + text


def format_pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return signed(x, f"{x:.1f}%")


