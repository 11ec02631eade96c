"""The lab's 32-model catalog: valid, placeable, and unchanged for small selections.

The specification's maxima include 32 models. The catalog grew from 16 to 32
by appending specs, so every run with ``--models`` <= 16 must keep picking the
same models (and so stay byte-identical); these tests pin that with literal
name lists and check each model can live on some lab blueprint host.
"""

from __future__ import annotations

import pytest

from gridctl.cli.main import main
from gridctl.lab.fleets import lab_hosts
from gridctl.lab.models import MAX_MODELS, lab_models
from gridctl.lab.nodes import SimNode
from gridctl.lab.scenario import START, lab_policy
from gridctl.lab.strategies import feasible_models
from tests.lab.worlds import blueprints, catalog

EIGHT = [
    "coder-14b",
    "coder-7b",
    "embed-small",
    "general-8b",
    "image-sdxl",
    "research-32b",
    "video-wan",
    "writer-8b",
]
SIXTEEN = [
    "coder-14b",
    "coder-32b",
    "coder-7b",
    "design-vl-8b",
    "embed-large",
    "embed-small",
    "general-3b",
    "general-70b",
    "general-8b",
    "image-flux",
    "image-sdxl",
    "research-32b",
    "research-8b",
    "sales-4b",
    "video-wan",
    "writer-8b",
]


def test_the_catalog_reaches_the_specification_maximum() -> None:
    assert MAX_MODELS == 32
    names = [m.name for m in lab_models(MAX_MODELS)]
    assert len(set(names)) == 32
    assert names == sorted(names)


def test_small_selections_are_the_models_they_always_were() -> None:
    assert [m.name for m in lab_models(8)] == EIGHT
    assert [m.name for m in lab_models(16)] == SIXTEEN
    for count in range(1, 17):
        assert {m.name for m in lab_models(count)} <= set(SIXTEEN)


def test_every_model_scores_known_workloads_within_zero_and_one() -> None:
    workloads = {w.name for w in catalog().workloads}
    for model in lab_models(MAX_MODELS):
        assert model.workload_scores, model.name
        for workload, score in model.workload_scores.items():
            assert workload in workloads, (model.name, workload)
            assert 0.0 < score <= 1.0, (model.name, workload, score)
        assert model.expected_service_seconds > 0 and model.replica_concurrency >= 1


def test_every_model_is_placeable_on_some_lab_blueprint_host() -> None:
    models = lab_models(MAX_MODELS)
    profiles = {m.name: m for m in models}
    # eight machines cover every kind of the rotation, each in its first memory variant or more
    hosts = lab_hosts(blueprints(), 8, models, seed=42)
    nodes = [SimNode(h, profiles, START) for h in hosts]
    for node in nodes:
        node.last_heartbeat = START
    snapshots = tuple(n.snapshot() for n in nodes)
    feasible = feasible_models(profiles, snapshots, START, lab_policy(8))
    assert sorted(set(profiles) - feasible) == []


def test_every_workload_has_a_second_choice_at_the_maximum() -> None:
    for workload in ("image", "video", "embedding", "coding", "research", "general"):
        able = [m.name for m in lab_models(MAX_MODELS) if m.workload_scores.get(workload, 0) > 0]
        assert len(able) >= 2, workload


def test_cli_accepts_32_models_and_refuses_33(capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--machines", "2", "--users", "5", "--duration", "5m"]
    assert main(["lab", "scenario", *small, "--models", "32", "--json"]) == 0
    assert '"models": 32' in capsys.readouterr().out
    assert main(["lab", "scenario", *small, "--models", "33"]) == 1
    err = capsys.readouterr().err
    assert "--models must be between 1 and 32, got 33" in err


def test_lab_models_refuses_out_of_range_counts() -> None:
    with pytest.raises(ValueError, match="between 1 and 32"):
        lab_models(33)
    with pytest.raises(ValueError, match="between 1 and 32"):
        lab_models(0)
