"""The stage tunnel lets through the claim's coordinator host only; the forwarder mirrors it.

Real TLS on loopback with certificates from a real fleet CA; the stage server is
stood in for by a plain echo server, so "got through" means bytes came back.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from gridctl.fleetca import (
    ENGINE_USAGES,
    build_csr,
    engine_host_id,
    load_certificates,
    new_private_key,
)
from gridctl.node.rpctunnel import (
    CoordinatorForwarder,
    StageTunnel,
    TlsIdentity,
    _LoopThread,
    coordinator_client_context,
)
from tests.node.stage_certs import fleet_ca, fleet_identity

LOOPBACK = ["127.0.0.1"]


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A plain TCP echo server on loopback, standing in for the stage server."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, TlsIdentity]:
    ca = fleet_ca(tmp_path / "ctl")
    stranger_ca = fleet_ca(tmp_path / "elsewhere")
    return {
        "stage": fleet_identity(ca, tmp_path / "stage", "stage-a", LOOPBACK),
        "coord": fleet_identity(ca, tmp_path / "coord", "coord-host", LOOPBACK),
        "other": fleet_identity(ca, tmp_path / "other", "stage-b", LOOPBACK),
        "foreign": fleet_identity(stranger_ca, tmp_path / "foreign", "coord-host", LOOPBACK),
    }


def _round_trip(port: int, context: ssl.SSLContext | None, payload: bytes = b"ping") -> bytes:
    """Send ``payload`` and read what comes back; b"" (or an error) means refused."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        conn: socket.socket = raw
        if context is not None:
            conn = context.wrap_socket(raw, server_hostname="127.0.0.1")
        try:
            conn.sendall(payload)
            received = b""
            while len(received) < len(payload):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                received += chunk
            return received
        except (ssl.SSLError, ConnectionError):
            return b""


def _client_without_certificate(trust: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(trust))


def test_engine_certificates_name_the_host_and_serve_both_ways(
    fleet: dict[str, TlsIdentity],
) -> None:
    cert = load_certificates(fleet["coord"].cert_file.read_text())[0]
    assert engine_host_id(cert) == "coord-host"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == list(ENGINE_USAGES)


def test_the_ca_names_the_host_it_is_told_not_the_one_the_request_asks_for(
    tmp_path: Path,
) -> None:
    ca = fleet_ca(tmp_path / "ctl")
    forged_request = build_csr(new_private_key(), "gridctl engine coord-host", LOOPBACK)
    signed = ca.sign_csr(forged_request, LOOPBACK, now=time.time(), host_id="rogue-host")
    assert engine_host_id(load_certificates(signed)[0]) == "rogue-host"
    unstamped = ca.sign_csr(forged_request, LOOPBACK, now=time.time())
    assert engine_host_id(load_certificates(unstamped)[0]) == "coord-host"  # the CSR's word


def test_only_the_coordinators_fleet_certificate_gets_through(
    fleet: dict[str, TlsIdentity], echo_port: int
) -> None:
    tunnel = StageTunnel(fleet["stage"], ("127.0.0.1", 0), echo_port, "coord-host")
    try:
        port = tunnel.address[1]
        stage_trust = fleet["stage"].trust_file
        assert _round_trip(port, _client_without_certificate(stage_trust)) == b""
        assert _round_trip(port, None, b"GET / HTTP/1.0\r\n\r\n") == b""  # not even TLS
        another_host = coordinator_client_context(fleet["other"])
        assert _round_trip(port, another_host) == b""
        foreign = coordinator_client_context(fleet["foreign"])
        foreign.load_verify_locations(str(stage_trust))  # it trusts us; we do not trust it
        assert _round_trip(port, foreign) == b""
        assert any("'stage-b' is not the coordinator" in why for why in tunnel.refusals)
        payload = bytes(range(256)) * 1024
        assert _round_trip(port, coordinator_client_context(fleet["coord"]), payload) == payload
    finally:
        tunnel.close()
    with pytest.raises(OSError):  # closed with the claim: nothing listens any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_coordinator_forwarder_reaches_the_stage_and_checks_who_it_is(
    fleet: dict[str, TlsIdentity], echo_port: int
) -> None:
    tunnel = StageTunnel(fleet["stage"], ("127.0.0.1", 0), echo_port, "coord-host")
    right = CoordinatorForwarder(fleet["coord"], tunnel.address, "stage-a")
    wrong = CoordinatorForwarder(fleet["coord"], tunnel.address, "stage-b")
    try:
        assert _round_trip(right.address[1], None, b"hello stage") == b"hello stage"
        assert _round_trip(wrong.address[1], None, b"hello stage") == b""
        assert any("not 'stage-b'" in why for why in wrong.refusals)
    finally:
        for forwarder in (right, wrong, tunnel):
            forwarder.close()


def test_stopping_the_loop_runs_the_tasks_its_last_step_created() -> None:
    """A connection's closing scheduled in the loop's last step (as a cancelled splice
    schedules one) still runs: a task left pending on a closed loop never starts."""
    looper = _LoopThread("test-loop")
    ran: list[str] = []

    async def closing() -> None:
        ran.append("closing")
        await asyncio.sleep(3600)  # cancelled by the stop

    def schedule() -> None:
        looper.loop.create_task(closing())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        looper.loop.call_soon_threadsafe(schedule)
        looper.stop()
        gc.collect()
    assert ran == ["closing"]
    assert looper.loop.is_closed()
    assert not [w for w in caught if "never awaited" in str(w.message)]
