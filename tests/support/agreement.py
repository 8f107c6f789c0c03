"""moe-tui's client beside sglang.bench_serving: SGLang's client started on a spec, both clients run at
once on twin emulators, and their figures compared within limits (tests/test_bench_agreement.py and
benches/client_headroom.py)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from moe_tui.bench.process import run_benchmark_subprocess
from moe_tui.bench.result import BenchResult
from moe_tui.bench.sglang_adapter import SglangClient, bench_serving_args, client_env, parse_bench_serving_jsonl
from moe_tui.sim.launch import start_sim
from moe_tui.spec import BenchmarkSpec


def start_bench_serving(client: SglangClient, spec: BenchmarkSpec, base_url: str, out: Path, *,
                        details: bool = False, **popen: Any) -> subprocess.Popen[str]:
    """sglang.bench_serving (unmodified) on `spec` against `base_url`, appending its record to `out`."""
    argv = client.argv_prefix + bench_serving_args(spec.replace(client="sglang.bench_serving"), base_url=base_url,
                                                   output_file=out, output_details=details)
    return subprocess.Popen(argv, env=client_env(client=client), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def both_clients(spec: BenchmarkSpec, sim_args: list[str], client: SglangClient, out: Path,
                 timeout: float = 60) -> tuple[BenchResult, dict[str, Any]]:
    """moe-tui's client and bench_serving on the same spec at the same time, each on its own
    emulator started with `sim_args` (seeded: the twins serve alike): (our result, their record)."""
    with start_sim(sim_args, timeout=timeout) as ours_sim, start_sim(sim_args, timeout=timeout) as their_sim:
        proc = start_bench_serving(client, spec, their_sim.base_url, out, details=True)
        try:
            ours = asyncio.run(run_benchmark_subprocess(spec, ours_sim.base_url))
            stdout, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, stdout[-6000:]
    return ours, parse_bench_serving_jsonl(out)[-1]


def assert_agree(ours: Mapping[str, float], theirs: Mapping[str, float], limits: Mapping[str, float]) -> None:
    """Each named figure of ours within its relative limit of theirs; the message lists them all."""
    report = [f"{name}: moe-tui {ours[name]:.3f} bench_serving {theirs[name]:.3f} "
              f"({(ours[name] - theirs[name]) / theirs[name]:+.2%}, limit {limit:.1%})" for name, limit in limits.items()]
    off = [name for name, limit in limits.items() if abs(ours[name] - theirs[name]) > limit * abs(theirs[name])]
    assert not off, "\n".join(report)
