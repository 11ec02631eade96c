"""Store fixtures: every store test runs against SQLite and against a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gridctl.controller.store import ControllerStore
from tests.pgcluster import PgCluster, pg_cluster  # noqa: F401  (a session fixture)

from .storefixtures import FakeClock

StoreOpener = Callable[..., ControllerStore]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pg_location(pg_cluster: PgCluster) -> Any:  # noqa: F811
    from gridctl.controller.stores.postgres import PostgresLocation

    return PostgresLocation(pg_cluster.create_database(), pg_cluster.password_file)


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[StoreOpener]:
    """Opens a store on one backing database; opening again is a controller restart."""
    opened: list[ControllerStore] = []
    if request.param == "postgresql":
        from gridctl.controller.stores.postgres import PostgresBackend

        location = request.getfixturevalue("pg_location")

        def opener(**kw: Any) -> ControllerStore:
            store = ControllerStore(None, clock=clock, backend=PostgresBackend(location), **kw)
            opened.append(store)
            return store
    else:

        def opener(**kw: Any) -> ControllerStore:
            store = ControllerStore(tmp_path, clock=clock, **kw)
            opened.append(store)
            return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: StoreOpener) -> ControllerStore:
    return open_store()
