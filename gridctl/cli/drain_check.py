"""Will draining (or pausing) this host complete? Read from the controller's status.

A drain moves each replica elsewhere before it unloads the old copy, and the
last healthy replica of a model is never taken away. So a host that holds a
model's only ready replica, with no other host that could take one, cannot
finish draining: the replica stays loaded until capacity appears or the
owner forces it off (``--force``). This module says which models those are,
from the public status document, without changing anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LIVE_STATES = frozenset({"ready", "warming", "loading", "draining"})


@dataclass(frozen=True)
class Stuck:
    model_id: str
    ready_elsewhere: int
    wanted: int
    why: str

    def as_json(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "ready_elsewhere": self.ready_elsewhere,
            "wanted": self.wanted,
            "why": self.why,
        }


def _free_mb(host: dict[str, Any]) -> int:
    return int(host["capacity_mb"]) - int(host.get("reserved_mb") or 0) - int(host["used_mb"])


def stuck_replicas(doc: dict[str, Any], host_id: str) -> list[Stuck]:
    """Models whose last ready replica is on ``host_id`` with nowhere else to go."""
    hosts = {h["host_id"]: h for h in doc.get("hosts", [])}
    here = hosts.get(host_id)
    if here is None:
        return []
    memory = {p["name"]: int(p["memory_mb"]) for p in doc.get("profiles", [])}
    wanted = {m["model_id"]: int(m.get("desired") or 0) for m in doc.get("models", [])}
    out = []
    for residency in here.get("residencies", []):
        model = residency["model_id"]
        if residency.get("state") not in LIVE_STATES:
            continue
        ready_elsewhere = sum(
            1
            for other_id, other in hosts.items()
            if other_id != host_id
            for r in other.get("residencies", [])
            if r["model_id"] == model and r.get("state") == "ready"
        )
        if ready_elsewhere:
            continue
        need = memory.get(model, 0)
        takers = [
            other_id
            for other_id, other in sorted(hosts.items())
            if other_id != host_id
            and other.get("state") == "accepting"
            and _free_mb(other) >= need
            and not any(r["model_id"] == model for r in other.get("residencies", []))
        ]
        if takers:
            continue
        others = len(hosts) - 1
        why = (
            "it is the only host in the fleet"
            if others == 0
            else f"none of the {others} other host(s) is accepting with {need} MB free"
        )
        out.append(Stuck(model, 0, wanted.get(model, 0), why))
    return out


def cannot_complete_lines(host_id: str, verb: str, stuck: list[Stuck]) -> list[str]:
    lines = []
    for s in stuck:
        lines.append(
            f"{verb} of {host_id} cannot complete: it holds the last ready replica of "
            f"{s.model_id} and {s.why}; the replica stays loaded (the last healthy replica is "
            f"never taken away). `gridctl node {verb} --host {host_id} --force` unloads it anyway."
        )
    return lines
