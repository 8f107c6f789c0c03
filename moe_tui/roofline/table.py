"""A profile's `[roofline]` table: its keys and their check (pure; `profiles` validates with it).

`inputs` turns a valid table into roofline inputs; this file only says whether a table is valid and,
if not, what is wrong, naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moe_tui.roofline.decode import KV_BYTES
from moe_tui.roofline.gpu_specs import GpuSpecError, find_gpu
from moe_tui.roofline.model_shape import GROUPS, WEIGHT_BITS

_NUMBER_KEYS = ("hbm_gbps", "fp4_tflops", "fp8_tflops", "bf16_tflops")


_KEYS = ("gpu", "gpu_count", "model_config", "kv_cache_dtype", *_NUMBER_KEYS,
         *(f"weights_{g}" for g in GROUPS))


def check_roofline_table(table: Mapping[str, Any]) -> str | None:
    """None if a profile's `[roofline]` table is valid, else what is wrong (key named)."""
    import difflib

    for key, value in table.items():
        if key not in _KEYS:
            hint = difflib.get_close_matches(key, _KEYS, n=1)
            return f"unknown key '{key}'" + (f"; did you mean '{hint[0]}'?" if hint else f"; known: {', '.join(_KEYS)}")
        if key in _NUMBER_KEYS and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            return f"'{key}' must be a positive number, got {value!r}"
        if key == "gpu_count" and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024):
            return f"'gpu_count' must be an integer in [1, 1024], got {value!r}"
        if key in ("gpu", "model_config") and (not isinstance(value, str) or not value.strip()):
            return f"'{key}' must be a non-empty string, got {value!r}"
        if key == "gpu":
            try:
                find_gpu(value)
            except GpuSpecError as exc:
                return str(exc)
        if key == "kv_cache_dtype" and value not in ("auto", *KV_BYTES):
            return f"'kv_cache_dtype' {value!r} unknown; known: auto, {', '.join(KV_BYTES)}"
        if key.startswith("weights_") and value not in WEIGHT_BITS:
            return f"'{key}' {value!r} unknown; known: {', '.join(WEIGHT_BITS)}"
    return None
