"""The controller's connections to engines over real HTTPS: the router's
(``KeepAliveUpstream``) and the prober's (``serving.engine_transport``).

An engine child serves HTTPS with a certificate from the fleet CA; both must
refuse one they cannot verify, send the body and headers through unchanged, keep the
connection for the next request, and take a trust bundle loaded into their context
later (a CA rotation) for new connections. The engine here is a stdlib HTTPS server
on loopback that echoes what it received.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gridctl.controller.serving import engine_transport
from gridctl.fleetca import FleetCA
from gridctl.router.keepalive import KeepAliveUpstream
from gridctl.router.upstream import HttpxUpstream, Upstream, UpstreamError


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as llama-server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        answer = json.dumps(
            {
                "body": body.decode(),
                "authorization": self.headers.get("authorization"),
                "port": self.client_address[1],
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args: object) -> None:
        return


def fleet_ca(root: Path) -> FleetCA:
    ca = FleetCA(root)
    ca.init(now=time.time())
    return ca


@contextmanager
def https_engine(ca: FleetCA) -> Iterator[str]:
    cert, key = ca.server_credentials(["127.0.0.1"], now=time.time())
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def upstream(kind: str, verify: ssl.SSLContext) -> Upstream:
    if kind == "router":
        return KeepAliveUpstream(verify)
    return HttpxUpstream(httpx.AsyncClient(transport=engine_transport(verify), timeout=30))


async def post(client: Upstream, url: str, body: bytes) -> tuple[int, dict[str, object]]:
    response = await client.post(url + "/v1/chat/completions", body, {"authorization": "Bearer k"})
    try:
        return response.status, json.loads(await response.read())
    finally:
        await response.close()


@pytest.mark.parametrize("kind", ["router", "prober"])
def test_an_engine_the_fleet_ca_signed_is_verified_and_its_connection_kept(
    tmp_path: Path, kind: str
) -> None:
    ca = fleet_ca(tmp_path / "ca")
    with https_engine(ca) as url:
        verify = ssl.create_default_context(cafile=str(ca.trust_bundle_path()))

        async def run() -> list[tuple[int, dict[str, object]]]:
            client = upstream(kind, verify)
            try:
                return [await post(client, url, b'{"n": %d}' % i) for i in range(3)]
            finally:
                await client.aclose()

        replies = asyncio.run(run())
    assert [status for status, _ in replies] == [200, 200, 200]
    seen = [answer for _, answer in replies]
    assert [s["body"] for s in seen] == ['{"n": 0}', '{"n": 1}', '{"n": 2}']
    assert {s["authorization"] for s in seen} == {"Bearer k"}
    assert len({s["port"] for s in seen}) == 1  # one pooled connection served all three


@pytest.mark.parametrize("kind", ["router", "prober"])
def test_an_engine_signed_by_another_ca_is_refused_until_its_bundle_is_loaded(
    tmp_path: Path, kind: str
) -> None:
    engine_ca = fleet_ca(tmp_path / "engine-ca")
    other_ca = fleet_ca(tmp_path / "other-ca")
    with https_engine(engine_ca) as url:
        verify = ssl.create_default_context(cafile=str(other_ca.trust_bundle_path()))

        async def run() -> tuple[str, int]:
            client = upstream(kind, verify)
            try:
                with pytest.raises(UpstreamError) as refused:
                    await post(client, url, b"{}")
                # a rotation loads the new bundle into the same context: new connections take it
                verify.load_verify_locations(cafile=str(engine_ca.trust_bundle_path()))
                return str(refused.value), (await post(client, url, b"{}"))[0]
            finally:
                await client.aclose()

        refusal, status = asyncio.run(run())
    assert "CERTIFICATE_VERIFY_FAILED" in refusal
    assert status == 200
