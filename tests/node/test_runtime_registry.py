"""The runtime registry: a runtime name finds its adapter, an unknown one is refused by name,
and a warm for a runtime this host has no adapter for changes nothing and launches nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridctl.domain.states import ResidencyState
from gridctl.node.actuator import (
    ActionFailure,
    HostActuator,
    LifecycleRequest,
    MemoryLimits,
    PortRange,
)
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.executor import lifecycle_request
from gridctl.node.records import ResidencyRecord
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.runtimes.registry import (
    ADAPTER_KINDS,
    RuntimeRegistry,
    UnknownRuntime,
    adapter_kind,
)
from gridctl.node.statestore import NodeStateStore
from tests.node.test_actuator import actuator, loaded


def llama(tmp_path: Path, kind: type[LlamaCppRuntime] = LlamaCppRuntime) -> LlamaCppRuntime:
    return kind(
        binary=Path("/nonexistent/llama-server"),
        key_file=tmp_path / "key",
        api_key="k",
        log_dir=tmp_path / "logs",
    )


class RenamedLlama(LlamaCppRuntime):
    """A second complete adapter under another runtime name."""

    name = "llama.cpp-alt"


def test_a_declared_runtime_finds_its_adapter_and_none_means_the_default(tmp_path: Path) -> None:
    first, second = llama(tmp_path), llama(tmp_path, RenamedLlama)
    registry = RuntimeRegistry([first, second])
    assert registry.adapter_for("llama.cpp") is first
    assert registry.adapter_for("llama.cpp-alt") is second
    assert registry.adapter_for(None) is first
    assert registry.names == ("llama.cpp", "llama.cpp-alt")
    assert "llama.cpp-alt" in registry and "vllm" not in registry


def test_an_unknown_runtime_is_refused_naming_it_and_the_ones_this_host_has(
    tmp_path: Path,
) -> None:
    registry = RuntimeRegistry([llama(tmp_path)])
    with pytest.raises(UnknownRuntime) as info:
        registry.adapter_for("vllm")
    assert info.value.reason == "unknown_runtime"
    assert info.value.runtime == "vllm"
    assert str(info.value) == (
        "unknown_runtime: runtime 'vllm' has no adapter here (adapters: llama.cpp)"
    )


def test_the_build_ships_llama_cpp_and_refuses_unknown_kinds_by_name() -> None:
    assert adapter_kind("llama.cpp") is LlamaCppRuntime
    with pytest.raises(UnknownRuntime, match="'ollama' has no adapter"):
        adapter_kind("ollama")
    assert all(cls.name == name for name, cls in ADAPTER_KINDS.items())


@pytest.fixture(scope="module")
def two_runtimes(tmp_path_factory: pytest.TempPathFactory) -> RuntimeRegistry:
    root = tmp_path_factory.mktemp("registry")
    return RuntimeRegistry([llama(root), llama(root, RenamedLlama)])


@given(name=st.text(max_size=24))
def test_only_the_registered_names_resolve_and_every_other_is_refused_by_name(
    two_runtimes: RuntimeRegistry, name: str
) -> None:
    registry = two_runtimes
    if name in ("llama.cpp", "llama.cpp-alt"):
        assert registry.adapter_for(name).name == name
        return
    with pytest.raises(UnknownRuntime) as info:
        registry.adapter_for(name)
    assert info.value.runtime == name and repr(name) in str(info.value)


def test_a_runtime_registered_twice_or_no_runtime_at_all_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'llama\.cpp' is registered twice"):
        RuntimeRegistry([llama(tmp_path), llama(tmp_path)])
    with pytest.raises(ValueError, match="at least one runtime adapter"):
        RuntimeRegistry([])


def test_an_adapter_missing_part_of_the_contract_is_refused_naming_the_gap(
    tmp_path: Path,
) -> None:
    class NoAdoption(LlamaCppRuntime):
        name = "half-built"
        adopt = None  # type: ignore[assignment]

    with pytest.raises(ValueError, match=r"'half-built'.*adopt: not a method"):
        RuntimeRegistry([llama(tmp_path, NoAdoption)])


def test_a_wire_command_names_the_runtime_the_warm_uses() -> None:
    command = {"kind": "warm", "model_id": "m", "runtime": "vllm", "endpoints": ["chat"]}
    assert lifecycle_request(command).runtime == "vllm"
    assert lifecycle_request({"kind": "warm", "model_id": "m"}).runtime is None


def test_a_warm_for_an_unknown_runtime_changes_nothing_and_launches_nothing(
    tmp_path: Path,
) -> None:
    act = actuator(tmp_path)
    sha = loaded(tmp_path, act)
    before = act.store.residency("m")
    with pytest.raises(ActionFailure) as info:
        act.warm(LifecycleRequest("warm", "m", memory_mb=64, artifact_sha256=sha, runtime="vllm"))
    assert info.value.reason == "unknown_runtime"
    assert "'vllm'" in str(info.value) and "llama.cpp" in str(info.value)
    assert act.store.residency("m") == before
    assert before is not None and before.state is ResidencyState.CACHED and before.pid is None


def test_a_warm_naming_the_default_runtime_records_it(tmp_path: Path) -> None:
    act = actuator(tmp_path)  # its binary does not exist: the launch itself fails
    sha = loaded(tmp_path, act)
    with pytest.raises(FileNotFoundError):
        act.warm(
            LifecycleRequest("warm", "m", memory_mb=64, artifact_sha256=sha, runtime="llama.cpp")
        )
    row = act.store.residency("m")
    assert row is not None and row.runtime == "llama.cpp" and row.state is ResidencyState.FAILED


@pytest.fixture(scope="module")
def cached_host(tmp_path_factory: pytest.TempPathFactory) -> tuple[HostActuator, str]:
    root = tmp_path_factory.mktemp("cached-host")
    act = actuator(root)
    return act, loaded(root, act)


@given(name=st.text(max_size=24).filter(lambda name: name != "llama.cpp"))
def test_no_warm_for_a_runtime_without_an_adapter_changes_the_node(
    cached_host: tuple[HostActuator, str], name: str
) -> None:
    act, sha = cached_host
    rows, receipts = act.store.residencies(), act.store.receipts(limit=100)
    with pytest.raises(ActionFailure) as info:
        act.warm(LifecycleRequest("warm", "m", memory_mb=64, artifact_sha256=sha, runtime=name))
    assert info.value.reason == "unknown_runtime" and repr(name) in str(info.value)
    assert act.store.residencies() == rows and act.store.receipts(limit=100) == receipts


def test_a_warm_is_dispatched_to_the_adapter_its_runtime_names(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "node.sqlite3")
    default, other = llama(tmp_path), llama(tmp_path, RenamedLlama)
    act = HostActuator(
        store=store,
        cache=ArtifactCache(tmp_path / "cache", store),
        runtime=default,
        other_runtimes=[other],
        ports=PortRange(29940, 29949),
        limits=MemoryLimits(4096),
        free_memory_mb=lambda: 100_000,
    )
    assert act.runtimes.names == ("llama.cpp", "llama.cpp-alt") and act.runtime is default
    sha = loaded(tmp_path, act)
    with pytest.raises(FileNotFoundError):  # neither adapter's binary exists
        act.warm(
            LifecycleRequest(
                "warm", "m", memory_mb=64, artifact_sha256=sha, runtime="llama.cpp-alt"
            )
        )
    row = store.residency("m")
    assert row is not None and row.runtime == "llama.cpp-alt" and row.state is ResidencyState.FAILED


def test_a_child_of_a_runtime_without_an_adapter_is_fenced_and_never_signalled(
    tmp_path: Path,
) -> None:
    act = actuator(tmp_path)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        act.store.put_residency(
            ResidencyRecord(
                "m", ResidencyState.READY, 640, runtime="vllm", port=29953, pid=bystander.pid
            )
        )
        act.recover()
        row = act.store.residency("m")
        assert row is not None and row.fenced and row.state is ResidencyState.FAILED
        with pytest.raises(ActionFailure) as info:
            act.unload(LifecycleRequest("unload", "m", force=True))
        assert info.value.reason == "identity_unproven"
        act.refresh()
        assert bystander.poll() is None  # never signalled
    finally:
        bystander.kill()
        bystander.wait()
