"""Unbound requests (``model: "auto"`` or no model): workload demand, routed late.

The router classifies the request into one workload of the catalog (the text
is read once, locally, and forgotten) and asks the controller's latest
portfolio which model serves that workload. While no chosen model is ready it
answers an honest 503 naming the workload and its admission state; once one
is ready the request goes there. Either way the observation carries no
requested model: the workload gains demand, and the model that served it
gains outcome evidence, never direct demand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gridctl.demand.features import classify_workload, is_unbound
from gridctl.domain import WorkloadCatalog
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.router import affinity
from gridctl.router.choosing import token_hint
from gridctl.router.features import request_features
from gridctl.router.telemetry import RequestObservation

if TYPE_CHECKING:
    from gridctl.router.proxy import Router

TEXT_FIELDS_MAX_CHARS = 4096


@dataclass(frozen=True)
class UnboundDecision:
    workload: str
    model: str | None  # a ready chosen model, or None
    state: str
    reason: str


class UnboundDirectory:
    """Reads the controller's latest portfolio; never plans anything itself."""

    def __init__(
        self,
        portfolio: Callable[[], PortfolioResult | None],
        catalog: Callable[[], WorkloadCatalog],
        ready: Callable[[str], bool],
    ) -> None:
        self.portfolio = portfolio
        self.catalog = catalog
        self.ready = ready

    def decide(self, endpoint: str, payload: dict[str, Any], modality: str) -> UnboundDecision:
        workload = classify_workload(self.catalog(), endpoint, modality, request_text(payload))
        result = self.portfolio()
        if result is None:
            return UnboundDecision(workload, None, "awaiting-plan", "no plan yet")
        row = next((r for r in result.admission if r.workload == workload), None)
        chosen = dict(result.mapping).get(workload)
        state = row.state.value if row is not None else "awaiting-plan"
        reason = row.reason if row is not None else "first request of this workload"
        if chosen is not None and self.ready(chosen):
            return UnboundDecision(workload, chosen, state, reason)
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
    session = affinity.hash_key(request.headers.get(affinity.HEADER))

    def observe(outcome: str, status: int, host: str | None, units_out: int = 0) -> None:
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
            )
        )

    if decision.model is None:
        observe("rejected", 503, None)
        return unavailable(decision)
    route = await router._admit(decision.model, token_hint(payload), session)
    if route is None:
        observe("rejected", 503, None)
        return unavailable(decision)
    body = json.dumps({**payload, "model": decision.model}).encode()
    stream = bool(payload.get("stream", False))
    return await router._send(request, route, path, body, stream, observe)


def unavailable(decision: UnboundDecision) -> JSONResponse:
    message = (
        f"no model is ready for workload '{decision.workload}' yet "
        f"(admission {decision.state}: {decision.reason})"
    )
    body = {
        "error": {
            "message": message,
            "type": "service_unavailable",
            "param": "model",
            "code": "workload_not_ready",
            "workload": decision.workload,
            "admission_state": decision.state,
        }
    }
    return JSONResponse(body, status_code=503, headers={"Retry-After": "5"})
