"""`moe-tui import FILE [--profile NAME]`: sglang.bench_serving JSONL records as stored runs.

Each line becomes one finished run with client `sglang.bench_serving` and a spec rebuilt from the
record (`moe_tui.bench.sglang_adapter.spec_fields_from_record`). Fields a record does not carry
(seed, warmup requests, ignore_eos, temperature, flush_cache) take bench_serving 0.5.23's defaults
(42, 1, true, 0.0, false) and are listed in the run's provenance as `assumed_fields`, with the flag
`spec-assumed`; a record without max_concurrency (unlimited) gets num_prompts, which never blocks.
client_version is the record's server_info.version when present (bench_serving does not write its
own), else "unknown".

The whole file is read and checked before anything is written, then all runs go in one
transaction: an unreadable file or line gives an error naming the file and line, exit status 1,
and nothing stored.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

BENCH_SERVING_DEFAULTS = {"seed": 42, "warmup_requests": 1, "ignore_eos": True, "temperature": 0.0,
                          "flush_cache": False}


def add_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("file", help="a bench_serving --output-file (JSON lines)")
    p.add_argument("--profile", default=None,
                   help="profile name to file the runs under (default: the record's resolved "
                        "moe_runner_backend, else 'imported')")
    p.set_defaults(run=run)
    return p


def runs_from_file(path: str, profile: str | None) -> list[dict[str, Any]]:
    """`Store.import_runs` argument sets for every record; raises ImportFileError naming file:line."""
    import json
    import math

    from moe_tui.bench.sglang_adapter import CLIENT_NAME, BenchServingError, parse_bench_serving_jsonl, spec_fields_from_record
    from moe_tui.spec import BenchmarkSpec, SpecError

    try:
        records = parse_bench_serving_jsonl(path)
    except BenchServingError as exc:
        raise ImportFileError(str(exc)) from None
    # parse_bench_serving_jsonl skips blank lines; map records back to their line numbers
    with open(path, encoding="utf-8") as f:
        linenos = [i for i, line in enumerate(f, start=1) if line.strip()]
    if not records:
        raise ImportFileError(f"{path}: no bench_serving records in the file")
    out = []
    for record, lineno in zip(records, linenos):
        where = f"{path}:{lineno}"
        try:
            fields = spec_fields_from_record(record)
        except BenchServingError as exc:
            raise ImportFileError(f"{where}: {exc}") from None
        if fields.get("request_rate") == "trace":
            raise ImportFileError(f"{where}: a trace-replay run (request_rate 'trace') has no comparable spec")
        assumed = [k for k in BENCH_SERVING_DEFAULTS]
        fields.update(BENCH_SERVING_DEFAULTS)
        if "max_concurrency" not in fields:
            fields["max_concurrency"] = fields.get("num_prompts", 1)
            assumed.append("max_concurrency")
        server_info = record.get("server_info") or {}
        fields["client_version"] = str(server_info.get("version") or "unknown")
        fields["client"] = CLIENT_NAME
        try:
            spec = BenchmarkSpec.from_dict(fields, where)
        except SpecError as exc:
            raise ImportFileError(str(exc)) from None
        summary = {k: v for k, v in record.items() if k not in ("server_info",) and not isinstance(v, list)}
        summary.setdefault("failed", len(record["errors"]) - record["completed"]
                           if isinstance(record.get("errors"), list) else None)
        for k, v in list(summary.items()):
            if isinstance(v, float) and not math.isfinite(v):
                summary[k] = None if math.isnan(v) else str(v)
        name = profile or server_info.get("moe_runner_backend") or "imported"
        if name_problem(name, "profile/backend name"):  # untrusted text: the profile-name rule
            raise ImportFileError(f"{where}: {name_problem(name, 'profile/backend name')}")
        out.append(dict(
            profile_name=str(name), spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
            client=f"{CLIENT_NAME} {spec.client_version}", summary=summary,
            provenance={"source_file": str(path), "line": lineno, "server_info": server_info,
                        "assumed_fields": assumed},
            flags=["spec-assumed"], source="import", status="complete",
        ))
        json.dumps(out[-1]["provenance"], default=str)  # fail here, not in the transaction
    return out


from moe_tui.profiles import name_problem  # noqa: E402


class ImportFileError(ValueError):
    """The file cannot be imported; the message names the file and line."""


def run(args: argparse.Namespace) -> int:
    from moe_tui.store import Store, StoreError

    try:
        runs = runs_from_file(args.file, args.profile)
    except (ImportFileError, OSError) as exc:
        print(f"moe-tui import: {exc}; nothing imported", file=sys.stderr)
        return 1
    try:
        with Store.open_default() as store:
            ids = store.import_runs(runs)
    except StoreError as exc:
        print(f"moe-tui import: {exc}; nothing imported", file=sys.stderr)
        return 1
    profiles = sorted({r["profile_name"] for r in runs})
    print(f"imported {len(ids)} run(s) from {args.file} as profile {', '.join(profiles)}: ids {ids[0]}..{ids[-1]}")
    return 0
