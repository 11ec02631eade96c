"""A tiny controller test double that speaks the wire schemas (Starlette on uvicorn).

It checks node credentials exactly as the real controller will (401/403), validates
every registration and heartbeat against ``schemas/wire``, records them, and hands
queued commands out only on control heartbeats (``request_commands: true``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gridctl.config.schemas import validator
from gridctl.credentials import NODE_TOKEN_HEADER, CredentialError, verify_node_credential

GENERATION = "ab12:00000000000000000007:cd34"


def command(kind: str, model_id: str, host_id: str, action_id: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "action_id": action_id,
        "kind": kind,
        "node_id": host_id,
        "model_id": model_id,
        "memory_mb": 640,
        "plan_generation": GENERATION,
        "controller_term": 3,
        "controller_id": "ctl-test",
        "controller_lease_expires_at": time.time() + 60,
        "dependencies": [],
        "executable": True,
        "reason": "test",
        "created_at": time.time(),
    }
    body.update(extra)
    return body


@dataclass
class FakeController:
    key: Ed25519PrivateKey
    registrations: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    queued: list[dict[str, Any]] = field(default_factory=list)
    delivered: list[dict[str, Any]] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    lease_ttl: float = 55.0
    forget_next: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def last_state(self) -> str | None:
        """The host state of the latest heartbeat, or None before the first one."""
        beats = list(self.heartbeats)
        return beats[-1]["allocator"]["state"] if beats else None

    def _auth(self, request: Request, host_id: str) -> JSONResponse | None:
        token = request.headers.get(NODE_TOKEN_HEADER)
        if not token:
            self.refused.append(401)
            return JSONResponse({"error": "node credential required"}, 401)
        try:
            verify_node_credential(token, self.key, now=time.time(), expected_host_id=host_id)
        except CredentialError as exc:
            self.refused.append(exc.http_status)
            return JSONResponse({"error": "credential rejected"}, exc.http_status)
        return None

    @staticmethod
    def _invalid(schema: str, body: Any) -> JSONResponse | None:
        for error in validator(schema).iter_errors(body):
            return JSONResponse({"error": error.message[:200]}, 400)
        return None

    async def register(self, request: Request) -> JSONResponse:
        host_id = request.path_params["host_id"]
        denied = self._auth(request, host_id)
        if denied:
            return denied
        body = await request.json()
        bad = self._invalid("wire/registration.schema.json", body)
        if bad:
            return bad
        with self.lock:
            self.registrations.append(body)
        return JSONResponse({"ok": True})

    async def heartbeat(self, request: Request) -> JSONResponse:
        host_id = request.path_params["host_id"]
        denied = self._auth(request, host_id)
        if denied:
            return denied
        body = await request.json()
        bad = self._invalid("wire/heartbeat.schema.json", body)
        if bad:
            return bad
        with self.lock:
            if self.forget_next:
                self.forget_next = False
                return JSONResponse({"error": "host is not registered"}, 404)
            self.heartbeats.append(body)
            self.acks.extend(body.get("acknowledgements", []))
            commands: list[dict[str, Any]] = []
            if body.get("request_commands", True):
                commands = [c for c in self.queued if c["node_id"] == host_id]
                self.queued = [c for c in self.queued if c["node_id"] != host_id]
                self.delivered.extend(commands)
        answer = {
            "ttl_seconds": 60,
            "model_last_used_at": {"gemma-3-270m": 1234.0},
            "allocator": {
                "mode": "automatic",
                "controller_lease_ttl_seconds": self.lease_ttl,
                "commands": commands,
            },
        }
        assert not list(validator("wire/heartbeat-response.schema.json").iter_errors(answer))
        return JSONResponse(answer)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/nodes/{host_id}", self.register, methods=["PUT"]),
                Route("/nodes/{host_id}/heartbeat", self.heartbeat, methods=["POST"]),
            ]
        )

    def enqueue(self, *commands: dict[str, Any]) -> None:
        with self.lock:
            self.queued.extend(commands)

    def ack_for(self, action_id: str, status: str | None = None) -> dict[str, Any] | None:
        with self.lock:
            for ack in reversed(self.acks):
                if ack["action_id"] == action_id and (status is None or ack["status"] == status):
                    return ack
        return None

    def terminal_ack(self, action_id: str) -> dict[str, Any] | None:
        with self.lock:
            for ack in reversed(self.acks):
                if ack["action_id"] == action_id and ack["status"] in (
                    "succeeded",
                    "failed",
                    "rejected",
                    "cancelled",
                ):
                    return ack
        return None

    def last_residency(self, model_id: str) -> dict[str, Any] | None:
        with self.lock:
            if not self.heartbeats:
                return None
            rows = self.heartbeats[-1]["allocator"]["residencies"]
        return next((r for r in rows if r["model_id"] == model_id), None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(fake: FakeController) -> Iterator[str]:
    """Run the fake on 127.0.0.1 in a thread; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "fake controller did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.05)
