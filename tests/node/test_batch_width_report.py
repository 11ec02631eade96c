"""A residency's batch width as the node reports it and the controller reads it.

A single-model engine's ``max_concurrency`` may prove a wider batch than its profile
declares; the residencies of a shared (multi-model) engine say ``shared_engine`` and the
controller credits their node-wide limit to no model.
"""

from __future__ import annotations

from gridctl.config.snapshots import residency_from_row
from gridctl.domain.states import HostState, ResidencyState
from gridctl.node import reports
from gridctl.node.records import ResidencyRecord

SHA = "b" * 64


def row(*, shared: bool, state: ResidencyState = ResidencyState.READY) -> dict[str, object]:
    record = ResidencyRecord(
        model_id="m1",
        state=state,
        memory_mb=640,
        artifact_sha256=SHA,
        port=20000,
        pid=4242,
        loaded_at=500.0,
        runtime="llama.cpp-router" if shared else "llama.cpp",
    )
    envelope = reports.allocator_envelope(
        HostState.ACCEPTING,
        [record],
        [],
        1000.0,
        endpoint_of=lambda _r: "http://127.0.0.1:20000",
        engine_api_key="key",
        max_concurrency=4,
        shares_engine=lambda r: r.runtime == "llama.cpp-router",
    )
    rows = envelope["residencies"]
    assert isinstance(rows, list)
    found = rows[0]
    assert isinstance(found, dict)
    return found


def test_a_single_model_engine_reports_its_width_and_the_controller_credits_it() -> None:
    found = row(shared=False)
    assert found["max_concurrency"] == 4 and "shared_engine" not in found
    parsed = residency_from_row(found, 1000.0)
    assert parsed is not None and parsed.max_concurrency == 4


def test_a_shared_engine_says_so_and_its_limit_is_credited_to_no_model() -> None:
    found = row(shared=True)
    assert found["max_concurrency"] == 4 and found["shared_engine"] is True
    parsed = residency_from_row(found, 1000.0)
    assert parsed is not None and parsed.max_concurrency is None
