"""The router's POST endpoints answered at the top of the controller's ASGI stack.

Through Starlette's routing, each proxied request was matched against every
controller route listed before the router's, passed two exception-handling
layers (each wrapping ``send`` once more) and the route's request wrapper: work
on every request, on cores the engines compute on, for a path that needs none
of it. ``ProxyFront`` sits inside Starlette's server-error middleware only (an
exception is still a 500): a POST to one of ``FORWARDED``'s paths gets the same
router-key and evaluation-marker guard (``guard_router_request``) and the same
``Router.forward`` as the route would give it; every other request (``GET
/v1/models``, another method on a forwarded path, the controller's own routes)
goes on to the routes unchanged.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from gridctl.controller.routerkeys import ClientCheck, guard_router_request
from gridctl.router.evaluation import OperatorCheck
from gridctl.router.proxy import FORWARDED, Router


class ProxyFront:
    """ASGI middleware (``app.add_middleware(ProxyFront, router=..., check=...)``)."""

    def __init__(
        self,
        app: ASGIApp,
        router: Router,
        check: ClientCheck,
        is_operator: OperatorCheck = lambda _request: False,
    ) -> None:
        self.app = app
        self.router = router
        self.check = check
        self.is_operator = is_operator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            endpoint = FORWARDED.get(path)
            if endpoint is not None:
                request = Request(scope, receive)
                response = guard_router_request(request, self.check, self.is_operator)
                if response is None:
                    response = await self.router.forward(request, endpoint, path)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
