"""The real controller, served on loopback, for node tests.

``ControllerHarness`` runs the controller service itself (``ControllerService``: its
credentials and signing key, schema validation, registry, durable store, authority
lease, tick loop and HTTP routes) under uvicorn in a thread. A thin ASGI layer in front
of it keeps what the node sent and the controller accepted (registrations, heartbeats,
acknowledgements, refusals), and appends the commands a test queued to the answers of
control heartbeats. The controller runs in ``observe`` mode, so its own planner
delivers nothing: which commands a node receives is the test's choice, and every
command carries the real controller's fence (term, controller id, lease expiry, plan
generation) unless the test overrides a field on purpose.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.credentials import issue_node_credential, load_or_create_signing_key
from gridctl.domain import Action, ActionKind
from gridctl.reconcile.wire import command_to_json

ASGIApp = Callable[..., Any]

OBSERVE_POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: node-tests}\n"
    "spec:\n  mode: observe\n"
)
REGISTER = re.compile(r"^/nodes/([^/]+)$")
HEARTBEAT = re.compile(r"^/nodes/([^/]+)/heartbeat$")
TERMINAL = ("succeeded", "failed", "rejected", "cancelled")
# A plan generation (epoch:sequence:digest) for commands built without a controller.
GENERATION = "ab12:00000000000000000007:cd34"


def wire_command(
    kind: str,
    model_id: str,
    host_id: str,
    action_id: str,
    *,
    plan_generation: str = GENERATION,
    controller_term: int = 3,
    controller_id: str | None = "ctl-test",
    controller_lease_expires_at: float | None = None,
    created_at: float = 0.0,
    **extra: Any,
) -> dict[str, Any]:
    """A wire command as the controller serialises it (``command_to_json``), with
    ``extra`` fields (artifact source, dependencies, executable...) applied on top."""
    action = Action(
        action_id=action_id,
        kind=ActionKind(kind),
        host_id=host_id,
        model_id=model_id,
        memory_mb=640,
        artifact_sha256=extra.pop("artifact_sha256", None),
        depends_on=tuple(extra.pop("dependencies", ())),
        executable=extra.pop("executable", True),
        reason="test",
        created_at=created_at,
    )
    body = command_to_json(
        action,
        plan_generation=plan_generation,
        controller_term=controller_term,
        controller_id=controller_id,
        controller_lease_expires_at=controller_lease_expires_at,
    )
    body.update(extra)
    return body


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ControllerHarness:
    """The real controller on 127.0.0.1; see the module docstring."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        watch = state_dir.parent / f"{state_dir.name}-policies"
        watch.mkdir(parents=True, exist_ok=True)
        (watch / "policy.yaml").write_text(OBSERVE_POLICY)
        self.options = ServiceOptions(
            state_dir=state_dir, watch_dir=watch, port=free_port(), tick_interval=0.5
        )
        self.registrations: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        # every accepted report carrying the full inventory (registrations included)
        self.inventories: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []
        self.delivered: list[dict[str, Any]] = []
        self.refused: list[int] = []
        self._queued: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.service: ControllerService | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.options.port}"

    def token(self, host_id: str) -> str:
        """A node credential for ``host_id`` signed with this controller's key."""
        key = load_or_create_signing_key(self.state_dir)
        return issue_node_credential(key, host_id, now=time.time())

    def start(self) -> None:
        self.service = ControllerService(self.options)
        inner = self.service.build_app()
        config = uvicorn.Config(
            self._front(inner),
            host="127.0.0.1",
            port=self.options.port,
            log_level="warning",
            lifespan="on",
            timeout_keep_alive=30,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self._server is not None and self._server.started, 30, "controller")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        if self.service is not None:
            self.service.store.close()
        self._server = self._thread = self.service = None

    def restart(self) -> None:
        """Stop the controller and start it again on the same state directory and port:
        its registry (which lives in memory) no longer knows any host."""
        self.stop()
        self.start()

    # -- what the test controls ----------------------------------------------------

    def authority(self) -> dict[str, Any]:
        """The fence fields the real controller puts on the commands it delivers."""
        assert self.service is not None
        ctl = self.service.controller
        wait_until(ctl.steering.holds_authority, 30, "controller authority")
        wait_until(lambda: ctl.view.generation is not None, 30, "a first tick")
        return {
            "plan_generation": str(ctl.view.generation),
            "controller_term": ctl.authority.term,
            "controller_id": ctl.authority.controller_id,
            "controller_lease_expires_at": ctl.authority.lease_expires_at,
        }

    def command(
        self, kind: str, model_id: str, host_id: str, action_id: str, **extra: Any
    ) -> dict[str, Any]:
        """A wire command fenced by this controller (``extra`` may override any field)."""
        fence = {**self.authority(), "created_at": time.time()}
        fence.update({k: extra.pop(k) for k in list(extra) if k in fence})
        return wire_command(kind, model_id, host_id, action_id, **fence, **extra)

    def enqueue(self, *commands: dict[str, Any]) -> None:
        with self.lock:
            self._queued.extend(commands)

    # -- what the node sent ----------------------------------------------------------

    def last_inventory(self) -> dict[str, Any] | None:
        """The latest accepted report with the full inventory (a lease renewal repeats
        it by digest), or None before the first heartbeat."""
        with self.lock:
            return self.inventories[-1] if self.heartbeats and self.inventories else None

    def last_state(self) -> str | None:
        """The host state of the latest accepted heartbeat, or None before the first."""
        inventory = self.last_inventory()
        return inventory["allocator"]["state"] if inventory else None

    def ack_for(self, action_id: str, status: str | None = None) -> dict[str, Any] | None:
        with self.lock:
            for ack in reversed(self.acks):
                if ack["action_id"] == action_id and (status is None or ack["status"] == status):
                    return ack
        return None

    def terminal_ack(self, action_id: str) -> dict[str, Any] | None:
        with self.lock:
            for ack in reversed(self.acks):
                if ack["action_id"] == action_id and ack["status"] in TERMINAL:
                    return ack
        return None

    def last_residency(self, model_id: str) -> dict[str, Any] | None:
        inventory = self.last_inventory()
        if inventory is None:
            return None
        rows = inventory["allocator"]["residencies"]
        return next((r for r in rows if r["model_id"] == model_id), None)

    # -- the layer in front of the real app ------------------------------------------

    def _front(self, inner: ASGIApp) -> ASGIApp:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            path, method = scope["path"], scope["method"]
            register = REGISTER.match(path) if method == "PUT" else None
            beat = HEARTBEAT.match(path) if method == "POST" else None
            if register is None and beat is None:
                await inner(scope, receive, send)
                return
            host_id = (register or beat).group(1)  # type: ignore[union-attr]
            received: list[bytes] = []
            start: dict[str, Any] = {}
            body: list[bytes] = []

            async def tee() -> dict[str, Any]:
                message: dict[str, Any] = await receive()
                if message["type"] == "http.request":
                    received.append(message.get("body", b""))
                return message

            async def hold(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    start.update(message)
                elif message["type"] == "http.response.body":
                    body.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        answer = self._observe(
                            host_id, beat is not None, b"".join(received), start, b"".join(body)
                        )
                        await send(start)
                        await send({"type": "http.response.body", "body": answer})
                else:
                    await send(message)

            await inner(scope, tee, hold)

        return app

    def _observe(
        self, host_id: str, heartbeat: bool, request: bytes, start: dict[str, Any], body: bytes
    ) -> bytes:
        status = int(start["status"])
        if status in (401, 403):
            with self.lock:
                self.refused.append(status)
        if status != 200:
            return body
        sent = json.loads(request)
        with self.lock:
            if "allocator" in sent:
                self.inventories.append(sent)
            if not heartbeat:
                self.registrations.append(sent)
                return body
            self.heartbeats.append(sent)
            self.acks.extend(sent.get("acknowledgements", []))
            if not sent.get("request_commands", True):
                return body
            mine = [c for c in self._queued if c["node_id"] == host_id]
            if not mine:
                return body
            self._queued = [c for c in self._queued if c["node_id"] != host_id]
            self.delivered.extend(mine)
        answer = json.loads(body)
        answer["allocator"]["commands"].extend(mine)
        errors = list(validator("wire/heartbeat-response.schema.json").iter_errors(answer))
        assert not errors, errors[0].message
        encoded = json.dumps(answer).encode()
        start["headers"] = [
            (k, str(len(encoded)).encode() if k.lower() == b"content-length" else v)
            for k, v in start.get("headers", [])
        ]
        return encoded


@contextmanager
def running_controller(state_dir: Path) -> Iterator[ControllerHarness]:
    harness = ControllerHarness(state_dir)
    harness.start()
    try:
        yield harness
    finally:
        harness.stop()


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.05)
