"""Subcommands of `moe-tui`, one module each: `add_parser(sub, name, help)` and `run(args)`.

Command modules import only the standard library at module level; heavy imports go inside `run`.
"""
