"""The embedded default answers like a chatbot: `gridctl up` on the shipped ``policies/``
(two logical hosts, as `scripts/up` starts it), then `gridctl chat "What is the capital of
France?"` with no ``-m`` goes through the router to the instruction-tuned SmolLM2 and prints
an answer, not the prompt echoed back. Gemma stays served as the second model: named, it
still completes text; its base-model template is set by its profile, SmolLM2's comes from
its own GGUF."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import (
    GEMMA,
    ROOT,
    SMOLLM,
    Fleet,
    embedded_default_repo,
    engine_port_base,
    free_port,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
QUESTION = "What is the capital of France?"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(
        repo=embedded_default_repo(tmp_path / "desired"),
        state_dir=tmp_path / "state",
        port=free_port(),
        engine_port_base=engine_port_base(),
    )
    fleet.start(machines=2)
    yield fleet
    fleet.stop()


def chat(fleet: Fleet, *argv: str) -> subprocess.CompletedProcess[str]:
    """`gridctl chat` as an operator types it, against this fleet (not whatever context is
    current on the machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDCTL_")}
    return subprocess.run(
        [sys.executable, "-m", "gridctl", "chat", "--controller", fleet.url, *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def both_routable(fleet: Fleet) -> bool:
    return bool(fleet.routable(SMOLLM)) and bool(fleet.routable(GEMMA))


def test_plain_chat_is_answered_by_the_chat_model(fleet: Fleet) -> None:
    try:
        wait_for("both shipped models routable", lambda: both_routable(fleet), deadline=300)
    except AssertionError:
        print(fleet.log())
        raise

    # the acceptance: no -m, the router picks the chat model, the answer is not an echo
    plain = chat(fleet, QUESTION)
    assert plain.returncode == 0, plain.stderr
    assert "Traceback" not in plain.stderr
    answer = plain.stdout.strip()
    print(f"answer: {answer!r}")
    assert answer, plain
    assert QUESTION.lower() not in answer.lower(), answer
    assert "<|im_" not in answer, answer
    served = json.loads(chat(fleet, "--json", QUESTION).stdout)
    assert served["model"] == SMOLLM, served
    assert served["choices"][0]["message"]["content"].strip()

    # SmolLM2 speaks its GGUF's own template; Gemma's profile names gemma's (base model)
    rows = {m["model_id"]: m for m in fleet.status()["models"]}
    assert rows[SMOLLM]["chat_template"] is None and rows[SMOLLM]["warnings"] == []
    assert rows[SMOLLM]["gguf"]["chat_template"] is True
    assert rows[GEMMA]["chat_template"] == "gemma" and rows[GEMMA]["warnings"] == []

    # the second identity: Gemma, named, completes text through the same router
    completed = httpx.post(
        fleet.url + "/v1/completions",
        json={"model": GEMMA, "prompt": "The capital of France is", "max_tokens": 8},
        timeout=120,
    )
    assert completed.status_code == 200, completed.text
    body = completed.json()
    assert body["model"] == GEMMA and body["choices"][0]["text"].strip(), body
