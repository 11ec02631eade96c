"""Mutation scheduling reads the learned start timings, not only the profile's priors.

Under a one-slot mutation budget the order of work is the schedule. Each case
is run twice, on priors and with a learned slow warm (four samples: the
learned value is authoritative), and the learned warm changes who goes first:
an equal-priority peer's warm, a model's first replica (the fastest learned
load-plus-warm path takes round one), and a preemption release (the host where
the beneficiary starts soonest is released first).
"""

from __future__ import annotations

from gridctl.domain import ActionKind, FleetSnapshot, ModelProfile, Plan, Preemption
from gridctl.reconcile import BlockedCode, ReconcileResult, StartupEstimate, reconcile
from gridctl.tick.timings import LearnedTiming, estimate

from .builders import NOW, assign, find, fleet, host, plan, policy, profile, profiles, res

ONE_SLOT = policy(max_concurrent_mutations=1)
SLOW_WARM = LearnedTiming(seconds=300.0, samples=4, updated_at=NOW - 60)


def learned_slow_warm(prof: ModelProfile, host_id: str) -> dict[tuple[str, str], StartupEstimate]:
    """What the controller derives from four slow warm acknowledgements on ``host_id``."""
    warm = estimate(prof.warm_seconds, SLOW_WARM, NOW, ONE_SLOT)
    assert warm == 300.0  # authoritative after four samples
    return {(host_id, prof.name): StartupEstimate(prof.load_seconds, warm)}


def schedule(
    the_plan: Plan,
    snapshot: FleetSnapshot,
    profs: dict[str, ModelProfile],
    startup: dict[tuple[str, str], StartupEstimate] | None = None,
) -> ReconcileResult:
    return reconcile(
        the_plan, snapshot, profs, ONE_SLOT, ONE_SLOT.mode, (), (), NOW, startup=startup
    )


def first(result: ReconcileResult) -> tuple[str, str, str]:
    (admitted,) = [a for a in result.actions if a.executable]
    return admitted.kind.value, admitted.model_id, admitted.host_id


def test_a_learned_slow_warm_lets_an_equal_peer_go_first() -> None:
    profs = profiles(profile("m"), profile("n"))
    the_plan = plan(assign("m", "h1"), assign("n", "h2"))
    snapshot = fleet(host("h1", cached=[("m", None)]), host("h2", cached=[("n", None)]))

    assert first(schedule(the_plan, snapshot, profs)) == ("warm", "m", "h1")  # priors tie
    learned = schedule(the_plan, snapshot, profs, learned_slow_warm(profs["m"], "h1"))
    assert first(learned) == ("warm", "n", "h2")
    assert find(learned, ActionKind.WARM, "h1", "m").blocked == BlockedCode.MUTATION_GOVERNOR


def test_the_first_replica_takes_the_fastest_learned_start_path() -> None:
    profs = profiles(profile("m", source="https://artifacts.invalid/m.gguf"))
    the_plan = plan(assign("m", "h1"), assign("m", "h2"))
    snapshot = fleet(host("h1"), host("h2"))

    assert first(schedule(the_plan, snapshot, profs)) == ("load", "m", "h1")
    learned = schedule(the_plan, snapshot, profs, learned_slow_warm(profs["m"], "h1"))
    assert first(learned) == ("load", "m", "h2")  # round one on the host that serves first
    assert "replica 1" in find(learned, ActionKind.LOAD, "h2", "m").reason
    assert "replica 2" in find(learned, ActionKind.LOAD, "h1", "m").reason


def test_a_preemption_releases_first_where_the_beneficiary_starts_soonest() -> None:
    profs = profiles(profile("v1", priority=1), profile("v2", priority=1), profile("vip"))
    the_plan = plan(
        preemptions=[Preemption("h1", "v1", "vip", "x"), Preemption("h2", "v2", "vip", "x")],
        targets={"vip": 2},
    )
    snapshot = fleet(
        host("h1", res("v1"), cached=[("vip", None)]),
        host("h2", res("v2"), cached=[("vip", None)]),
    )

    assert first(schedule(the_plan, snapshot, profs)) == ("drain", "v1", "h1")
    learned = schedule(the_plan, snapshot, profs, learned_slow_warm(profs["vip"], "h1"))
    assert first(learned) == ("drain", "v2", "h2")
    assert find(learned, ActionKind.DRAIN, "h1", "v1").blocked == BlockedCode.MUTATION_GOVERNOR


def test_cached_weights_count_in_the_release_order_on_priors() -> None:
    profs = profiles(profile("v1", priority=1), profile("v2", priority=1), profile("vip"))
    the_plan = plan(
        preemptions=[Preemption("h1", "v1", "vip", "x"), Preemption("h2", "v2", "vip", "x")],
        targets={"vip": 2},
    )
    snapshot = fleet(host("h1", res("v1")), host("h2", res("v2"), cached=[("vip", None)]))
    assert first(schedule(the_plan, snapshot, profs)) == ("drain", "v2", "h2")
