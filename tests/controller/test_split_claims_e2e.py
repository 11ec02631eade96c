"""A planned split's claims accepted by real stage hosts (real ``ggml-rpc-server``).

The real controller in process, simulated nodes whose split commands go to a real
``StageHost`` each (own state store, own fleet identity, a real stage server and TLS
tunnel on loopback): after a tick every stage host accepts its own stage, runs exactly
one stage server for it, and the controller records the claims as succeeded. When the
model's profile is removed, each stage host is sent a ``split_release`` of its claim's
term and its stage server stops.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from gridctl.domain import ActionKind, ReceiptStatus
from gridctl.node.stagehost import StageHost, StageHostSettings
from gridctl.node.statestore import NodeStateStore
from tests.controller.simnodes import SimNode, sim_service
from tests.controller.test_split_claims import BIG, HOSTS, POLICY, converge, split_commands
from tests.node.stage_certs import fleet_ca, fleet_identity
from tests.node.test_rpc_engine_e2e import _stage_server

pytestmark = pytest.mark.e2e


@pytest.fixture
def stage_hosts(tmp_path: Path) -> Iterator[dict[str, StageHost]]:
    binary = _stage_server()
    ca = fleet_ca(tmp_path / "ca")
    made: dict[str, StageHost] = {}
    stores: list[NodeStateStore] = []
    try:
        for host_id in HOSTS:
            home = tmp_path / "nodes" / host_id
            home.mkdir(parents=True)
            identity = fleet_identity(ca, home / "tls", host_id, ["127.0.0.1"])
            store = NodeStateStore(home / "node.sqlite3")
            stores.append(store)
            settings = StageHostSettings(binary, identity, "127.0.0.1", home / "logs")
            made[host_id] = StageHost(store, settings)
        yield made
    finally:
        for stages in made.values():
            stages.close()
        for store in stores:
            store.close()


@pytest.mark.anyio
async def test_every_stage_host_accepts_its_stage_and_serves_it(
    tmp_path: Path, stage_hosts: dict[str, StageHost]
) -> None:
    service, clock = sim_service(tmp_path, {"big.yaml": BIG, "policy.yaml": POLICY})
    service.start_ticking()
    try:
        app = service.build_app()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            nodes = [
                SimNode.for_controller(
                    service.options.state_dir,
                    h,
                    client,
                    clock,
                    capacity_mb=2048,
                    stage_verbs=True,
                    stages=stage_hosts[h],
                )
                for h in HOSTS
            ]
            for node in nodes:
                assert (await node.register()).status_code == 200
            await converge(service, nodes)

            plan = service.controller.view.plan
            assert plan is not None
            (split,) = plan.splits
            by_host = {n.host_id: n for n in nodes}
            for index, stage in enumerate(split.stages):
                running = list(stage_hosts[stage.host_id].running().values())
                assert len(running) == 1, stage.host_id
                served = running[0].stage_claim
                assert (served.stage.index, served.stage.layer_start, served.stage.layer_end) == (
                    index,
                    stage.layer_start,
                    stage.layer_end,
                )
                assert served.claim.coordinator_id == split.coordinator_host_id
                assert psutil.pid_exists(running[0].server.pid)
                host, port = running[0].advertised
                assert host == "127.0.0.1" and port > 0

            delivered = {c["action_id"] for n in nodes for c in split_commands(n)}
            assert len(delivered) == len(split.stages)  # accepted once: never sent again
            statuses = {
                e.action_id: e.status
                for e in service.store.history()
                if e.kind is ActionKind.SPLIT_CLAIM
            }
            assert {statuses.get(a) for a in delivered} == {ReceiptStatus.SUCCEEDED}
            for host_id in set(HOSTS) - {s.host_id for s in split.stages}:
                assert stage_hosts[host_id].running() == {}
            pids = [r.server.pid for h in HOSTS for r in stage_hosts[h].running().values()]

            (tmp_path / "policies" / "big.yaml").unlink()
            service.source.reload()
            for _ in range(6):  # past the mutation cooldown after the claims
                clock.now += 5
                await converge(service, nodes, rounds=2)
            releases = {
                s.host_id: [c for c in by_host[s.host_id].executed if c["kind"] == "split_release"]
                for s in split.stages
            }
            for host_id, sent in releases.items():
                assert len(sent) == 1, host_id
                assert sent[0]["split_stop"]["coordinator_term"] == 1
                assert stage_hosts[host_id].running() == {}
            released = {
                e.action_id: e.status
                for e in service.store.history()
                if e.kind is ActionKind.SPLIT_RELEASE
            }
            assert {released.get(c[0]["action_id"]) for c in releases.values()} == {
                ReceiptStatus.SUCCEEDED
            }
            assert not any(
                psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids
            )
    finally:
        service.stop_ticking()
