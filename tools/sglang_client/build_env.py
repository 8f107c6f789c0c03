"""Build `.venv-sglang-client/`: SGLang's own benchmark client, unmodified, without torch.

`make sglang-client` runs this (and `make test` runs it before pytest). It is idempotent: the
environment records the exact requirement set it was built from in a stamp file; when the stamp
matches, the script exits at once (well under 2 s). Any change to the pins below, or a missing or
broken environment, triggers a rebuild from nothing.

What goes in, and why (see tools/sglang_client/README.md for the import investigation):
- `sglang==0.5.23` with `--no-deps`: its declared dependencies include torch 2.14 (CUDA, ~6 GB),
  FlashInfer, DeepGEMM and the rest of the server. The client needs none of them.
- The packages `sglang/benchmark/serving.py` and the `sglang.benchmark.datasets` package import at
  module level, pinned to what sglang 0.5.23 pins (transformers, tokenizers) or to versions known
  to work. `datasets` (Hugging Face) is here only because `sglang/benchmark/datasets/mmmu.py`
  imports it at module level and the datasets package imports every dataset module.
- pyzmq and psutil: `sglang/srt/utils/network.py` (resolve_base_url) imports them at module level.
Run `tools/sglang_client/run_bench_serving.py` with this environment's python to use the client.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_DIR = REPO_ROOT / ".venv-sglang-client"
STAMP_NAME = ".sglang-client-stamp.json"

SGLANG_REQUIREMENT = "sglang==0.5.23"

# Pinned light dependencies of the benchmark client (no torch). Keep this list minimal: every
# entry is imported by the client's own code on the random-ids / sglang-backend path or at
# module level by a module that path imports.
CLIENT_REQUIREMENTS = (
    "aiohttp==3.14.5",  # serving.py: streaming HTTP client
    "datasets==5.2.0",  # benchmark/datasets/mmmu.py, imported by benchmark/datasets/__init__.py
    "msgspec==0.23.0",  # serving.py, goodput.py
    "numpy==2.4.6",  # serving.py metrics, dataset sampling
    "orjson==3.13.0",  # serving.py: SSE chunk parsing
    "pillow==13.0.0",  # benchmark/datasets/image.py (module level)
    "psutil==7.2.2",  # srt/utils/network.py (module level)
    "pybase64==1.5.1",  # benchmark/datasets/image.py, mmmu.py (module level)
    "pyzmq==27.3.0",  # srt/utils/network.py (module level)
    "requests==2.34.2",  # serving.py: /v1/models, /model_info, /server_info, /flush_cache
    "tokenizers==0.23.2",  # pinned by sglang 0.5.23
    "tqdm==4.70.1",  # serving.py progress bar
    "transformers==5.19.0",  # pinned by sglang 0.5.23: AutoTokenizer
)


def env_python(env_dir: Path = ENV_DIR) -> Path:
    return env_dir / "bin" / "python"


def requirement_set() -> dict:
    """Everything that, if changed, must trigger a rebuild."""
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "sglang": SGLANG_REQUIREMENT,
        "client_requirements": list(CLIENT_REQUIREMENTS),
    }


def read_stamp(env_dir: Path = ENV_DIR) -> dict | None:
    try:
        return json.loads((env_dir / STAMP_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_current(env_dir: Path = ENV_DIR) -> bool:
    stamp = read_stamp(env_dir)
    return (
        stamp is not None
        and stamp.get("requirements") == requirement_set()
        and env_python(env_dir).exists()
    )


def _run(argv: list[str]) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True)


def build(env_dir: Path = ENV_DIR, *, force: bool = False) -> bool:
    """Build the environment unless it is current. Returns True when it built."""
    if not force and is_current(env_dir):
        return False
    started = time.monotonic()
    if env_dir.exists():
        shutil.rmtree(env_dir)
    # The base interpreter of whoever runs this (the project's .venv python is 3.11+).
    _run([sys.executable, "-m", "venv", str(env_dir)])
    python = str(env_python(env_dir))
    pip = [python, "-m", "pip", "install", "--quiet"]
    # --no-compile: pip would byte-compile every file of every package (transformers, datasets, numpy,
    # sglang's 220 MB tree: 7,400 files, ~15 s of CPU) where a run imports 1,800 of them. The import
    # check below compiles exactly those, by importing them with bytecode writing on; without it, with
    # PYTHONDONTWRITEBYTECODE set (as on our machines), every client start would recompile them (~4 s).
    _run([*pip, "--no-compile", *CLIENT_REQUIREMENTS])
    # --no-deps: sglang declares torch, CUDA kernels and the server stack; the client needs none.
    # Installed last so pip's resolver never weighs (and lists) those undeclared-here packages.
    _run([*pip, "--no-compile", "--no-deps", SGLANG_REQUIREMENT])
    _check_client_imports(env_dir)
    stamp = {
        "requirements": requirement_set(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (env_dir / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    print(f"sglang client environment built in {stamp['build_seconds']} s: {env_dir}")
    return True


def _check_client_imports(env_dir: Path) -> None:
    """Fail the build (not a later test) if the launcher cannot import the client without torch; and,
    bytecode writing on, leave compiled what a run imports: the client's modules, and what loading a
    tokenizer the way a run does (`get_tokenizer` on the emulator's) imports on top."""
    launcher = Path(__file__).resolve().parent / "run_bench_serving.py"
    tokenizer = REPO_ROOT / "moe_tui" / "sim" / "tokenizer"
    probe = (
        "import sys, runpy; "
        f"ns = runpy.run_path({str(launcher)!r}, run_name='probe'); "
        "ns['prepare_imports'](); "
        "import sglang.benchmark.serving; "
        "from sglang.benchmark.utils import get_tokenizer; "
        f"get_tokenizer({str(tokenizer)!r}); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([str(env_python(env_dir)), "-c", probe], check=True, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    parser.add_argument("--env-dir", type=Path, default=ENV_DIR, help="where to build (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        built = build(args.env_dir, force=args.force)
    except subprocess.CalledProcessError as exc:
        print(f"build_env: failed building {args.env_dir}: {exc}", file=sys.stderr)
        return 1
    if not built:
        print(f"sglang client environment is current: {args.env_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
