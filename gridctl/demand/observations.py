"""Replaying bounded request observations (``schemas/wire/observation.schema.json``).

A record is one JSON object per request: ``t``, ``endpoint``, ``model``
(requested; null or "auto" = unbound), ``served_model``, ``workload`` (null =
classify from the other fields), ``modality``, approximate ``input_units`` and
``output_units``, ``service_seconds``, ``queue_depth``, ``outcome`` and
``session`` (an already-hashed affinity key). Parsing is pure: the caller
reads the file; a malformed record raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gridctl.demand.features import (
    ENDPOINTS,
    MODALITIES,
    OUTCOMES,
    RequestFeatures,
    classify_workload,
    features_of,
)
from gridctl.demand.learning import DemandLearner
from gridctl.domain import ControllerPolicy, WorkloadCatalog

REQUIRED = ("t", "endpoint", "modality", "service_seconds", "outcome")


def _number(record: Mapping[str, Any], name: str, default: float = 0.0) -> float:
    value = record.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: must not be negative")
    return float(value)


def _choice(record: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    value = record.get(name)
    if value not in allowed:
        raise ValueError(f"{name}: expected one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def _optional_text(record: Mapping[str, Any], name: str) -> str | None:
    value = record.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name}: expected a string or null")
    return value


def parse_record(record: Mapping[str, Any], catalog: WorkloadCatalog) -> RequestFeatures:
    """Validate one observation record and turn it into request features."""
    missing = [f for f in REQUIRED if f not in record]
    if missing:
        raise ValueError(f"missing field {missing[0]}")
    endpoint = _choice(record, "endpoint", ENDPOINTS)
    modality = _choice(record, "modality", MODALITIES)
    outcome = _choice(record, "outcome", OUTCOMES)
    workload = _optional_text(record, "workload")
    if workload is None:
        workload = classify_workload(catalog, endpoint, modality)
    return features_of(
        t=_number(record, "t"),
        endpoint=endpoint,
        model=_optional_text(record, "model"),
        served_model=_optional_text(record, "served_model"),
        workload=workload,
        modality=modality,
        input_units=int(_number(record, "input_units")),
        output_units=int(_number(record, "output_units")),
        service_seconds=_number(record, "service_seconds"),
        queue_depth=int(_number(record, "queue_depth")),
        outcome=outcome,
        session_hash=_optional_text(record, "session"),
    )


def replay(
    records: Iterable[RequestFeatures],
    policy: ControllerPolicy,
    catalog: WorkloadCatalog,
    artifacts: Mapping[str, str | None],
) -> DemandLearner:
    """A learner that has seen ``records`` in completion-time order."""
    learner = DemandLearner(policy, catalog)
    learner.configure(artifacts)
    for features in sorted(records, key=lambda f: (f.t, f.started)):
        learner.observe(features)
    return learner
