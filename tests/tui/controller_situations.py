"""Status documents produced by the real controller, in-process, for the named situations.

The controller (``gridctl.controller.serving.ControllerService``) runs on an
ASGI transport with a fake clock; simulated nodes (``tests/controller/simnodes``)
speak the real wire protocol. The situations:

``degraded_fleet``: paused, quarantined and unhealthy hosts, an unsatisfiable
profile, and a delivered drain withdrawn because its surviving replica's host
turned unhealthy before the drain was acknowledged.
``empty_fleet``: a controller with desired state and no hosts.
``admission_fleet``: a healthy converged fleet with the nine rows of
``tests.tui.situations.ADMISSION_ROWS`` grafted on, so every admission state
is on screen at once (a small simulated fleet cannot reach all nine together).
``workload_fleet``: admission rows the controller itself produced: unbound
(``model: "auto"``) coding, general and research requests through the real
router, a coding-scored model warmed for them, research with no capable model.

``regenerate_controller_fixtures()`` (``python -m tests.tui.controller_situations``)
rewrites ``tests/tui/fixtures/*.json``. Tick durations and action ids come from
the run, so the saved files are a record of one run, checked structurally.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from gridctl.controller.serving import ControllerService, ServiceOptions
from tests.controller.simnodes import GEMMA_SHA, SimNode
from tests.tui.builders import NOW, Doc
from tests.tui.situations import ADMISSION_ROWS, FIXTURES

POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
    "spec:\n  mode: automatic\n"
)


def profile_yaml(name: str, *, memory_mb: int = 640, replicas: int = 1) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: {memory_mb}
          artifact: {{sha256: {GEMMA_SHA}}}
          min_replicas: {replicas}
          max_replicas: {replicas}
          min_residency_seconds: 0
          scale_down_cooldown_seconds: 0
        """)


def engine_handler(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"status": "ok"})


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class HoldingNode(SimNode):
    """A simulated node that can stop executing (and acknowledging) what it receives."""

    holding: bool = False

    def execute(self, command: dict[str, Any]) -> None:
        if self.holding:
            self.executed.append(command)
            return
        super().execute(command)


class Harness:
    def __init__(self, root: Path, profiles: dict[str, str]) -> None:
        watch = root / "policies"
        watch.mkdir()
        for name, text in {**profiles, "policy": POLICY}.items():
            (watch / f"{name}.yaml").write_text(text, encoding="utf-8")
        self.watch = watch
        self.clock = Clock()
        self.service = ControllerService(
            ServiceOptions(
                state_dir=root / "state",
                watch_dir=watch,
                clock=self.clock,
                upstream_transport=httpx.MockTransport(engine_handler),
            )
        )
        self.app = self.service.build_app()
        self.nodes: list[HoldingNode] = []

    def node(self, client: httpx.AsyncClient, host_id: str, domain: str, **kw: Any) -> HoldingNode:
        node = HoldingNode.for_controller(
            self.service.options.state_dir,
            host_id,
            client,
            self.clock,
            failure_domain=domain,
            cached={"gemma": GEMMA_SHA, "gemma-small": GEMMA_SHA, "gemma-coder": GEMMA_SHA},
            **kw,
        )
        self.nodes.append(node)
        return node

    async def rounds(self, count: int, *, request_commands: bool = True) -> None:
        for _ in range(count):
            self.service.controller.tick()
            for node in self.nodes:
                await node.heartbeat(request_commands=request_commands)
            await self.service.probe_once(self.service.upstream)
            self.clock.now += 5

    def reload(self, name: str, text: str) -> None:
        (self.watch / f"{name}.yaml").write_text(text, encoding="utf-8")
        assert self.service.source is not None
        self.service.source.reload()
        self.service.controller.mark_dirty()


Scenario = Callable[[Harness, httpx.AsyncClient], Awaitable[None]]


async def _degraded(h: Harness, client: httpx.AsyncClient) -> None:
    gpu_a = h.node(client, "gpu-a", "rack-1", capacity_mb=4096)
    h.node(client, "gpu-b", "rack-2", capacity_mb=4096)
    h.node(client, "laptop-ana", "desk-3", capacity_mb=2048, state="paused")
    h.node(client, "mac-studio", "desk-4", capacity_mb=3072, state="quarantined")
    edge = h.node(client, "edge-1", "rack-2", capacity_mb=4096)
    for node in h.nodes:
        await node.register()
    await h.rounds(6)
    # Scale down: a drain is delivered but never acknowledged, then the surviving
    # replica's host turns unhealthy, so the destructive batch is withdrawn.
    h.reload("gemma", profile_yaml("gemma", replicas=1))
    for node in h.nodes:
        node.holding = True
    for _ in range(6):
        await h.rounds(1)
        drained = [n for n in h.nodes if any(c["kind"] == "drain" for c in n.executed)]
        if drained:
            break
    survivor = gpu_a if drained and drained[0] is edge else edge
    survivor.bad_row = True
    await h.rounds(1, request_commands=False)
    h.service.controller.tick()


async def _empty(h: Harness, client: httpx.AsyncClient) -> None:
    h.service.controller.tick()


async def _admission(h: Harness, client: httpx.AsyncClient) -> None:
    for host_id, domain in (("gpu-a", "rack-1"), ("gpu-b", "rack-2"), ("mac-studio", "desk-4")):
        await h.node(client, host_id, domain, capacity_mb=4096).register()
    await h.rounds(6)


WORKLOAD_PROFILES = {
    "gemma": profile_yaml("gemma") + "  workload_scores: {general: 1, marketing: 0.6}\n",
    "gemma-coder": profile_yaml("gemma-coder").replace("min_replicas: 1", "min_replicas: 0")
    + "  workload_scores: {coding: 1}\n",
    "workloads": (Path(__file__).resolve().parents[2] / "policies" / "workloads.yaml").read_text(
        encoding="utf-8"
    ),
}
UNBOUND_PROMPTS = {
    "coding": "fix the bug in this python function",
    "general": "hello there, how are you",
    "research": "summarize this paper and compare its sources",
}


async def _unbound(client: httpx.AsyncClient, workload: str) -> int:
    body = {"model": "auto", "messages": [{"role": "user", "content": UNBOUND_PROMPTS[workload]}]}
    return (await client.post("/v1/chat/completions", json=body)).status_code


async def _workloads(h: Harness, client: httpx.AsyncClient) -> None:
    for host_id, domain in (("node-a", "rack-1"), ("node-b", "rack-2")):
        await h.node(client, host_id, domain, capacity_mb=4096).register()
    await h.rounds(3)
    for _ in range(4):
        for workload in UNBOUND_PROMPTS:
            await _unbound(client, workload)
        h.service.tap.flush()
        await h.rounds(2)
    await h.rounds(3)


SCENARIOS: dict[str, tuple[dict[str, str], Scenario]] = {
    "degraded_fleet": (
        {
            "gemma": profile_yaml("gemma", replicas=2),
            "gemma-big": profile_yaml("gemma-big", memory_mb=900_000),
        },
        _degraded,
    ),
    "empty_fleet": ({"gemma": profile_yaml("gemma")}, _empty),
    "admission_fleet": (
        {"gemma": profile_yaml("gemma", replicas=2), "gemma-small": profile_yaml("gemma-small")},
        _admission,
    ),
    "workload_fleet": (WORKLOAD_PROFILES, _workloads),
}


def admission_rows() -> list[Doc]:
    return [
        {
            "workload": workload,
            "state": state,
            "model_id": model_id,
            "offered_concurrency": conc,
            "desired": reps[0],
            "planned": reps[1],
            "ready": reps[2],
            "missing": reps[3],
            "eligible_hosts": eligible,
            "startup_estimate_seconds": startup,
            "reason": reason,
        }
        for workload, state, model_id, conc, reps, eligible, startup, reason in ADMISSION_ROWS
    ]


async def controller_document(name: str) -> Doc:
    """Run the named situation on a fresh in-process controller; return its status."""
    profiles, scenario = SCENARIOS[name]
    with tempfile.TemporaryDirectory() as tmp:
        harness = Harness(Path(tmp), profiles)
        transport = httpx.ASGITransport(app=harness.app)
        harness.service.start_ticking()  # heartbeats asking for commands wait for a tick
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://ctl") as client:
                await scenario(harness, client)
                document: Doc = (await client.get("/allocator/status")).json()
        finally:
            harness.service.stop_ticking()
            await harness.service.upstream.aclose()
    if name == "admission_fleet":
        document["admission"] = admission_rows()
    # The temporary paths of this run mean nothing once saved.
    text = json.dumps(document).replace(tmp, "/var/lib/gridctl")
    result: Doc = json.loads(text)
    return result


def regenerate_controller_fixtures(names: list[str] | None = None) -> list[Path]:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(SCENARIOS):
        document = asyncio.run(controller_document(name))
        path = FIXTURES / f"{name}.json"
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for written_path in regenerate_controller_fixtures(sys.argv[1:] or None):
        print(written_path)
