"""A profile's declared endpoints gate the router's OpenAI surface before any engine is asked."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.router.engines import MODEL, FakeEngine, RouterRig, chat

MakeEngine = Callable[..., FakeEngine]


@pytest.mark.anyio
async def test_an_undeclared_endpoint_is_refused_with_a_400_naming_it(engines: MakeEngine) -> None:
    engine = engines("only")
    rig = RouterRig.build(endpoints=("chat",))
    rig.add(engine)
    async with rig.client() as client:
        refused = await client.post("/v1/embeddings", json={"model": MODEL, "input": "hi"})
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "endpoint_not_served"
        assert error["type"] == "invalid_request_error"
        assert "/v1/embeddings" in error["message"] and "[chat]" in error["message"]
        completions = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
        assert completions.status_code == 400
        assert "/v1/completions" in completions.json()["error"]["message"]
        assert engine.posts == 0  # never proxied
        assert (await chat(client)).status_code == 200
        assert engine.posts == 1
    assert rig.registry.active_requests("only", MODEL) == 0  # no slot was taken


@pytest.mark.anyio
async def test_declared_endpoints_are_routed(engines: MakeEngine) -> None:
    engine = engines("every")
    rig = RouterRig.build(endpoints=("chat", "completions", "embeddings"))
    rig.add(engine)
    async with rig.client() as client:
        embedded = await client.post("/v1/embeddings", json={"model": MODEL, "input": "hi"})
        completed = await client.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
        assert (embedded.status_code, completed.status_code) == (200, 200)
    assert engine.posts == 2


@pytest.mark.anyio
async def test_other_methods_and_paths_go_on_to_the_routes(engines: MakeEngine) -> None:
    """``ProxyFront`` answers only POSTs to the forwarded paths; the routes answer the rest
    as before (a 405 for another method, a redirect for a trailing slash)."""
    engine = engines("front")
    rig = RouterRig.build()
    rig.add(engine)
    async with rig.client() as client:
        assert (await client.get("/v1/chat/completions")).status_code == 405
        assert (await client.post("/v1/chat/completions/")).status_code == 307  # as before
        assert (await client.post("/v1/models")).status_code == 405
        assert (await client.get("/v1/models")).json()["data"][0]["id"] == MODEL
        assert (await chat(client)).status_code == 200
    assert engine.posts == 1
