"""Split coordination: who may own a split model, and how its layers are laid out.

A large model can be split across several nodes, each serving a contiguous
range of layers. Two pure questions come with that, answered here without
I/O, clocks or randomness (time is always an argument):

* Fencing: a coordinator claims the split with a term and a lease; each stage
  keeps a ``ClaimRegistry`` that accepts, supersedes or rejects claims and
  refuses loads and stops from stale coordinators. A split loads only after
  ``quorum(planned_stage_count)`` stages accepted.
* Planning: ``plan_topology`` picks the context length, node set, layer
  ranges and parallel lanes from the model's shape and the nodes' memory.

Modules: ``claims`` (messages), ``fence_rules`` (pure judgement),
``registry`` (a stage's memory), ``stage_work`` (work to fence), ``startup_quorum``,
``topologies`` (planner values), ``contexts``, ``layer_fitting``
and ``planning``.
"""

from gridctl.split.claims import Claim, ClaimKey, StageLoad, StopRequest
from gridctl.split.contexts import context_candidates, context_floor
from gridctl.split.decisions import ClaimDecision, LoadDecision, StopDecision
from gridctl.split.fence_rules import claim_shape_problem, judge_claim, judge_load, judge_stop
from gridctl.split.layer_fitting import bytes_per_layer
from gridctl.split.planning import plan_topology
from gridctl.split.reasons import FenceReason
from gridctl.split.registry import ClaimRegistry
from gridctl.split.stage_work import StageWork, WorkKind
from gridctl.split.startup_quorum import quorum, quorum_reached
from gridctl.split.topologies import (
    CONTEXT_FLOOR,
    DEFAULT_LANES,
    ModelShape,
    PlannerNode,
    PlanRejection,
    PlanRequest,
    RejectionReason,
    Stage,
    TopologyPlan,
)

__all__ = [
    "CONTEXT_FLOOR",
    "DEFAULT_LANES",
    "Claim",
    "ClaimDecision",
    "ClaimKey",
    "ClaimRegistry",
    "FenceReason",
    "LoadDecision",
    "ModelShape",
    "PlanRejection",
    "PlanRequest",
    "PlannerNode",
    "RejectionReason",
    "Stage",
    "StageLoad",
    "StageWork",
    "StopDecision",
    "StopRequest",
    "TopologyPlan",
    "WorkKind",
    "bytes_per_layer",
    "claim_shape_problem",
    "context_candidates",
    "context_floor",
    "judge_claim",
    "judge_load",
    "judge_stop",
    "plan_topology",
    "quorum",
    "quorum_reached",
]
