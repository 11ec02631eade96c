"""Lease renewals: a heartbeat naming the digest of the host's last full inventory and
carrying none of it. The controller moves only liveness and load for it, asks for the
full inventory when it does not hold that digest, and still takes an old node's full
heartbeat without one (the real app in process, and the registry on its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.controller.registry import Registry, is_lease
from gridctl.controller.serving import ControllerService
from gridctl.errors import WireError
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, SimResidency, sim_service
from tests.controller.test_http_flow import POLICY, profile

pytestmark = pytest.mark.anyio


@pytest.fixture
def quiet(tmp_path: Path) -> Iterator[tuple[ControllerService, httpx.AsyncClient, Clock]]:
    """The real service and app with no tick thread: the test decides when ticks run."""
    service, clock = sim_service(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    )
    yield service, client, clock


def path(host: SimNode) -> str:
    return f"/nodes/{host.host_id}/heartbeat"


async def register(host: SimNode, digest: str | None) -> None:
    body = {
        "role": "allocator",
        "host_id": host.host_id,
        "models": [],
        "resources": host.resources(),
        "allocator": host.envelope(),
    }
    if digest is not None:
        body["inventory_digest"] = digest
    answer = await host.client.put(f"/nodes/{host.host_id}", json=body, headers=host.headers)
    answer.raise_for_status()


async def full(host: SimNode, digest: str | None, **extra: Any) -> httpx.Response:
    body = {
        "node_id": host.host_id,
        "resources": host.resources(),
        "allocator": host.envelope(),
        "request_commands": False,
        "acknowledgements": [],
        **extra,
    }
    if digest is not None:
        body["inventory_digest"] = digest
    return await host.client.post(path(host), json=body, headers=host.headers)


async def lease(host: SimNode, digest: Any, **extra: Any) -> httpx.Response:
    body = {"node_id": host.host_id, "inventory_digest": digest, "request_commands": False}
    return await host.client.post(path(host), json={**body, **extra}, headers=host.headers)


def serving_node(service: ControllerService, client: httpx.AsyncClient, clock: Clock) -> SimNode:
    host = SimNode.for_controller(service.options.state_dir, "local-1", client, clock)
    host.cached["gemma"] = GEMMA_SHA
    host.residencies["gemma"] = SimResidency("gemma", 640, "ready", GEMMA_SHA, clock() - 60)
    return host


async def test_a_lease_moves_liveness_and_load_and_nothing_of_the_inventory(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        await register(host, "d1")
        before = service.registry.host("local-1")
        assert before is not None and before.inventory_digest == "d1"
        clock.now += 4.0
        host.residencies.clear()  # what the node holds now is not what the lease says
        answer = await lease(host, "d1", load={"queue_depth": 3, "active_tasks": 1})
        assert answer.status_code == 200, answer.text
        assert "send_full_inventory" not in answer.json()
        after = service.registry.host("local-1")
        assert after is not None and after.last_heartbeat == clock() == before.last_heartbeat + 4
        assert (after.queue_depth, after.active_tasks) == (3, 1)
        # the facts are the very objects the full inventory gave: nothing was rebuilt
        assert after.residencies is before.residencies and after.routes is before.routes
        assert after.resources is before.resources and after.cached is before.cached
        assert after.inventory_digest == "d1"


async def test_an_unknown_digest_asks_for_the_full_inventory_and_then_leases_hold(
    quiet: Any,
) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        await register(host, "d1")
        before = service.registry.host("local-1")
        clock.now += 2.0
        answer = await lease(host, "d2")
        assert answer.status_code == 200 and answer.json()["send_full_inventory"] is True
        assert service.registry.host("local-1") == before  # not even liveness moved
        host.residencies.clear()
        assert (await full(host, "d2")).status_code == 200
        taken = service.registry.host("local-1")
        assert taken is not None and taken.residencies == () and taken.inventory_digest == "d2"
        clock.now += 5.0
        answer = await lease(host, "d2")
        assert answer.status_code == 200 and "send_full_inventory" not in answer.json()
        renewed = service.registry.host("local-1")
        assert renewed is not None and renewed.last_heartbeat == clock()
        assert service.registry.heartbeat_kinds == {"full": 1, "lease": 1, "inventory_asked": 1}
        metrics = (await client.get("/metrics")).text
        assert 'gridctl_heartbeats_total{kind="inventory_asked"} 1.0' in metrics


async def test_an_old_nodes_full_heartbeat_still_works_and_labels_nothing(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        await host.register()  # no digest anywhere: an old node
        clock.now += 5.0
        host.residencies.clear()
        data = await host.heartbeat(request_commands=False)
        assert "send_full_inventory" not in data
        record = service.registry.host("local-1")
        assert record is not None and record.residencies == () and record.last_heartbeat == clock()
        assert record.inventory_digest is None
        answer = await lease(host, "d1")  # a lease to it can only ask for the inventory
        assert answer.json()["send_full_inventory"] is True


async def test_a_heartbeat_without_an_envelope_keeps_the_label(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        await register(host, "d1")
        body = {
            "node_id": "local-1",
            "resources": host.resources(),
            "inventory_digest": "d9",
            "request_commands": False,
        }
        assert not is_lease(body)  # it carries resources: the old partial heartbeat
        answer = await client.post(path(host), json=body, headers=host.headers)
        assert answer.status_code == 200
        record = service.registry.host("local-1")
        assert record is not None and record.inventory_digest == "d1"


@pytest.mark.parametrize(
    ("extra", "pointer"),
    [
        ({"inventory_digest": 5}, "/inventory_digest"),
        ({"inventory_digest": ""}, "/inventory_digest"),
        ({"inventory_digest": "d1\n"}, "/inventory_digest"),
        ({"load": {"queue_depth": -1}}, "/load/queue_depth"),
        ({"acknowledgements": "all"}, "/acknowledgements"),
        ({"boot_id": "b1"}, "/sequence"),
    ],
)
async def test_a_malformed_lease_is_400_naming_the_field_and_changes_nothing(
    quiet: Any, extra: dict[str, Any], pointer: str
) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        await register(host, "d1")
        before = service.registry.host("local-1")
        revisions = service.controller.revisions.snapshot()
        clock.now += 3.0
        bad = await lease(host, "d1", **extra)
        assert bad.status_code == 400, bad.text
        assert bad.json()["error"]["pointer"] == pointer
        assert service.registry.host("local-1") == before
        assert service.controller.revisions.snapshot() == revisions
        # nothing of the host's report order was taken either: a good lease follows
        good = await lease(host, "d1", boot_id="b1", sequence=1)
        assert good.status_code == 200 and "send_full_inventory" not in good.json()


async def test_a_lease_to_a_controller_that_never_saw_the_host_is_refused(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        answer = await lease(host, "d1")
        assert answer.status_code == 400 and "not registered" in answer.text
        assert service.registry.host("local-1") is None


async def test_a_replayed_lease_is_refused(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        host = serving_node(service, client, clock)
        await register(host, "d1")
        assert (await lease(host, "d1", boot_id="b1", sequence=5)).status_code == 200
        before = service.registry.host("local-1")
        clock.now += 1.0
        replay = await lease(host, "d1", boot_id="b1", sequence=5)
        assert replay.status_code == 409
        assert service.registry.host("local-1") == before


async def test_an_unchanged_lease_under_a_fresh_plan_is_no_planning_input(quiet: Any) -> None:
    service, client, clock = quiet
    ctl = service.controller
    async with client:
        host = serving_node(service, client, clock)
        await register(host, "d1")
        assert (await lease(host, "d1")).status_code == 200
        ctl.tick()
        ctl.wake.clear()
        clock.now += 1.0
        assert (await lease(host, "d1")).status_code == 200
        assert not ctl.wake.is_set()
        assert ctl.revisions["processed"] == ctl.revisions["dirty"]
        answer = await lease(host, "d1", load={"queue_depth": 4})  # load is news
        assert answer.status_code == 200 and ctl.wake.is_set()


# --- the registry on its own: any sequence of full reports and leases ----------------------

NOW = 1_000_000.0


def envelope(models: tuple[str, ...]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "state": "accepting",
        "cached_models": [{"model_id": m, "artifact_sha256": GEMMA_SHA} for m in models],
        "residencies": [],
        "actuator_capabilities": ["load", "warm", "drain", "unload"],
    }


RESOURCES = {"capacity_mb": 4096, "failure_domain": "zone-a", "runtimes": ["llama.cpp"]}
INVENTORIES = st.lists(st.sampled_from(["m1", "m2", "m3"]), unique=True).map(
    lambda models: tuple(sorted(models))
)
MESSAGES = st.lists(
    st.one_of(
        st.tuples(st.just("full"), st.sampled_from(["d1", "d2", "d3"]), INVENTORIES),
        st.tuples(st.just("lease"), st.sampled_from(["d1", "d2", "d3"]), st.just(())),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(first=INVENTORIES, messages=MESSAGES)
def test_the_view_of_a_host_is_its_last_full_inventory_whatever_leases_follow(
    first: tuple[str, ...], messages: list[tuple[str, str, tuple[str, ...]]]
) -> None:
    registry = Registry()
    body = {"role": "allocator", "host_id": "h1", "resources": RESOURCES}
    registry.register("h1", {**body, "allocator": envelope(first), "inventory_digest": "d0"}, NOW)
    last_full, held, now = first, "d0", NOW
    for kind, digest, models in messages:
        now += 5.0
        before = registry.host("h1")
        assert before is not None
        if kind == "full":
            payload = {"node_id": "h1", "allocator": envelope(models), "inventory_digest": digest}
            registry.heartbeat("h1", payload, now)
            last_full, held = models, digest
        else:
            renewed = registry.renew("h1", {"node_id": "h1", "inventory_digest": digest}, now)
            assert (renewed is not None) == (digest == held)
            if renewed is None:
                assert registry.host("h1") == before  # a refused lease changes nothing
        record = registry.host("h1")
        assert record is not None and record.inventory_digest == held
        assert tuple(c.model_id for c in record.cached) == last_full


def test_the_registry_validates_a_lease_before_looking_at_the_host() -> None:
    registry = Registry()
    with pytest.raises(WireError) as refused:
        registry.renew("h1", {"node_id": "h1", "inventory_digest": ["d1"]}, NOW)
    assert refused.value.pointer == "/inventory_digest"
