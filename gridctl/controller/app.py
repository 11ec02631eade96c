"""The controller's HTTP surface (Starlette): node intake, allocator API, router.

Node routes need a host-scoped credential; administrative routes the operator
capability; status is a public read like the rest of the local server. Bad
input gets a 4xx JSON body naming the field and changes nothing.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gridctl.bodies import parse_json, read_bounded
from gridctl.controller.admission import retry_after_header
from gridctl.controller.applying import (
    applied_summary,
    cancel_applied_plan,
    candidate_from_body,
    check_saved_plan,
    dry_run_document,
    plan_inputs_document,
)
from gridctl.controller.auth import AuthFailure, NodeVerifier, require_node, require_operator
from gridctl.controller.control import Controller
from gridctl.controller.desired import ApiDesired
from gridctl.controller.documents import (
    DocumentResponse,
    check_known,
    explain_query,
    with_explanations,
)
from gridctl.controller.endpoints import check_engine_endpoints
from gridctl.controller.evaluations import record_evaluation
from gridctl.controller.externalapi import Refusal, register_external, retire_external
from gridctl.controller.registry import is_lease
from gridctl.controller.statusdoc import build_status, status_revision
from gridctl.domain import Mode, Plan
from gridctl.errors import PermanentError, WireError

MAX_JSON_BYTES = 4 * 1024 * 1024
COMMAND_WAIT_SECONDS = 5.0

Handler = Callable[[Request], Awaitable[Response]]


def error(status: int, message: str, pointer: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": {"message": message}}
    if pointer is not None:
        body["error"]["pointer"] = pointer
    return JSONResponse(body, status_code=status)


async def read_json(request: Request) -> Any:
    """The body as JSON: refused past ``MAX_JSON_BYTES`` (413) or ``MAX_JSON_DEPTH`` (400)."""
    return parse_json(await read_bounded(request, MAX_JSON_BYTES))


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, wrong method) as JSON errors too."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    message = f"{exc.detail}: {request.method} {request.url.path}"
    answer = error(exc.status_code, message)
    answer.headers.update(headers)
    return answer


class TickWaiters:
    """Control heartbeats waiting for a tick to process their revision: a future each on
    the serving loop, in a heap by revision. A tick that ends releases the waiters its
    revision covers, each once, so its cost does not grow with the number still waiting
    (thousands of hosts poll at once). A waiter that gave up (its poll timed out) is
    cancelled and dropped when reached, or when such waiters are half the heap."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._order = itertools.count()  # equal revisions: first come, first released
        self._abandoned = 0  # cancelled futures still in the heap

    @property
    def waiting(self) -> int:
        """How many polls wait now."""
        return len(self._heap) - self._abandoned

    def add(self, revision: int, loop: asyncio.AbstractEventLoop) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = loop.create_future()
        heapq.heappush(self._heap, (revision, next(self._order), future))
        return future

    def abandon(self, future: asyncio.Future[bool]) -> None:
        """The poll is done with ``future``: released already, or it stops waiting."""
        if future.done():
            return
        future.cancel()
        self._abandoned += 1
        if self._abandoned * 2 > len(self._heap):
            self._heap = [w for w in self._heap if not w[2].done()]
            heapq.heapify(self._heap)
            self._abandoned = 0

    def release(self, processed: int, success: int) -> None:
        """Answer every waiter whose revision a tick processed: True when a successful
        tick covered it (``Revisions.covered``)."""
        heap = self._heap
        while heap and heap[0][0] <= processed:
            revision, _, future = heapq.heappop(heap)
            if future.done():  # (cancelled by ``abandon``)
                self._abandoned -= 1
            else:
                future.set_result(success >= revision)


def guarded(handler: Handler) -> Handler:
    async def wrapper(request: Request) -> Response:
        try:
            return await handler(request)
        except AuthFailure as exc:
            return error(exc.status, str(exc))
        except WireError as exc:
            return error(
                getattr(exc, "status", 400),
                str(exc.args[0]) if exc.args else "bad request",
                exc.pointer,
            )
        except PermanentError as exc:  # a conflict with what the controller holds
            return error(409, str(exc))

    return wrapper


class HeartbeatFront:
    """Node heartbeats answered at the top of the controller's ASGI stack.

    Every host sends two heartbeats a round; through Starlette's routing each was matched
    against the routes before it and passed two exception-handling layers and the
    route's request wrapper, work that grows a large fleet's cost per heartbeat for a
    route that needs none of it. A ``POST /nodes/{node_id}/heartbeat`` (``node_id`` one
    path segment, as the route's own pattern) gets the same handler, guarded the same
    way (``guarded``), from here; anything else goes on to the routes unchanged. It sits
    inside Starlette's server-error middleware, so an exception is still a 500."""

    def __init__(self, app: ASGIApp, heartbeat: Handler) -> None:
        self.app = app
        self.heartbeat = heartbeat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            node_id = heartbeat_node(scope["path"])
            if node_id is not None:
                scope["path_params"] = {"node_id": node_id}
                response = await self.heartbeat(Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def heartbeat_node(path: str) -> str | None:
    """The ``node_id`` of a ``/nodes/{node_id}/heartbeat`` path, else None."""
    if not path.startswith("/nodes/") or not path.endswith("/heartbeat"):
        return None
    node_id = path[len("/nodes/") : -len("/heartbeat")]
    return node_id if node_id and "/" not in node_id else None


class ControllerApp:
    def __init__(
        self,
        controller: Controller,
        *,
        operator_token: str | Callable[[], str],
        verify_node: NodeVerifier,
        extra_routes: list[Route] | None = None,
        metrics: Callable[[], bytes] | None = None,
        save_external: Callable[[str, dict[str, Any]], None] | None = None,
        remove_external: Callable[[str], bool] | None = None,
        node_extras: Callable[[], dict[str, Any]] | None = None,
        registration_wait: Callable[[], float | None] | None = None,
    ) -> None:
        self.node_extras = node_extras  # added to every node response (trust bundle digest)
        # None: take a registration now; else how long its host waits (``admission``)
        self.registration_wait = registration_wait
        self.ctl = controller
        self._operator = operator_token
        self.save_external = save_external
        self.remove_persisted_external = remove_external
        self.verify_node = verify_node
        self.extra_routes = extra_routes or []
        self.render_metrics = metrics
        # control heartbeats waiting for a tick: futures on the serving loop, no threads
        self._waiters = TickWaiters()
        self._loop: asyncio.AbstractEventLoop | None = None
        controller.revision_listeners.append(self._revision_advanced)
        # the cached status: its revision, the document, the plan it was built from
        self._status: tuple[tuple[object, ...], dict[str, Any], Plan | None] | None = None

    def build(self) -> Starlette:
        routes = [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/nodes/{node_id}", guarded(self.register), methods=["PUT"]),
            Route("/nodes/{node_id}/heartbeat", guarded(self.heartbeat), methods=["POST"]),
            Route("/allocator/status", guarded(self.status), methods=["GET"]),
            Route("/allocator/snapshot", guarded(self.snapshot), methods=["GET"]),
            Route("/allocator/mode", guarded(self.mode), methods=["PUT"]),
            Route("/allocator/tick", guarded(self.tick), methods=["POST"]),
            Route("/allocator/apply", guarded(self.apply), methods=["POST"]),
            Route("/allocator/dry-run", guarded(self.dry_run), methods=["POST"]),
            Route("/allocator/evaluations", guarded(self.evaluations), methods=["POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/allocator/external/{name}", guarded(self.external), methods=["PUT"]),
            Route("/allocator/external/{name}", guarded(self.remove_external), methods=["DELETE"]),
            Route(
                "/allocator/models/{model_id:path}", guarded(self.models), methods=["PUT", "DELETE"]
            ),
            *self.extra_routes,
        ]
        app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
        app.add_middleware(HeartbeatFront, heartbeat=guarded(self.heartbeat))
        return app

    @property
    def operator_token(self) -> str:
        """The current operator capability (re-read after a rotation)."""
        return self._operator() if callable(self._operator) else self._operator

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def register(self, request: Request) -> Response:
        wait = self.registration_wait() if self.registration_wait is not None else None
        if wait is not None:  # behind on the hosts it holds: answered before the body is read
            message = (
                f"the controller is behind on the hosts it holds; register again in {wait:g} s"
            )
            return JSONResponse(
                {"error": {"message": message, "retry_after_seconds": wait}},
                status_code=503,
                headers={"Retry-After": retry_after_header(wait)},
            )
        host_id = request.path_params["node_id"]
        claims = require_node(request, host_id, self.verify_node)
        payload = await read_json(request)
        check_engine_endpoints(payload, claims)
        existing = self.ctl.registry.host(host_id)
        if existing is not None and existing.role == "external":
            return error(
                409, f"{host_id!r} is an external engine's name; this host needs another id"
            )
        self.ctl.register(host_id, payload)
        return DocumentResponse(
            self._node_answer(self.ctl.delivery.heartbeat_response(host_id, []))
        )

    async def heartbeat(self, request: Request) -> Response:
        host_id = request.path_params["node_id"]
        claims = require_node(request, host_id, self.verify_node)
        payload = await read_json(request)
        if isinstance(payload, dict) and payload.get("node_id") not in (None, host_id):
            raise WireError("node_id does not match the URL", "/node_id")
        check_engine_endpoints(payload, claims)
        intake = self.ctl.renew_lease if is_lease(payload) else self._full_heartbeat
        if isinstance(payload, dict) and payload.get("acknowledgements"):
            # receipts are durable store writes: off the event loop
            revision, current = await asyncio.to_thread(intake, host_id, payload)
        else:
            revision, current = intake(host_id, payload)
        commands: list[dict[str, Any]] = []
        if payload.get("request_commands", True):
            ticked = await self.ticked(revision, COMMAND_WAIT_SECONDS)
            if ticked and self.ctl.may_have_commands(host_id):  # else nothing to read
                commands = await asyncio.to_thread(self.ctl.commands_for, host_id, ticked=ticked)
        answer = self.ctl.delivery.heartbeat_response(host_id, commands)
        if not current:
            answer["send_full_inventory"] = True
        return DocumentResponse(self._node_answer(answer))

    def _full_heartbeat(self, host_id: str, payload: Any) -> tuple[int, bool]:
        return self.ctl.heartbeat(host_id, payload), True

    async def ticked(self, revision: int, timeout: float) -> bool:
        """``Controller.wait_for_tick`` for the serving loop: a future per waiting poll,
        released when the processed revision passes it, so no thread is parked."""
        covered = self.ctl.revisions.covered(revision)
        if covered is not None:
            return covered
        self._loop = asyncio.get_running_loop()
        future = self._waiters.add(revision, self._loop)
        try:
            covered = self.ctl.revisions.covered(revision)  # a tick may have ended meanwhile
            if covered is not None:
                return covered
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return False
        finally:
            self._waiters.abandon(future)

    def _revision_advanced(self) -> None:
        """Called from the tick thread (or the loop) when the processed revision moved."""
        loop = self._loop
        if self._waiters.waiting and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._release_waiters)

    def _release_waiters(self) -> None:
        self._waiters.release(*self.ctl.revisions.progress())

    def _node_answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        if self.node_extras is not None:
            answer.update(self.node_extras())
        return answer

    async def status(self, request: Request) -> Response:
        """Built off the loop, once per status revision (a semantic input, a tick, an
        event, a request, a second of the clock): a dashboard polling a large fleet
        does not rebuild it per request."""
        query = explain_query(request.query_params)
        if query.models:
            desired = self.ctl.current_desired()
            check_known(query, [p.name for p in desired.profiles] if desired else ())
        key = status_revision(self.ctl)
        cached = self._status
        if cached is None or cached[0] != key:
            plan = self.ctl.view.plan  # the plan the document is built from, for its rows
            document = await asyncio.to_thread(build_status, self.ctl)
            self._status = (key, document, plan)
        else:
            document, plan = dict(cached[1]), cached[2]
            bundle = document.get("portfolio_bundle")
            if isinstance(bundle, dict):  # this answer solved nothing: the solve is reused
                document["portfolio_bundle"] = {**bundle, "reused": True}
        if not query:
            return DocumentResponse(document)
        # a plan from the planning process builds the rows asked for on first read, by
        # planning its tick's inputs again (``tickworker.ReplannedRows``): off the loop
        return DocumentResponse(await asyncio.to_thread(with_explanations, document, plan, query))

    async def snapshot(self, request: Request) -> Response:
        require_operator(request, self.operator_token)
        return DocumentResponse(await asyncio.to_thread(plan_inputs_document, self.ctl))

    async def apply(self, request: Request) -> Response:
        """Apply a saved plan if its actions still hold (409 "stale plan: ..." naming what
        changed), or withdraw the applied one (``{"cancel": true}``)."""
        require_operator(request, self.operator_token)
        body = await read_json(request)
        if isinstance(body, dict) and body.get("cancel") is True and "format" not in body:
            cancelled = await asyncio.to_thread(cancel_applied_plan, self.ctl)
            await asyncio.to_thread(self.ctl.tick)
            return JSONResponse(cancelled)
        status, answer = await asyncio.to_thread(check_saved_plan, self.ctl, body)
        if status != 200:
            return JSONResponse(answer, status_code=status)
        await asyncio.to_thread(self.ctl.tick)
        planned = [*(body.get("actions") or []), *(body.get("deferred") or [])]
        answer.update(applied_summary(self.ctl, planned))
        return JSONResponse(answer)

    async def dry_run(self, request: Request) -> Response:
        """What the next tick would do for a candidate desired state; persists nothing."""
        require_operator(request, self.operator_token)
        query = explain_query(request.query_params)
        candidate = candidate_from_body(self.ctl, await read_json(request))
        if candidate is None and self.ctl.current_desired() is None:
            return error(409, "no valid desired state is in force; send desired.files")
        document = await asyncio.to_thread(dry_run_document, self.ctl, candidate, query)
        return DocumentResponse(document)

    async def metrics(self, request: Request) -> Response:
        """Prometheus text exposition; public like status (counts and states, no secrets)."""
        if self.render_metrics is None:
            return error(404, "metrics are not enabled on this controller")
        body = await asyncio.to_thread(self.render_metrics)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def mode(self, request: Request) -> Response:
        require_operator(request, self.operator_token)
        body = await read_json(request)
        if not isinstance(body, dict):
            raise WireError('body must be an object: {"mode": ...} or {"clear": true}')
        reason = body.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 512:
            raise WireError("reason must be a string of at most 512 characters", "/reason")
        if body.get("clear") is True:
            mode = None
        else:
            try:
                mode = Mode(str(body.get("mode")))
            except ValueError:
                raise WireError("mode must be observe, recommend or automatic", "/mode") from None
        try:
            self.ctl.set_override(mode, reason)
        except PermanentError as exc:
            return error(409, str(exc))
        await asyncio.to_thread(self.ctl.tick)
        effective, refused = self.ctl.effective_mode()
        return JSONResponse({"effective": effective.value, "refused_automatic": refused})

    async def evaluations(self, request: Request) -> Response:
        """Operator-labelled quality (``gridctl.controller.evaluations``)."""
        require_operator(request, self.operator_token)
        return JSONResponse(record_evaluation(self.ctl, await read_json(request)))

    async def tick(self, request: Request) -> Response:
        require_operator(request, self.operator_token)
        record = await asyncio.to_thread(self.ctl.tick)
        body = {
            "at": record.at,
            "duration_ms": record.duration_ms,
            "ok": record.ok,
            "error": record.error,
        }
        return JSONResponse(body, status_code=200 if record.ok else 500)

    async def external(self, request: Request) -> Response:
        """Register an engine gridctl does not manage: routable inventory, never actuated."""
        require_operator(request, self.operator_token)
        name = request.path_params["name"]
        body = await read_json(request)
        return JSONResponse(register_external(self.ctl, name, body, self.save_external))

    async def remove_external(self, request: Request) -> Response:
        """Retire an external engine (``gridctl.controller.externalapi.retire_external``)."""
        require_operator(request, self.operator_token)
        answer = retire_external(
            self.ctl,
            request.path_params["name"],
            request.query_params.get("force", "false"),
            self.remove_persisted_external,
        )
        if isinstance(answer, Refusal):
            return error(answer.status, answer.message)
        return JSONResponse(answer)

    async def models(self, request: Request) -> Response:
        require_operator(request, self.operator_token)
        model_id = request.path_params["model_id"]
        source = self.ctl.desired
        if not isinstance(source, ApiDesired):
            directory = source.status().get("directory")
            return error(
                409,
                f"profiles come from the watched directory {directory}; commit "
                "the change there instead",
            )
        if request.method == "DELETE":
            if not source.delete(model_id):
                return error(404, f"no profile named {model_id!r}")
            self.ctl.mark_dirty(safety=True)
            return JSONResponse({"deleted": model_id})
        state = source.put(model_id, await read_json(request))
        self.ctl.mark_dirty(safety=True)
        return JSONResponse({"revision": state.revision, "model_id": model_id})
