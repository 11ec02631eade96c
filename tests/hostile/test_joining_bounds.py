"""Joining cannot take over a host or mint a certificate that could answer as the controller.

The real controller app in-process (``httpx.ASGITransport``): a join bundle binds to the
host it was made for; an unbound one only creates a new host id; a node's certificate
may never name the controller's own names or loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.fleetca import build_csr
from tests.controller.simnodes import Clock, SimNode

pytestmark = pytest.mark.anyio
ADVERTISED = "10.9.9.9"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ControllerService]:
    yield ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            watch_dir=None,
            clock=Clock(2_000_000.0),
            advertise_url="https://ctl.example.test:8443",
        )
    )


def client(service: ControllerService) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    )


def bundle_secret(service: ControllerService, host_id: str | None = None) -> str:
    assert service.identity is not None
    bundle = service.identity.join_bundle("https://ctl.example.test:8443", ttl=600, host_id=host_id)
    return str(bundle["bootstrap_secret"])


def join_body(secret: str, host_id: str | None, addresses: list[str]) -> dict[str, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    body: dict[str, Any] = {
        "bootstrap_secret": secret,
        "advertise": addresses,
        "csr": build_csr(key, host_id or "node", addresses),
    }
    if host_id is not None:
        body["host_id"] = host_id
    return body


def unused(service: ControllerService) -> list[Any]:
    assert service.identity is not None
    return [r["used_at"] for r in service.identity.membership.bootstrap_rows()]


async def test_an_unbound_bundle_cannot_name_a_host_that_holds_a_credential(
    service: ControllerService,
) -> None:
    assert service.identity is not None
    service.identity.issue("local-1", [])  # what `gridctl token write --host-id local-1` records
    secret = bundle_secret(service)
    async with client(service) as http:
        answer = await http.post("/join", json=join_body(secret, "local-1", [ADVERTISED]))
        assert answer.status_code == 409, answer.text
        assert "already in the fleet" in answer.json()["error"]["message"]
        assert unused(service) == [None]  # the secret is still good for a new host
        fresh = await http.post("/join", json=join_body(secret, "laptop-9", [ADVERTISED]))
        assert fresh.status_code == 200, fresh.text
        assert fresh.json()["host_id"] == "laptop-9"


async def test_an_unbound_bundle_cannot_name_a_host_in_the_registry(
    service: ControllerService,
) -> None:
    async with client(service) as http:
        sim = SimNode.for_controller(
            service.options.state_dir, "host-r", http, service.options.clock
        )
        assert (await sim.register()).status_code == 200
        answer = await http.post(
            "/join", json=join_body(bundle_secret(service), "host-r", [ADVERTISED])
        )
        assert answer.status_code == 409, answer.text


async def test_a_bundle_made_for_an_existing_host_reissues_it(service: ControllerService) -> None:
    assert service.identity is not None
    service.identity.issue("local-1", [])
    secret = bundle_secret(service, host_id="local-1")
    async with client(service) as http:
        answer = await http.post("/join", json=join_body(secret, "local-1", [ADVERTISED]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["host_id"] == "local-1"


@pytest.mark.parametrize(
    "addresses",
    [
        ["ctl.example.test"],  # the controller's public name
        [ADVERTISED, "127.0.0.1"],  # loopback, which every node's controller URL may use
        [ADVERTISED, "localhost"],
        [ADVERTISED, "::1"],
    ],
)
async def test_a_certificate_for_the_controllers_names_is_refused(
    service: ControllerService, addresses: list[str]
) -> None:
    secret = bundle_secret(service)
    async with client(service) as http:
        answer = await http.post("/join", json=join_body(secret, "laptop-3", addresses))
    assert answer.status_code == 400, answer.text
    assert "names the controller" in answer.json()["error"]["message"]
    assert answer.json()["error"]["pointer"].startswith("/advertise/")
    assert unused(service) == [None]


async def test_router_key_names_are_unique_and_printable(service: ControllerService) -> None:
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    async with client(service) as http:
        first = await http.post("/allocator/router-keys", json={"name": "team-a"}, headers=admin)
        assert first.status_code == 200, first.text
        again = await http.post("/allocator/router-keys", json={"name": "team-a"}, headers=admin)
        assert again.status_code == 409
        assert "exists already" in again.json()["error"]["message"]
        for name in ("team\x1b[2Jb", "with space", "-leading"):
            bad = await http.post("/allocator/router-keys", json={"name": name}, headers=admin)
            assert bad.status_code == 400, name
            assert bad.json()["error"]["pointer"] == "/name"
    assert service.identity is not None
    assert [r["name"] for r in service.identity.membership.router_key_rows()] == ["team-a"]
