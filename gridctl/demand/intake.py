"""The router's observation record and the one path it takes into the learners.

A ``RequestObservation`` is what the router reports of each finished request
(counts and timings only, no content). ``observation_features`` is the single
conversion from that record to the learners' ``RequestFeatures``: the live
controller's demand book and the scenario lab's simulated router both feed the
production ``DemandLearner`` through it, and both read the forecast back with
``gated_demand``, so no forecast reaches the planner by any other path.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass

from gridctl.demand.direct import gated_demand
from gridctl.demand.features import RequestFeatures, features_of, workflow_key
from gridctl.demand.learning import DemandLearner, DemandPicture
from gridctl.domain import ControllerPolicy, ModelDemand

LEARNED_MODALITIES = ("image", "video")  # everything else is learned as text


@dataclass(frozen=True)
class RequestObservation:
    """Bounded features of one finished request."""

    t: float
    endpoint: str  # chat | completions | embeddings
    model: str | None  # as requested
    served_model: str | None
    host_id: str | None
    outcome: str  # ok | error | rejected
    status: int
    service_seconds: float
    queue_depth: int = 0  # requests waiting for a slot of this model when it arrived
    input_units: int = 0  # approximate (body bytes / 4)
    output_units: int = 0  # completion tokens when the engine reported them
    modality: str = "text"  # text | image | audio | embedding
    workload: str = "general"  # coarse class from request shape, never from content
    session: str | None = None  # double-hashed affinity key
    wait_seconds: float = 0.0  # time spent waiting for an admission slot
    client: str | None = None  # the router key's id (never the key) when keys are in use
    # the artifact the serving replica proved (its residency's digest): outcome evidence
    # is keyed by it, so a late response from a previous revision never credits the new one
    artifact_sha256: str | None = None
    evaluation: bool = False  # operator-marked evaluation: speed and quality, never demand


def observation_features(
    observation: RequestObservation, session_keys: MutableMapping[str, str] | None = None
) -> RequestFeatures:
    """The learners' features of one router observation. ``session_keys`` remembers each
    router session hash's learner key (``workflow_key``) for a caller that converts many
    observations of the same sessions (the scenario lab); the live path hashes each time."""
    modality = observation.modality
    session = observation.session
    key = None
    if session and session_keys is not None:
        key = session_keys.get(session)
        if key is None:
            key = session_keys[session] = workflow_key(session)
    return features_of(
        t=observation.t,
        endpoint=observation.endpoint,
        model=observation.model,
        served_model=observation.served_model,
        workload=observation.workload,
        modality=modality if modality in LEARNED_MODALITIES else "text",
        input_units=observation.input_units,
        output_units=observation.output_units,
        service_seconds=observation.service_seconds,
        queue_depth=observation.queue_depth,
        outcome=observation.outcome,
        session_hash=observation.session,
        artifact_sha256=observation.artifact_sha256,
        evaluation=observation.evaluation,
        session_key=key,
    )


def learned_forecast(
    learner: DemandLearner, now: float, policy: ControllerPolicy
) -> tuple[DemandPicture, tuple[ModelDemand, ...]]:
    """The learners' picture at ``now`` and their direct forecast behind the evidence gate."""
    picture = learner.picture(now)
    return picture, gated_demand(picture.models, learner.direct, now, policy)
