"""The placement planner: pure, deterministic and explained.

``plan_placement(profiles, snapshot, policy) -> Plan`` decides which model
replicas belong on which host, what must be preempted and what cannot be
satisfied, and records why for every (model, host) it considered. No I/O, no
clock (``snapshot.now`` is the instant), no randomness.
"""

from gridctl.planner.canonical import canonical, input_digest, plan_bytes, plan_to_json
from gridctl.planner.plan_document import plan_document
from gridctl.planner.planning import plan_placement
from gridctl.planner.portfolio import plan_portfolio, portfolio_to_json
from gridctl.planner.portfolio_types import AdmissionState, PortfolioInputs, PortfolioResult
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.targets import ReplicaTarget, replica_target

__all__ = [
    "AdmissionState",
    "PortfolioInputs",
    "PortfolioResult",
    "Rejection",
    "RejectionCode",
    "ReplicaTarget",
    "canonical",
    "input_digest",
    "plan_bytes",
    "plan_document",
    "plan_placement",
    "plan_portfolio",
    "plan_to_json",
    "portfolio_to_json",
    "replica_target",
]
