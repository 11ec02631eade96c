"""The controller store: actions and receipts, timings, modes, generations, quarantine.

Every test taking ``store`` or ``open_store`` runs twice: on SQLite and on a
real PostgreSQL server (``conftest``); quarantine and durability are SQLite's.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from gridctl.controller.store import ControllerStore
from gridctl.controller.store_schema import DATABASE_NAME
from gridctl.domain import ActionKind, ControllerPolicy, Mode, Receipt, ReceiptStatus
from gridctl.errors import PermanentError
from gridctl.reconcile import (
    AckOutcome,
    Cancellation,
    CancelReason,
    ControllerMemory,
    Tombstone,
    WithdrawnDestructive,
)
from gridctl.reconcile.generations import GENERATION_PATTERN
from gridctl.tick.timings import LearnedTiming, TimingKind, estimate

from .conftest import StoreOpener
from .storefixtures import T0, FakeClock, queued

DAY = 86_400.0


def test_a_fresh_store_is_durable_and_quiet(store: ControllerStore) -> None:
    assert store.durable and store.warnings == () and store.mode_override() is None
    assert re.fullmatch(r"[0-9a-f]{16}", store.epoch)


def test_enqueued_actions_come_back_pending_and_restored_after_reopen(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    store = open_store()
    load, warm = queued(), queued(ActionKind.WARM)
    stored = store.apply_tick([load, warm], [], ControllerMemory())
    assert [p.queued for p in stored] == [1, 2]
    assert [p.action for p in store.pending()] == [load.action, warm.action]
    assert not any(p.restored for p in store.pending())
    store.close()
    again = open_store()
    assert [(p.action, p.restored) for p in again.pending()] == [
        (load.action, True),
        (warm.action, True),
    ]


def test_cancellation_moves_an_action_to_history_as_controller_side(store: ControllerStore) -> None:
    p = queued()
    store.apply_tick([p], [], ControllerMemory())
    store.apply_tick([], [Cancellation(p.action_id, CancelReason.SUPERSEDED)], ControllerMemory())
    assert store.pending() == ()
    (entry,) = store.history()
    assert entry.status is ReceiptStatus.CANCELLED and not entry.acknowledged


def test_delivery_marker_and_its_compensation(store: ControllerStore, clock: FakeClock) -> None:
    p = queued()
    store.apply_tick([p], [], ControllerMemory())
    store.mark_delivered([p.action_id])
    assert store.pending()[0].delivered and store.pending()[0].delivered_at == clock.now
    store.clear_delivered([p.action_id])
    assert not store.pending()[0].delivered


def _ack(action_id: str, status: ReceiptStatus, **kw: object) -> Receipt:
    return Receipt(action_id=action_id, status=status, **kw)  # type: ignore[arg-type]


def test_acknowledgements_duplicates_late_completion_and_conflicts(store: ControllerStore) -> None:
    a, b = queued(), queued(ActionKind.DRAIN, cls=None)
    store.apply_tick([a, b], [], ControllerMemory())
    first = store.record_acknowledgement(_ack(a.action_id, ReceiptStatus.SUCCEEDED), host_id=None)
    assert first is not None and first.decision.outcome is AckOutcome.APPLIED
    assert first.entry is not None and first.entry.acknowledged
    dup = store.record_acknowledgement(_ack(a.action_id, ReceiptStatus.SUCCEEDED), host_id=None)
    assert dup is not None and dup.decision.outcome is AckOutcome.DUPLICATE
    clash = store.record_acknowledgement(_ack(a.action_id, ReceiptStatus.FAILED), host_id=None)
    assert clash is not None and clash.decision.outcome is AckOutcome.CONFLICT_IGNORED
    assert store.history()[0].status is ReceiptStatus.SUCCEEDED

    store.apply_tick(
        [], [Cancellation(b.action_id, CancelReason.MODE_CHANGED, True)], ControllerMemory()
    )
    late = store.record_acknowledgement(_ack(b.action_id, ReceiptStatus.SUCCEEDED), host_id=None)
    assert late is not None and late.decision.outcome is AckOutcome.COMPLETED_LATE
    after = store.record_acknowledgement(_ack(b.action_id, ReceiptStatus.FAILED), host_id=None)
    assert after is not None and after.decision.outcome is AckOutcome.CONFLICT_IGNORED
    statuses = {e.action_id: (e.status, e.acknowledged) for e in store.history()}
    assert statuses[b.action_id] == (ReceiptStatus.SUCCEEDED, True)
    assert store.record_acknowledgement(_ack("nope", ReceiptStatus.SUCCEEDED), host_id=None) is None


def test_progress_acknowledgements_keep_the_action_pending(store: ControllerStore) -> None:
    p = queued()
    store.apply_tick([p], [], ControllerMemory())
    store.record_acknowledgement(_ack(p.action_id, ReceiptStatus.RUNNING), host_id=None)
    assert store.pending()[0].status is ReceiptStatus.RUNNING


def _warm_success(
    store: ControllerStore, seconds: object, attempt: int, sha: str = "a" * 64, **kw: object
) -> None:
    p = queued(ActionKind.WARM, attempt=attempt, sha=sha)
    store.apply_tick([p], [], ControllerMemory())
    store.record_acknowledgement(
        _ack(p.action_id, ReceiptStatus.SUCCEEDED, duration_seconds=seconds, **kw), host_id=None
    )


def test_warm_timings_are_an_eight_sample_ewma_authoritative_after_four(
    store: ControllerStore,
) -> None:
    policy = ControllerPolicy()
    samples = [10.0, 20.0, 30.0, 40.0]
    for i, s in enumerate(samples):
        _warm_success(store, s, i)
    learned = store.timing("h1", "m", "a" * 64, TimingKind.WARM)
    assert learned is not None and learned.samples == 4
    assert learned.seconds == pytest.approx(25.0)  # the running mean of the first samples
    assert learned.authoritative(policy)
    assert estimate(99.0, learned, T0, policy) == pytest.approx(25.0)
    half = LearnedTiming(25.0, 2, T0)
    assert estimate(75.0, half, T0, policy) == pytest.approx(50.0)  # blended with the prior
    for i in range(4, 20):
        _warm_success(store, 100.0, i)
    learned = store.timing("h1", "m", "a" * 64, TimingKind.WARM)
    assert learned is not None and 90.0 < learned.seconds < 100.0  # alpha 1/8 after eight


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 3601.0, None, "12"])
def test_invalid_duration_reports_are_ignored(store: ControllerStore, bad: object) -> None:
    _warm_success(store, bad, 0)
    assert store.timing("h1", "m", "a" * 64, TimingKind.WARM) is None
    assert store.history()[0].status is ReceiptStatus.SUCCEEDED  # the receipt still lands


def test_only_a_real_fetch_teaches_transfer_time(store: ControllerStore) -> None:
    verify = queued(ActionKind.LOAD, attempt=0)
    fetch = queued(ActionKind.LOAD, attempt=1)
    store.apply_tick([verify, fetch], [], ControllerMemory())
    store.record_acknowledgement(
        _ack(verify.action_id, ReceiptStatus.SUCCEEDED, duration_seconds=0.2), host_id=None
    )
    assert store.timing("h1", "m", "a" * 64, TimingKind.TRANSFER) is None
    store.record_acknowledgement(
        _ack(
            fetch.action_id, ReceiptStatus.SUCCEEDED, duration_seconds=42.0, artifact_fetched=True
        ),
        host_id=None,
    )
    learned = store.timing("h1", "m", "a" * 64, TimingKind.TRANSFER)
    assert learned is not None and learned.seconds == 42.0


def test_a_new_checksum_starts_from_the_priors(store: ControllerStore) -> None:
    _warm_success(store, 10.0, 0)
    assert store.timing("h1", "m", "b" * 64, TimingKind.WARM) is None
    _warm_success(store, 50.0, 0, sha="b" * 64)
    new = store.timing("h1", "m", "b" * 64, TimingKind.WARM)
    assert new is not None and new.samples == 1 and new.seconds == 50.0


def test_timings_expire_after_thirty_days(store: ControllerStore, clock: FakeClock) -> None:
    policy = ControllerPolicy()
    for i in range(4):
        _warm_success(store, 10.0, i)
    clock.advance(31 * DAY)
    old = store.timing("h1", "m", "a" * 64, TimingKind.WARM)
    assert old is not None and estimate(77.0, old, clock.now, policy) == 77.0
    _warm_success(store, 30.0, 9)
    relearned = store.timing("h1", "m", "a" * 64, TimingKind.WARM)
    assert relearned is not None and (relearned.samples, relearned.seconds) == (1, 30.0)


def test_plan_generations_follow_the_wire_pattern_and_only_grow(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    store = open_store()
    first = store.next_plan_generation("sha256:4FC1")
    second = store.next_plan_generation("4fc1")
    assert GENERATION_PATTERN.match(str(first)) and str(first).endswith(":4fc1")
    assert first.older_than(second)
    store.close()
    clock.advance(-3600)  # a backwards wall clock changes nothing
    again = open_store()
    third = again.next_plan_generation("ab")
    assert third.epoch == first.epoch and second.older_than(third)


def test_memory_profiles_watermarks_and_evidence_round_trip(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    store = open_store()
    memory = ControllerMemory(
        withdrawn=(WithdrawnDestructive("id1", ActionKind.DRAIN, "h1", "m", T0),),
        tombstones=(Tombstone("gone", T0, "c" * 64, 300.0),),
    )
    store.apply_tick([], [], memory)
    store.save_profiles("abc123", [{"kind": "ModelProfile", "metadata": {"name": "m"}}])
    store.set_watermark("m", T0 - 5, 3.0)
    store.set_watermark("m", T0 - 50, 1.0)  # watermarks never go backwards
    store.put_evidence("m", "coding", "a" * 64, {"samples": 3})
    store.put_evidence("gone", "coding", None, {"samples": 1})
    store.note_term(7)
    store.note_term(3)
    store.close()
    again = open_store()
    assert again.memory() == memory
    assert again.last_good_profiles() == (
        "abc123",
        [{"kind": "ModelProfile", "metadata": {"name": "m"}}],
    )
    assert again.watermarks() == {"m": (T0 - 5, 3.0)}
    assert again.highest_term() == 7
    again.clear_demand("gone")
    assert list(again.evidence()) == [("m", "coding", "a" * 64)]


def test_history_is_bounded_but_keeps_the_newest_attempt_of_every_key(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    store = open_store(history_limit=5)
    for attempt in range(8):
        p = queued(attempt=attempt)
        store.apply_tick([p], [], ControllerMemory())
        clock.advance(1)
        store.record_acknowledgement(_ack(p.action_id, ReceiptStatus.FAILED), host_id=None)
    other = queued(host_id="h2")
    store.apply_tick(
        [other], [Cancellation(other.action_id, CancelReason.SUPERSEDED)], ControllerMemory()
    )
    history = store.history()
    assert len(history) == 5
    assert max(e.attempt for e in history if e.host_id == "h1") == 7
    assert any(e.host_id == "h2" for e in history)


def test_without_a_durable_path_automatic_mode_is_refused(clock: FakeClock) -> None:
    store = ControllerStore(None, clock=clock)
    assert not store.durable and any("refused" in w for w in store.warnings)
    with pytest.raises(PermanentError):
        store.set_mode_override(Mode.AUTOMATIC)
    assert store.effective_mode(Mode.AUTOMATIC)[0] is Mode.RECOMMEND
    store.set_mode_override(Mode.OBSERVE)
    assert store.effective_mode(Mode.AUTOMATIC) == (Mode.OBSERVE, None)


def test_an_unusable_state_path_is_not_durable(tmp_path: Path, clock: FakeClock) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = ControllerStore(blocker / "state", clock=clock)
    assert not store.durable
    assert store.effective_mode(Mode.AUTOMATIC)[0] is Mode.RECOMMEND


def test_mode_override_persists_and_clears(open_store: StoreOpener, clock: FakeClock) -> None:
    store = open_store()
    store.set_mode_override(Mode.AUTOMATIC)
    store.close()
    again = open_store()
    assert again.effective_mode(Mode.RECOMMEND) == (Mode.AUTOMATIC, None)
    again.set_mode_override(None)
    assert again.effective_mode(Mode.OBSERVE) == (Mode.OBSERVE, None)


QUARANTINED = re.compile(r"controller\.sqlite3\.invalid-(\d{8}T\d{6}Z)-([0-9a-f]{8})")


@pytest.mark.parametrize("damage", ["header", "garbage", "pages"])
def test_a_corrupt_database_is_quarantined_and_the_clean_store_recommends(
    tmp_path: Path, clock: FakeClock, damage: str
) -> None:
    store = ControllerStore(tmp_path, clock=clock)
    store.set_mode_override(Mode.AUTOMATIC)
    store.apply_tick([queued(attempt=i) for i in range(200)], [], ControllerMemory())
    store.close()
    path = tmp_path / DATABASE_NAME
    data = bytearray(path.read_bytes())
    if damage == "header":
        data[0:16] = b"definitely-not!!"
    elif damage == "garbage":
        data = bytearray(b"\x5a" * len(data))
    else:
        for offset in range(4096, len(data), 997):  # scribble over b-tree pages
            data[offset : offset + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    original = bytes(data)

    clock.now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    reopened = ControllerStore(tmp_path, clock=clock)
    moved = [p for p in tmp_path.iterdir() if QUARANTINED.fullmatch(p.name)]
    assert len(moved) == 1 and reopened.quarantined_to == moved[0]
    assert QUARANTINED.fullmatch(moved[0].name).group(1) == "20270115T080000Z"  # type: ignore[union-attr]
    assert moved[0].read_bytes() == original  # kept for the operator, byte for byte
    assert reopened.durable and reopened.pending() == ()
    assert reopened.mode_override() is Mode.RECOMMEND
    assert reopened.effective_mode(Mode.AUTOMATIC)[0] is Mode.RECOMMEND
    assert any("corrupt" in w and moved[0].name in w for w in reopened.warnings)
    reopened.close()
    # the warning stays visible across restarts until an operator clears it
    assert any("corrupt" in w for w in ControllerStore(tmp_path, clock=clock).warnings)


def test_enqueueing_twice_is_harmless_but_a_finished_id_is_never_reused(
    store: ControllerStore,
) -> None:
    p = queued()
    store.apply_tick([p], [], ControllerMemory())
    assert store.apply_tick([p], [], ControllerMemory()) == ()
    assert len(store.pending()) == 1
    store.record_acknowledgement(_ack(p.action_id, ReceiptStatus.FAILED), host_id=None)
    with pytest.raises(PermanentError):
        store.apply_tick([p], [], ControllerMemory())
    assert store.pending() == ()  # the failed transaction wrote nothing


def test_fencing_time_is_the_controllers_receipt_time(
    store: ControllerStore, clock: FakeClock
) -> None:
    p = queued()
    store.apply_tick([p], [], ControllerMemory())
    store.record_acknowledgement(
        _ack(p.action_id, ReceiptStatus.SUCCEEDED, observed_at=T0 + 9e6), host_id=None
    )
    (entry,) = store.history()
    assert entry.effective_at == clock.now
