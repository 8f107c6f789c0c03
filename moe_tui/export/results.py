"""Tidy results for notebooks and exports: every recorded run as one row of a pandas DataFrame.

`runs_frame(store)` returns one row per run with

- identity and state: `run_id`, `profile`, `status`, `fingerprint`, `source`, `client`, `error`,
  `created_at`/`started_at`/`finished_at` (UTC timestamps), `duration_s`;
- judgement (from `moe_tui.judgement`, never re-decided here): `simulated`, `flags` (a tuple of
  codes), `suspect` (the flags that make a run untrustworthy), `clean` (no suspect flag and
  status complete);
- `spec.<field>`: the benchmark spec the run measured (`moe_tui.spec.BenchmarkSpec` fields);
- `profile.<key>`: the server profile's scalar settings as recorded with the run;
- `prov.<path>`: the provenance, flattened with dots (`prov.server.resolved_backend`,
  `prov.host.hostname`, ...), without the raw `/server_info` dump (`prov.server.resolved_args`)
  and the spec/profile copies already above;
- `metric.<name>`: the run's summary metrics (bench_serving's names: `metric.output_throughput`,
  `metric.mean_ttft_ms`, ...).

Column order is stable: identity, judgement, spec, profile, provenance, metrics, each block sorted.
A run missing a field gets NaN/None there, never a made-up value. See docs/results.md.

Service layer: imports the store (read-only), spec and judgement; never the controller or the UI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from moe_tui.judgement import is_simulated, normalise_flag, suspect
from moe_tui.store.db import RunRecord, Store

IDENTITY = ["run_id", "profile", "status", "fingerprint", "source", "client", "error",
            "created_at", "started_at", "finished_at", "duration_s"]
JUDGEMENT = ["simulated", "flags", "suspect", "clean"]
# Big, nested, or repeated elsewhere in the row: left out of the flattened provenance.
PROVENANCE_SKIP = ("server.resolved_args", "spec", "profile")


def _flatten(obj: Mapping[str, Any], prefix: str, skip: Iterable[str] = ()) -> dict[str, Any]:
    """Nested mappings to dotted keys; lists become tuples (hashable, comparable)."""
    out: dict[str, Any] = {}
    skipped = tuple(skip)

    def walk(value: Any, path: str) -> None:
        if path in skipped:
            return
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
            return
        out[f"{prefix}.{path}"] = tuple(value) if isinstance(value, list) else value

    walk(obj, "")
    return out


def run_row(run: RunRecord) -> dict[str, Any]:
    """One run as a flat dict (the row `runs_frame` builds)."""
    flags = tuple(sorted({normalise_flag(f) for f in run.flags}))
    bad = suspect(flags)
    row: dict[str, Any] = {
        "run_id": run.id, "profile": run.profile_name, "status": run.status, "fingerprint": run.fingerprint,
        "source": run.source, "client": run.client, "error": run.error,
        "created_at": run.created_at, "started_at": run.started_at, "finished_at": run.finished_at,
        "duration_s": (run.finished_at - run.started_at) if run.finished_at and run.started_at else None,
        "simulated": is_simulated(profile=run.profile, provenance=run.provenance, flags=flags),
        "flags": flags, "suspect": bad, "clean": run.status == "complete" and not bad,
    }
    row.update({f"spec.{k}": v for k, v in run.spec.items()})
    row.update({f"profile.{k}": (tuple(v) if isinstance(v, list) else v) for k, v in run.profile.items()
                if not isinstance(v, Mapping)})
    row.update(_flatten(run.provenance, "prov", PROVENANCE_SKIP))
    row.update({f"metric.{k}": v for k, v in run.summary.items() if not isinstance(v, (Mapping, list))})
    return row


def _ordered(columns: Iterable[str]) -> list[str]:
    cols = set(columns)
    blocks = [c for c in IDENTITY + JUDGEMENT if c in cols]
    for prefix in ("spec.", "profile.", "prov.", "metric."):
        blocks += sorted(c for c in cols if c.startswith(prefix))
    return blocks + sorted(cols - set(blocks))


def frame_from_runs(runs: Iterable[RunRecord]) -> pd.DataFrame:
    """The tidy frame of these runs (empty, with the fixed columns, when there are none)."""
    rows = [run_row(r) for r in runs]
    if not rows:
        return pd.DataFrame(columns=IDENTITY + JUDGEMENT)
    frame = pd.DataFrame.from_records(rows)
    frame = frame[_ordered(frame.columns)]
    for col in ("created_at", "started_at", "finished_at"):
        frame[col] = pd.to_datetime(frame[col], unit="s", utc=True)
    return frame.set_index("run_id", drop=False).rename_axis(None)


def runs_frame(store: Store, *, profiles: Iterable[str] | None = None,
               statuses: Iterable[str] | None = None) -> pd.DataFrame:
    """Every run in `store` (optionally only these profiles / statuses), one row each, oldest first."""
    wanted = list(statuses) if statuses is not None else None
    if profiles is None:
        runs = store.runs(statuses=wanted)
    else:
        runs = sorted((r for p in profiles for r in store.runs(profile_name=p, statuses=wanted)), key=lambda r: r.id)
    return frame_from_runs(runs)
