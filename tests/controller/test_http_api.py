"""Controller API without a watched directory, and a quarantined store seen through status."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.domain import Mode
from tests.controller.simnodes import GEMMA_SHA, Clock


def service_without_watch(state: Path) -> ControllerService:
    return ControllerService(
        ServiceOptions(state_dir=state, watch_dir=None, clock=Clock(2_000_000.0))
    )


@pytest.mark.anyio
async def test_profiles_managed_over_the_api_when_nothing_is_watched(tmp_path: Path) -> None:
    service = service_without_watch(tmp_path / "state")
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    ) as client:
        bad = await client.put(
            "/allocator/models/m1", headers=admin, json={"spec": {"memory_mb": -1}}
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["pointer"] == "/spec/memory_mb"
        unauthenticated = await client.put("/allocator/models/m1", json={"spec": {}})
        assert unauthenticated.status_code == 401
        body = {"spec": {"memory_mb": 640, "artifact": {"sha256": GEMMA_SHA}, "min_replicas": 1}}
        created = await client.put("/allocator/models/m1", headers=admin, json=body)
        assert created.status_code == 200
        service.controller.tick()
        status = (await client.get("/allocator/status")).json()
        assert [p["name"] for p in status["profiles"]] == ["m1"]
        assert status["desired"]["source"] == "api"
        assert status["models"][0]["unmet"]  # no hosts yet: reported, not hidden
        deleted = await client.delete("/allocator/models/m1", headers=admin)
        assert deleted.status_code == 200
        missing = await client.delete("/allocator/models/m1", headers=admin)
        assert missing.status_code == 404
        service.controller.tick()
        status = (await client.get("/allocator/status")).json()
        assert [t["model_id"] for t in status["tombstones"]] == ["m1"]
        assert list(validator("wire/status.schema.json").iter_errors(status)) == []


@pytest.mark.anyio
async def test_corrupt_store_is_quarantined_and_recommend_is_forced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    service_without_watch(state).store.close()
    database = next(state.glob("controller*.sqlite3"))
    database.write_bytes(b"this is not a database" * 100)
    service = service_without_watch(state)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    ) as client:
        status = (await client.get("/allocator/status")).json()
    assert status["mode"]["effective"] == "recommend"
    assert status["mode"]["override"]["mode"] == "recommend"
    assert status["mode"]["override"]["source"] == "quarantine"
    assert any("invalid" in w or "corrupt" in w for w in status["warnings"]), status["warnings"]
    assert list(state.glob("controller*.invalid-*"))


@pytest.mark.anyio
async def test_automatic_is_refused_without_a_durable_state_path() -> None:
    service = ControllerService(ServiceOptions(state_dir=None, watch_dir=None, clock=Clock()))
    mode, refused = service.controller.effective_mode()
    assert mode.value == "recommend"
    with pytest.raises(Exception, match="not durable"):
        service.controller.set_override(Mode.AUTOMATIC)
    assert refused is None or "durable" in refused


@pytest.mark.anyio
async def test_api_profiles_survive_a_controller_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    service = service_without_watch(state)
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    ) as client:
        body = {"spec": {"memory_mb": 640, "min_replicas": 1, "priority": 70}}
        assert (await client.put("/allocator/models/m1", headers=admin, json=body)).is_success
    service.store.close()
    restarted = service_without_watch(state)
    current = restarted.controller.current_desired()
    assert current is not None
    assert [(p.name, p.priority) for p in current.profiles] == [("m1", 70)]
