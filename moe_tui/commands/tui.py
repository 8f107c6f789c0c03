"""`moe-tui` / `moe-tui tui`: open the control room on your profiles.

Profiles come from --profiles-dir, else `profiles_dir` in the config file, else
./server_profiles/. If a detached runner (`moe-tui run --detach`) holds this data dir the TUI
attaches to it; otherwise it hosts the controller itself (--attach / --in-process force one).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--profiles-dir", default=None,
                   help="folder of profile TOML files (default: config 'profiles_dir' or ./server_profiles)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--attach", dest="attach", action="store_const", const=True, default=None,
                      help="attach to the detached runner of this data dir")
    mode.add_argument("--in-process", dest="attach", action="store_const", const=False,
                      help="host the controller in the TUI even if a runner is up (refused: one per data dir)")
    p.add_argument("--no-gpu-sampling", action="store_true", help="do not sample NVML in the TUI")
    p.set_defaults(run=run)
    return p


def profiles_dir_from(args: argparse.Namespace) -> Any:
    import tomllib
    from pathlib import Path

    from moe_tui import paths

    if args.profiles_dir:
        return Path(args.profiles_dir).expanduser().resolve()
    config = paths.config_file()
    if config.exists():
        try:
            value = tomllib.loads(config.read_text()).get("profiles_dir")
        except (OSError, tomllib.TOMLDecodeError):
            value = None  # the App reports a broken config file when it reads [keys]
        if isinstance(value, str) and value:
            return Path(value).expanduser().resolve()
    return Path("server_profiles").resolve()


def run(args: argparse.Namespace) -> int:
    return launch(profiles_dir_from(args), attach=args.attach, demo=False,
                  sample_gpus=not args.no_gpu_sampling)


def launch(profiles_dir: Any, *, attach: bool | None, demo: bool, sample_gpus: bool = True) -> int:
    from moe_tui.servers import install_exit_handlers
    from moe_tui.ui.launch import open_control_room

    # Servers this process starts are stopped if it dies (SIGTERM, a dropped SSH session): with
    # the controller in-process nothing else would ever stop them.
    install_exit_handlers()
    room = open_control_room(profiles_dir, attach=attach, demo=demo, sample_gpus=sample_gpus)
    room.app.run()
    return int(room.app.return_code or 0)
