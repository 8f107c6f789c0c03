"""ServerProfile: how to launch one SGLang server (or its emulator) for one MoE backend.

Profiles are TOML files in `server_profiles/`. Loading validates every key and value and names
the file, the key and the reason; unknown keys get a "did you mean". A profile builds an argv list
(never a shell string) for `python -m sglang.launch_server` or for the emulator `python -m
moe_tui.sim`. `profile_diff` (moe_tui.profile_diff, re-exported here) lists every launch setting that differs
between two profiles, for the comparison grid. Pure data apart from reading the files it is pointed at.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_tui.judgement import sim_time_scale
from moe_tui.profile_diff import SettingDiff as SettingDiff  # re-exported: callers import them from here
from moe_tui.profile_diff import flag_map as flag_map
from moe_tui.profile_diff import profile_diff as profile_diff
from moe_tui.records import FreeForm
from moe_tui.redaction import REDACTED as REDACTED  # re-exported: callers import them from here
from moe_tui.redaction import SECRET_MARKERS as SECRET_MARKERS
from moe_tui.redaction import is_secret_name as is_secret_name
from moe_tui.redaction import redact_argv as redact_argv
from moe_tui.redaction import redact_env as redact_env
from moe_tui.sglang_flags import owned_conflict

# A profile's settings as plain JSON-safe data (its snapshot, stored with every run): the keys of a
# user-written TOML table of some moe-tui version, so free-form when read back from a store.
ProfileSettings = FreeForm
_flag_map = flag_map  # its older name (compare.confound and run.sim_clock import it)
ENGINES = ("sglang", "sim")
# moe-tui's own environment variables (server markers, settings): never set by a profile's env.
OWN_ENV_PREFIX = "MOE_TUI_"
# Weight loading prints shard progress; FlashInfer's autotune and a big graph capture stay silent longest.
DEFAULT_STARTUP_STALL_S = 600.0

# Flags SGLang 0.5.23 accepts for --moe-runner-backend (see shared/reference/SGLANG.md).
MOE_RUNNER_BACKENDS = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl",
    "flashinfer_megamoe", "cutlass", "aiter", "marlin", "humming", "experimental_sgl_marlin",
    "lora_cutedsl", "lora_triton", "lora_marlin", "hpc_ops", "megamoe", "intel_xpu",
)



class ProfileError(ValueError):
    """A profile is invalid. The message names the file, the key and the reason."""

    def __init__(self, where: str, key: str | None, message: str):
        self.where = where
        self.key = key
        location = f"{where}: key '{key}'" if key else where
        super().__init__(f"{location}: {message}")


class UnknownProfileError(KeyError):
    """No profile of that name; the message suggests the closest one."""

    def __str__(self) -> str:
        return str(self.args[0])


class DuplicateProfileError(UnknownProfileError):
    """Two profile files of a folder carry the same name: which one is meant cannot be known."""


NAME_MAX = 64
DESCRIPTION_MAX = 500


def name_problem(name: object, what: str = "name") -> str | None:
    """Why `name` is not a usable profile/backend name, or None. The one rule for names from
    profiles and from imported records: 1-64 letters, digits, '-', '_' and '.', so a name can
    never carry markup, a newline, a Markdown heading or a table pipe into the TUI or an export."""
    if not isinstance(name, str):
        return f"{what} must be text, got {type(name).__name__}"
    if not name.strip():
        return f"{what} must not be empty"
    if len(name) > NAME_MAX:
        return f"{what} {name[:NAME_MAX]!r}... is longer than {NAME_MAX} characters"
    if not all((c.isascii() and c.isalnum()) or c in "-_." for c in name):
        return f"{what} {name!r} may hold only letters, digits, '-', '_' and '.'"
    return None


def check_name(name: object, where: str, what: str = "name") -> str:
    """`name` if it passes `name_problem`, else ValueError naming `where`."""
    problem = name_problem(name, what)
    if problem:
        raise ValueError(f"{where}: {problem}")
    return str(name)


def text_problem(text: str, what: str = "description") -> str | None:
    """Free text (a description): printable, one paragraph, bounded."""
    if len(text) > DESCRIPTION_MAX:
        return f"{what} is longer than {DESCRIPTION_MAX} characters"
    bad = next((c for c in text if not c.isprintable() and c not in " "), None)
    if bad is not None:
        return f"{what} holds a control character {bad!r} (newlines, tabs, escapes are not allowed)"
    return None


@dataclass(frozen=True)
class ServerProfile:
    name: str
    engine: str
    model_path: str
    moe_runner_backend: str
    served_model_name: str = ""
    tp_size: int = 1
    ep_size: int = 1
    quantization: str = ""
    gpus: tuple[int, ...] = ()
    host: str = "127.0.0.1"
    port: int = 30000
    startup_timeout_s: float = 1800.0
    # no new log line or phase for this long fails a start (a hang); watching, not launching
    startup_stall_s: float = DEFAULT_STARTUP_STALL_S
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    python: str = ""
    description: str = ""
    sim: Mapping[str, Any] = field(default_factory=dict)
    roofline: Mapping[str, Any] = field(default_factory=dict)  # roofline inputs; not a launch setting
    source: str = ""  # file it was loaded from; not a launch setting
    api_key: str = ""  # optional: the server answers only requests bearing it (SGLang --api-key)
    nnodes: int = 1  # >1: one server over that many nodes (one srun inside a Slurm job: servers/multinode.py)

    @property
    def time_scale(self) -> float:
        """The server's clock speed-up over real time (`sim_time_scale`): 1 unless an emulator."""
        return sim_time_scale({"engine": self.engine, "sim": self.sim})

    # -- argv / environment ------------------------------------------------------------------
    def argv(self, python: str | None = None) -> list[str]:
        """The exact argv to launch this profile's server. Never a shell string."""
        exe = python or self.python or sys.executable
        module = "sglang.launch_server" if self.engine == "sglang" else "moe_tui.sim"
        args = [exe, "-m", module, "--model-path", self.model_path]
        if self.served_model_name:
            args += ["--served-model-name", self.served_model_name]
        args += ["--tp-size", str(self.tp_size), "--ep-size", str(self.ep_size)]
        args += ["--moe-runner-backend", self.moe_runner_backend]
        if self.quantization:
            args += ["--quantization", self.quantization]
        args += ["--host", self.host, "--port", str(self.port)]
        args += list(self.extra_args)
        # `api_key` is never on the command line (ps shows it to every local user): the server manager
        # hands it over in the start's --config file (moe_tui.servers.server_key).
        if self.nnodes > 1:  # each rank's --node-rank and --dist-init-addr are the start's (servers/multinode.py)
            args += ["--nnodes", str(self.nnodes)]
        if self.engine == "sim":
            args += sim_flags(self.sim)
        return args

    def launch_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for the child: base + profile env + CUDA_VISIBLE_DEVICES from `gpus`."""
        env = dict(base or {})
        env.update({k: str(v) for k, v in self.env.items()})
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
        return env

    def redacted_env(self) -> dict[str, str]:
        return redact_env(self.launch_env())

    @property
    def base_url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def binds_beyond_loopback(self) -> bool:
        try:
            return not ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return self.host != "localhost"

    def launch_settings(self) -> ProfileSettings:
        """Everything that shapes the server, as plain JSON-safe data (the profile snapshot)."""
        data = dataclasses.asdict(self)
        data.pop("source")
        data.pop("roofline")  # roofline inputs do not shape the server
        data.pop("startup_stall_s")  # how the start is watched, not what is started
        data["gpus"] = list(self.gpus)
        data["extra_args"] = list(self.extra_args)
        data["env"] = redact_env(dict(self.env))
        data["api_key"] = REDACTED if self.api_key else ""
        data["sim"] = dict(self.sim)
        if self.nnodes == 1:  # one node, as every profile before the key: its snapshot (and what it shapes) unchanged
            data.pop("nnodes")
        return data

    def snapshot(self) -> ProfileSettings:
        snap = self.launch_settings()
        snap["source"] = self.source
        if self.roofline:
            snap["roofline"] = dict(self.roofline)
        snap.update({"startup_stall_s": self.startup_stall_s} if self.startup_stall_s != DEFAULT_STARTUP_STALL_S else {})
        return snap

    def snapshot_json(self) -> str:
        return json.dumps(self.snapshot(), sort_keys=True)


# ---------------------------------------------------------------------------------------------
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "engine": (str,), "model_path": (str,), "moe_runner_backend": (str,),
    "served_model_name": (str,), "tp_size": (int,), "ep_size": (int,), "quantization": (str,),
    "gpus": (list,), "host": (str,), "port": (int,), "startup_timeout_s": (int, float),
    "startup_stall_s": (int, float),
    "extra_args": (list,), "env": (dict,), "python": (str,), "description": (str,), "sim": (dict,),
    "roofline": (dict,), "api_key": (str,), "nnodes": (int,),
}
_REQUIRED = ("name", "engine", "model_path", "moe_runner_backend")


def profile_from_dict(data: Mapping[str, Any], where: str = "<profile>") -> ServerProfile:
    """A validated ServerProfile from one profile table; the first problem raises ProfileError
    naming `where` and the key. Checks run in a fixed order: keys and types, identity (name,
    engine, model, backend), placement (sizes, port, GPUs, host), then the nested tables."""
    _check_keys_and_types(data, where)
    _check_identity(data, where)
    _check_placement(data, where)
    _check_tables(data, where)
    env = data.get("env", {})
    return ServerProfile(
        name=data["name"],
        engine=data["engine"],
        model_path=data["model_path"],
        moe_runner_backend=data["moe_runner_backend"],
        served_model_name=data.get("served_model_name", ""),
        tp_size=data.get("tp_size", 1),
        ep_size=data.get("ep_size", 1),
        quantization=data.get("quantization", ""),
        gpus=tuple(data.get("gpus", [])),
        host=data.get("host", "127.0.0.1"),
        port=data.get("port", 30000),
        startup_timeout_s=float(data.get("startup_timeout_s", 1800.0)),
        startup_stall_s=float(data.get("startup_stall_s", DEFAULT_STARTUP_STALL_S)),
        extra_args=tuple(data.get("extra_args", [])),
        env={k: str(v) for k, v in env.items()},
        python=data.get("python", ""),
        description=data.get("description", ""),
        sim=dict(data.get("sim", {})),
        roofline=dict(data.get("roofline", {})),
        source=where,
        api_key=data.get("api_key", ""),
        nnodes=data.get("nnodes", 1),
    )


def _need(where: str, ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ProfileError(where, key, message)


def _check_keys_and_types(data: Mapping[str, Any], where: str) -> None:
    """Unknown keys (with a did-you-mean), missing required keys, wrong value types."""
    known = list(_FIELD_TYPES)
    for key in data:
        if key not in _FIELD_TYPES:
            hint = difflib.get_close_matches(key, known, n=1)
            extra = f"; did you mean '{hint[0]}'?" if hint else f"; known keys: {', '.join(known)}"
            raise ProfileError(where, key, f"unknown key{extra}")
    for key in _REQUIRED:
        if key not in data:
            raise ProfileError(where, key, "is required")
    for key, value in data.items():
        types = _FIELD_TYPES[key]
        if isinstance(value, bool) or not isinstance(value, types):
            want = " or ".join("table" if t is dict else "array" if t is list else t.__name__ for t in types)
            raise ProfileError(where, key, f"expected {want}, got {type(value).__name__} {value!r}")


def _check_identity(data: Mapping[str, Any], where: str) -> None:
    """Name and description (untrusted text), engine, model path and MoE runner backend."""
    problem = name_problem(data["name"])
    _need(where, problem is None, "name", (problem or "").removeprefix("name "))
    problem = text_problem(data.get("description", ""))
    _need(where, problem is None, "description", problem or "")
    _need(where, data["engine"] in ENGINES, "engine",
          f"must be one of {', '.join(ENGINES)}, got {data['engine']!r}")
    _need(where, bool(data["model_path"].strip()), "model_path", "must not be empty")
    backend = data["moe_runner_backend"]
    if backend not in MOE_RUNNER_BACKENDS:
        hint = difflib.get_close_matches(backend, MOE_RUNNER_BACKENDS, n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else ""
        raise ProfileError(where, "moe_runner_backend",
                           f"{backend!r} is not an SGLang 0.5.23 MoE runner backend{extra}")


def _check_placement(data: Mapping[str, Any], where: str) -> None:
    """Parallel sizes, port, start-up timeout, GPU list (against tp_size) and host."""
    for key in ("tp_size", "ep_size"):
        if key in data:
            _need(where, 1 <= data[key] <= 1024, key, f"must be in [1, 1024], got {data[key]}")
    port = data.get("port", 30000)
    _need(where, 1024 <= port <= 65535, "port",
          f"must be in [1024, 65535] (ports below 1024 need root), got {port}")
    for key, default in (("startup_timeout_s", 1800.0), ("startup_stall_s", DEFAULT_STARTUP_STALL_S)):
        value = data.get(key, default)
        _need(where, 0 < value <= 86400, key, f"must be in (0, 86400] seconds, got {value}")
    nnodes, tp = data.get("nnodes", 1), data.get("tp_size", 1)
    _need(where, 1 <= nnodes <= 64 and tp % nnodes == 0, "nnodes",
          f"must be in [1, 64], got {nnodes}; tp_size must be divisible by number of nodes (SGLang's check; tp_size {tp})")
    gpus = data.get("gpus", [])
    for g in gpus:
        _need(where, isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 1024, "gpus",
              f"GPU indices must be integers >= 0, got {g!r}")
    _need(where, len(set(gpus)) == len(gpus), "gpus", f"lists a GPU twice: {gpus}")
    if gpus:  # the GPUs of each node
        _need(where, len(gpus) >= tp // nnodes, "gpus", f"lists {len(gpus)} GPU(s) but tp_size is {tp}"
              + (f" over {nnodes} nodes" if nnodes > 1 else ""))
    host = data.get("host", "127.0.0.1")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ProfileError(where, "host", f"{host!r} is not an IP address or 'localhost'") from None


def _check_tables(data: Mapping[str, Any], where: str) -> None:
    """extra_args (no flag the profile's own keys set), env values, the sim table, the roofline table."""
    for arg in data.get("extra_args", []):
        _need(where, isinstance(arg, str), "extra_args", f"entries must be strings, got {arg!r}")
    # SGLang's parser takes aliases and abbreviations: an owned setting reached again is refused
    conflict = owned_conflict(data.get("extra_args", []), data)
    _need(where, conflict is None, "extra_args", conflict or "")
    for k, v in data.get("env", {}).items():
        _need(where, isinstance(v, (str, int, float)) and not isinstance(v, bool), "env",
              f"value of {k} must be a string or number, got {v!r}")
        # moe-tui finds (and stops) its servers by these markers: a profile must not move or erase them
        _need(where, not str(k).upper().startswith(OWN_ENV_PREFIX), "env",
              f"{k} is moe-tui's own variable (its server markers and settings): a profile cannot set it")
    sim = data.get("sim", {})
    if sim and data["engine"] != "sim":
        raise ProfileError(where, "sim", "is only valid with engine = \"sim\"")
    for k, v in sim.items():
        _need(where, isinstance(v, (str, int, float, bool)), "sim", f"value of {k} must be a scalar, got {v!r}")
    roofline = data.get("roofline", {})
    if roofline:
        from moe_tui.roofline.table import check_roofline_table

        problem = check_roofline_table(roofline)
        _need(where, problem is None, "roofline", problem or "")


PROFILE_MAX_BYTES = 1 << 20


def load_profile(path: str | Path) -> ServerProfile:
    path = Path(path)
    from moe_tui.trust import read_small_regular_file

    try:  # a regular file of sane size: never a fifo (hangs) or a link to /dev/zero (eats memory)
        text = read_small_regular_file(path, PROFILE_MAX_BYTES).decode("utf-8")
    except OSError as exc:
        raise ProfileError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ProfileError(str(path), None, "is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(str(path), None, f"malformed TOML: {exc}") from None
    return profile_from_dict(data, str(path))


@dataclass
class ProfileSet:
    """Profiles loaded from a folder, with every problem found (not just the first)."""

    profiles: list[ServerProfile]
    problems: list[str]
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # name -> every file carrying it

    def duplicate_message(self, name: str) -> str:
        files = self.duplicates[name]
        return (f"profile name '{name}' is used by {len(files)} files: {' and '.join(files)}; "
                f"rename one (which one is meant cannot be guessed)")

    def check_unique(self) -> None:
        """Raise DuplicateProfileError naming the files if any name is used twice."""
        if self.duplicates:
            raise DuplicateProfileError("; ".join(self.duplicate_message(n) for n in sorted(self.duplicates)))

    def by_name(self, name: str) -> ServerProfile:
        if name in self.duplicates:
            raise DuplicateProfileError(self.duplicate_message(name))
        for profile in self.profiles:
            if profile.name == name:
                return profile
        known = [p.name for p in self.profiles]
        hint = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        extra = f"; did you mean '{hint[0]}'?" if hint else f"; known: {', '.join(known) or 'none'}"
        raise UnknownProfileError(f"no profile named '{name}'{extra}")


def load_profiles(directory: str | Path) -> ProfileSet:
    directory = Path(directory)
    profiles: list[ServerProfile] = []
    problems: list[str] = []
    if not directory.is_dir():
        return ProfileSet([], [f"{directory}: not a folder of profiles"])
    for path in sorted(directory.glob("*.toml")):
        try:
            profiles.append(load_profile(path))
        except ProfileError as exc:
            problems.append(str(exc))
    seen: dict[str, ServerProfile] = {}
    duplicates: dict[str, list[str]] = {}
    for profile in profiles:
        if profile.name in seen:
            problems.append(f"{profile.source}: key 'name': '{profile.name}' is also used by {seen[profile.name].source}")
            duplicates.setdefault(profile.name, [str(seen[profile.name].source)]).append(str(profile.source))
        seen[profile.name] = profile
    return ProfileSet(profiles, problems, duplicates)


def sim_flags(sim: Mapping[str, Any]) -> list[str]:
    """Emulator options from a profile's [sim] table as `--sim-*` flags."""
    args: list[str] = []
    for key, value in sim.items():
        flag = "--sim-" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                args.append(flag)
        else:
            args += [flag, str(value)]
    return args
