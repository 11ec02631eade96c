"""``gridctl plan`` on a fleet where one model fits no single host: the split it shows."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from gridctl.cli.main import main

NOW = 1_800_000_000

PROFILES = """\
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: gemma-big
spec:
  memory_mb: 40000
  min_replicas: 1
  split: {max_stages: 3, layers: 26, native_context: 32768}
---
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: chat-small
spec:
  memory_mb: 4096
  min_replicas: 1
---
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: default
spec:
  mode: recommend
  admission_headroom_mb: 0
"""


def _host(host_id: str, capacity_mb: int) -> dict[str, object]:
    return {
        "host_id": host_id,
        "kind": "managed",
        "last_heartbeat": NOW - 2,
        "resources": {
            "capacity_mb": capacity_mb,
            "reserved_mb": 2048,
            "runtimes": ["llama.cpp"],
            "failure_domain": host_id,
            "disk_free_mb": 100_000,
        },
        "allocator": {
            "schema_version": 1,
            "state": "accepting",
            "residencies": [],
            "cached_models": [],
        },
    }


@pytest.fixture
def split_fleet(tmp_path: Path) -> tuple[str, str]:
    """DIR and SNAPSHOT: three hosts of 14, 14 and 22 GB free; a 40 GB model."""
    desired = tmp_path / "desired"
    desired.mkdir()
    (desired / "models.yaml").write_text(PROFILES, encoding="utf-8")
    snapshot = tmp_path / "snapshot.json"
    hosts = [_host("lap-a", 16384), _host("lap-b", 16384), _host("mini-c", 24576)]
    document = {"schema_version": 1, "now": NOW, "hosts": hosts, "demand": []}
    snapshot.write_text(json.dumps(document), encoding="utf-8")
    return str(desired), str(snapshot)


def test_human_plan_shows_the_split_and_its_stages(
    split_fleet: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    desired, snapshot = split_fleet
    assert main(["plan", desired, "--against", snapshot]) == 0
    out = capsys.readouterr().out
    assert "  + gemma-big split over 3 hosts (llama.cpp, " in out
    assert "coordinator lap-a, context 32768, 4 lanes): baseline replica 1 of 1" in out
    stage_lines = [line for line in out.splitlines() if line.startswith("      stage ")]
    assert [line.split(":")[0].split()[-1] for line in stage_lines] == ["lap-a", "lap-b", "mini-c"]
    assert stage_lines[0].startswith("      stage lap-a: layers 0-") and " of 26, " in out
    assert "gemma-big: insufficient_capacity" not in out  # the split replaces the row
    assert "1 split (not acted on yet)" in out and "0 unsatisfied." in out


def test_json_plan_carries_the_topology(
    split_fleet: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    desired, snapshot = split_fleet
    assert main(["plan", desired, "--against", snapshot, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (split,) = doc["splits"]
    assert split["model_id"] == "gemma-big" and split["coordinator_host_id"] == "lap-a"
    assert split["layer_count"] == 26 and split["context_length"] == 32768
    stages = split["stages"]
    assert [s["host_id"] for s in stages] == ["lap-a", "lap-b", "mini-c"]
    assert stages[0]["layer_start"] == 0 and stages[-1]["layer_end"] == 26
    assert all(a["layer_end"] == b["layer_start"] for a, b in itertools.pairwise(stages))
    assert split["memory_mb"] == sum(s["memory_mb"] for s in stages) >= 40_000
    assert doc["models"]["gemma-big"]["split"].startswith("split over 3 hosts: lap-a layers 0-")
    assert [u["model_id"] for u in doc["unsatisfied"]] == []


def test_explain_names_the_split(
    split_fleet: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    desired, snapshot = split_fleet
    assert main(["plan", desired, "--against", snapshot, "--explain", "gemma-big"]) == 0
    out = capsys.readouterr().out
    assert "Explain gemma-big: target 1" in out
    assert "\n  split over 3 hosts: lap-a layers 0-" in out


def test_a_bad_split_is_refused_naming_the_field(
    split_fleet: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    desired, snapshot = split_fleet
    models = Path(desired) / "models.yaml"
    models.write_text(PROFILES.replace("max_stages: 3", "max_stages: 1"), encoding="utf-8")
    assert main(["plan", desired, "--against", snapshot]) == 1
    err = capsys.readouterr().err
    assert "/spec/split/max_stages" in err
    models.write_text(PROFILES.replace("max_stages: 3", "max_stages: 30"), encoding="utf-8")
    assert main(["plan", desired, "--against", snapshot]) == 1
    err = capsys.readouterr().err
    assert "/spec/split/max_stages" in err and "exceeds split.layers (26)" in err
