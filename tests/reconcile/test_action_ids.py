"""Action ids are the controller state's own: a state that started over never reissues
an id a node still holds a receipt for.

Attempts count from the state's history, so a state that started over (a corrupt
database moved aside) counts from 0 again; the state's epoch is part of every new id.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gridctl.domain import ActionKind, Mode
from gridctl.reconcile import ActionKey, derive_action_id, reconcile

from .builders import SHA_A, assign, fleet, host, plan, policy, profile, profiles

PROFS = profiles(profile("m", sha=SHA_A))


def _ids(epoch: str) -> list[str]:
    result = reconcile(
        plan(assign("m", "h1")),
        fleet(host("h1")),
        PROFS,
        policy(),
        Mode.AUTOMATIC,
        (),
        (),
        1_800_000_000.0,
        epoch=epoch,
    )
    return [a.action_id for a in result.actions]


def test_two_states_issue_different_ids_for_the_same_step() -> None:
    first, again = _ids("1f2e3d4c5b6a7988"), _ids("0a1b2c3d4e5f6071")
    assert len(first) == len(again) == 2  # load, then warm
    assert not set(first) & set(again)
    assert _ids("1f2e3d4c5b6a7988") == first  # one state: the same ids, deterministically


def test_the_empty_epoch_gives_the_ids_of_no_state() -> None:
    key = ActionKey(ActionKind.LOAD, "h1", "m", SHA_A)
    assert _ids("")[0] == derive_action_id(key, 0)


@given(
    attempt=st.integers(min_value=0, max_value=1000),
    epochs=st.lists(
        st.text(alphabet="0123456789abcdef", min_size=1, max_size=16),
        min_size=2,
        max_size=2,
        unique=True,
    ),
)
def test_an_id_names_one_attempt_of_one_key_in_one_state(attempt: int, epochs: list[str]) -> None:
    key = ActionKey(ActionKind.WARM, "h1", "m", SHA_A)
    a, b = (derive_action_id(key, attempt, e) for e in epochs)
    assert a != b and a != derive_action_id(key, attempt) != b
    assert derive_action_id(key, attempt + 1, epochs[0]) != a
