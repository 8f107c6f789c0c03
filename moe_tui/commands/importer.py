"""`moe-tui import FILE [--profile NAME] [--assume FIELD=VALUE,...]`: benchmark JSONL records as runs.

Two kinds of record:
- a `moe-tui bench --output-file` record carries its own `spec` and `spec_fingerprint`: the run keeps
  that spec and fingerprint exactly (a record whose spec does not hash to its fingerprint is refused),
  its client and client version, and its own flags;
- a `sglang.bench_serving` record: the spec is rebuilt from the fields it carries. Fields it does not
  carry (seed, warmup_requests, ignore_eos, temperature, flush_cache) are UNKNOWN: stored with
  bench_serving 0.5.23's defaults so a fingerprint exists, listed in provenance `unknown_fields`, and
  every grid cell over them says "spec unverified" until the user confirms them with
  `--assume seed=1,ignore_eos=true,...` (recorded as `confirmed_fields`). Its client version is
  unknown (bench_serving does not write it); the server's version stays the server's.
Every record: output tokens are checked against completed x output_len (with ignore_eos) and a
mismatch is named and flagged `output_tokens_mismatch`; a record already in the store (same content,
sha256 of its canonical JSON with labels such as bench_serving's `tag` left out) is skipped and the
CLI says so.

The whole file is read and checked before anything is written, then all new runs go in one
transaction: an unreadable file or line gives an error naming the file and line, exit status 1,
and nothing stored.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moe_tui import judgement as J
from moe_tui.records import BenchSummary, FreeForm, SpecOverrides

if TYPE_CHECKING:
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store

BENCH_SERVING_DEFAULTS = {"seed": 42, "warmup_requests": 1, "ignore_eos": True, "temperature": 0.0,
                          "flush_cache": False}
UNKNOWN_CLIENT_VERSION = "unknown"
OUTPUT_TOKENS_TOLERANCE = 0.01


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("file", help="a bench_serving or moe-tui bench --output-file (JSON lines)")
    p.add_argument("--profile", default=None,
                   help="profile name to file the runs under (default: the record's resolved "
                        "moe_runner_backend, else 'imported')")
    p.add_argument("--assume", metavar="FIELD=VALUE[,...]", default="",
                   help="confirm spec fields a bench_serving record does not carry: "
                        + ", ".join(BENCH_SERVING_DEFAULTS))
    p.add_argument("--server-start", metavar="NAME", default=None,
                   help="the server start every record of this file was measured on (one file per start; "
                        "a record's own \"server_start\" field wins): starts, not runs, are the unit of "
                        "evidence, and SGLang's /server_info carries no pid to tell them apart")
    p.add_argument("--server-info", metavar="FILE", default=None,
                   help="that start's GET /server_info saved as JSON (launch settings and the resolved MoE "
                        "backend), for records that carry none (SGLang's bench_serving writes none)")
    p.set_defaults(run=run)
    return p


from moe_tui.profiles import name_problem  # noqa: E402


class ImportFileError(ValueError):
    """The file cannot be imported; the message names the file and line."""


def parse_assume(text: str) -> SpecOverrides:
    """`seed=1,ignore_eos=true` as checked spec values; ImportFileError names a bad one."""
    from moe_tui.spec import BenchmarkSpec, SpecError

    out: SpecOverrides = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in BENCH_SERVING_DEFAULTS:
            raise ImportFileError(f"--assume {part!r}: give FIELD=VALUE with FIELD one of "
                                  f"{', '.join(BENCH_SERVING_DEFAULTS)}")
        value: Any = raw.strip()
        if value.lower() in ("true", "false"):
            value = value.lower() == "true"
        try:
            out[key] = getattr(BenchmarkSpec.from_dict({key: value}, "--assume"), key)
        except SpecError as exc:
            raise ImportFileError(str(exc)) from None
    return out


# Keys that label a record without being part of the measurement (bench_serving's --tag, notes, names):
# a re-import with a changed label is the same run, and must not double n.
LABEL_KEYS = frozenset({"tag", "tags", "label", "labels", "run_name", "name", "note", "notes", "comment",
                        "description"})


def content_hash(record: Mapping[str, Any], *, labels: bool = False) -> str:
    """SHA-256 of the record's measurement (labels left out). `labels=True`: the whole record, as imports
    made before labels were ignored stored it (still matched, so those are not stored twice either)."""
    body = dict(record) if labels else {k: v for k, v in record.items() if k not in LABEL_KEYS}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _own_spec(record: Mapping[str, Any], where: str) -> Any:
    """A moe-tui bench record's own spec, checked against its fingerprint."""
    from moe_tui.spec import BenchmarkSpec, SpecError

    try:
        spec = BenchmarkSpec.from_dict(record["spec"], where)
    except SpecError as exc:
        raise ImportFileError(str(exc)) from None
    if record.get("spec_fingerprint") and record["spec_fingerprint"] != spec.fingerprint:
        raise ImportFileError(f"{where}: the record's spec hashes to {spec.short_fingerprint}, not to its "
                              f"spec_fingerprint {str(record['spec_fingerprint'])[:12]}; edited record?")
    return spec


def _rebuilt_spec(record: Mapping[str, Any], where: str, assume: Mapping[str, Any]) -> tuple[Any, list[str]]:
    from moe_tui.bench.sglang_adapter import CLIENT_NAME, BenchServingError, spec_fields_from_record
    from moe_tui.spec import BenchmarkSpec, SpecError

    try:
        fields = spec_fields_from_record(record)
    except BenchServingError as exc:
        raise ImportFileError(f"{where}: {exc}") from None
    if fields.get("request_rate") == "trace":
        raise ImportFileError(f"{where}: a trace-replay run (request_rate 'trace') has no comparable spec")
    unknown = [k for k in BENCH_SERVING_DEFAULTS if k not in assume]
    fields.update(BENCH_SERVING_DEFAULTS)
    fields.update(assume)
    if "max_concurrency" not in fields:
        fields["max_concurrency"] = fields.get("num_prompts", 1)
        unknown.append("max_concurrency")
    fields["client"] = CLIENT_NAME
    fields["client_version"] = UNKNOWN_CLIENT_VERSION
    try:
        return BenchmarkSpec.from_dict(fields, where), unknown
    except SpecError as exc:
        raise ImportFileError(str(exc)) from None


def output_tokens_problem(record: Mapping[str, Any], spec: BenchmarkSpec) -> str | None:
    """Why total_output_tokens does not match completed x output_len, or None (checked with ignore_eos)."""
    total, completed = record.get("total_output_tokens"), record.get("completed")
    if not spec.ignore_eos or not isinstance(total, (int, float)) or not isinstance(completed, (int, float)):
        return None
    high = completed * spec.output_len
    low = completed * max(1, math.floor(spec.output_len * spec.range_ratio))
    if low * (1 - OUTPUT_TOKENS_TOLERANCE) <= total <= high * (1 + OUTPUT_TOKENS_TOLERANCE):
        return None
    expect = f"{high:g}" if low == high else f"{low:g}..{high:g}"
    return (f"total_output_tokens {total:g} but completed {completed:g} x output_len {spec.output_len} "
            f"expects {expect}")


def _summary(record: Mapping[str, Any]) -> BenchSummary:
    skip = {"server_info", "spec", "spec_fingerprint", "selfcheck", "flags", "client", "status", "error"}
    summary = {k: v for k, v in record.items() if k not in skip and not isinstance(v, (list, dict))}
    summary.setdefault("failed", len(record["errors"]) - record["completed"]
                       if isinstance(record.get("errors"), list) else None)
    for k, v in list(summary.items()):
        if isinstance(v, float) and not math.isfinite(v):
            summary[k] = None if math.isnan(v) else str(v)
    return summary


def run_from_record(record: Mapping[str, Any], where: str, lineno: int, path: str, profile: str | None,
                    assume: Mapping[str, Any], start: str | None = None,
                    start_info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One `Store.import_runs` argument set. `start`/`start_info`: the file's server start and its saved
    /server_info (`--server-start`, `--server-info`); a record's own fields win."""
    from moe_tui.bench.sglang_adapter import CLIENT_NAME

    raw_info = record.get("server_info")
    server_info: FreeForm = raw_info if isinstance(raw_info, dict) and raw_info else dict(start_info or {})
    own_start = record.get("server_start")
    start = own_start if isinstance(own_start, str) and own_start else start
    if start is not None and (problem := name_problem(start, "server start name")):
        raise ImportFileError(f"{where}: {problem}")
    flags = {J.normalise_flag(f) for f in (record.get("flags") or []) if isinstance(f, str)}
    if isinstance(record.get("spec"), dict):
        spec, unknown = _own_spec(record, where), list[str]()
        client = str(record.get("client") or f"{spec.client} {spec.client_version}".strip())
        client_name, client_version = spec.client, spec.client_version or UNKNOWN_CLIENT_VERSION
    else:
        spec, unknown = _rebuilt_spec(record, where, assume)
        client_name, client_version = CLIENT_NAME, UNKNOWN_CLIENT_VERSION
        client = f"{CLIENT_NAME} {UNKNOWN_CLIENT_VERSION}"
    problem = output_tokens_problem(record, spec)
    if problem:
        flags.add(J.FLAG_OUTPUT_TOKENS_MISMATCH)
    status = record.get("status") if record.get("status") in ("complete", "incomplete", "failed") else "complete"
    provenance = {
        "source_file": str(path), "line": lineno, "content_sha256": content_hash(record),
        "content_sha256_labelled": content_hash(record, labels=True),
        "server_info": server_info, "unknown_fields": unknown,
        "confirmed_fields": sorted(assume) if "spec" not in record else [],
        "client": {"name": client_name, "version": client_version},
        "server": {"sglang_version": server_info.get("version"), "resolved_args": server_info,
                   "resolved_backend": server_info.get("moe_runner_backend")},
        "output_tokens_check": problem or "ok",
        **({"server_start": start} if start else {}),
    }
    name = profile or server_info.get("moe_runner_backend") or "imported"
    problem_with_name = name_problem(str(name), "profile/backend name")  # untrusted text: the profile-name rule
    if problem_with_name:
        raise ImportFileError(f"{where}: {problem_with_name}")
    return dict(profile_name=str(name), spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                client=client, summary=_summary(record), provenance=provenance, flags=sorted(flags),
                source="import", status=status, selfcheck=record.get("selfcheck") or {})


def server_info_file(path: str) -> FreeForm:
    """SGLang's /server_info answer saved to a file (`--server-info`): its own keys, kept as they are."""
    """A saved GET /server_info (a JSON object); ImportFileError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(16 * 1024 * 1024 + 1)
    except OSError as exc:
        raise ImportFileError(f"--server-info {path}: {exc.strerror or exc}") from None
    if len(text) > 16 * 1024 * 1024:
        raise ImportFileError(f"--server-info {path}: larger than 16 MiB; not a /server_info answer")
    try:
        info = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ImportFileError(f"--server-info {path}: not JSON ({str(exc)[:80]})") from None
    if not isinstance(info, dict) or not info:
        raise ImportFileError(f"--server-info {path}: expected the JSON object GET /server_info answers")
    return info


def runs_from_file(path: str, profile: str | None, assume: Mapping[str, Any] | None = None,
                   start: str | None = None, info_path: str | None = None) -> list[dict[str, Any]]:
    """`Store.import_runs` argument sets for every record; raises ImportFileError naming file:line."""
    from moe_tui.bench.sglang_adapter import BenchServingError, parse_bench_serving_jsonl

    try:
        records = parse_bench_serving_jsonl(path)
    except BenchServingError as exc:
        raise ImportFileError(str(exc)) from None
    with open(path, encoding="utf-8") as f:
        linenos = [i for i, line in enumerate(f, start=1) if line.strip()]
    if not records:
        raise ImportFileError(f"{path}: no benchmark records in the file")
    info = server_info_file(info_path) if info_path else None
    out = []
    for record, lineno in zip(records, linenos):
        out.append(run_from_record(record, f"{path}:{lineno}", lineno, path, profile, assume or {}, start, info))
        json.dumps(out[-1]["provenance"], default=str)  # fail here, not in the transaction
    return out


def existing_hashes(store: Store, runs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """content hash -> the stored import that has it, for these runs' hashes (labelled ones too)."""
    return store.imported_runs_by_hash(h for r in runs for h in (r["provenance"]["content_sha256"],
                                                                 r["provenance"]["content_sha256_labelled"]))


def run(args: argparse.Namespace) -> int:
    from moe_tui.commands.common import EXIT_NOT_FOUND
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    if not Path(args.file).exists():
        print(f"moe-tui import: {args.file}: no such file; nothing imported", file=sys.stderr)
        return EXIT_NOT_FOUND
    problem = _not_a_file(args.file)
    if problem:
        print(f"moe-tui import: {args.file} {problem}; nothing imported", file=sys.stderr)
        return 1
    if _is_archive(args.file):
        return _restore(args.file)
    try:
        runs = runs_from_file(args.file, args.profile, parse_assume(args.assume), args.server_start,
                              args.server_info)
    except (ImportFileError, OSError) as exc:
        print(f"moe-tui import: {exc}; nothing imported", file=sys.stderr)
        return 1
    try:
        with Store.open_default() as store:
            seen = existing_hashes(store, runs)
            new, skipped = [], []
            for r in runs:
                h = r["provenance"]["content_sha256"]
                legacy = r["provenance"]["content_sha256_labelled"]
                if h in seen or legacy in seen:
                    skipped.append((r["provenance"]["line"], seen.get(h, seen.get(legacy, 0))))
                else:
                    seen[h] = -r["provenance"]["line"]  # a duplicate line within this file
                    new.append(r)
            ids = store.import_runs(new) if new else []
    except StoreError as exc:
        print(f"moe-tui import: {exc}; nothing imported", file=sys.stderr)
        return 1
    for line, rid in skipped:
        where = f"run {rid}" if rid > 0 else f"line {-rid} of this file"
        print(f"{args.file}:{line}: already imported ({where}, same content); not stored again")
    for r in new:
        if r["provenance"]["output_tokens_check"] != "ok":
            print(f"{args.file}:{r['provenance']['line']}: {r['provenance']['output_tokens_check']} "
                  f"(flagged {J.FLAG_OUTPUT_TOKENS_MISMATCH})")
        if r["provenance"]["unknown_fields"]:
            print(f"{args.file}:{r['provenance']['line']}: spec fields unknown: "
                  f"{', '.join(r['provenance']['unknown_fields'])} (cells over them say 'spec unverified'; "
                  "confirm with --assume FIELD=VALUE,...)")
    if not ids:
        print(f"nothing new imported from {args.file}: all {len(runs)} record(s) already in the store")
        return 0
    profiles = sorted({r["profile_name"] for r in new})
    print(f"imported {len(ids)} run(s) from {args.file} as profile {', '.join(profiles)}: ids {ids[0]}..{ids[-1]}"
          + (f"; skipped {len(skipped)} already imported" if skipped else ""))
    return 0


def _not_a_file(file: str) -> str | None:
    """Why `file` cannot be imported before anything reads it (a named pipe would hang every read,
    /dev/zero fill memory), or None: it must be a regular file (`trust.open_regular`)."""
    import os

    from moe_tui.trust import open_regular

    try:
        os.close(open_regular(file))
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def _is_archive(file: str) -> bool:
    """A `moe-tui store archive` file (its first line is the archive header)."""
    from moe_tui.store.archive import ARCHIVE_KIND

    try:
        with open(file, encoding="utf-8") as fh:
            first = json.loads(fh.readline(1 << 20) or "null")  # a header is a short line
    except (OSError, ValueError, RecursionError):
        return False  # the record reader names what is wrong with it
    return isinstance(first, dict) and first.get("kind") == ARCHIVE_KIND


def _restore(file: str) -> int:
    """Every run of an archive back, with its requests, GPU samples and server start: all or none."""
    from moe_tui.store.archive import ArchiveError, archive_lines
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    try:  # one line at a time, each bounded (store.archive): never the whole file in memory
        with open(file, encoding="utf-8") as fh, Store.open_default() as store:
            restored, skipped = store.restore_archive(archive_lines(fh, file), file)
    except (ArchiveError, StoreError, OSError) as exc:
        print(f"moe-tui import: {exc}; nothing imported", file=sys.stderr)
        return 1
    print(f"restored {len(restored)} run(s) from archive {file}"
          + (f"; {len(skipped)} already in the store, not stored again" if skipped else ""))
    return 0
