"""Run the controller: HTTP on uvicorn, the tick loop, the route prober and the watcher.

The tick loop runs in its own thread so planning never blocks request serving;
heartbeats, acknowledgements and demand only set a wake flag, which coalesces
bursts of events into one prompt pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from starlette.applications import Starlette

from gridctl.config.resolving import policy_from_document
from gridctl.controller.app import ControllerApp
from gridctl.controller.control import Controller
from gridctl.controller.desired import ApiDesired, DesiredProvider
from gridctl.controller.reading import SourceOptions, make_reader
from gridctl.controller.registry import Registry
from gridctl.controller.statusdoc import build_status
from gridctl.controller.stores import DEFAULT_LEASE_SECONDS
from gridctl.controller.stores.opening import open_lease, open_store

if TYPE_CHECKING:
    from gridctl.controller.stores.postgres import PostgresLocation
from gridctl.controller.watching import DesiredSource, watch_directory
from gridctl.credentials import (
    CredentialError,
    ensure_operator_capability,
    load_or_create_signing_key,
    verify_node_credential,
)
from gridctl.domain import DesiredState
from gridctl.metrics import ControllerMetrics
from gridctl.router.proxy import Router, RouterContext
from gridctl.router.telemetry import RequestObservation, TelemetryTap
from gridctl.router.unbound import UnboundDirectory

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServiceOptions:
    state_dir: Path | None
    watch_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 22100
    tick_interval: float = 2.0
    probe_interval: float = 2.0
    clock: Callable[[], float] = time.time
    upstream_transport: httpx.AsyncBaseTransport | None = None
    extra_warnings: list[str] = field(default_factory=list)
    source: SourceOptions = field(default_factory=SourceOptions)  # ref, remote, signatures
    store: PostgresLocation | None = None  # shared state for highly available controllers
    advertise_url: str | None = None  # where nodes reach this controller (default: listen)


class ControllerService:
    """Everything one `gridctl controller` process runs."""

    def __init__(self, options: ServiceOptions) -> None:
        if not is_loopback(options.host):
            raise ValueError(
                f"refusing to listen on {options.host}: credentials would cross plain HTTP off "
                "loopback; put gridctl behind a TLS terminator bound to loopback"
            )
        self.options = options
        clock = options.clock
        state_dir = options.state_dir
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            state_dir.chmod(0o700)
        self.operator_token = (
            ensure_operator_capability((state_dir or Path(".")) / "operator.token")
            if state_dir
            else ""
        )
        self._signing_key = load_or_create_signing_key(state_dir) if state_dir else None
        self.registry = Registry()
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
            address=options.advertise_url or f"http://{options.host}:{options.port}",
        )
        self.controller = Controller(
            desired=desired,
            registry=self.registry,
            store=self.store,
            clock=clock,
            lease=self.lease,
            warnings=list(options.extra_warnings),
        )
        self.tap = TelemetryTap()
        self.tap.add(self.controller.demand.observe)
        self.tap.add(self._demand_arrived)
        self.metrics = ControllerMetrics(self.controller, known_model=self._configured)
        self.tap.add(self.metrics.observe_request)
        self.controller.tick_observers.append(self.metrics.observe_tick)
        self._stop = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._renew_thread: threading.Thread | None = None

    def _api_desired(self, clock: Callable[[], float]) -> ApiDesired:
        """Profiles managed over the API, restored from the store after a restart."""
        documents: dict[str, dict[str, Any]] = {}
        policy = None
        restored = self.store.last_good_profiles()
        if restored is not None and isinstance(restored[1], dict):
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

        return ApiDesired(clock, documents=documents, policy=policy, on_change=save)

    def _demand_arrived(self, _observation: RequestObservation) -> None:
        self.controller.mark_dirty()

    def _desired_changed(self) -> None:
        self.controller.mark_dirty(safety=True)

    def verify_node(self, token: str, host_id: str) -> str:
        if self._signing_key is None:
            raise CredentialError("this controller has no state directory and no signing key")
        return verify_node_credential(
            token, self._signing_key, now=self.options.clock(), expected_host_id=host_id
        )

    def _configured(self, model: str) -> bool:
        current = self.controller.current_desired()
        return bool(current and current.profile(model))

    def _unavailable_reason(self, model: str) -> str:
        status = [m for m in self._model_rows() if m["model_id"] == model]
        if status:
            row = status[0]
            return f"{row['health']}: {row['reason']}"
        return "not configured"

    def _model_rows(self) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = build_status(self.controller)["models"]
        return rows

    # -- loops ---------------------------------------------------------------------

    def _tick_loop(self) -> None:
        while not self._stop.is_set():
            self.controller.wake.wait(self.options.tick_interval)
            self.controller.wake.clear()
            if self._stop.is_set():
                break
            self.controller.tick()

    def _renew_loop(self) -> None:
        """Renew the lease at a third of its length, whatever the tick is doing, so a
        renewal happens well before expiry and a follower notices a free lease soon."""
        assert self.lease is not None
        interval = max(0.05, self.lease.lease_seconds / 3)
        while not self._stop.wait(interval):
            try:
                was = self.controller.holds_authority()
                self.controller.renew_authority()
                if self.controller.holds_authority() != was:
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
        """Probe every advertised child engine once; a 200 from /health corroborates it."""
        for host_id, model_id, endpoint in self.registry.probe_targets():
            if not await self._answers(client, endpoint):
                continue
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
        while not self._stop.is_set():
            await self.probe_once(client)
            self.registry.refresh_external(self.options.clock())
            await asyncio.sleep(self.options.probe_interval)

    def build_app(self) -> Starlette:
        upstream = httpx.AsyncClient(
            transport=self.options.upstream_transport, timeout=httpx.Timeout(600.0, connect=5.0)
        )
        self.upstream = upstream
        router = Router(
            RouterContext(
                registry=self.registry,
                clock=self.options.clock,
                is_configured=self._configured,
                unavailable_reason=self._unavailable_reason,
                tap=self.tap,
                client=upstream,
            )
        )
        self.router = router
        router.unbound = UnboundDirectory(  # unbound requests follow the workload portfolio
            lambda: self.controller.last_portfolio,
            lambda: (self.controller.current_desired() or DesiredState("", False)).catalog,
            lambda model: bool(self.registry.routable(model, self.options.clock())),
        )
        # proxy measurements override self-reported speed in placement snapshots
        self.registry.measured = router.attribution.host_aggregates
        app = ControllerApp(
            self.controller,
            operator_token=self.operator_token,
            verify_node=self.verify_node,
            extra_routes=router.routes(),
            metrics=self.metrics.render,
        ).build()

        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self._stop.clear()
            self._tick_thread = threading.Thread(
                target=self._tick_loop, name="gridctl-tick", daemon=True
            )
            self._tick_thread.start()
            self._start_renewing()
            stop_watch = asyncio.Event()
            tasks = [asyncio.create_task(self._probe_loop(upstream))]
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
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await upstream.aclose()

        app.router.lifespan_context = lifespan
        return app

    def run(self) -> None:
        config = uvicorn.Config(
            self.build_app(),
            host=self.options.host,
            port=self.options.port,
            log_level="warning",
            lifespan="on",
        )
        uvicorn.Server(config).run()
