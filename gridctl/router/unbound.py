"""Unbound requests (``model: "auto"`` or no model): workload demand, routed late.

The router classifies the request into one workload of the catalog (the text
is read once, locally, and forgotten) and asks the controller's latest
portfolio which model serves that workload. While no chosen model is ready it
answers an honest 503 naming the workload and its admission state; once one
is ready the request goes there. A workload no configured model scores is a
422: permanent, so no client retries it into extra demand. Either way the observation carries no
requested model: the workload gains demand, and the model that served it
gains outcome evidence, never direct demand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gridctl.demand.features import classify_workload, is_unbound
from gridctl.domain import WorkloadCatalog
from gridctl.planner.portfolio_types import PortfolioResult, ranked_scorers
from gridctl.router import affinity
from gridctl.router.choosing import token_hint
from gridctl.router.features import request_features
from gridctl.router.telemetry import RequestObservation

if TYPE_CHECKING:
    from gridctl.router.proxy import Router

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


async def forward_unbound(
    router: Router,
    directory: UnboundDirectory,
    request: Request,
    endpoint: str,
    path: str,
    payload: dict[str, Any],
    body_size: int,
) -> Response:
    """Route an unbound request to the portfolio's ready model, or answer an honest 503."""
    started = time.monotonic()
    ctx = router.ctx
    features = request_features(endpoint, payload, body_size)
    decision = directory.decide(endpoint, payload, features.modality)
    session = router.affinity_digest(request)

    def observe(
        outcome: str,
        status: int,
        host: str | None,
        units_out: int = 0,
        sha: str | None = None,
    ) -> None:
        ctx.tap.emit(
            RequestObservation(
                t=ctx.clock(),
                endpoint=endpoint,
                model=None,  # unbound: never direct demand for the serving model
                served_model=decision.model if host else None,
                host_id=host,
                outcome=outcome,
                status=status,
                service_seconds=time.monotonic() - started,
                input_units=features.input_units,
                output_units=units_out,
                modality=features.modality,
                workload=decision.workload,
                session=affinity.session_token(session),
                artifact_sha256=sha if host else None,
                evaluation=getattr(request.state, "evaluation", False),
            )
        )

    if decision.model is None:
        observe("rejected", 503 if decision.retry else INFEASIBLE_STATUS, None)
        return unavailable(decision)
    route = await router._admit(decision.model, token_hint(payload), session)
    if route is None:
        observe("rejected", 503, None)
        return unavailable(decision)
    body = json.dumps({**payload, "model": decision.model}).encode()
    stream = bool(payload.get("stream", False))
    return await router._send(request, route, path, body, stream, observe)


def unavailable(decision: UnboundDecision) -> JSONResponse:
    """503 with Retry-After while a model may still become ready; 422 when none could
    (a permanent answer: clients such as the official ``openai`` one retry a 503, and
    each retry would be counted as more demand for the workload)."""
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
        return JSONResponse(body, status_code=INFEASIBLE_STATUS)
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})
