"""Fleet certificates for split-stage tests: a real fleet CA, engine certificates per host.

``fleet_identity(ca, tmp, "coord", ["127.0.0.1"])`` issues the engine certificate a
node gets when it joins (CSR signed by ``FleetCA.sign_csr`` with the host id) and
writes it, its key and the trust bundle to files, as ``TlsIdentity`` wants them.
"""

from __future__ import annotations

import time
from pathlib import Path

from gridctl.fleetca import FleetCA, build_csr, key_pem, new_private_key
from gridctl.node.rpctunnel import TlsIdentity


def fleet_ca(directory: Path) -> FleetCA:
    ca = FleetCA(directory)
    ca.init(now=time.time())
    return ca


def fleet_identity(ca: FleetCA, directory: Path, host_id: str, addresses: list[str]) -> TlsIdentity:
    """The engine identity ``host_id`` would hold after joining the fleet of ``ca``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = new_private_key()
    csr = build_csr(key, f"gridctl engine {host_id}", addresses)
    cert = ca.sign_csr(csr, addresses, now=time.time(), host_id=host_id)
    identity = TlsIdentity(
        cert_file=directory / f"{host_id}.pem",
        key_file=directory / f"{host_id}.key",
        trust_file=directory / "trust.pem",
    )
    identity.cert_file.write_text(cert, encoding="ascii")
    identity.key_file.write_text(key_pem(key), encoding="ascii")
    identity.key_file.chmod(0o600)
    identity.trust_file.write_text(ca.trust_bundle(), encoding="ascii")
    return identity
