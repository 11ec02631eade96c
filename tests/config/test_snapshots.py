"""Fleet snapshots: validated, canonicalised, and failing closed on bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.config.snapshots import load_snapshot, snapshot_from_json
from gridctl.domain import HostState, Ownership, ResidencyState
from gridctl.errors import WireError


def host(host_id: str = "h1", **allocator: object) -> dict:
    return {
        "host_id": host_id,
        "last_heartbeat": 100.0,
        "resources": {"capacity_mb": 8192, "tags": ["b", "a"]},
        "allocator": {"schema_version": 1, "state": "accepting", **allocator},
    }


def test_round_trip_with_defaults() -> None:
    snap = snapshot_from_json(
        {
            "now": 110,
            "hosts": [
                host(
                    residencies=[
                        {
                            "model_id": "m",
                            "memory_mb": 10,
                            "state": "ready",
                            "managed": False,
                            "loaded_age_seconds": 30,
                            "artifact_sha256": "AB" * 32,
                        }
                    ],
                    cached_models=["m", {"model_id": "n", "artifact_sha256": "cd" * 32}],
                )
            ],
            "demand": [{"model_id": "m", "requests_per_minute": 3}],
        }
    )
    (h,) = snap.hosts
    assert h.state is HostState.ACCEPTING
    assert h.resources.tags == ("a", "b")
    assert h.resources.runtimes == ("llama.cpp",)
    (r,) = h.residencies
    assert r.state is ResidencyState.READY and r.ownership is Ownership.EXTERNAL
    assert r.loaded_at == 80.0 and r.artifact_sha256 == "ab" * 32
    assert [c.model_id for c in h.cached] == ["m", "n"]
    assert snap.demand[0].requests_per_minute == 3.0


def test_malformed_residency_row_makes_host_unhealthy() -> None:
    snap = snapshot_from_json(
        {
            "now": 1,
            "hosts": [
                host(
                    residencies=[
                        {"model_id": "m", "memory_mb": -1, "state": "ready"},
                        {"model_id": "ok", "memory_mb": 1, "state": "ready"},
                    ]
                )
            ],
        }
    )
    (h,) = snap.hosts
    assert h.state is HostState.UNHEALTHY
    assert [r.model_id for r in h.residencies] == ["ok"]


def test_unknown_lifecycle_fails_closed() -> None:
    snap = snapshot_from_json({"now": 1, "hosts": [host(state="partying")]})
    assert snap.hosts[0].state is HostState.UNHEALTHY


def test_bad_envelope_names_the_field() -> None:
    with pytest.raises(WireError) as info:
        snapshot_from_json(
            {"now": 1, "hosts": [{"host_id": "h", "resources": {"capacity_mb": "x"}}]}
        )
    assert info.value.pointer == "/hosts/0/resources/capacity_mb"
    with pytest.raises(WireError, match="duplicate host_id"):
        snapshot_from_json({"now": 1, "hosts": [host(), host()]})


def test_unknown_fields_are_ignored_on_the_wire() -> None:
    data = {"now": 1, "future_field": True, "hosts": [dict(host(), extra={"x": 1})]}
    data["hosts"][0]["resources"]["new_sensor"] = 3
    assert snapshot_from_json(data).hosts[0].resources.capacity_mb == 8192


def test_load_snapshot_reports_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{not json")
    with pytest.raises(WireError, match=r"s\.json: not valid JSON"):
        load_snapshot(path)
    path.write_text(json.dumps({"now": 5, "hosts": [host()]}))
    assert load_snapshot(path).now == 5.0


@pytest.mark.parametrize(
    "resources",
    [
        {"capacity_mb": 8192},
        {"capacity_mb": 8192, "tags": ["b", "a"], "thermal_derate": 1, "future_field": [1]},
        {
            "capacity_mb": 65536,
            "reserved_mb": 2048,
            "external_mb": 10,
            "thermal_derate": 0.5,
            "throttle_fraction": None,
            "runtimes": ["vllm", "llama.cpp"],
            "qualified_runtimes": ["llama.cpp"],
            "backends": ["cuda"],
            "gpu_count": None,
            "gpu_memory_mb": 81920,
            "failure_domain": "rack-2",
            "tags": ["gpu"],
            "allowed_models": ["m"],
            "denied_models": ["n"],
            "allowed_data_tiers": ["restricted", "public"],
            "max_models": 3,
            "disk_free_mb": 100,
            "disk_total_mb": 200,
            "memory_bandwidth_gbps": 400.0,
            "compute_gflops": 1.5,
            "host_priority": 2,
            "measured_tokens_per_second": 12.5,
            "measured_latency_ms": None,
        },
    ],
)
def test_resources_from_report_fills_what_fill_defaults_fills(resources: dict) -> None:
    from gridctl.config.resolving import (
        RESOURCES_SCHEMA,
        resources_from_mapping,
        resources_from_report,
    )
    from gridctl.config.schemas import fill_defaults

    before = json.dumps(resources)
    read = resources_from_report(resources)
    assert read == resources_from_mapping(fill_defaults(resources, RESOURCES_SCHEMA))
    assert repr(read) == repr(resources_from_mapping(fill_defaults(resources, RESOURCES_SCHEMA)))
    assert json.dumps(resources) == before  # the document is not written into
