"""Run SGLang's own benchmark client (`sglang.benchmark.serving`, unmodified) without torch.

Usage (any argv that `python -m sglang.bench_serving` accepts):

    .venv-sglang-client/bin/python tools/sglang_client/run_bench_serving.py \
        --backend sglang --base-url http://127.0.0.1:30000 --dataset-name random-ids ...

Why a launcher instead of `python -m sglang.bench_serving`: the benchmark module's own code needs
only light packages (aiohttp, numpy, transformers' tokenizers, ...), but importing it through the
normal package machinery first executes `sglang/__init__.py` and `sglang/srt/utils/__init__.py`,
which pull in torch, FlashInfer and most of the server. This launcher registers those packages
as *unexecuted* module objects whose `__path__` points at the installed directories, so their
submodules import from the real files while the heavy `__init__` bodies never run. It then runs
`sglang.benchmark.serving` as `__main__` with runpy, exactly as `python -m` would.

One stand-in, and only one: `serving.py` does
`from sglang.srt.disaggregation.utils import FAKE_BOOTSTRAP_HOST` at module level. That module
imports torch, torch.distributed and the scheduler's memory pools, all to supply a string constant
that the client only sends with `--fake-prefill` (PD-disaggregation decode tests). The stand-in
module holds just that constant, and its value is read from the installed
`sglang/srt/disaggregation/utils.py` source with `ast` (no copy, no guess), so a future change of
the constant is followed. Everything else (serving.py, the datasets package, metrics, request
functions) is the installed sglang code, byte for byte.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import runpy
import sys
import types
from pathlib import Path

BENCH_MODULE = "sglang.benchmark.serving"

# Packages whose __init__ imports torch (or the whole server) but whose submodules the client needs.
UNEXECUTED_PACKAGES = ("sglang", "sglang.srt.utils")

# The one module replaced by a stand-in (see the module docstring for why).
STAND_IN_MODULE = "sglang.srt.disaggregation.utils"
STAND_IN_CONSTANTS = ("FAKE_BOOTSTRAP_HOST",)


class LauncherError(RuntimeError):
    """The installed sglang does not have the layout this launcher relies on."""


def _register_unexecuted_package(name: str) -> None:
    """Put a package module in sys.modules without running its __init__.py."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise LauncherError(f"{name}: not an importable package in {sys.prefix}")
    module = importlib.util.module_from_spec(spec)
    # Deliberately no spec.loader.exec_module(module): the heavy body must not run.
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _read_module_constants(source_path: Path, names: tuple[str, ...]) -> dict[str, object]:
    """Literal values of top-level `NAME = <literal>` assignments in a Python source file."""
    tree = ast.parse(source_path.read_text(encoding="utf-8"), filename=str(source_path))
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    found[target.id] = ast.literal_eval(node.value)
    missing = [n for n in names if n not in found]
    if missing:
        raise LauncherError(f"{source_path}: no literal top-level assignment of {', '.join(missing)}")
    return found


def _register_stand_in() -> None:
    parent_name, _, child = STAND_IN_MODULE.rpartition(".")
    parent_module = importlib.import_module(parent_name)  # a namespace package: nothing runs
    source = None
    for directory in parent_module.__path__:
        candidate = Path(directory) / f"{child}.py"
        if candidate.is_file():
            source = candidate
            break
    if source is None:
        raise LauncherError(f"{STAND_IN_MODULE}: source file not found under {list(parent_module.__path__)}")
    stand_in = types.ModuleType(STAND_IN_MODULE, f"Stand-in for {STAND_IN_MODULE} (constants only).")
    stand_in.__file__ = str(source)
    for key, value in _read_module_constants(source, STAND_IN_CONSTANTS).items():
        setattr(stand_in, key, value)
    sys.modules[STAND_IN_MODULE] = stand_in
    setattr(parent_module, child, stand_in)


def prepare_imports() -> None:
    """Make `import sglang.benchmark.serving` work without torch."""
    for name in UNEXECUTED_PACKAGES:
        parent = name.rpartition(".")[0]
        if parent and parent not in sys.modules:
            # e.g. sglang.srt: a namespace package (no __init__.py), so importing it runs nothing.
            importlib.import_module(parent)
        _register_unexecuted_package(name)
    _register_stand_in()


def main(argv: list[str]) -> int:
    # Offline: the tokenizer is a local path; never let transformers or the hub reach the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    prepare_imports()
    spec = importlib.util.find_spec(BENCH_MODULE)
    sys.argv = [spec.origin if spec and spec.origin else BENCH_MODULE, *argv]
    runpy.run_module(BENCH_MODULE, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
