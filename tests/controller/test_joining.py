"""Joining, renewal, revocation and the transport rules, against the real controller app.

Node-side flows run against the real service over HTTPS on loopback
(``tests.controller.tlsserver``); controller-only rules use the same app in
process through ``httpx.ASGITransport``.
"""

from __future__ import annotations

import ssl
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography import x509

from gridctl.client import ControllerClient, ControllerError
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.credentials import credential_claims_unverified
from gridctl.fleetca import (
    FleetCA,
    certificate_names,
    engine_host_id,
    fingerprint,
    load_certificates,
)
from gridctl.membership import Membership
from gridctl.node.joining import JoinError, NodeIdentity, read_join_bundle
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode
from tests.controller.tlsserver import tls_controller

ADVERTISED = "10.9.9.9"  # only ever a name in a certificate: nothing is sent there


def write_bundle(path: Path, bundle: dict[str, Any]) -> Path:
    import json

    from gridctl.credentials import write_secret_file

    write_secret_file(path, json.dumps(bundle))
    return path


def joined(tmp_path: Path, service: ControllerService, **kw: Any) -> NodeIdentity:
    assert service.identity is not None
    bundle = service.identity.join_bundle(service.url, ttl=600, host_id=kw.get("host_id"))
    identity = NodeIdentity(tmp_path / "node")
    identity.join(read_join_bundle(write_bundle(tmp_path / "join.json", bundle)), [ADVERTISED])
    return identity


def test_join_pins_the_ca_and_stores_an_owner_only_identity(tmp_path: Path) -> None:
    with tls_controller(tmp_path / "ctl") as service:
        identity = joined(tmp_path, service)
        record = identity.record()
        assert record["controller"] == service.url
        assert record["advertise"] == [ADVERTISED]
        for path in (identity.token_file, identity.key_file, identity.cert_file, identity.ca_file):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(identity.dir.stat().st_mode) == 0o700
        # the engine certificate names exactly the advertised address, from the fleet CA
        cert_pem = identity.cert_file.read_text()
        assert certificate_names(cert_pem) == [ADVERTISED]
        leaf = load_certificates(cert_pem)[0]
        assert leaf.issuer == FleetCA(tmp_path / "ctl").certificate().subject
        claims = credential_claims_unverified(identity.token_file.read_text())
        # the controller, not the request, names the host: a stage tunnel relies on it
        assert engine_host_id(leaf) == claims["host_id"] == record["host_id"]
        assert claims["host_id"] == record["host_id"] and claims["adv"] == [ADVERTISED]
        # the credential works: the controller accepts it for this host only
        assert service.identity is not None
        assert service.identity.verify(identity.token_file.read_text().strip(), claims["host_id"])


def test_a_controller_with_another_ca_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    other = FleetCA(tmp_path / "other")
    other.init(now=1_000.0)
    with tls_controller(tmp_path / "ctl") as service:
        assert service.identity is not None
        bundle = service.identity.join_bundle(service.url, ttl=600, host_id=None)
        bundle["ca_sha256"] = fingerprint(other.certificate())
        identity = NodeIdentity(tmp_path / "node")
        with pytest.raises(JoinError, match="not the pinned"):
            identity.join(read_join_bundle(write_bundle(tmp_path / "j.json", bundle)), [ADVERTISED])
        assert not identity.exists()
        # the secret was not spent: the controller never saw it
        rows = service.identity.membership.bootstrap_rows()
        assert [r["used_at"] for r in rows] == [None]


def test_a_used_and_an_expired_bootstrap_secret_are_refused(tmp_path: Path) -> None:
    clock = Clock(2_000_000.0)
    with tls_controller(tmp_path / "ctl", clock=clock) as service:
        assert service.identity is not None
        bundle = service.identity.join_bundle(service.url, ttl=600, host_id=None)
        path = write_bundle(tmp_path / "join.json", bundle)
        NodeIdentity(tmp_path / "a").join(read_join_bundle(path), [ADVERTISED])
        with pytest.raises(JoinError, match="bootstrap secret already used"):
            NodeIdentity(tmp_path / "b").join(read_join_bundle(path), [ADVERTISED])
        late = service.identity.join_bundle(service.url, ttl=60, host_id=None)
        clock.now += 61
        with pytest.raises(JoinError, match="bootstrap secret expired"):
            NodeIdentity(tmp_path / "c").join(
                read_join_bundle(write_bundle(tmp_path / "late.json", late)), [ADVERTISED]
            )
        bound = service.identity.join_bundle(service.url, ttl=600, host_id="gpu-1")
        bound["host_id"] = None  # a bundle edited to drop its host binding
        with pytest.raises(JoinError, match="made for host gpu-1"):
            NodeIdentity(tmp_path / "d").join(
                read_join_bundle(write_bundle(tmp_path / "bound.json", bound)),
                [ADVERTISED],
                host_id="laptop-7",
            )
        assert not NodeIdentity(tmp_path / "b").exists()
        assert not NodeIdentity(tmp_path / "c").exists()


def test_renewal_replaces_credential_and_certificate_in_place(tmp_path: Path) -> None:
    clock = Clock(3_000_000.0)
    with tls_controller(tmp_path / "ctl", clock=clock, node_credential_ttl=180.0) as service:
        identity = joined(tmp_path, service)
        first = identity.token_file.read_text()
        assert not identity.needs_renewal(now=clock.now + 89)
        assert identity.needs_renewal(now=clock.now + 90)  # half of 180 s
        assert identity.needs_renewal(now=clock.now, bundle_digest="sha256:other")
        clock.now += 120  # two minutes left... less than half: renew
        record = identity.record()
        with httpx.Client(verify=identity.trust_context()) as client:
            answer = identity.renew(client, str(record["controller"]))
        assert identity.token_file.read_text().strip() == answer["credential"] != first.strip()
        claims = credential_claims_unverified(answer["credential"])
        assert claims["exp"] == int(clock.now + 180)
        assert certificate_names(identity.cert_file.read_text()) == [ADVERTISED]


def test_ca_rotation_keeps_old_pins_working_and_hands_out_the_new_bundle(tmp_path: Path) -> None:
    with tls_controller(tmp_path / "ctl") as service:
        identity = joined(tmp_path, service)
        old_bundle = identity.ca_file.read_text()
        ca = FleetCA(tmp_path / "ctl")
        old = ca.certificate()
        ca.rotate(now=time.time(), overlap_seconds=3600)
        assert service.refresh_tls()  # the live server context now serves the new CA
        new = ca.certificate()
        assert fingerprint(new) != fingerprint(old)
        # a client that still trusts only the old CA verifies the new certificate (cross-sign)
        only_old = ssl.create_default_context(cadata=old_bundle)
        assert httpx.get(f"{service.url}/healthz", verify=only_old).is_success
        served = ssl.get_server_certificate(("127.0.0.1", service.options.port))
        leaf = x509.load_pem_x509_certificate(served.encode())
        assert leaf.issuer == new.subject
        with httpx.Client(verify=identity.trust_context()) as client:
            identity.renew(client, str(identity.record()["controller"]))
        bundle = [fingerprint(c) for c in load_certificates(identity.ca_file.read_text())]
        assert bundle == [fingerprint(new), fingerprint(old)]
        issuer = load_certificates(identity.cert_file.read_text())[0].issuer
        assert issuer == new.subject
        ca.expire_overlap(now=time.time() + 3601)
        assert [fingerprint(c) for c in load_certificates(ca.trust_bundle())] == [fingerprint(new)]


# --- controller-only rules, in process -------------------------------------------------


def in_process(tmp_path: Path, **options: Any) -> tuple[ControllerService, httpx.AsyncClient]:
    service = ControllerService(
        ServiceOptions(state_dir=tmp_path / "ctl", watch_dir=None, clock=Clock(), **options)
    )
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="https://ctl"
    )
    return service, client


def sim_node(service: ControllerService, client: httpx.AsyncClient, host: str) -> SimNode:
    assert service.identity is not None
    token, _ = service.identity.issue(host, [ADVERTISED])
    return SimNode(host_id=host, client=client, token=token, clock=service.options.clock)


@pytest.mark.anyio
async def test_a_revoked_credential_is_refused_at_the_next_heartbeat(tmp_path: Path) -> None:
    service, client = in_process(tmp_path)
    async with client:
        node = sim_node(service, client, "host-a")
        assert (await node.register()).status_code == 200
        await node.heartbeat(request_commands=False)
        offline = Membership(tmp_path / "ctl")  # what `gridctl token revoke` opens
        assert offline.revoke_host("host-a", now=service.options.clock()) == 1
        offline.close()
        refused = await client.post(
            "/nodes/host-a/heartbeat",
            json={"node_id": "host-a", "request_commands": False},
            headers=node.headers,
        )
        assert refused.status_code == 401
        assert "revoked" in refused.json()["error"]["message"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("http://10.9.9.9:23001", "plain HTTP off loopback"),
        ("https://10.7.7.7:23001", "not an address this node advertises (10.9.9.9)"),
        ("gopher://10.9.9.9:1", "must be an http(s) URL"),
    ],
)
async def test_engine_endpoints_must_be_https_on_an_advertised_address(
    tmp_path: Path, endpoint: str, message: str
) -> None:
    service, client = in_process(tmp_path)
    async with client:
        node = sim_node(service, client, "host-a")
        node.endpoint = lambda model_id: endpoint  # type: ignore[method-assign]
        node.residencies["m"] = _ready("m", service)
        answer = await node.register()
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert message in error["message"]
        assert error["pointer"] == "/allocator/residencies/0/endpoint"
        assert service.registry.host("host-a") is None  # nothing was registered
        node.endpoint = lambda model_id: f"https://{ADVERTISED}:23001"  # type: ignore[method-assign]
        assert (await node.register()).status_code == 200
        assert service.registry.host("host-a") is not None


def _ready(model: str, service: ControllerService) -> Any:
    from tests.controller.simnodes import SimResidency

    return SimResidency(model, 640, "ready", None, service.options.clock())


def test_the_operator_client_never_sends_the_token_over_plain_http_off_loopback() -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={})

    client = ControllerClient(
        "http://203.0.113.7:22100", token="t" * 32, transport=httpx.MockTransport(record)
    )
    with pytest.raises(
        ControllerError,
        match=r"refusing to send the operator token over plain HTTP to 203\.0\.113\.7",
    ):
        client.set_mode("recommend")
    assert sent == []
    loopback = ControllerClient(
        "http://127.0.0.1:22100", token="t" * 32, transport=httpx.MockTransport(record)
    )
    loopback.set_mode("recommend")
    assert len(sent) == 1


@pytest.mark.anyio
async def test_router_keys_when_required(tmp_path: Path) -> None:
    service, client = in_process(tmp_path, router_auth="required")
    assert service.identity is not None
    key_id, key = service.identity.membership.create_router_key("team-a", now=1.0)
    async with client:
        missing = await client.get("/v1/models")
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "invalid_api_key"
        wrong = await client.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["message"] == "router API key rejected"
        ok = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert ok.status_code == 200
        seen: list[Any] = []
        service.tap.add(seen.append)
        admin = {"X-Grid-Allocator-Token": service.operator_token}
        body = {"spec": {"memory_mb": 640, "artifact": {"sha256": GEMMA_SHA}, "min_replicas": 0}}
        assert (await client.put("/allocator/models/m1", headers=admin, json=body)).is_success
        answer = await client.post(
            "/v1/chat/completions",
            json={"model": "m1", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert answer.status_code == 503  # configured, nothing ready: demand is recorded
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        assert [o.client for o in seen] == [key_id]  # the key's id, never the key
        metrics = (await client.get("/metrics")).text
        deadline = time.monotonic() + 10
        line = f'gridctl_router_client_requests_total{{key_id="{key_id}",outcome="rejected"}} 1.0'
        while line not in metrics and time.monotonic() < deadline:
            await anyio.sleep(0.02)
            metrics = (await client.get("/metrics")).text
        assert line in metrics and key not in metrics
        service.identity.membership.revoke_router_key("team-a", now=2.0)
        revoked = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert revoked.status_code == 401
    assert key_id.startswith("rk-") and key not in repr(
        service.identity.membership.router_key_rows()
    )


@pytest.mark.anyio
async def test_router_is_open_on_loopback_by_default(tmp_path: Path) -> None:
    service, client = in_process(tmp_path)
    async with client:
        assert (await client.get("/v1/models")).status_code == 200
    assert not service.router_keys_required()


@pytest.mark.anyio
async def test_operator_token_rotation_takes_effect_at_once(tmp_path: Path) -> None:
    service, client = in_process(tmp_path)
    old = service.operator_token
    async with client:
        rotated = await client.post(
            "/allocator/operator-token/rotate", headers={"X-Grid-Allocator-Token": old}
        )
        assert rotated.status_code == 200
        new = (tmp_path / "ctl" / "operator.token").read_text().strip()
        assert new != old
        stale = await client.post("/allocator/tick", headers={"X-Grid-Allocator-Token": old})
        assert stale.status_code == 401
        fresh = await client.post("/allocator/tick", headers={"X-Grid-Allocator-Token": new})
        assert fresh.status_code == 200


@pytest.mark.anyio
async def test_external_engines_survive_a_restart_and_cannot_take_a_managed_name(
    tmp_path: Path,
) -> None:
    service, client = in_process(tmp_path)
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    async with client:
        node = sim_node(service, client, "host-a")
        assert (await node.register()).status_code == 200
        plain = await client.put(
            "/allocator/external/vendor",
            headers=admin,
            json={"endpoint": "http://203.0.113.7:8080", "model_id": "v", "kind": "openai"},
        )
        assert plain.status_code == 400 and "https:// off loopback" in plain.text
        clash = await client.put(
            "/allocator/external/host-a",
            headers=admin,
            json={"endpoint": "https://vendor.example:8443", "model_id": "v", "kind": "openai"},
        )
        assert clash.status_code == 400 and "managed host" in clash.text
        ok = await client.put(
            "/allocator/external/vendor",
            headers=admin,
            json={"endpoint": "https://vendor.example:8443", "model_id": "v", "kind": "openai"},
        )
        assert ok.status_code == 200
        intruder = sim_node(service, client, "vendor")
        taken = await intruder.register()
        assert taken.status_code == 409 and "external engine's name" in taken.text
    service.store.close()
    again = ControllerService(service.options)
    restored = again.registry.host("vendor")
    assert restored is not None and restored.role == "external"
    assert [r.endpoint for r in restored.routes.values()] == ["https://vendor.example:8443"]
