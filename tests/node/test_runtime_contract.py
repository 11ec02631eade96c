"""Conformance: every adapter this build registers implements the whole runtime contract,
and the conformance check itself catches an adapter that does not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gridctl.node.processes import Liveness
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes import adapter as contract
from gridctl.node.runtimes.adapter import RuntimeAdapter, contract_gaps, contract_members
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.runtimes.registry import ADAPTER_KINDS

# What the actuator drives. A member removed from the protocol must be removed here on
# purpose: the lifecycle depends on each of them.
LIFECYCLE = (
    "activity",  # running and queued requests: the heartbeat
    "adopt",  # after a node restart
    "endpoint",
    "healthy",
    "key_file",
    "model_ready",  # native readiness: this model is usable
    "name",
    "prepare_artifact",
    "probe_address",
    "prove_identity",  # the child is the one this node started
    "settings",
    "start",
    "stop",
    "wait_idle",  # drain
    "wait_ready",
)


def test_the_contract_has_every_lifecycle_step() -> None:
    assert contract_members() == tuple(sorted(LIFECYCLE))


@pytest.mark.parametrize("runtime", sorted(ADAPTER_KINDS))
def test_every_registered_adapter_implements_the_whole_contract(runtime: str) -> None:
    adapter_class = ADAPTER_KINDS[runtime]
    assert contract_gaps(adapter_class) == []
    assert adapter_class.name == runtime


def test_a_built_llama_cpp_adapter_is_a_runtime_adapter(tmp_path: Path) -> None:
    built = LlamaCppRuntime(
        binary=tmp_path / "llama-server", key_file=tmp_path / "k", api_key="k", log_dir=tmp_path
    )
    assert isinstance(built, RuntimeAdapter)
    assert built.probe_address == "127.0.0.1"
    assert built.prepare_artifact("m", tmp_path / "w.gguf") == tmp_path / "w.gguf"


class Partial:
    """An adapter that forgot most of the lifecycle and got one signature wrong."""

    name = "partial"

    def healthy(self, port: int) -> bool:
        return True

    def stop(self, identity: ProcessIdentity) -> bool:  # no ``grace``
        return True

    def adopt(self, model_id: str, identity: ProcessIdentity, port: int) -> Liveness:
        return Liveness.PROVEN

    probe_address = "127.0.0.1"  # a plain attribute where the contract has a property


def test_the_conformance_check_names_what_an_incomplete_adapter_lacks() -> None:
    gaps = contract_gaps(Partial)
    lacking = {gap.partition(":")[0] for gap in gaps}
    assert lacking == set(LIFECYCLE) - {"name", "healthy", "adopt"}
    assert "stop: parameters" in next(g for g in gaps if g.startswith("stop"))
    assert "probe_address: not a property" in gaps
    assert "settings: missing attribute" in gaps


def test_conformance_compares_parameter_names_and_kinds() -> None:
    class PositionalTimeout(LlamaCppRuntime):
        def wait_idle(self, port: int, timeout: float) -> None:
            return None

    gaps = contract_gaps(PositionalTimeout)
    assert len(gaps) == 1 and gaps[0].startswith("wait_idle: parameters")


def test_contract_errors_carry_a_stable_reason() -> None:
    failure: Callable[[str, str], contract.RuntimeFailure] = contract.ChildFailed
    error = failure("ready_timeout", "m not ready in time")
    assert error.reason == "ready_timeout" and str(error) == "ready_timeout: m not ready in time"
