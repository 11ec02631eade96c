"""Router API keys on ``/v1/*`` and the names the controller's certificate carries.

A controller that listens off loopback serves other machines' users, so its
router asks for a key (``Authorization: Bearer KEY``, as every OpenAI client
sends it). The key's id — never the key — is attached to the request
(``request.state.router_client``) so demand is attributed per key. The
evaluation marker (``gridctl.router.evaluation``) is checked here too, after
the key: ``request.state.evaluation`` says whether the request is marked.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import psutil
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gridctl.router.evaluation import OperatorCheck, evaluation_marker
from gridctl.transport import is_loopback

ClientCheck = Callable[[Any], tuple[str | None, str | None]]  # request -> (key id, refusal)


def guard_router_request(
    request: Request, check: ClientCheck, is_operator: OperatorCheck = lambda _request: False
) -> Response | None:
    """The refusal for a ``/v1`` request (a 401 in the OpenAI error shape, or the
    evaluation marker's 400/403), or None after attaching the key id and the marker
    to ``request.state``."""
    key_id, refusal = check(request)
    if refusal is not None:
        return JSONResponse(
            {
                "error": {
                    "message": refusal,
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                    "param": None,
                }
            },
            status_code=401,
        )
    marked = evaluation_marker(request, is_operator)
    if isinstance(marked, Response):
        return marked
    request.state.router_client = key_id
    request.state.evaluation = marked
    return None


def guard_router_route(
    route: Route, check: ClientCheck, is_operator: OperatorCheck = lambda _request: False
) -> Route:
    """``route`` behind ``guard_router_request``."""
    inner = route.endpoint

    async def endpoint(request: Request) -> Response:
        refused = guard_router_request(request, check, is_operator)
        if refused is not None:
            return refused
        response: Response = await inner(request)
        return response

    return Route(route.path, endpoint, methods=list(route.methods or ["GET"]), name=route.name)


def serving_names(listen_host: str) -> list[str]:
    """Addresses the controller's serving certificate names for a listen address.

    A specific address is named with the loopback names; a wildcard listener
    (``0.0.0.0`` / ``::``) names every local address and the host name.
    """
    host = listen_host.strip("[]")
    names = ["localhost", "127.0.0.1", "::1"]
    if host in ("0.0.0.0", "::", ""):
        for addresses in psutil.net_if_addrs().values():
            for address in addresses:
                if address.family in (socket.AF_INET, socket.AF_INET6):
                    names.append(address.address.split("%", 1)[0])
        names.append(socket.gethostname())
    elif not is_loopback(host) or host not in names:
        names.insert(0, host)
    return list(dict.fromkeys(names))
