"""Learned timings: each boundary of the rules, and their way into live placement.

Rules (pure, ``gridctl.tick.timings``): an eight-sample EWMA, blended with
the prior below four samples and authoritative at four; thirty days after the
last sample it expires; a report that is not a finite number from 0 to 3,600
seconds is ignored. Through the controller: four real fetches acknowledged on
one of two identical hosts make a placement go there that, on the priors
alone, goes to the other host (its id sorts first); a checksum change resets it.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.domain import ActionKind, ControllerPolicy, Receipt, ReceiptStatus
from gridctl.reconcile import ControllerMemory
from gridctl.tick.timings import LearnedTiming, estimate, learn, valid_report
from tests.controller.simnodes import SimNode, sim_service, watched_dir
from tests.controller.storefixtures import queued

POLICY = ControllerPolicy()
DAY = 86_400.0
T0 = 1_000_000.0


def _samples(*values: float) -> LearnedTiming:
    learned: LearnedTiming | None = None
    for value in values:
        learned = learn(learned, value, T0, POLICY)
    assert learned is not None
    return learned


def test_three_samples_blend_with_the_prior_and_four_are_authoritative() -> None:
    three = _samples(10.0, 10.0, 10.0)
    assert not three.authoritative(POLICY)
    assert estimate(100.0, three, T0, POLICY) == pytest.approx(0.75 * 10.0 + 0.25 * 100.0)
    four = _samples(10.0, 10.0, 10.0, 10.0)
    assert four.authoritative(POLICY)
    assert estimate(100.0, four, T0, POLICY) == 10.0


def test_the_ewma_averages_eight_samples_then_moves_by_an_eighth() -> None:
    eight = _samples(*[float(i) for i in range(1, 9)])
    assert eight.seconds == pytest.approx(4.5)
    ninth = learn(eight, 12.5, T0, POLICY)
    assert ninth.seconds == pytest.approx(4.5 + (12.5 - 4.5) / 8)


def test_thirty_days_is_the_expiry_boundary() -> None:
    learned = _samples(10.0, 10.0, 10.0, 10.0)
    assert estimate(100.0, learned, T0 + 30 * DAY, POLICY) == 10.0
    assert estimate(100.0, learned, T0 + 30 * DAY + 1, POLICY) == 100.0
    relearned = learn(learned, 50.0, T0 + 30 * DAY + 1, POLICY)
    assert (relearned.samples, relearned.seconds) == (1, 50.0)


@pytest.mark.parametrize(
    ("report", "valid"),
    [
        (0.0, True),
        (3600.0, True),
        (3600.001, False),
        (-0.001, False),
        (math.nan, False),
        (math.inf, False),
        (-math.inf, False),
        (True, False),
        ("12", False),
        (None, False),
    ],
)
def test_over_one_hour_negative_and_non_finite_reports_are_ignored(
    report: object, valid: bool
) -> None:
    assert valid_report(report, POLICY) is valid


def _profile(sha: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: m}}
        spec:
          memory_mb: 1024
          artifact: {{sha256: '{sha}'}}
          load_seconds: 300
          warm_seconds: 20
          min_replicas: 1
          max_replicas: 1
        """)


@pytest.fixture
def service(tmp_path: Path) -> Any:
    watch = watched_dir(tmp_path, {"m.yaml": _profile("a" * 64)})
    svc, clock = sim_service(tmp_path, watch_dir=watch)
    app = svc.build_app()
    yield svc, app, watch, clock


def _fetch(svc: Any, host_id: str, seconds: float, attempt: int, sha: str = "a" * 64) -> None:
    pending = queued(ActionKind.LOAD, host_id, "m", sha=sha, attempt=attempt)
    svc.controller.store.apply_tick([pending], [], ControllerMemory())
    svc.controller.store.record_acknowledgement(
        Receipt(
            action_id=pending.action.action_id,
            status=ReceiptStatus.SUCCEEDED,
            duration_seconds=seconds,
            artifact_fetched=True,
        ),
        host_id=None,
    )


def _placed(svc: Any) -> list[str]:
    _, outcome = svc.controller.dry_run()
    return [a.host_id for a in outcome.plan.assignments if a.model_id == "m"]


@pytest.mark.anyio
async def test_a_learned_fast_cold_fetch_wins_a_placement_it_loses_on_priors(
    service: Any,
) -> None:
    svc, app, watch, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        nodes = [
            SimNode.for_controller(svc.options.state_dir, h, client, clock)
            for h in ("a-host", "b-host")
        ]
        for node in nodes:
            assert (await node.register()).status_code == 200
            await node.heartbeat(request_commands=False)
        assert _placed(svc) == ["a-host"]  # equal on priors: the host id decides
        for attempt in range(4):
            _fetch(svc, "b-host", 6.0, attempt)
        inputs, _ = svc.controller.dry_run()
        learned = {h.host_id: h.learned for h in inputs.observed.hosts}
        assert learned["a-host"] == ()
        assert [(r.model_id, r.load_seconds, r.warm_seconds) for r in learned["b-host"]] == [
            ("m", 6.0, 20.0)
        ]
        assert _placed(svc) == ["b-host"]

        # new weights: the learned fetch was of the old checksum, the priors decide again
        (watch / "m.yaml").write_text(_profile("b" * 64))
        svc.source.reload()
        assert _placed(svc) == ["a-host"]
