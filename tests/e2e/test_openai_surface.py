"""The router's whole OpenAI surface on real llama-server children, with the openai client.

A profile declares the endpoints its replicas serve; the node starts
llama-server with ``--embeddings`` when embeddings are declared, so
``completions.create`` and ``embeddings.create`` go through the router to the
engine, and a request for an endpoint a model's profile does not declare is
refused by the router with a 400 naming it (never proxied to an engine that
would answer with its own error).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.e2e.harness import GEMMA, Fleet, make_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
CHAT_ONLY = "gemma-chat-only"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    every = "  endpoints: [chat, completions, embeddings]\n"
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, extra=every))
    chat_only = profile_yaml(
        CHAT_ONLY, min_replicas=0, max_replicas=1, extra="  endpoints: [chat]\n"
    )
    fleet.repo.write("chat-only.yaml", chat_only)
    fleet.repo.commit("gemma on every endpoint, a chat-only profile")
    yield fleet
    fleet.stop()


def test_completions_and_embeddings_through_the_router(fleet: Fleet) -> None:
    fleet.start(machines=1)
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    try:
        wait_for("gemma routable", lambda: len(fleet.routable(GEMMA)) >= 1, deadline=300)
    except AssertionError as exc:  # say what the fleet did, not only that it timed out
        raise AssertionError(f"{exc}\n{fleet.log()[-6000:]}") from exc

    completion = client.completions.create(
        model=GEMMA, prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert completion.object == "text_completion"
    assert completion.choices[0].text.strip()
    assert completion.usage is not None and 0 < completion.usage.completion_tokens <= 8

    embedded = client.embeddings.create(model=GEMMA, input=["hello", "a second input"])
    row = next(m for m in fleet.status()["models"] if m["model_id"] == GEMMA)
    length = row["gguf"]["embedding_length"]
    assert length == 640  # Gemma 3 270M's hidden size, read from the GGUF header
    assert [len(item.embedding) for item in embedded.data] == [length, length]
    assert embedded.data[0].embedding != embedded.data[1].embedding

    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=CHAT_ONLY, input="hello")
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "endpoint_not_served"
    assert "/v1/embeddings" in error["message"] and "[chat]" in error["message"]
    # the refusal is the router's: no engine was started for the chat-only model
    assert fleet.live_copies(CHAT_ONLY) == []
