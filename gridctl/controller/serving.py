"""Run the controller: HTTP on uvicorn, the tick loop, the route prober and the watcher.

The tick loop runs in its own thread so planning never blocks request serving;
heartbeats, acknowledgements and demand only set a wake flag, which coalesces
bursts of events into one prompt pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from httpx_aiohttp import AiohttpTransport
from starlette.applications import Starlette

from gridctl.config.resolving import policy_from_document
from gridctl.controller.admission import LoopLag, RegistrationGate
from gridctl.controller.app import ControllerApp
from gridctl.controller.control import Controller
from gridctl.controller.desired import ApiDesired, DesiredProvider
from gridctl.controller.externals import DEFAULT_SERVES, ExternalReadiness
from gridctl.controller.joining import FleetIdentity
from gridctl.controller.onewrite import OneWriteHttpToolsProtocol
from gridctl.controller.proxyfront import ProxyFront
from gridctl.controller.reading import SourceOptions, make_reader
from gridctl.controller.registry import Registry
from gridctl.controller.routerkeys import guard_router_route, serving_names
from gridctl.controller.statusdoc import model_rows
from gridctl.controller.stores import DEFAULT_LEASE_SECONDS
from gridctl.controller.stores.opening import open_lease, open_store
from gridctl.controller.tickworker import ProcessTicks
from gridctl.tick.computing import compute_tick

if TYPE_CHECKING:
    from gridctl.controller.stores.postgres import PostgresLocation
from gridctl.controller.watching import DesiredSource, watch_directory
from gridctl.credentials import (
    DEFAULT_TTL_SECONDS,
    CredentialError,
    operator_capability_matches,
    presented_operator_capability,
)
from gridctl.domain import DesiredState
from gridctl.errors import GridctlError
from gridctl.metrics import ControllerMetrics
from gridctl.router.keepalive import KeepAliveUpstream
from gridctl.router.proxy import Router, RouterContext
from gridctl.router.telemetry import RequestObservation, TelemetryTap
from gridctl.router.unbound import UnboundDirectory
from gridctl.router.upstream import HttpxUpstream, Upstream
from gridctl.transport import base_url, is_loopback

log = logging.getLogger(__name__)


OPERATOR_CLIENT = "operator"  # the client id of /v1 requests made with the operator capability
KEEP_ALIVE_SECONDS = 30  # above the node's 5 s heartbeat, so reuse never races a close
SWITCH_INTERVAL_SECONDS = 0.001  # CPython's default is 5 ms
# how often the probe loop looks at the stop flag while it waits (a new route wakes it
# at once: ``ControllerRegistry.on_route_added``)
PROBE_STOP_CHECK_SECONDS = 0.5


@dataclass
class ServiceOptions:
    state_dir: Path | None
    watch_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 22100
    tick_interval: float = 2.0
    probe_interval: float = 2.0
    plan_in_worker: bool = False  # compute ticks in a child process (``tickworker``)
    clock: Callable[[], float] = time.time
    # the clock that never steps, beside ``clock``: a forward step of ``clock`` is told
    # from elapsed time by it (``ClockWatch``); None (a test's own clock) detects none
    monotonic: Callable[[], float] | None = None
    upstream_transport: httpx.AsyncBaseTransport | None = None
    extra_warnings: list[str] = field(default_factory=list)
    source: SourceOptions = field(default_factory=SourceOptions)  # ref, remote, signatures
    store: PostgresLocation | None = None  # shared state for highly available controllers
    advertise_url: str | None = None  # where nodes reach this controller (default: listen)
    tls: TlsOptions = field(default_factory=lambda: TlsOptions())
    node_credential_ttl: float = DEFAULT_TTL_SECONDS
    router_auth: str = "auto"  # auto (keys required off loopback) | required | open


@dataclass(frozen=True)
class TlsOptions:
    """How the controller serves HTTPS.

    Off loopback HTTPS is mandatory: with the fleet CA (made in the state
    directory on first start) unless ``cert``/``key`` bring the organisation's
    own certificate, whose issuing CA is ``ca``. ``force`` serves HTTPS on
    loopback too. ``engine_ca`` is an extra CA for external engines.
    """

    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    force: bool = False
    engine_ca: Path | None = None


def engine_transport(verify: ssl.SSLContext) -> httpx.AsyncBaseTransport:
    """The prober's connections to engines: httpx's interface (and its error types) over
    aiohttp's connection pool and C parser (the proxy path has its own connections:
    ``gridctl.router.keepalive``). ``verify`` is used as is, so a trust bundle loaded into
    it later applies to new connections."""
    return AiohttpTransport(verify=verify, trust_env=False)


def server_config(app: Starlette, host: str, port: int, **options: Any) -> uvicorn.Config:
    """How the controller serves HTTP (``benchmarks/router.py`` serves the router so too):
    uvicorn on httptools, each response in one write, no access log (never printed at
    the warning level), no proxy-header layer, and a short interpreter switch interval."""
    # the tick thread holds the interpreter lock while it gathers inputs and commits
    # (and for whole planning passes when it plans in process); a short switch
    # interval hands it back to the serving loop soon after each socket read
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=OneWriteHttpToolsProtocol,
        log_level="warning",
        log_config=None,  # its records go to this process's handlers (text or json lines)
        access_log=False,
        proxy_headers=False,  # no client address is read, and none is taken from a header
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        **options,
    )


def tick_rest(took: float, since: float) -> float:
    """How long the tick loop waits before the next tick, ``since`` seconds after a tick
    that took ``took`` ended: at least as long as that tick took.

    While inputs arrive faster than ticks end (a fleet registering, a fleet whose
    heartbeats run late) every tick is dirty when it ends, and without a rest the tick
    thread would hold the serving process's interpreter lock for its gather and commit
    back to back, with the planning process busy all the while: at 10,000 hosts about
    1.6 ticks of 550 ms every second, leaving the heartbeats a process never idle. A
    rest as long as the tick bounds the tick loop to half of the time; on a small fleet
    a tick takes milliseconds and so does its rest."""
    return max(0.0, took - since)


QUIET_HOSTS_PER_SECOND = 1000  # a quiet large fleet's periodic tick: a second per 1,000 hosts


def quiet_period(interval: float, hosts: int, stale_seconds: float) -> float:
    """How long after a tick began the next periodic one is due when no input dirtied
    the plan: ``interval``, or on a fleet of more than ``interval`` x 1,000 hosts a
    second per 1,000 hosts, but never past a quarter of the heartbeat staleness bound
    (a host that fell silent is still found well within it).

    A periodic tick on an unchanged fleet only lets time pass in the plan (commands'
    time to live, staleness, idle timers), and it costs in proportion to the fleet: at
    5,000 hosts about 300 ms, a third of it in the serving process. Every 2 s that is
    about a third of the controller's CPU for the fleet's heartbeats. A tick an input
    dirtied is not delayed by this (``_tick_loop``), and a fleet of up to 2,000 hosts
    (at the default interval) keeps ``interval``."""
    return max(interval, min(hosts / QUIET_HOSTS_PER_SECOND, stale_seconds / 4))


class ControllerService:
    """Everything one `gridctl controller` process runs."""

    def __init__(self, options: ServiceOptions) -> None:
        tls = options.tls
        self.tls_enabled = tls.force or tls.cert is not None or not is_loopback(options.host)
        if (tls.cert is None) != (tls.key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.tls_enabled and options.state_dir is None and tls.cert is None:
            raise ValueError("serving HTTPS needs a state directory for the fleet CA")
        self.options = options
        clock = options.clock
        state_dir = options.state_dir
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            state_dir.chmod(0o700)
        self.identity = (
            FleetIdentity(
                state_dir,
                clock=clock,
                credential_ttl=options.node_credential_ttl,
                public_url=options.advertise_url or self.url,
                pinned_ca_pem=tls.ca.read_text(encoding="ascii") if tls.ca else None,
            )
            if state_dir is not None
            else None
        )
        self.registry = Registry()
        self.externals = ExternalReadiness(clock)  # native readiness of `gridctl join` engines
        if self.identity is not None:  # a join bundle never takes over a host in the registry
            self.identity.known_host = lambda host_id: self.registry.host(host_id) is not None
            self.identity.controller_names |= {n.lower() for n in serving_names(options.host)}
        self.store = open_store(state_dir, clock=clock, shared=options.store)
        desired: DesiredProvider
        if options.watch_dir is not None or options.source.repo_url is not None:
            reader = make_reader(options.watch_dir, options.source, state_dir)
            self.source: DesiredSource | None = DesiredSource(options.watch_dir, clock, reader)
            self.source.reload()
            desired = self.source
        else:
            self.source = None
            desired = self._api_desired(clock)
        self.lease = open_lease(
            state_dir,
            self.store,
            secrets.token_hex(8),
            lease_seconds=desired.current.policy.controller_lease_seconds
            if desired.current
            else DEFAULT_LEASE_SECONDS,
            clock=clock,
            shared=options.store,
            address=options.advertise_url or self.url,
        )
        if self.identity is not None:
            self._restore_externals()
        self.controller = Controller(
            desired=desired,
            registry=self.registry,
            store=self.store,
            clock=clock,
            lease=self.lease,
            warnings=list(options.extra_warnings),
            monotonic=options.monotonic,
        )
        controller = self.controller
        self.registry.follow_route_lease(lambda: controller.policy().route_lease_seconds)
        # an unchanged heartbeat is covered by a plan at most two periods old: the periodic
        # tick is due within one period of the last and may take part of another
        self.controller.cover_seconds = 2 * options.tick_interval
        # registrations wait while the serving loop is behind a large fleet (``admission``)
        self.loop_lag = LoopLag()
        self.registrations = RegistrationGate(
            self.loop_lag, lambda: len(self.registry), random.Random(secrets.randbits(64))
        )
        self.tap = TelemetryTap()
        self.tap.add(self.controller.demand.observe)
        self.tap.add(self._demand_arrived)
        self.metrics = ControllerMetrics(self.controller, known_model=self._configured)
        self.metrics.watch_admission(
            lambda: self.loop_lag.seconds, lambda: self.registrations.deferred
        )
        self.tap.add(self.metrics.observe_request)
        self.controller.tick_observers.append(self.metrics.observe_tick)
        self.controller.tick_observers.append(self._refresh_reasons)
        self._stop = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._renew_thread: threading.Thread | None = None
        self._tls_digest: str | None = None
        self._engine_context: ssl.SSLContext | None = None
        self._server_config: uvicorn.Config | None = None
        self._reasons: dict[str, str] | None = None  # model -> why it has no ready replica
        self._reasons_asked = False  # a 503 read the table since the last tick
        self.ticks: ProcessTicks | None = None  # the planning process, while serving
        self._ticks_lock = threading.Lock()
        self._ticks_starter: threading.Thread | None = None

    def _api_desired(self, clock: Callable[[], float]) -> ApiDesired:
        """Profiles managed over the API, restored from the store after a restart."""
        documents: dict[str, dict[str, Any]] = {}
        policy = None
        revision = None
        restored = self.store.last_good_profiles()
        if restored is not None and isinstance(restored[1], dict):
            revision = restored[0]
            documents = dict(restored[1].get("documents") or {})
            if isinstance(restored[1].get("policy"), dict):
                policy = policy_from_document(restored[1]["policy"])

        def save(state: DesiredState, docs: dict[str, dict[str, Any]]) -> None:
            spec = {f.name: getattr(state.policy, f.name) for f in fields(state.policy)}
            name = spec.pop("name")
            self.store.save_profiles(
                state.revision,
                {"documents": docs, "policy": {"metadata": {"name": name}, "spec": spec}},
            )

        return ApiDesired(
            clock, documents=documents, policy=policy, on_change=save, revision=revision
        )

    def _demand_arrived(self, _observation: RequestObservation) -> None:
        self.controller.note_demand()

    def _desired_changed(self) -> None:
        self.controller.mark_dirty(safety=True)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_enabled else "http"
        return base_url(scheme, self.options.host, self.options.port)

    @property
    def operator_token(self) -> str:
        return self.identity.operator_token() if self.identity is not None else ""

    def verify_node(self, token: str, host_id: str) -> dict[str, object]:
        if self.identity is None:
            raise CredentialError("this controller has no state directory and no signing key")
        return self.identity.verify(token, host_id)

    def _restore_externals(self) -> None:
        """External engines registered with `gridctl join` survive a controller restart."""
        assert self.identity is not None
        for name, body in sorted(self.identity.membership.externals().items()):
            try:
                self.registry.register_external(
                    name,
                    str(body["endpoint"]),
                    str(body["model_id"]),
                    str(body["kind"]),
                    self.options.clock(),
                    max_concurrency=int(body.get("max_concurrency", 1)),
                    api_key=str(body["api_key"]) if body.get("api_key") else None,
                )
            except (KeyError, TypeError, ValueError, GridctlError) as exc:
                log.warning("external engine %s not restored: %s", name, exc)
                continue
            self.externals.remember(name, str(body.get("serves", DEFAULT_SERVES)))

    def _external_key(self, name: str, model_id: str) -> str | None:
        record = self.registry.host(name)
        route = record.routes.get(model_id) if record is not None else None
        return route.api_key if route is not None else None

    def _save_external(self, name: str, body: dict[str, Any]) -> None:
        self.externals.remember(name, str(body.get("serves", DEFAULT_SERVES)))
        if self.identity is not None:
            self.identity.membership.save_external(name, body, now=self.options.clock())

    def _remove_external(self, name: str) -> bool:
        """Forget an external engine's persisted record and probe state; returns whether a
        persisted record existed (the registry entry is the caller's)."""
        self.externals.forget(name)
        if self.identity is None:
            return False
        return self.identity.membership.remove_external(name)

    def engine_verify(self) -> ssl.SSLContext:
        """How the router and prober verify engines: the fleet trust bundle, the system
        store (for external engines with public certificates) and ``--engine-tls-ca``."""
        context = ssl.create_default_context()
        if self.identity is not None:
            context.load_verify_locations(cadata=self.identity.trust_bundle())
        if self.options.tls.engine_ca is not None:
            context.load_verify_locations(cafile=str(self.options.tls.engine_ca))
        return context

    def router_keys_required(self) -> bool:
        mode = self.options.router_auth
        if mode == "required":
            return True
        if mode == "open":
            return False
        return not is_loopback(self.options.host)

    def _configured(self, model: str) -> bool:
        current = self.controller.current_desired()
        return bool(current and current.profile(model))

    def _endpoints_of(self, model: str) -> tuple[str, ...] | None:
        current = self.controller.current_desired()
        profile = current.profile(model) if current else None
        return profile.endpoints if profile else None

    def _output_limit_of(self, model: str) -> int | None:
        current = self.controller.current_desired()
        profile = current.profile(model) if current else None
        return profile.max_output_tokens if profile else None

    def _unavailable_reason(self, model: str) -> str:
        """Why ``model`` has no ready replica, from a per-model table the tick thread
        builds after each tick while 503s are being answered: a burst of 503s reads it
        and builds nothing on the serving loop, and a fleet answering none pays nothing.
        The first 503 after quiet ticks reads the table of the last tick that saw one
        (a reason at most a few ticks old) and asks the next tick for a fresh one."""
        self._reasons_asked = True
        if self.controller.view.tick is None:
            return "Unknown: no plan yet"
        table = self._reasons
        if table is None:  # only before the first tick that saw a 503
            table = self._build_reasons()
        return table.get(model, "not configured")

    def _refresh_reasons(self, _record: object) -> None:
        if self._reasons_asked:
            self._reasons_asked = False
            self._build_reasons()

    def _build_reasons(self) -> dict[str, str]:
        table = {
            str(row["model_id"]): f"{row['health']}: {row['reason']}" for row in self._model_rows()
        }
        self._reasons = table
        return table

    def _model_rows(self) -> list[dict[str, object]]:
        return model_rows(self.controller)

    # -- loops ---------------------------------------------------------------------

    def _tick_loop(self) -> None:
        """Tick when an input dirtied the plan, and at least once per period
        (``quiet_period``), counted from the start of the last tick; but never sooner
        after a tick ends than that tick took (``tick_rest``)."""
        started = ended = time.monotonic()
        took = 0.0
        controller = self.controller
        while not self._stop.is_set():
            stale = controller.policy().heartbeat_stale_seconds
            period = quiet_period(self.options.tick_interval, len(self.registry), stale)
            # an unchanged heartbeat is covered by a plan at most two periods old
            controller.cover_seconds = 2 * period
            due = period - (time.monotonic() - started)
            if due > 0:
                self.controller.wake.wait(due)
            rest = tick_rest(took, time.monotonic() - ended)
            if rest > 0:
                self._stop.wait(rest)  # inputs meanwhile are gathered by the tick after it
            self.controller.wake.clear()
            if self._stop.is_set():
                break
            started = time.monotonic()
            self.controller.tick()
            ended = time.monotonic()
            took = ended - started

    def _renew_loop(self) -> None:
        """Renew the lease at a third of its length, whatever the tick is doing, so a
        renewal happens well before expiry and a follower notices a free lease soon."""
        assert self.lease is not None
        interval = max(0.05, self.lease.lease_seconds / 3)
        while not self._stop.wait(interval):
            try:
                was = self.controller.steering.holds_authority()
                self.controller.steering.renew()
                if self.controller.steering.holds_authority() != was:
                    self.controller.mark_dirty(safety=True)
            except Exception:  # a failed renewal is reported by the lease; keep trying
                log.exception("lease renewal failed")

    def start_ticking(self) -> None:
        """Start the tick thread (the lifespan does this; tests may call it directly)."""
        self._stop.clear()
        self._tick_thread = threading.Thread(
            target=self._tick_loop, name="gridctl-tick", daemon=True
        )
        self._tick_thread.start()
        self._start_renewing()

    def _start_renewing(self) -> None:
        if self.lease is None or self._renew_thread is not None:
            return
        self._renew_thread = threading.Thread(
            target=self._renew_loop, name="gridctl-lease", daemon=True
        )
        self._renew_thread.start()

    def stop_ticking(self) -> None:
        self._stop.set()
        self.controller.wake.set()
        if self._tick_thread is not None:
            self._tick_thread.join(timeout=30)
            self._tick_thread = None
        if self._renew_thread is not None:
            self._renew_thread.join(timeout=30)
            self._renew_thread = None
        if self.lease is not None:
            self.lease.release()  # a clean stop hands authority over without waiting

    async def probe_once(self, client: httpx.AsyncClient) -> None:
        """Probe every advertised engine once: a child's 200 from /health corroborates it;
        an external engine needs native readiness (``gridctl.controller.externals``).
        External engines are probed concurrently with the children, so a slow one
        delays no child's corroboration."""
        children: list[tuple[str, str, str]] = []
        external: list[tuple[str, str, str]] = []
        for target in self.registry.probe_targets():
            record = self.registry.host(target[0])
            is_external = record is not None and record.role == "external"
            (external if is_external else children).append(target)
        await asyncio.gather(
            self._probe_children(client, children), self._probe_external(client, external)
        )

    async def _probe_children(
        self, client: httpx.AsyncClient, targets: list[tuple[str, str, str]]
    ) -> None:
        for host_id, model_id, endpoint in targets:
            if await self._answers(client, endpoint):
                self._corroborate(host_id, model_id, endpoint)

    async def _probe_external(
        self, client: httpx.AsyncClient, targets: list[tuple[str, str, str]]
    ) -> None:
        verdicts = await self.externals.check_all(client, targets, self._external_key)
        for (host_id, model_id, endpoint), verdict in zip(targets, verdicts, strict=True):
            if verdict.ready:
                self._corroborate(host_id, model_id, endpoint)
            elif self.registry.withdraw(
                host_id, model_id, endpoint, verdict.reason, at_once=verdict.definitive
            ):
                log.warning("external route %s/%s withdrawn: %s", host_id, model_id, verdict.reason)
                self.controller.mark_dirty(safety=True)

    def _corroborate(self, host_id: str, model_id: str, endpoint: str) -> None:
        was = self.registry.routable(model_id, self.options.clock())
        self.registry.corroborate(host_id, model_id, endpoint, self.options.clock())
        if not any(r.host_id == host_id for r in was):
            self.controller.mark_dirty(safety=True)

    @staticmethod
    async def _answers(client: httpx.AsyncClient, endpoint: str) -> bool:
        """A child answers /health; an external OpenAI-style engine may only answer /v1/models."""
        for path in ("/health", "/v1/models"):
            try:
                response = await client.get(endpoint.rstrip("/") + path, timeout=2.0)
            except httpx.HTTPError:
                return False
            if response.status_code == 200:
                return True
        return False

    async def _probe_loop(self, client: httpx.AsyncClient) -> None:
        route_added = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake() -> None:
            # heartbeats are taken on this loop or on worker threads: either way the
            # wake-up is handed to the loop
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
                loop.call_soon_threadsafe(route_added.set)

        self.registry.on_route_added = wake
        try:
            while not self._stop.is_set():
                added = self.registry.routes_added
                route_added.clear()
                await self.probe_once(client)
                self.registry.refresh_external(self.options.clock())
                self.refresh_tls()
                await self._probe_pause(added, route_added)
        finally:
            self.registry.on_route_added = None

    async def _probe_pause(self, added: int, route_added: asyncio.Event) -> None:
        """Wait one probe period, or less when a route appeared since the last pass (a
        replica just became ready is corroborated, and so routable, at once)."""
        end = time.monotonic() + self.options.probe_interval
        while not self._stop.is_set() and self.registry.routes_added == added:
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(
                    route_added.wait(), timeout=min(left, PROBE_STOP_CHECK_SECONDS)
                )
            except TimeoutError:
                continue

    def refresh_tls(self) -> bool:
        """Follow a CA rotation without a restart; returns whether anything changed.

        New CAs are added to the live engine-verification context (engines renew
        onto the new CA while the old one stays trusted), and the serving
        certificate is re-issued from the new CA and loaded into the live server
        context, so new handshakes use it and open connections are left alone.
        """
        if self.identity is None:
            return False
        digest = self.identity.trust_bundle_digest(fresh=True)
        if digest == self._tls_digest:
            return False
        first = self._tls_digest is None
        self._tls_digest = digest
        if first:
            return False
        if self._engine_context is not None:
            self._engine_context.load_verify_locations(cadata=self.identity.trust_bundle())
        live = self._server_config.ssl if self._server_config is not None else None
        if live is not None and self.options.tls.cert is None:
            cert, key = self.serving_certificate()
            live.load_cert_chain(str(cert), str(key))
        log.warning("fleet trust bundle changed (%s): serving certificate re-issued", digest)
        return True

    def build_app(self) -> Starlette:
        self._engine_context = self.engine_verify()
        self.refresh_tls()  # remember the bundle the contexts start from
        upstream = httpx.AsyncClient(
            transport=self.options.upstream_transport or engine_transport(self._engine_context),
            timeout=httpx.Timeout(600.0, connect=5.0),
        )
        self.upstream = upstream  # probes (and the router, on a test's transport)
        # the proxy path has its own connections (gridctl.router.keepalive); a test's
        # transport stands in for every engine on both
        engines: Upstream = (
            HttpxUpstream(upstream)
            if self.options.upstream_transport is not None
            else KeepAliveUpstream(self._engine_context)
        )
        router = Router(
            RouterContext(
                registry=self.registry,
                clock=self.options.clock,
                is_configured=self._configured,
                unavailable_reason=self._unavailable_reason,
                endpoints_of=self._endpoints_of,
                output_limit_of=self._output_limit_of,
                tap=self.tap,
                upstream=engines,
                policy=self.controller.policy,
                health=lambda endpoint: self._answers(upstream, endpoint),
            )
        )
        self.router = router
        router.unbound = UnboundDirectory(  # unbound requests follow the workload portfolio
            lambda: self.controller.view.portfolio,
            lambda: (self.controller.current_desired() or DesiredState("", False)).catalog,
            lambda model: bool(self.registry.routable(model, self.options.clock())),
            lambda: {
                p.name: p.workload_scores
                for p in (self.controller.current_desired() or DesiredState("", False)).profiles
            },
        )
        # proxy measurements: per-model speed evidence in placement snapshots
        self.registry.measured = router.attribution.model_speeds
        routes = [
            guard_router_route(r, self._router_client, self._presents_operator)
            for r in router.routes()
        ]
        if self.identity is not None:
            routes = self.identity.routes() + routes
        app = ControllerApp(
            self.controller,
            operator_token=lambda: self.operator_token,
            verify_node=self.verify_node,
            extra_routes=routes,
            metrics=self.metrics.render,
            save_external=self._save_external,
            remove_external=self._remove_external,
            node_extras=self._node_extras,
            registration_wait=self.registrations.wait,
        ).build()
        # the forwarded POSTs skip the routing and exception layers (same guard, same router)
        app.add_middleware(
            ProxyFront,
            router=router,
            check=self._router_client,
            is_operator=self._presents_operator,
        )

        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            if self.options.plan_in_worker:
                self._start_planning_process()
            self._stop.clear()
            self._tick_thread = threading.Thread(
                target=self._tick_loop, name="gridctl-tick", daemon=True
            )
            self._tick_thread.start()
            self._start_renewing()
            stop_watch = asyncio.Event()
            tasks = [
                asyncio.create_task(self._probe_loop(upstream)),
                asyncio.create_task(self.loop_lag.watch()),
            ]
            if self.source is not None:
                tasks.append(
                    asyncio.create_task(
                        watch_directory(self.source, self._desired_changed, stop_watch)
                    )
                )
            self.controller.wake.set()
            try:
                yield
            finally:
                stop_watch.set()
                self.stop_ticking()
                await asyncio.to_thread(self._stop_planning_process)
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await upstream.aclose()
                await engines.aclose()

        app.router.lifespan_context = lifespan
        return app

    def _start_planning_process(self) -> None:
        """Start the planning process without waiting for it: until it has imported the
        planner, ticks plan on the tick thread (``compute_tick``, the same decision), so
        neither readiness nor the first tick waits for a new interpreter."""
        ticks = ProcessTicks()
        self.ticks = ticks

        def start() -> None:
            try:
                log.info("planning in process %d", ticks.start())
            except Exception:  # the next tick through ``ticks`` starts another
                log.warning("the planning process exited while starting", exc_info=True)
            with self._ticks_lock:
                if self.ticks is ticks:
                    self.controller.compute = ticks

        self._ticks_starter = threading.Thread(
            target=start, name="gridctl-planner-start", daemon=True
        )
        self._ticks_starter.start()

    def _stop_planning_process(self) -> None:
        starter, self._ticks_starter = self._ticks_starter, None
        if starter is not None:
            starter.join(timeout=60)
        with self._ticks_lock:
            ticks, self.ticks = self.ticks, None
        if ticks is not None:
            self.controller.compute = compute_tick
            ticks.close()

    def run(self) -> None:
        ssl_files: dict[str, Any] = {}
        if self.tls_enabled:
            cert, key = self.serving_certificate()
            ssl_files = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        config = server_config(
            self.build_app(), self.options.host, self.options.port, lifespan="on", **ssl_files
        )
        self._server_config = config
        uvicorn.Server(config).run()

    def serving_certificate(self) -> tuple[Path, Path]:
        """The certificate chain and key the controller serves HTTPS with."""
        tls = self.options.tls
        if tls.cert is not None and tls.key is not None:
            return tls.cert, tls.key
        assert self.identity is not None
        return self.identity.ca.server_credentials(
            serving_names(self.options.host), now=self.identity.wall()
        )

    def _node_extras(self) -> dict[str, Any]:
        if self.identity is None:
            return {}
        return {"trust_bundle_digest": self.identity.trust_bundle_digest()}

    def _router_client(self, request: Any) -> tuple[str | None, str | None]:
        """(key id, refusal) for a /v1 request: who is asking, or why they may not."""
        if self.identity is None or not self.router_keys_required():
            return None, None
        if self._presents_operator(request):
            return OPERATOR_CLIENT, None  # the operator capability outranks a router key
        presented = presented_operator_capability(request.headers)
        check = self.identity.membership.check_router_key(presented)
        return check.key_id, (check.reason or None)

    def _presents_operator(self, request: Any) -> bool:
        """Whether a request carries the operator capability (never true without one)."""
        token = self.operator_token
        presented = presented_operator_capability(request.headers)
        return bool(token) and operator_capability_matches(presented, token)
