"""Live workload intelligence in the controller: unbound demand warms the scored model."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, engine_handler
from tests.controller.test_http_flow import POLICY, converge


def scored(name: str, workload: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: {name}}}
        spec:
          memory_mb: 640
          artifact: {{sha256: {GEMMA_SHA}}}
          min_replicas: 0
          max_replicas: 1
          min_residency_seconds: 0
          workload_scores: {{{workload}: 1}}
        """)


@pytest.fixture
def service(tmp_path: Path) -> Any:
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "coder.yaml").write_text(scored("gemma-coder", "coding"))
    (watch / "general.yaml").write_text(scored("gemma-general", "general"))
    (watch / "policy.yaml").write_text(POLICY)
    catalog = Path(__file__).resolve().parents[2] / "policies" / "workloads.yaml"
    (watch / "workloads.yaml").write_text(catalog.read_text(encoding="utf-8"))
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


def unbound_coding(t: float) -> RequestObservation:
    return RequestObservation(
        t=t,
        endpoint="chat",
        model=None,
        served_model=None,
        host_id=None,
        outcome="rejected",
        status=503,
        service_seconds=0.01,
        workload="coding",
    )


@pytest.mark.anyio
async def test_unbound_coding_demand_warms_the_coding_model(service: Any) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir,
            "local-1",
            client,
            clock,
            cached={"gemma-coder": GEMMA_SHA, "gemma-general": GEMMA_SHA},
        )
        assert (await node.register()).status_code == 200
        svc.controller.demand.observe(unbound_coding(clock.now))
        await converge(svc, [node], rounds=3)
        status = (await client.get("/allocator/status")).json()
        (row,) = status["admission"]
        assert (row["workload"], row["state"]) == ("coding", "awaiting-plan")
        assert node.executed == []
        for i in range(2):
            svc.controller.demand.observe(unbound_coding(clock.now + i))
        clock.now += 5
        await converge(svc, [node], rounds=8)
        status = (await client.get("/allocator/status")).json()
        assert list(validator("wire/status.schema.json").iter_errors(status)) == []
        (row,) = status["admission"]
        assert row["model_id"] == "gemma-coder"
        assert row["state"] in ("planned", "starting", "ready"), row
        assert status["portfolio"]["mapping"] == {"coding": "gemma-coder"}
        assert status["portfolio"]["selected"] == ["gemma-coder"]
        assert [c["model_id"] for c in node.executed] == ["gemma-coder"]
        assert all(
            d["model_id"] != "gemma-coder" or d["requests_per_minute"] == 0
            for d in status["forecasts"]
        )  # never direct demand


CODING = {"model": "auto", "messages": [{"role": "user", "content": "fix this python bug"}]}


@pytest.mark.anyio
async def test_unbound_requests_get_503_then_the_warmed_coding_model(service: Any) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir,
            "local-1",
            client,
            clock,
            cached={"gemma-coder": GEMMA_SHA, "gemma-general": GEMMA_SHA},
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=2)
        states = []
        for _ in range(3):
            refused = await client.post("/v1/chat/completions", json=CODING)
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["workload"] == "coding" and "coding" in error["message"]
            states.append(error["admission_state"])
        assert states[0] == "awaiting-plan"
        svc.tap.flush()
        clock.now += 5
        await converge(svc, [node], rounds=8)
        assert [c["model_id"] for c in node.executed] == ["gemma-coder"]
        served = await client.post("/v1/chat/completions", json=CODING)
        assert served.status_code == 200, served.text
        assert served.json()["model"] == "gemma-coder"
        status = (await client.get("/allocator/status")).json()
        (row,) = status["admission"]
        assert (row["workload"], row["state"], row["model_id"]) == (
            "coding",
            "ready",
            "gemma-coder",
        )
        svc.tap.flush()
        clock.now += 1
        await converge(svc, [node], rounds=2)
        status = (await client.get("/allocator/status")).json()
        coder = [f for f in status["forecasts"] if f["model_id"] == "gemma-coder"]
        assert all(f["requests_per_minute"] == 0 and f["sample_count"] == 0 for f in coder)


@pytest.mark.anyio
async def test_evaluations_are_operator_only_and_fenced_by_artifact(service: Any) -> None:
    svc, app, clock = service
    admin = {"X-Grid-Allocator-Token": svc.operator_token}
    body = {"model_id": "gemma-coder", "workload": "coding", "quality": 0.9}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        await client.post("/allocator/tick", headers=admin)
        anonymous = await client.post("/allocator/evaluations", json=body)
        assert anonymous.status_code in (401, 403)
        wrong = await client.post(
            "/allocator/evaluations", headers=admin, json={**body, "artifact_sha256": "0" * 64}
        )
        assert wrong.status_code == 400 and "artifact_sha256" in wrong.text
        ok = await client.post(
            "/allocator/evaluations", headers=admin, json={**body, "artifact_sha256": GEMMA_SHA}
        )
        assert ok.status_code == 200, ok.text
    picture = svc.controller.demand.picture(clock.now)
    (score,) = picture.outcomes
    assert (score.model_id, score.workload, score.evaluations) == ("gemma-coder", "coding", 1.0)
    assert picture.workloads == () and picture.models == ()  # quality is never demand


def named(model: str, t: float) -> RequestObservation:
    return RequestObservation(
        t=t,
        endpoint="chat",
        model=model,
        served_model=model,
        host_id="local-1",
        outcome="ok",
        status=200,
        service_seconds=0.5,
    )


def co_active_history(svc: Any, clock: Any) -> None:
    """coder and general together in three old buckets, then coder alone in the last one.

    general's own requests are older than the book's five-bucket rate window, so its
    only live demand is the learner's correlated demand from coder.
    """
    base = (clock.now // 60) * 60
    for bucket in (0, 1, 2):
        for i in range(3):
            svc.controller.demand.observe(named("gemma-coder", base + bucket * 60 + 1 + i))
            svc.controller.demand.observe(named("gemma-general", base + bucket * 60 + 2 + i))
    for i in range(3):
        svc.controller.demand.observe(named("gemma-coder", base + 9 * 60 + 1 + i))
    clock.now = base + 10 * 60 + 30


@pytest.mark.anyio
async def test_correlated_demand_reaches_the_live_plan_as_inferred_only(service: Any) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir,
            "local-1",
            client,
            clock,
            cached={"gemma-coder": GEMMA_SHA, "gemma-general": GEMMA_SHA},
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=2)  # configures the book and the learners
        co_active_history(svc, clock)
        svc.controller.mark_dirty()
        await converge(svc, [node], rounds=8)
        status = (await client.get("/allocator/status")).json()
        assert list(validator("wire/status.schema.json").iter_errors(status)) == []
        forecasts = {d["model_id"]: d for d in status["forecasts"]}
        general = forecasts["gemma-general"]
        # direct evidence stays separate: none of general's fields but the correlated one
        assert general["requests_per_minute"] == 0 and general["sample_count"] == 0
        assert general["queue_depth"] == 0 and general["error_rate"] == 0
        assert general["correlated_requests_per_minute"] > 0
        assert general["sources"] == ["gemma-coder"]
        assert forecasts["gemma-coder"]["requests_per_minute"] > 0
        assert forecasts["gemma-coder"]["sources"] == []
        assert status["plan"]["targets"]["gemma-general"] == 1
        warmed = [c["model_id"] for c in node.executed if c["kind"] == "warm"]
        assert sorted(warmed) == ["gemma-coder", "gemma-general"]


@pytest.mark.anyio
async def test_correlated_demand_never_displaces_a_directly_demanded_model(
    service: Any,
) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir,
            "local-1",
            client,
            clock,
            capacity_mb=1000,  # room for one of the two models only
            cached={"gemma-coder": GEMMA_SHA, "gemma-general": GEMMA_SHA},
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=2)
        co_active_history(svc, clock)
        svc.controller.mark_dirty()
        await converge(svc, [node], rounds=8)
        status = (await client.get("/allocator/status")).json()
        forecasts = {d["model_id"]: d for d in status["forecasts"]}
        assert forecasts["gemma-general"]["correlated_requests_per_minute"] > 0
        assert status["plan"]["preemptions"] == []
        kinds = [(c["kind"], c["model_id"]) for c in node.executed]
        assert ("warm", "gemma-coder") in kinds
        assert all(m != "gemma-general" for _, m in kinds)
        assert all(k not in ("drain", "unload") for k, _ in kinds)


@pytest.mark.anyio
async def test_repeated_status_reuses_the_portfolio_only_for_identical_inputs(
    service: Any,
) -> None:
    svc, app, clock = service
    admin = {"X-Grid-Allocator-Token": svc.operator_token}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "local-1", client, clock, cached={"gemma-coder": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=2)
        svc.stop_ticking()  # only status queries solve from here on

        async def bundle() -> tuple[bool, int, list[Any]]:
            status = (await client.get("/allocator/status")).json()
            assert list(validator("wire/status.schema.json").iter_errors(status)) == []
            reuse = status["portfolio_bundle"]
            return reuse["reused"], reuse["telemetry_revision"], status["admission"]

        await bundle()
        reused, revision, rows = await bundle()
        assert reused and rows == []  # identical inputs: the same bundle
        # a new request advances the telemetry revision: a fresh solve that sees it
        svc.controller.demand.observe(unbound_coding(clock.now))
        reused, after_request, rows = await bundle()
        assert not reused and after_request == revision + 1
        assert [(r["workload"], r["state"]) for r in rows] == [("coding", "awaiting-plan")]
        assert (await bundle())[0]
        # a recorded evaluation does the same
        body = {"model_id": "gemma-coder", "workload": "coding", "quality": 0.9}
        assert (
            await client.post("/allocator/evaluations", headers=admin, json=body)
        ).status_code == 200
        reused, after_evaluation, _ = await bundle()
        assert not reused and after_evaluation == after_request + 1
        assert (await bundle())[0]
        # an identical heartbeat changes no node snapshot; a different one, or a new
        # timestamp, forces a fresh solve
        await node.heartbeat(request_commands=False)
        assert (await bundle())[0]
        node.capacity_mb = 4096
        await node.heartbeat(request_commands=False)
        assert not (await bundle())[0]
        assert (await bundle())[0]
        clock.now += 1
        assert not (await bundle())[0]
        assert (await bundle())[0]


@pytest.mark.anyio
async def test_outcome_evidence_survives_a_controller_restart(service: Any) -> None:
    svc, app, clock = service
    admin = {"X-Grid-Allocator-Token": svc.operator_token}
    body = {"model_id": "gemma-coder", "workload": "coding", "quality": 0.9}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        await client.post("/allocator/tick", headers=admin)
        for i in range(3):
            served = RequestObservation(
                t=clock.now + i,
                endpoint="chat",
                model="auto",
                served_model="gemma-coder",
                host_id="local-1",
                outcome="ok",
                status=200,
                service_seconds=0.5,
                workload="coding",
            )
            svc.controller.demand.observe(served)
        ok = await client.post("/allocator/evaluations", headers=admin, json=body)
        assert ok.status_code == 200, ok.text
        assert (await client.post("/allocator/tick", headers=admin)).status_code == 200
    before = svc.controller.demand.picture(clock.now + 60).outcomes
    assert [(round(o.samples, 2), round(o.evaluations, 2)) for o in before] == [(3.0, 1.0)]
    svc.stop_ticking()

    restarted = ControllerService(svc.options)
    after = restarted.controller.demand.picture(clock.now + 60).outcomes
    assert after == before  # service and quality evidence, each with its own age
