"""One rank of a multi-node server, as `srun` runs it on each node (servers/multinode.py).

    python -m moe_tui.servers.rank --dist-init-addr HOST:PORT --head NODE [--rank-log-dir DIR] -- ARGV...
    python -m moe_tui.servers.rank --sweep SERVER_ID

The first form appends this rank's `--node-rank r --dist-init-addr HOST:PORT` (r: the step's task id,
one task per node) to ARGV and execs it; rank 0 must be the head node (where the benchmark runs and
readiness is asked), else it refuses. A non-zero rank's output goes to DIR/rank-r.log. The second form
kills, on this node, every process carrying `MOE_TUI_SERVER_ID=SERVER_ID` and prints
`NODE: N left` (N found and killed). Standard library only: it runs before anything else is imported.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

SERVER_ID_ENV = "MOE_TUI_SERVER_ID"  # servers/base.py's marker (not imported: this stays light)


def _marked(server_id: str) -> list[int]:
    me = {os.getpid(), os.getppid()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in me:
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{SERVER_ID_ENV}={server_id}".encode() in env:
            found.append(int(entry.name))
    return found


def sweep(server_id: str) -> int:
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    found = _marked(server_id)
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    print(f"{node}: {len(found)} left" + (f" (killed pids {', '.join(map(str, found))})" if found else ""), flush=True)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m moe_tui.servers.rank")
    parser.add_argument("--sweep", default=None)
    parser.add_argument("--dist-init-addr", default="")
    parser.add_argument("--head", default="")
    parser.add_argument("--rank-log-dir", default="")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.sweep:
        return sweep(args.sweep)
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command or not args.dist_init_addr:
        parser.error("needs --dist-init-addr and the server's argv after --")
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    node = os.environ.get("SLURMD_NODENAME", "")
    if rank == 0 and args.head and node != args.head:
        print(f"moe-tui: rank 0 landed on {node or 'an unknown node'}, not the head {args.head}", file=sys.stderr)
        return 2
    if rank > 0 and args.rank_log_dir:
        Path(args.rank_log_dir).mkdir(parents=True, exist_ok=True)
        fd = os.open(Path(args.rank_log_dir) / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if rank > 0:
        command = _without_head_only_config(command)
    os.execvp(command[0], [*command, "--node-rank", str(rank), "--dist-init-addr", args.dist_init_addr])


def _without_head_only_config(command: list[str]) -> list[str]:
    """The start's key file (`--config`, servers/server_key.py) lives in the head's private folder, on
    the head's own disk: on another node it is not there, and SGLang would fail reading it. A non-zero
    rank serves no API (only SGLang's dummy health server), so it needs no key: the flag is dropped
    there when its file is missing, and the rank log says so."""
    if "--config" not in command[:-1]:
        return command
    i = command.index("--config")
    if Path(command[i + 1]).is_file():
        return command
    print(f"moe-tui: --config {command[i + 1]} is the head node's (the start's api key); not on this node, "
          "and this rank serves no API: left out", file=sys.stderr)
    return command[:i] + command[i + 2:]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
