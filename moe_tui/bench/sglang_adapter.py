"""Run SGLang's own benchmark client (`sglang.bench_serving`) for a BenchmarkSpec, and read its JSONL.

Where the client comes from (`locate_client`):
- `MOE_TUI_SGLANG_PYTHON=/path/to/python`: that interpreter, as a full SGLang install
  (`python -m sglang.bench_serving`), or as a light client env if it has no torch.
- a full SGLang install in this interpreter (sglang and torch importable, e.g. on the GPU box):
  `python -m sglang.bench_serving`, the same client the server ships with.
- the repo's `.venv-sglang-client/` (built by `make sglang-client`): sglang's wheel without its
  server dependencies, run through `tools/sglang_client/run_bench_serving.py`, which executes the
  unmodified `sglang.benchmark.serving` without importing torch.

`bench_serving_args` maps a spec to 0.5.23's flags; `run_bench_serving` runs it (argv list, own
process group, killed on timeout) and returns the one JSONL record it appended, normalized by
`normalize_record`. Reading records (`normalize_record`, `parse_bench_serving_jsonl` for
`moe-tui import FILE`, `spec_fields_from_record`) lives in `moe_tui.bench.bench_serving_record`,
re-exported here.
No textual, no torch, no third-party imports.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

# The records' side (fields, checks, errors), re-exported: callers import them from here.
from moe_tui.bench.bench_serving_record import BACKEND_TO_API as BACKEND_TO_API
from moe_tui.bench.bench_serving_record import CLIENT_NAME as CLIENT_NAME
from moe_tui.bench.bench_serving_record import DETAIL_FIELDS as DETAIL_FIELDS
from moe_tui.bench.bench_serving_record import PASSTHROUGH_FIELDS as PASSTHROUGH_FIELDS
from moe_tui.bench.bench_serving_record import RESULT_FIELDS as RESULT_FIELDS
from moe_tui.bench.bench_serving_record import SPEC_FIELDS_NOT_IN_RECORD as SPEC_FIELDS_NOT_IN_RECORD
from moe_tui.bench.bench_serving_record import BenchServingError as BenchServingError
from moe_tui.bench.bench_serving_record import BenchServingRecord as BenchServingRecord
from moe_tui.bench.bench_serving_record import RecordError as RecordError
from moe_tui.bench.bench_serving_record import normalize_record as normalize_record
from moe_tui.bench.bench_serving_record import parse_bench_serving_jsonl as parse_bench_serving_jsonl
from moe_tui.bench.bench_serving_record import spec_fields_from_record as spec_fields_from_record

if TYPE_CHECKING:
    from moe_tui.spec import BenchmarkSpec

    # A BenchmarkSpec, or a mapping with its field names (an imported record's spec fields).
    SpecLike = BenchmarkSpec | Mapping[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENT_ENV_DIR = REPO_ROOT / ".venv-sglang-client"
LAUNCHER = REPO_ROOT / "tools" / "sglang_client" / "run_bench_serving.py"
PYTHON_OVERRIDE_ENV = "MOE_TUI_SGLANG_PYTHON"

# spec.api -> bench_serving --backend. "generate" is SGLang's native /generate stream, which counts
# output tokens from meta_info.completion_tokens; "completions" is /v1/completions.
API_TO_BACKEND = {"generate": "sglang", "completions": "sglang-oai"}


class ClientNotFound(BenchServingError):
    pass


@dataclass(frozen=True)
class SglangClient:
    """How to start sglang.bench_serving: `argv_prefix + flags`."""

    kind: str  # "repo-env" (light env + launcher) or "installed" (a full SGLang install)
    python: Path
    version: str

    @property
    def argv_prefix(self) -> list[str]:
        if self.kind == "repo-env":
            return [str(self.python), str(LAUNCHER)]
        return [str(self.python), "-m", CLIENT_NAME]


# -- locating the client ----------------------------------------------------------------------
_PROBE = (
    "import importlib.util as u, importlib.metadata as m, json; "
    "has = lambda n: u.find_spec(n) is not None; "
    "print(json.dumps({'sglang': m.version('sglang') if has('sglang') else None, 'torch': has('torch')}))"
)


class _Probe(TypedDict):
    sglang: str | None  # its version
    torch: bool


def _probe(python: Path) -> _Probe | None:
    """Which sglang (and whether torch) an interpreter has, without importing either (fast)."""
    try:
        out = subprocess.run(
            [str(python), "-c", _PROBE], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        info: _Probe = json.loads(out.strip().splitlines()[-1])
        return info
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _client_for(python: Path) -> SglangClient | None:
    info = _probe(python)
    version = info.get("sglang") if info else None
    if not info or not version:
        return None
    kind = "installed" if info.get("torch") else "repo-env"
    return SglangClient(kind=kind, python=python, version=version)


def locate_client(env_dir: Path = CLIENT_ENV_DIR) -> SglangClient | None:
    """The client to use, or None. Order: $MOE_TUI_SGLANG_PYTHON, a full install here, the repo env."""
    override = os.environ.get(PYTHON_OVERRIDE_ENV)
    if override:
        client = _client_for(Path(override))
        if client is None:
            raise ClientNotFound(f"${PYTHON_OVERRIDE_ENV}={override}: no sglang installed for that python")
        return client
    here = _client_for(Path(sys.executable))
    if here is not None and here.kind == "installed":
        return here
    env_python = env_dir / "bin" / "python"
    if env_python.exists():
        client = _client_for(env_python)
        if client is not None:
            return SglangClient(kind="repo-env", python=env_python, version=client.version)
    return None


def require_client(env_dir: Path = CLIENT_ENV_DIR) -> SglangClient:
    client = locate_client(env_dir)
    if client is None:
        raise ClientNotFound(
            f"sglang.bench_serving not found: no SGLang install in {sys.executable} and no client env "
            f"at {env_dir} (build it with `make sglang-client`)"
        )
    return client


# -- spec -> flags ------------------------------------------------------------------------------
def _spec_value(spec: SpecLike, name: str) -> Any:
    if isinstance(spec, Mapping):
        if name not in spec:
            raise BenchServingError(f"benchmark spec has no field '{name}'")
        return spec[name]
    return getattr(spec, name)


def _number(value: float) -> str:
    """Flags as bench_serving's argparse reads them (`inf` for an unbounded request rate)."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


def bench_serving_args(
    spec: SpecLike,
    *,
    base_url: str,
    output_file: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str] | None = None,
    output_details: bool = False,
    disable_tqdm: bool = True,
    tag: str | None = None,
) -> list[str]:
    """bench_serving (0.5.23) flags for a BenchmarkSpec (or a mapping with its field names)."""
    api = _spec_value(spec, "api")
    if api not in API_TO_BACKEND:
        raise BenchServingError(f"benchmark spec field 'api': {api!r} has no bench_serving backend")
    dataset = _spec_value(spec, "dataset")
    if dataset != "random-ids":
        # "random" samples ShareGPT text from the hub; only random-ids is offline and reproducible.
        raise BenchServingError(f"benchmark spec field 'dataset': {dataset!r} is not supported (random-ids only)")
    argv = [
        "--backend", API_TO_BACKEND[api],
        "--base-url", base_url,
        "--dataset-name", dataset,
        "--random-input-len", str(_spec_value(spec, "input_len")),
        "--random-output-len", str(_spec_value(spec, "output_len")),
        "--random-range-ratio", _number(float(_spec_value(spec, "range_ratio"))),
        "--num-prompts", str(_spec_value(spec, "num_prompts")),
        "--max-concurrency", str(_spec_value(spec, "max_concurrency")),
        "--request-rate", _number(float(_spec_value(spec, "request_rate"))),
        "--seed", str(_spec_value(spec, "seed")),
        "--warmup-requests", str(_spec_value(spec, "warmup_requests")),
        "--temperature", _number(float(_spec_value(spec, "temperature"))),
        "--output-file", str(output_file),
    ]
    if api == "generate":
        # random-ids means exact token ids: without this flag bench_serving decodes them to text and
        # the server re-tokenizes it (other prompt lengths, and TTFT ~9% higher than from ids).
        # 0.5.23 accepts it only with --backend sglang, which is what "generate" maps to.
        argv.append("--tokenize-prompt")
    if not _spec_value(spec, "ignore_eos"):
        argv.append("--disable-ignore-eos")
    if _spec_value(spec, "flush_cache"):
        argv.append("--flush-cache")
    if tokenizer is not None:
        argv += ["--tokenizer", str(tokenizer)]
    if output_details:
        argv.append("--output-details")
    if disable_tqdm:
        argv.append("--disable-tqdm")
    if tag is not None:
        argv += ["--tag", tag]
    return argv


def client_env(base: Mapping[str, str] | None = None, client: SglangClient | None = None) -> dict[str, str]:
    """Environment for the client process: offline tokenizer loading, unbuffered output."""
    env = dict(os.environ if base is None else base)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    if client is not None and client.kind == "repo-env":
        # The light env must not see the project's packages (or a PYTHONPATH meant for them).
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONHOME", None)
    return env


# -- running ------------------------------------------------------------------------------------
def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def run_bench_serving(
    spec: SpecLike,
    *,
    base_url: str,
    output_file: str | os.PathLike[str],
    log_file: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str] | None = None,
    client: SglangClient | None = None,
    output_details: bool = False,
    timeout_s: float | None = None,
    api_key: str | None = None,
) -> BenchServingRecord:
    """Run bench_serving for `spec` against `base_url`; return its new JSONL record, normalized.
    `api_key` (the server's key, `servers.keys`) reaches it as OPENAI_API_KEY, which bench_serving
    sends on every request, its /flush_cache included (benchmark/serving.py `get_auth_headers`);
    in the environment, never on the command line.

    stdout and stderr go to `log_file`. The process runs in its own session and its whole group is
    killed on timeout or interruption. Raises BenchServingError (with the log tail) on failure.
    """
    client = client or require_client()
    check_spec_matches_client(spec, client)
    output_path = Path(output_file)
    log_path = Path(log_file)
    before = _count_lines(output_path)
    argv = client.argv_prefix + bench_serving_args(
        spec, base_url=base_url, output_file=output_path, tokenizer=tokenizer, output_details=output_details
    )
    started = time.monotonic()
    with log_path.open("ab") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**client_env(client=client), **({"OPENAI_API_KEY": api_key} if api_key else {})},
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except BaseException:
            _kill_group(proc)
            raise
    if rc != 0:
        raise BenchServingError(
            f"bench_serving exited {rc} after {time.monotonic() - started:.1f} s; log {log_path}:\n{_tail(log_path)}"
        )
    records = parse_bench_serving_jsonl(output_path)
    if len(records) != before + 1:
        raise BenchServingError(
            f"{output_path}: expected bench_serving to append one record, found {len(records) - before} "
            f"(a run with no successful request writes none); log {log_path}:\n{_tail(log_path)}"
        )
    return records[-1]


def check_spec_matches_client(spec: SpecLike, client: SglangClient) -> None:
    """A spec names the client that measures it; running it with another would mislabel results."""
    name = _spec_value(spec, "client")
    if name != CLIENT_NAME:
        raise BenchServingError(f"benchmark spec field 'client': {name!r} is not {CLIENT_NAME!r}")
    version = _spec_value(spec, "client_version")
    if version and version != client.version:
        raise BenchServingError(
            f"benchmark spec field 'client_version': spec says {version!r}, "
            f"but the client at {client.python} is sglang {client.version}"
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
