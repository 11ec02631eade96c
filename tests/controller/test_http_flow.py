"""The controller in-process (ASGI) with simulated nodes speaking the real wire protocol."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import (
    GEMMA_SHA,
    SimNode,
    sim_service,
    watched_dir,
)


def profile(name: str, min_replicas: int = 1, max_replicas: int = 2) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: 640
          artifact: {{sha256: {GEMMA_SHA}}}
          min_replicas: {min_replicas}
          max_replicas: {max_replicas}
          min_residency_seconds: 0
          scale_down_cooldown_seconds: 0
        """)


POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
    "spec:\n  mode: automatic\n"
)


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    watch = watched_dir(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    service, clock = sim_service(tmp_path, watch_dir=watch)
    app = service.build_app()
    service.start_ticking()
    yield service, app, clock, watch
    service.stop_ticking()


async def converge(service: ControllerService, nodes: list[SimNode], rounds: int = 8) -> None:
    for _ in range(rounds):
        for node in nodes:
            await node.heartbeat()
        await service.probe_once(service.upstream)


@pytest.mark.anyio
async def test_cached_model_is_warmed_routed_and_reported(setup: Any) -> None:
    service, app, clock, _ = setup
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ctl") as client:
        node = SimNode.for_controller(
            service.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(service, [node])
        assert [c["kind"] for c in node.executed] == ["warm"]
        command = node.executed[0]
        assert command["controller_id"] and command["plan_generation"].count(":") == 2
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["gemma"]
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": "gemma", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"] == "hi"
        status = (await client.get("/allocator/status")).json()
        errors = list(validator("wire/status.schema.json").iter_errors(status))
        assert errors == []
        assert "engine-key" not in json.dumps(status)
        (row,) = status["models"]
        assert (row["health"], row["sync"], row["ready"]) == ("Healthy", "Synced", 1)


@pytest.mark.anyio
async def test_unknown_model_is_404_and_unserved_configured_model_is_503(setup: Any) -> None:
    _service, app, _clock, _ = setup
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        missing = await client.post(
            "/v1/chat/completions",
            json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "model_not_found"
        unserved = await client.post(
            "/v1/chat/completions",
            json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert unserved.status_code == 503
        assert "gemma" in unserved.json()["error"]["message"]


@pytest.mark.anyio
async def test_credentials_are_host_scoped_and_admin_needs_operator(setup: Any) -> None:
    service, app, clock, _ = setup
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node_a = SimNode.for_controller(service.options.state_dir, "host-a", client, clock)
        impostor = SimNode(host_id="host-b", client=client, token=node_a.token, clock=clock)
        assert (await impostor.register()).status_code == 403
        no_token = await client.put("/allocator/mode", json={"mode": "observe"})
        assert no_token.status_code == 401
        ok = await client.put(
            "/allocator/mode",
            json={"mode": "observe"},
            headers={"X-Grid-Allocator-Token": service.operator_token},
        )
        assert ok.json()["effective"] == "observe"
        refused = await client.put(
            "/allocator/models/x",
            json={},
            headers={"Authorization": f"Bearer {service.operator_token}"},
        )
        assert refused.status_code == 409
        assert "watched directory" in refused.json()["error"]["message"]


@pytest.mark.anyio
async def test_malformed_envelope_is_400_and_changes_nothing(setup: Any) -> None:
    service, app, clock, _ = setup
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(service.options.state_dir, "local-1", client, clock)
        await node.register()
        before = service.registry.host("local-1")
        bad = await client.post(
            "/nodes/local-1/heartbeat",
            headers=node.headers,
            json={"node_id": "local-1", "allocator": {"schema_version": 2}},
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["pointer"] == "/allocator/schema_version"
        assert service.registry.host("local-1") == before
        node.bad_row = True
        await node.heartbeat(request_commands=False)
        record = service.registry.host("local-1")
        assert record is not None and record.state.value == "unhealthy"
        assert "malformed residency row 0" in record.unhealthy_reasons


@pytest.mark.anyio
async def test_scale_up_then_retire(setup: Any) -> None:
    service, app, clock, watch = setup
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        nodes = [
            SimNode.for_controller(
                service.options.state_dir,
                f"local-{i}",
                client,
                clock,
                failure_domain=f"zone-{i}",
                cached={"gemma": GEMMA_SHA},
            )
            for i in (1, 2)
        ]
        for node in nodes:
            await node.register()
        await converge(service, nodes)
        assert len(service.registry.routable("gemma", clock())) == 1
        (watch / "gemma.yaml").write_text(profile("gemma", min_replicas=2))
        service.source.reload()
        clock.now += 5
        await converge(service, nodes)
        assert len(service.registry.routable("gemma", clock())) == 2
        (watch / "gemma.yaml").unlink()
        service.source.reload()
        for _ in range(6):
            clock.now += 5
            await converge(service, nodes, rounds=2)
        assert all(not n.residencies for n in nodes)
        status = (await client.get("/allocator/status")).json()
        assert [t["model_id"] for t in status["tombstones"]] == ["gemma"]


@pytest.mark.anyio
async def test_joined_external_engine_is_routable_inventory(setup: Any) -> None:
    service, app, _clock, _ = setup
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        bad = await client.put(
            "/allocator/external/vendor",
            headers=admin,
            json={"endpoint": "ftp://x", "model_id": "m", "kind": "vllm"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["pointer"] == "/endpoint"
        ok = await client.put(
            "/allocator/external/vendor",
            headers=admin,
            json={
                "endpoint": "https://engine.vendor.test/",
                "model_id": "vendor-model",
                "kind": "openai",
            },
        )
        assert ok.status_code == 200
        await service.probe_once(service.upstream)
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["vendor-model"]
        service.controller.tick()
        assert service.controller.store.pending() == ()  # never actuated
        status = (await client.get("/allocator/status")).json()
        (host,) = status["hosts"]
        assert host["role"] == "external"
        assert host["residencies"][0]["ownership"] == "external"


@pytest.mark.anyio
async def test_destructive_delivery_needs_more_than_30s_of_replacement_lease(
    setup: Any,
) -> None:
    service, app, clock, watch = setup
    (watch / "policy.yaml").write_text(
        POLICY + "  heartbeat_stale_seconds: 45\n  mutation_cooldown_seconds: 0\n"
    )
    (watch / "gemma.yaml").write_text(profile("gemma", min_replicas=2, max_replicas=2))
    service.source.reload()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        nodes = {
            f"local-{i}": SimNode.for_controller(
                service.options.state_dir,
                f"local-{i}",
                client,
                clock,
                failure_domain=f"zone-{i}",
                cached={"gemma": GEMMA_SHA},
            )
            for i in (1, 2)
        }
        for node in nodes.values():
            await node.register()
        await converge(service, list(nodes.values()))
        assert len(service.registry.routable("gemma", clock())) == 2
        (watch / "gemma.yaml").write_text(profile("gemma", min_replicas=1, max_replicas=1))
        service.source.reload()
        service.controller.tick()
        (drain,) = [p.action for p in service.store.pending() if p.action.kind.value == "drain"]
        victim, keeper = (
            nodes[drain.host_id],
            next(n for h, n in nodes.items() if h != drain.host_id),
        )

        async def victim_poll_after(seconds_since_keeper: float) -> list[str]:
            await keeper.heartbeat(request_commands=False)
            await service.probe_once(service.upstream)
            clock.now += seconds_since_keeper
            data = await victim.heartbeat(request_commands=True)
            return [c["kind"] for c in data["allocator"]["commands"]]

        assert await victim_poll_after(31.0) == []  # 29 s of lease left: held back
        assert "held back" in (service.controller.delivery.safety_error or "")
        assert await victim_poll_after(29.0) == ["drain"]  # 31 s left: delivered


@pytest.mark.anyio
async def test_invalid_commit_keeps_the_last_good_revision_in_force(setup: Any) -> None:
    service, app, _clock, watch = setup
    service.controller.tick()
    good = service.controller.current_desired()
    assert good is not None
    (watch / "gemma.yaml").write_text(profile("gemma").replace("memory_mb: 640", "memory_mb: -1"))
    (watch / "extra.yaml").write_text("kind: [unclosed\n")
    assert service.source.reload() is False
    service.controller.tick()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        status = (await client.get("/allocator/status")).json()
    desired = status["desired"]
    assert desired["revision"] == good.revision == desired["last_good_revision"]
    assert desired["rejected_revision"] == desired["latest_seen_revision"] != good.revision
    errors = desired["rejected"][-1]["errors"]
    assert {(Path(e["file"]).name, e["line"], e["pointer"]) for e in errors} >= {
        ("gemma.yaml", 5, "/spec/memory_mb"),
    }
    assert any(Path(e["file"]).name == "extra.yaml" for e in errors)
    assert service.controller.current_desired() == good  # nothing half-applied
    (watch / "extra.yaml").unlink()
    (watch / "gemma.yaml").write_text(profile("gemma", min_replicas=2))
    assert service.source.reload() is True
    current = service.controller.current_desired()
    assert current is not None and current.profile("gemma").min_replicas == 2
