"""OpenAI-compatible endpoints that forward to admitted, ready child engines.

Only ``model``, ``stream``, the token-limit hint and the structural features
of a request body are read; the body is forwarded untouched and nothing of it
is kept. The upstream hop carries the private engine key instead of the
caller's credentials, and never the caller's ``X-Grid-Affinity-Key``.

A request that finds every admissible route full waits (bounded) for a slot
rather than overfilling an engine: effective concurrency is the hard admission
boundary. Callers share a model's slots (``gridctl.router.fairness``): while
another caller waits, none holds more than its share, and none fills the line.
A failed POST is never replayed: the caller gets the error, the engine's
circuit records it, and only later requests go elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gridctl.bodies import BodyTooLarge, parse_json, read_bounded
from gridctl.domain import ControllerPolicy
from gridctl.errors import WireError
from gridctl.router import affinity
from gridctl.router.answers import WholeAnswer, openai_error
from gridctl.router.attribution import NO_ESTIMATE, Attribution
from gridctl.router.breakers import Breakers, BreakerTunables, CircuitKey
from gridctl.router.choosing import Candidate, choose, token_hint
from gridctl.router.confirming import ConfirmingBreakers, HealthCheck
from gridctl.router.fairness import CallerShares, caller_of, share_of
from gridctl.router.features import RequestFeatures, request_features
from gridctl.router.requestshape import over_model_limit, refused_shape
from gridctl.router.sse import UsageParser, completion_tokens
from gridctl.router.telemetry import RequestObservation, TelemetryTap
from gridctl.router.unbound import (
    UnboundDirectory,
    body_for,
    refusal,
    unbound_observation,
    unbound_request,
)
from gridctl.router.upstream import EngineResponse, Upstream, UpstreamError
from gridctl.routes import EngineRoute, RouteTable
from gridctl.transport import is_plain_off_loopback

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_BODY_DEPTH = 128  # tool schemas nest; anything deeper is hostile
HOP_HEADERS = {"content-type", "accept"}
ADMISSION_WAIT_SECONDS = 30.0
MAX_WAITING_PER_MODEL = 512
# a waiting request also looks again this often without a release: a replica that became
# routable, a circuit that closed or a larger concurrency limit frees no slot of its own
RECHECK_SECONDS = 0.5
DEFAULT_POLICY = ControllerPolicy()
CLIENT_GONE = 499  # neutral for the breaker: the caller left, not the engine's fault
# the POST endpoints forwarded to engines, and the endpoint name profiles declare
FORWARDED = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}


@dataclass
class RouterContext:
    """What the router needs from the controller."""

    registry: RouteTable  # the controller's registry, read through the route seam
    clock: Callable[[], float]
    is_configured: Callable[[str], bool]
    unavailable_reason: Callable[[str], str]
    tap: TelemetryTap
    upstream: Upstream  # how requests reach engines
    admission_wait_seconds: float = ADMISSION_WAIT_SECONDS
    breakers: Breakers | None = None  # default: one per router, on ``clock``
    attribution: Attribution | None = None
    monotonic: Callable[[], float] = field(default=time.monotonic)
    # the endpoints a configured model's replicas serve (None: not known, not checked)
    endpoints_of: Callable[[str], tuple[str, ...] | None] | None = None
    # a configured model's ``max_output_tokens`` (None: not known, the router's own bound)
    output_limit_of: Callable[[str], int | None] | None = None
    # the controller policy in force: circuit, attribution and affinity tunables
    policy: Callable[[], ControllerPolicy] = field(default=lambda: DEFAULT_POLICY)
    # an engine's own health (base URL -> healthy): with it, a 5xx answer opens a circuit
    # only when the engine is not healthy (``gridctl.router.confirming``)
    health: HealthCheck | None = None


def circuit_key(route: EngineRoute) -> CircuitKey:
    return (route.host_id, route.endpoint, route.model_id)


class Router:
    def __init__(self, context: RouterContext) -> None:
        self.ctx = context
        self.breakers = context.breakers or (
            Breakers(context.clock, self.breaker_tunables)
            if context.health is None
            else ConfirmingBreakers(context.clock, self.breaker_tunables, context.health)
        )
        self.attribution = context.attribution or Attribution(context.clock)
        # per model, the requests waiting for a slot, first come first: a released slot
        # wakes the first of its model's waiters only (waking every waiter of every model
        # made each release cost as many wake-ups and re-choices as there were waiters)
        self._waiters: dict[str, deque[asyncio.Future[bool]]] = {}
        self._waiting: dict[str, int] = {}
        # each waiting request's arrival number: the line stays in arrival order however
        # its requests' tasks happen to run after a wake-up or a look
        self._arrivals = itertools.count()
        self._tickets: weakref.WeakKeyDictionary[asyncio.Future[bool], int] = (
            weakref.WeakKeyDictionary()
        )
        self.shares = CallerShares()  # per model and caller: slots held, requests waiting
        self.unbound: UnboundDirectory | None = None  # set by the controller service

    def breaker_tunables(self) -> BreakerTunables:
        policy = self.ctx.policy()
        return BreakerTunables(
            policy.circuit_rate_limit_open_seconds,
            policy.circuit_failure_threshold,
            policy.circuit_backoff_max_seconds,
        )

    def affinity_digest(self, request: Request) -> bytes | None:
        """The hashed affinity key, within the policy's ``affinity_key_max_bytes``."""
        limit = self.ctx.policy().affinity_key_max_bytes
        return affinity.hash_key(request.headers.get(affinity.HEADER), limit)

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.list_models, methods=["GET"]),
            *(
                Route(
                    path,
                    functools.partial(self.forward, endpoint=endpoint, path=path),
                    methods=["POST"],
                )
                for path, endpoint in FORWARDED.items()
            ),
        ]

    async def list_models(self, request: Request) -> Response:
        now = self.ctx.clock()
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "gridctl"}
            for model in self.ctx.registry.served_models(now)
        ]
        return JSONResponse({"object": "list", "data": data})

    async def forward(self, request: Request, endpoint: str, path: str) -> Response:
        """Answer one POST to ``path``, an endpoint of ``FORWARDED`` named ``endpoint``."""
        started = time.monotonic()
        try:
            body = await read_bounded(request, MAX_BODY_BYTES)
        except BodyTooLarge:
            return openai_error(413, "request body too large", "invalid_request_error")
        except WireError as exc:  # 408 when the body did not arrive in time
            status = getattr(exc, "status", 400)
            return openai_error(status, str(exc).removeprefix("/: "), "invalid_request_error")
        try:
            payload = parse_json(body, empty={}, max_depth=MAX_BODY_DEPTH)
        except WireError as exc:
            message = str(exc).removeprefix("/: ").replace("body", "request body", 1)
            return openai_error(400, message, "invalid_request_error")
        if not isinstance(payload, dict):
            return openai_error(400, "request body must be a JSON object", "invalid_request_error")
        malformed = refused_shape(endpoint, payload)  # never forwarded: see requestshape
        if malformed is not None:
            return malformed
        if self.unbound is not None and unbound_request(payload):  # workload demand
            return await self._forward_unbound(
                self.unbound, request, endpoint, path, payload, len(body)
            )
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            return openai_error(400, "'model' is required", "invalid_request_error", "model")
        stream = bool(payload.get("stream", False))
        now = self.ctx.clock()
        session = self.affinity_digest(request)
        queued = self._waiting.get(model, 0)
        waited = [0.0]

        def observe(
            outcome: str,
            status: int,
            host: str | None,
            units_out: int = 0,
            sha: str | None = None,
        ) -> None:
            self.ctx.tap.emit(
                observation(
                    self.ctx.clock(),
                    endpoint,
                    model,
                    host,
                    outcome,
                    status,
                    time.monotonic() - started,
                    request_features(endpoint, payload, len(body)),  # off the request's path
                    queue_depth=queued,
                    units_out=units_out,
                    session=affinity.session_token(session),
                    wait_seconds=waited[0],
                    client=getattr(request.state, "router_client", None),
                    artifact_sha256=sha,
                    evaluation=getattr(request.state, "evaluation", False),
                )
            )

        if not self.ctx.is_configured(model) and not self.ctx.registry.routable(model, now):
            return openai_error(
                404,
                f"The model '{model}' does not exist",
                "invalid_request_error",
                "model_not_found",
            )
        refused = self._endpoint_refusal(model, endpoint, path) or self._limit_refusal(
            model, endpoint, payload
        )
        if refused is not None:
            return refused
        caller = caller_of(request)
        try:
            route = await self._admit(model, token_hint(payload), session, caller)
        except CallerLineFull as full:
            observe("rejected", 429, None)
            return full.answer()
        waited[0] = time.monotonic() - started
        if route is None:
            observe("rejected", 503, None)
            reason = self.ctx.unavailable_reason(model)
            return openai_error(
                503,
                f"model '{model}' has no ready replica with a free slot: {reason}",
                "service_unavailable",
                "no_ready_replica",
            )
        return await self._send(request, route, caller, path, body, stream, observe)

    def _endpoint_refusal(self, model: str, endpoint: str, path: str) -> Response | None:
        """A 400 naming the endpoint when the model's replicas do not serve it (an engine
        started without ``--embeddings`` would answer with its own, less useful error)."""
        served = self.ctx.endpoints_of(model) if self.ctx.endpoints_of else None
        if served is None or endpoint in served:
            return None
        return openai_error(
            400,
            f"model '{model}' does not serve {path}: its profile declares endpoints "
            f"[{', '.join(served)}]; add '{endpoint}' to spec.endpoints to serve it",
            "invalid_request_error",
            "endpoint_not_served",
        )

    def _limit_refusal(self, model: str, endpoint: str, payload: dict[str, Any]) -> Response | None:
        """A 400 when the request asks for more tokens than ``model``'s profile allows."""
        limit = self.ctx.output_limit_of(model) if self.ctx.output_limit_of else None
        return None if limit is None else over_model_limit(endpoint, payload, model, limit)

    async def _forward_unbound(
        self,
        directory: UnboundDirectory,
        request: Request,
        endpoint: str,
        path: str,
        payload: dict[str, Any],
        body_size: int,
    ) -> Response:
        """Act on the unbound decision: the chosen model's route, or its honest 503."""
        started = time.monotonic()
        features = request_features(endpoint, payload, body_size)
        decision = directory.decide(endpoint, payload, features.modality)
        session = self.affinity_digest(request)

        def observe(
            outcome: str,
            status: int,
            host: str | None,
            units_out: int = 0,
            sha: str | None = None,
        ) -> None:
            self.ctx.tap.emit(
                unbound_observation(
                    decision,
                    features,
                    t=self.ctx.clock(),
                    endpoint=endpoint,
                    host=host,
                    outcome=outcome,
                    status=status,
                    service_seconds=time.monotonic() - started,
                    units_out=units_out,
                    session=affinity.session_token(session),
                    artifact_sha256=sha,
                    evaluation=getattr(request.state, "evaluation", False),
                )
            )

        route = None
        caller = caller_of(request)
        if decision.model is not None:
            refused_limit = self._limit_refusal(decision.model, endpoint, payload)
            if refused_limit is not None:
                return refused_limit
            try:
                route = await self._admit(decision.model, token_hint(payload), session, caller)
            except CallerLineFull as full:
                observe("rejected", 429, None)
                return full.answer()
        if decision.model is None or route is None:
            refused = refusal(decision)
            observe("rejected", refused.status, None)
            return JSONResponse(refused.body, status_code=refused.status, headers=refused.headers)
        body = body_for(payload, decision.model)
        stream = bool(payload.get("stream", False))
        return await self._send(request, route, caller, path, body, stream, observe)

    # -- admission ---------------------------------------------------------------------

    def _candidates(self, model: str) -> list[Candidate]:
        registry, now = self.ctx.registry, self.ctx.clock()
        routes = registry.routable(model, now)
        ranked = len(routes) > 1  # a lone route is chosen without its estimate
        return [
            Candidate(
                route,
                active=registry.active_requests(route.host_id, route.model_id),
                circuit_open=not self.breakers.available(circuit_key(route)),
                estimate=self.attribution.estimate(
                    route.host_id, route.model_id, route.artifact_sha256
                )
                if ranked
                else NO_ESTIMATE,
                lease_age=max(0.0, now - route.lease_at),
            )
            for route in routes
        ]

    def _try_admit(
        self, model: str, tokens: int | None, session: bytes | None, caller: str
    ) -> EngineRoute | None:
        """Choose and claim a slot in one step (no await in between, so no race)."""
        policy = self.ctx.policy()
        slack = policy.affinity_route_slack
        self.attribution.configure(policy.attribution_full_samples)
        for _ in range(4):  # a lost half-open probe race re-chooses
            route = choose(
                self._candidates(model), tokens=tokens, affinity=session, affinity_slack=slack
            )
            if route is None:
                return None
            if self.breakers.admit(circuit_key(route)):
                self.ctx.registry.request_started(route.host_id, route.model_id, self.ctx.clock())
                self.shares.admitted(route.model_id, caller)
                return route
        return None

    def _yields(self, model: str, caller: str) -> bool:
        """Whether ``caller`` leaves a free slot of ``model`` to others: it holds its
        share of the model's slots while a request of another caller waits."""
        held = self.shares.held(model, caller)
        if held == 0 or not self.shares.others_waiting(model, caller):
            return False
        slots = sum(c.capacity for c in self._candidates(model) if not c.circuit_open)
        return held >= share_of(slots, self.ctx.policy().router_caller_slot_share)

    async def _admit(
        self, model: str, tokens: int | None, session: bytes | None, caller: str
    ) -> EngineRoute | None:
        """A claimed slot of ``model`` for ``caller``, after a bounded wait in line; None
        when none came; ``CallerLineFull`` when the caller already fills its part of it."""
        if not self._yields(model, caller):
            route = self._try_admit(model, tokens, session, caller)
            if route is not None:
                return route
        elif any(c.admissible for c in self._candidates(model)):
            self._wake_next(model)  # the free slot is the waiting caller's
        if self._waiting.get(model, 0) >= MAX_WAITING_PER_MODEL:
            return None
        limit = self.ctx.policy().router_max_waiting_per_caller
        if self.shares.waiting(model, caller) >= limit:
            raise CallerLineFull(model, limit)
        deadline = self.ctx.monotonic() + self.ctx.admission_wait_seconds
        self._waiting[model] = self._waiting.get(model, 0) + 1
        self.shares.joined(model, caller)
        line = self._waiters.setdefault(model, deque())  # kept: one per configured model
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] | None = None
        ticket = next(self._arrivals)
        try:
            while True:
                candidates = self._candidates(model)
                if not any(not c.circuit_open and c.capacity > 0 for c in candidates):
                    return None  # nothing could open by waiting for a slot
                left = deadline - self.ctx.monotonic()
                if left <= 0:
                    return None
                turn = loop.create_future()
                self.shares.queued(turn, caller)
                # a request back from a wake-up or a look whose slot went to another
                # goes back to its own place: before every request that came after it
                self._join(line, turn, ticket)
                timer = [loop.call_later(min(left, RECHECK_SECONDS), _look_again, turn, line)]
                timer.append(loop.call_at(loop.time() + left, _look_again, turn, None))
                try:
                    await turn
                finally:
                    self.shares.dequeued(turn)
                    for handle in timer:
                        handle.cancel()
                looked = not turn.result()
                if looked:
                    with contextlib.suppress(ValueError):
                        line.remove(turn)  # looked again on its own: not in line meanwhile
                if looked and self._yields(model, caller):
                    self._wake_next(model)  # the free slot is another caller's turn
                    continue
                route = self._try_admit(model, tokens, session, caller)
                if route is not None:
                    turn = None
                    if looked and line:
                        # a slot no release freed (a replica became routable, a circuit
                        # closed): there may be more, and only the first in line looks
                        self._wake_next(model)
                    return route
        finally:
            self._waiting[model] -= 1
            self.shares.left(model, caller)
            if turn is not None:
                if not turn.done() or turn.cancelled():
                    turn.cancel()  # the caller left: out of the line
                    with contextlib.suppress(ValueError):
                        line.remove(turn)
                elif turn.result():
                    self._wake_next(model)  # woken, but gave up: the slot is the next one's

    def _join(
        self, line: deque[asyncio.Future[bool]], turn: asyncio.Future[bool], ticket: int
    ) -> None:
        """Put ``turn`` in ``line`` by its request's arrival number ``ticket`` (a new
        request's is the highest: it goes last, in one step)."""
        self._tickets[turn] = ticket
        index = len(line)
        while index and self._tickets.get(line[index - 1], -1) > ticket:
            index -= 1
        line.insert(index, turn)

    def _wake_next(self, model: str) -> None:
        """Hand a released slot of ``model`` to the request next in line for one: the
        first still waiting, unless another caller's request ranks before it
        (``CallerShares.in_order``)."""
        line = self._waiters.get(model)
        if not line:
            return
        while line and line[0].done():
            line.popleft()  # cancelled, or already looking again
        for turn in self.shares.in_order(model, line):
            line.remove(turn)
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            try:
                if turn.get_loop() is running:
                    turn.set_result(True)
                else:  # a request served on another loop (thread): woken on its own
                    turn.get_loop().call_soon_threadsafe(self._deliver, model, turn)
            except RuntimeError:  # its loop is closed: nobody waits on it any more
                continue
            return

    def _deliver(self, model: str, turn: asyncio.Future[bool]) -> None:
        """A wake-up sent from another loop, on the waiting request's own loop: a turn that
        ended meanwhile passes it on."""
        if turn.done():
            self._wake_next(model)
        else:
            turn.set_result(True)

    def _release(self, route: EngineRoute, caller: str) -> None:
        self.ctx.registry.request_finished(route.host_id, route.model_id, self.ctx.clock())
        self.shares.released(route.model_id, caller)
        if route.model_id in self._waiters:
            self._wake_next(route.model_id)

    # -- upstream ----------------------------------------------------------------------

    async def _send(
        self,
        request: Request,
        route: EngineRoute,
        caller: str,
        path: str,
        body: bytes,
        stream: bool,
        observe: Callable[..., None],
    ) -> Response:
        key = circuit_key(route)
        if is_plain_off_loopback(route.endpoint):  # the controller refuses such endpoints too
            self._release(route, caller)
            observe("error", 502, route.host_id, sha=route.artifact_sha256)
            return openai_error(
                502, "refusing to send a request over plain HTTP off loopback", "api_error"
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() in HOP_HEADERS}
        if route.api_key:
            headers["authorization"] = f"Bearer {route.api_key}"
        sent = time.monotonic()
        try:
            response = await self.ctx.upstream.post(
                route.endpoint.rstrip("/") + path, body, headers
            )
        except UpstreamError as exc:
            self.breakers.record(key, None)
            self._release(route, caller)
            observe("error", 502, route.host_id, sha=route.artifact_sha256)
            return openai_error(
                502, f"upstream engine on {route.host_id} failed: {exc.kind}", "upstream_error"
            )
        except BaseException:
            self.breakers.record(key, CLIENT_GONE)
            self._release(route, caller)
            raise
        ok = response.status < 400
        if not stream or not ok:
            return await self._whole(route, caller, response, sent, observe)

        parser = UsageParser()

        async def relay() -> AsyncIterator[bytes]:
            status: int | None = CLIENT_GONE
            try:
                async for chunk in response.chunks():
                    parser.feed(chunk)
                    yield chunk
                status = response.status
            except UpstreamError:
                status = None  # the engine broke the stream
                raise
            finally:
                await response.close()
                parser.close()
                self.breakers.record(key, status)
                self._release(route, caller)
                if status == response.status:
                    self._attribute(route, time.monotonic() - sent, parser.completion_tokens)
                observe(
                    "ok" if status == response.status else "error",
                    response.status,
                    route.host_id,
                    parser.completion_tokens or 0,
                    sha=route.artifact_sha256,
                )

        return StreamingResponse(
            relay(),
            status_code=response.status,
            media_type=response.content_type or "text/event-stream",
        )

    async def _whole(
        self,
        route: EngineRoute,
        caller: str,
        response: EngineResponse,
        sent: float,
        observe: Callable[..., None],
    ) -> Response:
        key = circuit_key(route)
        status: int | None = CLIENT_GONE
        try:
            content = await response.read()
            status = response.status
        except UpstreamError:
            status = None  # the engine broke the body
        finally:
            await response.close()
            self.breakers.record(key, status)
            self._release(route, caller)
        if status is None:
            observe("error", 502, route.host_id, sha=route.artifact_sha256)
            return openai_error(502, f"upstream engine on {route.host_id} failed", "upstream_error")
        seconds = time.monotonic() - sent

        def settle() -> None:
            """Learn from the answer once it is written (nothing here delays its bytes)."""
            ok = response.status < 400
            tokens = None
            if ok:
                try:
                    tokens = completion_tokens(json.loads(content))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    tokens = None
                self._attribute(route, seconds, tokens)
            # the telemetry worker's wake-up (a thread switch, a contended interpreter
            # lock) never sits before the caller's bytes
            observe(
                "ok" if ok else "error",
                response.status,
                route.host_id,
                tokens or 0,
                sha=route.artifact_sha256,
            )

        return WholeAnswer(
            content, response.status, response.content_type or "application/json", settle
        )

    def _attribute(self, route: EngineRoute, seconds: float, tokens: int | None) -> None:
        self.attribution.record(
            route.host_id, route.model_id, route.artifact_sha256, seconds, tokens
        )


def observation(
    t: float,
    endpoint: str,
    model: str,
    host: str | None,
    outcome: str,
    status: int,
    service_seconds: float,
    features: RequestFeatures,
    *,
    queue_depth: int,
    units_out: int,
    session: str | None,
    wait_seconds: float,
    client: str | None = None,
    artifact_sha256: str | None = None,
    evaluation: bool = False,
) -> RequestObservation:
    return RequestObservation(
        t=t,
        endpoint=endpoint,
        model=model,
        served_model=model if host else None,
        host_id=host,
        outcome=outcome,
        status=status,
        service_seconds=service_seconds,
        queue_depth=queue_depth,
        input_units=features.input_units,
        output_units=units_out,
        modality=features.modality,
        workload=features.workload,
        session=session,
        wait_seconds=wait_seconds,
        client=client,
        artifact_sha256=artifact_sha256 if host else None,
        evaluation=evaluation,
    )


def _look_again(turn: asyncio.Future[bool], line: deque[asyncio.Future[bool]] | None) -> None:
    """A waiting request's own look without a release: every ``RECHECK_SECONDS`` for the
    first in ``line`` (whoever waits behind it would find what it finds), and once at the
    request's deadline (``line`` None)."""
    if turn.done():
        return
    if line is None or not line or line[0] is turn:
        turn.set_result(False)
    else:
        turn.get_loop().call_later(RECHECK_SECONDS, _look_again, turn, line)


class CallerLineFull(Exception):
    """A caller already has its most requests waiting for a model: answered 429."""

    def __init__(self, model: str, limit: int) -> None:
        super().__init__(model)
        self.model, self.limit = model, limit

    def answer(self) -> Response:
        refused = openai_error(
            429,
            f"this caller already has {self.limit} requests waiting for model "
            f"'{self.model}' (router_max_waiting_per_caller); retry after some finish",
            "rate_limit_error",
            "caller_queue_full",
        )
        refused.headers["Retry-After"] = "1"
        return refused
