"""The embedded default's shipped profile on real processes: GGUF header read, no ChatML."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from tests.e2e.harness import GEMMA, ROOT, Fleet, make_fleet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
SHIPPED = ROOT / "policies" / "models" / "gemma-3-270m.yaml"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", SHIPPED.read_text())
    fleet.repo.commit("the shipped gemma profile")
    yield fleet
    fleet.stop()


def test_the_embedded_default_answers_without_chatml_tokens(fleet: Fleet) -> None:
    fleet.start(machines=1)
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    wait_for("gemma routable", lambda: len(fleet.routable(GEMMA)) >= 1, deadline=300)
    answers = [
        client.chat.completions.create(
            model=GEMMA, messages=[{"role": "user", "content": prompt}], max_tokens=24
        )
        .choices[0]
        .message.content
        or ""
        for prompt in ("Say hello.", "What is the capital of France?")
    ]
    assert all(answer.strip() for answer in answers)
    assert not any("<|im_" in answer for answer in answers), answers
    row = next(m for m in fleet.status()["models"] if m["model_id"] == GEMMA)
    assert row["chat_template"] == "gemma" and row["warnings"] == []
    assert row["gguf"]["architecture"] == "gemma3" and row["gguf"]["chat_template"] is False
    assert (row["gguf"]["block_count"], row["gguf"]["context_length"]) == (18, 32768)
    node_dir = str(fleet.state_dir / "local-1")
    listed = subprocess.run(
        [sys.executable, "-m", "gridctl", "artifacts", "ls", "--json", "--state-dir", node_dir],
        capture_output=True,
        text=True,
        check=True,
    )
    entry = next(a for a in json.loads(listed.stdout)["artifacts"] if a["model_id"] == GEMMA)
    assert entry["provenance"] == "demand" and entry["last_used_at"] is not None
    assert entry["size_bytes"] == 253_113_024
