"""The embedded default's logical hosts share this machine's cores as they share its
memory: each host's engines get an equal share of threads (at least one), and the node
daemons are started with it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridctl.cli import up_cmd
from gridctl.cli.main import build_parser
from gridctl.credentials import issue_node_credential, load_or_create_signing_key, write_secret_file
from gridctl.fleetrun import (
    MAX_MACHINES,
    FleetRun,
    FleetSettings,
    partition_threads,
    spawn_nodes,
    stop_fleet,
)


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


@given(st.integers(min_value=1, max_value=MAX_MACHINES))
def test_engine_threads_never_oversubscribe_the_cores(machines: int) -> None:
    threads = partition_threads(machines)
    assert threads >= 1
    # together the hosts' engines ask for no more cores than there are, unless each
    # host already has a single thread
    assert threads == 1 or threads * machines <= usable_cores()


def test_a_single_host_gets_every_core() -> None:
    assert partition_threads(1) == usable_cores()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_node_daemons_are_started_with_their_share(tmp_path: Path) -> None:
    settings = FleetSettings(
        machines=2,
        watch_dir=str(tmp_path),
        state_root=str(tmp_path / "fleet"),
        port=free_port(),  # no controller listens: the nodes keep trying to register
        engine_port_base=free_port(),
        capacity_mb=512,
        engine_threads=3,
    )
    key = load_or_create_signing_key(tmp_path / "controller")
    tokens = {}
    for host_id in ("local-1", "local-2"):
        tokens[host_id] = tmp_path / f"{host_id}.token"
        write_secret_file(tokens[host_id], issue_node_credential(key, host_id, now=0.0) + "\n")
    run = FleetRun(settings)
    said: list[str] = []
    try:
        spawn_nodes(run, tokens, detached=False, say=said.append)
        for host_id in ("local-1", "local-2"):
            argv = [str(a) for a in run.children[host_id].args]
            assert argv[argv.index("--engine-threads") + 1] == "3"
        assert all("512 MB, 3 engine threads" in line for line in said)
    finally:
        assert stop_fleet(run) == []


@pytest.mark.parametrize("command", [["up"], ["fleet", "up"]])
def test_the_operator_sets_engine_threads_or_gets_the_share(command: list[str]) -> None:
    parser = build_parser(command[0])
    chosen = up_cmd._settings(parser.parse_args([*command, "--engine-threads", "3"]))
    assert chosen.engine_threads == 3
    # unset, the fleet computes each host's share when it starts
    assert up_cmd._settings(parser.parse_args(command)).engine_threads == 0
    with pytest.raises(SystemExit):
        parser.parse_args([*command, "--engine-threads", "0"])
