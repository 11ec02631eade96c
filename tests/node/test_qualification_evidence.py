"""Qualification evidence on disk and in the heartbeat, without an engine.

The latest run of a runtime decides; a node that never ran a qualification
omits ``qualified_runtimes`` (not claimed), one that did reports the runtimes
that passed (possibly none); the controller reads both shapes, and an old
heartbeat without the field still validates and means "not claimed".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gridctl.config import resolving
from gridctl.config.schemas import fill_defaults
from gridctl.controller.registry import HEARTBEAT_SCHEMA, validate_wire
from gridctl.errors import WireError
from gridctl.node import reports
from gridctl.node.daemon import NodeConfig
from gridctl.node.qualification import (
    STEP_NAMES,
    Qualification,
    StepResult,
    evidence_path,
    qualified_runtimes,
    read_evidence,
    write_evidence,
)


def _run(runtime: str, *, passed: bool) -> Qualification:
    steps = [StepResult(name, True) for name in STEP_NAMES]
    if not passed:
        steps = [*steps[:2], StepResult("warm", False, "ready_timeout", "not ready in time")]
    return Qualification(runtime, "gemma-3-270m", "a" * 64, "0.6.0", 1.0, 2.0, steps)


def test_no_evidence_means_not_claimed(tmp_path: Path) -> None:
    assert qualified_runtimes(tmp_path) is None
    (tmp_path / "qualifications").mkdir()
    assert qualified_runtimes(tmp_path) is None  # an empty folder claims nothing either


def test_the_latest_run_of_a_runtime_decides(tmp_path: Path) -> None:
    write_evidence(tmp_path, _run("llama.cpp", passed=True))
    assert qualified_runtimes(tmp_path) == ("llama.cpp",)
    write_evidence(tmp_path, _run("llama.cpp-router", passed=False))
    assert qualified_runtimes(tmp_path) == ("llama.cpp",)
    write_evidence(tmp_path, _run("llama.cpp", passed=False))
    assert qualified_runtimes(tmp_path) == ()  # claimed: nothing passed any more
    doc = read_evidence(tmp_path)["llama.cpp"]
    assert doc["passed"] is False and doc["steps"][-1]["reason"] == "ready_timeout"
    assert {"runtime", "model", "artifact_sha256", "engine_version", "steps"} <= set(doc)


def test_a_corrupt_or_misnamed_file_never_qualifies(tmp_path: Path) -> None:
    write_evidence(tmp_path, _run("llama.cpp", passed=True))
    path = evidence_path(tmp_path, "llama.cpp")
    path.with_name("vllm.json").write_text(path.read_text("utf-8"), "utf-8")  # says llama.cpp
    assert qualified_runtimes(tmp_path) == ("llama.cpp",)
    path.write_text("{not json", "utf-8")
    assert qualified_runtimes(tmp_path) == ()


def _sample() -> reports.ResourceSample:
    return reports.ResourceSample(8192, 4096, 0, 1000, 2000)


def _heartbeat(facts: reports.HostFacts) -> dict[str, object]:
    return reports.heartbeat(
        facts,
        _sample(),
        {"schema_version": 1, "state": "accepting", "residencies": []},
        receipts=[],
        request_commands=False,
        active_tasks=0,
        queue_depth=0,
    )


@pytest.mark.parametrize("claimed", [None, (), ("llama.cpp",)])
def test_the_heartbeat_carries_the_claim_and_the_controller_reads_it(
    claimed: tuple[str, ...] | None,
) -> None:
    facts = reports.HostFacts("box-1", 4096, qualified_runtimes=claimed)
    body = _heartbeat(facts)
    validate_wire(HEARTBEAT_SCHEMA, body)
    raw = body["resources"]
    assert isinstance(raw, dict)
    assert ("qualified_runtimes" in raw) is (claimed is not None)
    parsed = resolving.resources_from_mapping(fill_defaults(raw, "defs/host-resources.schema.json"))
    assert parsed.qualified_runtimes == claimed


def test_a_malformed_claim_is_refused_by_name() -> None:
    body = _heartbeat(reports.HostFacts("box-1", 4096))
    resources = body["resources"]
    assert isinstance(resources, dict)
    resources["qualified_runtimes"] = "llama.cpp"
    with pytest.raises(WireError, match="qualified_runtimes"):
        validate_wire(HEARTBEAT_SCHEMA, body)


def test_the_node_reports_its_evidence_when_it_starts(tmp_path: Path) -> None:
    config = NodeConfig("box-1", "http://127.0.0.1:1", tmp_path / "token", tmp_path, 4096)
    assert config.facts().qualified_runtimes is None
    write_evidence(tmp_path, _run("llama.cpp", passed=True))
    assert config.facts().qualified_runtimes == ("llama.cpp",)
