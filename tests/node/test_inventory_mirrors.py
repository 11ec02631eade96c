"""A node with two controllers mirrors its heartbeats to the one without authority; when
that one does not hold the inventory a lease names, the node sends it in full at once
(two real controllers on loopback sharing the credential signing key)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gridctl.credentials import SIGNING_KEY_FILE, write_secret_file
from gridctl.node.actuator import PortRange
from gridctl.node.daemon import NodeConfig, NodeParts, build_node
from tests.node.controller_harness import ControllerHarness, running_controller, wait_until

HOST = "host-m"
Mirrored = tuple[ControllerHarness, ControllerHarness, NodeParts]


@pytest.fixture
def mirrored(tmp_path: Path) -> Iterator[Mirrored]:
    with running_controller(tmp_path / "a") as first:
        token_file = tmp_path / "node.token"
        write_secret_file(token_file, first.token(HOST) + "\n")
        (tmp_path / "b").mkdir()
        shutil.copy(tmp_path / "a" / SIGNING_KEY_FILE, tmp_path / "b" / SIGNING_KEY_FILE)
        with running_controller(tmp_path / "b") as second:
            config = NodeConfig(
                host_id=HOST,
                controller_url=f"{first.url},{second.url}",
                token_file=token_file,
                state_dir=tmp_path / "node",
                capacity_mb=4096,
                port_range=PortRange(29910, 29919),
                heartbeat_seconds=0.2,
                binary=Path("/nonexistent/llama-server"),
            )
            parts = build_node(config, instance_id="mirrors")
            parts.executor.recover()
            parts.executor.start()
            stop = threading.Event()
            loop = threading.Thread(target=parts.agent.run, args=(stop,), daemon=True)
            loop.start()
            try:
                yield first, second, parts
            finally:
                stop.set()
                loop.join(10)
                parts.executor.stop()
                parts.agent.close()
                parts.store.close()


def test_a_mirror_that_lost_the_inventory_gets_it_in_full_at_once(mirrored: Mirrored) -> None:
    first, second, parts = mirrored
    assert second.service is not None
    wait_until(lambda: any("allocator" not in hb for hb in second.heartbeats), 60, "a lease")
    registry = second.service.registry
    with registry._lock:  # the standby's copy is lost (as after its own restart of state)
        registry._hosts[HOST] = replace(registry._hosts[HOST], inventory_digest="lost")
    with second.lock:
        seen = len(second.heartbeats)

    def after_loss() -> list[dict[str, Any]]:
        with second.lock:
            return list(second.heartbeats[seen:])

    wait_until(lambda: any("allocator" in hb for hb in after_loss()), 60, "the full inventory")
    kinds = ["full" if "allocator" in hb else "lease" for hb in after_loss()]
    # the lease the standby answered with "send full" is followed at once by the full one
    # (one lease may have been in flight as the copy was lost, and was answered before)
    assert kinds.index("full") <= 2, kinds
    record = wait_until(
        lambda: (r := registry.host(HOST)) is not None and r.inventory_digest != "lost" and r,
        60,
        "the standby's copy",
    )
    assert record.residencies == () and record.inventory_digest is not None
    # authority was never asked: it holds what the node's leases name
    assert first.service is not None
    authority = first.service.registry
    wait_until(
        lambda: (r := authority.host(HOST)) and r.inventory_digest == parts.agent.inventory.digest,
        60,
        "authority's copy",
    )
