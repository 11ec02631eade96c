"""The YAML reader keeps positions and refuses what JSON cannot represent."""

from __future__ import annotations

from gridctl.config.yamlsource import parse_yaml


def test_positions_of_values_and_keys() -> None:
    docs, issues = parse_yaml("a: 1\nb:\n  - x\n  - {c: 2}\n---\nd: 4\n", "f.yaml")
    assert issues == []
    first, second = docs
    assert first.data == {"a": 1, "b": ["x", {"c": 2}]}
    assert first.positions["/a"] == (1, 4)
    assert first.key_positions["/b"] == (2, 1)
    assert first.positions["/b/1/c"] == (4, 9)
    assert second.data == {"d": 4} and second.positions["/d"] == (6, 4)


def test_pointer_escaping() -> None:
    docs, _ = parse_yaml("'a/b': {'~c': 1}\n", "f.yaml")
    assert docs[0].positions["/a~1b/~0c"] == (1, 15)


def test_position_falls_back_to_nearest_ancestor() -> None:
    docs, _ = parse_yaml("spec:\n  x: 1\n", "f.yaml")
    assert docs[0].position("/spec/missing") == (2, 3)


def test_duplicate_keys_are_errors() -> None:
    _, issues = parse_yaml("a: 1\na: 2\n", "f.yaml")
    assert [(i.line, i.pointer, i.message) for i in issues] == [(2, "/a", "duplicate key 'a'")]


def test_non_finite_and_foreign_tags_are_errors() -> None:
    _, issues = parse_yaml("a: .inf\nb: !custom 3\n", "f.yaml")
    assert [i.pointer for i in issues] == ["/a", "/b"]


def test_timestamps_stay_strings() -> None:
    docs, issues = parse_yaml("when: 2026-01-01\n", "f.yaml")
    assert issues == [] and docs[0].data == {"when": "2026-01-01"}


def test_empty_documents_are_skipped() -> None:
    docs, issues = parse_yaml("---\n---\na: 1\n", "f.yaml")
    assert issues == [] and len(docs) == 1
