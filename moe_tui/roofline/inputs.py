"""Where the roofline's inputs come from: a profile (or a run's stored profile snapshot), its
model's `config.json`, the GPUs (NVML names from the run, the profile's `[roofline]` table, or
flags), the KV cache dtype (resolved server args) and the benchmark's context length.

The profile's optional `[roofline]` table (validated by `check_roofline_table`, which
`profiles.py` calls on load):

    [roofline]
    gpu = "rtx-pro-6000"        # table key or NVML name; default: the run's NVML names
    gpu_count = 8               # default: len(gpus), else tp_size
    hbm_gbps = 1792             # override any figure of the GPU row
    fp4_tflops = 2000
    model_config = "/models/GLM-5-NVFP4/config.json"   # default: <model_path>/config.json
    kv_cache_dtype = "fp8_e4m3" # default: the server's resolved --kv-cache-dtype
    weights_attention = "bf16"  # weights_<group>: a storage format per weight group

Reads files (config.json) but holds no state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from moe_tui.judgement import is_simulated, sim_time_scale
from moe_tui.roofline.decode import KV_BYTES, Roofline, decode_roofline
from moe_tui.roofline.gpu_specs import GpuSpec, GpuSpecError, find_gpu, with_overrides
from moe_tui.roofline.model_shape import ModelConfigError, ModelShape, model_shape
from moe_tui.roofline.table import _NUMBER_KEYS

SIM_MODELS_DIR = Path(__file__).resolve().parents[1] / "sim" / "models"
# The emulator models the seed's box: 8 RTX PRO 6000 Blackwell (its NVML is not real).
SIM_DEFAULT_GPU = "rtx-pro-6000"


class RooflineInputError(ValueError):
    """An input of the roofline is missing or invalid; the message names it and where."""


@dataclass(frozen=True)
class RooflineSetup:
    """Everything but the batch: the ceiling at any concurrency is `setup.at(batch)`."""

    shape: ModelShape
    gpu: GpuSpec
    gpu_count: int
    gpu_source: str  # where the GPU identity came from, in words
    kv_cache_dtype: str
    attention_tp: int
    context: int
    config_path: str

    def at(self, batch: int) -> Roofline:
        return decode_roofline(self.shape, self.gpu, self.gpu_count, batch, self.context,
                               kv_cache_dtype=self.kv_cache_dtype, attention_tp=self.attention_tp)

    def describe(self) -> str:
        return (f"{self.shape.name}: {self.gpu_count} x {self.gpu.label} ({self.gpu_source}), "
                f"kv cache {self.kv_cache_dtype}, attention TP {self.attention_tp}, context {self.context}")


def mean_decode_context(input_len: int, output_len: int) -> int:
    """Tokens cached per stream, averaged over the decode of one request."""
    return int(input_len + output_len / 2)


def config_path_for(profile: Mapping[str, Any]) -> Path:
    """The config.json the profile's model is described by (see the module docstring)."""
    table = profile.get("roofline") or {}
    name = profile.get("name", "?")
    if table.get("model_config"):
        path = Path(table["model_config"]).expanduser()
        if not path.is_absolute() and profile.get("source"):
            path = Path(profile["source"]).parent / path
        return path
    model_path = Path(str(profile.get("model_path", ""))).expanduser()
    candidate = model_path / "config.json"
    if candidate.is_file() or profile.get("engine") != "sim":
        return candidate
    bundled = SIM_MODELS_DIR / model_path.name / "config.json"
    if bundled.is_file():
        return bundled
    raise RooflineInputError(f"profile '{name}': the emulator has no model config for {model_path.name!r} "
                             f"(bundled: {', '.join(sorted(p.name for p in SIM_MODELS_DIR.iterdir()))})")


def load_shape(profile: Mapping[str, Any]) -> tuple[ModelShape, Path]:
    path = config_path_for(profile)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RooflineInputError(f"profile '{profile.get('name', '?')}': no model config at {path}; "
                                 f"set [roofline] model_config in the profile") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RooflineInputError(f"{path}: cannot read model config: {exc}") from None
    table = profile.get("roofline") or {}
    overrides = {k[len("weights_"):]: v for k, v in table.items() if k.startswith("weights_")}
    try:
        return model_shape(data, str(path), quantization=str(profile.get("quantization") or ""),
                           overrides=overrides), path
    except ModelConfigError as exc:
        raise RooflineInputError(str(exc)) from None


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def gpu_for(profile: Mapping[str, Any], nvml_names: Sequence[str] = (), gpu: str | None = None,
            gpu_count: int | None = None) -> tuple[GpuSpec, int, str]:
    """(row, count, where it came from): the flag, else the profile's [roofline] gpu, else the
    NVML names the run saw, else the emulator's modelled box; figures overridable per profile."""
    table = profile.get("roofline") or {}
    where = f"profile '{profile.get('name', '?')}'"
    names = [n for n in nvml_names if n]
    try:
        if gpu:
            base, source = find_gpu(gpu), "--gpu"
        elif table.get("gpu"):
            base, source = find_gpu(table["gpu"]), "profile [roofline] gpu"
        elif names:
            base, source = find_gpu(names[0]), "NVML"
        elif is_simulated(profile=profile):
            base, source = find_gpu(SIM_DEFAULT_GPU), "the emulator's modelled box"
        elif any(k in table for k in _NUMBER_KEYS):
            base, source = None, "profile [roofline] figures"
        else:
            raise RooflineInputError(f"{where}: which GPU? no NVML names recorded; pass --gpu or set "
                                     f"[roofline] gpu in the profile")
        spec = with_overrides(base, table, where)
    except GpuSpecError as exc:
        raise RooflineInputError(str(exc)) from None
    count = gpu_count or table.get("gpu_count") or len(profile.get("gpus") or ()) or int(profile.get("tp_size") or 1)
    return spec, int(count), source


def _server_default_kv(spec: GpuSpec, config_path: Path) -> str:
    """What SGLang 0.5.23 resolves `--kv-cache-dtype auto` to before a run recorded it: a DSA model
    (GLM-5, DeepSeek V3.2: `index_topk` in its config) gets fp8_e4m3 from SM100 on (FP4 tensor cores
    mark Blackwell in the table), bfloat16 below (srt/arg_groups/overrides.py); others keep the
    model dtype ("auto")."""
    try:
        dsa = "index_topk" in json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        dsa = False
    if not dsa:
        return "auto"
    return "fp8_e4m3" if spec.fp4_tflops is not None else "bf16"


def roofline_setup(profile: Mapping[str, Any], *, context: int, nvml_names: Sequence[str] = (),
                   resolved_args: Mapping[str, Any] | None = None, gpu: str | None = None,
                   gpu_count: int | None = None, kv_cache_dtype: str | None = None) -> RooflineSetup:
    """The roofline inputs of one profile (a `ServerProfile.snapshot()` or a run's stored one)."""
    shape, path = load_shape(profile)
    spec, count, source = gpu_for(profile, nvml_names, gpu, gpu_count)
    scale = sim_time_scale(profile)
    if scale != 1.0:  # the emulator runs its modelled box this many times faster: so does the ceiling
        spec = replace(spec, hbm_gbps=spec.hbm_gbps * scale, bf16_tflops=spec.bf16_tflops * scale,
                       fp8_tflops=spec.fp8_tflops * scale,
                       fp4_tflops=None if spec.fp4_tflops is None else spec.fp4_tflops * scale,
                       label=f"{spec.label} (x{scale:g}: emulator time scale)")
    table = profile.get("roofline") or {}
    extra = [str(a) for a in profile.get("extra_args") or ()]
    kv = (kv_cache_dtype or table.get("kv_cache_dtype") or (resolved_args or {}).get("kv_cache_dtype")
          or _flag_value(extra, "--kv-cache-dtype") or "auto")
    if kv == "auto":
        kv = _server_default_kv(spec, path)
    if kv != "auto" and kv not in KV_BYTES:
        raise RooflineInputError(f"kv cache dtype {kv!r} unknown; known: auto, {', '.join(KV_BYTES)}")
    dp_attention = "--enable-dp-attention" in extra or bool((resolved_args or {}).get("enable_dp_attention"))
    attention_tp = 1 if dp_attention else int(profile.get("tp_size") or 1)
    return RooflineSetup(shape, spec, count, source, kv, attention_tp, context, str(path))
