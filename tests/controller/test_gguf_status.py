"""Status shows the GGUF header a node reported, and warns when no chat template applies."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.cli.status_cmd import render_status
from gridctl.config.schemas import validator
from gridctl.controller.statusdoc import NO_TEMPLATE_WARNING
from tests.controller.simnodes import GEMMA_SHA, SimNode, sim_service
from tests.controller.test_http_flow import POLICY, converge

HEADER = {
    "architecture": "gemma3",
    "block_count": 18,
    "context_length": 32768,
    "embedding_length": 640,
    "chat_template": False,
    "name": "Gemma 3 270m",
}


def profile(name: str, template: str | None) -> str:
    line = f"\n  chat_template: {template}" if template else ""
    return (
        textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: 640
          artifact: {{sha256: {GEMMA_SHA}}}
          min_replicas: 1
          min_residency_seconds: 0""")
        + line
        + "\n"
    )


class HeaderNode(SimNode):
    def envelope(self) -> dict[str, Any]:
        envelope = super().envelope()
        for row in envelope["cached_models"]:
            row["gguf"] = HEADER
        envelope["transfers"] = [
            {"model_id": "other", "artifact_sha256": "b" * 64, "source": "hf://a/b/c.gguf",
             "bytes_done": 50, "bytes_total": 200, "rate_bytes_per_second": 10.0}
        ]  # fmt: skip
        return envelope


@pytest.mark.anyio
async def test_status_shows_the_header_and_warns_without_a_template(tmp_path: Path) -> None:
    files = {
        "bare.yaml": profile("bare", None),
        "named.yaml": profile("named", "gemma"),
        "policy.yaml": POLICY,
    }
    service, clock = sim_service(tmp_path, files)
    app = service.build_app()
    service.start_ticking()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            node = HeaderNode.for_controller(
                service.options.state_dir, "local-1", client, clock,
                cached={"bare": GEMMA_SHA, "named": GEMMA_SHA},
            )  # fmt: skip
            assert (await node.register()).status_code == 200
            await converge(service, [node], rounds=3)
            status = (await client.get("/allocator/status")).json()
    finally:
        service.stop_ticking()
    assert list(validator("wire/status.schema.json").iter_errors(status)) == []
    rows = {m["model_id"]: m for m in status["models"]}
    assert rows["bare"]["gguf"] == HEADER and rows["bare"]["warnings"] == [NO_TEMPLATE_WARNING]
    assert rows["named"]["chat_template"] == "gemma" and rows["named"]["warnings"] == []
    (host,) = status["hosts"]
    assert host["transfers"][0]["percent"] == 25.0
    text = render_status(status)
    assert f"warning: bare: {NO_TEMPLATE_WARNING}" in text
    assert "fetching other: 25.0% of 0.0 MB from hf://a/b/c.gguf" in text
