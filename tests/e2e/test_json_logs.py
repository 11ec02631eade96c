"""`--log-format json` on a real fleet: every line of the controller's and the nodes' logs
is one JSON object, and one action id can be followed through its issue, its delivery and
its acknowledgement in both. No credential appears in any of those lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import GEMMA, Fleet, make_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REQUIRED = ("time", "level", "logger", "message")


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of ``path`` parsed; fails naming the first line that is not JSON."""
    records = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            pytest.fail(f"{path.name}:{number} is not JSON: {line[:300]!r}")
        assert isinstance(record, dict), f"{path.name}:{number}: {line[:300]!r}"
        missing = [k for k in REQUIRED if k not in record]
        assert not missing, f"{path.name}:{number} lacks {missing}: {line[:300]!r}"
        records.append(record)
    return records


def secrets_of(fleet: Fleet) -> dict[str, str]:
    """The operator token, each node's credential and each engine's API key."""
    found = {"operator token": fleet.token}
    for node_dir in sorted(fleet.state_dir.glob("local-*")):
        found[f"{node_dir.name} credential"] = (node_dir / "node.token").read_text().strip()
        keys = (node_dir / "engine" / "api-keys").read_text().split()
        for i, key in enumerate(keys):
            found[f"{node_dir.name} engine key {i}"] = key
    return {what: secret for what, secret in found.items() if len(secret) >= 16}


def test_json_logs_follow_one_action_from_issue_to_acknowledgement(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    fleet.repo.commit("baseline")
    fleet.start(machines=2, command=[sys.executable, "-m", "gridctl", "up", "--log-format", "json"])
    try:
        wait_for("gemma routable", lambda: fleet.routable(GEMMA), deadline=240)
        hidden = secrets_of(fleet)
    except BaseException:
        print(fleet.log())
        fleet.stop()
        raise
    fleet.stop()  # the drain and unload on the way out are actions too

    logs = fleet.state_dir / "logs"
    controller = json_lines(logs / "controller.log")
    nodes = {p.stem: json_lines(p) for p in sorted(logs.glob("local-*.log"))}
    assert len(nodes) == 2 and all(nodes.values()), sorted(nodes)

    issued = [r for r in controller if r.get("event") == "issued"]
    assert issued, [r["message"] for r in controller][-40:]
    followed = None
    for first in issued:
        action_id = first["action_id"]
        mine = [r for r in controller if r.get("action_id") == action_id]
        events = [r["event"] for r in mine]
        acks = [e for e in events if e not in ("issued", "delivered")]
        host = first["host"]
        on_node = [r for r in nodes.get(host, []) if r.get("action_id") == action_id]
        node_events = {r.get("event") for r in on_node}
        if "delivered" in events and acks and {"delivered", "acknowledged"} <= node_events:
            followed = (first, mine, on_node)
            break
    assert followed is not None, "no action followed from issue to acknowledgement"
    first, mine, on_node = followed
    print(f"followed action {first['action_id']}: {[r['event'] for r in mine]}")

    # the controller's lines name host, model, plan generation and authority term
    for record in mine:
        assert record["host"] == first["host"] and record["model"] == GEMMA, record
        assert isinstance(record.get("term"), int), record
    assert first["plan_generation"] is not None and first["logger"].startswith("gridctl.")
    delivered = next(r for r in mine if r["event"] == "delivered")
    # the node's lines name the same action, host, model, generation and term
    for record in on_node:
        assert record["host"] == first["host"] and record["model"] == GEMMA, record
        assert str(record["plan_generation"]) == str(delivered["plan_generation"]), record
        assert record["term"] == delivered["term"], record
    acked = [r for r in on_node if r["event"] == "acknowledged"]
    assert any("succeeded" in r["message"] for r in acked), acked

    # no credential in any line, whatever the format
    everything = {"controller.log": controller, **{f"{k}.log": v for k, v in nodes.items()}}
    assert hidden, "the fleet's secrets were not found to check for"
    for name, records in everything.items():
        text = json.dumps(records)
        for what, secret in hidden.items():
            assert secret not in text, f"{what} in {name}"
