"""The runtime-adapter contract: what the node's lifecycle needs from one engine kind.

The actuator owns the safety rules of LOAD -> WARM -> READY -> DRAIN -> UNLOAD
(memory checked before launch, the artifact hashed before launch, a stop only
when idle unless forced, a signal only with proof, an unprovable child fenced).
It drives every engine through :class:`RuntimeAdapter` and never through an
engine's own API, so a new engine kind is one adapter plus one registry line
(:mod:`gridctl.node.runtimes.registry`), not a second lifecycle.

What an adapter promises, in the order the lifecycle uses it:

``prepare_artifact``
    turn the verified cached artifact into what the engine loads (a GGUF is
    used as is; another engine may need a directory built from it).
``start``
    launch the child and publish its PID, port and identity proof through the
    :class:`SpawnJournal` before anything can go wrong.
``wait_ready`` / ``model_ready``
    native readiness: proof that the *requested model* is usable from the
    engine's own API, not that some endpoint answers 200.
``healthy``
    the cheap periodic probe of a ready child.
``activity``
    running and queued requests, as the heartbeat reports them.
``wait_idle``
    the drain: wait until nothing runs, bounded.
``stop``
    stop a child only through its identity proof.
``adopt``
    after a node restart, take a surviving child back, only with proof.
``prove_identity``
    whether a recorded child is alive and provably the one this node started.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from gridctl.errors import PermanentError
from gridctl.node.processes import Liveness
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.launching import EngineSettings


class RuntimeFailure(PermanentError):
    """An adapter could not do its step; ``reason`` is a stable code for the receipt."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


class ChildFailed(RuntimeFailure):
    """A child exited or never became ready."""


class SpawnJournal(Protocol):
    """Where an adapter publishes a child's handle the instant it exists.

    Either call raising makes the adapter stop the child: a process the node
    could not durably record is a process it could not adopt after a crash.
    """

    def spawned(self, model_id: str, pid: int, port: int) -> None: ...

    def proven(self, model_id: str, identity: ProcessIdentity) -> None: ...


@dataclass(frozen=True)
class LaunchOptions:
    """What a warm command asks of the child beyond its model and port."""

    chat_template: str | None = None  # a built-in template name the engine knows
    embeddings: bool = False  # the child serves /v1/embeddings
    # a split's coordinator: the loopback ``host:port`` of each stage's forwarder, in
    # stage order, and each stage's layer count (its share of the offloaded layers)
    rpc_servers: tuple[str, ...] = ()
    tensor_split: tuple[int, ...] = ()


@dataclass(frozen=True)
class EngineActivity:
    """What an authenticated activity probe saw: the heartbeat's load figures."""

    slots: int  # requests the child can run at once
    processing: int  # requests running now
    queued: int = 0  # requests waiting for a free slot


@runtime_checkable
class RuntimeAdapter(Protocol):
    """One engine kind on this host, as the actuator drives it."""

    name: str  # the runtime's name as profiles declare it ("llama.cpp")
    settings: EngineSettings
    key_file: Path  # the engine key's file; only this node's children read it

    @property
    def probe_address(self) -> str:
        """Where a free-port probe binds before a port is handed to a child."""
        ...

    def endpoint(self, port: int) -> str:
        """The base URL the router reaches a child on."""
        ...

    def prepare_artifact(self, model_id: str, verified: Path) -> Path:
        """What the engine loads, made from the verified cached file; raises RuntimeFailure."""
        ...

    def start(
        self,
        model_id: str,
        artifact: Path,
        port: int,
        journal: SpawnJournal,
        options: LaunchOptions,
    ) -> ProcessIdentity:
        """Launch a child and journal its handle and proof; does not wait for readiness."""
        ...

    def wait_ready(
        self,
        model_id: str,
        identity: ProcessIdentity,
        port: int,
        *,
        cancelled: Callable[[], bool] = ...,
    ) -> float:
        """Wait for native readiness; seconds waited. Raises ChildFailed (stable reason)."""
        ...

    def model_ready(self, model_id: str, port: int) -> bool:
        """One native readiness proof: the engine's own API says this model is usable."""
        ...

    def healthy(self, port: int) -> bool:
        """The periodic probe of a ready child."""
        ...

    def activity(self, port: int) -> EngineActivity | None:
        """Running and queued requests; ``None`` when activity is unknown."""
        ...

    def wait_idle(self, port: int, *, timeout: float) -> EngineActivity | None:
        """Drain: poll activity until nothing runs or ``timeout`` passes; the last sight."""
        ...

    def stop(self, identity: ProcessIdentity, *, grace: float = ...) -> bool:
        """Stop a proven child; ``False`` if it cannot be proven or survives."""
        ...

    def adopt(self, model_id: str, identity: ProcessIdentity, port: int) -> Liveness:
        """Take back a child that survived a node restart; PROVEN only with proof."""
        ...

    def prove_identity(self, identity: ProcessIdentity) -> Liveness:
        """Is the recorded child alive and provably the one this node started?"""
        ...


@runtime_checkable
class SharedEngineAdapter(Protocol):
    """An adapter whose one engine process serves several residencies (a multi-model engine).

    The residencies of such an engine share its PID, port and identity proof, so
    what the actuator does to *one residency* needs the model's name: these
    members replace ``healthy``, ``activity``, ``wait_idle`` and ``stop`` for a
    residency. ``stop(identity)`` still stops the whole process (node shutdown,
    a fenced or failed warm).
    """

    def model_healthy(self, model_id: str, port: int) -> bool: ...

    def model_activity(self, model_id: str, port: int) -> EngineActivity | None: ...

    def model_wait_idle(
        self, model_id: str, port: int, *, timeout: float
    ) -> EngineActivity | None: ...

    def release(
        self, model_id: str, identity: ProcessIdentity, port: int, *, grace: float = ...
    ) -> bool:
        """Stop serving ``model_id``; the process stops with its last model."""
        ...


def residency_healthy(adapter: RuntimeAdapter, model_id: str, port: int) -> bool:
    """The periodic probe of one residency (one model of a shared engine)."""
    if isinstance(adapter, SharedEngineAdapter):
        return adapter.model_healthy(model_id, port)
    return adapter.healthy(port)


def residency_activity(adapter: RuntimeAdapter, model_id: str, port: int) -> EngineActivity | None:
    if isinstance(adapter, SharedEngineAdapter):
        return adapter.model_activity(model_id, port)
    return adapter.activity(port)


def residency_wait_idle(
    adapter: RuntimeAdapter, model_id: str, port: int, *, timeout: float
) -> EngineActivity | None:
    if isinstance(adapter, SharedEngineAdapter):
        return adapter.model_wait_idle(model_id, port, timeout=timeout)
    return adapter.wait_idle(port, timeout=timeout)


def stop_residency(
    adapter: RuntimeAdapter,
    model_id: str,
    identity: ProcessIdentity,
    port: int | None,
    *,
    grace: float,
) -> bool:
    """End one residency: unload its model from a shared engine, else stop its child."""
    if isinstance(adapter, SharedEngineAdapter) and port is not None:
        return adapter.release(model_id, identity, port, grace=grace)
    return adapter.stop(identity, grace=grace)


_ABSENT = object()


def contract_members() -> tuple[str, ...]:
    """Every name :class:`RuntimeAdapter` requires, sorted."""
    names = set(RuntimeAdapter.__annotations__)
    names.update(n for n in vars(RuntimeAdapter) if not n.startswith("_"))
    return tuple(sorted(names))


def contract_gaps(adapter_class: type) -> list[str]:
    """What ``adapter_class`` lacks of the contract: missing names, or methods whose
    parameters differ from the protocol's (by name and kind). Empty when it conforms."""
    gaps: list[str] = []
    for name in contract_members():
        if name in RuntimeAdapter.__annotations__:
            if not hasattr(adapter_class, name) and name not in _annotations_of(adapter_class):
                gaps.append(f"{name}: missing attribute")
            continue
        required = inspect.getattr_static(RuntimeAdapter, name)
        offered = inspect.getattr_static(adapter_class, name, _ABSENT)
        if offered is _ABSENT:
            gaps.append(f"{name}: missing")
        elif isinstance(required, property):
            if not isinstance(offered, property):
                gaps.append(f"{name}: not a property")
        elif not callable(offered):
            gaps.append(f"{name}: not a method")
        else:
            want = [(p.name, p.kind) for p in inspect.signature(required).parameters.values()]
            have = [(p.name, p.kind) for p in inspect.signature(offered).parameters.values()]
            if want != have:
                gaps.append(f"{name}: parameters {have} differ from the contract's {want}")
    return gaps


def _annotations_of(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__annotations__", {}))
    return names
