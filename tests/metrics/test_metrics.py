"""``GET /metrics`` after a short in-process run: parses as Prometheus text, carries each series."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gridctl.metrics import record_circuit_opening
from tests.controller.simnodes import FAILING_PROMPT, GEMMA_SHA
from tests.gitops.inprocess import controller, desired_dir, profile_yaml

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def n_other_requests(found: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return sum(
        v
        for (name, labels), v in found.items()
        if name == "gridctl_router_requests_total" and ("model", "other") in labels
    )


async def test_metrics_carry_every_series_with_sensible_values(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        idle = h.node("local-2", failure_domain="zone-b")
        assert (await idle.register()).status_code == 200
        directory = desired_dir(tmp_path / "desired", gemma=1)
        # a profile no host can hold, for an unsatisfied constraint
        (directory / "big.yaml").write_text(profile_yaml("big", 1, memory_mb=999_999))
        assert (await h.apply(await h.saved_plan(directory))).status_code == 200
        await h.converge([node, idle])
        for _ in range(3):
            reply = await h.client.post(
                "/v1/chat/completions",
                json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert reply.status_code == 200
        unknown = await h.client.post(
            "/v1/chat/completions",
            json={"model": "nope", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert unknown.status_code == 404
        failing = {"model": "gemma", "messages": [{"role": "user", "content": FAILING_PROMPT}]}
        for _ in range(2):  # two engine failures in a row open local-1's circuit
            assert (await h.client.post("/v1/chat/completions", json=failing)).status_code == 503
        unplaceable = await h.client.post(
            "/v1/chat/completions",
            json={"model": "big", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert unplaceable.status_code == 503
        # an engine no profile names: its model is counted as "other", never by name
        vendor = {"endpoint": "https://engine.vendor.test", "model_id": "vendor-x", "kind": "vllm"}
        assert (await h.admin("PUT", "/allocator/external/vendor", json=vendor)).status_code == 200
        await h.service.probe_once(h.service.upstream)
        external = await h.client.post(
            "/v1/chat/completions",
            json={"model": "vendor-x", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert external.status_code == 200  # ready: it lists vendor-x and answers it

        assert h.service.tap.flush()  # observations reach their sinks on a worker thread
        with h.service.controller.tick_lock:  # the store and the metrics read at rest
            pending = h.service.store.pending()
            response = await h.client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        found = samples(response.text)

    assert value(found, "gridctl_tick_duration_seconds_count") >= 2
    assert value(found, "gridctl_tick_duration_seconds_sum") > 0
    ticks = value(found, "gridctl_tick_duration_seconds_count")
    for phase in ("renew", "gather", "plan", "commit"):  # every successful pass ran each
        assert value(found, "gridctl_tick_phase_seconds_count", phase=phase) == ticks
    assert value(found, "gridctl_tick_phase_seconds_sum", phase="plan") > 0
    assert value(found, "gridctl_ticks_total", outcome="ok") >= 2
    assert value(found, "gridctl_router_requests_total", model="gemma", outcome="ok") == 3
    assert value(found, "gridctl_router_requests_total", model="gemma", outcome="error") == 2
    assert value(found, "gridctl_router_requests_total", model="big", outcome="rejected") == 1
    others = [v for (n, labels), v in found.items() if ("model", "other") in labels]
    assert n_other_requests(found) == 1 and others, found
    assert not any(("model", m) in labels for _n, labels in found for m in ("nope", "vendor-x"))
    assert (
        value(found, "gridctl_router_request_duration_seconds_count", model="gemma", outcome="ok")
        == 3
    )
    assert (
        value(found, "gridctl_circuit_breaker_openings_total", model="gemma", host="local-1") == 1
    )
    assert value(found, "gridctl_hosts", state="accepting") == 3  # two nodes, one vendor engine
    assert value(found, "gridctl_hosts", state="quarantined") == 0
    assert value(found, "gridctl_residencies", state="ready", ownership="managed") == 1
    assert value(found, "gridctl_plan_assignments", existing="true") == 1
    assert value(found, "gridctl_plan_preemptions") == 0
    # the opened circuit leaves gemma short on local-1: whatever the tick queued shows
    queued = sum(1 for p in pending if not p.delivered)
    assert value(found, "gridctl_pending_commands", state="queued") == queued
    assert value(found, "gridctl_pending_commands", state="delivered") == len(pending) - queued
    assert value(found, "gridctl_withdrawn_destructive_commands") == 0
    assert value(found, "gridctl_mode", mode="automatic") == 1
    codes = {
        labels: v
        for (name, labels), v in found.items()
        if name == "gridctl_unsatisfied_constraints"
    }
    assert len(codes) >= 9 and sum(codes.values()) >= 1


def test_circuit_opening_is_safe_without_controller_metrics() -> None:
    record_circuit_opening("gemma", "local-1")  # no live controller: does nothing, raises nothing
