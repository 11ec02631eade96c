"""Plain words for every stable reason code status, plan and the dashboard show.

The codes are contracts (``BlockedCode``, ``CancelReason``, ``RejectionCode``,
``UnsatisfiedCode``, ``AdmissionState``, ``AdmissionReason``); this table is
what an operator reads next to them. ``docs/reasons.md`` is rendered from it
(``python -m gridctl.cli.reasons > docs/reasons.md``) and a test keeps both
complete.
"""

from __future__ import annotations

from enum import StrEnum

from gridctl.domain.plans import UnsatisfiedCode
from gridctl.planner.portfolio_types import AdmissionState
from gridctl.planner.rejections import RejectionCode
from gridctl.reconcile.codes import BlockedCode, CancelReason
from gridctl.reconcile.fencing import AdmissionReason
from gridctl.reconcile.seeding import SeedFallback

GLOSSARY: dict[str, tuple[type[StrEnum], dict[str, str]]] = {
    "Held actions (BlockedCode)": (
        BlockedCode,
        {
            "observe_mode": "observe mode: drift is recorded, nothing is proposed or run",
            "not_in_applied_plan": "recommend mode: only the action ids of an applied plan run "
            "(`gridctl plan --out` then `gridctl apply`)",
            "replacement_not_ready": "would take away a ready replica before its replacement "
            "is ready elsewhere (the last healthy replica is never removed)",
            "trusted_replacement_not_ready": "the replacement exists but has not yet proven "
            "itself healthy long enough to be trusted",
            "requests_in_flight": "the replica is still answering requests; it drains first",
            "minimum_residency": "the replica was loaded too recently to be moved again",
            "in_place_replacement": "an old revision still occupies the host; it leaves first",
            "host_unavailable": "the host is missing, stale, or not admitting new work",
            "split_unsupported": "a stage host of the split does not advertise split_claim "
            "(no RPC engine build, fleet identity or advertised address)",
            "mutation_cooldown": "this model changed recently; the cooldown prevents churn",
            "failure_backoff": "the last attempt failed; waiting before trying again",
            "awaiting_observation": "waiting for a heartbeat newer than the last success",
            "observation_timeout": "no heartbeat confirmed the last action in time",
            "mutation_governor": "the fleet-wide limit of concurrent changes is reached",
            "host_governor": "this host's limit of concurrent changes is reached",
            "artifact_fanout": "too many hosts are fetching this artifact at once",
            "artifact_seeding": "no host holds a verified copy of this artifact yet: one host "
            "fetches it from the origin, the others then fetch it from that peer",
            "dependency_deferred": "the load it depends on is held back",
            "withdrawn_destructive": "a destructive batch was withdrawn on fresh evidence",
            "membership_recovery": "after a controller restart the fleet view may be "
            "incomplete; destructive work waits out the grace",
            "awaiting_registration": "the host has not been seen since the restart",
        },
    ),
    "Cancelled commands (CancelReason)": (
        CancelReason,
        {
            "mode_changed": "the mode left automatic; pending commands were cancelled",
            "superseded": "undelivered and no longer wanted by the plan",
            "retired": "the model's profile was removed",
            "withdrawn_for_higher_class": "withdrawn to make room for higher-priority work",
            "withdrawn_unsafe": "a destructive batch withdrawn on fresh evidence",
            "membership_recovery_expired": "restored after a restart but its grace ran out",
        },
    ),
    "Why a load skipped its artifact's seed (SeedFallback)": (
        SeedFallback,
        {
            "artifact_seed_failed": "the latest fetch of this artifact failed, so the next "
            "hosts fetch from the origin again (within the fanout limit)",
            "artifact_seed_host_unavailable": "the host fetching this artifact first stopped "
            "heartbeating, so another host fetches it from the origin",
        },
    ),
    "Why a host cannot take a model (RejectionCode)": (
        RejectionCode,
        {
            "host_state": "the host is draining, paused, quarantined or otherwise not accepting",
            "heartbeat_missing": "the host never sent a heartbeat",
            "heartbeat_stale": "the host's last heartbeat is too old",
            "heartbeat_future": "the host's clock is ahead; its heartbeat is not trusted",
            "host_unmanaged": "the host is external inventory, never actuated",
            "runtime": "the host has no runtime the model needs",
            "runtime_not_qualified": "the host reports qualification evidence, and none of "
            "the model's runtimes passed `gridctl node qualify` there",
            "backend": "the host has no backend (cpu/cuda/metal...) the model needs",
            "data_tier": "the model's data tier is not allowed on this host",
            "required_tag": "the host lacks a tag the model requires",
            "forbidden_tag": "the host carries a tag the model forbids",
            "not_allowed": "the host is not in the model's allowed hosts",
            "denied": "the host is in the model's denied hosts",
            "not_pinned": "the model is pinned to other hosts",
            "gpu_count": "the host has too few GPUs",
            "gpu_memory": "the host's GPUs have too little memory",
            "already_assigned": "this plan already puts a replica of the model there "
            "(one replica per host)",
            "model_resident": "a replica of the model is already resident there",
            "stale_artifact_in_place": "an older artifact of the model still occupies the host",
            "model_slots": "the host runs as many models as it may",
            "colocation_ceiling": "a colocation rule limits models on this host",
            "colocation_exclude": "a colocation rule excludes a model already there",
            "failure_domain": "another replica is already in this failure domain",
            "disk_unknown": "the host did not report free disk",
            "disk_admission": "the host's disk cannot hold the artifact",
            "memory_incremental": "not enough free memory now",
            "memory_desired": "not enough memory even after planned moves",
        },
    ),
    "Unmet constraints (UnsatisfiedCode)": (
        UnsatisfiedCode,
        {
            "insufficient_capacity": "no eligible host has room for another replica",
            "no_eligible_nodes": "no host passes the model's hard rules",
            "pinned_node_unavailable": "a host the model is pinned to is missing or unavailable",
            "failure_domain_shortfall": "too few failure domains for the replicas wanted",
            "colocation_conflict": "colocation rules cannot all hold",
            "disk_admission": "no eligible host can store the artifact",
            "preemption_staged": "room is being made by preempting lower-priority work",
            "eviction_limit": "the per-tick eviction limit stops further preemption",
            "unsafe_replacement": "moving it would leave the model without a ready replica",
        },
    ),
    "Workload admission (AdmissionState)": (
        AdmissionState,
        {
            "ready": "a model for the workload is ready and serves it, even below the gate",
            "starting": "a replica is loading or warming",
            "planned": "a replica is planned but not started",
            "undersupplied": "fewer replicas than the workload's demand needs",
            "deferred": "evidence is below the gate; no new placement yet",
            "capacity-contended": "the fleet has no room without displacing other work",
            "blocked-by-residency": "residency guards hold the needed change back",
            "infeasible": "no configured model scores the workload, or none can be placed",
            "awaiting-plan": "the controller has not planned this workload yet",
        },
    ),
    "Commands a node refuses (AdmissionReason)": (
        AdmissionReason,
        {
            "wrong_host": "the command names another host",
            "not_executable": "the action was not executable when issued",
            "malformed_generation": "the plan generation is unreadable",
            "missing_controller_id": "the command does not name its controller",
            "stale_term": "a newer controller term has been seen",
            "conflicting_controller": "another controller holds this term",
            "legacy_after_fenced": "an unfenced command after fenced ones",
            "missing_ttl": "the command carries no expiry",
            "expired_ttl": "the command expired before it arrived",
            "stale_generation": "an older plan generation than one already seen",
            "generation_epoch_changed": "the plan generation's epoch changed",
        },
    ),
}


def explain(code: str) -> str:
    """Plain words for ``code``, or the code itself when it is not one of ours."""
    for _enum, words in GLOSSARY.values():
        if code in words:
            return words[code]
    return code


def render_markdown() -> str:
    lines = [
        "# Reason codes",
        "",
        "Every code `gridctl status`, `gridctl plan`, the dashboard and the nodes print, "
        "in plain words. Codes never change; `--json` carries the code, plain output both.",
        "",
        "Generated by `python -m gridctl.cli.reasons > docs/reasons.md`.",
    ]
    for title, (enum, words) in GLOSSARY.items():
        lines += ["", f"## {title}", "", "| code | meaning |", "| --- | --- |"]
        lines += [f"| `{member.value}` | {words[member.value]} |" for member in enum]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
