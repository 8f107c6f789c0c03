"""The Textual control room: the App, its screens and widgets, and nothing else.

Nothing here computes benchmark figures, writes SQL or manages processes: the App talks to the
core through one typed control client (`moe_tui.control.ControlClient`, in-process or attached to
a detached runner) and renders the events and view rows it produces. Screens, widgets and the
command palette see the App only as `ui.room.Room`, never by importing `ui.app`.

May import: `moe_tui.control`, the event and judgement vocabulary (`moe_tui.events`,
`moe_tui.judgement`), Textual and Rich. Nothing else of moe_tui (import contracts in
pyproject.toml). The only module outside this package that imports it is `commands.tui`.
"""
