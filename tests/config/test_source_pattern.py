"""A ModelProfile's artifact ``source`` is judged alike by both validators.

``model-profile.schema.json`` is compiled (``jsonschema_rs``) so a directory of
hundreds of profiles loads without walking each through ``jsonschema``. Its
``source`` pattern once said ``\\S+``, which the two regex engines read differently
(Python's ``\\s`` also matches \\x1c-\\x1f and \\x85, the Rust engine's \\ufeff); it
now names Python's whitespace one code point at a time. These tests hold that the
compiled validator and ``jsonschema`` accept and refuse the same sources, arbitrary
text included, that ``jsonschema``'s verdict is the one ``\\S+`` gave, that every
shipped and fixture YAML document is accepted by both, and that a bad source still
gets an error naming its file, line and field.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.cli.main import main
from gridctl.config.loading import yaml_files
from gridctl.config.schemas import (
    END,
    KIND_SCHEMAS,
    SOURCE_PATTERN,
    compiled,
    compiled_accepts,
    load_schema,
    validator,
)
from gridctl.config.yamlsource import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "model-profile.schema.json"
OLD_PATTERN = re.compile(r"^(file|https?|hf|pypi)://\S+" + END)
# every code point either engine calls whitespace, the ones they disagreed on first
DISPUTED = "\x1c\x1d\x1e\x1f\x85\ufeff"
SPACES = DISPUTED + "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
SCHEMES = ("file://", "http://", "https://", "hf://", "pypi://", "ftp://", "hf:/", "")


def profile(source: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gridctl/v1",
        "kind": "ModelProfile",
        "metadata": {"name": "m"},
        "spec": {"memory_mb": 1024, "artifact": {"source": source}},
    }


def judged(source: Any) -> bool:
    """jsonschema's verdict on ``source``, asserted to be the compiled validator's too."""
    document = profile(source)
    truth = validator(PROFILE).is_valid(document)
    quick = compiled_accepts(PROFILE, document)
    assert quick == truth, f"jsonschema {truth}, compiled {quick}: {source!r}"
    return truth


def test_the_schema_holds_the_pattern_both_engines_read_alike() -> None:
    artifact = load_schema(PROFILE)["properties"]["spec"]["properties"]["artifact"]
    assert artifact["properties"]["source"]["pattern"] == SOURCE_PATTERN + END
    assert compiled(PROFILE) is not None


def test_every_code_point_is_judged_alike_and_as_before() -> None:
    """Each code point of the Basic Multilingual Plane (where all whitespace is) and a
    stride of the others, inside a source: the compiled validator agrees with the
    pattern as ``jsonschema`` reads it (Python's ``re.search``), which agrees with the
    old ``\\S+``."""
    fast = compiled(PROFILE)
    assert fast is not None
    pattern = re.compile(SOURCE_PATTERN + END)
    codes = [*range(0x10000), *range(0x10000, sys.maxunicode + 1, 257)]
    for code in codes:
        if 0xD800 <= code <= 0xDFFF:
            continue  # a lone surrogate: the compiled validator cannot read it (tested apart)
        source = f"hf://a{chr(code)}b"
        truth = bool(pattern.search(source))
        assert fast.is_valid(profile(source)) == truth, hex(code)
        assert truth == bool(OLD_PATTERN.search(source)), hex(code)


@pytest.mark.parametrize("char", sorted(set(SPACES)), ids=lambda c: f"U+{ord(c):04X}")
def test_whitespace_is_refused_by_both(char: str) -> None:
    expected = bool(OLD_PATTERN.match(f"hf://a{char}b"))
    assert judged(f"hf://a{char}b") is expected
    assert judged(f"hf://org/repo/m.gguf{char}") is expected
    assert judged(f"{char}hf://org/repo/m.gguf") is False


def test_a_lone_surrogate_falls_back_to_jsonschema() -> None:
    source = "hf://a\ud800b"
    assert not compiled_accepts(PROFILE, profile(source))
    assert validator(PROFILE).is_valid(profile(source)) == bool(OLD_PATTERN.match(source))


TEXT = st.text(
    alphabet=st.sampled_from(SPACES) | st.characters(blacklist_categories=("Cs",)),
    max_size=24,
)


@settings(max_examples=400, deadline=None)
@given(scheme=st.sampled_from(SCHEMES), rest=TEXT)
def test_arbitrary_sources_are_judged_alike(scheme: str, rest: str) -> None:
    source = scheme + rest
    assert judged(source) == bool(OLD_PATTERN.match(source) and len(source) <= 2048)


@settings(max_examples=100, deadline=None)
@given(value=st.none() | st.integers() | st.booleans() | st.lists(TEXT, max_size=2))
def test_a_source_that_is_not_a_string_is_refused_by_both(value: Any) -> None:
    assert judged(value) is False


def shipped_documents() -> list[tuple[str, str, Any]]:
    """Every document of a compiled kind in the shipped YAML and the test fixtures."""
    found = []
    tops = [ROOT / "policies", ROOT / "fleet", ROOT / "examples", ROOT / "tests"]
    for path in [file for top in tops for file in yaml_files(top)]:
        documents, _ = parse_yaml(path.read_text(encoding="utf-8"), str(path))
        for doc in documents:
            kind = doc.data.get("kind") if isinstance(doc.data, dict) else None
            relative = KIND_SCHEMAS.get(kind) if isinstance(kind, str) else None
            if relative is not None and compiled(relative) is not None:
                found.append((str(path.relative_to(ROOT)), relative, doc.data))
    return found


def test_every_shipped_and_fixture_document_is_judged_alike() -> None:
    documents = shipped_documents()
    assert sum(1 for _, relative, _ in documents if relative == PROFILE) >= 5
    for shown, relative, data in documents:
        truth = validator(relative).is_valid(data)
        assert compiled_accepts(relative, data) == truth, shown
        if "broken" not in shown:
            assert truth, shown


def test_a_source_with_a_separator_names_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata:\n  name: m\nspec:\n"
        "  memory_mb: 1024\n  artifact:\n"
        '    source: "hf://org/repo\\x1cm.gguf"\n'
        f"    sha256: {'ab' * 32}\n    size_mb: 100\n"
    )
    (tmp_path / "p.yaml").write_text(text)
    assert main(["validate", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    [error] = report["errors"]
    assert error["file"].endswith("p.yaml")
    assert error["line"] == 8
    assert error["pointer"] == "/spec/artifact/source"
    assert "does not match" in error["message"]
