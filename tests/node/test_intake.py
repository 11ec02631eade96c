"""Command intake: the shared fence, durable across restarts, and receipts for every refusal."""

from __future__ import annotations

from pathlib import Path

from gridctl.node.intake import CommandIntake
from gridctl.node.statestore import NodeStateStore
from tests.node.controller_harness import wire_command as command

HOST = "host-a"


def intake(path: Path, now: float = 100.0) -> CommandIntake:
    return CommandIntake(NodeStateStore(path), HOST, monotonic=lambda: now, clock=lambda: 5.0)


def test_accepted_command_persists_the_fence_before_it_runs(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    first = intake(db)
    admitted = first.admit(command("drain", "m", HOST, "a1"), remaining_ttl=30, request_duration=2)
    assert admitted is not None and admitted.deadline == 128.0
    assert first.store.receipt("a1").status == "accepted"  # type: ignore[union-attr]
    first.store.close()

    after_restart = intake(db)
    lower = command("drain", "m", HOST, "a2", controller_term=2, controller_id="old")
    assert after_restart.admit(lower, remaining_ttl=30, request_duration=0) is None
    receipt = after_restart.store.receipt("a2")
    assert receipt is not None and (receipt.status, receipt.reason) == ("rejected", "stale_term")


def test_refusals_are_recorded_with_codes(tmp_path: Path) -> None:
    node = intake(tmp_path / "n.db")
    cases = {
        "wrong-host": (command("drain", "m", "host-b", "wrong-host"), 30.0, "wrong_host"),
        "expired": (command("drain", "m", HOST, "expired"), 1.0, "expired_ttl"),
        "no-ttl": (command("drain", "m", HOST, "no-ttl"), None, "missing_ttl"),
        "bad": (
            {**command("drain", "m", HOST, "bad"), "kind": "explode"},
            30.0,
            "malformed_command",
        ),
    }
    for action_id, (cmd, ttl, reason) in cases.items():
        assert node.admit(cmd, remaining_ttl=ttl, request_duration=1.5) is None
        receipt = node.store.receipt(action_id)
        assert receipt is not None and receipt.status == "rejected" and receipt.reason == reason


def test_redelivered_command_is_not_run_twice_but_acknowledged_again(tmp_path: Path) -> None:
    node = intake(tmp_path / "n.db")
    cmd = command("drain", "m", HOST, "dup")
    assert node.admit(cmd, remaining_ttl=30, request_duration=0) is not None
    node.store.mark_acked(["dup"], {"dup": "accepted"})
    assert node.admit(cmd, remaining_ttl=30, request_duration=0) is None
    assert [r.action_id for r in node.store.receipts(unacked_only=True)] == ["dup"]
