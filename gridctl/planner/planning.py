"""The placement pipeline, assembled in one readable function.

``plan_placement`` turns desired state (profiles, policy) and one frozen
observation (hosts, residencies, demand, ``now``) into a ``Plan``: targets,
seeded incumbents, pins, fair priority rounds with repair and staged
preemption, split placements for models no single host can hold, failure-domain
shortfalls, explanations and the input digest.
It is pure: no clock, no randomness, no I/O; equal inputs give equal bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gridctl.domain import (
    Assignment,
    ControllerPolicy,
    FleetSnapshot,
    ModelExplanation,
    ModelProfile,
    Plan,
    ResidencyState,
    SplitPlacement,
    Unsatisfied,
    UnsatisfiedCode,
)
from gridctl.planner.canonical import InputTexts, input_digest
from gridctl.planner.explaining import StaticRows
from gridctl.planner.fleet_index import SharedIndexes
from gridctl.planner.placers import SingleHostPlacer
from gridctl.planner.rounds import place_pins, place_rounds
from gridctl.planner.scoring import forget_roundings
from gridctl.planner.seeding import seed_incumbents
from gridctl.planner.splits import place_splits, without_split_coordinators
from gridctl.planner.startup_paths import start_seconds
from gridctl.planner.targets import FleetFacts, replica_target
from gridctl.planner.workspace import Workspace


def plan_placement(
    profiles: Sequence[ModelProfile],
    snapshot: FleetSnapshot,
    policy: ControllerPolicy | None = None,
    *,
    by_class: bool | None = None,
    texts: InputTexts | None = None,
    indexes: SharedIndexes | None = None,
) -> Plan:
    """Plan which replicas belong on which host, what to preempt and what cannot be met.

    By default a fleet whose hosts fall into few classes of equivalent hosts
    is searched class by class, any other host by host; ``by_class`` forces
    one search (``False``: the host-by-host reference the class search is
    checked against). Both give the same plan, byte for byte. ``texts`` shares
    the canonical text of unchanged inputs between the plans of one search (the
    digest is the same either way), and ``indexes`` the demand-independent
    indexes of the same profiles, hosts, instant and policy (the plan is too).
    """
    policy = policy or ControllerPolicy()
    forget_roundings()
    digest = input_digest(profiles, snapshot, policy, texts)
    ws = Workspace(profiles, without_split_coordinators(snapshot), policy, indexes)
    set_targets(ws)
    ws.build_scarcity()
    seed_incumbents(ws)
    place_pins(ws)
    place_rounds(ws, SingleHostPlacer(by_class))
    place_splits(ws)  # free memory only, after every single-host replica
    report_domain_shortfalls(ws)
    # the plan keeps only what its explanation rows read (``StaticRows``), not the
    # workspace: the plan's books are freed by reference counting when it returns
    return assemble(ws, digest)


_NO_FLEET = FleetFacts(ready=0, recent_ready=0, startup_seconds=None)
_READY = ResidencyState.READY  # read per incumbent: a module name, not ``EnumType.__getattr__``
_new_tuple = tuple.__new__


def fleet_facts(ws: Workspace, model_id: str) -> FleetFacts:
    profile = ws.profiles[model_id]
    eligible = ws.eligible_set[model_id]
    if not ws.special_hosts(model_id):  # no incumbent, cache, failure or learned fact
        if not eligible:
            return _NO_FLEET
        # every eligible host starts from the profile's prior: ``start_seconds(profile,
        # None, False)``, the named tuple made without its generated ``__new__``
        return _new_tuple(FleetFacts, (0, 0, profile.warm_seconds + profile.load_seconds, 0))
    ready = 0
    recent = 0
    width = 0
    horizon = ws.now - profile.scale_down_cooldown_seconds
    incumbents = {h: row for h, row in ws.incumbents[model_id].items() if h in eligible}
    for row in incumbents.values():
        if row.residency.state is _READY:
            ready += 1
            # the narrowest ready engine bounds what is proven; one that reports no
            # width has only the profile's declared batch (-1: nothing proven)
            live = row.residency.max_concurrency or -1
            if width == 0 or live < width:
                width = live
            stamps = [t for t in (row.residency.loaded_at, row.residency.last_used_at) if t]
            if stamps and max(stamps) >= horizon:
                recent += 1
    # the fastest start among eligible hosts without an incumbent: warm only where
    # the exact artifact is cached, load plus warm elsewhere, each with what was
    # learned on that host (hosts with nothing learned or cached share the prior)
    starts: list[float] = []
    plain = 0
    for h in ws.special_hosts(model_id):
        if h in eligible and h not in incumbents:
            view = ws.views[h]
            learned = view.learned.get(model_id)
            starts.append(start_seconds(profile, learned, view.has_exact_artifact(profile)))
            plain += 1
    if len(eligible) - len(incumbents) > plain:
        starts.append(start_seconds(profile, None, False))
    fastest: float | None = min(starts) if starts else None
    if fastest is None and eligible:
        fastest = start_seconds(profile, None, False)
    return FleetFacts(
        ready=ready, recent_ready=recent, startup_seconds=fastest, live_width=max(width, 0)
    )


def set_targets(ws: Workspace) -> None:
    targets, demand, policy = ws.targets, ws.demand, ws.policy
    for model_id, profile in ws.profiles.items():
        facts = fleet_facts(ws, model_id)
        targets[model_id] = replica_target(profile, demand.get(model_id), facts, policy)


def report_domain_shortfalls(ws: Workspace) -> None:
    profiles = ws.profiles
    for model_id, domains in ws.domains.items():
        used = len(domains)  # 0 exactly when nothing is placed
        if not used or used >= profiles[model_id].min_failure_domains:
            continue  # nothing placed, or the minimum met whatever the target
        required = ws.required_domains(model_id)
        if used < required:
            ws.add_shortfall(
                model_id,
                UnsatisfiedCode.FAILURE_DOMAIN_SHORTFALL,
                f"replicas span {used} of the {required} failure domains required",
                missing=0,
            )


def assemble(ws: Workspace, digest: str) -> Plan:
    # by (model, host): the books are keyed by model in model id order, then by host
    assignments: list[Assignment] = []
    for per_host in ws.assignments.values():
        if per_host:
            assignments.extend([per_host[h] for h in sorted(per_host)])
    preemptions = sorted(ws.preemptions.values(), key=lambda p: (p.host_id, p.model_id))
    unsatisfied = [
        Unsatisfied(
            model_id=model_id,
            code=code,
            message=shortfall.message,
            missing_replicas=shortfall.missing,
            host_id=shortfall.host_id,
        )
        for (model_id, code), shortfall in sorted(ws.shortfalls.items())
    ]
    static_rows = StaticRows(ws.static, ws.scores, ws.host_ids, ws.host_position)
    explanations = ws.explain.build(ws.targets, ws.host_position, static_rows)
    splits = tuple(sorted(ws.splits, key=lambda s: s.model_id))  # one per model at most
    if splits:
        explanations = explain_splits(explanations, splits)
    return Plan(
        input_digest=digest,
        now=ws.now,
        targets=tuple((m, t.replicas) for m, t in sorted(ws.targets.items())),
        assignments=tuple(assignments),
        preemptions=tuple(preemptions),
        unsatisfied=tuple(unsatisfied),
        explanations=explanations,
        splits=splits,
    )


def explain_splits(
    explanations: tuple[ModelExplanation, ...], splits: tuple[SplitPlacement, ...]
) -> tuple[ModelExplanation, ...]:
    """Each split model's explanation says where its split goes."""
    said = {s.model_id: s.summary() for s in splits}
    return tuple(
        replace(e, split=said[e.model_id]) if e.model_id in said else e for e in explanations
    )
