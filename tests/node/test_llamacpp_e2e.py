"""Real llama-server children serving the real Gemma file, driven through the actuator."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from gridctl.domain.states import ResidencyState
from gridctl.node.actuator import ActionFailure, LifecycleRequest
from gridctl.node.processes import Liveness, check_identity, stop_proven
from tests.node.conftest import (
    MODEL_ID,
    NodeParts,
    build_parts,
    gemma_load,
    gemma_warm,
)

pytestmark = pytest.mark.e2e


def chat(port: int, key: str | None, model: str = MODEL_ID) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 8,
        },
        headers=headers,
        timeout=60,
    )


def warm_gemma(parts: NodeParts) -> tuple[int, int]:
    parts.actuator.load(gemma_load())
    t0 = time.monotonic()
    parts.actuator.warm(gemma_warm())
    print(f"warm to ready: {time.monotonic() - t0:.2f}s")
    record = parts.store.residency(MODEL_ID)
    assert record is not None and record.state is ResidencyState.READY
    assert record.pid is not None and record.port is not None and record.identity is not None
    return record.pid, record.port


def wait_for(predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_warm_serve_fence_drain_unload(node_parts: NodeParts) -> None:
    parts = node_parts
    pid, port = warm_gemma(parts)

    t0 = time.monotonic()
    answer = chat(port, parts.api_key)
    print(f"8-token answer: {time.monotonic() - t0:.2f}s")
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] is not None
    assert answer.json()["model"] == MODEL_ID

    assert chat(port, None).status_code == 401
    assert chat(port, "wrong-key").status_code == 401
    assert httpx.get(f"http://127.0.0.1:{port}/slots", timeout=5).status_code == 401

    key = parts.api_key.encode()
    assert key not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert key not in Path(f"/proc/{pid}/environ").read_bytes()
    assert key not in parts.runtime.log_path(MODEL_ID).read_bytes()
    key_file = parts.state_dir / "engine" / "api-keys"
    assert os.stat(key_file).st_mode & 0o777 == 0o600
    print(f"child pid {pid} port {port}: 401 without key, key absent from cmdline/environ/log")

    parts.actuator.refresh()
    assert parts.store.residency(MODEL_ID).state is ResidencyState.READY  # type: ignore[union-attr]

    parts.actuator.drain(LifecycleRequest("drain", MODEL_ID))
    assert parts.store.residency(MODEL_ID).state is ResidencyState.DRAINING  # type: ignore[union-attr]
    t0 = time.monotonic()
    parts.actuator.unload(LifecycleRequest("unload", MODEL_ID))
    print(f"unload: {time.monotonic() - t0:.2f}s")
    after = parts.store.residency(MODEL_ID)
    assert after is not None and after.state is ResidencyState.CACHED and after.pid is None
    wait_for(lambda: (parts.runtime.reap(), not Path(f"/proc/{pid}").exists())[1], 10)


def test_sigkill_of_child_is_reported_failed(node_parts: NodeParts) -> None:
    parts = node_parts
    pid, _port = warm_gemma(parts)
    os.kill(pid, signal.SIGKILL)
    t0 = time.monotonic()

    def failed() -> bool:
        parts.actuator.refresh()
        row = parts.store.residency(MODEL_ID)
        return row is not None and row.state is ResidencyState.FAILED and row.pid is None

    wait_for(failed)
    print(f"SIGKILLed child {pid} reported failed after {time.monotonic() - t0:.2f}s")
    row = parts.store.residency(MODEL_ID)
    assert row is not None and row.pid is None and row.message == "child_exited"
    # the model can be warmed again on a fresh child
    parts.actuator.warm(gemma_warm())
    again = parts.store.residency(MODEL_ID)
    assert again is not None and again.state is ResidencyState.READY and again.pid != pid


def test_new_adapter_instance_adopts_the_same_pid_and_can_drain_and_unload(
    node_parts: NodeParts, shared_artifacts: Path, llama_binary: Path
) -> None:
    first = node_parts
    pid, port = warm_gemma(first)
    first.store.close()  # the "crash": nothing is stopped or cleaned up

    second = build_parts(first.state_dir, shared_artifacts, llama_binary, first.ports)
    try:
        notes = second.actuator.recover()
        print("recover:", notes)
        row = second.store.residency(MODEL_ID)
        assert row is not None and row.state is ResidencyState.READY
        assert row.pid == pid and row.port == port and not row.fenced
        assert chat(port, second.api_key).status_code == 200
        second.actuator.drain(LifecycleRequest("drain", MODEL_ID))
        second.actuator.unload(LifecycleRequest("unload", MODEL_ID))
        row = second.store.residency(MODEL_ID)
        assert row is not None and row.state is ResidencyState.CACHED and row.pid is None

        def gone() -> bool:
            first.runtime.reap()  # the test process is still the child's parent
            return not Path(f"/proc/{pid}").exists()

        wait_for(gone, 10)
    finally:
        second.store.close()


def test_pid_whose_birth_time_does_not_match_is_fenced_and_never_signalled(
    node_parts: NodeParts, shared_artifacts: Path, llama_binary: Path
) -> None:
    first = node_parts
    pid, _port = warm_gemma(first)
    real = first.store.residency(MODEL_ID)
    assert real is not None and real.identity is not None
    forged = replace(real.identity, create_time=real.identity.create_time - 1000.0)
    first.store.put_residency(replace(real, identity=forged))
    first.store.close()

    second = build_parts(first.state_dir, shared_artifacts, llama_binary, first.ports)
    try:
        second.actuator.recover()
        row = second.store.residency(MODEL_ID)
        assert row is not None and row.state is ResidencyState.FAILED and row.fenced
        assert row.message == "identity_unproven" and row.pid == pid
        with pytest.raises(ActionFailure) as info:
            second.actuator.unload(LifecycleRequest("unload", MODEL_ID, force=True))
        assert info.value.reason == "identity_unproven"
        # a new warm never reuses the fenced port
        assert check_identity(real.identity) is Liveness.PROVEN  # still alive: never signalled
        print(f"pid {pid} with mismatched birth time fenced; still alive, never signalled")
    finally:
        second.store.close()
        stop_proven(real.identity, grace=5.0)


def test_unload_of_a_busy_child_fails_safe_and_only_force_cuts_it(node_parts: NodeParts) -> None:
    parts = node_parts
    parts.actuator.unload_idle_timeout = 0.5
    pid, port = warm_gemma(parts)
    outcome: dict[str, object] = {}

    def long_generation() -> None:
        try:
            outcome["response"] = httpx.post(
                f"http://127.0.0.1:{port}/completion",
                # long enough that the forced unload below always lands mid-generation
                json={"prompt": "Count slowly:", "n_predict": 4000, "ignore_eos": True},
                headers={"Authorization": f"Bearer {parts.api_key}"},
                timeout=120,
            ).status_code
        except httpx.HTTPError as exc:
            outcome["error"] = type(exc).__name__

    worker = threading.Thread(target=long_generation, daemon=True)
    worker.start()
    wait_for(lambda: (seen := parts.runtime.activity(port)) is not None and seen.processing > 0)
    parts.actuator.refresh()
    busy = parts.store.residency(MODEL_ID)
    assert busy is not None and busy.active_requests == 1 and busy.last_used_at is not None

    parts.actuator.drain(LifecycleRequest("drain", MODEL_ID))
    with pytest.raises(ActionFailure) as info:
        parts.actuator.unload(LifecycleRequest("unload", MODEL_ID))
    assert info.value.reason == "requests_in_flight"
    row = parts.store.residency(MODEL_ID)
    assert row is not None and row.state is ResidencyState.DRAINING and row.pid == pid
    assert row.identity is not None and check_identity(row.identity) is Liveness.PROVEN
    print("busy child: non-force unload refused (requests_in_flight), child kept")

    parts.actuator.unload(LifecycleRequest("unload", MODEL_ID, force=True))
    row = parts.store.residency(MODEL_ID)
    assert row is not None and row.state is ResidencyState.CACHED and row.pid is None
    worker.join(30)
    assert not worker.is_alive(), "the in-flight request outlived the child"
    # the forced unload killed the child mid-generation: the caller saw the connection cut
    assert "response" not in outcome, outcome
    assert outcome["error"] in ("RemoteProtocolError", "ReadError", "ConnectError"), outcome
