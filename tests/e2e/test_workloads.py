"""Workload intelligence on real processes: unbound coding demand warms the coding model.

Two profiles serve the Gemma artifact under two ids, one scored ``coding: 1``
and one ``general: 1``, both ``min_replicas: 0``. Repeated unbound coding
requests get honest 503s naming the workload; the coding-scored model warms
without any request naming it, and the next unbound coding request is
answered by it. Status shows the coding admission row move from
awaiting-plan/planned through starting to ready, with reasons.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import ROOT, Fleet, make_fleet, profile_yaml

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CODING = {
    "model": "auto",
    "messages": [{"role": "user", "content": "Fix this python bug: print(1"}],
    "max_tokens": 8,
}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    fleet.repo.write(
        "coder.yaml",
        profile_yaml(
            "gemma-coder",
            min_replicas=0,
            max_replicas=1,
            cooldown=60.0,
            extra="  workload_scores: {coding: 1}\n",
        ),
    )
    fleet.repo.write(
        "general.yaml",
        profile_yaml(
            "gemma-general",
            min_replicas=0,
            max_replicas=1,
            cooldown=60.0,
            extra="  workload_scores: {general: 1}\n",
        ),
    )
    fleet.repo.write(
        "workloads.yaml", (ROOT / "policies" / "workloads.yaml").read_text(encoding="utf-8")
    )
    fleet.repo.commit("two ids for one artifact, scored for coding and general work")
    yield fleet
    fleet.stop()


def coding_row(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in status.get("admission", []) if r["workload"] == "coding"), None)


def test_unbound_coding_requests_warm_the_coding_model(fleet: Fleet) -> None:
    fleet.start(machines=1)
    rows: list[tuple[str, str]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                row = coding_row(fleet.status())
            except httpx.HTTPError:
                row = None
            if row is not None and (not rows or rows[-1] != (row["state"], row["reason"])):
                rows.append((row["state"], row["reason"]))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    deadline = time.monotonic() + 240
    refused: list[dict[str, Any]] = []
    answer: httpx.Response | None = None
    with httpx.Client(base_url=fleet.url, timeout=60) as client:
        while time.monotonic() < deadline:
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        watcher.start()
        while time.monotonic() < deadline:
            response = client.post("/v1/chat/completions", json=CODING)
            if response.status_code == 200:
                answer = response
                break
            assert response.status_code == 503, response.text
            refused.append(response.json()["error"])
            time.sleep(1.0)
    stop.set()
    watcher.join(timeout=5)
    if answer is None:
        print(fleet.log())
    assert answer is not None, rows
    # min_replicas 0: nothing is resident before the first request, so it is refused; how
    # many more are depends on how fast this machine loads and warms the model
    assert refused
    assert all(e["workload"] == "coding" and "coding" in e["message"] for e in refused)
    assert refused[0]["admission_state"] == "awaiting-plan"
    assert answer.json()["choices"][0]["message"]["content"] is not None
    assert fleet.live_copies("gemma-coder") and not fleet.live_copies("gemma-general")
    status = fleet.status()
    row = coding_row(status)
    assert row is not None and (row["state"], row["model_id"]) == ("ready", "gemma-coder")
    assert status["portfolio"]["mapping"]["coding"] == "gemma-coder"
    states = [s for s, _ in rows]
    order = {"awaiting-plan": 0, "planned": 1, "starting": 2, "ready": 3}
    seen = [order[s] for s in states if s in order]
    assert seen == sorted(seen), rows
    assert {"starting", "ready"} <= set(states) and ({"awaiting-plan", "planned"} & set(states))
    assert all(reason for _, reason in rows)
    print("\nADMISSION coding:", " -> ".join(f"{s} ({r})" for s, r in rows))
    coder = [f for f in status["forecasts"] if f["model_id"] == "gemma-coder"]
    assert all(f["sample_count"] == 0 for f in coder)  # served unbound work, never direct demand
