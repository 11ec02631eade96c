"""The canary rules, each on both sides of its boundary (allocator.md, "Image and video
work between 1.0 and 1.5 offered-concurrency units ...").

- A media canary needs, beyond the fleet's spare-capacity proof, a second host that is
  compatible with some model that scores the workload.
- A fresh successful response from the exact model, workload and artifact validates a
  weak-evidence canary and removes its one-replica cap; a stale, failed or other-artifact
  response does not.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gridctl.demand import OutcomeScore
from gridctl.domain.profiles import Artifact
from gridctl.planner.portfolio import plan_portfolio
from tests.portfolio.builders import POLICY, box, inputs, model, workload

WINDOW = POLICY.demand_bucket_seconds * POLICY.demand_window_buckets
SHA = "a" * 64


def states(result: object) -> dict[str, str]:
    return {r.workload: r.state.value for r in result.admission}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("tagged", "expected"), [(1, "awaiting-plan"), (2, "planned")])
def test_a_media_canary_needs_a_second_compatible_host(tagged: int, expected: str) -> None:
    image = (model("image-gen", {"image": 1.0}, required_tags=("gpu",)),)
    hosts = tuple(box(f"b{i}", slots=2) for i in range(4))
    hosts = tuple(
        replace(h, resources=replace(h.resources, tags=("gpu",))) if i < tagged else h
        for i, h in enumerate(hosts)
    )
    result = plan_portfolio(inputs(image, hosts, (workload("image", 1, 1.0),)))
    assert states(result) == {"image": expected}
    (gate,) = result.gates
    if expected == "awaiting-plan":
        assert not gate.admitted and "second compatible host" in gate.reason
    else:
        assert gate.admitted and gate.path == "media-canary"


def outcome(age: float, success: float | None = 1.0, sha: str = SHA) -> OutcomeScore:
    return OutcomeScore(
        model_id="coder-7b",
        workload="coding",
        artifact_sha256=sha,
        samples=1.0,
        confidence=0.05,
        success_rate=success,
        mean_service_seconds=4.0,
        evaluations=0.0,
        quality=None,
        quality_confidence=0.0,
        service_age_seconds=age,
        quality_age_seconds=None,
        exploration_bonus=0.0,
    )


@pytest.mark.parametrize(
    ("evidence", "capped"),
    [
        (None, True),  # no response yet: one canary
        (outcome(60.0), False),  # fresh success on this artifact: the cap is gone
        (outcome(WINDOW), False),  # at the edge of the demand window, still fresh
        (outcome(WINDOW + 1.0), True),  # stale
        (outcome(60.0, success=0.0), True),  # only failures
        (outcome(60.0, sha="b" * 64), True),  # a response from other weights
    ],
)
def test_a_fresh_successful_response_lifts_the_canary_cap(
    evidence: OutcomeScore | None, capped: bool
) -> None:
    coder = replace(
        model("coder-7b", {"coding": 1.0}), max_replicas=4, artifact=Artifact(sha256=SHA)
    )
    busy = workload("coding", requests=2, concurrency=6.0, requests_per_minute=90.0)
    base = inputs((coder,), tuple(box(f"b{i}", slots=2) for i in range(4)), (busy,))
    result = plan_portfolio(replace(base, outcomes=(evidence,) if evidence else ()))
    (gate,) = result.gates
    assert gate.admitted and gate.canary_only  # weak evidence: two requests
    target = dict(result.plan.targets)["coder-7b"]
    assert (target == 1) is capped, target
