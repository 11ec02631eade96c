"""Runtime work a stage holds on behalf of a coordinator term.

When a stage accepts a newer term, work started under older terms must be
fenced: running stages shut down, preparations (downloads, warm-ups) cancelled.
The fence itself does no I/O, so it reports *which* work to fence and the
host runtime does the shutting down.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gridctl.split.claims import ClaimKey, StageLoad


class WorkKind(StrEnum):
    """How stale work of this kind is fenced."""

    RUNNING_STAGE = "running_stage"  # shut down
    PREPARATION = "preparation"  # cancelled


@dataclass(frozen=True, order=True)
class StageWork:
    """One piece of work, identified by ``work_id`` and owned by a coordinator term."""

    work_id: str
    model_id: str
    package_ref: str
    manifest_sha256: str
    coordinator_term: int
    kind: WorkKind = WorkKind.RUNNING_STAGE

    @property
    def key(self) -> ClaimKey:
        return ClaimKey(self.model_id, self.package_ref, self.manifest_sha256)

    @classmethod
    def for_load(
        cls, work_id: str, load: StageLoad, kind: WorkKind = WorkKind.RUNNING_STAGE
    ) -> StageWork:
        """The work a load starts once the fence has let it through."""
        return cls(
            work_id=work_id,
            model_id=load.model_id,
            package_ref=load.package_ref,
            manifest_sha256=load.manifest_sha256,
            coordinator_term=load.coordinator_term,
            kind=kind,
        )
