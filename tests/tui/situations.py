"""The three named situations the dashboard is tested and photographed on.

``degraded_fleet``: paused, quarantined, draining and unhealthy (stale) hosts,
unsatisfied constraints, a withdrawn destructive batch, a rejected revision and
an operator mode override. ``empty_fleet``: a controller with no hosts and no
plan yet. ``admission_fleet``: a healthy fleet with one admission row in each
of the spec's nine states. These hand-built documents exercise the view-model
in unit tests (they carry richer plans than a small simulated fleet produces);
the saved fixtures under ``fixtures/`` come from the real controller instead
(``tests/tui/controller_situations.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.tui.builders import (
    FIXTURES,
    NOW,
    Doc,
    action,
    assignment,
    base_document,
    candidate,
    event,
    gpu_server_80g,
    laptop_16g,
    mac_studio_64g,
    model,
    profile,
    residency,
    workstation_48g,
)


def degraded_fleet() -> Doc:
    doc = base_document(mode="recommend", revision="9e1d07b")
    doc["mode"] = {
        "effective": "recommend",
        "desired": "automatic",
        "override": {
            "mode": "recommend",
            "reason": "incident 4711: thermal alarms on desk hosts",
            "set_at": NOW - 1800,
            "source": "operator",
        },
        "refused_automatic": None,
    }
    doc["desired"].update(
        {
            "revision": "9e1d07b",
            "last_good_revision": "5b8a3c2",
            "latest_seen_revision": "9e1d07b",
            "rejected_revision": "9e1d07b",
            "rejected": [
                {
                    "revision": "9e1d07b",
                    "at": NOW - 240,
                    "errors": [
                        {
                            "file": "policies/models/llama-70b.yaml",
                            "line": 14,
                            "column": 5,
                            "kind": "ModelProfile",
                            "name": "llama-70b",
                            "pointer": "/spec/min_replicas",
                            "message": "min_replicas 4 exceeds max_replicas 3",
                        }
                    ],
                }
            ],
        }
    )
    doc["hosts"] = [
        gpu_server_80g(
            "gpu-a",
            "rack-1",
            residency("llama-70b", "ready", 42_000, active=3),
            residency("qwen-coder-7b", "warming", 6_500),
        ),
        workstation_48g(
            "gpu-b",
            "rack-2",
            residency("mistral-small", "ready", 14_000, active=1),
            residency("embed-small", "draining", 1_200),
            state="throttled",
            heartbeat_age=6.0,
        ),
        laptop_16g("laptop-ana", "desk-3", state="paused", reported_state="paused"),
        laptop_16g(
            "laptop-ben", "desk-5", residency("llama-8b", "draining", 5_200), state="draining"
        ),
        mac_studio_64g(
            "mac-studio",
            "desk-4",
            residency("llama-8b", "ready", 5_200),
            state="quarantined",
            reported_state="quarantined",
        ),
        workstation_48g(
            "edge-1",
            "rack-2",
            residency("mistral-small", "failed", 14_000),
            state="unhealthy",
            stale=True,
            heartbeat_age=95.0,
            unhealthy_reasons=["no heartbeat for 95s (lease 60s)"],
        ),
    ]
    doc["profiles"] = [
        profile("embed-small", 1_200, min_replicas=0),
        profile("embed-large", 9_000),
        profile("llama-70b", 42_000, priority=90),
        profile("llama-8b", 5_200),
        profile("mistral-small", 14_000),
        profile("qwen-coder-7b", 6_500, min_replicas=0),
    ]
    doc["model_count"] = 6
    doc["models"] = [
        model(
            "embed-large",
            1,
            0,
            0,
            health="Missing",
            reason="no eligible host",
            unmet=("no_eligible_nodes",),
        ),
        model("embed-small", 0, 0, 0, health="Progressing", reason="draining: demand expired"),
        model(
            "llama-70b",
            2,
            1,
            1,
            health="Degraded",
            reason="1 of 2 replicas ready",
            unmet=("failure_domain_shortfall",),
        ),
        model(
            "llama-8b", 1, 1, 0, health="Degraded", reason="only replica is on a quarantined host"
        ),
        model("mistral-small", 2, 2, 1, health="Progressing", reason="replacing failed replica"),
        model("qwen-coder-7b", 1, 1, 0, health="Progressing", reason="warming on gpu-a"),
    ]
    doc["unmet_constraints"] = [
        {
            "model_id": "embed-large",
            "code": "no_eligible_nodes",
            "message": "no accepting host offers runtime vllm with 9000 MB free",
            "missing_replicas": 1,
        },
        {
            "model_id": "llama-70b",
            "code": "failure_domain_shortfall",
            "message": "min_failure_domains 2: only rack-1 can host a replica",
            "missing_replicas": 1,
        },
    ]
    doc["forecasts"] = [
        {
            "model_id": "llama-70b",
            "requests_per_minute": 42.0,
            "offered_concurrency": 2.6,
            "queue_depth": 1.0,
            "p95_latency_ms": 1900.0,
            "error_rate": 0.01,
            "confidence": 0.9,
        },
    ]
    doc["plan"] = {
        "input_digest": "sha256:7d1e" + "0" * 56,
        "generation": "g-0042",
        "assignments": [
            assignment("llama-70b", "gpu-a", 42_000, "baseline min_replicas", existing=True),
            assignment("qwen-coder-7b", "gpu-a", 6_500, "direct demand"),
            assignment("mistral-small", "gpu-b", 14_000, "baseline min_replicas", existing=True),
            assignment("llama-8b", "gpu-b", 5_200, "baseline min_replicas: replace fenced host"),
            assignment("mistral-small", "gpu-a", 14_000, "replace failed replica on edge-1"),
        ],
        "preemptions": [
            {
                "host_id": "gpu-b",
                "model_id": "embed-small",
                "beneficiary": "llama-8b",
                "reason": "direct demand outranks expired speculative canary",
            },
        ],
        "unsatisfied": [
            {
                "model_id": "embed-large",
                "code": "no_eligible_nodes",
                "message": "no accepting host offers runtime vllm with 9000 MB free",
                "missing_replicas": 1,
            },
            {
                "model_id": "llama-70b",
                "code": "failure_domain_shortfall",
                "message": "min_failure_domains 2: only rack-1 can host a replica",
                "missing_replicas": 1,
            },
        ],
        "explanations": {
            "llama-8b": {
                "target_replicas": 1,
                "target_reason": "min_replicas 1",
                "demand_class": "baseline",
                "candidates": [
                    candidate("gpu-a", headroom=0.21, spread=0.1, residency=0.0),
                    candidate("gpu-b", chosen=1.0, headroom=0.42, spread=0.3, residency=0.0),
                    candidate("laptop-ana", rejection="host_not_accepting", detail="paused"),
                    candidate("mac-studio", rejection="host_not_accepting", detail="quarantined"),
                    candidate("edge-1", rejection="stale_heartbeat", detail="95s > 60s"),
                ],
            },
            "llama-70b": {
                "target_replicas": 2,
                "target_reason": "min_replicas 2, min_failure_domains 2",
                "demand_class": "baseline",
                "candidates": [
                    candidate("gpu-a", chosen=1.0, headroom=0.3, residency=0.5),
                    candidate(
                        "gpu-b",
                        rejection="insufficient_memory",
                        detail="needs 42000 MB, 33952 MB free",
                    ),
                ],
            },
        },
    }
    warm = action("warm", "gpu-a", "qwen-coder-7b", age=12.0, status="running")
    warm["delivered_at"] = NOW - 10
    load = action("load", "gpu-b", "llama-8b", executable=False, blocked="mode_recommend")
    replace = action("load", "gpu-a", "mistral-small", executable=False, blocked="mode_recommend")
    drain = action(
        "drain",
        "mac-studio",
        "llama-8b",
        age=900.0,
        status="withdrawn",
        reason="no receipt before the lease expired; destructive batch withdrawn",
    )
    unload = action(
        "unload",
        "mac-studio",
        "llama-8b",
        age=900.0,
        status="withdrawn",
        reason="depends on a withdrawn drain",
    )
    doc["reconciliation"] = {
        "mode": "recommend",
        "actions": [
            load,
            replace,
            action("drain", "gpu-b", "embed-small", executable=False, blocked="mode_recommend"),
        ],
        "deferred": [],
    }
    doc["pending_commands"] = [warm, load]
    doc["delivered_pending_action_ids"] = [warm["action_id"]]
    doc["withdrawn_destructive"] = [drain, unload]
    doc["revisions"] = {"dirty": 58, "processed": 57, "success": 55, "safety": 57}
    doc["delivery_safety_error"] = "destructive batch for llama-8b withdrawn: no receipt in 60s"
    doc["warnings"] = ["desired revision 9e1d07b rejected; running 5b8a3c2"]
    doc["history"] = [
        event(1800, "mode_override", "operator set mode recommend: incident 4711"),
        event(
            900,
            "withdrawn",
            "drain withdrawn: no receipt before lease expiry",
            host_id="mac-studio",
            model_id="llama-8b",
            action_id=drain["action_id"],
        ),
        event(600, "host_state", "quarantined: investigating thermal fault", host_id="mac-studio"),
        event(
            420,
            "receipt_failed",
            "llama-server exited with signal 9",
            host_id="edge-1",
            model_id="mistral-small",
            action_id="warm-edge-1-mistral-small-0",
            duration=8.4,
        ),
        event(300, "host_state", "paused: battery use", host_id="laptop-ana"),
        event(240, "revision_rejected", "9e1d07b: 1 error; keeping 5b8a3c2"),
        event(95, "host_unhealthy", "no heartbeat for 95s", host_id="edge-1"),
        event(
            60,
            "receipt_succeeded",
            "loaded in 41.2s",
            host_id="gpu-a",
            model_id="qwen-coder-7b",
            action_id="load-gpu-a-qwen-coder-7b-0",
            duration=41.2,
        ),
        event(
            12,
            "delivered",
            "warm delivered",
            host_id="gpu-a",
            model_id="qwen-coder-7b",
            action_id=warm["action_id"],
        ),
    ]
    return doc


def empty_fleet() -> Doc:
    doc = base_document(mode="recommend", revision="1a2b3c4")
    doc["last_tick"] = None
    doc["last_successful_tick_duration_ms"] = None
    doc["revisions"] = {"dirty": 1, "processed": 0, "success": 0, "safety": 0}
    doc["history"] = [event(5, "controller_started", "recommend mode; waiting for registrations")]
    return doc


ADMISSION_ROWS: tuple[
    tuple[str, str, str | None, float, tuple[int, int, int, int], int, float | None, str], ...
] = (
    (
        "coding",
        "ready",
        "qwen-coder-7b",
        2.4,
        (1, 1, 1, 0),
        3,
        35.0,
        "served by 1 ready replica on gpu-a",
    ),
    (
        "research",
        "starting",
        "mistral-small",
        1.7,
        (1, 1, 0, 1),
        2,
        48.0,
        "warming on gpu-b, ready in about 48s",
    ),
    (
        "marketing",
        "planned",
        "mistral-small",
        0.9,
        (1, 1, 0, 1),
        2,
        48.0,
        "shares mistral-small with research; load queued behind the governor",
    ),
    (
        "video",
        "undersupplied",
        "wan-video-14b",
        3.1,
        (2, 1, 1, 1),
        1,
        210.0,
        "offered concurrency 3.1 needs 2 replicas; 1 eligible host",
    ),
    (
        "sales",
        "deferred",
        "llama-8b",
        0.4,
        (0, 0, 0, 0),
        3,
        20.0,
        "deferred under current capacity: portfolio keeps one slot spare",
    ),
    (
        "image",
        "capacity-contended",
        "sdxl-turbo",
        1.2,
        (1, 0, 0, 1),
        2,
        90.0,
        "eligible hosts full; no victim below priority 50",
    ),
    (
        "translation",
        "blocked-by-residency",
        "nllb-3b",
        1.6,
        (1, 0, 0, 1),
        1,
        30.0,
        "only host holds pinned llama-70b; pins are never preempted",
    ),
    (
        "legal",
        "infeasible",
        "saul-54b",
        0.8,
        (1, 0, 0, 1),
        0,
        None,
        "no host offers 60000 MB with runtime vllm",
    ),
    (
        "embedding",
        "awaiting-plan",
        None,
        0.2,
        (0, 0, 0, 0),
        0,
        None,
        "3 observations needed, 2 seen; below the 1.5 offered-concurrency gate",
    ),
)


def admission_fleet() -> Doc:
    doc = base_document(mode="automatic", revision="c0ffee1")
    doc["hosts"] = [
        gpu_server_80g(
            "gpu-a",
            "rack-1",
            residency("qwen-coder-7b", "ready", 6_500, active=2),
            residency("llama-70b", "ready", 42_000, active=4),
        ),
        workstation_48g(
            "gpu-b",
            "rack-2",
            residency("mistral-small", "warming", 14_000),
            residency("wan-video-14b", "ready", 24_000, active=1),
        ),
        laptop_16g(
            "laptop-ana", "desk-3", residency("llama-8b", "cached", 5_200), state="throttled"
        ),
        mac_studio_64g("mac-studio", "desk-4", residency("llama-8b", "ready", 5_200)),
    ]
    doc["admission"] = [
        {
            "workload": workload,
            "state": state,
            "model_id": model_id,
            "offered_concurrency": conc,
            "desired": reps[0],
            "planned": reps[1],
            "ready": reps[2],
            "missing": reps[3],
            "eligible_hosts": eligible,
            "startup_estimate_seconds": startup,
            "reason": reason,
        }
        for workload, state, model_id, conc, reps, eligible, startup, reason in ADMISSION_ROWS
    ]
    doc["models"] = [
        model("llama-70b", 1, 1, 1),
        model("llama-8b", 1, 1, 1),
        model("mistral-small", 1, 1, 0, health="Progressing", reason="warming on gpu-b"),
        model(
            "nllb-3b",
            1,
            0,
            0,
            health="Missing",
            reason="blocked by pinned residency",
            unmet=("insufficient_capacity",),
        ),
        model("qwen-coder-7b", 1, 1, 1),
        model(
            "saul-54b",
            1,
            0,
            0,
            health="Missing",
            reason="no eligible host",
            unmet=("no_eligible_nodes",),
        ),
        model(
            "wan-video-14b",
            2,
            1,
            1,
            health="Degraded",
            reason="1 of 2 replicas ready",
            unmet=("insufficient_capacity",),
        ),
    ]
    doc["model_count"] = len(doc["models"])
    doc["profiles"] = [profile(m["model_id"], 8_000, min_replicas=0) for m in doc["models"]]
    doc["unmet_constraints"] = [
        {
            "model_id": "nllb-3b",
            "code": "insufficient_capacity",
            "message": "only eligible host holds pinned llama-70b",
            "missing_replicas": 1,
        },
        {
            "model_id": "saul-54b",
            "code": "no_eligible_nodes",
            "message": "no host offers 60000 MB with runtime vllm",
            "missing_replicas": 1,
        },
        {
            "model_id": "wan-video-14b",
            "code": "insufficient_capacity",
            "message": "second replica needs 24000 MB; largest free block is 11000 MB",
            "missing_replicas": 1,
        },
    ]
    doc["plan"] = {
        "input_digest": "sha256:ad" + "1" * 62,
        "generation": "g-0107",
        "assignments": [
            assignment("qwen-coder-7b", "gpu-a", 6_500, "workload coding", existing=True),
            assignment("llama-70b", "gpu-a", 42_000, "pinned", existing=True),
            assignment("mistral-small", "gpu-b", 14_000, "workloads research, marketing"),
            assignment("wan-video-14b", "gpu-b", 24_000, "workload video", existing=True),
            assignment("llama-8b", "mac-studio", 5_200, "baseline", existing=True),
        ],
        "preemptions": [],
        "unsatisfied": [
            {
                "model_id": u["model_id"],
                "code": u["code"],
                "message": u["message"],
                "missing_replicas": 1,
            }
            for u in doc["unmet_constraints"]
        ],
        "explanations": {},
    }
    warm = action("warm", "gpu-b", "mistral-small", age=20.0, status="running")
    warm["delivered_at"] = NOW - 18
    doc["reconciliation"] = {"mode": "automatic", "actions": [warm], "deferred": []}
    doc["pending_commands"] = [warm]
    doc["delivered_pending_action_ids"] = [warm["action_id"]]
    doc["history"] = [
        event(
            300,
            "receipt_succeeded",
            "loaded in 52.0s",
            host_id="gpu-b",
            model_id="wan-video-14b",
            action_id="load-gpu-b-wan-video-14b-0",
            duration=52.0,
        ),
        event(120, "admission", "research admitted: mistral-small canary"),
        event(
            20,
            "delivered",
            "warm delivered",
            host_id="gpu-b",
            model_id="mistral-small",
            action_id=warm["action_id"],
        ),
    ]
    return doc


SITUATIONS: dict[str, Callable[[], Doc]] = {
    "degraded_fleet": degraded_fleet,
    "empty_fleet": empty_fleet,
    "admission_fleet": admission_fleet,
}


def fixture_path(name: str) -> Path:
    return FIXTURES / f"{name}.json"
