"""`python -m moe_tui.sim ARGS...`: run the SGLang emulator in the foreground."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None, prog: str = "python -m moe_tui.sim") -> int:
    from moe_tui.sim.args import parse_args

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv, prog)  # exits 2 on bad flags, like sglang's own parser
    from moe_tui.sim.server import run_server

    return run_server(args, argv)


if __name__ == "__main__":
    sys.exit(main())
