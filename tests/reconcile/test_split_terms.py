"""Coordinator terms derived from the claims made: never reused for another generation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gridctl.domain import DemandClass, SplitPlacement, SplitStage, SplitStageClaim
from gridctl.reconcile.splits import stage_claims
from gridctl.reconcile.splitsteps import split_term
from tests.reconcile.test_split_actions import big

LAYOUTS = (
    (("a", 0, 15), ("b", 15, 30)),
    (("a", 0, 10), ("b", 10, 20), ("c", 20, 30)),
    (("b", 0, 15), ("c", 15, 30)),
    (("a", 0, 12), ("b", 12, 30)),
)


def placement(layout: tuple[tuple[str, int, int], ...]) -> SplitPlacement:
    return SplitPlacement(
        model_id="big",
        coordinator_host_id=layout[0][0],
        stages=tuple(SplitStage(h, s, e, 100) for h, s, e in layout),
        layer_count=30,
        context_length=8192,
        parallel_lanes=4,
        runtime="llama.cpp",
        reason="split",
        demand_class=DemandClass.BASELINE,
        priority=50,
    )


@given(st.lists(st.sampled_from(range(len(LAYOUTS))), min_size=1, max_size=12))
def test_terms_never_go_back_and_one_term_fences_one_generation(plans: list[int]) -> None:
    known: list[SplitStageClaim] = []
    generation_of_term: dict[int, str] = {}
    last = 0
    for choice in plans:
        planned = placement(LAYOUTS[choice])
        term = split_term(planned, big(), known)
        claims = stage_claims(planned, big(), term, 0.0)
        assert term >= last  # a stage never sees the controller go back a term
        held = generation_of_term.setdefault(term, claims[0].topology_hash)
        assert held == claims[0].topology_hash  # never the same term with other fields
        if known and known[-1].topology_hash == claims[0].topology_hash:
            assert term == last  # re-planning the same split keeps its term
        known.extend(claims)
        last = term


def test_the_first_claim_is_term_one() -> None:
    assert split_term(placement(LAYOUTS[0]), big(), []) == 1
