"""A node speaks only for itself, and only forward in time.

A node's credential names one host. Everything that node reports is about that
host: its acknowledgements finish only that host's actions, and a residency or
transfer row that names a host names that one. A claim about another host is
refused, counted per (sender, owner, kind) and logged once per pair, never
applied: one compromised laptop cannot fail or "succeed" another host's
commands or fill another host's inventory.

Reports also move forward. Every registration and heartbeat of a current node
carries the node process's ``boot_id`` (random per start) and a ``sequence``
that grows with every message it sends. Within a boot a sequence at or below the
last one accepted is a replay (or a message overtaken by a newer one) and is
refused with 409; a boot id the host has already left behind is refused the same
way. A host that has once sent a sequence must keep sending one, so a captured
report from before cannot be replayed by stripping the fields. The memory is the
controller process's: after a controller restart the first report of each host
sets the watermark again.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gridctl.errors import WireError

log = logging.getLogger("gridctl.controller.hostclaims")

RETIRED_BOOTS_KEPT = 32  # boot ids remembered per host after the node restarted
LOGGED_PAIRS_KEPT = 4096  # (sender, owner, kind) triples already logged


class ForeignClaim(WireError):
    """A node reported something about another host (HTTP 403)."""

    status = 403


class StaleReport(WireError):
    """A report older than one already accepted from the same node (HTTP 409)."""

    status = 409


@dataclass
class ForeignClaims:
    """Refused claims about other hosts: counted per (sender, owner, kind), logged once."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    _logged: set[tuple[str, str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refuse(self, sender: str, owner: str, kind: str, subject: str) -> None:
        """Count one refused claim of ``sender`` about ``owner``'s ``kind`` ``subject``."""
        key = (sender, owner, kind)
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            first = key not in self._logged and len(self._logged) < LOGGED_PAIRS_KEPT
            if first:
                self._logged.add(key)
        if first:
            log.warning(
                "refused: host %r reported a %s of host %r (%r); further ones are only counted",
                sender,
                kind,
                owner,
                subject[:128],
            )

    def snapshot(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self.counts)


def check_rows_are_own(host_id: str, payload: Any, claims: ForeignClaims) -> None:
    """Raise ``ForeignClaim`` when a residency or transfer row names another host."""
    envelope = payload.get("allocator") if isinstance(payload, dict) else None
    if not isinstance(envelope, dict):
        return
    for section, kind in (("residencies", "residency"), ("transfers", "transfer")):
        rows = envelope.get(section)
        for index, row in enumerate(rows if isinstance(rows, list) else ()):
            owner = row.get("host_id") if isinstance(row, dict) else None
            if owner is not None and owner != host_id:
                claims.refuse(host_id, str(owner), kind, str(row.get("model_id")))
                raise ForeignClaim(
                    f"this {kind} names host {str(owner)[:128]!r}; a node reports only for itself",
                    f"/allocator/{section}/{index}/host_id",
                )


@dataclass
class _Watermark:
    boot_id: str
    sequence: int
    retired: deque[str] = field(default_factory=lambda: deque(maxlen=RETIRED_BOOTS_KEPT))


class ReportSequences:
    """The newest (boot id, sequence) accepted from each host; refuses anything older."""

    def __init__(self) -> None:
        self._marks: dict[str, _Watermark] = {}
        self._lock = threading.Lock()

    def admit(self, host_id: str, payload: Mapping[str, Any]) -> None:
        """Accept ``payload``'s place in the host's order or raise ``StaleReport``
        (the caller holds the registry lock, so check and record are one step)."""
        boot_id, sequence = payload.get("boot_id"), payload.get("sequence")
        if (boot_id is None) != (sequence is None):
            missing = "sequence" if sequence is None else "boot_id"
            raise WireError("boot_id and sequence come together", f"/{missing}")
        with self._lock:
            mark = self._marks.get(host_id)
            if boot_id is None or sequence is None:
                if mark is not None:
                    raise StaleReport(
                        "this host reports a boot_id and sequence; a report without them "
                        "is a replay",
                        "/sequence",
                    )
                return
            if mark is None:
                self._marks[host_id] = _Watermark(str(boot_id), int(sequence))
                return
            if boot_id == mark.boot_id:
                if sequence <= mark.sequence:
                    raise StaleReport(
                        f"sequence {sequence} is not after {mark.sequence}, the last accepted "
                        "from this boot: a replayed or overtaken report",
                        "/sequence",
                    )
                mark.sequence = int(sequence)
                return
            if boot_id in mark.retired:
                raise StaleReport("boot_id belongs to an earlier run of this node", "/boot_id")
            mark.retired.append(mark.boot_id)
            mark.boot_id, mark.sequence = str(boot_id), int(sequence)

    def watermark(self, host_id: str) -> tuple[str, int] | None:
        """The newest (boot id, sequence) accepted from ``host_id``, if any."""
        with self._lock:
            mark = self._marks.get(host_id)
            return None if mark is None else (mark.boot_id, mark.sequence)

    def forget(self, host_id: str) -> None:
        with self._lock:
            self._marks.pop(host_id, None)
