"""A lease heartbeat whose connection is reset under it is sent once more (real HTTP).

The real controller serves on loopback behind a TCP relay that resets the next
connection once it has read a request from it: exactly what a node sees when its
reused keep-alive connection was closed by the server as the request went out.
The idempotent lease heartbeat is sent again at once and arrives; a control
heartbeat (which consumes commands) is not repeated and fails the round instead.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.credentials import issue_node_credential, load_or_create_signing_key
from gridctl.errors import TransientError
from gridctl.node.actuator import PortRange
from gridctl.node.daemon import NodeConfig, NodeParts, build_node
from gridctl.transport import base_url
from tests.controller.tlsserver import free_port
from tests.node.controller_harness import wait_until

HOST = "host-a"


class ResettingRelay:
    """Relays TCP to ``target``; the next ``reset_next`` requests, on whichever
    connection they arrive, are answered with a reset instead of being relayed."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.reset_next = 0
        self.resets = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _take_reset(self) -> bool:
        with self._lock:
            if self.reset_next <= 0:
                return False
            self.reset_next -= 1
            self.resets += 1
            return True

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                if self._take_reset():  # the connection dies as the request goes out
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()
                    upstream.close()
                    return
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(client, upstream)

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._shut(source, sink)

    @staticmethod
    def _shut(*sockets: socket.socket) -> None:
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        self._server.close()


@pytest.fixture
def node_behind_relay(
    tmp_path: Path,
) -> Iterator[tuple[ResettingRelay, NodeParts, ControllerService]]:
    port = free_port()
    service = ControllerService(ServiceOptions(state_dir=tmp_path / "ctl", port=port))
    server = uvicorn.Server(
        uvicorn.Config(service.build_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "the controller to start")
    relay = ResettingRelay(port)
    key = load_or_create_signing_key(tmp_path / "ctl")
    token_file = tmp_path / "node.token"
    token_file.write_text(issue_node_credential(key, HOST, now=time.time()) + "\n")
    token_file.chmod(0o600)
    config = NodeConfig(
        host_id=HOST,
        controller_url=base_url("http", "127.0.0.1", relay.port),
        token_file=token_file,
        state_dir=tmp_path / "node",
        capacity_mb=4096,
        failure_domain="rack-1",
        port_range=PortRange(29910, 29919),
        binary=Path("/nonexistent/llama-server"),
    )
    parts = build_node(config, instance_id="reset-test")
    try:
        yield relay, parts, service
    finally:
        parts.agent.close()
        parts.store.close()
        relay.close()
        server.should_exit = True
        thread.join(30)


def test_a_reset_lease_heartbeat_is_sent_once_more(
    node_behind_relay: tuple[ResettingRelay, NodeParts, ControllerService],
) -> None:
    relay, parts, service = node_behind_relay
    parts.agent.register()
    before = service.registry.host(HOST)
    assert before is not None
    relay.reset_next = 1
    parts.agent.heartbeat(request_commands=False)
    assert relay.resets == 1  # the first try was reset ...
    after = service.registry.host(HOST)
    assert after is not None and after.last_heartbeat >= before.last_heartbeat
    assert parts.agent.status["heartbeats"] == 1  # ... and the second one arrived


def test_a_reset_control_heartbeat_is_not_repeated(
    node_behind_relay: tuple[ResettingRelay, NodeParts, ControllerService],
) -> None:
    relay, parts, _service = node_behind_relay
    parts.agent.register()
    relay.reset_next = 2
    with pytest.raises(TransientError, match="controller unreachable"):
        parts.agent.heartbeat(request_commands=True)
    assert relay.resets == 1  # one try: a control poll may have had commands delivered
    assert parts.agent.status["heartbeats"] == 0
