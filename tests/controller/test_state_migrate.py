"""`gridctl state migrate`: SQLite state into PostgreSQL, all of it or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.cli.main import main
from gridctl.controller.authority import AuthorityLease
from gridctl.controller.store import ControllerStore
from gridctl.controller.stores.postgres import PostgresBackend, PostgresLease, PostgresLocation
from gridctl.domain import ActionKind, Mode, Receipt, ReceiptStatus
from gridctl.reconcile import ControllerMemory, Tombstone, WithdrawnDestructive

from .storefixtures import T0, FakeClock, queued


def _sqlite_state(state: Path, clock: FakeClock) -> ControllerStore:
    store = ControllerStore(state, clock=clock)
    memory = ControllerMemory(
        withdrawn=(WithdrawnDestructive("w1", ActionKind.DRAIN, "h1", "m", T0),),
        tombstones=(Tombstone("gone", T0, "c" * 64, 300.0),),
    )
    done, waiting = queued(ActionKind.WARM), queued(ActionKind.LOAD, host_id="h2")
    store.apply_tick([done, waiting], [], memory)
    store.mark_delivered([waiting.action_id])
    store.record_acknowledgement(
        Receipt(done.action_id, ReceiptStatus.SUCCEEDED, "ok", duration_seconds=4.0), host_id=None
    )
    store.set_mode_override(Mode.AUTOMATIC)
    store.save_profiles("rev1", {"documents": {}})
    store.set_watermark("m", T0 - 5, 2.0)
    store.put_evidence("m", "coding", "a" * 64, {"samples": 3})
    store.next_plan_generation("ab")
    lease = AuthorityLease(state, "old", clock=clock)
    for _ in range(4):  # terms 1..4, as four takeovers would leave them
        lease.acquire()
        clock.advance(20)
    lease.close()
    return store


def _snapshot(store: ControllerStore) -> dict[str, object]:
    return {
        "pending": [(p.action, p.delivered, p.delivered_at, p.queued) for p in store.pending()],
        "history": store.history(),
        "memory": store.memory(),
        "mode": store.mode_override(),
        "profiles": store.last_good_profiles(),
        "watermarks": store.watermarks(),
        "evidence": store.evidence(),
        "timings": store.timings(),
        "epoch": store.epoch,
    }


def test_migrate_carries_everything_and_terms_continue(
    tmp_path: Path,
    pg_location: PostgresLocation,
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = FakeClock()
    source = _sqlite_state(tmp_path / "state", clock)
    before = _snapshot(source)
    source.close()
    args = ["state", "migrate", "--from", str(tmp_path / "state"), "--to", pg_location.url]
    args += ["--to-password-file", str(pg_location.password_file), "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"]["actions"] == 2 and report["rows"]["evidence"] == 1
    assert report["rows"]["receipts"] == 1 and report["term"] == 4

    moved = ControllerStore(None, clock=clock, backend=PostgresBackend(pg_location))
    assert _snapshot(moved) == before
    assert all(p.restored for p in moved.pending())  # a new controller continues them
    after = moved.next_plan_generation("cd")
    assert after.epoch == before["epoch"] and after.sequence == 2
    grant = PostgresLease(pg_location, "new", term_floor=moved.highest_term()).acquire()
    assert grant is not None and grant.term == 5

    # a second copy into the same database is refused, and changes nothing
    assert main(args) == 1
    assert "already holds controller state" in capsys.readouterr().err
    assert len(moved.pending()) == 1


def test_migrate_refuses_a_password_in_the_url_and_a_missing_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://gridctl:hunter2@127.0.0.1:1/x"
    assert main(["state", "migrate", "--from", str(tmp_path), "--to", url]) == 1
    assert "password" in capsys.readouterr().err
    url = "postgresql://gridctl@127.0.0.1:1/x"
    assert main(["state", "migrate", "--from", str(tmp_path), "--to", url]) == 1
    assert "no controller.sqlite3" in capsys.readouterr().err


def test_controller_store_flags_are_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = ["controller", "--state", str(tmp_path / "state"), "--listen", "127.0.0.1:1"]
    assert main([*state, "--store", "postgresql://gridctl:hunter2@127.0.0.1:1/x"]) == 1
    assert "password" in capsys.readouterr().err
    assert main([*state, "--store-password-file", str(tmp_path / "pw")]) == 1
    assert "needs --store" in capsys.readouterr().err
    missing = ["--store", "postgresql://gridctl@127.0.0.1:1/x", "--store-password-file", "/nope"]
    assert main([*state, *missing]) == 1
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "pw").write_text("secret\n")
    down = ["--store", "postgresql://gridctl@127.0.0.1:1/x", "--store-password-file"]
    assert main([*state, *down, str(tmp_path / "pw")]) == 1
    assert "unreachable" in capsys.readouterr().err
