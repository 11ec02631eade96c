"""Learned warm and load timings: a bounded eight-sample EWMA per node, model and artifact.

A successful warm teaches warm time; a load teaches transfer time only when it
really fetched the artifact (``artifact_fetched``), never when it merely
verified a cached file. The key includes the artifact digest, so a new
checksum starts again from the configured priors. A timing becomes
authoritative after four samples, is blended with the prior before that, and
expires thirty days after its last sample. Invalid reports (non-finite,
negative, longer than an hour) are ignored. Pure arithmetic: the store
persists the values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gridctl.domain import ActionKind, ControllerPolicy, ModelProfile
from gridctl.reconcile import StartupEstimate

# a stored timing's key: host, model, artifact digest and what it times (``TimingKind``)
TimingKey = tuple[str, str, str, str]


class TimingKind(StrEnum):
    WARM = "warm"
    TRANSFER = "transfer"  # a load that fetched the artifact


@dataclass(frozen=True)
class LearnedTiming:
    seconds: float
    samples: int
    updated_at: float

    def expired(self, now: float, policy: ControllerPolicy) -> bool:
        return now - self.updated_at > policy.timing_expiry_seconds

    def authoritative(self, policy: ControllerPolicy) -> bool:
        return self.samples >= policy.timing_authoritative_samples


def timing_kind(kind: ActionKind, artifact_fetched: bool) -> TimingKind | None:
    """Which timing a successful action teaches, if any."""
    if kind is ActionKind.WARM:
        return TimingKind.WARM
    if kind is ActionKind.LOAD and artifact_fetched:
        return TimingKind.TRANSFER
    return None


def timing_key(
    kind: ActionKind, host_id: str, model_id: str, artifact_sha256: str | None, fetched: bool
) -> TimingKey | None:
    """Where a successful action's duration is learned, if it teaches a timing at all."""
    taught = timing_kind(kind, fetched)
    if taught is None:
        return None
    return (host_id, model_id, artifact_sha256 or "", taught.value)


def valid_report(seconds: object, policy: ControllerPolicy) -> bool:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return False
    value = float(seconds)
    return math.isfinite(value) and 0.0 <= value <= policy.timing_max_report_seconds


def learn(
    previous: LearnedTiming | None, seconds: float, now: float, policy: ControllerPolicy
) -> LearnedTiming:
    """Fold one valid sample in: a running mean for the first eight, then an EWMA."""
    if previous is None or previous.expired(now, policy):
        return LearnedTiming(seconds, 1, now)
    samples = previous.samples + 1
    alpha = 1.0 / min(samples, policy.timing_ewma_samples)
    value = previous.seconds + alpha * (seconds - previous.seconds)
    return LearnedTiming(value, min(samples, 1_000_000), now)


def estimate(
    prior: float, learned: LearnedTiming | None, now: float, policy: ControllerPolicy
) -> float:
    """The prior until samples exist; a linear blend until authoritative; then learned."""
    if learned is None or learned.expired(now, policy):
        return prior
    if learned.authoritative(policy):
        return learned.seconds
    weight = learned.samples / policy.timing_authoritative_samples
    return weight * learned.seconds + (1.0 - weight) * prior


def startup_estimates(
    learned: Mapping[TimingKey, LearnedTiming],
    profiles: Mapping[str, ModelProfile],
    now: float,
    policy: ControllerPolicy,
) -> dict[tuple[str, str], StartupEstimate]:
    """Learned load (cold fetch) and warm times per (host, model), priors otherwise; a
    timing learned on another artifact than the profile's is ignored (a new checksum starts
    from the configured priors)."""
    result: dict[tuple[str, str], StartupEstimate] = {}
    for (host, model, artifact, kind), timing in learned.items():
        profile = profiles.get(model)
        if profile is None or artifact != (profile.artifact.sha256 or ""):
            continue
        current = result.get(
            (host, model), StartupEstimate(profile.load_seconds, profile.warm_seconds)
        )
        if kind == TimingKind.TRANSFER.value:
            current = StartupEstimate(
                estimate(profile.load_seconds, timing, now, policy), current.warm_seconds
            )
        elif kind == TimingKind.WARM.value:
            current = StartupEstimate(
                current.load_seconds, estimate(profile.warm_seconds, timing, now, policy)
            )
        result[(host, model)] = current
    return result
