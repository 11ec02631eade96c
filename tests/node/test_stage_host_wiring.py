"""Which node daemons run a split stage host: an RPC build, a fleet identity, an address."""

from __future__ import annotations

from pathlib import Path

from gridctl.node.daemon import NodeConfig, stage_host
from gridctl.node.joining import NodeIdentity
from gridctl.node.statestore import NodeStateStore
from tests.node.test_rpc_engine_e2e import _stage_server


def _config(tmp_path: Path, **changes: object) -> NodeConfig:
    base = {
        "host_id": "host-a",
        "controller_url": "https://127.0.0.1:1",
        "token_file": tmp_path / "token",
        "state_dir": tmp_path / "state",
        "advertise": "127.0.0.1",
        "binary": _stage_server().parent / "llama-server",
    }
    return NodeConfig(**(base | changes))  # type: ignore[arg-type]


def test_a_joined_node_with_an_address_and_the_rpc_build_is_a_stage_host(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "n.db")
    try:
        found = stage_host(_config(tmp_path), store, joined=True)
        assert found is not None
        assert found.settings.stage_server == _stage_server()
        assert found.settings.advertise_host == "127.0.0.1"
        assert found.settings.identity.cert_file == NodeIdentity(tmp_path / "state").cert_file
    finally:
        store.close()


def test_without_any_of_the_three_it_is_not(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "n.db")
    try:
        assert stage_host(_config(tmp_path), store, joined=False) is None
        assert stage_host(_config(tmp_path, advertise=None), store, joined=True) is None
        plain = tmp_path / "bin" / "llama-server"  # an engine directory without the stage server
        plain.parent.mkdir()
        plain.write_text("")
        assert stage_host(_config(tmp_path, binary=plain), store, joined=True) is None
    finally:
        store.close()
