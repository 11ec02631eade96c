"""Each kind of bad input makes `gridctl validate` exit 1 and name file, line and field."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gridctl.cli.main import main

GOOD_PROFILE = """\
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {name}
spec:
  memory_mb: 1024
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def validate_json(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["validate", str(directory), "--json"])
    return code, json.loads(capsys.readouterr().out)


def only_error(report: dict) -> dict:
    assert report["valid"] is False
    assert len(report["errors"]) == 1, report["errors"]
    return report["errors"][0]


def test_valid_directory_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.yaml", GOOD_PROFILE.format(name="a"))
    assert main(["validate", str(tmp_path)]) == 0
    assert "valid, 1 documents" in capsys.readouterr().out


def test_yaml_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "bad.yaml", "apiVersion: gridctl/v1\nkind: [ModelProfile\nspec: {}\n")
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["file"] == str(path)
    assert error["line"] == 3
    assert "YAML syntax error" in error["message"]


def test_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "p.yaml", GOOD_PROFILE.format(name="a").replace("1024", '"lots"'))
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert (error["line"], error["column"]) == (6, 14)
    assert error["pointer"] == "/spec/memory_mb"
    assert (error["kind"], error["name"]) == ("ModelProfile", "a")
    assert "is not of type 'integer'" in error["message"]


def test_workload_score_out_of_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_PROFILE.format(name="a") + "  workload_scores:\n    coding: 1.5\n"
    write(tmp_path, "p.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/workload_scores/coding"
    assert (error["line"], error["column"]) == (8, 13)
    assert "1.5 is greater than the maximum of 1" in error["message"]


def test_negative_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "p.yaml", GOOD_PROFILE.format(name="a").replace("1024", "-512"))
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/memory_mb"
    assert error["line"] == 6
    assert "less than the minimum of 1" in error["message"]


def test_unknown_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "p.yaml", GOOD_PROFILE.format(name="a") + "  memroy_mb: 5\n")
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/memroy_mb"
    assert (error["line"], error["column"]) == (7, 3)
    assert error["message"] == "unknown field 'memroy_mb'"


def test_missing_required_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata:\n  name: a\nspec:\n  priority: 3\n"
    )
    write(tmp_path, "p.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/memory_mb"
    assert error["line"] == 6  # the spec mapping that lacks it
    assert error["message"] == "missing required field 'memory_mb'"


def test_duplicate_profile_across_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "one.yaml", GOOD_PROFILE.format(name="dup"))
    second = write(tmp_path, "two/two.yaml", "# comment\n" + GOOD_PROFILE.format(name="dup"))
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["file"] == str(second)
    assert error["line"] == 5
    assert error["pointer"] == "/metadata/name"
    assert "duplicate ModelProfile 'dup'" in error["message"]
    assert "one.yaml:4" in error["message"]


def test_artifact_source_without_sha256(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_PROFILE.format(name="a") + (
        "  artifact:\n    source: hf://org/repo/model.gguf\n    size_mb: 100\n"
    )
    write(tmp_path, "p.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/artifact"
    assert error["line"] == 8
    assert "requires sha256" in error["message"]


def test_artifact_source_with_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = "AB" * 32
    for source, needle in (
        ("https://user:secret@example.org/m.gguf", "credentials"),
        ("https://example.org/m.gguf?access_token=x", "'access_token'"),
    ):
        text = GOOD_PROFILE.format(name="a") + (
            f"  artifact:\n    source: {source}\n    sha256: {digest}\n    size_mb: 100\n"
        )
        write(tmp_path, "p.yaml", text)
        code, report = validate_json(tmp_path, capsys)
        error = only_error(report)
        assert code == 1
        assert error["pointer"] == "/spec/artifact/source"
        assert error["line"] == 8
        assert needle in error["message"]


def test_min_replicas_above_max(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_PROFILE.format(name="a") + "  min_replicas: 3\n  max_replicas: 2\n"
    write(tmp_path, "p.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/min_replicas"
    assert error["line"] == 7
    assert "greater than max_replicas" in error["message"]


def test_two_controller_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata:\n  name: {name}\n"
    write(tmp_path, "a.yaml", policy.format(name="one"))
    second = write(tmp_path, "b.yaml", policy.format(name="two"))
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["file"] == str(second)
    assert error["line"] == 1
    assert "at most one ControllerPolicy" in error["message"]


def test_pins_exceed_max_replicas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_PROFILE.format(name="a") + "  pins: [h1, h2]\n  max_replicas: 1\n"
    write(tmp_path, "p.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    assert code == 1
    assert only_error(report)["pointer"] == "/spec/pins"


def test_human_output_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "p.yaml", GOOD_PROFILE.format(name="a") + "  bogus: true\n")
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'p.yaml'}:7:3: ModelProfile/a: /spec/bogus: unknown field 'bogus'" in err


def test_unknown_kind_and_non_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "k.yaml", "apiVersion: gridctl/v1\nkind: Deployment\nmetadata: {name: x}\n")
    write(tmp_path, "l.yaml", "- just\n- a list\n")
    code, report = validate_json(tmp_path, capsys)
    assert code == 1
    messages = sorted(e["message"] for e in report["errors"])
    assert messages[0] == "a document must be a mapping"
    assert messages[1].startswith("unknown kind 'Deployment'")


def test_warnings_do_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_PROFILE.format(name="a") + "  colocation_excludes: [ghost]\n"
    write(tmp_path, "p.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    assert code == 0
    assert report["valid"] is True
    assert [w["pointer"] for w in report["warnings"]] == ["/spec/colocation_excludes/0"]


def test_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = validate_json(tmp_path / "nope", capsys)
    assert code == 1
    assert report["errors"][0]["message"] == "no such file or directory"


def test_an_unknown_endpoint_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_PROFILE.format(name="a") + "  endpoints: [chat, images]\n"
    write(tmp_path, "a.yaml", text)
    code, report = validate_json(tmp_path, capsys)
    error = only_error(report)
    assert code == 1
    assert error["pointer"] == "/spec/endpoints/1"
    assert error["line"] == 7
