"""The messages the split fence judges: coordinator claims, stage loads, stops.

A stage remembers one accepted claim per model artifact, so every message
carries the artifact key (``model_id``, ``package_ref``, ``manifest_sha256``).
These are plain frozen values; the rules that judge them live in
``fence_rules`` and the per-stage memory in ``registry``.

Missing text fields are empty strings (``None`` for a load's or stop's
coordinator id, where absence has a meaning of its own: an unfenced load).
Whitespace-only text counts as missing.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, order=True)
class ClaimKey:
    """The model artifact a claim is about; one accepted claim per key per stage."""

    model_id: str
    package_ref: str
    manifest_sha256: str


@dataclass(frozen=True)
class Claim:
    """A coordinator's request to own the split generation of one artifact.

    ``coordinator_term`` orders coordinators: a higher term supersedes a lower
    one. ``lease_until_unix_ms`` is a fence, not a heartbeat: loads arriving
    after it are refused until the coordinator claims again.
    """

    model_id: str
    package_ref: str
    manifest_sha256: str
    coordinator_id: str
    coordinator_term: int
    topology_id: str
    run_id: str
    participant_set_hash: str
    topology_hash: str
    lease_until_unix_ms: int

    @property
    def key(self) -> ClaimKey:
        return ClaimKey(self.model_id, self.package_ref, self.manifest_sha256)

    def same_epoch(self, other: Claim) -> bool:
        """True when every field except the lease is identical (a lease refresh)."""
        return all(
            getattr(self, f.name) == getattr(other, f.name)
            for f in fields(self)
            if f.name != "lease_until_unix_ms"
        )


@dataclass(frozen=True)
class StageLoad:
    """A request to start a stage runtime for one artifact.

    ``coordinator_term == 0`` together with no ``coordinator_id`` marks a local
    or legacy load that does not take part in split coordination.
    """

    model_id: str
    package_ref: str
    manifest_sha256: str
    coordinator_id: str | None
    coordinator_term: int
    topology_id: str
    run_id: str

    @property
    def key(self) -> ClaimKey:
        return ClaimKey(self.model_id, self.package_ref, self.manifest_sha256)

    @property
    def unfenced(self) -> bool:
        return self.coordinator_term == 0 and not present(self.coordinator_id)


@dataclass(frozen=True)
class StopRequest:
    """A request to stop the running stage of one artifact, sent by a coordinator."""

    model_id: str
    package_ref: str
    manifest_sha256: str
    coordinator_id: str | None
    coordinator_term: int

    @property
    def key(self) -> ClaimKey:
        return ClaimKey(self.model_id, self.package_ref, self.manifest_sha256)


def present(text: str | None) -> bool:
    """A text field counts as given only when it holds something besides whitespace."""
    return text is not None and text.strip() != ""
