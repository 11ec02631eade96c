"""The only way to a stage's RPC server from off the host: mutual TLS from the fleet CA.

A stage host's ``ggml-rpc-server`` listens on 127.0.0.1 only (``stageservers``).
``StageTunnel`` is the listener on the host's advertised address that forwards to
it, open for the life of an accepted split claim. It presents this host's engine
certificate and demands one from the peer, verified against the fleet's trust
bundle; the peer is then let through only if its certificate names the claim's
coordinator host (``CN=gridctl engine <host id>``, ``fleetca.engine_host_id``).
No certificate, another CA's certificate, or another host's valid fleet
certificate: the connection is closed before a byte reaches the stage server.

``CoordinatorForwarder`` is the mirror image on the coordinator host: a plain
listener on 127.0.0.1 for ``llama-server --rpc 127.0.0.1:PORT`` that carries each
connection over TLS, with the coordinator's engine certificate, to one stage's
tunnel, and insists the stage presents the expected host's certificate.

Both run an asyncio loop in a thread of their own: asyncio's TLS keeps each
connection's reads and writes on one thread (OpenSSL objects are not safe to
read and write from two), and ``drain`` bounds what is buffered per direction.
When either side of a forwarded connection closes, both are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cryptography import x509

from gridctl.fleetca import engine_host_id

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
HANDSHAKE_SECONDS = 10.0
CONNECT_SECONDS = 10.0
CALL_SECONDS = 15.0
T = TypeVar("T")


@dataclass(frozen=True)
class TlsIdentity:
    """This host's engine certificate chain and key, and the fleet trust bundle."""

    cert_file: Path
    key_file: Path
    trust_file: Path


def _context(identity: TlsIdentity, purpose: ssl.Purpose) -> ssl.SSLContext:
    context = ssl.create_default_context(purpose, cafile=str(identity.trust_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(identity.cert_file), str(identity.key_file))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def stage_server_context(identity: TlsIdentity) -> ssl.SSLContext:
    """The stage side: present this host, require a fleet certificate from the peer."""
    return _context(identity, ssl.Purpose.CLIENT_AUTH)


def coordinator_client_context(identity: TlsIdentity) -> ssl.SSLContext:
    """The coordinator side: present this host, verify the stage's certificate and address."""
    context = _context(identity, ssl.Purpose.SERVER_AUTH)
    context.check_hostname = True
    return context


def peer_host_id(writer: asyncio.StreamWriter) -> str | None:
    """The host id the verified peer certificate names, or None."""
    ssl_object = writer.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return engine_host_id(x509.load_der_x509_certificate(der))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), HANDSHAKE_SECONDS)


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Forward both ways until one direction ends, then close both sides."""
    directions = [
        asyncio.ensure_future(_pump(a[0], b[1])),
        asyncio.ensure_future(_pump(b[0], a[1])),
    ]
    try:
        await asyncio.wait(directions, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in directions:
            task.cancel()
        await asyncio.gather(_close(a[1]), _close(b[1]))


class _LoopThread:
    """One asyncio loop on a daemon thread; coroutines are submitted and waited on."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, factory: Callable[[], Awaitable[T]], timeout: float = CALL_SECONDS) -> T:
        async def run() -> T:
            return await factory()

        future: Future[T] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return future.result(timeout)

    def stop(self) -> None:
        """Let the tasks scheduled last take their first step (a connection's closing, say),
        cancel whatever still runs and wait for it, then stop and close the loop: a task
        left pending would never run, and its coroutine would never have been awaited."""
        if self._thread.is_alive():
            with contextlib.suppress(TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(_finish_tasks(), self.loop).result(CALL_SECONDS)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(CALL_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


async def _finish_tasks() -> None:
    await asyncio.sleep(0)  # tasks created by the step before this one start now
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _Forwarder:
    """A listener whose every connection is handed to ``_forward``; closes them all at the end."""

    def __init__(self, name: str) -> None:
        self._loop = _LoopThread(name)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.refusals: list[str] = []  # why peers were turned away, newest last (bounded)
        self.address: tuple[str, int] = ("", 0)

    def _listen(self, host: str, port: int, context: ssl.SSLContext | None) -> None:
        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                self._accepted, host, port, ssl=context,
                ssl_handshake_timeout=HANDSHAKE_SECONDS if context else None,
                limit=CHUNK_BYTES,
            )  # fmt: skip

        try:
            self._server = self._loop.call(start)
        except BaseException:
            self._loop.stop()
            raise
        bound = self._server.sockets[0].getsockname()
        self.address = (str(bound[0]), int(bound[1]))

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._forward(reader, writer)
        except asyncio.CancelledError:
            # closed by ``close``: end quietly (asyncio's stream callback in 3.11 would
            # report a cancelled connection task as an unhandled error)
            await _close(writer)
        except (ConnectionError, ssl.SSLError, OSError, TimeoutError) as exc:
            self._refuse(f"{type(exc).__name__}: {exc}")
            await _close(writer)
        finally:
            self._connections.discard(task)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def _refuse(self, why: str) -> None:
        log.warning("%s refused a connection: %s", type(self).__name__, why)
        self.refusals = [*self.refusals[-99:], why]

    def close(self) -> None:
        """Stop listening and close every forwarded connection; safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return

        async def shut() -> None:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await server.wait_closed()

        try:
            self._loop.call(shut)
        finally:
            self._loop.stop()


class StageTunnel(_Forwarder):
    """TLS on ``listen`` to ``127.0.0.1:target_port``, for the claim's coordinator only."""

    def __init__(
        self,
        identity: TlsIdentity,
        listen: tuple[str, int],
        target_port: int,
        coordinator_host_id: str,
    ) -> None:
        super().__init__(f"stage-tunnel-{target_port}")
        self.target_port = target_port
        self.coordinator_host_id = coordinator_host_id
        self._listen(listen[0], listen[1], stage_server_context(identity))

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = peer_host_id(writer)
        if peer != self.coordinator_host_id:
            self._refuse(f"peer {peer!r} is not the coordinator {self.coordinator_host_id!r}")
            await _close(writer)
            return
        target = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.target_port, limit=CHUNK_BYTES),
            CONNECT_SECONDS,
        )
        await splice((reader, writer), target)


class CoordinatorForwarder(_Forwarder):
    """Plain 127.0.0.1 listener carried over TLS to one stage host's tunnel."""

    def __init__(self, identity: TlsIdentity, stage: tuple[str, int], stage_host_id: str) -> None:
        super().__init__(f"coordinator-forwarder-{stage[0]}:{stage[1]}")
        self.stage = stage
        self.stage_host_id = stage_host_id
        self._context = coordinator_client_context(identity)
        self._listen("127.0.0.1", 0, None)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.stage
        remote = await asyncio.wait_for(
            asyncio.open_connection(
                host, port, ssl=self._context, server_hostname=host, limit=CHUNK_BYTES,
                ssl_handshake_timeout=HANDSHAKE_SECONDS,
            ),
            CONNECT_SECONDS + HANDSHAKE_SECONDS,
        )  # fmt: skip
        peer = peer_host_id(remote[1])
        if peer != self.stage_host_id:
            self._refuse(f"stage {host}:{port} is {peer!r}, not {self.stage_host_id!r}")
            await asyncio.gather(_close(remote[1]), _close(writer))
            return
        await splice((reader, writer), remote)
