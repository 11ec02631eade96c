"""The predictive cache lifecycle through the real controller (in-process, real wire protocol).

A learned correlation predicts two quiet models while the only serving slot is
taken. The controller sends each a cache-only ``load`` with ``prefetch: true``
(no warm); when a slot opens, one of them is placed and warmed from the
prefetched copy without another transfer (the cache hit); the other is never
used, its prediction fades, and after the TTL an exact-digest ``evict`` is
delivered — revalidated against the latest heartbeat first.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, engine_handler
from tests.controller.test_http_flow import converge

GENERAL_SHA, VIDEO_SHA = "1" * 64, "2" * 64
TTL = 600.0


def profile(name: str, sha: str, *, min_replicas: int, source: str | None) -> str:
    artifact = (
        f"{{sha256: '{sha}', source: '{source}', size_mb: 300}}"
        if source
        else f"{{sha256: '{sha}'}}"
    )
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: 640
          artifact: {artifact}
          min_replicas: {min_replicas}
          max_replicas: 1
          min_residency_seconds: 0
          scale_down_cooldown_seconds: 0
        """)


POLICY = textwrap.dedent(f"""\
    apiVersion: gridctl/v1
    kind: ControllerPolicy
    metadata: {{name: p}}
    spec:
      mode: automatic
      max_concurrent_mutations: 4
      predictive_disk_reserve_mb: 1024
      predictive_cache_ttl_seconds: {TTL}
    """)


class CachingNode(SimNode):
    """The simulated node, with the cache facts a real node reports (provenance, ages, evict)."""

    provenance: dict[str, str]
    cached_at: dict[str, float]
    used_at: dict[str, float]

    def envelope(self) -> dict[str, Any]:
        envelope = super().envelope()
        now = self.clock()
        envelope["actuator_capabilities"] = ["load", "warm", "drain", "unload", "evict"]
        envelope["cached_models"] = [
            {
                "model_id": m,
                "artifact_sha256": s,
                "size_bytes": 300 * 1024 * 1024,
                "provenance": self.provenance.get(m, "operator"),
                "cached_age_seconds": now - self.cached_at.get(m, now),
                "last_used_age_seconds": now - self.used_at[m] if m in self.used_at else None,
            }
            for m, s in sorted(self.cached.items())
        ]
        return envelope

    def execute(self, command: dict[str, Any]) -> None:
        if any(c["action_id"] == command["action_id"] for c in self.executed):
            return
        model = command["model_id"]
        if command["kind"] == "load":
            self.provenance[model] = "predictive" if command.get("prefetch") else "demand"
            self.cached_at[model] = self.clock()
        elif command["kind"] == "warm":
            self.used_at[model] = self.clock()
        elif command["kind"] == "evict":
            assert command["artifact_sha256"] == self.cached.get(model)
            self.cached.pop(model, None)
            self.executed.append(command)
            self.acks.append({"action_id": command["action_id"], "status": "succeeded",
                              "message": "evicted", "duration_seconds": 0.1,
                              "artifact_fetched": False})  # fmt: skip
            return
        super().execute(command)


def named(model: str, t: float) -> RequestObservation:
    return RequestObservation(
        t=t, endpoint="chat", model=model, served_model=model, host_id="local-1",
        outcome="ok", status=200, service_seconds=0.5,
    )  # fmt: skip


@pytest.fixture
def service(tmp_path: Path) -> Any:
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "coder.yaml").write_text(
        profile("gemma-coder", GEMMA_SHA, min_replicas=1, source=None)
    )
    for name, sha in (("gemma-general", GENERAL_SHA), ("gemma-video", VIDEO_SHA)):
        source = f"hf://acme/{name}/model.gguf"
        (watch / f"{name}.yaml").write_text(profile(name, sha, min_replicas=0, source=source))
    (watch / "policy.yaml").write_text(POLICY)
    clock = Clock()
    svc = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            watch_dir=watch,
            clock=clock,
            upstream_transport=httpx.MockTransport(engine_handler),
        )
    )
    app = svc.build_app()
    svc.start_ticking()
    yield svc, app, clock
    svc.stop_ticking()


def learned_history(svc: Any, clock: Any) -> None:
    """coder with general and video in three old buckets, then coder alone now."""
    base = (clock.now // 60) * 60
    for bucket in (0, 1, 2):
        for i in range(3):
            t = base + bucket * 60 + 1 + i
            svc.controller.demand.observe(named("gemma-coder", t))
            svc.controller.demand.observe(named("gemma-general", t + 1))
            svc.controller.demand.observe(named("gemma-video", t + 1))
    for i in range(3):
        svc.controller.demand.observe(named("gemma-coder", base + 9 * 60 + 1 + i))
    clock.now = base + 10 * 60 + 30


@pytest.mark.anyio
async def test_prefetch_then_cache_hit_and_ttl_expiry(service: Any) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = CachingNode.for_controller(
            svc.options.state_dir, "local-1", client, clock,
            capacity_mb=1000,  # one serving slot, taken by the baseline
            cached={"gemma-coder": GEMMA_SHA},
        )  # fmt: skip
        node.provenance, node.cached_at, node.used_at = {}, {}, {}
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=2)
        learned_history(svc, clock)
        svc.controller.mark_dirty()
        await converge(svc, [node], rounds=8)

        loads = [c for c in node.executed if c["kind"] == "load"]
        assert sorted(c["model_id"] for c in loads) == ["gemma-general", "gemma-video"]
        assert all(c["prefetch"] is True and c["memory_mb"] == 0 for c in loads)
        assert all(c["artifact_source"].startswith("hf://acme/") for c in loads)
        assert all(c["kind"] != "warm" or c["model_id"] == "gemma-coder" for c in node.executed)
        assert node.provenance == {"gemma-general": "predictive", "gemma-video": "predictive"}

        # A slot opens: general is placed where its prefetched copy is, warmed without a load.
        node.capacity_mb = 2000
        svc.controller.mark_dirty()
        await converge(svc, [node], rounds=6)
        warmed = [c["model_id"] for c in node.executed if c["kind"] == "warm"]
        assert "gemma-general" in warmed
        assert [c["model_id"] for c in node.executed if c["kind"] == "load"].count(
            "gemma-general"
        ) == 1  # the cache hit: no second transfer

        # Demand fades; past the TTL the unused prediction expires by exact digest.
        node.capacity_mb = 1000
        clock.now += TTL + 3600
        svc.controller.mark_dirty()
        await converge(svc, [node], rounds=8)
        evicts = [c for c in node.executed if c["kind"] == "evict"]
        assert [(c["model_id"], c["artifact_sha256"]) for c in evicts] == [
            ("gemma-video", VIDEO_SHA)
        ]
        assert "gemma-general" in node.cached  # used: never evicted
        assert "gemma-coder" in node.cached  # operator entry: never evicted
