"""The real controller service on a loopback port over HTTPS, in a thread of the test.

Node-side code (joining, renewal, the agent) uses synchronous httpx against a
real TLS server, so an ASGI transport cannot stand in for it; this runs the
same ``ControllerService`` app under uvicorn with the fleet CA's certificate.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from gridctl.controller.serving import (
    ControllerService,
    ServiceOptions,
    TlsOptions,
    server_config,
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def tls_controller(state: Path, **options: object) -> Iterator[ControllerService]:
    """A started HTTPS controller on 127.0.0.1; ``service.url`` is its base URL."""
    port = free_port()
    service = ControllerService(
        ServiceOptions(
            state_dir=state,
            watch_dir=None,
            port=port,
            tls=TlsOptions(force=True),
            **options,  # type: ignore[arg-type]
        )
    )
    cert, key = service.serving_certificate()
    config = server_config(  # as ``ControllerService.run`` serves
        service.build_app(),
        "127.0.0.1",
        port,
        lifespan="on",
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
    )
    service._server_config = config
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="tls-controller", daemon=True)
    thread.start()
    bundle = ssl.create_default_context(cafile=str(state / "pki" / "trust.pem"))
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{service.url}/healthz", verify=bundle, timeout=2).is_success:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("the TLS controller did not start")
        time.sleep(0.05)
    try:
        yield service
    finally:
        server.should_exit = True
        thread.join(timeout=30)
