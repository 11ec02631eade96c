"""The authority fence on a node: ``admit_command``, table-driven."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gridctl.errors import FenceError
from gridctl.reconcile import (
    AdmissionReason,
    FencedCommand,
    NodeFenceState,
    PlanGeneration,
    admit_command,
)

EPOCH = "c91d"
GEN_42 = str(PlanGeneration(EPOCH, 42, "4fc1"))
GEN_41 = str(PlanGeneration(EPOCH, 41, "4fc1"))
GEN_OTHER_EPOCH = str(PlanGeneration("beef", 1, "aa"))

HELD = NodeFenceState(
    host_id="host-a",
    highest_term=7,
    controller_id="ctl-1",
    generation=PlanGeneration(EPOCH, 42, "4fc1"),
)
FRESH = NodeFenceState(host_id="host-a")


def command(**changes: object) -> FencedCommand:
    base = FencedCommand(
        action_id="8ccf",
        node_id="host-a",
        plan_generation=GEN_42,
        executable=True,
        controller_term=7,
        controller_id="ctl-1",
        controller_lease_expires_at=1_788_020_000.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


CASES = [
    # (name, state, command changes, remaining ttl, request duration, expected reason)
    ("same term, same controller", HELD, {}, 14.8, 0.2, None),
    (
        "same term, other controller",
        HELD,
        {"controller_id": "ctl-2"},
        14.8,
        0.2,
        "conflicting_controller",
    ),
    (
        "lower term after a restart",
        HELD,
        {"controller_term": 6, "controller_id": "old"},
        14.8,
        0.2,
        "stale_term",
    ),
    (
        "higher term takes over",
        HELD,
        {"controller_term": 8, "controller_id": "ctl-2"},
        14.8,
        0.2,
        None,
    ),
    ("expired lease", HELD, {}, 0.0, 0.0, "expired_ttl"),
    ("lease eaten by the request", HELD, {}, 1.0, 1.5, "expired_ttl"),
    ("fenced command without a ttl", HELD, {}, None, 0.0, "missing_ttl"),
    ("another host", HELD, {"node_id": "host-b"}, 14.8, 0.2, "wrong_host"),
    ("older generation", HELD, {"plan_generation": GEN_41}, 14.8, 0.2, "stale_generation"),
    ("same generation again", HELD, {"plan_generation": GEN_42}, 14.8, 0.2, None),
    (
        "new epoch, same term",
        HELD,
        {"plan_generation": GEN_OTHER_EPOCH},
        14.8,
        0.2,
        "generation_epoch_changed",
    ),
    (
        "new epoch, new term",
        HELD,
        {"plan_generation": GEN_OTHER_EPOCH, "controller_term": 8, "controller_id": "ctl-9"},
        14.8,
        0.2,
        None,
    ),
    ("a recommendation", HELD, {"executable": False}, 14.8, 0.2, "not_executable"),
    (
        "malformed generation",
        HELD,
        {"plan_generation": "c91d:42:4fc1"},
        14.8,
        0.2,
        "malformed_generation",
    ),
    (
        "legacy after fenced",
        HELD,
        {"controller_term": 0, "controller_id": None},
        None,
        0.0,
        "legacy_after_fenced",
    ),
    (
        "legacy on a fresh node",
        FRESH,
        {"controller_term": 0, "controller_id": None},
        None,
        0.0,
        None,
    ),
    ("fenced without identity", FRESH, {"controller_id": None}, 14.8, 0.2, "missing_controller_id"),
    ("first fenced command", FRESH, {}, 14.8, 0.2, None),
]


@pytest.mark.parametrize(
    ("name", "state", "changes", "ttl", "duration", "reason"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_admit_command(
    name: str,
    state: NodeFenceState,
    changes: dict[str, object],
    ttl: float | None,
    duration: float,
    reason: str | None,
) -> None:
    admission = admit_command(
        state, command(**changes), ttl, request_duration=duration, now_monotonic=1000.0
    )
    assert admission.accepted is (reason is None), name
    assert (admission.reason.value if admission.reason else None) == reason
    if reason is not None:
        assert admission.state == state  # a rejection never moves the fence
        with pytest.raises(FenceError) as err:
            admission.raise_if_rejected()
        assert err.value.reason == reason


def test_acceptance_returns_a_local_monotonic_deadline_and_the_new_state() -> None:
    admission = admit_command(
        HELD,
        command(controller_term=8, controller_id="ctl-2"),
        10.0,
        request_duration=0.5,
        now_monotonic=500.0,
    )
    assert admission.deadline == pytest.approx(509.5)
    assert admission.state.highest_term == 8 and admission.state.controller_id == "ctl-2"


def test_a_lower_term_stays_rejected_after_the_state_is_persisted_and_reloaded() -> None:
    taken = admit_command(HELD, command(controller_term=8, controller_id="ctl-2"), 5.0).state
    reloaded = NodeFenceState(**taken.__dict__)  # what a durable restore gives back
    for term in (1, 6, 7):
        assert admit_command(reloaded, command(controller_term=term), 5.0).reason is (
            AdmissionReason.STALE_TERM
        )


def test_once_fenced_never_back_to_term_zero() -> None:
    state = admit_command(FRESH, command(), 5.0).state
    assert state.fenced
    legacy = command(controller_term=0, controller_id=None)
    assert admit_command(state, legacy, None).reason is AdmissionReason.LEGACY_AFTER_FENCED


def test_wire_commands_parse_into_fenced_commands() -> None:
    parsed = FencedCommand.from_wire(
        {
            "action_id": "8ccf",
            "kind": "warm",
            "node_id": "host-a",
            "model_id": "m",
            "plan_generation": GEN_42,
            "controller_term": 7,
            "controller_id": "ctl-1",
            "controller_lease_expires_at": 1788020000,
            "executable": True,
        }
    )
    assert parsed == command()
    assert (
        FencedCommand.from_wire(
            {"action_id": "x", "node_id": "h", "plan_generation": GEN_42, "executable": True}
        ).controller_term
        == 0
    )
