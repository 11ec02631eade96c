"""Durable node state: transactions, crash safety, corrupt databases quarantined."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gridctl.domain.states import ResidencyState
from gridctl.errors import PermanentError
from gridctl.node.records import FenceMemory, Override, ProcessIdentity, Receipt, ResidencyRecord
from gridctl.node.statestore import NodeStateStore


def test_round_trips_every_record(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "node.sqlite3")
    ident = ProcessIdentity(42, 1234.5, "/bin/llama-server", ("/bin/llama-server", "--port", "1"))
    record = ResidencyRecord(
        "m", ResidencyState.READY, 640, "a" * 64, port=1, pid=42, identity=ident, loaded_at=10.0
    )
    store.put_residency(record)
    store.put_receipt(Receipt("act-1", "warm", "m", "running", command={"kind": "warm"}))
    store.set_override(Override("drain", "going home", 5.0, 99.0))
    store.save_fence_memory(FenceMemory(7, "ctl-a", True, "ab:00000000000000000001:cd"))
    store.raise_last_used_watermarks({"m": 50.0})
    store.raise_last_used_watermarks({"m": 40.0})
    store.close()

    again = NodeStateStore(tmp_path / "node.sqlite3")
    assert again.residency("m") == record
    assert again.receipt("act-1") == Receipt(
        "act-1", "warm", "m", "running", command={"kind": "warm"}
    )
    assert again.override() == Override("drain", "going home", 5.0, 99.0)
    assert again.fence_memory() == FenceMemory(7, "ctl-a", True, "ab:00000000000000000001:cd")
    assert again.last_used_watermarks() == {"m": 50.0}
    assert again.warnings == []
    assert os.stat(tmp_path / "node.sqlite3").st_mode & 0o777 == 0o600


def test_ack_marks_only_the_status_that_was_sent(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "n.db")
    store.put_receipt(Receipt("a", "load", "m", "running"))
    store.put_receipt(Receipt("a", "load", "m", "succeeded", duration_seconds=1.5))
    store.mark_acked(["a"], {"a": "running"})  # an ack of the older status
    assert [r.action_id for r in store.receipts(unacked_only=True)] == ["a"]
    store.mark_acked(["a"], {"a": "succeeded"})
    assert store.receipts(unacked_only=True) == []


def test_a_state_dir_belongs_to_one_host(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "n.db")
    store.bind_host("host-a")
    store.bind_host("host-a")
    with pytest.raises(PermanentError):
        store.bind_host("host-b")


@pytest.mark.parametrize("garbage", [b"this is not a database at all" * 100, b"\x00" * 4096])
def test_corrupt_database_is_quarantined_and_a_clean_one_starts(
    tmp_path: Path, garbage: bytes
) -> None:
    path = tmp_path / "node.sqlite3"
    path.write_bytes(garbage)
    store = NodeStateStore(path, now=1_700_000_000.0)
    moved = [p.name for p in tmp_path.iterdir() if ".invalid-" in p.name]
    assert len(moved) == 1 and moved[0].startswith("node.sqlite3.invalid-20231114T221320Z-")
    assert (tmp_path / moved[0]).read_bytes() == garbage
    assert store.warnings and "moved to" in store.warnings[0]
    store.put_residency(ResidencyRecord("m", ResidencyState.CACHED))
    assert store.residency("m") is not None


def test_sigkill_mid_writes_leaves_a_consistent_database(tmp_path: Path) -> None:
    path = tmp_path / "node.sqlite3"
    script = textwrap.dedent(
        f"""
        import sys
        from gridctl.domain.states import ResidencyState
        from gridctl.node.records import ResidencyRecord
        from gridctl.node.statestore import NodeStateStore
        store = NodeStateStore({str(path)!r})
        i = 0
        while True:
            store.put_residency(ResidencyRecord(f"m{{i % 50}}", ResidencyState.READY, i))
            i += 1
            if i == 200:
                print("ready", flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = NodeStateStore(path)
    assert store.warnings == []
    rows = store.residencies()
    assert len(rows) == 50 and all(r.state is ResidencyState.READY for r in rows)


_OPEN_AT_ONCE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gridctl.node.statestore import NodeStateStore
    start = float(sys.argv[2])
    while time.time() < start:  # every opener starts at the same instant
        pass
    store = NodeStateStore(Path(sys.argv[1]))
    store.set_meta("opened-by", sys.argv[3])
    print("|".join(store.warnings))
    """
)


def test_processes_opening_a_new_database_at_once_never_quarantine_it(tmp_path: Path) -> None:
    # `gridctl node start` polls the database the daemon it started is creating; SQLite
    # refuses one of two openers at once ("database is locked") and both may write the
    # schema version: neither is corruption, and moving the file aside left the daemon
    # writing to the moved file while the CLI read a new, empty one
    for attempt in range(12):
        path = tmp_path / f"node-{attempt}.sqlite3"
        start = f"{time.time() + 0.5:.6f}"
        openers = [
            subprocess.Popen(
                [sys.executable, "-c", _OPEN_AT_ONCE, str(path), start, str(n)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for n in range(4)
        ]
        warnings = [opener.communicate(timeout=120)[0].strip() for opener in openers]
        assert [opener.returncode for opener in openers] == [0, 0, 0, 0]
        assert warnings == ["", "", "", ""], warnings
        assert not list(tmp_path.glob("*.invalid-*"))
        store = NodeStateStore(path)
        assert store.get_meta("schema_version") == "1"
        assert store.get_meta("opened-by") in {"0", "1", "2", "3"}
        store.close()
