"""Fixtures shared across test packages: simulated machines in network namespaces."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.netfleet import (
    FAMILY,
    NetFleet,
    NetFleetUnavailable,
    family_namespaces,
    require_netns,
    sweep_stale,
)

# Properties are deterministic by default: each test draws from a seed derived from its
# own name, so a run in CI is the same run everywhere and cannot flake. Exploring for new
# counterexamples is explicit: `pytest --hypothesis-profile=explore` (a random seed per
# run and the local example database, which replays any failure found).
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("ci")
# scripts/mutation runs each mutant against its tests; it caps every property's examples
# (GRIDCTL_MUTATION_EXAMPLES) so a pass over thousands of mutants fits a small machine.
MUTATION_EXAMPLES = int(os.environ.get("GRIDCTL_MUTATION_EXAMPLES", "0"))
# the longest test files start first (tests/scheduling.py); --store-durations records them
pytest_plugins = ["tests.scheduling", "pytester"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if MUTATION_EXAMPLES <= 0:
        return
    for item in items:
        test = getattr(item, "obj", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if isinstance(chosen, settings) and chosen.max_examples > MUTATION_EXAMPLES:
            capped = settings(chosen, max_examples=MUTATION_EXAMPLES)
            test._hypothesis_internal_use_settings = capped  # type: ignore[union-attr]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The controller, router and node serve under uvicorn, which runs asyncio: async
    tests run on that backend alone, whichever others happen to be installed."""
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _session_contexts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fleets shared by a module or the session start before any test's own config
    directory exists: they record their contexts in this run's directory, never the
    user's."""
    before = os.environ.get("GRIDCTL_CONFIG_DIR")
    os.environ["GRIDCTL_CONFIG_DIR"] = str(tmp_path_factory.mktemp("gridctl-session-config"))
    yield
    if before is None:
        os.environ.pop("GRIDCTL_CONFIG_DIR", None)
    else:
        os.environ["GRIDCTL_CONFIG_DIR"] = before


@pytest.fixture(autouse=True)
def _own_contexts(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test (and every process it starts) reads and records contexts in its own
    config directory, never the user's."""
    monkeypatch.setenv("GRIDCTL_CONFIG_DIR", str(tmp_path_factory.mktemp("gridctl-config")))


@pytest.fixture(scope="session")
def netfleet_session() -> Iterator[None]:
    """Sweep namespaces crashed runs left behind; at the end, prove this run left none."""
    try:
        require_netns()
    except NetFleetUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    sweep_stale()
    yield
    mine = f"{FAMILY}-{os.getpid()}-"
    leftovers = [name for name in family_namespaces() if name.startswith(mine)]
    assert not leftovers, f"network namespaces left behind: {leftovers}"


@pytest.fixture
def netfleet(netfleet_session: None) -> Iterator[NetFleet]:
    """An empty fleet (hub bridge only); add machines with `netfleet.add_host(name)`."""
    with NetFleet() as net:
        yield net
