"""Unbound requests (``model: "auto"`` or no model): workload demand, routed late.

The router classifies the request into one workload of the catalog (the text
is read once, locally, and forgotten) and asks the controller's latest
portfolio which model serves that workload. While no chosen model is ready it
answers an honest 503 naming the workload and its admission state; once one
is ready the request goes there. A workload no configured model scores is a
422: permanent, so no client retries it into extra demand. Either way the
observation carries no
requested model: the workload gains demand, and the model that served it
gains outcome evidence, never direct demand.

This module only decides: which model takes the request, or the refusal, the
body the chosen model receives and what the observation says. The proxy acts on
the decision (admission, the upstream hop, the answer), so nothing here knows
the ``Router``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gridctl.demand.features import classify_workload, is_unbound
from gridctl.domain import WorkloadCatalog
from gridctl.planner.portfolio_types import PortfolioResult, ranked_scorers
from gridctl.router.features import RequestFeatures
from gridctl.router.telemetry import RequestObservation

TEXT_FIELDS_MAX_CHARS = 4096
INFEASIBLE_STATUS = 422  # no configured model scores the workload: retrying cannot help


@dataclass(frozen=True)
class UnboundDecision:
    workload: str
    model: str | None  # a ready model that scores the workload, or None
    state: str
    reason: str
    retry: bool = True  # False: no configured model scores the workload; retrying cannot help


class UnboundDirectory:
    """Reads the controller's latest portfolio; never plans anything itself.

    The portfolio's evidence gate decides *new* placements. Whether a request
    may be answered is simpler: the portfolio's chosen model when it is ready,
    else the best-scoring ready model for the workload, at once. A workload
    that no configured profile scores is refused at once, since no amount of
    evidence will change that.
    """

    def __init__(
        self,
        portfolio: Callable[[], PortfolioResult | None],
        catalog: Callable[[], WorkloadCatalog],
        ready: Callable[[str], bool],
        scores: Callable[[], Mapping[str, Mapping[str, float]]] | None = None,
    ) -> None:
        self.portfolio = portfolio
        self.catalog = catalog
        self.ready = ready
        self.scores = scores

    def _scorers(self, workload: str) -> list[tuple[float, str]] | None:
        """(score, model) best first, or None when the profiles are not known here."""
        if self.scores is None:
            return None
        return ranked_scorers(self.scores(), workload)

    def decide(self, endpoint: str, payload: dict[str, Any], modality: str) -> UnboundDecision:
        workload = classify_workload(self.catalog(), endpoint, modality, request_text(payload))
        scorers = self._scorers(workload)
        if scorers == []:
            return UnboundDecision(
                workload,
                None,
                "infeasible",
                f"no configured model scores workload {workload}",
                retry=False,
            )
        result = self.portfolio()
        row = (
            next((r for r in result.admission if r.workload == workload), None) if result else None
        )
        chosen = dict(result.mapping).get(workload) if result else None
        state = row.state.value if row is not None else "awaiting-plan"
        reason = row.reason if row is not None else "no plan for this workload yet"
        if chosen is not None and self.ready(chosen):
            return UnboundDecision(workload, chosen, state, reason)
        for score, model in scorers or []:
            if self.ready(model):
                return UnboundDecision(
                    workload, model, "ready", f"{model} is ready and scores {workload} {score:g}"
                )
        return UnboundDecision(workload, None, state, reason)


def request_text(payload: dict[str, Any]) -> str:
    """A bounded prefix of the request's text, for the classifier only."""
    parts: list[str] = []
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages[-4:]:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                parts.append(content)
    for key in ("prompt", "input"):
        value = payload.get(key)
        if isinstance(value, str):
            parts.append(value)
    return " ".join(parts)[:TEXT_FIELDS_MAX_CHARS]


def unbound_request(payload: dict[str, Any]) -> bool:
    model = payload.get("model")
    return model is None or (isinstance(model, str) and is_unbound(model))


def body_for(payload: dict[str, Any], model: str) -> bytes:
    """The request as the chosen model receives it: the same body naming ``model``."""
    return json.dumps({**payload, "model": model}).encode()


def unbound_observation(
    decision: UnboundDecision,
    features: RequestFeatures,
    *,
    t: float,
    endpoint: str,
    host: str | None,
    outcome: str,
    status: int,
    service_seconds: float,
    units_out: int,
    session: str | None,
    artifact_sha256: str | None,
    evaluation: bool,
) -> RequestObservation:
    """What an unbound request tells telemetry: demand for its workload, never for a model."""
    return RequestObservation(
        t=t,
        endpoint=endpoint,
        model=None,  # unbound: never direct demand for the serving model
        served_model=decision.model if host else None,
        host_id=host,
        outcome=outcome,
        status=status,
        service_seconds=service_seconds,
        input_units=features.input_units,
        output_units=units_out,
        modality=features.modality,
        workload=decision.workload,
        session=session,
        artifact_sha256=artifact_sha256 if host else None,
        evaluation=evaluation,
    )


@dataclass(frozen=True)
class Refusal:
    """The honest answer for an unbound request that no ready model takes now: 503 with
    Retry-After while a model may still become ready; 422 when none could (a permanent
    answer: clients such as the official ``openai`` one retry a 503, and each retry would
    be counted as more demand for the workload)."""

    body: dict[str, Any]
    headers: dict[str, str]
    status: int = 503


def refusal(decision: UnboundDecision) -> Refusal:
    if decision.retry:
        message = (
            f"no model is ready for workload '{decision.workload}' yet "
            f"(admission {decision.state}: {decision.reason})"
        )
    else:
        message = (
            f"workload '{decision.workload}' cannot be served: {decision.reason}; add "
            f"workload_scores.{decision.workload} to a ModelProfile, or name a model"
        )
    body = {
        "error": {
            "message": message,
            "type": "service_unavailable" if decision.retry else "invalid_request_error",
            "param": "model",
            "code": "workload_not_ready" if decision.retry else "workload_infeasible",
            "workload": decision.workload,
            "admission_state": decision.state,
        }
    }
    if not decision.retry:
        return Refusal(body, {}, INFEASIBLE_STATUS)
    return Refusal(body, {"Retry-After": "5"})
