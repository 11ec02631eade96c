"""Start paths of a model on a host: learned load and warm timings, priors otherwise.

The controller attaches what it learned per (host, model, current artifact) to
each host snapshot (``LearnedOnHost``); everything that prices a start —
cold-start scoring, the fastest path behind lookahead, portfolio startup
penalties, repack delays and preemption warm-back cost — reads it here, so
they all use the same fastest eligible learned load-plus-warm path. A host
with nothing learned keeps the profile's configured estimates.
"""

from __future__ import annotations

from collections.abc import Iterable

from gridctl.domain import HostSnapshot, LearnedOnHost, ModelProfile


def learned_on(host: HostSnapshot, model_id: str) -> LearnedOnHost | None:
    for row in host.learned:
        if row.model_id == model_id:
            return row
    return None


def warm_seconds(profile: ModelProfile, learned: LearnedOnHost | None) -> float:
    if learned is not None and learned.warm_seconds is not None:
        return learned.warm_seconds
    return profile.warm_seconds


def load_seconds(profile: ModelProfile, learned: LearnedOnHost | None) -> float:
    if learned is not None and learned.load_seconds is not None:
        return learned.load_seconds
    return profile.load_seconds


def start_seconds(profile: ModelProfile, learned: LearnedOnHost | None, cached: bool) -> float:
    """Seconds from nothing running to serving: warm only when the exact weights are cached."""
    warm = warm_seconds(profile, learned)
    return warm if cached else warm + load_seconds(profile, learned)


def fastest(paths: Iterable[float]) -> float | None:
    found = [p for p in paths]
    return min(found) if found else None
