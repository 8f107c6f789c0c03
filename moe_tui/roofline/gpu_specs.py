"""GPU spec table for the roofline: HBM bandwidth and dense tensor-core peaks per precision.

One row per GPU model: how NVML names it (case-insensitive substrings, most specific row first),
memory bandwidth in GB/s (10^9 bytes/s) and dense (no 2:4 sparsity) tensor-core peak in TFLOPS for
FP4, FP8 and BF16. Datasheets quote sparse figures for Blackwell and Hopper; the dense figure is
half of that. A row without FP4 (Hopper) has no FP4 tensor cores: FP4 weights are computed at the
FP8 rate there (`peak_tflops` says so). Every figure can be overridden in a profile's `[roofline]`
table (`hbm_gbps`, `fp4_tflops`, `fp8_tflops`, `bf16_tflops`, `gpu`). Pure data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

PRECISIONS = ("fp4", "fp8", "bf16")


class GpuSpecError(ValueError):
    """An unknown GPU name or a bad override; the message names what and where."""


@dataclass(frozen=True)
class GpuSpec:
    key: str
    label: str
    hbm_gbps: float
    fp4_tflops: float | None
    fp8_tflops: float
    bf16_tflops: float
    source: str
    nvml_names: tuple[str, ...] = ()

    def peak_tflops(self, precision: str) -> tuple[float, str]:
        """(dense TFLOPS, note) at `precision`; FP4 on a GPU without FP4 tensor cores uses FP8."""
        if precision == "fp4":
            if self.fp4_tflops is None:
                return self.fp8_tflops, f"{self.label} has no FP4 tensor cores: FP4 weights computed at FP8 rate"
            return self.fp4_tflops, ""
        if precision == "fp8":
            return self.fp8_tflops, ""
        if precision in ("bf16", "fp16"):
            return self.bf16_tflops, ""
        if precision == "fp32":
            # No FP32 tensor-core figure in the table: half of BF16 (the dense TF32 rate), for
            # the few FP32 weights (routers) a checkpoint may keep.
            return self.bf16_tflops / 2, "FP32 weights computed at TF32 rate"
        raise GpuSpecError(f"unknown precision {precision!r}; known: fp4, fp8, bf16, fp32")


# Sources (checked 2026-12): NVIDIA datasheets. Sparse figures halved to dense.
GPU_SPECS: tuple[GpuSpec, ...] = (
    # RTX PRO 6000 Blackwell Workstation/Server Edition datasheet: 96 GB GDDR7, 1792 GB/s,
    # "4000 AI TOPS" FP4 with sparsity -> 2000 dense; FP8 and BF16 (FP32 accumulate) half and
    # a quarter of that. The Max-Q edition (300 W) has the same memory but lower clocks.
    GpuSpec("rtx-pro-6000-maxq", "RTX PRO 6000 Blackwell Max-Q", 1792.0, 1758.0, 879.0, 439.5,
            "NVIDIA RTX PRO 6000 Blackwell Max-Q datasheet (3511 AI TOPS sparse FP4)",
            ("rtx pro 6000 blackwell max-q",)),
    GpuSpec("rtx-pro-6000", "RTX PRO 6000 Blackwell", 1792.0, 2000.0, 1000.0, 500.0,
            "NVIDIA RTX PRO 6000 Blackwell Workstation/Server Edition datasheet (4000 AI TOPS sparse FP4)",
            ("rtx pro 6000 blackwell", "rtx pro 6000")),
    # HGX B200 datasheet, per GPU: HBM3e 8 TB/s; FP4 18 PF, FP8 9 PF, BF16 4.5 PF sparse.
    GpuSpec("b200", "B200", 8000.0, 9000.0, 4500.0, 2250.0,
            "NVIDIA HGX B200 datasheet, per GPU (18/9/4.5 PFLOPS sparse FP4/FP8/BF16)", ("b200",)),
    # H200 SXM datasheet: HBM3e 4.8 TB/s; FP8 3958 TF, BF16 1979 TF sparse; no FP4 tensor cores.
    GpuSpec("h200", "H200 SXM", 4800.0, None, 1979.0, 989.5,
            "NVIDIA H200 datasheet, SXM (3958/1979 TFLOPS sparse FP8/BF16)", ("h200",)),
    # H100 PCIe: HBM2e 2.0 TB/s; FP8 3026, BF16 1513 sparse.
    GpuSpec("h100-pcie", "H100 PCIe", 2000.0, None, 1513.0, 756.5,
            "NVIDIA H100 datasheet, PCIe (3026/1513 TFLOPS sparse FP8/BF16)", ("h100 pcie",)),
    # H100 SXM: HBM3 3.35 TB/s; FP8 3958, BF16 1979 sparse (NVML: "NVIDIA H100 80GB HBM3").
    GpuSpec("h100", "H100 SXM", 3350.0, None, 1979.0, 989.5,
            "NVIDIA H100 datasheet, SXM (3958/1979 TFLOPS sparse FP8/BF16)", ("h100",)),
)

_OVERRIDE_KEYS = {"hbm_gbps": "hbm_gbps", "fp4_tflops": "fp4_tflops", "fp8_tflops": "fp8_tflops",
                  "bf16_tflops": "bf16_tflops"}


def known_gpus() -> list[str]:
    return [g.key for g in GPU_SPECS]


def find_gpu(name: str) -> GpuSpec:
    """The row for a table key (`rtx-pro-6000`) or an NVML name (`NVIDIA RTX PRO 6000 Blackwell
    Server Edition`). Raises GpuSpecError naming the known GPUs."""
    wanted = " ".join(str(name).lower().replace("nvidia", " ").split())
    for spec in GPU_SPECS:
        if wanted == spec.key or wanted == spec.label.lower():
            return spec
    for spec in GPU_SPECS:
        if any(pattern in wanted for pattern in spec.nvml_names):
            return spec
    raise GpuSpecError(f"GPU {name!r} is not in the roofline table (known: {', '.join(known_gpus())}); "
                       f"set [roofline] gpu = one of them, or hbm_gbps and the *_tflops peaks, in the profile")


def with_overrides(base: GpuSpec | None, overrides: Mapping[str, Any], where: str) -> GpuSpec:
    """`base` with the profile's `[roofline]` figures applied. Without a base every figure must
    be given. Values must be positive numbers; the message names the key and `where`."""
    values: dict[str, float] = {}
    for key in _OVERRIDE_KEYS:
        if key not in overrides:
            continue
        value = overrides[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise GpuSpecError(f"{where}: key 'roofline.{key}': expected a positive number, got {value!r}")
        values[key] = float(value)
    if base is None:
        missing = [k for k in ("hbm_gbps", "fp8_tflops", "bf16_tflops") if k not in values]
        if missing:
            raise GpuSpecError(f"{where}: no GPU named for the roofline; set [roofline] gpu, or "
                               f"{', '.join('roofline.' + k for k in missing)}")
        return GpuSpec("custom", "custom GPU", values["hbm_gbps"], values.get("fp4_tflops"),
                       values["fp8_tflops"], values["bf16_tflops"], f"{where} [roofline]")
    if not values:
        return base
    changed = ", ".join(f"{k}={v:g}" for k, v in values.items())
    return replace(base, source=f"{base.source}; overridden in {where}: {changed}", **values)  # type: ignore[arg-type]  # float fields only
