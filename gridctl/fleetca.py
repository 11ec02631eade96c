"""The fleet's private certificate authority, kept in the controller's state directory.

Off loopback every gridctl connection is TLS from this CA: the controller's
serving certificate, each node's engine serving certificate (signed from a CSR
for exactly the node's advertised addresses), and the trust bundle that nodes,
the router and the operator's CLI verify against. Everything is made with
``cryptography``; nothing shells out to openssl.

Layout under ``<state>/pki/`` (directories 0700, keys 0600)::

    ca.pem / ca.key              the current CA (ECDSA P-256, 10 years)
    previous-ca.pem              the CA before the last rotation, trusted during the overlap
    cross.pem                    the current CA cross-signed by the previous one
    trust.pem                    every CA a client should trust now (current, then previous)
    server.pem / server.key      the controller's serving certificate and its chain
    rotation.json                when the overlap of the last rotation ends

Rotation keeps the fleet serving: the new CA signs the controller's certificate,
which is served with the cross-signed CA, so a node that still pins only the
previous CA verifies it; nodes fetch the new trust bundle and a new engine
certificate when they see the bundle digest change; the previous CA stays in the
bundle (and so keeps verifying engine certificates it signed) until the overlap
ends.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gridctl.credentials import read_secret_file, write_secret_file
from gridctl.errors import PermanentError

PKI_DIR = "pki"
CA_YEARS = 10
LEAF_DAYS = 90
DEFAULT_OVERLAP_SECONDS = 7 * 24 * 3600
MAX_CSR_BYTES = 16 * 1024
# A node's engine certificate serves its engine and, for a split model, is also the
# client identity a coordinator host presents to a stage host's RPC tunnel (mutual TLS).
ENGINE_USAGES = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
ENGINE_NAME_PREFIX = "gridctl engine "  # an engine certificate's CN: this, then the host id


class PkiError(PermanentError):
    """The CA is missing, unreadable, or refuses to sign what it was given."""


def fingerprint(cert: x509.Certificate) -> str:
    """``sha256:<hex>`` of the certificate's DER bytes (what a join bundle pins)."""
    return "sha256:" + cert.fingerprint(hashes.SHA256()).hex()


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")


def load_certificates(text: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(text.encode("ascii"))
    except ValueError as exc:
        raise PkiError(f"not a PEM certificate bundle: {exc}") from None


def bundle_digest(bundle_pem: str) -> str:
    """A stable digest of a trust bundle, compared by nodes to notice a rotation."""
    certs = load_certificates(bundle_pem)
    joined = ",".join(fingerprint(c) for c in certs)
    return "sha256:" + hashlib.sha256(joined.encode("ascii")).hexdigest()


def _utc(now: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(now, tz=dt.UTC)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gridctl fleet"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64]),
        ]
    )


def san_entries(addresses: Iterable[str]) -> list[x509.GeneralName]:
    """Subject alternative names: IP addresses as IPAddress, anything else as DNS."""
    names: list[x509.GeneralName] = []
    seen: set[str] = set()
    for raw in addresses:
        text = raw.strip().strip("[]")
        if not text or text in seen:
            continue
        seen.add(text)
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(text)))
        except ValueError:
            names.append(x509.DNSName(text))
    return names


def _ca_certificate(
    subject_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    now: float,
) -> x509.Certificate:
    start = _utc(now) - dt.timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=365 * CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(subject_key.public_key()), critical=False
        )
        .sign(issuer_key, hashes.SHA256())
    )


def new_private_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def build_csr(key: ec.EllipticCurvePrivateKey, common_name: str, addresses: Sequence[str]) -> str:
    """A CSR for a serving certificate naming ``addresses`` (what a joining node sends)."""
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(common_name))
        .add_extension(x509.SubjectAlternativeName(san_entries(addresses)), critical=False)
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM).decode("ascii")


@dataclass(frozen=True)
class Rotation:
    rotated_at: float
    overlap_ends_at: float


class FleetCA:
    """The CA files in one controller state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir) / PKI_DIR

    # --- files ----------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return self.dir / name

    def exists(self) -> bool:
        return self._path("ca.pem").is_file() and self._path("ca.key").is_file()

    def _write_public(self, name: str, text: str) -> None:
        path = self._path(name)
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text, encoding="ascii")
        tmp.chmod(0o644)
        os.replace(tmp, path)

    def _ensure_dir(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)

    def certificate(self) -> x509.Certificate:
        if not self.exists():
            raise PkiError(f"no fleet CA in {self.dir} (run `gridctl ca init --state ...`)")
        return load_certificates(self._path("ca.pem").read_text(encoding="ascii"))[0]

    def _key(self) -> ec.EllipticCurvePrivateKey:
        text = read_secret_file(self._path("ca.key"))
        key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise PkiError(f"{self._path('ca.key')} is not an EC private key")
        return key

    def previous(self) -> x509.Certificate | None:
        path = self._path("previous-ca.pem")
        if not path.is_file():
            return None
        return load_certificates(path.read_text(encoding="ascii"))[0]

    def rotation(self) -> Rotation | None:
        try:
            data = json.loads(self._path("rotation.json").read_text(encoding="utf-8"))
            return Rotation(float(data["rotated_at"]), float(data["overlap_ends_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # --- lifecycle ------------------------------------------------------------------

    def init(self, *, now: float, common_name: str = "gridctl fleet CA") -> bool:
        """Create the CA if there is none; returns whether one was created."""
        if self.exists():
            return False
        self._ensure_dir()
        key = new_private_key()
        name = _name(common_name)
        cert = _ca_certificate(key, name, key, name, now)
        write_secret_file(self._path("ca.key"), key_pem(key))
        self._write_public("ca.pem", pem(cert))
        self._write_public("trust.pem", pem(cert))
        return True

    def rotate(self, *, now: float, overlap_seconds: float = DEFAULT_OVERLAP_SECONDS) -> Rotation:
        """Make a new CA; the old one stays trusted until the overlap ends."""
        old_cert, old_key = self.certificate(), self._key()
        key = new_private_key()
        name = _name(f"gridctl fleet CA {_utc(now).strftime('%Y%m%dT%H%M%SZ')}")
        cert = _ca_certificate(key, name, key, name, now)
        cross = _ca_certificate(key, name, old_key, old_cert.subject, now)
        self._write_public("previous-ca.pem", pem(old_cert))
        self._write_public("cross.pem", pem(cross))
        write_secret_file(self._path("ca.key"), key_pem(key))
        self._write_public("ca.pem", pem(cert))
        self._write_public("trust.pem", pem(cert) + pem(old_cert))
        rotation = Rotation(now, now + overlap_seconds)
        self._write_public(
            "rotation.json",
            json.dumps({"rotated_at": now, "overlap_ends_at": rotation.overlap_ends_at}),
        )
        self._path("server.pem").unlink(missing_ok=True)  # re-issued from the new CA
        return rotation

    def expire_overlap(self, *, now: float) -> bool:
        """Drop the previous CA once its overlap has ended; returns whether it did."""
        rotation = self.rotation()
        if rotation is None or now < rotation.overlap_ends_at:
            return False
        self._write_public("trust.pem", pem(self.certificate()))
        for name in ("previous-ca.pem", "cross.pem", "rotation.json"):
            self._path(name).unlink(missing_ok=True)
        return True

    def trust_bundle(self, *, now: float | None = None) -> str:
        if now is not None:
            self.expire_overlap(now=now)
        path = self._path("trust.pem")
        if not path.is_file():
            return pem(self.certificate())
        return path.read_text(encoding="ascii")

    def trust_bundle_path(self) -> Path:
        return self._path("trust.pem")

    # --- signing --------------------------------------------------------------------

    def _leaf(
        self,
        public_key: ec.EllipticCurvePublicKey,
        common_name: str,
        addresses: Sequence[str],
        *,
        now: float,
        days: int,
        usages: Sequence[x509.ObjectIdentifier],
    ) -> x509.Certificate:
        ca_cert, ca_key = self.certificate(), self._key()
        start = _utc(now) - dt.timedelta(minutes=5)
        sans = san_entries(addresses)
        if not sans:
            raise PkiError("a serving certificate needs at least one address")
        return (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(ca_cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )

    def chain_pem(self) -> str:
        """What a serving certificate is sent with: the cross-signed CA during an overlap."""
        cross = self._path("cross.pem")
        return cross.read_text(encoding="ascii") if cross.is_file() else ""

    def sign_csr(
        self,
        csr_pem: str,
        allowed_addresses: Sequence[str],
        *,
        now: float,
        days: int = LEAF_DAYS,
        host_id: str | None = None,
    ) -> str:
        """Sign a node's CSR for exactly ``allowed_addresses``; returns leaf + chain PEM.

        The CSR's own names are checked, not trusted: it must ask for nothing but
        the advertised addresses, and the certificate names exactly those. With
        ``host_id`` the common name is the CA's ``gridctl engine <host_id>``, not the
        one the CSR asked for, so a peer can rely on it as the host's identity.
        """
        if len(csr_pem) > MAX_CSR_BYTES:
            raise PkiError("certificate request is too large")
        try:
            csr = x509.load_pem_x509_csr(csr_pem.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as exc:
            raise PkiError(f"not a PEM certificate request: {exc}") from None
        if not csr.is_signature_valid:
            raise PkiError("certificate request signature is not valid")
        public = csr.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise PkiError("certificate request must carry an EC public key")
        try:
            asked = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            asked_names = {str(n.value) for n in asked}
        except x509.ExtensionNotFound:
            asked_names = set()
        allowed = {str(n.value) for n in san_entries(allowed_addresses)}
        extra = sorted(asked_names - allowed)
        if extra:
            raise PkiError(
                f"certificate request names {', '.join(extra)}, which this node does not "
                f"advertise ({', '.join(sorted(allowed))})"
            )
        cn = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        common_name = str(cn[0].value) if cn else "gridctl engine"
        if host_id is not None:
            common_name = ENGINE_NAME_PREFIX + host_id
        leaf = self._leaf(
            public,
            common_name,
            allowed_addresses,
            now=now,
            days=days,
            usages=ENGINE_USAGES,
        )
        return pem(leaf) + self.chain_pem()

    def server_credentials(self, addresses: Sequence[str], *, now: float) -> tuple[Path, Path]:
        """The controller's serving certificate (chain) and key files, re-issued when needed.

        Re-issued when missing, when it expires within a third of its life, when
        the CA changed, or when it does not name every address asked for.
        """
        self._ensure_dir()
        cert_path, key_path = self._path("server.pem"), self._path("server.key")
        wanted = {str(n.value) for n in san_entries(addresses)}
        if cert_path.is_file() and key_path.is_file():
            try:
                leaf = load_certificates(cert_path.read_text(encoding="ascii"))[0]
                names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                have = {str(n.value) for n in names.value}
                life = leaf.not_valid_after_utc - leaf.not_valid_before_utc
                fresh = leaf.not_valid_after_utc - _utc(now) > life / 3
                same_ca = leaf.issuer == self.certificate().subject
                if wanted <= have and fresh and same_ca:
                    return cert_path, key_path
            except (PkiError, x509.ExtensionNotFound, IndexError):
                pass
        key = new_private_key()
        leaf = self._leaf(
            key.public_key(),
            "gridctl controller",
            sorted(wanted),
            now=now,
            days=LEAF_DAYS,
            usages=(ExtendedKeyUsageOID.SERVER_AUTH,),
        )
        write_secret_file(key_path, key_pem(key))
        self._write_public("server.pem", pem(leaf) + self.chain_pem())
        return cert_path, key_path

    def describe(self, *, now: float) -> dict[str, object]:
        cert = self.certificate()
        previous = self.previous()
        rotation = self.rotation()
        return {
            "directory": str(self.dir),
            "subject": cert.subject.rfc4514_string(),
            "fingerprint": fingerprint(cert),
            "not_after": cert.not_valid_after_utc.isoformat(timespec="seconds"),
            "previous": None
            if previous is None
            else {
                "subject": previous.subject.rfc4514_string(),
                "fingerprint": fingerprint(previous),
            },
            "overlap_ends_at": None if rotation is None else rotation.overlap_ends_at,
            "trust_bundle_digest": bundle_digest(self.trust_bundle()),
        }


def certificate_names(cert_pem: str) -> list[str]:
    """The SAN values of the first certificate in ``cert_pem``."""
    cert = load_certificates(cert_pem)[0]
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n.value) for n in sans]


def seconds_left(cert_pem: str, *, now: float) -> float:
    cert = load_certificates(cert_pem)[0]
    return (cert.not_valid_after_utc - _utc(now)).total_seconds()


def engine_host_id(cert: x509.Certificate) -> str | None:
    """The host id an engine certificate names (``CN=gridctl engine <host id>``), or None."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        return None
    text = str(names[0].value)
    if not text.startswith(ENGINE_NAME_PREFIX):
        return None
    host_id = text.removeprefix(ENGINE_NAME_PREFIX)
    return host_id if host_id.strip() == host_id and host_id else None
