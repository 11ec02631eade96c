"""Split placements: one replica across several hosts when no single host can hold it.

After the placement rounds, a model whose profile allows splitting
(``ModelProfile.split``) and that still misses a replica because no eligible
host has the memory for a whole one is offered to the split-topology planner
(``gridctl.split.plan_topology``) over what the rounds left free. A plan found
there becomes a ``SplitPlacement``: the coordinator host (the first stage, which
runs ``llama-server --rpc``), each stage's host, half-open layer range and memory,
and each stage's memory is charged on its host's ledger so nothing else in this
plan is put into it. When the split planner refuses, the model's unsatisfied row
keeps its reason, with the split's named reason added.

Rules, kept deliberately simple:

* Free memory only. A split runs after every single-host placement, so it never
  takes memory a replica of any priority got, is always preferred less than a
  single-host replica, never preempts and never takes any replica (a healthy last
  one included) from another model.
* Stage hosts are the model's eligible hosts (tags, runtime, data tier, host state
  and the rest of static eligibility) that run llama.cpp (the RPC backend), hold
  nothing of the model, and pass every dynamic rule (slots, colocation, failure
  domain) for a stage, whose artifact disk is not reserved: stages receive their
  tensors from the coordinator. A host's budget is what both memory ledgers leave,
  less the admission headroom.
* At most one split per model per plan, of at most ``split.max_stages`` hosts.
  ``PlanRequest`` takes no failure domains, and hosts report no stage-transfer
  latency, so neither steers the topology; every stage is one failure domain more
  the split depends on.
* The profile's ``memory_mb`` (on llama.cpp) is the whole replica's budget, KV
  cache included, so it is the model's weight bytes for the planner and the
  per-token KV cost is zero: the selected context is the native one.
* A split keeps its hosts (``keeping_stage_hosts``). The hosts serving a stage of the
  model's newest generation (the highest coordinator term any host reports) are
  tried first, joined by the fewest other hosts (most free memory first, then host
  id) the topology needs; the first such plan that uses every one of them wins.
  Only when none does is the split planned afresh over every eligible host. So a
  host joining the fleet, or one with a smaller id, never moves a split that
  still fits where it is (each move is a new coordinator term: the stages stop
  and load again); a stage host that left is replaced by the fewest hosts needed.

A split's coordinator engine, once running (a residency with ``split_term``), is not
a replica of its own to placement (``without_split_coordinators``).

Pure: no I/O, no clock; hosts and models are taken in sorted order, so equal inputs
give equal splits.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gridctl.domain import (
    DEFAULT_RUNTIME,
    FleetSnapshot,
    HostSnapshot,
    Residency,
    SplitPlacement,
    SplitStage,
    UnsatisfiedCode,
)
from gridctl.planner.candidates import Candidate
from gridctl.planner.placement_filters import first_rejection
from gridctl.planner.workspace import Workspace

if TYPE_CHECKING:
    from gridctl.split import PlanRequest, TopologyPlan

# ``gridctl.split`` (fencing, claims and the topology planner: about 15 ms of a fresh
# process) is imported by the first model that asks for a split; nearly every plan has none

MIB = 1024 * 1024  # the planner's MB, as bytes for the split planner
_CAPACITY = UnsatisfiedCode.INSUFFICIENT_CAPACITY


def _coordinating(host: HostSnapshot) -> frozenset[str]:
    """Models whose split this host coordinates: it reports serving their first stage
    with itself as coordinator."""
    return frozenset(
        s.model_id for s in host.split_stages or () if s.coordinator_id == host.host_id
    )


def _split_part(host: HostSnapshot, residency: Residency, coordinating: frozenset[str]) -> bool:
    return residency.split_term is not None or residency.model_id in coordinating


def without_split_coordinators(snapshot: FleetSnapshot) -> FleetSnapshot:
    """The fleet as placement sees it: a split's coordinator engine is part of its split,
    not a whole replica on its host. That is a residency with ``split_term``, or any
    residency of a model on the host that reports coordinating its split (the weights
    it fetches before warming, say): a host holding a stage of a model never holds a
    whole replica of it. Its layers, and their memory, are on the stages the split
    charges, so it is neither an incumbent replica nor memory of its own; the
    reconciler keeps or stops it with the split (``reconcile.splitserve``). The same
    snapshot comes back when there is none."""
    if not any(
        h.split_stages or any(r.split_term is not None for r in h.residencies)
        for h in snapshot.hosts
    ):
        return snapshot  # (nearly every fleet: no host serves a split)
    changed = False
    hosts: list[HostSnapshot] = []
    for host in snapshot.hosts:
        coordinating = _coordinating(host)
        kept = tuple(r for r in host.residencies if not _split_part(host, r, coordinating))
        if len(kept) != len(host.residencies):
            host, changed = replace(host, residencies=kept), True
        hosts.append(host)
    return replace(snapshot, hosts=tuple(hosts)) if changed else snapshot


def place_splits(ws: Workspace) -> None:
    """Place at most one split replica of every model that allows one and has no host for
    a whole replica, highest priority first (then model id), into free memory only."""
    wanting = sorted(
        (m for m in ws.model_ids if ws.profiles[m].split is not None),
        key=lambda m: (-ws.priority(m), m),
    )
    for model_id in wanting:
        shortfall = ws.shortfalls.get((model_id, _CAPACITY))
        if shortfall is None or shortfall.missing <= 0 or any_host_fits(ws, model_id):
            continue
        outcome = plan_split(ws, model_id)
        if isinstance(outcome, SplitPlacement):
            charge(ws, outcome)
            ws.splits.append(outcome)
            shortfall.missing -= 1
            if shortfall.missing == 0:
                del ws.shortfalls[(model_id, _CAPACITY)]
        else:
            shortfall.message = f"{shortfall.message}; {outcome}"


def stage_budget_mb(ws: Workspace, host_id: str) -> int:
    """What a new stage may take on the host: both ledgers' free memory, less headroom."""
    ledger = ws.ledgers[host_id]
    incremental = ledger.incremental_free_mb - ws.policy.admission_headroom_mb
    return max(0, min(incremental, ledger.desired_free_mb))


def any_host_fits(ws: Workspace, model_id: str) -> bool:
    """Whether some eligible host without the model has the memory for a whole replica."""
    placed = ws.assignments[model_id]
    for host_id in ws.eligible[model_id]:
        if host_id in placed:
            continue
        footprint = ws.new_footprint(model_id, host_id)
        if footprint is not None and footprint <= stage_budget_mb(ws, host_id):
            return True
    return False


def stage_hosts(ws: Workspace, model_id: str) -> list[str]:
    """Eligible llama.cpp hosts with free memory, nothing of the model, and no dynamic rule
    against one more model there, in host id order."""
    profile = ws.profiles[model_id]
    resident = set(ws.resident_hosts(model_id)) | set(ws.assignments[model_id])
    hosts: list[str] = []
    for host_id in sorted(ws.eligible[model_id]):
        view = ws.views[host_id]
        resources = view.host.resources
        qualified = resources.qualified_runtimes
        if host_id in resident or DEFAULT_RUNTIME not in resources.runtimes:
            continue
        if qualified is not None and DEFAULT_RUNTIME not in qualified:
            continue
        if stage_budget_mb(ws, host_id) <= 0:
            continue
        stage = Candidate(profile, host_id, view, ws.ledgers[host_id], DEFAULT_RUNTIME, 0, None, 0)
        if first_rejection(ws, stage) is None:
            hosts.append(host_id)
    return hosts


def serving_stage_hosts(ws: Workspace, model_id: str) -> list[str]:
    """The hosts that report a stage of the model's newest split generation (the
    highest coordinator term reported for it), in stage order."""
    reported = sorted(
        (-stage.coordinator_term, stage.stage_index, host_id)
        for host_id, view in ws.views.items()
        for stage in view.host.split_stages or ()
        if stage.model_id == model_id
    )
    if not reported:
        return []
    newest = reported[0][0]
    return [host_id for term, _, host_id in reported if term == newest]


def keeping_stage_hosts(ws: Workspace, model_id: str, hosts: list[str]) -> TopologyPlan | None:
    """The split over the hosts already serving its stages (those still among ``hosts``)
    and the fewest others it needs, or None when no such plan uses every one of them."""
    from gridctl.split import PlanRejection, plan_topology

    split = ws.profiles[model_id].split
    assert split is not None
    usable = set(hosts)
    serving = [h for h in serving_stage_hosts(ws, model_id) if h in usable]
    if not serving:
        return None
    others = sorted(
        (h for h in hosts if h not in serving), key=lambda h: (-stage_budget_mb(ws, h), h)
    )
    for count in range(max(2, len(serving)), min(split.max_stages, len(hosts)) + 1):
        subset = serving + others[: count - len(serving)]
        found = plan_topology(split_request(ws, model_id, subset))
        if isinstance(found, PlanRejection):
            continue
        if set(serving) <= {s.node_id for s in found.stages}:
            return found
        return None  # the fewer hosts it needs leave one of its own: plan afresh
    return None


def split_request(ws: Workspace, model_id: str, hosts: list[str]) -> PlanRequest:
    from gridctl.split import ModelShape, PlannerNode, PlanRequest

    profile = ws.profiles[model_id]
    split = profile.split
    assert split is not None  # (``place_splits`` asks only for models that allow one)
    shape = ModelShape(
        layer_count=split.layers,
        weight_bytes=profile.memory_for(DEFAULT_RUNTIME) * MIB,
        kv_bytes_per_token=0,  # memory_mb already holds the KV cache
        native_context=split.native_context,
    )
    nodes = tuple(PlannerNode(h, stage_budget_mb(ws, h) * MIB) for h in hosts)
    return PlanRequest(model=shape, nodes=nodes, min_nodes=2)


def plan_split(ws: Workspace, model_id: str) -> SplitPlacement | str:
    """The split of one more replica of the model, or why there is none (a short text
    beginning ``split:``)."""
    from gridctl.split import PlanRejection, plan_topology

    profile = ws.profiles[model_id]
    split = profile.split
    assert split is not None
    if DEFAULT_RUNTIME not in profile.runtimes:
        return f"split: runs on {DEFAULT_RUNTIME}, which the profile does not list"
    hosts = stage_hosts(ws, model_id)
    if len(hosts) < 2:
        return f"split: {len(hosts)} eligible host(s) with free memory for a stage, 2 needed"
    found = keeping_stage_hosts(ws, model_id, hosts) or plan_topology(
        split_request(ws, model_id, hosts)
    )
    if isinstance(found, PlanRejection):
        return f"split: {found.reason.value} across {len(hosts)} hosts ({found.message})"
    if found.stage_count > split.max_stages:
        return (
            f"split: needs {found.stage_count} stages across {len(hosts)} hosts, "
            f"max_stages is {split.max_stages}"
        )
    stages = tuple(
        SplitStage(s.node_id, s.layer_start, s.layer_end, -(-s.used_bytes // MIB))
        for s in found.stages
    )
    index = ws.placed(model_id)
    target = ws.targets[model_id]
    demand_class = target.class_of(index)
    return SplitPlacement(
        model_id=model_id,
        coordinator_host_id=stages[0].host_id,
        stages=stages,
        layer_count=split.layers,
        context_length=found.context_length,
        parallel_lanes=found.parallel_lanes,
        runtime=DEFAULT_RUNTIME,
        reason=f"{demand_class.value} replica {index + 1} of {target.replicas}: "
        f"{target.reason}; no single eligible host can hold it",
        demand_class=demand_class,
        priority=profile.priority,
    )


def charge(ws: Workspace, placement: SplitPlacement) -> None:
    """Book each stage's memory (and a serving slot) on its host's ledger."""
    for stage in placement.stages:
        ws.ledgers[stage.host_id].add_new(placement.model_id, stage.memory_mb, 0)
