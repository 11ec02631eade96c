"""Engine probes verify with a context built once, and again when the trust file is
replaced (a renewal or CA rotation): the renewed trust is used from the next probe on."""

from __future__ import annotations

import time
from pathlib import Path

from gridctl.fleetca import FleetCA
from gridctl.node.runtimes.llamacpp import EngineNetwork, LlamaCppRuntime


def runtime(tmp_path: Path, network: EngineNetwork | None = None) -> LlamaCppRuntime:
    return LlamaCppRuntime(
        binary=tmp_path / "llama-server",
        key_file=tmp_path / "key",
        api_key="k",
        log_dir=tmp_path / "logs",
        network=network,
    )


def subjects(context: object) -> set[str]:
    certs = context.get_ca_certs()  # type: ignore[attr-defined]
    return {dict(x[0] for x in c["subject"])["commonName"] for c in certs}


def test_plain_probes_reuse_one_context(tmp_path: Path) -> None:
    plain = runtime(tmp_path)
    assert plain._verify_context() is plain._verify_context()


def test_tls_probes_follow_a_replaced_trust_file(tmp_path: Path) -> None:
    ca = FleetCA(tmp_path / "ca")
    ca.init(now=time.time())
    bundle = ca.trust_bundle_path()
    bundle.write_text(ca.trust_bundle(), encoding="ascii")
    network = EngineNetwork(
        advertise="127.0.0.1",
        cert_file=tmp_path / "engine.pem",
        key_file=tmp_path / "engine.key",
        ca_file=bundle,
    )
    tls = runtime(tmp_path, network)
    first = tls._verify_context()
    assert tls._verify_context() is first  # unchanged file: the same context
    assert subjects(first) == {"gridctl fleet CA"}
    ca.rotate(now=time.time() + 1)  # writes a new trust.pem (new CA and the old one)
    renewed = tls._verify_context()
    assert renewed is not first
    assert len(subjects(renewed)) == 2 and "gridctl fleet CA" in subjects(renewed)
    assert tls._verify_context() is renewed
