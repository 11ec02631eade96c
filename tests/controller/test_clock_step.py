"""A backward step of the controller's wall clock does not stretch cooldowns and fences.

Finish and observation times recorded while the clock ran ahead lie in the
future once it is corrected; without a rebase, the mutation cooldown, failure
backoff and observation fencing would wait until those old timestamps came
round (an hour, for an hour's step). The tick moves them to the corrected time
once, durably, and says so in its history. (The real-process drill is
``tests/faults/test_controller_faults.py::test_controller_wall_clock_jump``.)
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.domain import ActionKind, ControllerPolicy, Receipt, ReceiptStatus
from gridctl.reconcile import ControllerMemory
from gridctl.reconcile.pacing import HistoryIndex
from tests.controller.simnodes import Clock, engine_handler
from tests.controller.storefixtures import queued

T = 1_000_000.0


@pytest.fixture
def service(tmp_path: Path) -> Any:
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "m.yaml").write_text(
        textwrap.dedent("""\
            apiVersion: gridctl/v1
            kind: ModelProfile
            metadata: {name: m}
            spec:
              memory_mb: 1024
              artifact: {sha256: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}
              min_replicas: 1
              max_replicas: 1
            """)
    )
    clock = Clock(T)
    svc = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            watch_dir=watch,
            clock=clock,
            upstream_transport=httpx.MockTransport(engine_handler),
        )
    )
    return svc, clock


def _unload_finished(svc: Any) -> None:
    pending = queued(ActionKind.UNLOAD, "h1", "m")
    svc.controller.store.apply_tick([pending], [], ControllerMemory())
    svc.controller.store.record_acknowledgement(
        Receipt(action_id=pending.action.action_id, status=ReceiptStatus.SUCCEEDED), host_id=None
    )


def test_a_backward_step_moves_future_history_to_now_once(service: Any) -> None:
    svc, clock = service
    clock.now = T + 3600  # the clock ran an hour ahead while this unload finished
    _unload_finished(svc)
    clock.now = T  # corrected
    svc.controller.tick()
    (entry,) = svc.controller.store.history()
    assert entry.effective_at == T
    steps = [e for e in svc.controller.events if e["event"] == "clock_stepped_back"]
    assert len(steps) == 1 and steps[0]["message"].startswith("3600s: 1 recorded")
    # the cooldown after that unload now ends one cooldown after the correction
    policy = ControllerPolicy()
    opposite = HistoryIndex(svc.controller.store.history()).last_direction[("h1", "m", True)]
    assert opposite + policy.mutation_cooldown_seconds == T + policy.mutation_cooldown_seconds
    clock.now = T + 1
    svc.controller.tick()  # nothing more to move: no second event
    assert len([e for e in svc.controller.events if e["event"] == "clock_stepped_back"]) == 1


def test_a_step_within_the_tolerance_or_forward_moves_nothing(service: Any) -> None:
    svc, clock = service
    clock.now = T + 3
    _unload_finished(svc)
    clock.now = T  # 3 s: ordinary skew between writers, not a step
    svc.controller.tick()
    clock.now = T + 7200  # forward: nothing recorded is in the future
    svc.controller.tick()
    (entry,) = svc.controller.store.history()
    assert entry.effective_at == T + 3
    assert not [e for e in svc.controller.events if e["event"] == "clock_stepped_back"]


@pytest.mark.anyio
async def test_a_backward_step_moves_the_held_reports_times_to_now(tmp_path: Path) -> None:
    """A residency reported while the clock ran an hour ahead keeps its load time from
    that clock until the node's next full inventory; the step moves it (and the router's
    last-use watermark) to now, so a minimum residency is not stretched by an hour."""
    from tests.controller.simnodes import GEMMA_SHA, SimNode, SimResidency, sim_service
    from tests.controller.test_http_flow import POLICY, profile

    files = {"policy.yaml": POLICY, "gemma.yaml": profile("gemma", min_replicas=1)}
    service, clock = sim_service(tmp_path, files, clock=Clock(T + 3600))
    app = service.build_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(tmp_path / "state", "h1", client, clock)
        node.residencies["gemma"] = SimResidency("gemma", 640, "ready", GEMMA_SHA, T + 3500)
        assert (await node.register()).status_code < 300
        await node.heartbeat(request_commands=False)
    service.controller.tick()  # the controller saw the clock an hour ahead
    registry = service.registry
    registry.request_finished("h1", "gemma", T + 3600)
    (before,) = registry.host("h1").residencies  # type: ignore[union-attr]
    assert before.loaded_at == pytest.approx(T + 3500, abs=1)
    clock.now = T  # corrected
    service.controller.tick()
    record = registry.host("h1")
    assert record is not None
    (after,) = record.residencies
    assert after.loaded_at == T and record.last_heartbeat == T and record.registered_at == T
    assert registry.last_used_watermarks()["gemma"] == T
    (step,) = [e for e in service.controller.events if e["event"] == "clock_stepped_back"]
    assert "recorded time(s) moved to now" in step["message"]
    # times already at or before now stay as they are, and a second tick moves nothing
    clock.now = T + 1
    service.controller.tick()
    assert registry.host("h1").residencies[0].loaded_at == T  # type: ignore[union-attr]
    assert len([e for e in service.controller.events if e["event"] == "clock_stepped_back"]) == 1


class Elapsed:
    """A monotonic clock the test moves (the controller's ``monotonic``)."""

    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.anyio
@pytest.mark.parametrize("told", [True, False], ids=["monotonic", "no-monotonic"])
async def test_a_forward_step_keeps_every_living_host_fresh(tmp_path: Path, told: bool) -> None:
    """The wall clock steps an hour ahead while one second elapses: with a monotonic clock
    the controller tells the step from elapsed time and moves the heartbeats received
    before it forward, so no host looks an hour stale; a controller given no monotonic
    clock (a test's own wall clock) detects nothing and moves nothing."""
    from tests.controller.simnodes import SimNode, sim_service
    from tests.controller.test_http_flow import POLICY, profile

    elapsed = Elapsed()
    files = {"policy.yaml": POLICY, "gemma.yaml": profile("gemma", min_replicas=1)}
    service, clock = sim_service(
        tmp_path, files, clock=Clock(T), monotonic=elapsed if told else None
    )
    app = service.build_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(tmp_path / "state", "h1", client, clock)
        late = SimNode.for_controller(tmp_path / "state", "h2", client, clock)
        assert (await node.register()).status_code < 300
        assert (await late.register()).status_code < 300
        await node.heartbeat(request_commands=False)
        service.controller.tick()
        # h2's heartbeat comes after that tick's check and before the step
        clock.now, elapsed.now = T + 0.5, elapsed.now + 0.5
        await late.heartbeat(request_commands=False)
    clock.now, elapsed.now = T + 3600 + 1, elapsed.now + 0.5
    service.controller.tick()
    record, other = service.registry.host("h1"), service.registry.host("h2")
    assert record is not None and other is not None
    steps = [e for e in service.controller.events if e["event"] == "clock_stepped_forward"]
    if told:
        assert record.last_heartbeat == pytest.approx(T + 3600, abs=0.01)
        assert other.last_heartbeat == pytest.approx(T + 3600.5, abs=0.01)
        assert len(steps) == 1 and steps[0]["message"].startswith("3600s: 2 host")
        # ordinary time passing is no step: nothing moves again
        clock.now, elapsed.now = clock.now + 30, elapsed.now + 30
        service.controller.tick()
        assert service.registry.host("h1").last_heartbeat == record.last_heartbeat  # type: ignore[union-attr]
        assert (
            len([e for e in service.controller.events if e["event"] == "clock_stepped_forward"])
            == 1
        )
    else:
        assert record.last_heartbeat == T and other.last_heartbeat == T + 0.5 and not steps
