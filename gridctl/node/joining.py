"""A machine joins the fleet, and keeps its identity fresh (node side).

``gridctl join-token create`` gives an operator a bundle: the controller's URL,
the SHA-256 fingerprint of the CA that signs the controller's certificate, and
a one-time bootstrap secret. ``join`` then:

1. fetches the controller's trust bundle from ``GET /pki/ca`` and accepts it
   only if it holds a CA with the pinned fingerprint — nothing else about that
   first, unverified connection is trusted;
2. verifies the controller's TLS certificate against exactly that CA and posts
   the bootstrap secret with a CSR for an engine key it made itself (the private
   key never leaves the machine);
3. stores what it got, owner-only, in ``<state>/identity/``: the host-scoped
   credential, the engine certificate and key, the trust bundle and
   ``identity.json`` (host id, controller URL, advertised addresses).

``NodeIdentity.renew`` exchanges the current credential for a new one (and a
new engine certificate and trust bundle) well before expiry or when the
controller's trust bundle changed after a CA rotation.
"""

from __future__ import annotations

import json
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gridctl.credentials import (
    NODE_TOKEN_HEADER,
    credential_claims_unverified,
    read_secret_file,
    write_secret_file,
)
from gridctl.errors import PermanentError, TransientError
from gridctl.fleetca import build_csr, fingerprint, key_pem, load_certificates, new_private_key
from gridctl.transport import require_safe_url

IDENTITY_DIR = "identity"
BUNDLE_KIND = "gridctl/join-bundle-v1"
RENEW_AT_FRACTION = 0.5  # renew once half of the credential's life has passed


class JoinError(PermanentError):
    """Joining cannot go on (wrong CA, used or expired secret, refused request)."""


@dataclass(frozen=True)
class JoinBundle:
    controller: str
    ca_sha256: str
    bootstrap_secret: str
    host_id: str | None
    path: Path


def read_join_bundle(path: Path) -> JoinBundle:
    """A join bundle file (owner-only, written by ``gridctl join-token create``)."""
    try:
        data = json.loads(read_secret_file(path))
    except ValueError as exc:
        raise JoinError(f"{path}: not a join bundle ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND:
        raise JoinError(f"{path}: not a gridctl join bundle (kind {BUNDLE_KIND!r} expected)")
    for name in ("controller", "ca_sha256", "bootstrap_secret"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise JoinError(f"{path}: field {name!r} is missing")
    host_id = data.get("host_id")
    if not str(data["controller"]).startswith("https://"):
        raise JoinError(f"{path}: the controller URL must be https://")
    return JoinBundle(
        controller=str(data["controller"]).rstrip("/"),
        ca_sha256=str(data["ca_sha256"]),
        bootstrap_secret=str(data["bootstrap_secret"]),
        host_id=host_id if isinstance(host_id, str) and host_id else None,
        path=Path(path),
    )


def _verifying(cadata: str) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=cadata)


def fetch_pinned_ca(controller: str, pin: str, *, transport: Any = None) -> str:
    """The PEM of the pinned CA, taken from the controller's bundle only if it matches."""
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    try:
        with httpx.Client(verify=unverified, timeout=15.0, transport=transport) as client:
            response = client.get(f"{controller}/pki/ca")
    except httpx.HTTPError as exc:
        raise TransientError(f"cannot reach the controller at {controller}: {exc}", 2.0) from exc
    if response.status_code != 200:
        raise JoinError(f"{controller}/pki/ca answered HTTP {response.status_code}")
    try:
        certificates = load_certificates(response.text)
    except PermanentError as exc:
        raise JoinError(f"{controller}/pki/ca: {exc}") from None
    for cert in certificates:
        if fingerprint(cert) == pin:
            return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    seen = ", ".join(fingerprint(c) for c in certificates) or "none"
    raise JoinError(
        f"the controller at {controller} presents CA {seen}, not the pinned {pin}; "
        "refusing to join (is this the right controller?)"
    )


class NodeIdentity:
    """The joined identity files in one node state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir) / IDENTITY_DIR

    @property
    def token_file(self) -> Path:
        return self.dir / "node.token"

    @property
    def cert_file(self) -> Path:
        return self.dir / "engine.pem"

    @property
    def key_file(self) -> Path:
        return self.dir / "engine.key"

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def record_file(self) -> Path:
        return self.dir / "identity.json"

    def exists(self) -> bool:
        return self.record_file.is_file() and self.token_file.is_file()

    def record(self) -> dict[str, Any]:
        try:
            data = json.loads(self.record_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise JoinError(f"{self.record_file}: unreadable identity ({exc})") from None
        if not isinstance(data, dict):
            raise JoinError(f"{self.record_file}: unreadable identity")
        return data

    def trust_context(self) -> ssl.SSLContext:
        return _verifying(self.ca_file.read_text(encoding="ascii"))

    def _private_key(self) -> ec.EllipticCurvePrivateKey:
        if self.key_file.is_file():
            loaded = serialization.load_pem_private_key(
                read_secret_file(self.key_file).encode("ascii"), password=None
            )
            if isinstance(loaded, ec.EllipticCurvePrivateKey):
                return loaded
        key = new_private_key()
        write_secret_file(self.key_file, key_pem(key))
        return key

    def _store(self, answer: dict[str, Any], record: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        for name in ("credential", "trust_bundle", "host_id"):
            if not isinstance(answer.get(name), str):
                raise JoinError(f"the controller's answer lacks {name!r}")
        bundle = str(answer["trust_bundle"])
        load_certificates(bundle)  # refuse garbage before replacing anything
        write_secret_file(self.ca_file, bundle)
        if isinstance(answer.get("engine_certificate"), str):
            write_secret_file(self.cert_file, str(answer["engine_certificate"]))
        write_secret_file(self.token_file, str(answer["credential"]) + "\n")
        record.update(
            host_id=answer["host_id"],
            credential_issued_at=answer.get("credential_issued_at"),
            credential_expires_at=answer.get("credential_expires_at"),
            trust_bundle_digest=answer.get("trust_bundle_digest"),
        )
        tmp = self.record_file.with_name(".identity.json.tmp")
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
        tmp.chmod(0o600)
        os.replace(tmp, self.record_file)

    # --- joining and renewing ---------------------------------------------------------

    def join(
        self,
        bundle: JoinBundle,
        advertise: list[str],
        *,
        host_id: str | None = None,
        transport: Any = None,
    ) -> str:
        """Join with ``bundle``; returns the host id now stored."""
        if bundle.host_id and host_id and bundle.host_id != host_id:
            raise JoinError(
                f"{bundle.path} was made for host {bundle.host_id}, not --host-id {host_id}"
            )
        wanted = bundle.host_id or host_id
        ca_pem = fetch_pinned_ca(bundle.controller, bundle.ca_sha256, transport=transport)
        key = self._private_key()
        csr = build_csr(key, f"gridctl engine {wanted or 'new host'}", advertise)
        body = {
            "bootstrap_secret": bundle.bootstrap_secret,
            "host_id": wanted,
            "advertise": advertise,
            "csr": csr,
        }
        try:
            with httpx.Client(
                verify=_verifying(ca_pem), timeout=30.0, transport=transport
            ) as client:
                response = client.post(f"{bundle.controller}/join", json=body)
        except httpx.HTTPError as exc:
            raise TransientError(f"join request failed: {type(exc).__name__}: {exc}", 2.0) from exc
        if response.status_code != 200:
            raise JoinError(f"join refused: {_message(response)}")
        answer = response.json()
        record = {"controller": bundle.controller, "advertise": advertise}
        self._store(answer, record)
        return str(answer["host_id"])

    def needs_renewal(self, *, now: float, bundle_digest: str | None = None) -> bool:
        record = self.record()
        if bundle_digest and bundle_digest != record.get("trust_bundle_digest"):
            return True
        issued, expires = record.get("credential_issued_at"), record.get("credential_expires_at")
        if not isinstance(issued, int | float) or not isinstance(expires, int | float):
            claims = credential_claims_unverified(read_secret_file(self.token_file))
            issued, expires = claims.get("iat"), claims.get("exp")
            if not isinstance(issued, int | float) or not isinstance(expires, int | float):
                return False
        return now >= issued + (expires - issued) * RENEW_AT_FRACTION

    def renew(self, client: httpx.Client, controller: str) -> dict[str, Any]:
        """Exchange the current credential for a fresh one (and a fresh engine certificate)."""
        record = self.record()
        require_safe_url(controller, "a node credential")
        host_id = str(record["host_id"])
        token = read_secret_file(self.token_file)
        body: dict[str, Any] = {}
        if record.get("advertise"):
            body["csr"] = build_csr(
                self._private_key(), f"gridctl engine {host_id}", list(record["advertise"])
            )
        try:
            response = client.post(
                f"{controller}/nodes/{host_id}/renew",
                json=body,
                headers={NODE_TOKEN_HEADER: token},
            )
        except httpx.HTTPError as exc:
            raise TransientError(f"renewal failed: {type(exc).__name__}", 2.0) from exc
        if response.status_code != 200:
            raise JoinError(f"renewal refused: {_message(response)}")
        answer: dict[str, Any] = response.json()
        self._store(answer, record)
        return answer


def _message(response: httpx.Response) -> str:
    try:
        detail = response.json().get("error", {}).get("message")
    except (ValueError, AttributeError):
        detail = None
    return f"HTTP {response.status_code}: {detail or response.text[:200]}"
