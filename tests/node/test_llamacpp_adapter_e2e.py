"""The llama.cpp adapter driven only through the runtime contract, against a real llama-server.

One child serves the whole lifecycle: prepare, start (journalled before readiness), native
readiness of the requested model (and not of another), activity while a request runs, the
drain's bounded wait, adoption by a fresh adapter instance (a node restart), and a stop by
proof after which the identity proves dead.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from gridctl.node.processes import Liveness, stop_proven
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import LaunchOptions, RuntimeAdapter
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.runtimes.registry import RuntimeRegistry
from tests.node.conftest import GEMMA_SHA256, MODEL_ID, NodeParts, gemma_load
from tests.node.test_llamacpp_e2e import wait_for

pytestmark = pytest.mark.e2e


class RecordingJournal:
    """Keeps what the adapter published, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def spawned(self, model_id: str, pid: int, port: int) -> None:
        self.events.append(("spawned", (model_id, pid, port)))

    def proven(self, model_id: str, identity: ProcessIdentity) -> None:
        self.events.append(("proven", identity))


def test_llama_cpp_lifecycle_through_the_contract(node_parts: NodeParts) -> None:
    parts = node_parts
    adapter: RuntimeAdapter = RuntimeRegistry([parts.runtime]).adapter_for("llama.cpp")
    parts.actuator.load(gemma_load())
    entry = parts.cache.verified(MODEL_ID, GEMMA_SHA256)
    assert entry is not None
    artifact = adapter.prepare_artifact(MODEL_ID, Path(entry.path))
    assert artifact == Path(entry.path)
    port = parts.ports.first

    journal = RecordingJournal()
    identity = adapter.start(MODEL_ID, artifact, port, journal, LaunchOptions())
    try:
        assert journal.events == [("spawned", (MODEL_ID, identity.pid, port)), ("proven", identity)]
        assert adapter.prove_identity(identity) is Liveness.PROVEN
        waited = adapter.wait_ready(MODEL_ID, identity, port)
        print(f"native readiness after {waited:.2f}s")
        assert adapter.model_ready(MODEL_ID, port)
        # the proof is of the requested model: the same healthy child is not ready for another
        assert adapter.healthy(port) and not adapter.model_ready("another-model", port)
        assert adapter.endpoint(port) == f"http://127.0.0.1:{port}"

        idle = adapter.activity(port)
        assert idle is not None and idle.processing == 0 and idle.queued == 0
        assert idle.slots == adapter.settings.parallel

        outcome: dict[str, object] = {}
        worker = threading.Thread(target=_long_generation, args=(port, parts, outcome))
        worker.start()
        wait_for(lambda: (seen := adapter.activity(port)) is not None and seen.processing > 0)
        drained = adapter.wait_idle(port, timeout=0.5)  # bounded: the request still runs
        assert drained is not None and drained.processing == 1

        # a node restart: a fresh adapter with the same key takes the child back by proof
        restarted = LlamaCppRuntime(
            binary=parts.runtime.binary,
            key_file=parts.runtime.key_file,
            api_key=parts.api_key,
            log_dir=parts.runtime.log_dir,
            settings=parts.runtime.settings,
        )
        assert restarted.adopt(MODEL_ID, identity, port) is Liveness.PROVEN
        assert restarted.model_ready(MODEL_ID, port)

        t0 = time.monotonic()
        assert restarted.stop(identity, grace=1.0)
        print(f"stopped mid-request in {time.monotonic() - t0:.2f}s")
        worker.join(30)
        assert not worker.is_alive() and "status" not in outcome, outcome
        parts.runtime.reap()  # the test process is the child's parent
        assert adapter.prove_identity(identity) is Liveness.DEAD
        assert restarted.adopt(MODEL_ID, identity, port) is Liveness.DEAD
        assert not adapter.healthy(port) and adapter.activity(port) is None
    finally:
        stop_proven(identity, grace=5.0)
        parts.runtime.reap()


def _long_generation(port: int, parts: NodeParts, outcome: dict[str, object]) -> None:
    try:
        outcome["status"] = httpx.post(
            f"http://127.0.0.1:{port}/completion",
            json={"prompt": "Count slowly:", "n_predict": 4000, "ignore_eos": True},
            headers={"Authorization": f"Bearer {parts.api_key}"},
            timeout=120,
        ).status_code
    except httpx.HTTPError as exc:
        outcome["error"] = type(exc).__name__
