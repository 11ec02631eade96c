"""Bounded request features and the local workload classifier.

Every finished request is reduced to a ``RequestFeatures`` record: endpoint
family, requested and served model, modality, approximate input and output
units, one workload name from the configured catalog, service time, queue
pressure, outcome and (when the client sent ``X-Grid-Affinity-Key``) a
double-hashed session key. The classifier reads request text only to pick a
workload name; nothing of the text survives the call. The raw affinity key is
hashed once by the router (``affinity_hash``) and again for the learner
(``workflow_key``), so neither the key nor the router's hash is learner state.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from gridctl.domain import WorkloadCatalog

ENDPOINTS = ("chat", "completions", "embeddings", "image", "video")
MODALITIES = ("text", "image", "video")
OUTCOMES = ("ok", "error", "rejected")
UNBOUND_MODEL_NAMES = frozenset({"", "auto"})
CLASSIFIER_MAX_CHARS = 4096  # the classifier looks at a bounded prefix only
_WORD = re.compile(r"[a-z0-9]+")
_ROUTER_SALT = b"gridctl-affinity\x00"
_LEARNER_SALT = b"gridctl-workflow\x00"


def is_unbound(model: str | None) -> bool:
    """``model: "auto"`` or no model at all: workload demand, not a named model."""
    return model is None or model.strip().lower() in UNBOUND_MODEL_NAMES


def affinity_hash(raw_key: str) -> str:
    """The router's first-level hash of a raw ``X-Grid-Affinity-Key``."""
    return hashlib.sha256(_ROUTER_SALT + raw_key.encode("utf-8", "replace")).hexdigest()


def workflow_key(session_hash: str) -> str:
    """The learner's second-level hash of the router's hash (never reversible to it)."""
    return hashlib.sha256(_LEARNER_SALT + session_hash.encode("ascii", "replace")).hexdigest()[:32]


def classify_workload(
    catalog: WorkloadCatalog,
    endpoint: str,
    modality: str = "text",
    text: str = "",
) -> str:
    """One workload name for a request; the text is scanned and forgotten.

    Endpoint hints win, then modality hints, then the workload with the most
    keyword hits in a bounded prefix of the text (ties by catalog order), else
    the catalog's default workload.
    """
    for workload in catalog.workloads:
        if endpoint in workload.endpoints:
            return workload.name
    if modality != "text":
        for workload in catalog.workloads:
            if modality in workload.modalities:
                return workload.name
    words = set(_WORD.findall(text[:CLASSIFIER_MAX_CHARS].lower()))
    best_name = catalog.default_workload
    best_hits = 0
    for workload in catalog.workloads:
        hits = sum(1 for k in workload.keywords if k in words)
        if hits > best_hits:
            best_name, best_hits = workload.name, hits
    return best_name


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """The bounded features of one finished request; nothing here identifies content."""

    t: float  # completion time, seconds
    endpoint: str
    model: str | None  # as requested; None = unbound
    served_model: str | None
    workload: str
    modality: str = "text"
    input_units: int = 0
    output_units: int = 0
    service_seconds: float = 0.0
    queue_depth: int = 0
    outcome: str = "ok"
    session: str | None = None  # the learner's double hash, never the raw key
    artifact_sha256: str | None = None  # of the served model, when known
    evaluation: bool = False  # operator-marked evaluation traffic: never demand

    @property
    def unbound(self) -> bool:
        return is_unbound(self.model)

    @property
    def started(self) -> float:
        return self.t - max(0.0, self.service_seconds)


def features_of(
    *,
    t: float,
    endpoint: str,
    model: str | None,
    served_model: str | None,
    workload: str,
    modality: str = "text",
    input_units: int = 0,
    output_units: int = 0,
    service_seconds: float = 0.0,
    queue_depth: int = 0,
    outcome: str = "ok",
    session_hash: str | None = None,
    artifact_sha256: str | None = None,
    evaluation: bool = False,
    session_key: str | None = None,
) -> RequestFeatures:
    """Build features from already-bounded fields; the session hash is hashed again
    (``session_key``, when given, must be ``workflow_key(session_hash)``, derived before)."""
    return RequestFeatures(  # positional, in field order: built once per request
        float(t),
        endpoint if endpoint in ENDPOINTS else "chat",
        None if is_unbound(model) else model,
        served_model,
        workload,
        modality if modality in MODALITIES else "text",
        max(0, int(input_units)),
        max(0, int(output_units)),
        max(0.0, float(service_seconds)),
        max(0, int(queue_depth)),
        outcome if outcome in OUTCOMES else "error",
        (session_key or workflow_key(session_hash)) if session_hash else None,
        artifact_sha256,
        evaluation,
    )
