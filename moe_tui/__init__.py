"""moe-tui: a terminal control room for comparing SGLang MoE runner backends.

Layers, each importing only those below it (enforced by the import contracts in pyproject.toml,
described in docs/architecture.md):

- core, pure data, no I/O: spec, profiles, metrics, compare, judgement, events;
- services, no Textual: store, queue, servers, bench/, telemetry, provenance, export, results, sim/;
- controller and runner: work the queue and serve it over a Unix socket;
- control/: the client side (one typed `ControlClient`, in-process or attached) the TUI, the CLI
  and tests use;
- ui/: the Textual app (screens and widgets only); cli.py and commands/: the headless CLI.
"""

__version__ = "0.1.0"
