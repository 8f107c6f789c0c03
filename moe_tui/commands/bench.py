"""`moe-tui bench`: one benchmark run with sglang.bench_serving-compatible flags.

Flags are named like bench_serving's (`--base-url`, `--backend sglang|sglang-oai`,
`--dataset-name random-ids`, `--random-input-len`, ...). `--spec-file` (TOML or JSON BenchmarkSpec)
supplies a whole spec; flags given next to it override its fields. Defaults are BenchmarkSpec's,
not bench_serving's (notably range ratio 1.0 and max concurrency 1): the spec in force is printed.

Without `--events`: prints bench_serving's "Serving Benchmark Result" block, then moe-tui's status
and self-check lines; with `--output-file`, appends one bench_serving-compatible JSONL record.
With `--events jsonl`: stdout carries only JSON lines (BenchProgress about every 250 ms, then one
BenchResult with per-request records): the machine interface `moe_tui.bench.process` reads.
SIGTERM or SIGINT stops sending and ends the run as "incomplete" with what it measured.

Exit status: 0 complete, 1 incomplete or failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING

from moe_tui.records import SpecOverrides

if TYPE_CHECKING:
    from moe_tui.bench.engine import BenchResult
    from moe_tui.events import BenchProgress
    from moe_tui.spec import BenchmarkSpec

BACKENDS = {"sglang": "generate", "sglang-oai": "completions"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--base-url", required=True, help="server URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--backend", choices=sorted(BACKENDS), default=None,
                   help="sglang: POST /generate (default); sglang-oai: POST /v1/completions")
    p.add_argument("--dataset-name", default=None, choices=["random-ids"])
    p.add_argument("--random-input-len", type=int, default=None)
    p.add_argument("--random-output-len", type=int, default=None)
    p.add_argument("--random-range-ratio", type=float, default=None,
                   help="lengths uniform on [L*ratio, L] (spec default 1.0: fixed lengths)")
    p.add_argument("--num-prompts", type=int, default=None)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--request-rate", type=float, default=None, help="requests/s (Poisson) or inf")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--warmup-requests", type=int, default=None)
    p.add_argument("--disable-ignore-eos", action="store_true", default=None)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--flush-cache", action="store_true", default=None)
    p.add_argument("--spec-file", default=None, help="a BenchmarkSpec as TOML or JSON")
    p.add_argument("--output-file", default=None, help="append one JSONL record here")
    p.add_argument("--request-timeout", type=float, default=None,
                   help="seconds one request may take before it fails as 'timeout' "
                        "(default max(600, 0.05 s per prompt+output token))")
    p.add_argument("--stall-timeout", type=float, default=None,
                   help="seconds a response may stay silent (no bytes) before the request fails as "
                        "'timeout' (default 120: a real server may pause that long for JIT compilation "
                        "or a long prefill queue)")
    p.add_argument("--warmup-pause", type=float, default=None, metavar="SECONDS",
                   help="pause after the warmup and cache flush, before the timed phase (default 1.0, "
                        "as bench_serving; the runner gives an emulator 1/time_scale)")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer dir or tokenizer.json giving the vocabulary size "
                        "(default: the server's /model_info tokenizer_path)")
    p.add_argument("--vocab-size", type=int, default=None, help="vocabulary size for random-ids prompts")
    p.add_argument("--events", choices=["jsonl"], default=None,
                   help="machine-readable event stream on stdout instead of the summary")
    p.add_argument("--run-id", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(run=run)
    return p


_FLAG_TO_FIELD = {
    "dataset_name": "dataset", "random_input_len": "input_len", "random_output_len": "output_len",
    "random_range_ratio": "range_ratio", "num_prompts": "num_prompts", "max_concurrency": "max_concurrency",
    "request_rate": "request_rate", "seed": "seed", "warmup_requests": "warmup_requests",
    "temperature": "temperature", "flush_cache": "flush_cache",
}


def spec_from_args(args: argparse.Namespace) -> BenchmarkSpec:
    """The BenchmarkSpec the flags (and --spec-file) describe; SpecError on bad values."""
    from pathlib import Path

    from moe_tui import __version__
    from moe_tui.spec import BenchmarkSpec, SpecError

    data: SpecOverrides = {}
    if args.spec_file:
        path = Path(args.spec_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError("(file)", f"cannot read: {exc}", str(path)) from None
        base = (BenchmarkSpec.from_toml(text, str(path)) if path.suffix == ".toml"
                else BenchmarkSpec.from_json(text, str(path)))
        data = base.to_dict()
    for flag, fieldname in _FLAG_TO_FIELD.items():
        value = getattr(args, flag)
        if value is not None:
            data[fieldname] = value
    if args.backend is not None:
        data["api"] = BACKENDS[args.backend]
    if args.disable_ignore_eos:
        data["ignore_eos"] = False
    # The prompts' vocabulary is part of the spec (other ids, other prompts): in the fingerprint.
    if getattr(args, "vocab_size", None) is not None:
        data["vocab_size"] = args.vocab_size
    if getattr(args, "tokenizer", None) is not None:
        data["tokenizer"] = args.tokenizer
    # This command *is* the moe-tui client; a spec written for another client or version is refused.
    where = args.spec_file or "flags"
    if data.get("client", "moe-tui") != "moe-tui":
        raise SpecError("client", f"this command runs the moe-tui client, the spec says {data['client']!r}", where)
    if data.get("client_version") not in (None, "", __version__):
        raise SpecError("client_version", f"the spec is for moe-tui {data['client_version']}, this is {__version__}",
                        where)
    data["client"] = "moe-tui"
    data["client_version"] = __version__
    return BenchmarkSpec.from_dict(data, where)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from moe_tui.spec import SpecError

    try:
        spec = spec_from_args(args)
    except SpecError as exc:
        print(f"moe-tui bench: {exc}", file=sys.stderr)
        return 2
    for flag, value in (("--request-timeout", args.request_timeout), ("--stall-timeout", args.stall_timeout)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            print(f"moe-tui bench: {flag} must be > 0 seconds, got {value}", file=sys.stderr)
            return 2
    if args.warmup_pause is not None and not (0 <= args.warmup_pause <= 60):
        print(f"moe-tui bench: --warmup-pause must be 0 to 60 seconds, got {args.warmup_pause}", file=sys.stderr)
        return 2

    from moe_tui.bench.engine import run_benchmark
    from moe_tui.bench.report import jsonl_line, summary_block

    events = args.events == "jsonl"
    out = sys.stdout

    def on_progress(event: BenchProgress) -> None:
        out.write(event.to_json() + "\n")
        out.flush()

    async def main() -> BenchResult:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await run_benchmark(
            spec, args.base_url, on_progress=on_progress if events else None,
            request_timeout=args.request_timeout, stall_timeout=args.stall_timeout, vocab_size=args.vocab_size, tokenizer=args.tokenizer,
            run_id=args.run_id, stop=stop,
            **({} if args.warmup_pause is None else {"warmup_pause_s": args.warmup_pause}))

    if not events:
        print(f"moe-tui bench: {spec.describe()} (spec {spec.short_fingerprint}) -> {args.base_url}",
              file=sys.stderr)
    result = asyncio.run(main())
    if events:
        out.write(json.dumps(result.event_line(), default=str) + "\n")
        out.flush()
    else:
        print(summary_block(spec, result))
        if args.output_file:
            if result.summary:
                try:
                    with open(args.output_file, "a", encoding="utf-8") as f:
                        f.write(jsonl_line(spec, result) + "\n")
                except OSError as exc:
                    print(f"moe-tui bench: cannot append to {args.output_file}: {exc}", file=sys.stderr)
                    return 1
            else:
                print(f"moe-tui bench: nothing measured, no record appended to {args.output_file}",
                      file=sys.stderr)
    return 0 if result.status == "complete" else 1
