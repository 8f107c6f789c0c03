"""Subcommands of `moe-tui`, one module each: `add_parser(sub, name, help)` and `run(args)`.

Command modules import only the standard library at module level; heavy imports go inside `run`.
They may import anything below them (core, services, controller, runner, control); only
`commands.tui` imports the UI (lazily), and nothing here imports Textual directly.
"""
