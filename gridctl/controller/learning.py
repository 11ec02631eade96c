"""What the controller learned, kept across restarts: demand series, affinity sequences and
outcome evidence written to the store when they change, and restored from it at start or
on taking over from another controller."""

from __future__ import annotations

import logging
from typing import Any

from gridctl.controller.demandbook import DemandBook
from gridctl.controller.store import ControllerStore
from gridctl.demand.rows import RowKey
from gridctl.domain import ControllerPolicy

log = logging.getLogger(__name__)


class LearningStore:
    def __init__(self, demand: DemandBook, store: ControllerStore) -> None:
        self.demand = demand
        self.store = store
        self._evidence: dict[Any, Any] = {}
        self._rows: dict[RowKey, str] = {}
        self._rows_revision: int | None = None

    def restore(self, policy: ControllerPolicy, now: float, *, over: bool = False) -> list[str]:
        """Outcome evidence and demand rows from the store: at start, or laid ``over`` this
        process's own learning when it takes over from another controller. Returns
        warnings about rows refused."""
        persisted = self.store.evidence()
        self.demand.restore_evidence(persisted)
        self._evidence = persisted
        rows = self.store.demand_rows()
        restored = self.demand.restore_demand(rows, policy, now, over=over)
        self._rows_revision = None
        # every stored row, valid or not: the next write removes what was not restored
        self._rows = {(k, n, s): str(b) for k, n, s, b in rows}
        for refusal in restored.refused:
            log.warning("%s", refusal)
        if not restored.refused:
            return []
        return [
            f"{len(restored.refused)} persisted demand row(s) refused and dropped "
            f"({restored.restored} restored, {restored.expired} past their window): "
            f"{restored.refused[0]}"
        ]

    def persist(self) -> None:
        """Write the outcome evidence and demand rows that changed since the last write."""
        for key, body in self.demand.evidence_bodies().items():
            if self._evidence.get(key) != body:
                self.store.put_evidence(key[0], key[1], key[2] or None, body)
                self._evidence[key] = body
        found = self.demand.demand_rows(unless_revision=self._rows_revision)
        if found is None:
            return
        revision, rows = found
        before = self._rows
        changed = {key: body for key, body in rows.items() if before.get(key) != body}
        gone = [key for key in before if key not in rows]
        if changed or gone:
            self.store.write_demand(changed, gone)
        self._rows = rows
        self._rows_revision = revision
