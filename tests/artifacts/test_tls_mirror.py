"""A peer mirror over HTTPS with a fleet-CA certificate, verified by the fetching node."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from gridctl.artifacts.fetching import RetryPolicy
from gridctl.fleetca import FleetCA
from gridctl.node.artifacts import ArtifactCache, ArtifactError
from gridctl.node.mirroring import PeerMirror
from gridctl.node.statestore import NodeStateStore

NOW = 1_700_000_000.0
DATA = b"GGUF" + bytes(range(256)) * 4096


def test_an_https_peer_verified_by_the_fleet_ca(tmp_path: Path) -> None:
    ca = FleetCA(tmp_path / "ca")
    ca.init(now=time.time())
    cert, key = ca.server_credentials(["127.0.0.1"], now=time.time())
    sha = hashlib.sha256(DATA).hexdigest()
    objects = tmp_path / "peer" / "objects"
    objects.mkdir(parents=True)
    (objects / f"{sha}.gguf").write_bytes(DATA)
    mirror = PeerMirror(objects, "127.0.0.1:0", cert_file=cert, key_file=key)
    url = mirror.start()
    try:
        assert url.startswith("https://127.0.0.1:")
        origin = "https://127.0.0.1:9/nothing.gguf"  # never reached: the peer has it
        fast = RetryPolicy(attempts=1)
        trusting = ArtifactCache(
            tmp_path / "a", NodeStateStore(tmp_path / "a.sqlite3"),
            retry=fast, peer_ca_file=ca.trust_bundle_path(),
        )  # fmt: skip
        got = trusting.acquire(
            "m", sha256=sha, source=origin, size_ceiling_mb=4, now=NOW, mirrors=(url,)
        )
        assert got.fetched and Path(got.entry.path).read_bytes() == DATA
        stranger = ArtifactCache(tmp_path / "b", NodeStateStore(tmp_path / "b.sqlite3"), retry=fast)
        with pytest.raises(ArtifactError) as info:  # without the fleet CA the peer is refused
            stranger.acquire("m", sha256=sha, source=origin, size_ceiling_mb=4, now=NOW,
                             mirrors=(url,))  # fmt: skip
        assert "peers tried first" in str(info.value) and "CERTIFICATE_VERIFY_FAILED" in str(
            info.value
        )
    finally:
        mirror.stop()
