"""Local overrides: the host state they produce, expiry, durability, and the node CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.cli.main import main
from gridctl.domain.states import HostState
from gridctl.node import overrides
from gridctl.node.statestore import NodeStateStore


@pytest.mark.parametrize(
    ("kind", "state"),
    [
        ("drain", HostState.DRAINING),
        ("pause", HostState.PAUSED),
        ("quarantine", HostState.QUARANTINED),
    ],
)
def test_each_override_maps_to_its_host_state(kind: str, state: HostState) -> None:
    o = overrides.make_override(kind, " why ", now=10.0, for_seconds=None)
    assert o.reason == "why" and o.expires_at is None
    assert overrides.host_state(o, 1e12) is state
    assert not overrides.host_state(o, 1e12).admits_new_work


def test_no_override_means_accepting_and_expiry_ends_an_override() -> None:
    assert overrides.host_state(None, 0.0) is HostState.ACCEPTING
    o = overrides.make_override("pause", "battery", now=100.0, for_seconds=60)
    assert overrides.host_state(o, 159.9) is HostState.PAUSED
    assert overrides.host_state(o, 160.0) is HostState.ACCEPTING
    assert overrides.describe(o, 130.0)["expires_in_seconds"] == 30.0  # type: ignore[index]
    assert overrides.describe(o, 161.0) is None


def test_bad_overrides_are_refused() -> None:
    with pytest.raises(ValueError):
        overrides.make_override("evict", "", now=0.0, for_seconds=None)
    with pytest.raises(ValueError):
        overrides.make_override("drain", "", now=0.0, for_seconds=0)


def test_cli_overrides_are_durable_and_shown_in_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path)
    assert main(["node", "quarantine", "--state-dir", state, "--reason", "thermal fault"]) == 0
    store = NodeStateStore(tmp_path / "node.sqlite3")
    assert store.override() is not None and store.override().kind == "quarantine"  # type: ignore[union-attr]
    store.close()
    capsys.readouterr()
    assert main(["node", "status", "--state-dir", state, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["host_state"] == "quarantined"
    assert doc["override"]["reason"] == "thermal fault"
    assert doc["daemon"]["running"] is False
    assert main(["node", "resume", "--state-dir", state]) == 0
    capsys.readouterr()
    assert main(["node", "status", "--state-dir", state, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_state"] == "accepting"


def test_stop_refuses_a_record_that_cannot_prove_an_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    # a record pointing at this very test process, but without the instance marker in argv
    (tmp_path / "daemon.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "create_time": 0.0,
                "executable": "/x",
                "cmdline": ["python"],
                "instance_id": "",
            }
        )
    )
    assert main(["node", "stop", "--state-dir", str(tmp_path)]) == 1
    assert "cannot prove" in capsys.readouterr().out


def test_stop_never_signals_a_pid_whose_birth_time_does_not_match(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    from gridctl.node.processes import observe_identity

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        seen = observe_identity(bystander.pid)
        assert seen is not None
        record = {
            "pid": seen.pid,
            "create_time": seen.create_time - 3600.0,  # a reused PID: born at another time
            "executable": seen.executable,
            "cmdline": list(seen.cmdline),
            "instance_id": "abc",
        }
        (tmp_path / "daemon.json").write_text(json.dumps(record))
        assert main(["node", "stop", "--state-dir", str(tmp_path)]) == 1
        assert "not signalling" in capsys.readouterr().out
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_stop_reports_incomplete_when_a_recorded_child_cannot_be_proven(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No daemon runs; the store names a child whose PID now belongs to someone else:
    the process is left alone and the stop is reported incomplete, exit 1."""
    import subprocess
    import sys

    from gridctl.domain import ResidencyState
    from gridctl.node.processes import observe_identity
    from gridctl.node.records import ProcessIdentity, ResidencyRecord

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        seen = observe_identity(bystander.pid)
        assert seen is not None
        reused = ProcessIdentity(
            pid=seen.pid,
            create_time=seen.create_time - 3600.0,  # the recorded child was born elsewhen
            executable=seen.executable,
            cmdline=seen.cmdline,
        )
        store = NodeStateStore(tmp_path / "node.sqlite3")
        store.put_residency(
            ResidencyRecord(
                model_id="m", state=ResidencyState.READY, port=25000, pid=seen.pid, identity=reused
            )
        )
        store.close()
        assert main(["node", "stop", "--state-dir", str(tmp_path)]) == 1
        out = capsys.readouterr().out
        assert f"left pid {seen.pid} alone: identity not proven" in out
        assert "node stop incomplete" in out
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
