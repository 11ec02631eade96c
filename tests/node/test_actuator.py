"""Node-side checks that need no engine: memory and disk refusals before launch,
interrupted actions after a restart, unprovable handles fenced."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gridctl.domain.states import HostState, ResidencyState
from gridctl.node.actuator import (
    ActionFailure,
    HostActuator,
    LifecycleRequest,
    MemoryLimits,
    PortRange,
)
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.executor import CommandExecutor
from gridctl.node.processes import observe_identity
from gridctl.node.records import Receipt, ResidencyRecord
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.statestore import NodeStateStore


def actuator(tmp_path: Path, *, free_mb: int = 100_000, capacity_mb: int = 4096) -> HostActuator:
    store = NodeStateStore(tmp_path / "node.sqlite3")
    runtime = LlamaCppRuntime(
        binary=Path("/nonexistent/llama-server"),  # any launch attempt would fail loudly
        key_file=tmp_path / "keys",
        api_key="k",
        log_dir=tmp_path / "logs",
    )
    return HostActuator(
        store=store,
        cache=ArtifactCache(tmp_path / "cache", store),
        runtime=runtime,
        ports=PortRange(29950, 29959),
        limits=MemoryLimits(capacity_mb, reserved_mb=512),
        free_memory_mb=lambda: free_mb,
    )


def loaded(tmp_path: Path, act: HostActuator) -> str:
    data = b"weights" * 100
    (tmp_path / "w.gguf").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    outcome = act.load(
        LifecycleRequest(
            "load", "m", artifact_sha256=sha, artifact_source=(tmp_path / "w.gguf").as_uri()
        )
    )
    assert outcome.artifact_fetched
    return sha


def test_warm_is_rejected_before_launch_when_free_memory_no_longer_fits(tmp_path: Path) -> None:
    act = actuator(tmp_path, free_mb=300)
    sha = loaded(tmp_path, act)
    with pytest.raises(ActionFailure) as info:
        act.warm(LifecycleRequest("warm", "m", memory_mb=640, artifact_sha256=sha))
    assert info.value.reason == "insufficient_free_memory"
    row = act.store.residency("m")
    assert row is not None and row.state is ResidencyState.CACHED and row.pid is None


def test_warm_is_rejected_when_declared_capacity_is_full(tmp_path: Path) -> None:
    act = actuator(tmp_path, capacity_mb=1024)  # 1024 - 512 reserved = 512 usable
    sha = loaded(tmp_path, act)
    with pytest.raises(ActionFailure) as info:
        act.warm(LifecycleRequest("warm", "m", memory_mb=640, artifact_sha256=sha))
    assert info.value.reason == "capacity_exceeded"


def test_warm_without_a_verified_artifact_never_launches(tmp_path: Path) -> None:
    act = actuator(tmp_path)
    with pytest.raises(ActionFailure) as info:
        act.warm(LifecycleRequest("warm", "m", memory_mb=64, artifact_sha256="0" * 64))
    assert info.value.reason == "artifact_not_cached"
    assert act.store.residencies() == []


def test_load_refreshes_disk_and_refuses_when_it_cannot_fit(tmp_path: Path) -> None:
    act = actuator(tmp_path)
    with pytest.raises(ActionFailure) as info:
        act.load(
            LifecycleRequest(
                "load",
                "m",
                artifact_sha256="0" * 64,
                artifact_source="file:///x",
                artifact_size_mb=10**9,
            )
        )
    assert info.value.reason == "insufficient_disk"
    assert act.disk[1] > 0


def test_restart_marks_interrupted_actions_failed(tmp_path: Path) -> None:
    act = actuator(tmp_path)
    act.store.put_receipt(Receipt("a-run", "warm", "m", "running", received_at=1.0))
    act.store.put_receipt(Receipt("a-acc", "load", "m", "accepted", received_at=1.0))
    act.store.put_receipt(Receipt("a-done", "load", "m", "succeeded", received_at=1.0, acked=True))
    act.store.put_residency(ResidencyRecord("m", ResidencyState.WARMING, 640, port=29950))
    executor = CommandExecutor(act, lambda: HostState.ACCEPTING)
    assert executor.recover() == 2
    notes = act.recover()
    for action_id in ("a-run", "a-acc"):
        receipt = act.store.receipt(action_id)
        assert receipt is not None and receipt.status == "failed"
        assert receipt.reason == "interrupted_by_restart" and not receipt.acked
    assert act.store.receipt("a-done").status == "succeeded"  # type: ignore[union-attr]
    row = act.store.residency("m")
    assert row is not None and row.state is ResidencyState.FAILED and row.port is None
    assert notes == ["m: interrupted step marked failed"]


def test_live_pid_without_published_proof_is_fenced_and_left_alone(tmp_path: Path) -> None:
    act = actuator(tmp_path)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        act.store.put_residency(
            ResidencyRecord("m", ResidencyState.WARMING, 640, port=29951, pid=bystander.pid)
        )
        act.recover()
        row = act.store.residency("m")
        assert row is not None and row.fenced and row.state is ResidencyState.FAILED
        with pytest.raises(ActionFailure):
            act.unload(LifecycleRequest("unload", "m", force=True))
        assert bystander.poll() is None  # never signalled
        # a fenced port is never handed out again
        assert 29951 not in {act._allocate_port() for _ in range(3)}
    finally:
        bystander.kill()
        bystander.wait()
    act.refresh()  # once the PID is gone the handle is released
    row = act.store.residency("m")
    assert row is not None and row.pid is None and row.message == "child_exited"


def test_reused_pid_with_other_identity_is_not_signalled(tmp_path: Path) -> None:
    act = actuator(tmp_path)
    me = observe_identity(os.getpid())
    assert me is not None
    # a record that claims this test process is a llama-server child: argv differs
    forged = me.__class__(me.pid, me.create_time, me.executable, ("llama-server", "--port", "1"))
    act.store.put_residency(
        ResidencyRecord("m", ResidencyState.READY, 640, port=29952, pid=me.pid, identity=forged)
    )
    act.recover()
    row = act.store.residency("m")
    assert row is not None and row.fenced and row.message == "identity_unproven"
    with pytest.raises(ActionFailure):
        act.unload(LifecycleRequest("unload", "m", force=True))


def test_child_is_stopped_when_its_handle_cannot_be_recorded(tmp_path: Path) -> None:
    script = tmp_path / "fake-engine"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    runtime = LlamaCppRuntime(
        binary=script, key_file=tmp_path / "k", api_key="k", log_dir=tmp_path / "logs"
    )

    class FailingJournal:
        pid = 0

        def spawned(self, model_id: str, pid: int, port: int) -> None:
            self.pid = pid
            raise OSError("disk full")

        def proven(self, model_id: str, identity: object) -> None:  # pragma: no cover
            raise AssertionError("never reached")

    journal = FailingJournal()
    with pytest.raises(OSError):
        runtime.spawn("m", tmp_path / "w.gguf", 29960, journal)  # type: ignore[arg-type]
    assert journal.pid and not Path(f"/proc/{journal.pid}").exists()
