"""Host-scoped node credentials and the operator capability.

Two secrets guard the controller, and they must never be confused:

* the **operator capability** — a random string in an owner-only file beside the
  controller state; it authorises administrative routes (``X-Grid-Allocator-Token``
  or ``Authorization: Bearer``) and is never copied to a worker;
* a **node credential** — an expiring token bound to exactly one stable host id,
  signed with the controller's Ed25519 key. A node presents it in
  ``X-Grid-Allocator-Node-Token``; the controller calls
  :func:`verify_node_credential`, which returns the host id the token speaks for
  and raises if it is forged, expired or used for another host.

Secrets travel only through files created with mode 0600 (never argv, environment
or logs); the functions here never put a secret into an exception message.

Errors (all :class:`gridctl.errors.PermanentError`)::

    CredentialError          401: malformed, forged, unknown key or expired
    ├── CredentialExpired    401: the signature is good but ``exp`` has passed
    └── CredentialForbidden  403: a valid credential used for another host
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from gridctl.errors import PermanentError

TOKEN_PREFIX = "gridctl-node-v1"
SIGNING_KEY_FILE = "node-credential-signing.pem"
PREVIOUS_SIGNING_KEY_FILE = "node-credential-signing.previous.pem"
OPERATOR_CAPABILITY_FILE = "operator.token"
NODE_TOKEN_HEADER = "X-Grid-Allocator-Node-Token"
OPERATOR_TOKEN_HEADER = "X-Grid-Allocator-Token"
DEFAULT_TTL_SECONDS = 30 * 24 * 3600
MAX_TOKEN_CHARS = 4096


class CredentialError(PermanentError):
    """The credential is not acceptable at all (HTTP 401)."""

    http_status = 401


class CredentialExpired(CredentialError):
    """A correctly signed credential whose expiry has passed (HTTP 401)."""


class CredentialForbidden(CredentialError):
    """A valid credential presented for a host it was not issued to (HTTP 403)."""

    http_status = 403


# --- owner-only files -----------------------------------------------------------------


def write_secret_file(path: Path, text: str) -> None:
    """Atomically write ``text`` to ``path`` with mode 0600 from the first byte.

    Missing parent directories are created 0700. The temporary file is created
    with ``O_EXCL | O_NOFOLLOW`` and mode 0600, so the secret is never readable
    by others, not even briefly, and never written through a planted symlink;
    ``os.replace`` publishes it (replacing a symlink at ``path``, not its target).
    """
    path = Path(path)
    _make_private_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _make_private_dirs(directory: Path) -> None:
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for created in reversed(missing):
        created.mkdir(mode=0o700, exist_ok=True)


def read_secret_file(path: Path) -> str:
    """Read a secret file: a regular file, not a symlink, owned by us, mode 0600 or stricter."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise CredentialError(f"secret file not found: {path}") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CredentialError(
                f"secret file {path} is a symlink; refusing to follow it"
            ) from None
        raise CredentialError(f"cannot read secret file {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise CredentialError(f"secret file {path} is not a regular file")
    with os.fdopen(fd, "r", encoding="utf-8") as handle:
        if os.name == "posix" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialError(
                f"secret file {path} is accessible by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it"
            )
        if os.name == "posix" and st.st_uid != os.geteuid():
            raise CredentialError(
                f"secret file {path} belongs to uid {st.st_uid}, not to this user "
                f"(uid {os.geteuid()})"
            )
        try:
            return handle.read().strip()
        except UnicodeDecodeError:
            raise CredentialError(f"secret file {path} is not text") from None


# --- signing key ----------------------------------------------------------------------


def load_or_create_signing_key(state_dir: Path) -> Ed25519PrivateKey:
    """The controller's Ed25519 key for node credentials, created on first use."""
    path = Path(state_dir) / SIGNING_KEY_FILE
    if path.exists():
        pem = read_secret_file(path).encode("ascii")
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise CredentialError(f"{path} is not an Ed25519 private key")
        return key
    key = Ed25519PrivateKey.generate()
    pem_text = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    write_secret_file(path, pem_text)
    return key


def rotate_signing_key(state_dir: Path) -> Ed25519PrivateKey:
    """Make a new signing key; the old one is kept to verify what it signed until it expires."""
    path = Path(state_dir) / SIGNING_KEY_FILE
    if path.exists():
        os.replace(path, Path(state_dir) / PREVIOUS_SIGNING_KEY_FILE)
    return load_or_create_signing_key(state_dir)


def verification_keys(state_dir: Path) -> dict[str, Ed25519PublicKey]:
    """Every key whose signatures are still accepted, by key id (current and previous)."""
    keys = {key_id(k): k.public_key() for k in [load_or_create_signing_key(state_dir)]}
    previous = Path(state_dir) / PREVIOUS_SIGNING_KEY_FILE
    if previous.exists():
        loaded = serialization.load_pem_private_key(
            read_secret_file(previous).encode("ascii"), password=None
        )
        if isinstance(loaded, Ed25519PrivateKey):
            keys.setdefault(key_id(loaded), loaded.public_key())
    return keys


def credential_claims_unverified(token: str) -> dict[str, object]:
    """The claims a token states, unverified: for its holder's own bookkeeping
    (when to renew) and to pick the key to verify with — never for a decision."""
    parts = token.strip().split(".")
    if len(parts) != 3 or len(token) > MAX_TOKEN_CHARS:
        return {}
    try:
        claims = json.loads(_unb64(parts[1]))
    except (binascii.Error, ValueError, UnicodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def token_key_id(token: str) -> str | None:
    """The ``kid`` a token claims (unverified; only to pick the key to verify with)."""
    kid = credential_claims_unverified(token).get("kid")
    return kid if isinstance(kid, str) else None


def key_id(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """A short public fingerprint naming the signing key inside tokens."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


# --- node credentials -----------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_node_credential(
    key: Ed25519PrivateKey,
    host_id: str,
    *,
    now: float,
    ttl_seconds: float = DEFAULT_TTL_SECONDS,
    addresses: Sequence[str] = (),
) -> str:
    """Sign a credential that authorises exactly ``host_id`` until ``now + ttl_seconds``.

    ``addresses`` (claim ``adv``) are the addresses the host may advertise engine
    endpoints on; a credential without them may advertise loopback engines only.
    """
    if not host_id or len(host_id) > 128:
        raise CredentialError("host id must be 1-128 characters")
    if ttl_seconds <= 0:
        raise CredentialError("credential lifetime must be positive")
    payload: dict[str, object] = {
        "host_id": host_id,
        "iat": int(now),
        "exp": int(now + ttl_seconds),
        "kid": key_id(key),
        "jti": secrets.token_hex(8),
    }
    if addresses:
        payload["adv"] = sorted({a.strip("[]") for a in addresses})
    body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    signed = f"{TOKEN_PREFIX}.{body}".encode("ascii")
    return f"{TOKEN_PREFIX}.{body}.{_b64(key.sign(signed))}"


def credential_claims(
    token: str, key: Ed25519PrivateKey | Ed25519PublicKey, *, now: float
) -> dict[str, object]:
    """The verified claims of ``token``; raises :class:`CredentialError` otherwise."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise CredentialError("missing or oversized node credential")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise CredentialError("malformed node credential")
    try:
        signature = _unb64(parts[2])
        public.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
        claims = json.loads(_unb64(parts[1]))
    except (InvalidSignature, binascii.Error, ValueError, UnicodeError) as exc:
        raise CredentialError("node credential signature is not valid") from exc
    if not isinstance(claims, dict):
        raise CredentialError("malformed node credential")
    host_id, exp = claims.get("host_id"), claims.get("exp")
    if not isinstance(host_id, str) or not isinstance(exp, int) or isinstance(exp, bool):
        raise CredentialError("malformed node credential")
    if claims.get("kid") != key_id(public):
        raise CredentialError("node credential signed by another key")
    if now >= exp:
        raise CredentialExpired(f"node credential for {host_id} expired")
    return claims


def verify_node_credential(
    token: str,
    key: Ed25519PrivateKey | Ed25519PublicKey,
    *,
    now: float,
    expected_host_id: str | None = None,
) -> str:
    """Return the host id ``token`` is bound to, or raise.

    ``expected_host_id`` is the host the request speaks for (the path's node id or
    the body's ``host_id``); a valid token for another host raises
    :class:`CredentialForbidden` (HTTP 403).
    """
    claims = credential_claims(token, key, now=now)
    host_id = str(claims["host_id"])
    if expected_host_id is not None and not hmac.compare_digest(
        host_id.encode("utf-8"), expected_host_id.encode("utf-8")
    ):
        raise CredentialForbidden(f"credential for host {host_id} used for {expected_host_id}")
    return host_id


def read_node_credential(path: Path) -> str:
    """The node credential stored at ``path`` (an owner-only file)."""
    token = read_secret_file(path)
    if not token.startswith(TOKEN_PREFIX + "."):
        raise CredentialError(f"{path} does not hold a gridctl node credential")
    return token


def new_host_id() -> str:
    """A fresh stable host id for provisioning when the operator did not pick one."""
    return f"host-{secrets.token_hex(6)}"


# --- operator capability --------------------------------------------------------------


def ensure_operator_capability(path: Path) -> str:
    """Read the operator capability at ``path``, creating a random one on first use."""
    path = Path(path)
    if path.exists():
        return read_operator_capability(path)
    capability = secrets.token_urlsafe(32)
    write_secret_file(path, capability + "\n")
    return capability


def rotate_operator_capability(path: Path) -> None:
    """Replace the operator capability; a running controller picks it up by mtime."""
    write_secret_file(Path(path), secrets.token_urlsafe(32) + "\n")


def read_operator_capability(path: Path) -> str:
    capability = read_secret_file(Path(path))
    if len(capability) < 16:
        raise CredentialError(f"{path} does not hold an operator capability")
    return capability


def operator_capability_matches(presented: str | None, expected: str) -> bool:
    """Constant-time comparison of a presented capability with the real one."""
    if not presented:
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8"), expected.encode("utf-8"))


def presented_operator_capability(headers: dict[str, str] | object) -> str | None:
    """The capability a request presents: ``X-Grid-Allocator-Token`` or a Bearer header.

    ``headers`` is any mapping with case-insensitive ``get`` (Starlette's ``Headers``).
    """
    get = getattr(headers, "get", None)
    if get is None:
        return None
    direct = get(OPERATOR_TOKEN_HEADER) or get(OPERATOR_TOKEN_HEADER.lower())
    if direct:
        return str(direct)
    auth = get("Authorization") or get("authorization")
    if auth and str(auth).lower().startswith("bearer "):
        return str(auth)[7:].strip()
    return None
