"""Who may call what on the controller's HTTP surface.

Administrative routes need the operator capability (``X-Grid-Allocator-Token``
or a Bearer header). Node routes need a host-scoped credential bound to the
host id in the URL; a credential for another host is refused with 403. The
secrets themselves live in ``gridctl.credentials``.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from gridctl.credentials import (
    NODE_TOKEN_HEADER,
    CredentialError,
    operator_capability_matches,
    presented_operator_capability,
)


class AuthFailure(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def require_operator(request: Request, operator_token: str) -> None:
    presented = presented_operator_capability(request.headers)
    if presented is None:
        raise AuthFailure(401, "operator token required (X-Grid-Allocator-Token or Bearer)")
    if not operator_capability_matches(presented, operator_token):
        raise AuthFailure(401, "operator token rejected")


NodeVerifier = Callable[[str, str], dict[str, object]]  # (credential, host id) -> claims


def require_node(request: Request, host_id: str, verify: NodeVerifier) -> dict[str, object]:
    """The verified claims of the request's node credential for ``host_id`` (or 401/403)."""
    token = request.headers.get(NODE_TOKEN_HEADER)
    if not token:
        raise AuthFailure(401, f"node credential required ({NODE_TOKEN_HEADER})")
    try:
        return verify(token, host_id)
    except CredentialError as exc:
        status = getattr(exc, "http_status", 401)
        raise AuthFailure(status, f"node credential rejected: {exc}") from None
