"""The real controller sends a planned split's claims to its stage hosts (in process).

A model too big for any one simulated host, whose profile allows a split, is planned
over several hosts; after a tick each stage host that advertises ``split_claim`` is
delivered one fenced ``split_claim`` for its own stage, and its receipt (here the
node's real ``no_stage_host`` refusal, from ``run_split_command`` without a stage
server) is recorded against the action.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService
from gridctl.domain import ActionKind, ReceiptStatus
from tests.controller.simnodes import SimNode, sim_service

BIG = (
    "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {name: big}\nspec:\n"
    "  memory_mb: 3000\n  runtimes: [llama.cpp]\n  min_replicas: 1\n  max_replicas: 1\n"
    "  split: {max_stages: 3, layers: 30, native_context: 8192}\n"
)
POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\nspec: {mode: automatic}\n"
)
HOSTS = ("stage-a", "stage-b", "stage-c")


@pytest.fixture
def service(tmp_path: Path) -> Any:
    service, clock = sim_service(tmp_path, {"big.yaml": BIG, "policy.yaml": POLICY})
    service.start_ticking()
    yield service, clock
    service.stop_ticking()


async def converge(service: ControllerService, nodes: list[SimNode], rounds: int = 6) -> None:
    for _ in range(rounds):
        for node in nodes:
            await node.heartbeat()
        await service.probe_once(service.upstream)


def split_commands(node: SimNode) -> list[dict[str, Any]]:
    return [c for c in node.executed if c["kind"] == "split_claim"]


@pytest.mark.anyio
async def test_each_stage_host_is_delivered_its_own_stage_and_its_receipt_is_recorded(
    service: Any,
) -> None:
    ctl_service, clock = service
    app = ctl_service.build_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        nodes = [
            SimNode.for_controller(
                ctl_service.options.state_dir, h, client, clock, capacity_mb=2048, stage_verbs=True
            )
            for h in HOSTS
        ]
        for node in nodes:
            assert (await node.register()).status_code == 200
        await converge(ctl_service, nodes)

        plan = ctl_service.controller.view.plan
        assert plan is not None
        (split,) = plan.splits
        assert len(split.stages) >= 2
        check = validator("wire/command.schema.json")
        by_host = {n.host_id: n for n in nodes}
        for index, stage in enumerate(split.stages):
            node = by_host[stage.host_id]
            commands = split_commands(node)
            assert commands, f"{stage.host_id} got no split_claim"
            for command in commands:
                assert list(check.iter_errors(command)) == []
                claim, part = command["split_claim"]["claim"], command["split_claim"]["stage"]
                assert (part["index"], part["count"]) == (index, len(split.stages))
                assert (part["layer_start"], part["layer_end"]) == (
                    stage.layer_start,
                    stage.layer_end,
                )
                assert claim["coordinator_id"] == split.coordinator_host_id
                assert claim["coordinator_term"] == 1
                assert command["node_id"] == stage.host_id
        unplanned = set(HOSTS) - {s.host_id for s in split.stages}
        for host_id in unplanned:
            assert split_commands(by_host[host_id]) == []

        delivered = {c["action_id"] for n in nodes for c in split_commands(n)}
        history = {
            e.action_id: e for e in ctl_service.store.history() if e.kind is ActionKind.SPLIT_CLAIM
        }
        assert len(delivered) >= len(split.stages)
        assert delivered <= set(history)
        assert {history[a].status for a in delivered} == {ReceiptStatus.REJECTED}


@pytest.mark.anyio
async def test_hosts_that_do_not_advertise_split_claim_get_no_claim(service: Any) -> None:
    ctl_service, clock = service
    app = ctl_service.build_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        nodes = [
            SimNode.for_controller(
                ctl_service.options.state_dir, h, client, clock, capacity_mb=2048
            )
            for h in HOSTS
        ]
        for node in nodes:
            assert (await node.register()).status_code == 200
        await converge(ctl_service, nodes)
        plan = ctl_service.controller.view.plan
        assert plan is not None and len(plan.splits) == 1
        assert all(split_commands(n) == [] for n in nodes)
        held = [p for p in ctl_service.store.pending() if p.action.kind is ActionKind.SPLIT_CLAIM]
        assert held == []  # held-back proposals are never queued for delivery
        result = ctl_service.controller.view.result
        assert result is not None
        blocked = {
            (a.host_id, a.blocked) for a in result.actions if a.kind is ActionKind.SPLIT_CLAIM
        }
        assert blocked == {(s.host_id, "split_unsupported") for s in plan.splits[0].stages}
        status = (await client.get("/allocator/status")).json()
        assert list(validator("wire/status.schema.json").iter_errors(status)) == []
        shown = [a for a in status["reconciliation"]["actions"] if a["kind"] == "split_claim"]
        assert {a["blocked"] for a in shown} == {"split_unsupported"}
        # the model's row counts the split as its one planned replica and names its stages
        (row,) = [m for m in status["models"] if m["model_id"] == "big"]
        assert row["planned"] == 1 and row["desired"] == 1
        assert [s["host_id"] for s in row["split"]["stages"]] == [
            s.host_id for s in plan.splits[0].stages
        ]
        assert row["reason"].endswith(plan.splits[0].summary()), row
