"""503 reasons come from a per-model table the tick thread builds; a burst of requests
for a model with no ready replica builds nothing on the serving loop, and ticks while
nobody is answered a 503 build nothing at all."""

from __future__ import annotations

from typing import Any

import pytest

from tests.controller.test_heartbeat_scale import quiet  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio


async def test_a_burst_of_503s_reads_the_reason_table_of_the_last_tick(
    quiet: Any,  # noqa: F811
) -> None:
    service, client, _clock = quiet
    built: list[int] = []
    rows = service._model_rows

    def counted() -> list[dict[str, object]]:
        built.append(service.controller.view.ticks)
        return rows()

    service._model_rows = counted  # type: ignore[method-assign]
    async with client:
        before = await client.post(
            "/v1/chat/completions",
            json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert before.status_code == 503
        assert "no plan yet" in before.json()["error"]["message"]
        service.controller.tick()
        assert len(built) == 1
        answers = [
            await client.post(
                "/v1/chat/completions",
                json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
            )
            for _ in range(20)
        ]
        assert {a.status_code for a in answers} == {503}
        assert len({a.json()["error"]["message"] for a in answers}) == 1
        assert "gemma" in answers[0].json()["error"]["message"]
        assert "no plan yet" not in answers[0].json()["error"]["message"]
        assert len(built) == 1  # twenty 503s, no table built
        service.controller.tick()
        again = await client.post(
            "/v1/chat/completions",
            json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert again.status_code == 503
        assert built == [1, 2]  # one table per tick, built after it
        service.controller.tick()  # answered the 503 above: rebuilt after this tick
        service.controller.tick()  # nobody asked since: nothing built
        service.controller.tick()
        assert built == [1, 2, 3]
        late = await client.post(
            "/v1/chat/completions",
            json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert late.status_code == 503
        assert built == [1, 2, 3]  # the first 503 after quiet ticks reads the last table
        assert late.json()["error"]["message"] == answers[0].json()["error"]["message"]
        service.controller.tick()  # and asks the next tick for a fresh one
        assert built == [1, 2, 3, 6]
