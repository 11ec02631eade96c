"""Crash safety: a writer killed with SIGKILL mid-stream leaves only whole transactions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gridctl.controller.store import ControllerStore
from gridctl.domain import ReceiptStatus

WRITER = r"""
import sys
from gridctl.controller.store import ControllerStore
from gridctl.domain import Action, ActionKind
from gridctl.reconcile import (
    ActionKey, Cancellation, CancelReason, ControllerMemory, PendingAction, derive_action_id,
)

def batch(i):
    out = []
    for j in range(3):
        key = ActionKey(ActionKind.LOAD, f"h{j}", f"m{i}", None)
        out.append(PendingAction(action=Action(
            action_id=derive_action_id(key, 0), kind=ActionKind.LOAD,
            host_id=f"h{j}", model_id=f"m{i}", executable=True, reason="x" * 2000)))
    return out

if sys.argv[1].startswith("postgresql://"):
    from pathlib import Path
    from gridctl.controller.stores.postgres import PostgresBackend, PostgresLocation
    backend = PostgresBackend(PostgresLocation(sys.argv[1], Path(sys.argv[2])))
    store = ControllerStore(None, backend=backend)
else:
    store = ControllerStore(sys.argv[1])
previous = []
i = 0
while True:
    # one transaction: enqueue batch i and cancel batch i - 1
    cancel = [Cancellation(p.action_id, CancelReason.SUPERSEDED) for p in previous]
    previous = store.apply_tick(batch(i), cancel, ControllerMemory())
    print(i, flush=True)
    i += 1
"""


def _run_and_kill(target: list[str], commits_before_kill: int) -> list[int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, *target],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    printed: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(printed) < commits_before_kill:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"writer died: {proc.stderr.read() if proc.stderr else ''}")
            printed.append(int(line))
            assert time.monotonic() < deadline, "writer too slow"
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # mid-stream, very likely mid-transaction
        rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    printed += [int(x) for x in rest.split()]
    return printed


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("commits_before_kill", [7, 41, 113])
def test_sigkill_during_transactions_leaves_every_commit_and_no_partial_one(
    tmp_path: Path, commits_before_kill: int, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        from gridctl.controller.stores.postgres import PostgresBackend

        location = request.getfixturevalue("pg_location")
        target = [location.url, str(location.password_file)]
        printed = _run_and_kill(target, commits_before_kill)
        store = ControllerStore(None, backend=PostgresBackend(location))
    else:
        printed = _run_and_kill([str(tmp_path)], commits_before_kill)
        store = ControllerStore(tmp_path)
    assert store.durable and store.warnings == ()  # not mistaken for corruption
    pending = Counter(p.action.model_id for p in store.pending())
    cancelled = Counter(e.model_id for e in store.history() if e.status is ReceiptStatus.CANCELLED)
    committed = max(int(m[1:]) for m in pending)
    # every transaction the writer reported is there ...
    assert committed >= printed[-1]
    # ... whole: the last batch pending in full, every earlier one cancelled in full
    assert pending == Counter({f"m{committed}": 3})
    assert cancelled == Counter({f"m{i}": 3 for i in range(committed)})
    queues = sorted(p.queued for p in store.pending())
    assert queues == [3 * committed + 1, 3 * committed + 2, 3 * committed + 3]
