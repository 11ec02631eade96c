"""What GPUs this machine has, through NVML where it is present (``nvidia-ml-py``).

A machine without NVML (no NVIDIA driver, or the ``gpu`` extra not installed)
reports its GPUs as unknown — ``None`` — never as zero: zero would tell the
planner and the protection loop something nobody measured.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gridctl.node")

MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuFacts:
    count: int
    memory_mb: int  # of the smallest GPU (what a model that must fit on one can count on)
    used_percent: float | None  # the fullest GPU's memory use right now


_missing = False  # the import failed once: do not search the path on every sample


def _nvml() -> Any | None:
    global _missing
    if _missing:
        return None
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        _missing = True
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.debug("NVML unavailable: %s", exc)
        return None
    return pynvml


def probe_gpus() -> GpuFacts | None:
    """The GPUs NVML sees, or ``None`` when this machine cannot tell."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        memories = [nvml.nvmlDeviceGetMemoryInfo(h) for h in handles]
    except Exception as exc:
        log.warning("NVML could not list GPUs: %s", exc)
        return None
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            nvml.nvmlShutdown()
    if not memories:
        return GpuFacts(count=0, memory_mb=0, used_percent=None)
    return GpuFacts(
        count=len(memories),
        memory_mb=min(int(m.total) // MIB for m in memories),
        used_percent=max(100.0 * int(m.used) / max(1, int(m.total)) for m in memories),
    )
