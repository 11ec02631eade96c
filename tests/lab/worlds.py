"""Small lab worlds built from the shipped blueprints and workload catalog."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from gridctl.config import check_directory
from gridctl.domain import Fleet, WorkloadCatalog
from gridctl.lab.scenario import ScenarioConfig, World, build_world

ROOT = Path(__file__).resolve().parents[2]


@cache
def blueprints() -> Fleet:
    state = check_directory(ROOT / "fleet" / "lab-blueprints.yaml").state
    assert state is not None
    return state.fleets[0]


@cache
def catalog() -> WorkloadCatalog:
    state = check_directory(ROOT / "policies" / "workloads.yaml").state
    assert state is not None
    return state.catalog


def small_world(
    machines: int = 2, models: int = 4, users: int = 12, minutes: int = 12, seed: int = 42
) -> World:
    return build_world(
        ScenarioConfig(machines, models, users, minutes, seed), blueprints(), catalog()
    )
