"""Two controller processes on one state directory never both hold authority.

Real processes and a real SQLite lease: A holds, B keeps trying, A is killed
with SIGKILL mid-lease, and B takes over with term + 1 only after A's lease
has expired.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

LEASE_SECONDS = 1.5

CONTENDER = r"""
import json, sys, time
from gridctl.controller.authority import AuthorityLease
lease = AuthorityLease(sys.argv[1], sys.argv[2], lease_seconds=float(sys.argv[3]))
while True:
    grant = lease.acquire()
    now = time.time()
    if grant is None:
        print(json.dumps({"event": "denied", "at": now}), flush=True)
    else:
        prev = grant.previous
        print(json.dumps({
            "event": "held", "at": now, "term": grant.term,
            "acquired_at": grant.acquired_at, "expires_at": grant.expires_at,
            "previous": None if prev is None else
                {"id": prev.controller_id, "term": prev.term, "expires_at": prev.expires_at},
        }), flush=True)
    time.sleep(0.1)  # the renewal interval
"""


class Contender:
    def __init__(self, state: Path, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CONTENDER, str(state), name, str(LEASE_SECONDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.events.append(json.loads(line))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Any, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    err = self.proc.stderr.read() if self.proc.stderr else ""
                    raise AssertionError(f"{self.name}: no {what} in {self.events[-5:]} {err}")
                self._changed.wait(min(left, 0.5))

    def held(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "held"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)


@pytest.mark.e2e
def test_two_controllers_never_both_hold_authority(tmp_path: Path) -> None:
    a = Contender(tmp_path, "ctl-a")
    b: Contender | None = None
    try:
        a.wait_for(lambda ev: any(e["event"] == "held" for e in ev), "grant")
        b = Contender(tmp_path, "ctl-b")
        b.wait_for(lambda ev: sum(e["event"] == "denied" for e in ev) >= 5, "denials")
        a.wait_for(lambda ev: sum(e["event"] == "held" for e in ev) >= 3, "renewals")
        assert b.held() == []  # B never held while A was renewing
        a.kill()
        killed_at = time.time()
        a_held = a.held()
        a_term = a_held[0]["term"]
        assert {e["term"] for e in a_held} == {a_term}  # renewals keep the term
        last_known_expiry = max(e["expires_at"] for e in a_held)
        assert last_known_expiry > killed_at  # killed mid-lease

        b.wait_for(lambda ev: any(e["event"] == "held" for e in ev), "takeover")
        taken = b.held()[0]
        assert taken["term"] == a_term + 1
        previous = taken["previous"]
        assert previous["id"] == "ctl-a" and previous["term"] == a_term
        # only after expiry: no later than A's real final expiry, whatever A printed last
        assert previous["expires_at"] >= last_known_expiry
        assert taken["acquired_at"] >= previous["expires_at"]
        # and never overlapping: every A grant had ended before B's began
        assert all(e["expires_at"] <= taken["acquired_at"] for e in a_held)
    finally:
        a.kill()
        if b is not None:
            b.kill()
