"""A bf16 matmul loop on chosen GPUs only, so a multi-GPU dashboard shows rows in different states.

    python tools/gpu_load.py --gpus 0,2,4 --seconds 60 [--hold-gib 8 --hold-gpus 1]

Each loaded GPU gets its own process (8192^3 bf16 products until the time is up); `--hold-gpus`
get a process that only holds memory (busy memory, idle SMs). Needs torch and a GPU; never changes
a GPU setting.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

LOOP = """
import sys, time, torch
gpu, seconds = int(sys.argv[1]), float(sys.argv[2])
torch.cuda.set_device(gpu)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
"""

HOLD = """
import sys, time, torch
gpu, gib, seconds = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
x = torch.ones(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{gpu}")
time.sleep(seconds)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--hold-gpus", default="")
    ap.add_argument("--hold-gib", type=float, default=8.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    procs = [subprocess.Popen([sys.executable, "-c", LOOP, g, str(args.seconds)])
             for g in args.gpus.split(",") if g]
    procs += [subprocess.Popen([sys.executable, "-c", HOLD, g, str(args.hold_gib), str(args.seconds)])
              for g in args.hold_gpus.split(",") if g]
    return max((p.wait() for p in procs), default=0)


if __name__ == "__main__":
    raise SystemExit(main())
