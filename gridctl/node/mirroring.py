"""The node's peer mirror: its verified artifacts, served by digest to the rest of the fleet.

Why it exists: the controller points a loading node at peers that hold the
exact artifact before the origin, so N hosts cost the origin one download. Only
``objects/`` is served (files published after their digest was proven), at
``/sha256/<digest>``, with Range support, by the same app as ``gridctl artifacts
serve``. Plain HTTP is allowed on loopback only; elsewhere a certificate and key
(the fleet's) turn it into HTTPS and peers verify it with the fleet CA.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path

import uvicorn

from gridctl.artifacts.serving import build_app
from gridctl.errors import PermanentError

READY_SECONDS = 10.0


def _address(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise PermanentError(f"--artifact-listen {listen!r}: expected ADDR:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


class PeerMirror:
    """uvicorn on a thread; :meth:`start` returns the base URL peers use."""

    def __init__(
        self,
        objects: Path,
        listen: str,
        *,
        cert_file: Path | None = None,
        key_file: Path | None = None,
    ) -> None:
        self.host, port = _address(listen)
        tls = cert_file is not None and key_file is not None
        try:
            loopback = ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        if not tls and not loopback:
            raise PermanentError(f"--artifact-listen {listen}: plain HTTP is for loopback only")
        self.scheme = "https" if tls else "http"
        self._socket = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((self.host, port))  # bound now, so port 0 names a real port at once
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            build_app(objects=objects),
            log_level="warning",
            log_config=None,  # its records go to the daemon's handlers (text or json lines)
            access_log=False,
            ssl_certfile=str(cert_file) if tls else None,
            ssl_keyfile=str(key_file) if tls else None,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def start(self) -> str:
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name="artifact-mirror",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + READY_SECONDS
        while not self._server.started and time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise PermanentError(f"artifact mirror on {self.url} did not start")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()
