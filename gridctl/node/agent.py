"""The agent loop: register, heartbeat, take commands, acknowledge them.

Protocol (one cycle every ``heartbeat_seconds``, sooner after an action ends):

1. ``PUT /nodes/{host_id}`` — registration, on start and whenever the
   controller no longer knows the host;
2. ``POST /nodes/{host_id}/heartbeat`` with ``request_commands: false`` — the
   lease heartbeat: load and every unacknowledged receipt; it returns at once;
3. the same with ``request_commands: true`` — the control heartbeat, sent only
   while the executor is idle; its commands go through intake and the executor.

Either heartbeat carries the full inventory (residencies, resources, host state,
artifacts) only when it changed since the last one the controller took, every few
minutes, or when the controller asked for it; otherwise it is a lease renewal naming
that inventory's digest (``gridctl.node.inventory``).

With several controllers (``controller_url`` as a comma-separated list) the
control heartbeat goes where authority is and lease heartbeats go to all of
them (``gridctl.node.controllers``).

Every request carries the host-scoped credential in ``X-Grid-Allocator-Node-Token``;
the loop refuses to send it over plain HTTP to anything but loopback. A receipt
is marked acknowledged only after a 2xx response, so an ack lost in transit is
sent again (duplicates are harmless to the controller). A lease heartbeat whose
connection is closed or reset under it is sent once more at once (it is
idempotent); a control heartbeat never is, as the controller may have delivered
commands to it.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import secrets
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

from gridctl.credentials import NODE_TOKEN_HEADER
from gridctl.domain.states import HostState
from gridctl.errors import PermanentError, TransientError
from gridctl.logs import command_fields
from gridctl.node import overrides, reports
from gridctl.node.actuator import HostActuator
from gridctl.node.controllers import ControllerSet
from gridctl.node.executor import CommandExecutor
from gridctl.node.intake import CommandIntake
from gridctl.node.inventory import FULL_REFRESH_SECONDS, Inventory, InventoryTracker
from gridctl.node.joining import NodeIdentity
from gridctl.node.protecting import ProtectionLoop
from gridctl.node.protection import multiplier
from gridctl.node.records import ResidencyRecord
from gridctl.node.reports import HostFacts, ResourceSample
from gridctl.node.sampling import sample_resources
from gridctl.node.stoprequest import Stoppable
from gridctl.transport import InsecureTransport, require_safe_url

log = logging.getLogger("gridctl.node")

AGENT_STATUS_META = "agent_status"
MIRROR_TIMEOUT_SECONDS = 5.0  # a controller that does not answer must not stall the cycle
# what a connection closed or reset under a request looks like (no timeouts: a slow
# controller is not asked twice)
CONNECTION_RESETS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def require_safe_controller_url(url: str) -> None:
    """Refuse to send a credential over plain HTTP to anything but loopback."""
    try:
        require_safe_url(url, "node credentials")
    except InsecureTransport as exc:
        raise PermanentError(str(exc)) from None


RETRY_SECONDS = 2.0  # after a refusal that names no time to come back
RETRY_BOUNDS = (0.5, 60.0)  # what the agent takes of a time the controller names


def come_back_in(response: httpx.Response) -> float:
    """How long to wait before asking again after ``response`` refused: the
    controller's ``retry_after_seconds`` (a controller behind a large fleet spreads the
    hosts it defers, ``gridctl.controller.admission``), else its ``Retry-After``
    header in seconds, within ``RETRY_BOUNDS``; else ``RETRY_SECONDS``."""
    named: object = None
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        named = answer["error"].get("retry_after_seconds")
    if not isinstance(named, int | float) or isinstance(named, bool):
        try:
            named = float(response.headers.get("retry-after", ""))
        except ValueError:
            return RETRY_SECONDS
    value = float(named)
    if math.isnan(value):
        return RETRY_SECONDS
    low, high = RETRY_BOUNDS
    return min(max(value, low), high)


def _asks_full(response: httpx.Response) -> bool:
    try:
        answer = response.json()
    except ValueError:
        return False
    return isinstance(answer, dict) and answer.get("send_full_inventory") is True


class NodeAgent:
    """Talks to the controller on behalf of one host."""

    def __init__(
        self,
        *,
        facts: HostFacts,
        actuator: HostActuator,
        executor: CommandExecutor,
        intake: CommandIntake,
        controller_url: str,
        token: Callable[[], str],
        engine_api_key: str,
        heartbeat_seconds: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        request_timeout: float = 30.0,
        sample: Callable[[list[ResidencyRecord]], ResourceSample] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        instance_id: str = "",
        protection: ProtectionLoop | None = None,
        identity: NodeIdentity | None = None,
        verify: ssl.SSLContext | bool = True,
        inventory_refresh_seconds: float = FULL_REFRESH_SECONDS,
    ) -> None:
        self.controllers = ControllerSet(controller_url, validate=require_safe_controller_url)
        self.identity = identity  # a joined node renews its credential and certificate
        self._transport, self._timeout = transport, request_timeout
        self.protection = protection  # the local protection loop; None = always accepting
        self.facts, self.actuator, self.executor, self.intake = facts, actuator, executor, intake
        # called once per cycle on this thread (a split stage host's lease expiry)
        self.housekeeping: list[Callable[[], object]] = []
        self.store = actuator.store
        self._token = token
        self._engine_api_key = engine_api_key
        self.heartbeat_seconds = heartbeat_seconds
        self.clock, self.monotonic = clock, monotonic
        self._sample = sample or (
            lambda records: sample_resources(actuator.cache.root, records, self._stage_pids())
        )
        plain = not any(url.lower().startswith("https:") for url in self.controllers.urls)
        if verify is True and plain:
            # plain HTTP (to loopback only: ``require_safe_controller_url``) makes no TLS
            # handshake, so the system CA store need not be read (~40 ms of a node's start)
            verify = False
        self._client = httpx.Client(timeout=request_timeout, transport=transport, verify=verify)
        self.registered = False
        self.stopping = False
        # every report carries this run's boot id and a sequence that only grows, so
        # the controller refuses a replayed or overtaken one (``controller.hostclaims``)
        self.boot_id = secrets.token_hex(8)
        self._sequence = itertools.count(1)
        self.artifact_mirror: str | None = None  # base URL of this node's peer mirror
        # what the authoritative controller holds of the inventory: leases name it
        self.inventory = InventoryTracker(inventory_refresh_seconds)
        self.status: dict[str, Any] = {
            "instance_id": instance_id,
            "controller": self.base_url,
            "registered": False,
            "heartbeats": 0,
            "commands_admitted": 0,
            "last_heartbeat_at": None,
            "last_error": None,
        }

    @property
    def base_url(self) -> str:
        """The controller this node believes holds authority."""
        return self.controllers.current

    def close(self) -> None:
        self._client.close()

    def _stage_pids(self) -> list[int]:
        """The stage servers this node runs for splits: managed memory, not external."""
        stages = self.executor.stages
        return [] if stages is None else [r.server.pid for r in stages.running().values()]

    # --- host state and reports -------------------------------------------------------

    def host_state(self) -> HostState:
        if self.stopping:
            return HostState.DRAINING
        now = self.clock()
        current = self.store.override()
        if current is not None and overrides.in_force(current, now) is None:
            self.store.set_override(None)  # expired: clear it durably
            current = None
        protected = self.protection.current().state if self.protection else HostState.ACCEPTING
        return overrides.host_state(current, now, protected)

    def _protection_report(self) -> dict[str, object] | None:
        if self.protection is None:
            return None
        decision = self.protection.current()
        report = decision.describe()
        report["concurrency_multiplier"] = multiplier(self.host_state(), self.protection.policy)
        return report

    def _endpoint_of(self, record: ResidencyRecord) -> str | None:
        if record.port is None or not self.actuator.healthy_now(record):
            return None
        return self.actuator.runtime.endpoint(record.port)

    def _report_parts(self) -> tuple[ResourceSample, dict[str, object], list[ResidencyRecord]]:
        records = self.store.residencies()
        envelope = reports.allocator_envelope(
            self.host_state(),
            records,
            self.store.cached_artifacts(),
            self.clock(),
            endpoint_of=self._endpoint_of,
            engine_api_key=self._engine_api_key,
            max_concurrency=self.actuator.runtime.settings.parallel,
            protection=self._protection_report(),
            transfers=self.actuator.cache.transfers(),
            artifact_mirror=self.artifact_mirror,
            artifact_bytes_fetched=self.actuator.cache.bytes_fetched,
            shares_engine=self.actuator.shares_engine,
            stage_host=self.executor.stages is not None,
            split_stages=() if self.executor.stages is None else self.executor.stages.observed(),
        )
        queued = dict(self.actuator.queued)
        rows = envelope.get("residencies")
        for row in rows if isinstance(rows, list) else []:
            waiting = queued.get(str(row["model_id"]), 0)
            if waiting:
                row["queued_requests"] = waiting
        return self._sample(records), envelope, records

    def _inventory(self, sample: ResourceSample, envelope: dict[str, object]) -> Inventory:
        return Inventory.of(reports.resources(self.facts, sample), envelope, self.clock())

    # --- HTTP -------------------------------------------------------------------------

    def _send(
        self, method: str, path: str, body: dict[str, object], *, to: str | None = None
    ) -> httpx.Response:
        short = self.controllers.several and not body.get("request_commands")
        # a lease heartbeat is idempotent (receipts may arrive twice): when a reused
        # keep-alive connection turns out closed under it, it is sent once more at once
        tries = 2 if path.endswith("/heartbeat") and body.get("request_commands") is False else 1
        for attempt in range(1, tries + 1):
            # a fresh sequence per attempt: a resend is a new report, never a replay
            stamped = {**body, "boot_id": self.boot_id, "sequence": next(self._sequence)}
            try:
                return self._client.request(
                    method,
                    f"{to or self.base_url}{path}",
                    json=stamped,
                    headers={NODE_TOKEN_HEADER: self._token()},
                    timeout=MIRROR_TIMEOUT_SECONDS if short else httpx.USE_CLIENT_DEFAULT,
                )
            except CONNECTION_RESETS as exc:
                if attempt < tries:
                    log.info("controller closed the connection (%s); sending again", exc)
                    continue
                raise TransientError(f"controller unreachable: {type(exc).__name__}", 2.0) from exc
            except httpx.HTTPError as exc:
                raise TransientError(f"controller unreachable: {type(exc).__name__}", 2.0) from exc
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @staticmethod
    def _refused(response: httpx.Response) -> str:
        try:
            detail = json.dumps(response.json())[:300]
        except ValueError:
            detail = response.text[:300]
        return f"HTTP {response.status_code}: {detail}"

    def _registration(self) -> tuple[dict[str, object], Inventory]:
        sample, envelope, records = self._report_parts()
        inventory = self._inventory(sample, envelope)
        models = reports.ready_models(records)
        body = reports.registration(
            self.facts, sample, envelope, models, inventory_digest=inventory.digest
        )
        return body, inventory

    def register(self) -> None:
        body, inventory = self._registration()
        response = self._send("PUT", f"/nodes/{self.facts.host_id}", body)
        if response.status_code in (401, 403):
            raise PermanentError(f"registration refused: {self._refused(response)}")
        if not response.is_success:
            raise TransientError(
                f"registration failed: {self._refused(response)}", come_back_in(response)
            )
        self.inventory.taken(inventory, self.monotonic())
        self.registered = True
        self.status["registered"] = True
        self.status["registered_at"] = self.clock()

    def heartbeat(self, *, request_commands: bool) -> dict[str, Any]:
        sample, envelope, _records = self._report_parts()
        inventory = self._inventory(sample, envelope)
        pending = self.store.receipts(unacked_only=True, limit=1024)
        load = {
            "active_tasks": 0 if self.executor.idle else 1,
            "queue_depth": sum(self.actuator.queued.values()),  # llama-server's deferred
        }
        full = reports.heartbeat(
            self.facts,
            sample,
            envelope,
            receipts=pending,
            request_commands=request_commands,
            inventory_digest=inventory.digest,
            **load,
        )
        held, body = self.inventory.digest, full
        if held is not None and not self.inventory.full_due(inventory, self.monotonic()):
            body = reports.lease(
                self.facts.host_id,
                held,
                receipts=pending,
                request_commands=request_commands,
                **load,
            )
        sends_full = body is full
        sent = self.monotonic()
        response = self._send("POST", f"/nodes/{self.facts.host_id}/heartbeat", body)
        duration = self.monotonic() - sent
        if response.status_code in (401, 403):
            raise PermanentError(f"heartbeat refused: {self._refused(response)}")
        if response.status_code in (404, 409) or (
            response.status_code == 400 and "not registered" in response.text
        ):
            self.registered = False
            raise TransientError(f"controller forgot this host: {self._refused(response)}", 0.1)
        if not response.is_success:
            raise TransientError(f"heartbeat failed: {self._refused(response)}", 2.0)
        self.store.mark_acked(
            [r.action_id for r in pending], {r.action_id: r.status for r in pending}
        )
        for receipt in pending:
            log.info(  # worded unlike the finishing line: one action finishes once
                "receipt acknowledged: %s %s, action %s: %s",
                receipt.kind,
                receipt.status,
                receipt.action_id,
                receipt.message,
                extra=command_fields(
                    {**receipt.command, "action_id": receipt.action_id}, "acknowledged"
                ),
            )
        self.status["heartbeats"] += 1
        self.status["last_heartbeat_at"] = self.clock()
        counter = "full_inventories" if sends_full else "lease_renewals"
        self.status[counter] = int(self.status.get(counter, 0)) + 1
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        answer = answer if isinstance(answer, dict) else {}
        if sends_full:
            self.inventory.taken(inventory, sent)
        if answer.get("send_full_inventory") is True:
            self.inventory.forget()  # the next heartbeat carries it
        allocator = answer.get("allocator")
        if isinstance(allocator, dict) and self.controllers.follow(allocator.get("leader_url")):
            self.registered = False  # authority is elsewhere: register there next
            self.status["controller"] = self.base_url
            return answer
        self._absorb(answer, request_commands=request_commands, duration=duration)
        if not request_commands and self.controllers.several:
            self._mirror({**body, "acknowledgements": []}, {**full, "acknowledgements": []})
        self._maybe_renew(answer)
        return answer

    def _mirror(self, body: dict[str, object], full: dict[str, object]) -> None:
        """Feed the other controllers' registries (receipts stay with authority): the
        heartbeat authority took, or the full one to a controller that asks for it."""
        for url in self.controllers.others():
            try:
                if url not in self.controllers.mirrored:
                    reg, _inventory = self._registration()
                    if self._send("PUT", f"/nodes/{self.facts.host_id}", reg, to=url).is_success:
                        self.controllers.mirrored.add(url)
                path = f"/nodes/{self.facts.host_id}/heartbeat"
                response = self._send("POST", path, body, to=url)
                if response.is_success and body is not full and _asks_full(response):
                    response = self._send("POST", path, full, to=url)
                if not response.is_success:
                    self.controllers.mirrored.discard(url)
            except TransientError as exc:
                self.controllers.mirrored.discard(url)
                log.debug("controller %s: %s", url, exc)

    def _maybe_renew(self, answer: dict[str, Any]) -> None:
        """Renew the credential well before expiry, or at once after a CA rotation."""
        if self.identity is None:
            return
        digest = answer.get("trust_bundle_digest")
        if not self.identity.needs_renewal(
            now=self.clock(), bundle_digest=digest if isinstance(digest, str) else None
        ):
            return
        try:
            self.identity.renew(self._client, self.base_url)
        except (TransientError, PermanentError) as exc:
            self.status["last_renewal_error"] = str(exc)
            log.warning("credential renewal: %s", exc)
            return
        self.status["renewed_at"] = self.clock()
        self.status["renewals"] = int(self.status.get("renewals", 0)) + 1
        log.info("renewed the node credential and engine certificate")
        self._client.close()
        self._client = httpx.Client(
            timeout=self._timeout, transport=self._transport, verify=self.identity.trust_context()
        )

    def _absorb(self, answer: dict[str, Any], *, request_commands: bool, duration: float) -> None:
        marks = answer.get("model_last_used_at")
        if isinstance(marks, dict):
            clean = {
                str(k): float(v)
                for k, v in marks.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
            if clean:
                self.store.raise_last_used_watermarks(clean)
        if not request_commands:
            return  # a lease heartbeat never consumes commands
        allocator = answer.get("allocator")
        if not isinstance(allocator, dict):
            return
        ttl = allocator.get("controller_lease_ttl_seconds")
        remaining = (
            float(ttl) if isinstance(ttl, int | float) and not isinstance(ttl, bool) else None
        )
        commands = allocator.get("commands")
        for command in commands if isinstance(commands, list) else []:
            if not isinstance(command, dict):
                continue
            admitted = self.intake.admit(
                command, remaining_ttl=remaining, request_duration=duration
            )
            if admitted is not None:
                self.status["commands_admitted"] += 1
                self.executor.submit(admitted)

    # --- the loop ---------------------------------------------------------------------

    def cycle(self) -> None:
        """One round: health probes, registration if needed, lease then control heartbeat."""
        self.actuator.refresh()
        try:
            if not self.registered:
                self.register()
            self.heartbeat(request_commands=False)
        except TransientError:
            if self.controllers.several:
                self.controllers.fail_over()
                self.registered = False
                self.status["controller"] = self.base_url
            raise
        if not self.registered:
            return  # authority moved during this round: the next round goes there
        if self.executor.idle and not self.stopping:
            self.heartbeat(request_commands=True)

    def run(self, stop: Stoppable) -> None:
        """Cycle until ``stop`` is set; errors are logged and retried with backoff."""
        backoff = 0.0
        while not stop.is_set():
            try:
                self.cycle()
                self.status["last_error"] = None
                backoff = 0.0
                wait = self.heartbeat_seconds
            except TransientError as exc:
                self.status["last_error"] = str(exc)
                log.warning("%s", exc)
                backoff = min(max(exc.retry_after, backoff * 2 or 0.5), 30.0)
                wait = backoff
            except PermanentError as exc:
                self.status["last_error"] = str(exc)
                log.error("%s", exc)
                wait = 30.0
            for chore in self.housekeeping:
                try:
                    chore()
                except Exception:  # a chore never stops the heartbeats
                    log.exception("housekeeping failed")
            self._publish_status()
            self._wait(stop, wait)

    def _wait(self, stop: Stoppable, seconds: float) -> None:
        """Sleep until the next cycle, waking early when an action finishes or on stop."""
        deadline = self.monotonic() + seconds
        was_idle = self.executor.idle
        while not stop.is_set() and self.monotonic() < deadline:
            if self.executor.idle != was_idle or self.executor.changed.is_set():
                self.executor.changed.clear()
                return
            stop.wait(0.05)

    def _publish_status(self) -> None:
        self.status["running_action"] = self.executor.running_action
        self.status["updated_at"] = self.clock()
        self.store.set_meta(AGENT_STATUS_META, json.dumps(self.status, sort_keys=True))

    def final_heartbeat(self) -> None:
        """Tell the controller what stopping left behind (best effort)."""
        try:
            self.heartbeat(request_commands=False)
        except (TransientError, PermanentError) as exc:
            log.warning("final heartbeat: %s", exc)
        self.status["registered"] = False
        self._publish_status()
