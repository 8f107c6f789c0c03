"""Import SGLang 0.5.23's real `sglang.srt.server_args` on a machine without torch or a GPU.

The argument parser (`ServerArgs.add_cli_args`) is plain argparse, but its module imports the
server's platform, kernel and distributed layers, which import torch, triton and starlette at
module level. `install()` puts an import hook in front of those three packages that hands out
inert stand-ins: any attribute is another stand-in, calling one returns one, and each reads as
false, zero or empty (so `torch.cuda.is_available()` is false and no platform is detected);
attributes naming accelerator back-ends SGLang probes with `hasattr` (npu, musa, mlu, hpu) are
absent. `sglang/__init__.py` (the frontend language, FlashInfer) is registered without running.
Nothing of SGLang itself is replaced: every sglang module that runs is the installed file.

Use only to read the parser; a ServerArgs built this way has not resolved anything. Standard
library only, and loadable by file path: `moe-tui profiles check` runs it inside a profile's own
interpreter (which may not have moe-tui installed) when that SGLang cannot import torch;
tools/sglang_parser/check.py runs it in the light client env.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STUBBED_ROOTS = ("torch", "triton", "starlette")
ABSENT_ATTRIBUTES = frozenset({"npu", "musa", "mlu", "hpu"})
STUB_VERSION = "2.9.1"  # what `torch.__version__` reads as (sglang parses it at import)


class _Inert(types.ModuleType):
    """A module, class base, callable and value at once; false, zero and empty."""

    def __getattr__(self, name: str) -> _Inert:
        if name.startswith("__") or name in ABSENT_ATTRIBUTES:
            raise AttributeError(name)
        child = _Inert(f"{self.__name__}.{name}")
        setattr(self, name, child)
        return child

    def __call__(self, *args: object, **kwargs: object) -> _Inert:
        return _Inert(self.__name__ + "()")

    def __mro_entries__(self, bases: tuple[type, ...]) -> tuple[type, ...]:
        return ()  # `class X(torch.nn.Module, ABC)` becomes `class X(ABC)`

    def __bool__(self) -> bool:
        return False

    def __contains__(self, item: object) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __getitem__(self, key: object) -> Any:
        return self

    def __or__(self, other: object) -> Any:
        return self

    __ror__ = __or__

    def __lt__(self, other: object) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in STUBBED_ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Inert(spec.name)
        module.__path__ = []
        module.__version__ = STUB_VERSION  # type: ignore[attr-defined]  # a module attribute torch has, ours not
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Stub torch/triton/starlette and register `sglang` without running its __init__."""
    if not any(isinstance(f, _InertFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _InertFinder())
    if "sglang" not in sys.modules:
        spec = importlib.util.find_spec("sglang")
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"sglang is not installed in {sys.prefix}")
        sys.modules["sglang"] = importlib.util.module_from_spec(spec)  # body deliberately not run


def sglang_parser() -> tuple[Any, str]:
    """(SGLang's own launch_server argument parser, the installed sglang version)."""
    import argparse
    from importlib.metadata import version

    install()
    from sglang.srt.server_args import ServerArgs  # type: ignore[import-not-found]  # the profile interpreter's sglang

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, version("sglang")
