"""Fair placement rounds: pins first, then priority classes, one replica per round.

Hard pins are reserved first. Then priority classes fill high to low; within a
class, baseline replicas place before direct demand, and direct before
inferred-only prewarms. Each round gives every model that still wants a
replica of the current kind exactly one, so scarce capacity is max-min fair.
Round order: more constrained models (fewer eligible hosts) and larger models
first, then the greater attributable harm (queue, latency/SLO ratio, errors,
concurrency, observed rate), the model id last.

A replica whose best free host is materially worse than an occupied one stages
a proactive repack instead (``repacking``). A replica that finds no host tries,
in order: the bounded repair (moving fresh
equal-priority replicas), an in-place artifact replacement, staged preemption
of lower-priority work (not for inferred-only demand) and the sole-host
repack. Otherwise its shortfall is recorded with the most telling code.
"""

from __future__ import annotations

from enum import Enum

from gridctl.domain import DemandClass, UnsatisfiedCode
from gridctl.planner.placers import Placer
from gridctl.planner.preemption import stage_preemption
from gridctl.planner.rejections import RejectionCode, shortfall_code
from gridctl.planner.repacking import (
    relocate_for_sole_host,
    replace_in_place,
    stage_proactive_repack,
)
from gridctl.planner.repair import try_repair
from gridctl.planner.selection import choose_host, commit
from gridctl.planner.workspace import Workspace

ROUND_CLASSES = (DemandClass.BASELINE, DemandClass.DIRECT, DemandClass.INFERRED)
_ROUND_CLASS_NAMES = {c: c.value for c in ROUND_CLASSES}
_CAPACITY_CODES = frozenset(
    {RejectionCode.MEMORY_INCREMENTAL, RejectionCode.MEMORY_DESIRED, RejectionCode.MODEL_SLOTS}
)


class Outcome(Enum):
    PLACED = "placed"
    STAGED = "staged"  # waits for a staged preemption or repack
    FAILED = "failed"


# Enum members the rounds read per replica, as module names: on Python 3.11 reading a
# member through its class runs ``EnumType.__getattr__`` (about 900 instructions a read,
# measured), a module global a few dozen.
PLACED = Outcome.PLACED
STAGED = Outcome.STAGED
FAILED = Outcome.FAILED
_FAILURE_DOMAIN = RejectionCode.FAILURE_DOMAIN
_STALE_IN_PLACE = RejectionCode.STALE_ARTIFACT_IN_PLACE
_INFERRED = DemandClass.INFERRED


def round_key(ws: Workspace, model_id: str) -> tuple[object, ...]:
    profile = ws.profiles[model_id]
    harm = ws.targets[model_id].harm
    return (
        len(ws.eligible[model_id]),
        -profile.memory_mb,
        tuple(-h for h in harm),
        model_id,
    )


def _reason(ws: Workspace, model_id: str, index: int, demand_class: DemandClass) -> str:
    target = ws.targets[model_id]
    kind = _ROUND_CLASS_NAMES[demand_class]  # (``.value`` is a property call per read)
    return f"{kind} replica {index + 1} of {target.replicas}: {target.reason}"


def place_one(
    ws: Workspace, placer: Placer, model_id: str, index: int, demand_class: DemandClass
) -> Outcome:
    dead = ws.dead.get(model_id)
    if dead is None:
        dead = ws.dead[model_id] = {}
    choice = placer.place(ws, model_id, False, dead)
    codes = set(choice.codes)
    if choice.winner is None and _FAILURE_DOMAIN in codes:
        # the minimum is reported as a shortfall; a replica in a used domain still serves
        choice = placer.place(ws, model_id, True, dead)
        codes |= choice.codes
    reason = _reason(ws, model_id, index, demand_class)
    if choice.winner is not None:
        if stage_proactive_repack(ws, model_id, choice.winner, demand_class):
            return STAGED
        commit(ws, choice.winner, demand_class, reason)
        return PLACED
    codes |= ws.static_codes[model_id]
    if codes & _CAPACITY_CODES and try_repair(ws, model_id, demand_class, reason):
        return PLACED
    if _STALE_IN_PLACE in codes and replace_in_place(ws, model_id):
        return STAGED
    if demand_class is not _INFERRED:
        if stage_preemption(ws, model_id, ws.eligible[model_id]):
            return STAGED
        if relocate_for_sole_host(ws, model_id, demand_class):
            return STAGED
    code = shortfall_code(codes)
    missing = ws.targets[model_id].replicas - index
    ws.add_shortfall(model_id, code, _message(ws, model_id, code), missing=missing)
    return FAILED


def _message(ws: Workspace, model_id: str, code: UnsatisfiedCode) -> str:
    eligible = len(ws.eligible[model_id])
    if code is UnsatisfiedCode.NO_ELIGIBLE_NODES:
        return (
            f"no host passes the hard rules ({len(ws.host_ids)} hosts considered"
            f"{_rejections_named(ws, model_id)})"
        )
    return f"{code.value.replace('_', ' ')} on all {eligible} eligible hosts"


def _rejections_named(ws: Workspace, model_id: str, most: int = 3) -> str:
    """``: 2 host_state (host is draining)``: the commonest static rejections, so "no
    host" says why (every host draining reads differently from no runtime)."""
    counts: dict[tuple[str, str], int] = {}
    for host_id in ws.host_ids:
        rejection = ws.static.rejection(model_id, host_id)
        if rejection is not None:
            key = (rejection.code.value, rejection.detail)
            counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    named = [f"{n} {code} ({detail})" if detail else f"{n} {code}" for (code, detail), n in ranked]
    if len(named) > most:
        named = [*named[:most], f"{len(named) - most} more"]
    return ": " + "; ".join(named) if named else ""


def place_pins(ws: Workspace) -> None:
    """Reserve every missing hard pin on its exact node, high priority first."""
    pinned = sorted(
        (m for m in ws.model_ids if ws.profiles[m].pins), key=lambda m: (-ws.priority(m), m)
    )
    for model_id in pinned:
        for pin in ws.profiles[model_id].pins:
            if pin in ws.assignments[model_id]:
                continue
            if pin not in ws.views:
                ws.add_shortfall(
                    model_id,
                    UnsatisfiedCode.PINNED_NODE_UNAVAILABLE,
                    f"pinned host {pin} is not in the fleet",
                    host_id=pin,
                )
                continue
            if pin not in ws.eligible_set[model_id]:
                ws.add_shortfall(
                    model_id,
                    UnsatisfiedCode.PINNED_NODE_UNAVAILABLE,
                    f"pinned host {pin} is not eligible",
                    host_id=pin,
                )
                continue
            choice = choose_host(ws, model_id, (pin,), relax_domains=True)
            if choice.winner is not None:
                commit(ws, choice.winner, DemandClass.PINNED, f"pinned to {pin}")
                continue
            if stage_preemption(ws, model_id, (pin,)):
                continue
            rejection = ", ".join(sorted(c.value for c in choice.codes))
            ws.add_shortfall(
                model_id,
                UnsatisfiedCode.PINNED_NODE_UNAVAILABLE,
                f"pinned host {pin} cannot take it now ({rejection})",
                host_id=pin,
            )


def place_rounds(ws: Workspace, placer: Placer) -> None:
    """Priority classes high to low; baseline, direct, inferred; one replica per round,
    placed where ``placer`` chooses."""
    by_priority: dict[int, list[str]] = {}  # unpinned models, in ``model_ids`` order
    for model_id in ws.model_ids:
        profile = ws.profiles[model_id]
        if not profile.pins:
            by_priority.setdefault(profile.priority, []).append(model_id)
    for priority in sorted(by_priority, reverse=True):
        models = by_priority[priority]
        progress = {m: ws.placed(m) for m in models}
        ws.displaced.clear()  # ``placed`` already counts what earlier classes took back
        keys = {m: round_key(ws, m) for m in models}  # fixed while the rounds run
        stopped: set[str] = set()
        for demand_class in ROUND_CLASSES:
            active = [m for m in models if _wants(ws, m, progress[m], demand_class, stopped)]
            while active:
                following: list[str] = []
                for model_id in sorted(active, key=keys.__getitem__):
                    index = progress[model_id]
                    outcome = place_one(ws, placer, model_id, index, demand_class)
                    progress[model_id] = index + 1
                    if outcome is FAILED:
                        stopped.add(model_id)
                    elif _wants(ws, model_id, progress[model_id], demand_class, stopped):
                        following.append(model_id)
                    if ws.displaced:
                        _take_back(ws.displaced, progress)
                active = following
            if ws.displaced:
                _take_back(ws.displaced, progress)


def _take_back(displaced: dict[str, int], progress: dict[str, int]) -> None:
    """A preemption of an equal-priority victim undoes one of its placed replicas: its
    own later round (inferred, after the beneficiary's) places or reports it again."""
    for model_id, count in displaced.items():
        if model_id in progress:
            progress[model_id] -= count
    displaced.clear()


def _wants(
    ws: Workspace, model_id: str, index: int, demand_class: DemandClass, stopped: set[str]
) -> bool:
    target = ws.targets[model_id]
    return (
        model_id not in stopped
        and index < target.replicas
        and target.class_of(index) is demand_class
    )
