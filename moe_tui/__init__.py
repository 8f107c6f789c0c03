"""moe-tui: a terminal control room for comparing SGLang MoE runner backends.

The package splits into a core that never imports Textual (spec, profiles, metrics, compare,
store, servers, bench, telemetry, queue, controller), the SGLang emulator (`sim`), the headless
CLI (`cli`, `commands/`) and the Textual UI (`ui/`).
"""

__version__ = "0.1.0"
