"""Request features: the bounded classifier, unbound names and the two-level key hash."""

from __future__ import annotations

from gridctl.demand import affinity_hash, classify_workload, features_of, is_unbound, workflow_key
from gridctl.demand.features import CLASSIFIER_MAX_CHARS
from gridctl.domain import Workload, WorkloadCatalog

CATALOG = WorkloadCatalog(
    workloads=(
        Workload("coding", keywords=("python", "bug", "refactor")),
        Workload("research", keywords=("paper", "sources")),
        Workload("image", endpoints=("image",), modalities=("image",)),
        Workload("embedding", endpoints=("embeddings",)),
        Workload("general"),
    )
)


def test_endpoint_hint_wins_over_keywords() -> None:
    assert classify_workload(CATALOG, "embeddings", "text", "python bug") == "embedding"


def test_modality_hint_applies_to_non_text() -> None:
    assert classify_workload(CATALOG, "chat", "image", "python") == "image"


def test_most_keyword_hits_wins_and_default_otherwise() -> None:
    assert classify_workload(CATALOG, "chat", "text", "Fix this Python bug, see paper") == "coding"
    assert classify_workload(CATALOG, "chat", "text", "hello there") == "general"


def test_classifier_reads_a_bounded_prefix_only() -> None:
    text = "x " * CLASSIFIER_MAX_CHARS + "python"
    assert classify_workload(CATALOG, "chat", "text", text) == "general"


def test_auto_and_missing_models_are_unbound() -> None:
    assert is_unbound(None) and is_unbound("auto") and is_unbound(" AUTO ") and is_unbound("")
    assert not is_unbound("coder-7b")


def test_learner_key_is_a_second_hash_of_the_router_hash() -> None:
    first = affinity_hash("raw-session")
    second = workflow_key(first)
    assert "raw-session" not in first and first not in second
    f = features_of(
        t=1.0,
        endpoint="chat",
        model="auto",
        served_model=None,
        workload="coding",
        session_hash=first,
    )
    assert f.session == second and f.model is None and f.unbound
