"""Retirement tombstones.

Removing a model profile never unloads abruptly: it creates a durable
tombstone with a target of zero replicas. The reconciler then cancels the
model's pending availability work and drains managed copies (including ones
that reappear when an offline host returns) through the ordinary guards. The
tombstone stays until an operator creates that model profile again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gridctl.domain import ModelProfile
from gridctl.reconcile.records import Tombstone


def retire_profiles(
    tombstones: Iterable[Tombstone],
    previous: Mapping[str, ModelProfile],
    current: Mapping[str, ModelProfile],
    now: float,
) -> tuple[Tombstone, ...]:
    """Tombstones after the desired state moved from ``previous`` to ``current``."""
    kept = {t.model_id: t for t in tombstones if t.model_id not in current}
    for model_id in sorted(set(previous) - set(current)):
        if model_id in kept:
            continue
        profile = previous[model_id]
        kept[model_id] = Tombstone(
            model_id=model_id,
            retired_at=now,
            artifact_sha256=profile.artifact_sha256,
            min_residency_seconds=profile.min_residency_seconds,
        )
    return tuple(kept[m] for m in sorted(kept))


def newly_retired(
    tombstones_before: Iterable[Tombstone], tombstones_after: Iterable[Tombstone]
) -> tuple[str, ...]:
    """Models retired by this change: the store clears their demand history."""
    before = {t.model_id for t in tombstones_before}
    return tuple(sorted(t.model_id for t in tombstones_after if t.model_id not in before))
