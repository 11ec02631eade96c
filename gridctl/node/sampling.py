"""Measuring the machine for heartbeats: memory (psutil) and the artifact disk.

Kept apart from the pure report builder so heartbeats can be tested with fixed
samples. The sensor-driven protection loop (battery, thermal, activity) will
extend this later.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import psutil

from gridctl.node.records import ResidencyRecord
from gridctl.node.reports import ResourceSample

MIB = 1024 * 1024


def managed_rss_mb(records: Iterable[ResidencyRecord]) -> int:
    """Resident memory of our live, proven children (counted exactly once)."""
    total = 0
    for record in records:
        if record.identity is None or record.fenced:
            continue
        try:
            proc = psutil.Process(record.identity.pid)
            if abs(proc.create_time() - record.identity.create_time) > 0.05:
                continue
            total += proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total // MIB


def processes_rss_mb(pids: Iterable[int]) -> int:
    """Resident memory of other processes this node runs (a split's stage servers)."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total // MIB


def sample_resources(
    artifact_root: Path, records: Iterable[ResidencyRecord], other_pids: Iterable[int] = ()
) -> ResourceSample:
    """One sample of the machine. ``other_pids``: processes the node runs besides its
    engines (a split's stage servers), managed memory too, never an external workload's."""
    memory = psutil.virtual_memory()
    disk = shutil.disk_usage(artifact_root)
    return ResourceSample(
        total_mb=int(memory.total // MIB),
        available_mb=int(memory.available // MIB),
        managed_rss_mb=managed_rss_mb(records) + processes_rss_mb(other_pids),
        disk_free_mb=int(disk.free // MIB),
        disk_total_mb=int(disk.total // MIB),
    )
