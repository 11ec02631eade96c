"""503 reasons come from a per-model table built once per tick, not per request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.controller.test_http_flow import setup  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio


async def test_a_burst_of_503s_builds_the_reason_table_once_per_tick(
    setup: Any,  # noqa: F811
) -> None:
    service, app, _clock, _watch = setup
    built: list[int] = []
    rows = service._model_rows

    def counted() -> list[dict[str, object]]:
        built.append(service.controller.revisions["processed"])
        return rows()

    service._model_rows = counted
    service.controller.tick()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        with service.controller._tick_lock:  # one tick's worth of requests
            answers = [
                await client.post("/v1/chat/completions", json={"model": "gemma"})
                for _ in range(20)
            ]
        assert {a.status_code for a in answers} == {503}
        assert len({a.json()["error"]["message"] for a in answers}) == 1
        assert "gemma" in answers[0].json()["error"]["message"]
        assert len(built) == 1
        service.controller.tick()
        again = await client.post("/v1/chat/completions", json={"model": "gemma"})
    assert again.status_code == 503
    assert len(built) == 2  # a new tick, a new table
