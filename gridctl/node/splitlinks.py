"""The TLS forwarders of a split's coordinator engine, kept exactly as long as the engine.

A coordinator engine (``llama-server --rpc``) reaches each stage of its split through
one ``CoordinatorForwarder``: a plain listener on 127.0.0.1 that carries every
connection over mutual TLS to the stage's tunnel and insists the stage presents the
expected host's fleet certificate. The engine is started with those loopback
addresses, in stage order, and nothing else; no stage server is ever addressed
directly.

``CoordinatorLinks`` holds the forwarders of each coordinator engine on this node, by
model. The actuator opens them right before it starts the engine and closes them
whenever the engine's residency ends (unload, a failed warm, a child that exits,
fails its health probe or cannot be proven, the node stopping). They live in this
process only: a node that restarts has none, which is why a recorded coordinator
child is never adopted (``actuator``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from gridctl.domain.actions import SplitServe, SplitServeStage
from gridctl.errors import WireError
from gridctl.node.rpctunnel import CoordinatorForwarder, TlsIdentity

log = logging.getLogger("gridctl.node")


@dataclass(frozen=True)
class SplitLaunch:
    """A coordinator warm that passed the load fence: what it serves, and the node's
    fleet identity its forwarders present to the stages."""

    serve: SplitServe
    identity: TlsIdentity

    @property
    def tensor_split(self) -> tuple[int, ...]:
        """Each stage's layer count, in stage order (llama-server's ``--tensor-split``)."""
        return tuple(stage.layer_end - stage.layer_start for stage in self.serve.stages)


def stage_address(stage: SplitServeStage, pointer: str) -> tuple[str, int]:
    """``host:port`` of a stage's tunnel as (host, port); ``WireError`` names the field."""
    host, colon, port_text = stage.endpoint.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # a bracketed IPv6 address
    if not colon or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise WireError(f"must be host:port, got {stage.endpoint!r}", f"{pointer}/endpoint")
    return host, int(port_text)


class CoordinatorLinks:
    """Each coordinator engine's forwarders on this node, by model id."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[CoordinatorForwarder, ...]] = {}
        self._lock = threading.Lock()

    def open(self, model_id: str, launch: SplitLaunch) -> tuple[str, ...]:
        """One forwarder per stage, in order; their loopback ``host:port`` for ``--rpc``.

        Forwarders a previous engine of ``model_id`` left are closed first. If one
        cannot listen, those already opened are closed and the error propagates.
        """
        self.close(model_id)
        opened: list[CoordinatorForwarder] = []
        try:
            for index, stage in enumerate(launch.serve.stages):
                address = stage_address(stage, f"/split_serve/stages/{index}")
                opened.append(CoordinatorForwarder(launch.identity, address, stage.host_id))
        except BaseException:
            _close_all(opened)
            raise
        with self._lock:
            self._open[model_id] = tuple(opened)
        return tuple(f"{f.address[0]}:{f.address[1]}" for f in opened)

    def close(self, model_id: str) -> bool:
        """Close ``model_id``'s forwarders and their connections; whether any were open."""
        with self._lock:
            forwarders = self._open.pop(model_id, ())
        _close_all(forwarders)
        return bool(forwarders)

    def close_all(self) -> None:
        """The node is stopping: close every forwarder."""
        with self._lock:
            models = list(self._open)
        for model_id in models:
            self.close(model_id)

    def ports(self, model_id: str) -> tuple[int, ...]:
        """The loopback ports of ``model_id``'s forwarders (none when it has none)."""
        with self._lock:
            return tuple(f.address[1] for f in self._open.get(model_id, ()))

    def models(self) -> tuple[str, ...]:
        """The models whose coordinator engines have forwarders open now."""
        with self._lock:
            return tuple(sorted(self._open))


def _close_all(forwarders: tuple[CoordinatorForwarder, ...] | list[CoordinatorForwarder]) -> None:
    for forwarder in forwarders:
        try:
            forwarder.close()
        except Exception:  # one forwarder that fails to close must not keep the others open
            log.exception("closing the forwarder to %s:%s failed", *forwarder.stage)
