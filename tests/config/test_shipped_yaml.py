"""Every YAML file the project ships validates and names its schema for editors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gridctl.cli.main import main
from gridctl.config import check_directory, load_directory
from gridctl.domain import Mode

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("policies", "fleet", "examples")
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


def test_embedded_default_serves_gemma() -> None:
    state = load_directory(ROOT / "policies")
    assert state.policy.mode is Mode.AUTOMATIC
    (gemma,) = state.profiles
    assert gemma.artifact.sha256 == (
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    )
    assert gemma.artifact.size_mb * 1024 * 1024 >= 253_113_024
    assert gemma.min_replicas >= 1


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
