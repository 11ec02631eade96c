"""Bounds before state: a node's report is refused whole unless every number and string
is within the wire schema's documented range, and whatever was accepted can always be
planned, rendered as status and exposed as metrics.

The real controller app in-process; poisoned reports are sent as raw JSON text so the
literals (``1e400``, a 401-digit integer, ``"\\ud800"``) reach the server unchanged.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from gridctl.config.schemas import validator
from gridctl.controller.registry import HEARTBEAT_SCHEMA, REGISTRATION_SCHEMA
from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import GEMMA_SHA, SimNode, sim_service

MB_MAX = 2**40
COUNT_MAX = 2**31
SECONDS_MAX = 315_576_000
BYTES_MAX = 2**50


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ControllerService]:
    service, _clock = sim_service(tmp_path, {})
    yield service


def credential(service: ControllerService, host_id: str) -> dict[str, str]:
    sim = SimNode.for_controller(service.options.state_dir, host_id, None, service.options.clock)  # type: ignore[arg-type]
    return sim.headers


def full_registration(host_id: str) -> dict[str, Any]:
    """A registration that fills every numeric and free-text field the schema knows."""
    return {
        "role": "allocator",
        "host_id": host_id,
        "models": [],
        "network": {"advertise": "10.0.0.7", "address_family": "ipv4"},
        "resources": {
            "capacity_mb": 4096,
            "reserved_mb": 1,
            "external_mb": 1,
            "gpu_count": 1,
            "gpu_memory_mb": 1,
            "max_models": 1,
            "disk_free_mb": 1,
            "disk_total_mb": 1,
            "memory_bandwidth_gbps": 1.5,
            "compute_gflops": 1.5,
            "host_priority": 1,
            "measured_tokens_per_second": 1.5,
            "measured_latency_ms": 1.5,
        },
        "allocator": {
            "schema_version": 1,
            "state": "accepting",
            "cached_models": [
                {
                    "model_id": "gemma",
                    "artifact_sha256": GEMMA_SHA,
                    "cached_age_seconds": 1.5,
                    "size_bytes": 1,
                    "last_used_age_seconds": 1.5,
                    "gguf": {
                        "architecture": "gemma3",
                        "block_count": 1,
                        "context_length": 1,
                        "embedding_length": 1,
                        "name": "Gemma",
                    },
                }
            ],
            "residencies": [
                {
                    "model_id": "gemma",
                    "memory_mb": 640,
                    "state": "cached",
                    "loaded_age_seconds": 1.5,
                    "last_used_age_seconds": 1.5,
                    "active_requests": 1,
                    "queued_requests": 1,
                }
            ],
            "transfers": [
                {
                    "model_id": "gemma",
                    "artifact_sha256": GEMMA_SHA,
                    "source": "https://example.test/gemma.gguf",
                    "bytes_done": 1,
                    "bytes_total": 2,
                    "rate_bytes_per_second": 1.5,
                }
            ],
            "artifact_bytes_fetched_total": 1,
        },
    }


def poisoned(document: Any, number: str, text: str) -> str:
    """``document`` as JSON text with every integer and float literal replaced by
    ``number`` and every free-text string (not ids, enums or digests) by ``text``."""
    marker_int, marker_text = "@@NUMBER@@", "@@TEXT@@"
    free_text = {"source", "architecture", "name", "advertise", "state"}

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and key != "schema_version":
            return marker_int
        if isinstance(value, str) and key in free_text:
            return marker_text
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        return value

    encoded = json.dumps(walk(document))
    return encoded.replace(f'"{marker_int}"', number).replace(f'"{marker_text}"', text)


def planned_and_rendered(service: ControllerService, http: TestClient) -> None:
    record = service.controller.tick()
    assert record.ok, record.error
    status = http.get("/allocator/status")
    assert status.status_code == 200, status.text
    assert list(validator("wire/status.schema.json").iter_errors(status.json())) == []
    metrics = http.get("/metrics")
    assert metrics.status_code == 200, metrics.text


@pytest.mark.parametrize(
    ("number", "text"),
    [
        ("1" + "0" * 400, '"ok"'),  # 10**400 as a literal
        ("1" + "0" * 5000, '"ok"'),  # past Python's own int-string limit
        ("1e400", '"ok"'),  # overflows to infinity
        ("-1e400", '"ok"'),
        ("1", '"\\ud800"'),  # a lone surrogate in every free-text field
        ("1", '"\\udfff tail"'),
        ("1", '"\\u001b[31mred"'),  # a terminal escape
    ],
)
def test_a_poisoned_registration_is_400_stores_nothing_and_planning_goes_on(
    service: ControllerService, number: str, text: str
) -> None:
    with TestClient(service.build_app()) as http:
        headers = {**credential(service, "host-p"), "Content-Type": "application/json"}
        answer = http.put(
            "/nodes/host-p",
            content=poisoned(full_registration("host-p"), number, text),
            headers=headers,
        )
        assert answer.status_code == 400, answer.text
        assert "error" in answer.json()
        assert service.registry.host("host-p") is None
        planned_and_rendered(service, http)


def test_the_unpoisoned_report_is_accepted(service: ControllerService) -> None:
    """The same document with ordinary values passes, so the 400s above are the poison's."""
    with TestClient(service.build_app()) as http:
        headers = credential(service, "host-p")
        answer = http.put("/nodes/host-p", json=full_registration("host-p"), headers=headers)
        assert answer.status_code == 200, answer.text
        planned_and_rendered(service, http)


def test_a_poisoned_heartbeat_is_400_and_keeps_the_last_good_report(
    service: ControllerService,
) -> None:
    with TestClient(service.build_app()) as http:
        headers = credential(service, "host-p")
        assert http.put(
            "/nodes/host-p", json=full_registration("host-p"), headers=headers
        ).is_success
        before = service.registry.host("host-p")
        beat = {
            "node_id": "host-p",
            "allocator": full_registration("host-p")["allocator"],
            "load": {"active_tasks": 1, "queue_depth": 1},
            "request_commands": False,
        }
        for number, text in (("1e400", '"ok"'), ("9" * 401, '"ok"'), ("1", '"\\ud83d"')):
            answer = http.post(
                "/nodes/host-p/heartbeat",
                content=poisoned(beat, number, text),
                headers={**headers, "Content-Type": "application/json"},
            )
            assert answer.status_code == 400, answer.text
        assert service.registry.host("host-p") == before
        planned_and_rendered(service, http)


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        (("resources", "capacity_mb"), MB_MAX + 1),
        (("resources", "memory_bandwidth_gbps"), 1e300),
        (("allocator", "residencies", 0, "queued_requests"), "seven"),
        (("allocator", "residencies", 0, "loaded_age_seconds"), SECONDS_MAX * 10.0),
        (("allocator", "transfers", 0, "bytes_done"), BYTES_MAX + 1),
        (("allocator", "transfers", 0, "source"), "x" * 2049),
        (("allocator", "state"), "a" * 65),
        (("network", "advertise"), "evil host\x1b[2J"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(
    service: ControllerService, pointer: tuple[Any, ...], value: Any
) -> None:
    document = full_registration("host-p")
    target: Any = document
    for step in pointer[:-1]:
        target = target[step]
    target[pointer[-1]] = value
    with TestClient(service.build_app()) as http:
        answer = http.put("/nodes/host-p", json=document, headers=credential(service, "host-p"))
        if pointer[:3] == ("allocator", "residencies", 0):
            # a bad residency row is excluded on its own and fails the host closed
            assert answer.status_code == 200, answer.text
            record = service.registry.host("host-p")
            assert record is not None and record.state.value == "unhealthy"
            assert record.queued == {}
        else:
            assert answer.status_code == 400, answer.text
            expected = "/" + "/".join(str(p) for p in pointer)
            assert answer.json()["error"]["pointer"] == expected
            assert service.registry.host("host-p") is None
        planned_and_rendered(service, http)


def test_a_registration_without_network_clears_the_old_advertised_address(
    service: ControllerService,
) -> None:
    with TestClient(service.build_app()) as http:
        headers = credential(service, "host-p")
        assert http.put(
            "/nodes/host-p", json=full_registration("host-p"), headers=headers
        ).is_success
        record = service.registry.host("host-p")
        assert record is not None and record.network["advertise"] == "10.0.0.7"
        clean = full_registration("host-p")
        del clean["network"]
        assert http.put("/nodes/host-p", json=clean, headers=headers).is_success
        record = service.registry.host("host-p")
        assert record is not None and record.network == {}


# --- a property: any schema-valid report can be planned and rendered ---------------------

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,24}", fullmatch=True)
labels = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)
shas = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)
ages = st.floats(0, SECONDS_MAX, allow_nan=False, allow_infinity=False)
megabytes = st.integers(0, MB_MAX)
counts = st.integers(0, COUNT_MAX)
byte_counts = st.integers(0, BYTES_MAX)
residency_states = st.sampled_from(
    ["cached", "loading", "warming", "ready", "draining", "unloading", "failed"]
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


residency_rows = st.fixed_dictionaries(
    {"model_id": ids, "memory_mb": megabytes, "state": residency_states},
    optional={
        "artifact_sha256": optional(shas),
        "loaded_age_seconds": optional(ages),
        "last_used_age_seconds": optional(ages),
        "active_requests": counts,
        "queued_requests": counts,
        "pinned": st.booleans(),
        "ownership": st.sampled_from(["managed", "manual", "external"]),
        "endpoint": st.sampled_from(["http://127.0.0.1:9/x", "http://127.0.0.1:8/engines/m"]),
        "max_concurrency": optional(counts),
    },
)
transfer_rows = st.fixed_dictionaries(
    {"model_id": ids, "artifact_sha256": shas, "bytes_done": byte_counts},
    optional={
        "source": labels,
        "bytes_total": optional(byte_counts),
        "rate_bytes_per_second": st.floats(0, BYTES_MAX, allow_nan=False, allow_infinity=False),
    },
)
cached_rows = st.fixed_dictionaries(
    {"model_id": ids},
    optional={
        "artifact_sha256": optional(shas),
        "cached_age_seconds": optional(ages),
        "size_bytes": byte_counts,
        "last_used_age_seconds": optional(ages),
        "provenance": st.sampled_from(["demand", "predictive", "operator"]),
        "gguf": st.fixed_dictionaries(
            {},
            optional={
                "architecture": optional(labels),
                "block_count": optional(counts),
                "context_length": optional(counts),
                "name": optional(labels),
                "unreadable": labels,
            },
        ),
    },
)
envelopes = st.fixed_dictionaries(
    {
        "schema_version": st.just(1),
        "state": st.one_of(
            st.sampled_from(["accepting", "throttled", "draining", "paused", "unhealthy"]),
            labels.filter(lambda s: len(s) <= 64),
        ),
    },
    optional={
        "cached_models": st.lists(cached_rows, max_size=3),
        "residencies": st.lists(residency_rows, max_size=3),
        "transfers": st.lists(transfer_rows, max_size=2),
        "artifact_bytes_fetched_total": byte_counts,
        "concurrency_multiplier": st.floats(0, 1),
    },
)
resources = st.fixed_dictionaries(
    {"capacity_mb": megabytes},
    optional={
        "reserved_mb": megabytes,
        "external_mb": megabytes,
        "gpu_count": optional(st.integers(0, 65536)),
        "gpu_memory_mb": optional(megabytes),
        "max_models": counts,
        "disk_free_mb": optional(megabytes),
        "disk_total_mb": optional(megabytes),
        "thermal_derate": st.floats(0, 1),
        "memory_bandwidth_gbps": optional(st.floats(0, 1e9)),
        "measured_latency_ms": optional(st.floats(0, 3.15576e11)),
        "host_priority": st.integers(0, 1000),
    },
)
hosts = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    envelope=envelopes,
    beat=envelopes,
    resources=resources,
    advertise=optional(st.from_regex(r"[a-z0-9.-]{1,30}", fullmatch=True)),
)
def test_any_schema_valid_report_is_planned_and_rendered(
    service: ControllerService,
    envelope: dict[str, Any],
    beat: dict[str, Any],
    resources: dict[str, Any],
    advertise: str | None,
) -> None:
    host_id = f"prop-{next(hosts)}"
    registration: dict[str, Any] = {
        "role": "allocator",
        "host_id": host_id,
        "resources": resources,
        "allocator": envelope,
    }
    if advertise is not None:
        registration["network"] = {"advertise": advertise, "address_family": "dns"}
    heartbeat = {"node_id": host_id, "allocator": beat, "request_commands": False}
    assert list(validator(REGISTRATION_SCHEMA).iter_errors(registration)) == []
    assert list(validator(HEARTBEAT_SCHEMA).iter_errors(heartbeat)) == []
    headers = credential(service, host_id)
    with TestClient(service.build_app()) as http:
        answer = http.put(f"/nodes/{host_id}", json=registration, headers=headers)
        assert answer.status_code == 200, answer.text
        planned_and_rendered(service, http)
        answer = http.post(f"/nodes/{host_id}/heartbeat", json=heartbeat, headers=headers)
        assert answer.status_code == 200, answer.text
        planned_and_rendered(service, http)
