"""`moe-tui roofline PROFILE`: print the decode ceiling of a profile's model on its GPUs.

One row per concurrency: expected distinct experts per MoE layer, bytes and FLOPs per decode step,
memory and compute time, which binds, and the ceiling in output tok/s (all streams, per stream).
The model comes from `config.json` under the profile's model path (the emulator's bundled one for
sim profiles), the GPU from `--gpu` / the profile's `[roofline]` table. Exit 0, or 2 with the
input named when the profile, the model config or the GPU cannot be resolved.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from moe_tui.commands.common import EXIT_NOT_FOUND, add_json_alias, add_profiles_dir

if TYPE_CHECKING:
    from moe_tui.roofline.decode import Roofline
    from moe_tui.roofline.inputs import RooflineSetup


def _concurrencies(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--concurrency: expected integers like 1,2,10, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"--concurrency: every value must be >= 1, got {text!r}")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("profile", metavar="PROFILE", help="profile name")
    add_profiles_dir(p)
    p.add_argument("--gpu", metavar="NAME", default=None, help="GPU table key or NVML name (e.g. h200)")
    p.add_argument("--gpus", metavar="N", type=_positive, default=None,
                   help="GPU count (default: the profile's gpus, else tp_size)")
    p.add_argument("--concurrency", type=_concurrencies, default=[1, 2, 10, 64, 256, 1024],
                   help="comma-separated concurrencies (default 1,2,10,64,256,1024)")
    p.add_argument("--input-len", type=_positive, default=1024, help="prompt tokens per request (default 1024)")
    p.add_argument("--output-len", type=_positive, default=1024, help="output tokens per request (default 1024)")
    p.add_argument("--kv-cache-dtype", default=None, help="override the KV cache dtype (auto, fp8_e4m3, ...)")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    add_json_alias(p)
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui.commands.server import find_profile
    from moe_tui.profiles import ProfileError
    from moe_tui.roofline.decode import RooflineError
    from moe_tui.roofline.inputs import RooflineInputError, mean_decode_context, roofline_setup

    try:
        profile = find_profile(args.profile, args.profiles_dir)
        context = mean_decode_context(args.input_len, args.output_len)
        setup = roofline_setup(profile.snapshot(), context=context, gpu=args.gpu, gpu_count=args.gpus,
                               kv_cache_dtype=args.kv_cache_dtype)
        rows = [setup.at(c) for c in args.concurrency]
    except KeyError as exc:
        print(f"moe-tui roofline: {exc.args[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (ProfileError, RooflineInputError, RooflineError) as exc:
        print(f"moe-tui roofline: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        out = {"profile": profile.name, "setup": setup.describe(), "config": setup.config_path,
               "gpu_source": setup.gpu.source, "total_params": setup.shape.total_params(),
               "active_params": setup.shape.active_params(), "precision": dict(setup.shape.precision),
               "rows": [r.to_dict() for r in rows]}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0
    sys.stdout.write(render_text(profile.name, setup, rows, args.input_len, args.output_len))
    return 0


def render_text(name: str, setup: RooflineSetup, rows: list[Roofline], input_len: int, output_len: int) -> str:
    shape = setup.shape
    weights = ", ".join(f"{g.replace('_', ' ')} {f}" for g, f in shape.precision.items())
    lines = [
        f"roofline of {name}: {shape.name} on {setup.gpu_count} x {setup.gpu.label} ({setup.gpu_source})",
        f"  model {shape.total_params() / 1e9:,.1f}B parameters, {shape.active_params() / 1e9:,.1f}B active "
        f"per token; {shape.n_experts} routed experts, {shape.experts_per_token} per token, "
        f"{shape.moe_layers} MoE of {shape.layers} layers",
        f"  weights: {weights}",
        f"  GPU: {setup.gpu.hbm_gbps:,.0f} GB/s, dense FP4/FP8/BF16 "
        f"{setup.gpu.fp4_tflops or 0:,.0f}/{setup.gpu.fp8_tflops:,.0f}/{setup.gpu.bf16_tflops:,.0f} TFLOPS "
        f"[{setup.gpu.source}]",
        f"  KV cache {setup.kv_cache_dtype}, {shape.attention_kind.upper()} attention at TP {setup.attention_tp}; "
        f"context {setup.context} tokens per stream (input {input_len} + output {output_len} / 2)",
        f"  config: {setup.config_path}",
        "",
        f"{'conc':>6} {'experts/layer':>13} {'GB/step':>9} {'TFLOP/step':>10} {'mem ms':>8} "
        f"{'compute ms':>10} {'bound':>7} {'ceiling tok/s':>13} {'per stream':>10}",
    ]
    for r in rows:
        lines.append(f"{r.batch:>6} {r.distinct_experts:>13.1f} {r.total_bytes / 1e9:>9.2f} {r.flops / 1e12:>10.3f} "
                     f"{r.t_mem_s * 1e3:>8.3f} {r.t_compute_s * 1e3:>10.3f} {r.bound:>7} "
                     f"{r.ceiling_tok_s:>13,.1f} {r.per_stream_tok_s:>10,.1f}")
    notes = sorted({n for r in rows for n in r.notes})
    lines += ["", "An upper bound: perfect overlap and balance over GPUs, no communication or launch gaps;",
              "experts picked independently and uniformly per token (docs/roofline.md)."]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines) + "\n"
