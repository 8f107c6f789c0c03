"""The `moe-tui` command line: a thin dispatcher over `moe_tui.commands.*`.

Each subcommand lives in its own module with `add_parser(subparsers)` and `run(args) -> int`.
Modules are imported only for the subcommand being run (their heavy imports live inside `run`),
so `moe-tui --help` stays fast and never imports textual, pandas or httpx.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "tui": ("moe_tui.commands.tui", "open the control room on your profiles (the default)"),
    "demo": ("moe_tui.commands.demo", "open the control room on the bundled simulated profiles"),
    "profiles": ("moe_tui.commands.profiles", "check and show server profiles"),
    "server": ("moe_tui.commands.server", "start, stop and inspect profile servers headless"),
    "gpus": ("moe_tui.commands.gpus", "print one NVML sample of every GPU"),
    "bench": ("moe_tui.commands.bench", "run one benchmark (bench_serving-compatible flags)"),
    "import": ("moe_tui.commands.importer", "import a sglang.bench_serving JSONL file (or a moe-tui store archive) as runs"),
    "queue": ("moe_tui.commands.queue", "add, list and edit the persistent run queue"),
    "run": ("moe_tui.commands.run", "work the queue headless (or detached with --detach)"),
    "compare": ("moe_tui.commands.compare", "print the comparison grid of two profiles"),
    "investigate": ("moe_tui.commands.investigate", "propose and queue the runs that would settle one grid cell"),
    "explain": ("moe_tui.commands.explain", "profile one grid cell on both sides: where each decode step's time goes"),
    "export": ("moe_tui.commands.export", "export a comparison as Markdown and CSV with provenance"),
    "roofline": ("moe_tui.commands.roofline", "print the decode roofline of a profile's model on its GPUs"),
    "gate": ("moe_tui.commands.gate", "run the greedy correctness gate against a running server"),
    "sim": ("moe_tui.commands.sim", "run the SGLang emulator (simulated server)"),
    "store": ("moe_tui.commands.store", "store size per profile and campaign; archive, prune, vacuum"),
    "doctor": ("moe_tui.commands.doctor", "check the store; restore it from its backup when damaged"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moe-tui",
        description="A terminal control room for comparing SGLang MoE runner backends.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            sub.add_parser(name, help=help_text + " (not built yet)")
            continue
        module.add_parser(sub, name, help_text)
    _document_exit_codes(parser)
    return parser


def _document_exit_codes(parser: argparse.ArgumentParser) -> None:
    """Every command's --help ends with the exit codes (`commands.common`)."""
    from moe_tui.commands.common import add_exit_codes

    add_exit_codes(parser)
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _document_exit_codes(child)


# Commands whose output is not printed text: the TUI draws the screen itself (Textual escapes
# what it renders), the emulator's log is its own. Every other command's stdout and stderr go
# through `moe_tui.trust.terminal_text`.
RAW_OUTPUT_COMMANDS = frozenset({"tui", "sim"})


def _version() -> str:
    from moe_tui import __version__

    return f"moe-tui {__version__}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Only the chosen subcommand's module is imported; --help imports the light command modules.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        # `moe-tui queu list`: the default command takes no words, so this is a mistyped command
        import difflib

        close = difflib.get_close_matches(argv[0], list(COMMANDS), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        print(f"moe-tui: unknown command {argv[0]!r}{hint} (commands: {', '.join(COMMANDS)}; "
              "`moe-tui --help` says what each does)", file=sys.stderr)
        return 2
    if chosen not in COMMANDS:
        chosen = None
    if chosen is None and (not argv or argv[0] not in ("-h", "--help", "--version")):
        # `moe-tui` alone, or `moe-tui --in-process`: the options belong to the default command.
        argv = ["tui", *argv]
        chosen = "tui"
    parser = build_parser(only=chosen)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    runner = getattr(args, "run", None)
    if runner is None:
        parser.error(f"subcommand {args.command!r} is not available in this build")
    from moe_tui.paths import DataDirError

    if args.command not in RAW_OUTPUT_COMMANDS:
        from moe_tui.trust import install_terminal_safe_output

        install_terminal_safe_output()  # stored and imported text never reaches the terminal as escapes
    try:
        return int(runner(args) or 0)
    except DataDirError as exc:  # MOE_TUI_HOME a file, a read-only folder: say so, no traceback
        print(f"moe-tui {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `moe-tui ... | head` closed the pipe: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
