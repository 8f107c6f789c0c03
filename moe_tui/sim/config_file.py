"""`--config FILE.yaml`, as SGLang 0.5.23's launcher reads it (server_args_config_parser.py,
`ConfigArgumentMerger`, used by server_args.prepare_server_args):

- at most one `--config` (else "Multiple config files specified! Only one allowed."), followed by a
  path ("No config file specified after --config flag!");
- the file must end in .yaml or .yml ("Config file must be YAML format, got: <suffix>") and exist
  ("Config file not found: <path>"); `yaml.safe_load`; empty is {}, a non-mapping is refused
  ("Config file must contain a dictionary at root level");
- keys are flag names with dashes or underscores; an unknown key is logged and ignored ("Unknown config
  option '<key>' will be ignored. Check if the option name is correct."); a store_true flag takes
  only true/false; a value outside a flag's choices is refused; values go through the flag's type;
- the file's values become the parser's defaults, so what the command line says wins.
SGLang raises ValueError out of the launcher for each refusal (a traceback, exit 1): so does this.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from moe_tui.records import SglangJson

logger = logging.getLogger("sglang.srt.server_args_config_parser")


def config_path(argv: list[str]) -> str | None:
    at = [i for i, arg in enumerate(argv) if arg == "--config"]
    if len(at) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if not at:
        return None
    if at[0] == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    return argv[at[0] + 1]


def without_config(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--config":
            skip = True
        else:
            out.append(arg)
    return out


def _read(path: str) -> SglangJson:
    import yaml

    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {p.suffix}")
    if not p.exists():
        raise ValueError(f"Config file not found: {path}")
    with open(p) as fh:
        data = yaml.safe_load(fh)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    return data


def config_defaults(parser: argparse.ArgumentParser, argv: list[str]) -> SglangJson:
    """The parser defaults the `--config` file in `argv` sets ({} without one)."""
    path = config_path(argv)
    if path is None:
        return {}
    actions = {a.dest: a for a in parser._actions}
    store_true = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
    out: SglangJson = {}
    for key, value in _read(path).items():
        dest = str(key).replace("-", "_")
        action = actions.get(dest)
        if action is None or not action.option_strings:
            logger.warning(f"Unknown config option '{key}' will be ignored. Check if the option name is correct.")
            continue
        if action.choices and value not in action.choices:
            raise ValueError(f"Invalid value for '{key}': {value}. Allowed choices: {action.choices}")
        if dest in store_true:
            if not isinstance(value, bool):
                raise ValueError(f"Invalid value for '{key}': {value}. Expected boolean (true/false), "
                                 f"got {type(value).__name__}")
        elif callable(action.type) and value is not None and not (
                action.type in (int, float, str) and isinstance(value, action.type)):
            try:
                value = [action.type(v) for v in value] if action.nargs is not None and isinstance(value, list) \
                    else action.type(value)
            except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
                raise ValueError(f"Invalid value for '{key}': {value}. Type conversion failed: {exc}") from exc
        out[dest] = value
    return out
