"""The authority fence on a node: ``admit_command``, table-driven."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_defaults_measure_nothing_and_start_the_deadline_at_zero() -> None:
    # without a measured request duration the whole remaining TTL is the authority left
    admission = admit_command(HELD, command(), 0.5)
    assert admission.accepted and admission.deadline == pytest.approx(0.5)


def test_a_sliver_of_ttl_left_after_the_request_is_still_authority() -> None:
    admission = admit_command(HELD, command(), 1.0, request_duration=0.5, now_monotonic=10.0)
    assert admission.accepted and admission.deadline == pytest.approx(10.5)


def test_a_legacy_command_without_ttl_has_no_deadline_and_adopts_no_identity() -> None:
    legacy = command(controller_term=0, controller_id="someone")
    admission = admit_command(FRESH, legacy, None)
    assert admission.accepted and admission.deadline is None
    assert admission.state.controller_id is None and not admission.state.fenced


def test_term_one_is_a_fenced_term() -> None:
    assert admit_command(FRESH, command(controller_term=1, controller_id=None), 5.0).reason is (
        AdmissionReason.MISSING_CONTROLLER_ID
    )
    first = admit_command(FRESH, command(controller_term=1, controller_id="ctl-a"), 5.0)
    assert first.accepted and first.state.controller_id == "ctl-a" and first.state.fenced
    assert admit_command(FRESH, command(controller_term=1, controller_id="ctl-a"), None).reason is (
        AdmissionReason.MISSING_TTL
    )
    higher = replace(FRESH, highest_term=2, controller_id="ctl-b")
    assert admit_command(higher, command(controller_term=1, controller_id="ctl-a"), 5.0).reason is (
        AdmissionReason.STALE_TERM
    )


def test_acceptance_records_the_commands_generation() -> None:
    newer = str(PlanGeneration(EPOCH, 43, "77aa"))
    admission = admit_command(HELD, command(plan_generation=newer), 5.0)
    assert admission.state.generation == PlanGeneration.parse(newer)
    # and the next command of the older generation is now stale
    assert admit_command(admission.state, command(), 5.0).reason is (
        AdmissionReason.STALE_GENERATION
    )
    first = admit_command(FRESH, command(), 5.0)
    assert first.state.generation == PlanGeneration.parse(GEN_42)


def test_malformed_wire_fields_fall_back_to_unfenced_values() -> None:
    base = {"action_id": "x", "node_id": "h", "plan_generation": GEN_42, "executable": True}
    for term in ("7", None, 7.0):
        assert FencedCommand.from_wire({**base, "controller_term": term}).controller_term == 0
    assert FencedCommand.from_wire({**base, "controller_id": 7}).controller_id is None
    assert FencedCommand.from_wire({**base, "controller_lease_expires_at": "soon"}) == (
        FencedCommand.from_wire(base)
    )


terms = st.integers(0, 4)
states = st.builds(
    NodeFenceState,
    host_id=st.just("host-a"),
    highest_term=terms,
    controller_id=st.sampled_from([None, "ctl-1", "ctl-2"]),
    generation=st.sampled_from(
        [None, *(PlanGeneration(e, s, "d1") for e in ("c91d", "beef") for s in (1, 2))]
    ),
)
commands = st.builds(
    FencedCommand,
    action_id=st.just("a"),
    node_id=st.sampled_from(["host-a", "host-a", "host-b"]),
    plan_generation=st.sampled_from(
        [str(PlanGeneration(e, s, "d1")) for e in ("c91d", "beef") for s in (1, 2)] + ["bad"]
    ),
    executable=st.booleans(),
    controller_term=terms,
    controller_id=st.sampled_from([None, "ctl-1", "ctl-2"]),
)


@settings(max_examples=400, deadline=None)
@given(states, commands, st.sampled_from([None, 0.0, 0.5, 1.0, 30.0]), st.sampled_from([0, 0.5]))
def test_the_fence_only_ever_moves_forward(
    state: NodeFenceState, cmd: FencedCommand, ttl: float | None, duration: float
) -> None:
    """Safety of the fence as an invariant: a rejection names its reason and moves
    nothing; an acceptance is for this host, executable, never from a lower term or a
    rival in the same term, never lowers the term or the generation, adopts the
    command's controller only for a fenced term, and leaves authority time."""
    admission = admit_command(state, cmd, ttl, request_duration=duration, now_monotonic=100.0)
    if not admission.accepted:
        assert admission.reason is not None and admission.state == state
        with pytest.raises(FenceError):
            admission.raise_if_rejected()
        return
    admission.raise_if_rejected()
    after = admission.state
    assert admission.reason is None
    assert cmd.node_id == state.host_id and cmd.executable
    assert after.highest_term == max(state.highest_term, cmd.controller_term)
    if cmd.controller_term > 0:
        assert cmd.controller_id and after.controller_id == cmd.controller_id
        assert cmd.controller_term > state.highest_term or cmd.controller_id == state.controller_id
    else:
        assert not state.fenced and after.controller_id == state.controller_id
    generation = PlanGeneration.parse(cmd.plan_generation)
    assert after.generation == generation
    if state.generation is not None and generation.comparable(state.generation):
        assert not generation.older_than(state.generation)
    elif state.generation is not None:  # a new epoch needs a strictly higher term
        assert cmd.controller_term > state.highest_term
    if ttl is None:
        assert cmd.controller_term == 0 and admission.deadline is None
    else:
        assert admission.deadline is not None and admission.deadline > 100.0
        assert admission.deadline == pytest.approx(100.0 + ttl - duration)
