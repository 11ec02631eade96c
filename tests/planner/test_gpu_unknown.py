"""A host that cannot tell its GPUs is not eligible for a model that needs them."""

from __future__ import annotations

import dataclasses

from gridctl.domain import HostResources
from gridctl.planner.eligibility import gpu_count, gpu_memory
from gridctl.planner.rejections import RejectionCode


class _View:
    def __init__(self, resources: HostResources) -> None:
        self.host = type("Host", (), {"resources": resources})()


def test_unknown_gpus_reject_a_gpu_model_and_never_count_as_zero() -> None:
    from gridctl.domain import ModelProfile

    profile = ModelProfile(name="big", memory_mb=1000, min_gpu_count=1, min_gpu_memory_mb=8000)
    unknown = _View(HostResources(capacity_mb=1000, gpu_count=None, gpu_memory_mb=None))
    count = gpu_count(profile, unknown)  # type: ignore[arg-type]
    memory = gpu_memory(profile, unknown)  # type: ignore[arg-type]
    assert count is not None and count.code is RejectionCode.GPU_COUNT
    assert "unknown" in count.detail
    assert memory is not None and "unknown" in memory.detail
    known = _View(HostResources(capacity_mb=1000, gpu_count=2, gpu_memory_mb=16000))
    assert gpu_count(profile, known) is None  # type: ignore[arg-type]
    assert gpu_memory(profile, known) is None  # type: ignore[arg-type]
    cpu = dataclasses.replace(profile, min_gpu_count=0, min_gpu_memory_mb=0)
    assert gpu_count(cpu, unknown) is None  # type: ignore[arg-type]
