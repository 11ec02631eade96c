"""``build_view`` and ``plan_lines``: the pure half of the dashboard."""

from __future__ import annotations

import copy
import random

from gridctl.tui.consequences import CLEAR, mode_request, tick_request
from gridctl.tui.plan_diff import plan_lines
from gridctl.tui.viewmodel import build_view
from tests.tui.builders import NOW, assignment, gpu_server_80g, residency
from tests.tui.situations import admission_fleet, degraded_fleet, empty_fleet


def test_same_document_same_view_and_host_order_does_not_matter() -> None:
    document = degraded_fleet()
    shuffled = copy.deepcopy(document)
    random.Random(7).shuffle(shuffled["hosts"])
    assert build_view(document) == build_view(shuffled)
    assert [h.host_id for h in build_view(document).hosts] == sorted(
        h["host_id"] for h in document["hosts"]
    )


def test_degraded_fleet_view() -> None:
    view = build_view(degraded_fleet())
    counts = view.host_counts()
    assert counts["paused"] == counts["quarantined"] == counts["unhealthy"] == 1
    edge = next(h for h in view.hosts if h.host_id == "edge-1")
    assert edge.stale and edge.heartbeat_age_seconds == 95.0
    assert view.mode.drifted and view.mode.desired == "automatic"
    assert view.mode.effective == "recommend"
    groups = [c.group for c in view.commands]
    assert groups.count("withdrawn") == 2 and "delivered" in groups and "pending" in groups
    assert [c.duration_seconds for c in view.commands if c.group == "receipt"] == [41.2, 8.4]
    assert view.desired.rejected[0].errors[0].startswith("policies/models/llama-70b.yaml:14:5:")
    llama70 = next(m for m in view.models if m.model_id == "llama-70b")
    assert llama70.unmet == ("failure_domain_shortfall",)
    assert [h.age_seconds for h in view.history] == sorted(h.age_seconds for h in view.history)


def test_plan_diff_signs() -> None:
    view = build_view(degraded_fleet())
    lines = {(line.sign, line.model_id, line.host_id) for line in view.plan}
    assert ("+", "llama-8b", "gpu-b") in lines
    assert ("~", "qwen-coder-7b", "gpu-a") in lines  # assigned, still warming
    assert ("-", "embed-small", "gpu-b") in lines  # preempted
    assert ("!", "embed-large", None) in lines
    assert not any(line[1] == "llama-70b" and line[0] != "!" for line in lines)  # ready: no change
    plus = next(line for line in view.plan if line.model_id == "llama-8b" and line.sign == "+")
    assert plus.actions == ("load (blocked: mode_recommend)",)
    assert any("x mac-studio: host_not_accepting" in entry for entry in plus.explain)
    assert [line.sign for line in view.plan] == sorted(
        (line.sign for line in view.plan), key="+~-!".index
    )


def test_external_residencies_are_never_shown_as_removals() -> None:
    hosts = [gpu_server_80g("gpu-a", "r1", residency("ext", "ready", 1000, ownership="external"))]
    plan = {"assignments": [], "preemptions": [], "unsatisfied": [], "explanations": {}}
    assert plan_lines(plan, hosts, []) == ()
    plan["assignments"] = [assignment("m", "gpu-a", 10, "baseline")]
    assert [line.sign for line in plan_lines(plan, hosts, [])] == ["+"]


def test_empty_fleet_view() -> None:
    view = build_view(empty_fleet())
    assert view.hosts == () and view.plan == () and not view.plan_exists
    assert view.last_tick == "no tick yet"
    assert view.now == NOW


def test_admission_rows_keep_every_field() -> None:
    view = build_view(admission_fleet())
    video = next(row for row in view.admission if row.workload == "video")
    assert (video.desired, video.planned, video.ready, video.missing) == (2, 1, 1, 1)
    assert video.eligible_hosts == 1 and video.startup_estimate_seconds == 210.0
    assert video.offered_concurrency == 3.1 and video.state == "undersupplied"
    waiting = next(row for row in view.admission if row.workload == "embedding")
    assert waiting.model_id is None


def test_tolerates_a_trimmed_document() -> None:
    view = build_view({"now": NOW, "hosts": [{"host_id": "h", "residencies": [{}]}]})
    assert view.hosts[0].state == "unknown" and view.mode.effective == "unknown"


def test_consequences_name_the_effect() -> None:
    view = build_view(degraded_fleet())
    automatic = mode_request(view, "automatic")
    assert "EXECUTES" in automatic.consequence and "git" in automatic.consequence.lower()
    clear = mode_request(view, CLEAR)
    assert "automatic" in clear.consequence  # git declares automatic: clearing re-enables it
    assert "nothing is executed" in tick_request(view).consequence
    auto_view = build_view(admission_fleet())
    assert "1 executable action" in tick_request(auto_view).consequence


def test_a_running_transfer_shows_as_a_bar_in_the_fleet_row() -> None:
    from gridctl.tui.widgets.fleet_panel import residency_summary

    document = copy.deepcopy(degraded_fleet())
    host = document["hosts"][0]
    host["transfers"] = [
        {
            "model_id": "gemma-3-270m",
            "artifact_sha256": "a" * 64,
            "bytes_done": 131_072_000,
            "bytes_total": 262_144_000,
            "rate_bytes_per_second": 22_020_096.0,
            "percent": 50.0,
        }
    ]
    row = next(h for h in build_view(document).hosts if h.host_id == host["host_id"])
    (transfer,) = row.transfers
    assert transfer.fraction == 0.5 and transfer.bytes_total == 262_144_000
    shown = residency_summary(row).plain
    assert "gemma-3-270m fetching █████░░░░░ 50% 21.0MB/s" in shown
    untouched = build_view(degraded_fleet())
    assert all(h.transfers == () for h in untouched.hosts)


def test_a_plan_without_host_rows_explains_with_the_folded_hosts() -> None:
    hosts = [gpu_server_80g("gpu-a", "r1")]
    plan = {
        "assignments": [assignment("m", "gpu-a", 10, "baseline")],
        "preemptions": [],
        "unsatisfied": [],
        "explanations": {},
        "models": {
            "m": {
                "target_replicas": 1,
                "target_reason": "min_replicas",
                "demand_class": "baseline",
                "hosts_considered": 5,
                "chosen": ["gpu-a"],
                "rejected": [
                    {
                        "reason": "data_tier",
                        "detail": "not trusted",
                        "hosts": 3,
                        "example_host": "lap-1",
                    },
                ],
                "eligible": [{"detail": "not evaluated", "hosts": 1, "example_host": "gpu-b"}],
            }
        },
    }
    (line,) = plan_lines(plan, hosts, [])
    assert line.explain == (
        "target 1 replica(s), baseline: min_replicas",
        "  * gpu-a: chosen",
        "  x 3 hosts: data_tier (not trusted), e.g. lap-1",
        "    1 host: not evaluated, e.g. gpu-b",
    )


def test_a_split_release_is_shown_as_a_removal_and_a_claim_as_a_change() -> None:
    plan = {"assignments": [], "preemptions": [], "unsatisfied": [], "explanations": {}}
    actions = [
        {"kind": "split_release", "host_id": "gpu-a", "model_id": "big", "executable": True},
        {"kind": "split_claim", "host_id": "gpu-b", "model_id": "big", "executable": True},
    ]
    signs = {(line.host_id, line.sign) for line in plan_lines(plan, [], actions)}
    assert signs == {("gpu-a", "-"), ("gpu-b", "~")}
