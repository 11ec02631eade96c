from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.router.engines import FakeEngine


@pytest.fixture
def engines() -> Iterator[Callable[..., FakeEngine]]:
    started: list[FakeEngine] = []

    def make(name: str, **kw: object) -> FakeEngine:
        engine = FakeEngine(name, **kw).start()  # type: ignore[arg-type]
        started.append(engine)
        return engine

    yield make
    for engine in started:
        engine.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
