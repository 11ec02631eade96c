"""Logical heterogeneous hosts for a scenario, multiplied from the Fleet blueprints.

``fleet/lab-blueprints.yaml`` declares one host of each kind (GPU server,
laptop, office mini, media node, external endpoint); the CLI loads and
validates it and hands the ``Fleet`` in. ``lab_hosts`` lays out ``n`` managed
machines in a fixed kind rotation, varies memory, disk and cached artifacts
per machine from the seed, and adds the external endpoint as inventory (never
actuated). The physics a snapshot cannot carry (transfer speed, relative
compute) is derived here from the blueprint's declared resources.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gridctl.domain import CachedArtifact, Fleet, HostResources, HostSpec, ModelProfile
from gridctl.lab.models import artifact_digest
from gridctl.lab.rng import Stream

ROTATION = ("gpu-server", "mini", "laptop", "media-node", "mini", "laptop", "laptop", "mini")
EXTERNAL_KIND = "external-endpoint"
REFERENCE_GFLOPS = 9000.0
TRANSFER_MB_PER_SECOND = {"gpu-server": 800.0, "mini": 250.0, "laptop": 120.0, "media-node": 400.0}
# memory variants per kind: a machine of that kind gets one of these multiples
MEMORY_VARIANTS = {
    "mini": (1.0, 2.0),
    "laptop": (1.0, 2.0),
    "gpu-server": (1.0,),
    "media-node": (1.0,),
}


@dataclass(frozen=True)
class LabHost:
    """One logical machine: its declared spec plus the physics the lab models."""

    spec: HostSpec
    transfer_mb_per_second: float
    speed: float  # >1 is faster than the reference mini

    @property
    def host_id(self) -> str:
        return self.spec.host_id

    @property
    def kind(self) -> str:
        return self.spec.kind


class BlueprintError(ValueError):
    """The blueprint fleet lacks a kind the lab needs."""


def _blueprints(fleet: Fleet) -> dict[str, HostSpec]:
    found: dict[str, HostSpec] = {}
    for host in fleet.hosts:
        found.setdefault(host.kind, host)
    missing = sorted(set(ROTATION) - set(found))
    if missing:
        raise BlueprintError(f"fleet {fleet.name!r} has no host of kind {', '.join(missing)}")
    return found


def _speed(resources: HostResources) -> float:
    gflops = resources.compute_gflops or REFERENCE_GFLOPS
    ratio: float = (gflops / REFERENCE_GFLOPS) ** 0.35
    return min(3.0, max(0.4, ratio))


def lab_hosts(
    fleet: Fleet, machines: int, models: tuple[ModelProfile, ...], seed: int
) -> tuple[LabHost, ...]:
    """``machines`` managed hosts plus the external endpoint (when the blueprints have one)."""
    if machines < 1:
        raise ValueError(f"machines must be at least 1, got {machines}")
    blueprints = _blueprints(fleet)
    stream = Stream(seed, "fleet")
    names = [m.name for m in models]
    counts: dict[str, int] = {}
    hosts: list[LabHost] = []
    for index in range(machines):
        kind = ROTATION[index % len(ROTATION)]
        counts[kind] = counts.get(kind, 0) + 1
        base = blueprints[kind]
        variants = MEMORY_VARIANTS[kind]
        scale = variants[stream.below(len(variants))]
        res = base.resources
        disk_scale = 0.5 + stream.uniform()
        free = int((res.disk_free_mb or 0) * disk_scale)
        total = max(free, res.disk_total_mb or free)
        resources = replace(
            res,
            capacity_mb=int(res.capacity_mb * scale),
            disk_free_mb=free,
            disk_total_mb=total,
        )
        cached = tuple(
            CachedArtifact(name, artifact_digest(name))
            for name in names
            if stream.uniform() < 0.15  # an earlier user left these weights on disk
        )
        host_id = f"{kind}-{counts[kind]:02d}"
        hosts.append(
            LabHost(
                spec=HostSpec(host_id=host_id, resources=resources, kind=kind, cached=cached),
                transfer_mb_per_second=TRANSFER_MB_PER_SECOND[kind],
                speed=_speed(resources),
            )
        )
    external = next((h for h in fleet.hosts if h.kind == EXTERNAL_KIND), None)
    if external is not None:
        hosts.append(
            LabHost(
                spec=replace(external, host_id="external-01"),
                transfer_mb_per_second=0.0,
                speed=1.0,
            )
        )
    return tuple(hosts)
