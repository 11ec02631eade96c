"""GPU facts come from NVML when it is there; otherwise they are unknown, never zero."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gridctl.node import gpus
from gridctl.node.reports import HostFacts, ResourceSample, resources


class _Memory:
    def __init__(self, total_mb: int, used_mb: int) -> None:
        self.total, self.used = total_mb * gpus.MIB, used_mb * gpus.MIB


def _fake_nvml(memories: list[_Memory] | None) -> Any:
    module = types.ModuleType("pynvml")

    def init() -> None:
        if memories is None:
            raise RuntimeError("NVML Shared Library Not Found")

    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(memories or [])  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = lambda h: (memories or [])[h]  # type: ignore[attr-defined]
    return module


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_missing", False)


def test_nvml_reports_count_smallest_memory_and_fullest_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        sys.modules, "pynvml", _fake_nvml([_Memory(81920, 8192), _Memory(40960, 30720)])
    )
    facts = gpus.probe_gpus()
    assert facts == gpus.GpuFacts(count=2, memory_mb=40960, used_percent=75.0)


def test_without_nvml_gpus_are_unknown_and_reported_as_null(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(None))  # library present, driver not
    assert gpus.probe_gpus() is None
    sample = ResourceSample(
        total_mb=8192, available_mb=4096, managed_rss_mb=0, disk_free_mb=1, disk_total_mb=2
    )
    row = resources(HostFacts(host_id="h", capacity_mb=4096), sample)
    assert row["gpu_count"] is None and row["gpu_memory_mb"] is None  # unknown, never 0
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the extra is not installed
    assert gpus.probe_gpus() is None
