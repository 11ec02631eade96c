"""Desired state: everything one revision of the watched directory declares."""

from __future__ import annotations

from dataclasses import dataclass, field

from gridctl.domain.fleet import HostSpec
from gridctl.domain.policy import ControllerPolicy, WorkloadCatalog
from gridctl.domain.profiles import ModelProfile


@dataclass(frozen=True)
class Fleet:
    """A named set of logical hosts (YAML kind ``Fleet``)."""

    name: str
    hosts: tuple[HostSpec, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class DesiredState:
    """One loaded, validated revision. Profiles are sorted by name."""

    revision: str
    dirty: bool
    profiles: tuple[ModelProfile, ...] = ()
    policy: ControllerPolicy = field(default_factory=ControllerPolicy)
    catalog: WorkloadCatalog = field(default_factory=WorkloadCatalog)
    fleets: tuple[Fleet, ...] = ()
    documents: int = 0

    def profile(self, name: str) -> ModelProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None
