"""How many streamed tokens (and SSE chunks) per second one emulator process can serve.

The emulator must never be the bottleneck of a benchmark. This starts `python -m moe_tui.sim
--sim-zero-delay` (no modelled delay: steps run as fast as the process can) and drives it from a
separate client process (`python -m moe_tui.sim.loadgen`) at several concurrencies and stream
intervals. It reports output tokens/s as the client counted them (`completion_tokens`) and SSE
chunks/s. Results go to benches/results/sim_throughput-YYYY-MM-DD.md.

    .venv/bin/python benches/sim_throughput.py
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moe_tui.sim.launch import start_sim  # noqa: E402

CASES = [  # (stream_interval, concurrency, num_prompts, input_len, output_len)
    (1, 1, 8, 128, 2048),
    (1, 64, 256, 128, 1024),
    (1, 256, 512, 128, 1024),
    (16, 256, 512, 128, 1024),
    (64, 1024, 2048, 128, 1024),
]


def main() -> int:
    rows = []
    for interval, conc, n, il, ol in CASES:
        with start_sim(["--sim-zero-delay", "--stream-interval", str(interval)]) as sim:
            out = subprocess.run(
                [sys.executable, "-m", "moe_tui.sim.loadgen", "--url", sim.base_url,
                 "--concurrency", str(conc), "--num-prompts", str(n), "--input-len", str(il),
                 "--output-len", str(ol), "--json"],
                capture_output=True, text=True, cwd=ROOT, timeout=600)
        res = json.loads(out.stdout)
        rows.append((interval, conc, n, il, ol, res))
        print(f"interval {interval:>3} conc {conc:>5}: {res['output_throughput']:>12,.0f} tok/s "
              f"{res['chunk_rate']:>9,.0f} chunks/s  failed {res['failed']}", flush=True)
    today = datetime.date.today().isoformat()
    lines = [
        f"# Emulator streaming throughput ({today})",
        "",
        "One `python -m moe_tui.sim --sim-zero-delay` process, driven by one separate",
        "`python -m moe_tui.sim.loadgen` client process over loopback (keep-alive connections",
        "opened before the timed window). Tokens counted by the client from `completion_tokens`.",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "| stream interval | concurrency | prompts | in/out | output tok/s | SSE chunks/s | failed |",
        "|---:|---:|---:|---|---:|---:|---:|",
    ]
    for interval, conc, n, il, ol, r in rows:
        lines.append(f"| {interval} | {conc} | {n} | {il}/{ol} | {r['output_throughput']:,.0f} | "
                     f"{r['chunk_rate']:,.0f} | {r['failed']} |")
    lines += ["", "Client and server share the machine's cores; the client parses every chunk's",
              "`completion_tokens`, so chunks/s is bounded by whichever process saturates first."]
    path = ROOT / "benches" / "results" / f"sim_throughput-{today}.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
