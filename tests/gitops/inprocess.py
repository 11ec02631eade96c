"""An in-process controller (ASGI) for GitOps-surface tests, with simulated nodes.

``api_controller`` has no watched directory (profiles come from applied plans
or the model API); ``desired_dir`` writes a desired-state directory the way an
operator's checkout would look.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from gridctl.cli import plan_cmd
from gridctl.config import load_directory
from gridctl.controller.serving import ControllerService
from gridctl.domain import Mode
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, sim_service


def profile_yaml(name: str, min_replicas: int = 1, memory_mb: int = 640) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: {memory_mb}
          artifact: {{sha256: {GEMMA_SHA}}}
          min_replicas: {min_replicas}
          max_replicas: 2
          min_residency_seconds: 0
          scale_down_cooldown_seconds: 0
        """)


def policy_yaml(mode: str = "automatic") -> str:
    return (
        "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
        f"spec:\n  mode: {mode}\n"
    )


def desired_dir(root: Path, *, mode: str = "automatic", **profiles: int) -> Path:
    """A directory with a policy and one profile per ``name=min_replicas``."""
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob("*.yaml"):
        old.unlink()
    (root / "policy.yaml").write_text(policy_yaml(mode))
    for name, replicas in profiles.items():
        (root / f"{name}.yaml").write_text(profile_yaml(name, replicas))
    return root


@dataclass
class Harness:
    service: ControllerService
    client: httpx.AsyncClient
    clock: Clock
    state_dir: Path

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"X-Grid-Allocator-Token": self.service.operator_token}

    def node(self, host_id: str, **kw: Any) -> SimNode:
        return SimNode.for_controller(self.state_dir, host_id, self.client, self.clock, **kw)

    async def status(self) -> dict[str, Any]:
        response = await self.client.get("/allocator/status")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def model(self, name: str) -> dict[str, Any]:
        rows = [m for m in (await self.status())["models"] if m["model_id"] == name]
        assert rows, f"no status row for {name}"
        return rows[0]

    async def admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return await self.client.request(method, path, headers=self.admin_headers, **kw)

    async def set_mode(self, mode: str) -> None:
        response = await self.admin("PUT", "/allocator/mode", json={"mode": mode})
        response.raise_for_status()

    async def converge(self, nodes: list[SimNode], rounds: int = 8) -> None:
        for _ in range(rounds):
            for node in nodes:
                await node.heartbeat()
            await self.service.probe_once(self.service.upstream)

    async def dry_run(self, directory: Path) -> dict[str, Any]:
        """``POST /allocator/dry-run`` with DIR, exactly as ``gridctl plan --against`` sends it."""
        desired = load_directory(directory)
        body = plan_cmd.candidate_body(desired, str(directory))
        response = await self.admin("POST", "/allocator/dry-run", json=body)
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        return document

    async def saved_plan(self, directory: Path) -> dict[str, Any]:
        """``gridctl plan DIR --against <this controller> --out``, in-process."""
        return plan_cmd.saved_plan(await self.dry_run(directory), str(directory), "http://ctl")

    async def apply_files(self, directory: Path) -> None:
        """Make DIR's profiles the API controller's desired state with PUT/DELETE (no plan)."""
        wanted = {}
        for file in sorted(directory.glob("*.yaml")):
            document = yaml.safe_load(file.read_text())
            if document["kind"] == "ModelProfile":
                wanted[document["metadata"]["name"]] = document
        current = await self.status()
        for row in current["profiles"]:
            name = row["name"] if isinstance(row, dict) else row
            if name not in wanted:
                assert (await self.admin("DELETE", f"/allocator/models/{name}")).status_code == 200
        for name, document in wanted.items():
            response = await self.admin("PUT", f"/allocator/models/{name}", json=document)
            assert response.status_code == 200, response.text

    async def apply(self, plan: dict[str, Any]) -> httpx.Response:
        return await self.admin("POST", "/allocator/apply", json=plan)


@asynccontextmanager
async def controller(
    tmp_path: Path, *, watch: Path | None = None, ticking: bool = True
) -> AsyncIterator[Harness]:
    service, clock = sim_service(tmp_path, watch_dir=watch)
    app = service.build_app()
    if ticking:
        service.start_ticking()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            yield Harness(service, client, clock, tmp_path / "state")
    finally:
        service.stop_ticking()
        service.metrics.close()
        await service.upstream.aclose()


__all__ = ["GEMMA_SHA", "Clock", "Harness", "Mode", "controller", "desired_dir"]
