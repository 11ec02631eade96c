"""The evaluation marker through the real router, with the official ``openai`` client.

``X-Grid-Evaluation: 1`` with the operator capability: the request is served,
counted as the engine's speed evidence and the model's service evidence, and
no demand learner sees it (no series, no workload demand, no affinity cursor);
its quality arrives at ``POST /allocator/evaluations``. The same marker with a
router key (or with no credential at all) is a 403 naming the header, and
nothing is forwarded, observed or learned.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gridctl.controller.serving import ControllerService
from gridctl.router.evaluation import HEADER
from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import GEMMA_SHA, SimNode, engine_handler, sim_service
from tests.controller.test_http_flow import POLICY, converge

PROFILE = textwrap.dedent(f"""\
    apiVersion: gridctl/v1
    kind: ModelProfile
    metadata: {{name: gemma}}
    spec:
      memory_mb: 640
      artifact: {{sha256: '{GEMMA_SHA}'}}
      min_replicas: 1
      max_replicas: 1
    """)
MESSAGES: list[Any] = [{"role": "user", "content": "what is 2 + 2?"}]
MARKED = {HEADER: "1", "X-Grid-Affinity-Key": "evaluation-run-1"}


@dataclass
class Engine:
    """The simulated child engine, counting the inference requests that reach it."""

    chats: list[str] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/health"):
            self.chats.append(request.url.path.rsplit("/v1/", 1)[-1])
        return engine_handler(request)


@dataclass
class Fleet:
    service: ControllerService
    client: httpx.AsyncClient  # the controller's HTTP surface, in process
    engine: Engine
    seen: list[RequestObservation]

    def openai(self, api_key: str, headers: dict[str, str] | None = None) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url="http://ctl/v1",
            api_key=api_key,
            http_client=self.client,
            default_headers=headers,
            max_retries=0,
        )

    def flushed(self) -> list[RequestObservation]:
        assert self.service.tap.flush(timeout=60.0)
        return list(self.seen)


@pytest.fixture
async def fleet(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Fleet]:
    engine = Engine()
    service, clock = sim_service(
        tmp_path,
        {"gemma.yaml": PROFILE, "policy.yaml": POLICY},
        engine=engine,
        router_auth=getattr(request, "param", "auto"),
    )
    app = service.build_app()
    seen: list[RequestObservation] = []
    service.tap.add(seen.append)
    service.start_ticking()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            node = SimNode.for_controller(
                service.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
            )
            assert (await node.register()).status_code == 200
            await converge(service, [node])
            assert service.registry.routable("gemma", clock())
            yield Fleet(service, client, engine, seen)
    finally:
        service.stop_ticking()


def demand_state(service: ControllerService) -> dict[str, Any]:
    """What the demand learners hold (series, workloads, sequences), outcomes aside."""
    state = service.controller.demand._learner.state()
    return {k: state[k] for k in ("direct", "unbound", "sequences")}


@pytest.mark.anyio
async def test_an_operator_marked_request_is_speed_evidence_and_never_demand(
    fleet: Fleet,
) -> None:
    service = fleet.service
    operator = fleet.openai("unused", {"X-Grid-Allocator-Token": service.operator_token, **MARKED})
    for _ in range(3):
        answer = await operator.chat.completions.create(model="gemma", messages=MESSAGES)
        assert answer.choices[0].message.content == "hi"
    observations = fleet.flushed()
    assert [o.evaluation for o in observations] == [True, True, True]
    assert fleet.engine.chats == ["chat/completions"] * 3  # served like any request

    assert demand_state(service) == {
        "direct": {},
        "unbound": {},
        "sequences": {"cursors": {}, "transitions": []},
    }
    now = service.options.clock()
    assert service.controller.demand.forecast(now, service.controller.policy()) == ()
    picture = service.controller.demand.picture(now)
    assert picture.models == () and picture.workloads == ()
    speed = service.router.attribution.model_speeds()[("local-1", "gemma")]
    assert (speed.artifact_sha256, speed.samples) == (GEMMA_SHA, 3)
    (outcome,) = picture.outcomes  # served, so the model's service evidence counts it
    assert (outcome.model_id, outcome.workload, outcome.samples) == ("gemma", "general", 3.0)
    assert outcome.quality is None

    quality = await fleet.client.post(
        "/allocator/evaluations",
        headers={"X-Grid-Allocator-Token": service.operator_token},
        json={"model_id": "gemma", "workload": "general", "quality": 0.75},
    )
    assert quality.status_code == 200, quality.text
    (scored,) = service.controller.demand.picture(now).outcomes
    assert (scored.quality, scored.evaluations) == (0.75, 1.0)

    # the same request unmarked is demand: the exclusion above is the marker's doing
    ordinary = fleet.openai("unused", {"X-Grid-Affinity-Key": "user-session"})
    await ordinary.chat.completions.create(model="gemma", messages=MESSAGES)
    assert fleet.flushed()[-1].evaluation is False
    learned = demand_state(service)
    assert list(learned["direct"]) == ["gemma"]
    assert len(learned["sequences"]["cursors"]) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("fleet", ["required"], indirect=True)
async def test_a_router_key_cannot_mark_a_request_and_nothing_is_recorded(fleet: Fleet) -> None:
    service = fleet.service
    assert service.identity is not None
    key_id, key = service.identity.membership.create_router_key("team-a", now=1.0)
    before = (demand_state(service), service.controller.demand.revision)

    with pytest.raises(openai.PermissionDeniedError) as refused:
        await fleet.openai(key, MARKED).chat.completions.create(model="gemma", messages=MESSAGES)
    assert refused.value.status_code == 403
    error = refused.value.response.json()["error"]
    assert error["param"] == HEADER and HEADER in error["message"]
    assert error["code"] == "evaluation_not_permitted"

    assert fleet.flushed() == []  # nothing observed
    assert fleet.engine.chats == []  # nothing forwarded
    assert service.router.attribution.model_speeds() == {}  # no speed evidence
    assert (demand_state(service), service.controller.demand.revision) == before
    assert service.controller.demand.picture(service.options.clock()).outcomes == ()

    # the key itself is good: unmarked, the same caller is served and counted as demand
    await fleet.openai(key).chat.completions.create(model="gemma", messages=MESSAGES)
    (observed,) = fleet.flushed()
    assert (observed.client, observed.evaluation) == (key_id, False)
    # and the operator capability may mark a request on a keyed router too
    operator = fleet.openai(key, {"X-Grid-Allocator-Token": service.operator_token, **MARKED})
    await operator.chat.completions.create(model="gemma", messages=MESSAGES)
    assert [o.evaluation for o in fleet.flushed()] == [False, True]
    assert list(demand_state(service)["direct"]) == ["gemma"]


@pytest.mark.anyio
async def test_the_marker_without_any_credential_or_with_a_bad_value_is_refused(
    fleet: Fleet,
) -> None:
    anonymous = await fleet.client.post(
        "/v1/chat/completions", headers=MARKED, json={"model": "gemma", "messages": MESSAGES}
    )
    assert anonymous.status_code == 403
    assert anonymous.json()["error"]["param"] == HEADER
    forged = await fleet.client.post(
        "/v1/chat/completions",
        headers={**MARKED, "X-Grid-Allocator-Token": "not-the-operator-token"},
        json={"model": "gemma", "messages": MESSAGES},
    )
    assert forged.status_code == 403 and forged.json()["error"]["param"] == HEADER
    garbled = await fleet.client.post(
        "/v1/chat/completions",
        headers={HEADER: "maybe", "X-Grid-Allocator-Token": fleet.service.operator_token},
        json={"model": "gemma", "messages": MESSAGES},
    )
    assert garbled.status_code == 400
    assert garbled.json()["error"]["param"] == HEADER and "maybe" in garbled.text
    assert fleet.flushed() == [] and fleet.engine.chats == []
