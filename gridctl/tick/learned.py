"""What the controller learned per (host, model), attached to the snapshot placement reads.

Two sources: the learned warm and transfer timings of the store (already
blended with each profile's priors, only for the configured artifact, see
``gridctl.tick.timings.startup_estimates``) and the router's speed evidence
(``Attribution.model_speeds``), used only when it was measured on the
profile's current artifact. Each lands on its host as one ``LearnedOnHost``
per model; a model with nothing learned on a host has no row there, so the
planner keeps its priors and its host classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gridctl.domain import FleetSnapshot, LearnedOnHost, ModelProfile
from gridctl.reconcile import StartupEstimate


def learned_rows(
    profiles: Mapping[str, ModelProfile],
    startup: Mapping[tuple[str, str], StartupEstimate],
    speeds: Mapping[tuple[str, str], Any],
) -> dict[str, tuple[LearnedOnHost, ...]]:
    """Rows per host id, sorted by model id."""
    rows: dict[tuple[str, str], LearnedOnHost] = {}
    for (host, model), timing in startup.items():
        if model in profiles:
            rows[(host, model)] = LearnedOnHost(
                model, load_seconds=timing.load_seconds, warm_seconds=timing.warm_seconds
            )
    for (host, model), evidence in speeds.items():
        profile = profiles.get(model)
        if profile is None:
            continue
        sha = profile.artifact.sha256
        if sha is not None and getattr(evidence, "artifact_sha256", None) != sha:
            continue  # measured on other weights: the new artifact starts uncertain
        row = rows.get((host, model), LearnedOnHost(model))
        rows[(host, model)] = replace(
            row,
            tokens_per_second=evidence.tokens_per_second,
            speed_confidence=round(float(evidence.throughput_confidence), 6),
            latency_ms=evidence.latency_ms,
        )
    per_host: dict[str, list[LearnedOnHost]] = {}
    for (host, _model), row in sorted(rows.items()):
        per_host.setdefault(host, []).append(row)
    return {host: tuple(found) for host, found in per_host.items()}


def with_learned(
    snapshot: FleetSnapshot, rows: Mapping[str, tuple[LearnedOnHost, ...]]
) -> FleetSnapshot:
    if not rows:
        return snapshot
    hosts = tuple(
        replace(h, learned=rows[h.host_id]) if h.host_id in rows else h for h in snapshot.hosts
    )
    return replace(snapshot, hosts=hosts)
