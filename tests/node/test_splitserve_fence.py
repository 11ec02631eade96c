"""The coordinator warm's fence and wire reading, without processes.

``judge_coordinator_warm`` must agree with the specification's load fence
(``gridctl.split.judge_load``) on random held claims and warms: it never lets through
what the library refuses, it refuses with the library's reason (an older term being
``stale_term``), and past the fence it lets through exactly the warms of this
host's own serving stage.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridctl.domain.actions import SplitServe, SplitServeStage
from gridctl.errors import WireError
from gridctl.node.rpctunnel import TlsIdentity
from gridctl.node.splitlinks import SplitLaunch, stage_address
from gridctl.node.splitserve import judge_coordinator_warm, split_serve
from gridctl.node.stageclaims import HeldClaim, StageAssignment, StageClaim
from gridctl.split import Claim, StageLoad, judge_load

NOW = 1_800_000_000_000
HOST = "host-a"


def claim(term: int, coordinator: str, generation: str, lease_ms: int) -> Claim:
    return Claim("gemma", "pkg", "ab" * 32, coordinator, term, f"topology-{generation}",
                 f"run-{generation}", "participants", "hash", NOW + lease_ms)  # fmt: skip


def serve_of(claimed: Claim, stages: tuple[SplitServeStage, ...]) -> SplitServe:
    return SplitServe(claimed.model_id, claimed.package_ref, claimed.manifest_sha256,
                      claimed.coordinator_id, claimed.coordinator_term, claimed.topology_id,
                      claimed.run_id, stages)  # fmt: skip


STAGES = (
    SplitServeStage(HOST, "127.0.0.1:41001", 0, 9),
    SplitServeStage("host-b", "127.0.0.1:41002", 9, 18),
)
OTHER_STAGES = (
    SplitServeStage(HOST, "127.0.0.1:41001", 0, 8),
    SplitServeStage("host-b", "127.0.0.1:41002", 8, 18),
)

terms = st.integers(min_value=1, max_value=4)
coordinators = st.sampled_from([HOST, "host-b"])
generations = st.sampled_from(["g1", "g2"])
leases = st.sampled_from([-1, 0, 60_000])


@given(
    held_present=st.booleans(),
    serving=st.booleans(),
    held=st.tuples(terms, coordinators, generations, leases),
    warm=st.tuples(terms, coordinators, generations),
    same_stages=st.booleans(),
)
def test_the_coordinator_fence_agrees_with_the_library_load_fence(
    held_present: bool,
    serving: bool,
    held: tuple[int, str, str, int],
    warm: tuple[int, str, str],
    same_stages: bool,
) -> None:
    held_claim = claim(*held)
    holding = (
        HeldClaim(StageClaim(held_claim, StageAssignment(0, 2, 0, 9)), serving)
        if held_present
        else None
    )
    serve = serve_of(claim(*warm, lease_ms=0), STAGES if same_stages else OTHER_STAGES)
    refusal = judge_coordinator_warm(holding, serve, HOST, NOW)

    current = held_claim if held_present else None
    load = StageLoad(serve.model_id, serve.package_ref, serve.manifest_sha256,
                     serve.coordinator_id, serve.coordinator_term, serve.topology_id,
                     serve.run_id)  # fmt: skip
    library = judge_load(current, load, NOW)
    if serve.coordinator_id != HOST:
        assert refusal is not None and refusal.reason == "not_coordinator"
    elif not library.accepted:
        assert refusal is not None and refusal.status == "rejected"
        older = current is not None and serve.coordinator_term < current.coordinator_term
        expected = "stale_term" if older else str(library.reason)
        assert refusal.reason == expected
    elif not serving:
        assert refusal is not None and refusal.reason == "stage_not_serving"
    elif not same_stages:
        assert refusal is not None and refusal.reason == "stage_mismatch"
    else:
        assert refusal is None
    if refusal is None:  # what passes is exactly the held generation, in its lease
        assert current is not None and library.accepted and serving
        assert (serve.coordinator_term, serve.topology_id, serve.run_id) == (
            current.coordinator_term, current.topology_id, current.run_id)  # fmt: skip


def wire(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "claim": {"model_id": "gemma", "package_ref": "pkg", "manifest_sha256": "ab" * 32,
                  "coordinator_id": HOST, "coordinator_term": 2, "topology_id": "t",
                  "run_id": "r"},
        "stages": [{"host_id": s.host_id, "endpoint": s.endpoint, "layer_start": s.layer_start,
                    "layer_end": s.layer_end} for s in STAGES],
    }  # fmt: skip
    base.update(changes)
    return base


def test_a_well_formed_split_serve_reads_into_its_stages_and_tensor_split() -> None:
    read = split_serve(wire())
    assert read.stages == STAGES and read.coordinator_term == 2
    launch = SplitLaunch(read, TlsIdentity(*(3 * [None])))  # type: ignore[arg-type]
    assert launch.tensor_split == (9, 9)
    assert stage_address(SplitServeStage("h", "[::1]:4000", 0, 1), "/s") == ("::1", 4000)


@pytest.mark.parametrize(
    ("data", "pointer"),
    [
        (None, "/split_serve"),
        (wire(claim="x"), "/split_serve/claim"),
        (wire(claim={**wire()["claim"], "coordinator_term": 0}),
         "/split_serve/claim/coordinator_term"),
        (wire(claim={**wire()["claim"], "run_id": 7}), "/split_serve/claim/run_id"),
        (wire(stages=wire()["stages"][:1]), "/split_serve/stages"),
        (wire(stages=[{**wire()["stages"][0], "layer_start": 1}, wire()["stages"][1]]),
         "/split_serve/stages/0/layer_start"),
        (wire(stages=[wire()["stages"][0], {**wire()["stages"][1], "layer_end": 9}]),
         "/split_serve/stages/1/layer_end"),
        (wire(stages=[wire()["stages"][0], {**wire()["stages"][1], "endpoint": "nohost"}]),
         "/split_serve/stages/1/endpoint"),
        (wire(stages=[wire()["stages"][0], {**wire()["stages"][1], "layer_end": True}]),
         "/split_serve/stages/1/layer_end"),
        (wire(stages=["x", "y"]), "/split_serve/stages/0"),
    ],
)  # fmt: skip
def test_a_malformed_split_serve_names_its_field(data: Any, pointer: str) -> None:
    with pytest.raises(WireError) as info:
        split_serve(data)
    assert pointer in str(info.value)
