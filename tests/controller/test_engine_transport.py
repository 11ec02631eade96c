"""The router's connections to engines (``serving.engine_transport``) over real HTTPS.

An engine child serves HTTPS with a certificate from the fleet CA; the router must
refuse one it cannot verify, send the body and headers through unchanged, keep the
connection for the next request, and take a trust bundle loaded into its context
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


async def post(client: httpx.AsyncClient, url: str, body: bytes) -> httpx.Response:
    request = client.build_request(
        "POST", url + "/v1/chat/completions", content=body, headers={"authorization": "Bearer k"}
    )
    response = await client.send(request, stream=True)
    await response.aread()
    await response.aclose()
    return response


def test_an_engine_the_fleet_ca_signed_is_verified_and_its_connection_kept(
    tmp_path: Path,
) -> None:
    ca = fleet_ca(tmp_path / "ca")
    with https_engine(ca) as url:
        verify = ssl.create_default_context(cafile=str(ca.trust_bundle_path()))

        async def run() -> list[dict[str, object]]:
            async with httpx.AsyncClient(transport=engine_transport(verify), timeout=30) as c:
                replies = [await post(c, url, b'{"n": %d}' % i) for i in range(3)]
            assert all(r.status_code == 200 for r in replies)
            return [r.json() for r in replies]

        seen = asyncio.run(run())
    assert [s["body"] for s in seen] == ['{"n": 0}', '{"n": 1}', '{"n": 2}']
    assert {s["authorization"] for s in seen} == {"Bearer k"}
    assert len({s["port"] for s in seen}) == 1  # one pooled connection served all three


def test_an_engine_signed_by_another_ca_is_refused_until_its_bundle_is_loaded(
    tmp_path: Path,
) -> None:
    engine_ca = fleet_ca(tmp_path / "engine-ca")
    other_ca = fleet_ca(tmp_path / "other-ca")
    with https_engine(engine_ca) as url:
        verify = ssl.create_default_context(cafile=str(other_ca.trust_bundle_path()))

        async def run() -> tuple[str, int]:
            async with httpx.AsyncClient(transport=engine_transport(verify), timeout=30) as c:
                with pytest.raises(httpx.HTTPError) as refused:
                    await post(c, url, b"{}")
                # a rotation loads the new bundle into the same context: new connections take it
                verify.load_verify_locations(cafile=str(engine_ca.trust_bundle_path()))
                return str(refused.value), (await post(c, url, b"{}")).status_code

        refusal, status = asyncio.run(run())
    assert "CERTIFICATE_VERIFY_FAILED" in refusal
    assert status == 200
