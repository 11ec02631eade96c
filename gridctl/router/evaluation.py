"""X-Grid-Evaluation: inference the operator runs to measure a model, not user demand.

A request carrying ``X-Grid-Evaluation: 1`` is served like any other; its
observation is marked, so it still teaches per-engine speed and the model's
service evidence but never reaches a demand series, a correlation or an
affinity sequence. Its quality is labelled separately, at
``POST /allocator/evaluations``. Only the operator capability may set the
marker: any other caller (a router key, or nobody) gets a 403 naming the
header and nothing is forwarded or observed, so an ordinary client cannot
suppress its own demand signal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse

HEADER = "X-Grid-Evaluation"
MARKED = frozenset({"1", "true"})

OperatorCheck = Callable[[Any], bool]  # request -> does it present the operator capability?


def _refusal(status: int, message: str, code: str, kind: str) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": HEADER, "code": code}}
    return JSONResponse(body, status_code=status)


def evaluation_marker(request: Any, is_operator: OperatorCheck) -> bool | JSONResponse:
    """Whether ``request`` is evaluation-marked, or the refusal to answer it with."""
    value = request.headers.get(HEADER)
    if value is None:
        return False
    if value.strip().lower() not in MARKED:
        return _refusal(
            400,
            f"{HEADER} must be 1 or true (got {value[:32]!r}); omit it for ordinary requests",
            "invalid_evaluation_marker",
            "invalid_request_error",
        )
    if not is_operator(request):
        return _refusal(
            403,
            f"{HEADER} may only be set with the operator capability "
            "(X-Grid-Allocator-Token); ordinary callers cannot mark their requests",
            "evaluation_not_permitted",
            "permission_error",
        )
    return True
