"""Print every field moe-tui's sampler reads for each GPU, plus a few extra read-only NVML
queries, to see what a machine supports ("n/a" = unsupported) and what one sample costs.

    python tools/nvml_probe.py [--count 3] [--interval 1.0]

Read-only: it never changes a clock, a power limit or any other GPU setting.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui.telemetry import GpuSample, NvmlSampler  # noqa: E402


def extra_queries(index: int) -> dict[str, str]:
    """Queries the sampler does not make, answered as a value or the NVML error's name."""
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    queries = {
        "cuda_compute_capability": lambda: pynvml.nvmlDeviceGetCudaComputeCapability(h),
        "pci_bus_id": lambda: pynvml.nvmlDeviceGetPciInfo(h).busId,
        "pstate": lambda: pynvml.nvmlDeviceGetPerformanceState(h),
        "total_energy_mJ": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
        "pcie_tx_KBps": lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
        "pcie_rx_KBps": lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
        "fan_speed_pct": lambda: pynvml.nvmlDeviceGetFanSpeed(h),
        "nvlink0_state": lambda: pynvml.nvmlDeviceGetNvLinkState(h, 0),
        "persistence_mode": lambda: pynvml.nvmlDeviceGetPersistenceMode(h),
        "ecc_mode_current": lambda: pynvml.nvmlDeviceGetEccMode(h)[0],
        "mig_mode_current": lambda: pynvml.nvmlDeviceGetMigMode(h)[0],
        "max_mem_clock_MHz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "supported_clock_events": lambda: hex(pynvml.nvmlDeviceGetSupportedClocksEventReasons(h)),
        "temp_slowdown_threshold_C": lambda: pynvml.nvmlDeviceGetTemperatureThreshold(
            h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "power_limit_default_mW": lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h),
        "graphics_processes": lambda: len(pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)),
    }
    out = {}
    for name, fn in queries.items():
        try:
            out[name] = repr(fn())
        except pynvml.NVMLError as exc:
            out[name] = f"n/a ({type(exc).__name__}: {exc})"
        except (AttributeError, TypeError) as exc:
            out[name] = f"n/a (binding: {exc})"
    return out


def print_sample(sample: GpuSample) -> None:
    print(f"GPU {sample.index}")
    for f in fields(GpuSample):
        value = getattr(sample, f.name)
        print(f"  {f.name:<22} {'n/a' if value is None else value!r}")
    print(f"  {'clock_events':<22} {sample.clock_events!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1, help="samples to print (default 1)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--no-extra", action="store_true", help="skip the extra queries")
    args = parser.parse_args(argv)

    sampler = NvmlSampler()
    for n in range(args.count):
        start = time.perf_counter()
        snap = sampler.sample()
        cost = time.perf_counter() - start
        if not snap.available:
            print(snap.reason)
            return 0
        if n == 0:
            print(f"driver {snap.driver_version}  CUDA {snap.cuda_driver_version}  "
                  f"NVML {snap.nvml_version}  nvmlInit {sampler.init_seconds * 1e3:.2f} ms  "
                  f"GPUs {len(snap.gpus)}")
        print(f"--- sample {n + 1}/{args.count} at wall {snap.wall:.3f}: "
              f"{cost * 1e3:.3f} ms for {len(snap.gpus)} GPU(s)")
        for gpu in snap.gpus:
            print_sample(gpu)
            if n == 0 and not args.no_extra:
                for name, value in extra_queries(gpu.index).items():
                    print(f"  extra.{name:<22} {value}")
        if n + 1 < args.count:
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
