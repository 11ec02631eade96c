"""A simulated node agent that speaks the real wire protocol to an in-process controller.

It executes commands instantly (load -> cached, warm -> ready with an endpoint,
drain -> draining, unload -> gone) and acknowledges them on the next heartbeat.
Split commands (``split_claim``, ``split_release``) are answered by the node's own
``run_split_command`` over ``stages`` (a real ``StageHost``, or ``None``: the node's
``no_stage_host`` refusal); ``stage_verbs`` makes the node advertise them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from gridctl.credentials import issue_node_credential, load_or_create_signing_key
from gridctl.node.stagecommands import SPLIT_KINDS, run_split_command

if TYPE_CHECKING:
    from gridctl.controller.serving import ControllerService

GEMMA_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


class Clock:
    """A controllable clock for the controller under test."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# one Gemma replica in automatic mode: the watched files most in-process fleets start from
ONE_GEMMA = {
    "gemma.yaml": (
        "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {name: gemma}\nspec:\n"
        f"  memory_mb: 640\n  artifact: {{sha256: {GEMMA_SHA}}}\n  min_replicas: 1\n"
        "  max_replicas: 1\n  min_residency_seconds: 0\n  scale_down_cooldown_seconds: 0\n"
    ),
    "policy.yaml": (
        "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
        "spec: {mode: automatic}\n"
    ),
}

FAILING_PROMPT = "engine, fail this request"


# what the keyless vendor engines (``https://*.vendor.test``) list in their /v1/models
VENDOR_MODELS = ("vendor-model", "vendor-x")


def vendor_engine(request: httpx.Request) -> httpx.Response:
    """An external OpenAI-compatible engine: lists ``VENDOR_MODELS`` and answers any of them."""
    if request.url.path.endswith("/v1/models"):
        return httpx.Response(200, json={"data": [{"id": m} for m in VENDOR_MODELS]})
    body = json.loads(request.content)
    if body.get("model") not in VENDOR_MODELS:
        return httpx.Response(404, json={"error": {"message": "no such model"}})
    return httpx.Response(
        200,
        json={
            "id": "v",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"completion_tokens": 1},
        },
    )


def engine_handler(request: httpx.Request) -> httpx.Response:
    """A child engine behind ``httpx.MockTransport``: healthy, and answering only with its key
    (a 503 for a chat that contains ``FAILING_PROMPT``: the engine itself failing, which
    its breaker counts without asking its health). Hosts under ``vendor.test`` are
    external engines instead (``vendor_engine``)."""
    if request.url.host.endswith(".vendor.test"):
        return vendor_engine(request)
    if request.url.path.endswith("/health"):
        return httpx.Response(200, json={"status": "ok"})
    if request.headers.get("authorization", "").startswith("Bearer engine-key-"):
        body = json.loads(request.content)
        if FAILING_PROMPT in json.dumps(body.get("messages", [])):
            return httpx.Response(503, json={"error": "engine failure"})  # a real 5xx path
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                "usage": {"completion_tokens": 1},
            },
        )
    return httpx.Response(401, json={"error": "no key"})


def watched_dir(tmp_path: Path, files: Mapping[str, str]) -> Path:
    """A watched directory ``tmp_path/policies`` holding ``files`` (file name -> YAML)."""
    watch = tmp_path / "policies"
    watch.mkdir()
    for name, text in files.items():
        (watch / name).write_text(text)
    return watch


def sim_service(
    tmp_path: Path,
    files: Mapping[str, str] | None = None,
    *,
    clock: Clock | None = None,
    engine: Callable[[httpx.Request], Any] = engine_handler,
    **options: Any,
) -> tuple[ControllerService, Clock]:
    """The real controller service, state in ``tmp_path/state``, on a clock the test moves,
    its engines behind ``httpx.MockTransport(engine)``; ``files`` are written to the watched
    directory (``watched_dir``) unless ``options`` name a ``watch_dir`` of their own."""
    from gridctl.controller.serving import ControllerService, ServiceOptions

    clock = Clock() if clock is None else clock
    if files is not None:
        options.setdefault("watch_dir", watched_dir(tmp_path, files))
    service = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            clock=clock,
            upstream_transport=httpx.MockTransport(engine),
            **options,
        )
    )
    return service, clock


@dataclass
class SimResidency:
    model_id: str
    memory_mb: int
    state: str
    sha: str | None
    loaded_at: float


@dataclass
class SimNode:
    host_id: str
    client: httpx.AsyncClient
    token: str
    clock: Any
    capacity_mb: int = 2048
    failure_domain: str = "zone-a"
    cached: dict[str, str | None] = field(default_factory=dict)
    residencies: dict[str, SimResidency] = field(default_factory=dict)
    acks: list[dict[str, Any]] = field(default_factory=list)
    state: str = "accepting"
    executed: list[dict[str, Any]] = field(default_factory=list)
    bad_row: bool = False
    engine_url: str | None = None  # a real engine serving every model here (else a mock's)
    stage_verbs: bool = False  # advertise split_claim / split_release
    stages: Any = None  # a real ``StageHost`` answering split commands (None: no_stage_host)

    @classmethod
    def for_controller(
        cls, state_dir: Any, host_id: str, client: httpx.AsyncClient, clock: Any, **kw: Any
    ) -> SimNode:
        key = load_or_create_signing_key(state_dir)
        token = issue_node_credential(key, host_id, now=clock())
        return cls(host_id=host_id, client=client, token=token, clock=clock, **kw)

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Grid-Allocator-Node-Token": self.token}

    def endpoint(self, model_id: str) -> str:
        if self.engine_url is not None:
            return self.engine_url
        return f"http://127.0.0.1/engines/{self.host_id}/{model_id}"  # loopback: no TLS needed

    def envelope(self) -> dict[str, Any]:
        now = self.clock()
        rows: list[Any] = []
        for r in sorted(self.residencies.values(), key=lambda r: r.model_id):
            row = {
                "model_id": r.model_id,
                "memory_mb": r.memory_mb,
                "state": r.state,
                "artifact_sha256": r.sha,
                "runtime": "llama.cpp",
                "managed": True,
                "loaded_age_seconds": max(0.0, now - r.loaded_at),
                "active_requests": 0,
            }
            if r.state in ("ready", "draining"):
                row["endpoint"] = self.endpoint(r.model_id)
                row["max_concurrency"] = 2
            rows.append(row)
        if self.bad_row:
            rows.append({"model_id": "broken", "memory_mb": -5, "state": "ready"})
        return {
            "schema_version": 1,
            "state": self.state,
            "cached_models": [
                {"model_id": m, "artifact_sha256": s} for m, s in sorted(self.cached.items())
            ],
            "residencies": rows,
            "actuator_capabilities": ["load", "warm", "drain", "unload"]
            + (list(SPLIT_KINDS) if self.stage_verbs else []),
            "engine_api_key": f"engine-key-{self.host_id}",
        }

    def resources(self) -> dict[str, Any]:
        return {
            "capacity_mb": self.capacity_mb,
            "reserved_mb": 0,
            "failure_domain": self.failure_domain,
            "runtimes": ["llama.cpp"],
            "disk_free_mb": 100000,
            "disk_total_mb": 200000,
        }

    async def register(self) -> httpx.Response:
        body = {
            "role": "allocator",
            "host_id": self.host_id,
            "models": [],
            "resources": self.resources(),
            "allocator": self.envelope(),
        }
        return await self.client.put(f"/nodes/{self.host_id}", json=body, headers=self.headers)

    async def heartbeat(self, request_commands: bool = True) -> dict[str, Any]:
        body = {
            "node_id": self.host_id,
            "resources": self.resources(),
            "allocator": self.envelope(),
            "request_commands": request_commands,
            "acknowledgements": self.acks,
        }
        response = await self.client.post(
            f"/nodes/{self.host_id}/heartbeat", json=body, headers=self.headers
        )
        response.raise_for_status()
        self.acks = []
        data: dict[str, Any] = response.json()
        for command in data["allocator"]["commands"]:
            self.execute(command)
        return data

    def execute(self, command: dict[str, Any]) -> None:
        if any(c["action_id"] == command["action_id"] for c in self.executed):
            return  # a re-delivered command is harmless
        self.executed.append(command)
        kind, model = command["kind"], command["model_id"]
        if kind in SPLIT_KINDS:
            answer = run_split_command(self.stages, command, int(self.clock() * 1000))
            ack = {"action_id": command["action_id"], "status": answer.status}
            ack["message"] = answer.message
            if answer.reason:
                ack["reason"] = answer.reason
            self.acks.append(ack)
            return
        sha = command.get("artifact_sha256")
        if kind == "load":
            self.cached[model] = sha
        elif kind == "warm":
            self.residencies[model] = SimResidency(
                model, command.get("memory_mb", 0) or 640, "ready", sha, self.clock()
            )
        elif kind == "drain" and model in self.residencies:
            self.residencies[model].state = "draining"
        elif kind == "unload":
            self.residencies.pop(model, None)
        self.acks.append(
            {
                "action_id": command["action_id"],
                "status": "succeeded",
                "message": kind,
                "duration_seconds": 0.5,
                "artifact_fetched": False,
            }
        )
