"""The controller observes split stages and split coordinators from heartbeats (the real
app in process through httpx's ASGI transport): a stage host's ``split_stages`` reach its
record, its planning snapshot, the status document, the fleet snapshot it exports and
``gridctl status``; a lease renewal keeps them; a stage row the schema cannot judge but
that is still wrong is excluded and makes the host unhealthy, like a malformed residency
row, and changes nothing else; a coordinator's residency names its ``split_term``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.cli.status_cmd import render_status
from gridctl.config.schemas import validator
from gridctl.config.snapshots import snapshot_from_json
from gridctl.controller.serving import ControllerService
from gridctl.domain import HostState, ObservedStage
from gridctl.planner.canonical import canonical_text
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, SimResidency, sim_service
from tests.controller.test_http_flow import POLICY, profile

pytestmark = pytest.mark.anyio


def stage_row(index: int, start: int, end: int, *, term: int = 3, **extra: Any) -> dict[str, Any]:
    return {
        "model_id": "big",
        "coordinator_id": "coord-1",
        "coordinator_term": term,
        "stage_index": index,
        "stage_count": 2,
        "layer_start": start,
        "layer_end": end,
        "endpoint": f"10.0.0.{index + 2}:5005{index}",
        **extra,
    }


@dataclass
class SplitNode(SimNode):
    """A simulated node that also reports split stages and coordinator terms."""

    stage_rows: list[dict[str, Any]] = field(default_factory=list)
    split_terms: dict[str, int] = field(default_factory=dict)  # model -> coordinator term

    def envelope(self) -> dict[str, Any]:
        envelope = super().envelope()
        for row in envelope["residencies"]:
            if row.get("model_id") in self.split_terms:
                row["split_term"] = self.split_terms[row["model_id"]]
        if self.stage_rows:
            envelope["split_stages"] = [dict(r) for r in self.stage_rows]
        return envelope


@pytest.fixture
def quiet(tmp_path: Path) -> Iterator[tuple[ControllerService, httpx.AsyncClient, Clock]]:
    """The real service and app with no tick thread: nothing moves but the heartbeats."""
    service, clock = sim_service(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    )
    yield service, client, clock


def stage_node(service: ControllerService, client: httpx.AsyncClient, clock: Clock) -> SplitNode:
    node = SplitNode.for_controller(service.options.state_dir, "stage-1", client, clock)
    assert isinstance(node, SplitNode)
    node.cached["gemma"] = GEMMA_SHA
    node.residencies["gemma"] = SimResidency("gemma", 640, "ready", GEMMA_SHA, clock() - 60)
    # reported out of order: kept by model, term and index
    node.stage_rows = [stage_row(1, 16, 32), stage_row(0, 0, 16, term=2)]
    return node


def expected_stages() -> tuple[ObservedStage, ...]:
    return (
        ObservedStage("big", "coord-1", 2, 0, 2, 0, 16, "10.0.0.2:50050"),
        ObservedStage("big", "coord-1", 3, 1, 2, 16, 32, "10.0.0.3:50051"),
    )


async def status_of(client: httpx.AsyncClient) -> dict[str, Any]:
    status: dict[str, Any] = (await client.get("/allocator/status")).json()
    assert list(validator("wire/status.schema.json").iter_errors(status)) == []
    return status


async def test_reported_stages_reach_the_snapshot_and_the_status_document(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        assert (await node.register()).status_code == 200
        await node.heartbeat(request_commands=False)
        record = service.registry.host("stage-1")
        assert record is not None and record.state is HostState.ACCEPTING
        assert record.split_stages == expected_stages()
        snapshot = service.registry.snapshot(clock())
        assert snapshot.hosts[0].split_stages == expected_stages()
        (host,) = (await status_of(client))["hosts"]
        assert host["split_stages"] == [
            {
                "model_id": "big",
                "coordinator_id": "coord-1",
                "coordinator_term": s.coordinator_term,
                "stage_index": s.stage_index,
                "stage_count": 2,
                "layer_start": s.layer_start,
                "layer_end": s.layer_end,
                "endpoint": s.endpoint,
            }
            for s in expected_stages()
        ]
        assert "split_term" not in host["residencies"][0]  # a whole replica names none


async def test_a_host_serving_no_stage_keeps_none_and_digests_as_before(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        node.stage_rows = []
        await node.register()
        (snap_host,) = service.registry.snapshot(clock()).hosts
        assert snap_host.split_stages is None
        assert "split_stages" not in canonical_text(snap_host)
        (host,) = (await status_of(client))["hosts"]
        assert "split_stages" not in host
        node.stage_rows = [stage_row(0, 0, 16)]
        await node.heartbeat(request_commands=False)
        node.stage_rows = []  # the claim ended: the stages go with the next full report
        await node.heartbeat(request_commands=False)
        record = service.registry.host("stage-1")
        assert record is not None and record.split_stages is None


async def test_a_lease_heartbeat_keeps_the_stages_of_the_last_full_inventory(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        body = {
            "role": "allocator",
            "host_id": "stage-1",
            "models": [],
            "resources": node.resources(),
            "allocator": node.envelope(),
            "inventory_digest": "d1",
        }
        assert (await client.put("/nodes/stage-1", json=body, headers=node.headers)).is_success
        before = service.registry.host("stage-1")
        clock.now += 5.0
        lease = {"node_id": "stage-1", "inventory_digest": "d1", "request_commands": False}
        answer = await client.post("/nodes/stage-1/heartbeat", json=lease, headers=node.headers)
        assert answer.status_code == 200 and "send_full_inventory" not in answer.json()
        after = service.registry.host("stage-1")
        assert before is not None and after is not None
        assert after.last_heartbeat == before.last_heartbeat + 5.0
        assert after.split_stages is before.split_stages
        assert after.split_stages == expected_stages()
        assert service.registry.snapshot(clock()).hosts[0].split_stages == expected_stages()
        (host,) = (await status_of(client))["hosts"]
        assert [s["stage_index"] for s in host["split_stages"]] == [0, 1]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (stage_row(1, 32, 32), "layer_start 32 is not below layer_end 32"),
        (stage_row(1, 40, 16), "layer_start 40 is not below layer_end 16"),
        (stage_row(2, 16, 32), "stage_index 2 is not below stage_count 2"),
        (stage_row(0, 0, 8, term=2), "stage 0 of big under term 2 is reported twice"),
    ],
)
async def test_a_malformed_stage_row_is_excluded_like_a_malformed_residency_row(
    quiet: Any, bad: dict[str, Any], why: str
) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        await node.register()
        good = service.registry.host("stage-1")
        assert good is not None
        node.stage_rows = [*node.stage_rows, bad]
        await node.heartbeat(request_commands=False)
        record = service.registry.host("stage-1")
        assert record is not None and record.state is HostState.UNHEALTHY
        assert record.unhealthy_reasons == (f"malformed split stage row 2: {why}",)
        # the rule of a malformed residency row: the row is excluded, the host fails closed
        node.stage_rows, node.bad_row = node.stage_rows[:2], True
        await node.heartbeat(request_commands=False)
        residency_rule = service.registry.host("stage-1")
        assert residency_rule is not None and residency_rule.state is HostState.UNHEALTHY
        # ... and nothing else of the report changed
        for taken in (record, residency_rule):
            assert taken.split_stages == good.split_stages == expected_stages()
            assert taken.residencies == good.residencies and taken.cached == good.cached
            assert taken.routes.keys() == good.routes.keys()
        (host,) = (await status_of(client))["hosts"]
        assert host["state"] == "unhealthy"


async def test_a_stage_row_the_schema_refuses_refuses_the_report_whole(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        await node.register()
        before = service.registry.host("stage-1")
        bad = stage_row(0, 0, 16)
        del bad["endpoint"]
        node.stage_rows = [bad]
        body = {"node_id": "stage-1", "resources": node.resources(), "allocator": node.envelope()}
        answer = await client.post("/nodes/stage-1/heartbeat", json=body, headers=node.headers)
        assert answer.status_code == 400
        assert answer.json()["error"]["pointer"] == "/allocator/split_stages/0/endpoint"
        assert service.registry.host("stage-1") == before


async def test_a_coordinator_residency_names_its_split_term(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        node.stage_rows = []
        node.split_terms["gemma"] = 4
        await node.register()
        record = service.registry.host("stage-1")
        assert record is not None and [r.split_term for r in record.residencies] == [4]
        (snap_host,) = service.registry.snapshot(clock()).hosts
        assert [r.split_term for r in snap_host.residencies] == [4]
        status = await status_of(client)
        (row,) = status["hosts"][0]["residencies"]
        assert row["split_term"] == 4
        assert f"gemma:{row['state']} (split term 4)" in render_status(status)
        node.split_terms["gemma"] = 0  # not a term: the row is malformed, the host unhealthy
        await node.heartbeat(request_commands=False)
        refused = service.registry.host("stage-1")
        assert refused is not None and refused.state is HostState.UNHEALTHY
        assert refused.residencies == ()


async def test_the_exported_fleet_snapshot_round_trips_stages_and_terms(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        node.split_terms["gemma"] = 3
        await node.register()
        plain = SplitNode.for_controller(service.options.state_dir, "plain-1", client, clock)
        await plain.register()
        answer = await client.get(
            "/allocator/snapshot", headers={"Authorization": f"Bearer {service.operator_token}"}
        )
        assert answer.status_code == 200, answer.text
        document = answer.json()
        assert list(validator("wire/fleet-snapshot.schema.json").iter_errors(document)) == []
        exported = {h["host_id"]: h["allocator"] for h in document["hosts"]}
        assert "split_stages" not in exported["plain-1"]
        read = snapshot_from_json(json.loads(json.dumps(document)))
        stage_host, plain_host = read.host("stage-1"), read.host("plain-1")
        assert stage_host is not None and plain_host is not None
        assert stage_host.split_stages == expected_stages()
        assert [r.split_term for r in stage_host.residencies] == [3]
        assert plain_host.split_stages is None
        live = service.registry.snapshot(clock()).host("stage-1")
        assert live is not None
        # what the planner reads of the host survives the file (the export never carried a
        # residency's live batch width)
        widthless = tuple(replace(r, max_concurrency=None) for r in live.residencies)
        assert replace(stage_host, learned=()) == replace(
            live, learned=(), capabilities=(), residencies=widthless
        )


async def test_gridctl_status_prints_each_stage_on_its_own_line(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        node = stage_node(service, client, clock)
        await node.register()
        text = render_status(await status_of(client))
    lines = text.splitlines()
    first = lines.index(
        "  split stage of big term 2 (coordinator coord-1): stage 1/2, layers 0-15, "
        "via 10.0.0.2:50050"
    )
    assert lines[first + 1] == (
        "  split stage of big term 3 (coordinator coord-1): stage 2/2, layers 16-31, "
        "via 10.0.0.3:50051"
    )
    assert lines[first - 1].startswith("stage-1 ")
